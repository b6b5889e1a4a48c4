use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    ArrayRef, Int8Array, Int32Array, Int64Array, RecordBatch, TimestampMillisecondArray,
};
use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use fluss::client::{FlussAdmin, FlussConnection, LogScanner};
use fluss::config::Config as ClientConfig;
use fluss::metadata::TablePath;
use fluss::record::{ChangeType as FlussChangeType, ScanRecord};
use fluss::rpc::message::OffsetSpec;
use silt_engine::{Error, RestoredState, Result, Source, SourcePoll, TaskContext};

use super::union::{self, LakePhase, LakeRows, LakeStart};
use crate::changelog::{BucketKey, ChangeType, partition_id_field, stream_system_fields};

/// Where reading starts when there is no checkpoint to restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPosition {
    Earliest,
    Latest,
    /// The first offset whose commit timestamp is at or after this (ms since the epoch).
    Timestamp(i64),
    /// Explicit next offsets per bucket (the lake's txn offsets); buckets not named start at
    /// the earliest offset (a partition's: those of partitions created since).
    Offsets(BTreeMap<BucketKey, i64>),
    /// Every row of a lake-enabled table: its lake at the version current when the source
    /// first opens, then the changelog from that version's txn offsets (a union read, see
    /// `union`). Without a lake yet, the same as `Earliest`.
    LakeThenLog(LakeStart),
}

/// Where reading stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndPosition {
    /// Never: a streaming read.
    Unbounded,
    /// Stop each bucket before this offset (e.g. high watermarks captured at a query's start);
    /// a bucket not named is not read.
    Offsets(BTreeMap<BucketKey, i64>),
    /// The high watermarks when the source opens.
    LatestAtOpen,
}

#[derive(Debug, Clone)]
pub struct FlussSourceConfig {
    pub bootstrap_servers: String,
    pub database: String,
    pub table: String,
    pub start: StartPosition,
    pub end: EndPosition,
    /// Longest a poll waits for data; bounds how long a barrier can wait behind an idle poll.
    pub poll_timeout: Duration,
    /// Column indexes to read (None: all).
    pub projection: Option<Vec<usize>>,
    /// SASL/PLAIN credentials when the endpoint requires them.
    pub credentials: Option<FlussCredentials>,
    /// A partitioned table's batches carry `__partition_id` after the system columns (the
    /// tiering job's writers need it; other readers do not ask).
    pub partition_id_column: bool,
    /// The id of the table this source reads; `None` reads whatever table has the name when it
    /// opens. A table dropped and created again under its name is another table, with other
    /// offsets: a source bound to an id refuses to open (and so to restore its offsets) on a
    /// table of another id.
    pub table_id: Option<i64>,
    /// Offsets a restored read never resumes below, asked for at every restore: a
    /// tiering job's lake offsets. Another writer may have moved the lake past the job's own
    /// checkpoint, and hot retention may then have cut the changelog up to the lake's offsets;
    /// what lies below them is in the lake already.
    pub resume_floor: Option<ResumeFloor>,
    /// Called (before the open fails) when a bucket's changelog now starts past the offset the
    /// read resumes at: the rows between expired from the hot tier unread. A tiering job uses
    /// it to stop restarting from a checkpoint no changelog holds any more.
    pub on_log_gap: Option<LogGapHook>,
    /// Longest one fetch waits on the server for rows (`None`: fluss-rs's 500 ms). silt's hot
    /// store answers a waiting fetch as soon as rows arrive; against an Apache Fluss 0.9.1
    /// tablet server the length of the wait showed in the lake's freshness (`silt bench
    /// tiering --bootstrap`, 250 ms checkpoints, 100k rows/s: p99 0.84 s at 500 ms, 0.51 s at
    /// 100 ms), so a reader of a Fluss cluster that needs its rows soon sets it shorter.
    pub fetch_wait: Option<Duration>,
}

/// See [`FlussSourceConfig::on_log_gap`]; it gets the open's error message.
#[derive(Clone)]
pub struct LogGapHook(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for LogGapHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogGapHook")
    }
}

/// Where each of the given buckets may resume at the lowest (those it does not name: anywhere);
/// see [`FlussSourceConfig::resume_floor`].
#[derive(Clone)]
pub struct ResumeFloor(
    pub  Arc<
        dyn Fn(
                Vec<BucketKey>,
            )
                -> futures::future::BoxFuture<'static, anyhow::Result<BTreeMap<BucketKey, i64>>>
            + Send
            + Sync,
    >,
);

impl std::fmt::Debug for ResumeFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResumeFloor")
    }
}

/// SASL/PLAIN credentials for a Fluss endpoint (silt's hotstore with `hotstore.sasl.enabled`,
/// or a Fluss cluster with a SASL listener). The password never appears in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct FlussCredentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for FlussCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlussCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl FlussSourceConfig {
    pub fn new(
        bootstrap_servers: impl Into<String>,
        database: impl Into<String>,
        table: impl Into<String>,
    ) -> Self {
        FlussSourceConfig {
            bootstrap_servers: bootstrap_servers.into(),
            database: database.into(),
            table: table.into(),
            start: StartPosition::Earliest,
            end: EndPosition::Unbounded,
            poll_timeout: Duration::from_millis(100),
            projection: None,
            credentials: None,
            partition_id_column: false,
            table_id: None,
            resume_floor: None,
            on_log_gap: None,
            fetch_wait: None,
        }
    }

    fn table_path(&self) -> TablePath {
        TablePath::new(self.database.clone(), self.table.clone())
    }
}

fn fluss_error(context: &str) -> impl Fn(fluss::error::Error) -> Error + '_ {
    move |e| Error::with_context(silt_engine::Cause::User, context, e)
}

/// What the error of an open that would resume past a changelog gap says (see
/// [`FlussSourceConfig::on_log_gap`]); a reader that starts at the log's start on purpose (verify)
/// looks for it to read again from the new start.
pub const LOG_GAP: &str =
    "the rows this read resumes at expired from the hot tier before it read them";

/// Whether a read failed because the log start moved past where it began (retention ran while
/// it read): the server's out-of-range answer, or the source's refusal to open below the start
/// ([`LOG_GAP`]). A reader that starts at the log's start on purpose reads again from the new
/// start; verify and the trials' oracle both ask this.
pub fn log_start_moved(error: &anyhow::Error) -> bool {
    let text = format!("{error:#}");
    text.contains("out of range") || text.contains(LOG_GAP)
}

/// Rows one scanner poll may return. fluss-rs's default (500) cuts the client's Arrow batches
/// into slices of at most 500 rows, so the engine moved and the Parquet writers took many
/// small batches; a poll still holds at most one fetch response's rows.
pub const POLL_RECORDS_MAX: usize = 8192;

/// Opens a client connection to a Fluss endpoint (silt's hotstore or a Fluss cluster).
pub async fn connect(bootstrap_servers: &str) -> Result<FlussConnection> {
    connect_with(bootstrap_servers, None).await
}

/// As [`connect`], authenticating with SASL/PLAIN when `credentials` are given.
pub async fn connect_with(
    bootstrap_servers: &str,
    credentials: Option<&FlussCredentials>,
) -> Result<FlussConnection> {
    connect_scanning(bootstrap_servers, credentials, None).await
}

/// As [`connect_with`], its scanners' fetches waiting at most `fetch_wait` for rows (see
/// [`FlussSourceConfig::fetch_wait`]).
async fn connect_scanning(
    bootstrap_servers: &str,
    credentials: Option<&FlussCredentials>,
    fetch_wait: Option<Duration>,
) -> Result<FlussConnection> {
    let mut config = ClientConfig::default();
    config.bootstrap_servers = bootstrap_servers.to_string();
    config.scanner_log_max_poll_records = POLL_RECORDS_MAX;
    if let Some(wait) = fetch_wait {
        config.scanner_log_fetch_wait_max_time_ms =
            i32::try_from(wait.as_millis()).unwrap_or(i32::MAX).max(1);
    }
    if let Some(credentials) = credentials {
        config.security_protocol = "sasl".to_string();
        config.security_sasl_mechanism = "PLAIN".to_string();
        config.security_sasl_username = credentials.username.clone();
        config.security_sasl_password = credentials.password.clone();
    }
    FlussConnection::new(config)
        .await
        .map_err(fluss_error(&format!(
            "cannot connect to fluss at {bootstrap_servers}"
        )))
}

/// The Arrow schema of a table's columns as the client reads them.
pub async fn table_arrow_schema(
    connection: &FlussConnection,
    database: &str,
    table: &str,
) -> Result<SchemaRef> {
    let path = TablePath::new(database.to_string(), table.to_string());
    let admin = connection.get_admin().map_err(fluss_error("fluss admin"))?;
    let info = admin
        .get_table_info(&path)
        .await
        .map_err(fluss_error(&format!("table {database}.{table}")))?;
    fluss::record::to_arrow_schema(info.get_row_type())
        .map_err(fluss_error(&format!("schema of {database}.{table}")))
}

/// One subtask of the Fluss source.
pub struct FlussSource {
    config: FlussSourceConfig,
    connection: Option<FlussConnection>,
    scanner: Option<LogScanner>,
    /// Next offset to emit, per owned bucket.
    next_offsets: BTreeMap<Slot, i64>,
    /// Exclusive end per owned bucket, when bounded.
    end_offsets: Option<BTreeMap<Slot, i64>>,
    /// Unbounded: the high watermarks at open of the owned buckets that were behind them. Once
    /// every one is emitted the source says [`SourcePoll::BacklogRead`], once, so the backlog
    /// is checkpointed (and a tiering job commits it) without waiting out the interval.
    backlog_end: Option<BTreeMap<Slot, i64>>,
    /// Batches polled but not yet emitted; their offsets are not in `next_offsets` yet.
    ready: VecDeque<(Slot, i64, RecordBatch)>,
    /// Next offset to queue into `ready`, per owned bucket (runs ahead of `next_offsets`).
    queued_next: BTreeMap<Slot, i64>,
    /// A partitioned table's partitions, and when to look for new ones (None: unpartitioned).
    partitions: Option<Partitions>,
    output_schema: Option<SchemaRef>,
    /// The table's columns when the source opened (None under a projection, which pins the
    /// client to that schema): batches written under an earlier schema get nulls in the
    /// columns added since, and one written under a later schema stops the source.
    user_schema: Option<(SchemaRef, i32)>,
    /// A union read's lake phase: where it is, and the rows still to emit.
    lake_phase: Option<LakePhase>,
    lake_rows: Option<LakeRows>,
    /// A log table: every row is an append (`+A`), so no change type is read per row.
    append_only: bool,
    /// Where each owned bucket's changelog started when the source opened (listed when the
    /// start was read from the earliest offsets), for the gap check.
    log_starts: BTreeMap<Slot, i64>,
}

impl FlussSource {
    pub fn new(config: FlussSourceConfig) -> Self {
        FlussSource {
            config,
            connection: None,
            scanner: None,
            next_offsets: BTreeMap::new(),
            end_offsets: None,
            backlog_end: None,
            ready: VecDeque::new(),
            queued_next: BTreeMap::new(),
            output_schema: None,
            user_schema: None,
            lake_phase: None,
            lake_rows: None,
            append_only: false,
            partitions: None,
            log_starts: BTreeMap::new(),
        }
    }

    /// True once, when every owned bucket that was behind at open has emitted up to the
    /// high watermark it had then (a bucket no longer owned counts as read).
    fn take_backlog_read(&mut self) -> bool {
        let read = self.backlog_end.as_ref().is_some_and(|end| {
            end.iter()
                .all(|(slot, e)| self.next_offsets.get(slot).is_none_or(|next| next >= e))
        });
        if read {
            self.backlog_end = None;
        }
        read
    }

    fn finished(&self) -> bool {
        match &self.end_offsets {
            None => false,
            Some(end) => self
                .next_offsets
                .iter()
                .all(|(b, next)| end.get(b).is_none_or(|e| next >= e)),
        }
    }

    /// Turns the records of one bucket into Arrow batches, one per run of rows that share the
    /// client's underlying batch: a slice of that batch plus the system columns.
    ///
    /// The work is per run, not per row. Within a run the offsets are contiguous and every row
    /// carries its batch's commit timestamp, so `__offset` is a range and `__timestamp` one
    /// value; only a primary-key changelog reads a change type per row (a log table's rows are
    /// all appends).
    fn queue_batches(&mut self, slot: Slot, records: &[ScanRecord]) -> Result<()> {
        let end = self
            .end_offsets
            .as_ref()
            .and_then(|e| e.get(&slot).copied())
            .unwrap_or(i64::MAX);
        let mut start = 0;
        while start < records.len() {
            let len = run_len(&records[start..])?;
            let run = &records[start..start + len];
            start += len;
            // Skip what was already queued (a re-fetch) and what lies past the end.
            let base = run[0].offset();
            let from = self.queued_next.get(&slot).copied().unwrap_or(0);
            let keep_from = (from - base).clamp(0, len as i64) as usize;
            let keep_to = (end - base).clamp(0, len as i64) as usize;
            if keep_from >= keep_to {
                continue;
            }
            let kept = &run[keep_from..keep_to];
            let batch = self.with_system_columns(slot, kept)?;
            let kept_base = base + keep_from as i64;
            self.queued_next.insert(slot, kept_base + kept.len() as i64);
            self.ready.push_back((slot, kept_base, batch));
        }
        Ok(())
    }

    /// `data` (a slice of a batch as it was written) with the columns of the table's schema
    /// when the source opened. Schemas only grow by nullable columns added at the end, so a
    /// batch of an earlier schema gets nulls in the columns it lacks, and a batch with more
    /// columns was written after the table gained some: the source stops rather than tier
    /// rows without them, and the job's restart reads the table under its new schema (and the
    /// lake gains the columns when its sink opens).
    fn in_user_schema(&self, data: RecordBatch) -> Result<RecordBatch> {
        let Some((user, schema_id)) = &self.user_schema else {
            return Ok(data);
        };
        let (have, want) = (data.num_columns(), user.fields().len());
        if have == want {
            return Ok(data);
        }
        if have > want {
            return Err(Error::operator(format!(
                "{}.{} gained columns after this job read its schema {schema_id} ({want} \
                 columns, a batch has {have}); the job restarts to tier them under the new schema",
                self.config.database, self.config.table
            )));
        }
        let rows = data.num_rows();
        let mut fields: Vec<_> = data.schema().fields().iter().cloned().collect();
        let mut columns = data.columns().to_vec();
        for field in &user.fields()[have..] {
            columns.push(arrow::array::new_null_array(field.data_type(), rows));
            fields.push(field.clone());
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| {
            Error::with_context(
                silt_engine::Cause::Silt,
                "a batch of an earlier schema in the current one",
                e,
            )
        })
    }

    /// Offsets of a partitioned table must name a partition's buckets: offsets of plain
    /// buckets are refused (as is a union read, whose lake read is of unpartitioned tables).
    fn refuse_bucket_offsets_of_partitioned(&self, name: &str, keys: &[String]) -> Result<()> {
        let unpartitioned =
            |offsets: &BTreeMap<BucketKey, i64>| offsets.keys().any(|k| k.partition.is_none());
        let what = match (&self.config.start, &self.config.end) {
            (StartPosition::Offsets(o), _) if unpartitioned(o) => "start offsets per bucket",
            (StartPosition::LakeThenLog(_), _) => "start: lake",
            (_, EndPosition::Offsets(o)) if unpartitioned(o) => "end offsets per bucket",
            _ => return Ok(()),
        };
        Err(Error::operator(format!(
            "{name} is partitioned (by {}): {what} cannot name a partition's buckets; start at \
             earliest, latest or a timestamp",
            keys.join(", ")
        )))
    }

    /// Lists the table's partitions: reads the buckets this subtask owns of new ones from their
    /// earliest offset (their every row is newer than the read's start) and releases those
    /// of dropped ones.
    async fn discover_partitions(&mut self) -> Result<()> {
        let connection = self.connection.as_ref().expect("opened before polled");
        let path = self.config.table_path();
        let admin = connection.get_admin().map_err(fluss_error("fluss admin"))?;
        let listed = list_partitions(&admin, &path).await?;
        let partitions = self.partitions.as_mut().expect("a partitioned table");
        partitions.next_discovery = Some(Instant::now() + PARTITION_DISCOVERY_INTERVAL);
        let dropped: Vec<i64> = partitions
            .known
            .keys()
            .filter(|id| !listed.contains_key(id))
            .copied()
            .collect();
        let new: Vec<(i64, String)> = listed
            .into_iter()
            .filter(|(id, _)| !partitions.known.contains_key(id))
            .collect();
        let (buckets, subtask, parallelism) = (
            partitions.buckets,
            partitions.subtask,
            partitions.parallelism,
        );
        for id in dropped {
            self.release_partition(id).await?;
        }
        for (id, partition) in new {
            let owned = owned_slots(Some(id), buckets, subtask, parallelism);
            let start = OffsetSpec::Earliest;
            let offsets = match list_owned_offsets(
                &admin,
                &path,
                Some((id, &partition)),
                &owned,
                start,
            )
            .await
            {
                Ok(offsets) => offsets,
                Err(error) => {
                    // Dropped again since it was listed, or the server is away: the next
                    // discovery tries again.
                    tracing::warn!(table = %path, partition, %error, "new partition not read yet");
                    continue;
                }
            };
            let scanner = self.scanner.as_ref().expect("opened before polled");
            subscribe(scanner, &offsets, &path.to_string()).await?;
            tracing::info!(table = %path, partition, partition_id = id, offsets = ?offsets, "fluss source reads a new partition");
            self.queued_next.extend(offsets.clone());
            self.next_offsets.extend(offsets);
            let partitions = self.partitions.as_mut().expect("a partitioned table");
            partitions.known.insert(id, partition);
        }
        Ok(())
    }

    /// Stops reading a dropped partition: its buckets leave the subscription, the offsets
    /// (and so the state) and the rows not emitted yet.
    async fn release_partition(&mut self, id: i64) -> Result<()> {
        let slots: Vec<Slot> = self
            .next_offsets
            .keys()
            .filter(|s| s.partition == Some(id))
            .copied()
            .collect();
        let scanner = self.scanner.as_ref().expect("opened before polled");
        for slot in &slots {
            scanner
                .unsubscribe_partition(id, slot.bucket)
                .await
                .map_err(fluss_error("unsubscribe a dropped partition"))?;
            self.next_offsets.remove(slot);
            self.queued_next.remove(slot);
        }
        self.ready.retain(|(slot, _, _)| slot.partition != Some(id));
        let partitions = self.partitions.as_mut().expect("a partitioned table");
        let name = partitions.known.remove(&id);
        tracing::info!(table = %self.config.table_path(), partition = ?name, partition_id = id, "fluss source released a dropped partition");
        Ok(())
    }

    /// `records` (one run, see [`run_len`]) as a changelog batch: a slice of their batch, then
    /// `__bucket`, `__offset`, `__timestamp` and `__change_type` (and `__partition_id`, when
    /// asked for).
    fn with_system_columns(&mut self, slot: Slot, records: &[ScanRecord]) -> Result<RecordBatch> {
        let bucket = slot.bucket;
        let partition_id = slot.partition.filter(|_| self.config.partition_id_column);
        let first = &records[0];
        let source = first.row().get_record_batch().ok_or_else(|| {
            Error::operator_bug("the fluss client returned a row without its batch")
        })?;
        let data = self.in_user_schema(source.slice(first.row().get_row_id(), records.len()))?;
        let schema = match &self.output_schema {
            Some(s) => s.clone(),
            None => {
                let mut fields: Vec<_> = data
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .collect();
                fields.extend(stream_system_fields());
                if partition_id.is_some() {
                    fields.push(partition_id_field());
                }
                let s = Arc::new(Schema::new(fields));
                self.output_schema = Some(s.clone());
                s
            }
        };
        let n = records.len();
        let base = first.offset();
        let change_types: Int8Array = if self.append_only {
            debug_assert!(
                records
                    .iter()
                    .all(|r| *r.change_type() == FlussChangeType::AppendOnly)
            );
            Int8Array::from_value(ChangeType::AppendOnly as i8, n)
        } else {
            records
                .iter()
                .map(|r| r.change_type().to_byte_value() as i8)
                .collect::<Vec<_>>()
                .into()
        };
        debug_assert!(
            change_types
                .values()
                .iter()
                .all(|c| ChangeType::from_i8(*c).is_some()),
            "the client's change types are Fluss's"
        );
        let mut columns: Vec<ArrayRef> = data.columns().to_vec();
        columns.push(Arc::new(Int32Array::from_value(bucket, n)));
        columns.push(Arc::new(Int64Array::from_iter_values(
            base..base + n as i64,
        )));
        columns.push(Arc::new(
            TimestampMillisecondArray::from_value(first.timestamp(), n).with_timezone("UTC"),
        ));
        columns.push(Arc::new(change_types));
        if let Some(partition_id) = partition_id {
            columns.push(Arc::new(Int64Array::from_value(partition_id, n)));
        }
        RecordBatch::try_new(schema, columns).map_err(|e| {
            Error::with_context(
                silt_engine::Cause::Silt,
                format!("changelog batch of {slot}"),
                e,
            )
        })
    }
}

/// How an error message names a bucket.
fn slot_name(slot: &Slot) -> String {
    slot.to_string()
}

/// Length of the run `records` starts with: the rows that follow its first row in the client's
/// underlying batch, with contiguous offsets (so one commit timestamp: Fluss stamps a batch,
/// not a row).
///
/// The client emits a batch's rows in order and never interleaves batches, so a run is as
/// long as the rest of its batch or of `records`, whichever ends first; that is checked on the
/// run's last row only (every row in debug builds). A client that broke the order falls back
/// to a row-by-row scan.
fn run_len(records: &[ScanRecord]) -> Result<usize> {
    let first = &records[0];
    let Some(batch) = first.row().get_record_batch() else {
        return Err(Error::operator_bug(
            "the fluss client returned a row without its batch",
        ));
    };
    let continues = |i: usize| {
        let r: &ScanRecord = &records[i];
        r.row()
            .get_record_batch()
            .is_some_and(|b| std::ptr::eq(b, batch))
            && r.row().get_row_id() == first.row().get_row_id() + i
            && r.offset() == first.offset() + i as i64
            && r.timestamp() == first.timestamp()
    };
    let longest = (batch.num_rows() - first.row().get_row_id()).min(records.len());
    if continues(longest - 1) {
        debug_assert!((1..longest).all(continues), "a run's rows are contiguous");
        return Ok(longest);
    }
    Ok((1..longest).find(|i| !continues(*i)).unwrap_or(longest))
}

/// A bucket the source reads: one of an unpartitioned table's, or one of a partition's.
type Slot = BucketKey;

/// Whether subtask `subtask` of `parallelism` reads this bucket: `b % n == i` for an
/// unpartitioned table, `(p + b) % n == i` for bucket `b` of partition `p`, so each partition's
/// buckets spread over the subtasks and so do the partitions' bucket 0s.
fn owned_by(slot: &Slot, subtask: u32, parallelism: u32) -> bool {
    let key = slot.partition.unwrap_or(0) + i64::from(slot.bucket);
    key.rem_euclid(i64::from(parallelism)) == i64::from(subtask)
}

/// How often a streaming read of a partitioned table lists its partitions, to read the new
/// ones and release the dropped ones. A constant until the configuration names it.
pub const PARTITION_DISCOVERY_INTERVAL: Duration = Duration::from_secs(1);

/// The partitions of a partitioned table the source knows of.
struct Partitions {
    /// Partition id -> name, every listed partition (whether this subtask owns buckets of it).
    known: BTreeMap<i64, String>,
    /// When to list the partitions next; `None`: never (a bounded read keeps those it opened
    /// with).
    next_discovery: Option<Instant>,
    /// The table's bucket count, and this subtask's place, to tell the buckets it owns of a
    /// new partition.
    buckets: i32,
    subtask: u32,
    parallelism: u32,
}

/// State tag of a partitioned table's offsets (a plain offsets state starts with a count).
const PARTITIONED_OFFSETS_TAG: &[u8; 4] = b"SPO1";

/// An unpartitioned table's offsets as `count, (bucket, offset)*` (the format before
/// partitions, so older checkpoints restore); a partitioned table's as the tag, then
/// `count, (partition, bucket, offset)*`.
fn encode_offsets(offsets: &BTreeMap<Slot, i64>) -> Bytes {
    let partitioned = offsets.keys().any(|s| s.partition.is_some());
    let mut b = BytesMut::with_capacity(8 + offsets.len() * 20);
    if partitioned {
        b.put_slice(PARTITIONED_OFFSETS_TAG);
    }
    b.put_u32(offsets.len() as u32);
    for (slot, offset) in offsets {
        match slot.partition {
            Some(partition) => b.put_i64(partition),
            None => assert!(
                !partitioned,
                "a table's buckets are all partitioned or none"
            ),
        }
        b.put_i32(slot.bucket);
        b.put_i64(*offset);
    }
    b.freeze()
}

fn decode_offsets(mut b: Bytes) -> Result<BTreeMap<Slot, i64>> {
    let corrupt = || Error::operator_bug("fluss source state is damaged (expected bucket offsets)");
    let partitioned = b.starts_with(PARTITIONED_OFFSETS_TAG);
    if partitioned {
        b.advance(PARTITIONED_OFFSETS_TAG.len());
    }
    if b.remaining() < 4 {
        return Err(corrupt());
    }
    let n = b.get_u32() as usize;
    let entry_bytes = if partitioned { 20 } else { 12 };
    if b.remaining() != n * entry_bytes {
        return Err(corrupt());
    }
    Ok((0..n)
        .map(|_| {
            let partition = partitioned.then(|| b.get_i64());
            let bucket = b.get_i32();
            (Slot { partition, bucket }, b.get_i64())
        })
        .collect())
}

/// Partition id -> name of every partition of `path`.
async fn list_partitions(admin: &FlussAdmin, path: &TablePath) -> Result<BTreeMap<i64, String>> {
    Ok(admin
        .list_partition_infos(path)
        .await
        .map_err(fluss_error(&format!("list partitions of {path}")))?
        .iter()
        .map(|p| (p.get_partition_id(), p.get_partition_name()))
        .collect())
}

/// The offsets `spec` names of every bucket of table `path`: of every partition's buckets when
/// it is partitioned (as its partitions are listed now).
pub async fn list_bucket_offsets(
    connection: &FlussConnection,
    path: &TablePath,
    spec: OffsetSpec,
) -> Result<BTreeMap<BucketKey, i64>> {
    let admin = connection.get_admin().map_err(fluss_error("fluss admin"))?;
    let info = admin
        .get_table_info(path)
        .await
        .map_err(fluss_error(&format!("table {path}")))?;
    list_shaped_offsets(connection, path, TableShape::of(&info), spec).await
}

/// What listing a table's offsets needs to know of it, for a caller that knows it already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableShape {
    pub buckets: i32,
    pub partitioned: bool,
}

impl TableShape {
    pub fn of(info: &fluss::metadata::TableInfo) -> TableShape {
        TableShape {
            buckets: info.get_num_buckets(),
            partitioned: info.is_partitioned(),
        }
    }
}

/// As [`list_bucket_offsets`], for a table whose shape the caller knows (one round trip fewer
/// for an unpartitioned table).
pub async fn list_shaped_offsets(
    connection: &FlussConnection,
    path: &TablePath,
    shape: TableShape,
    spec: OffsetSpec,
) -> Result<BTreeMap<BucketKey, i64>> {
    let admin = connection.get_admin().map_err(fluss_error("fluss admin"))?;
    let buckets = shape.buckets.max(1);
    if !shape.partitioned {
        let all = owned_slots(None, buckets, 0, 1);
        return list_owned_offsets(&admin, path, None, &all, spec).await;
    }
    let mut offsets = BTreeMap::new();
    for (id, name) in list_partitions(&admin, path).await? {
        let all = owned_slots(Some(id), buckets, 0, 1);
        offsets
            .extend(list_owned_offsets(&admin, path, Some((id, &name)), &all, spec.clone()).await?);
    }
    Ok(offsets)
}

/// The latest offset (high watermark) of every owned bucket.
async fn latest_owned_offsets(
    table: &Opening<'_>,
    owned: &Owned<'_>,
) -> Result<BTreeMap<Slot, i64>> {
    let mut latest = BTreeMap::new();
    for (partition, slots) in owned {
        latest.extend(
            list_owned_offsets(
                table.admin,
                table.path,
                *partition,
                slots,
                OffsetSpec::Latest,
            )
            .await?,
        );
    }
    Ok(latest)
}

/// The offsets `spec` names of the owned buckets of one partition (`Some((id, name))`) or of
/// the table (`None`); a bucket the server does not answer gets 0.
async fn list_owned_offsets(
    admin: &FlussAdmin,
    path: &TablePath,
    partition: Option<(i64, &str)>,
    owned: &[Slot],
    spec: OffsetSpec,
) -> Result<BTreeMap<Slot, i64>> {
    let buckets: Vec<i32> = owned.iter().map(|s| s.bucket).collect();
    if buckets.is_empty() {
        return Ok(BTreeMap::new());
    }
    let listed = match partition {
        None => admin.list_offsets(path, &buckets, spec).await,
        Some((_, name)) => {
            admin
                .list_partition_offsets(path, name, &buckets, spec)
                .await
        }
    }
    .map_err(fluss_error(&format!("list offsets of {path}")))?;
    Ok(owned
        .iter()
        .map(|s| (*s, listed.get(&s.bucket).copied().unwrap_or(0)))
        .collect())
}

/// The buckets of partition `partition` (or of the table) that `subtask` of `parallelism` owns.
fn owned_slots(partition: Option<i64>, buckets: i32, subtask: u32, parallelism: u32) -> Vec<Slot> {
    (0..buckets)
        .map(|bucket| Slot { partition, bucket })
        .filter(|s| owned_by(s, subtask, parallelism))
        .collect()
}

/// Subscribes `scanner` to each bucket at its offset.
async fn subscribe(scanner: &LogScanner, offsets: &BTreeMap<Slot, i64>, name: &str) -> Result<()> {
    let table: HashMap<i32, i64> = offsets
        .iter()
        .filter(|(s, _)| s.partition.is_none())
        .map(|(s, o)| (s.bucket, *o))
        .collect();
    let partitioned: HashMap<(i64, i32), i64> = offsets
        .iter()
        .filter_map(|(s, o)| s.partition.map(|p| ((p, s.bucket), *o)))
        .collect();
    if !table.is_empty() {
        scanner
            .subscribe_buckets(&table)
            .await
            .map_err(fluss_error(&format!("subscribe to {name}")))?;
    }
    if !partitioned.is_empty() {
        scanner
            .subscribe_partition_buckets(&partitioned)
            .await
            .map_err(fluss_error(&format!("subscribe to {name}")))?;
    }
    Ok(())
}

/// What `open` reads once and its steps share.
struct Opening<'a> {
    admin: &'a FlussAdmin,
    path: &'a TablePath,
    name: &'a str,
    info: &'a fluss::metadata::TableInfo,
}

/// Each partition (or the table) with the buckets of it a subtask owns.
type Owned<'a> = Vec<(Option<(i64, &'a str)>, Vec<Slot>)>;

/// The offsets of every subtask's checkpointed state, and this subtask's union-read phase (a
/// checkpoint taken in the lake phase restores only at the parallelism it was taken with).
fn restored_offsets(
    restored: &RestoredState,
    ctx: &TaskContext,
    name: &str,
) -> Result<(BTreeMap<Slot, i64>, Option<LakePhase>)> {
    let mut offsets = BTreeMap::new();
    let mut own_phase = None;
    for (index, state) in restored.subtask_states.iter().enumerate() {
        let Some(state) = state else { continue };
        match LakePhase::decode(state)? {
            Some((phase, phase_offsets)) => {
                if phase.parallelism != ctx.parallelism {
                    return Err(Error::operator(format!(
                        "{name}: the checkpoint was taken while the source read the lake with parallelism {}; restore it with that parallelism (now {})",
                        phase.parallelism, ctx.parallelism
                    )));
                }
                offsets.extend(decode_offsets(phase_offsets)?);
                if index == ctx.subtask_index as usize {
                    own_phase = Some(phase);
                }
            }
            None => offsets.extend(decode_offsets(state.clone())?),
        }
    }
    Ok((offsets, own_phase))
}

fn owned_by_subtask<'a>(
    partitions: Option<&'a BTreeMap<i64, String>>,
    buckets: i32,
    ctx: &TaskContext,
) -> Owned<'a> {
    let slots = |partition| owned_slots(partition, buckets, ctx.subtask_index, ctx.parallelism);
    match partitions {
        None => vec![(None, slots(None))],
        Some(known) => known
            .iter()
            .map(|(id, partition)| (Some((*id, partition.as_str())), slots(Some(*id))))
            .collect(),
    }
}

impl FlussSource {
    /// A union read pins the lake when it first starts (its txn offsets are where the log
    /// part starts); a restore continues the phase its checkpoint was in.
    async fn pin_lake(
        &mut self,
        is_restored: bool,
        restored_phase: Option<LakePhase>,
        info: &fluss::metadata::TableInfo,
        ctx: &TaskContext,
    ) -> Result<Option<BTreeMap<Slot, i64>>> {
        let StartPosition::LakeThenLog(lake) = &self.config.start else {
            return Ok(None);
        };
        if is_restored {
            self.lake_phase = restored_phase;
            return Ok(None);
        }
        let Some((version, offsets)) =
            union::pin(lake, info.get_num_buckets().max(1) as u32).await?
        else {
            return Ok(None);
        };
        self.lake_phase = Some(LakePhase {
            version,
            emitted: 0,
            parallelism: ctx.parallelism,
        });
        Ok(Some(offsets))
    }

    /// Where each owned bucket starts: at `start`'s offset (restored, explicit or the lake's)
    /// where it names one, else where the start position lists it. A bucket `start` does not
    /// name (a partition created after a checkpoint, say) starts at its earliest offset.
    async fn start_offsets(
        &mut self,
        table: &Opening<'_>,
        owned: &Owned<'_>,
        is_restored: bool,
        start: Option<BTreeMap<Slot, i64>>,
    ) -> Result<BTreeMap<Slot, i64>> {
        let spec = match &self.config.start {
            _ if is_restored => OffsetSpec::Earliest,
            StartPosition::Latest => OffsetSpec::Latest,
            StartPosition::Timestamp(ts) => OffsetSpec::Timestamp(*ts),
            StartPosition::Earliest | StartPosition::Offsets(_) | StartPosition::LakeThenLog(_) => {
                OffsetSpec::Earliest
            }
        };
        let mut listed = BTreeMap::new();
        for (partition, slots) in owned {
            listed.extend(
                list_owned_offsets(table.admin, table.path, *partition, slots, spec.clone())
                    .await?,
            );
        }
        if matches!(spec, OffsetSpec::Earliest) {
            self.log_starts = listed.clone();
        }
        let expired: Vec<String> = listed
            .iter()
            .filter(|(_, start)| **start > 0)
            .map(|(slot, start)| format!("{} starts at {start}", slot_name(slot)))
            .collect();
        if super::is_lake_enabled(table.info)
            && !is_restored
            && matches!(self.config.start, StartPosition::Earliest)
            && !expired.is_empty()
        {
            // Hot retention dropped the oldest changelog, which the lake holds: starting at
            // the log start would skip those rows without a word.
            let name = table.name;
            return Err(Error::operator(format!(
                "{name}: start: earliest cannot read every row: hot retention (table.log.ttl) moved the changelog's start ({}), and the rows before it are only in the lake; start with `start: lake` and read the history from {name}$lake, or give the table a longer table.log.ttl",
                expired.join(", ")
            )));
        }
        Ok(listed
            .into_iter()
            .map(|(slot, listed)| {
                let at = start
                    .as_ref()
                    .and_then(|s| s.get(&slot).copied())
                    .unwrap_or(listed);
                (slot, at)
            })
            .collect())
    }

    /// Raises each bucket's next offset to the resume floor where that is higher, saying so.
    async fn raise_to_resume_floor(&mut self, name: &str) -> Result<()> {
        let Some(floor) = &self.config.resume_floor else {
            return Ok(());
        };
        let slots: Vec<Slot> = self.next_offsets.keys().copied().collect();
        let floor = (floor.0)(slots)
            .await
            .map_err(|e| Error::operator(format!("{name}: reading where the lake ends: {e:#}")))?;
        for (slot, next) in self.next_offsets.iter_mut() {
            if let Some(&at) = floor.get(slot)
                && at > *next
            {
                tracing::warn!(
                    table = %name,
                    bucket = %slot_name(slot),
                    from = *next,
                    to = at,
                    "another writer tiered past this job's checkpoint: resuming where the lake ends"
                );
                *next = at;
            }
        }
        Ok(())
    }

    /// Where a restored read starts is raised to the resume floor (a first start's offsets are
    /// the caller's: a tiering job's are the lake's, just read); then no bucket may start below
    /// its changelog's start.
    async fn settle_start(&mut self, name: &str, is_restored: bool) -> Result<()> {
        if is_restored {
            self.raise_to_resume_floor(name).await?;
        }
        self.refuse_log_gap(name)
    }

    /// Fails the open when a bucket would resume below where its changelog starts now: the
    /// rows between expired from the hot tier (its `table.log.ttl`) before this read had them,
    /// and reading on from the log's start would skip them without a word.
    fn refuse_log_gap(&self, name: &str) -> Result<()> {
        let gaps: Vec<String> = self
            .next_offsets
            .iter()
            .filter_map(|(slot, next)| {
                let start = *self.log_starts.get(slot)?;
                (*next < start).then(|| {
                    format!(
                        "{}: resumes at offset {next}, the changelog starts at {start}",
                        slot_name(slot)
                    )
                })
            })
            .collect();
        if gaps.is_empty() {
            return Ok(());
        }
        let message = format!(
            "{name}: {LOG_GAP} ({}): the hot tier keeps a table's changelog for its \
             table.log.ttl, and reading on would skip the rows between; raise table.log.ttl \
             above the reader's lag",
            gaps.join("; ")
        );
        if let Some(hook) = &self.config.on_log_gap {
            (hook.0)(&message);
        }
        Err(Error::operator(message))
    }

    /// The exclusive end of each owned bucket, when the read is bounded.
    async fn end_offsets_of(
        &mut self,
        table: &Opening<'_>,
        owned: &Owned<'_>,
    ) -> Result<Option<BTreeMap<Slot, i64>>> {
        Ok(match &self.config.end {
            EndPosition::Unbounded => None,
            EndPosition::Offsets(end) => Some(
                self.next_offsets
                    .keys()
                    .map(|s| (*s, end.get(s).copied().unwrap_or(0)))
                    .collect(),
            ),
            EndPosition::LatestAtOpen => Some(latest_owned_offsets(table, owned).await?),
        })
    }

    /// An unbounded read's backlog: the high watermarks of the owned buckets it opens behind
    /// (None when it is bounded, and when it is behind in none).
    async fn backlog_of(
        &mut self,
        table: &Opening<'_>,
        owned: &Owned<'_>,
    ) -> Result<Option<BTreeMap<Slot, i64>>> {
        if !matches!(self.config.end, EndPosition::Unbounded) {
            return Ok(None);
        }
        let behind: BTreeMap<Slot, i64> = latest_owned_offsets(table, owned)
            .await?
            .into_iter()
            .filter(|(slot, end)| self.next_offsets.get(slot).is_some_and(|n| n < end))
            .collect();
        Ok((!behind.is_empty()).then_some(behind))
    }

    /// The client's scanner, subscribed to every owned bucket at its next offset (up to its
    /// end). Without a projection it reads batches as written and the source keeps the
    /// table's schema of now (`in_user_schema`).
    async fn open_scanner(
        &mut self,
        connection: &FlussConnection,
        table: &Opening<'_>,
    ) -> Result<LogScanner> {
        let name = table.name;
        let handle = connection
            .get_table(table.path)
            .await
            .map_err(fluss_error(&format!("table {name}")))?;
        let mut scan = handle.new_scan();
        if let Some(columns) = &self.config.projection {
            scan = scan
                .project(columns)
                .map_err(fluss_error(&format!("projection on {name}")))?;
        } else {
            // Batches as written (not aligned by the client to the schema it holds, which
            // would drop the columns of a batch written after the table gained them).
            scan = scan.with_fixed_schema(false);
            let user = fluss::record::to_arrow_schema(table.info.get_row_type())
                .map_err(fluss_error(&format!("schema of {name}")))?;
            self.user_schema = Some((user, table.info.get_schema_id()));
        }
        let scanner = scan
            .create_log_scanner()
            .map_err(fluss_error(&format!("scanner on {name}")))?;
        let subscriptions: BTreeMap<Slot, i64> = self
            .next_offsets
            .iter()
            .filter(|(s, next)| {
                self.end_offsets
                    .as_ref()
                    .is_none_or(|e| e.get(s).is_some_and(|end| *next < end))
            })
            .map(|(s, o)| (*s, *o))
            .collect();
        subscribe(&scanner, &subscriptions, name).await?;
        Ok(scanner)
    }

    /// A union read in its lake phase: the lake's rows at the pinned version, as changes of
    /// the stream's schema (which the log part then shares).
    async fn open_lake_rows(&mut self, ctx: &TaskContext, table: &Opening<'_>) -> Result<()> {
        let (Some(phase), StartPosition::LakeThenLog(lake)) =
            (&self.lake_phase, &self.config.start)
        else {
            return Ok(());
        };
        let name = table.name;
        let mut user = fluss::record::to_arrow_schema(table.info.get_row_type())
            .map_err(fluss_error(&format!("schema of {name}")))?;
        if let Some(columns) = &self.config.projection {
            user = Arc::new(
                user.project(columns)
                    .map_err(|e| Error::operator(format!("projection on {name}: {e}")))?,
            );
        }
        let mut fields: Vec<_> = user.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(stream_system_fields());
        let output = Arc::new(Schema::new(fields));
        let change = if table.info.get_primary_keys().is_empty() {
            ChangeType::AppendOnly
        } else {
            ChangeType::Insert
        };
        let rows = LakeRows::open(
            lake,
            phase.version,
            ctx.subtask_index,
            ctx.parallelism,
            &user,
            output.clone(),
            phase.emitted,
            change,
        )
        .await?;
        tracing::info!(table = %name, subtask = ctx.subtask_index, version = phase.version, skip = phase.emitted, "fluss source reads the lake first (union read)");
        // Lake and changelog batches share one schema.
        self.output_schema = Some(output);
        self.lake_rows = Some(rows);
        Ok(())
    }
}

#[async_trait]
impl Source for FlussSource {
    async fn open(&mut self, ctx: &TaskContext, restored: RestoredState) -> Result<()> {
        let connection = connect_scanning(
            &self.config.bootstrap_servers,
            self.config.credentials.as_ref(),
            self.config.fetch_wait,
        )
        .await?;
        let path = self.config.table_path();
        let name = format!("{}.{}", self.config.database, self.config.table);
        let admin = connection.get_admin().map_err(fluss_error("fluss admin"))?;
        let info = admin
            .get_table_info(&path)
            .await
            .map_err(fluss_error(&format!("table {name}")))?;
        if let Some(expected) = self.config.table_id
            && info.get_table_id() != expected
        {
            return Err(Error::operator(format!(
                "table {name} is now table id {}, but this source reads table id {expected}: the table was dropped and created again, and its offsets are not this source's; start a new job for the new table",
                info.get_table_id()
            )));
        }
        self.append_only = info.get_primary_keys().is_empty();
        let table = Opening {
            admin: &admin,
            path: &path,
            name: &name,
            info: &info,
        };

        let (restored_offsets, restored_phase) = restored_offsets(&restored, ctx, &name)?;
        let partitions = if info.is_partitioned() {
            self.refuse_bucket_offsets_of_partitioned(&name, info.get_partition_keys())?;
            Some(list_partitions(&admin, &path).await?)
        } else {
            None
        };
        let owned = owned_by_subtask(partitions.as_ref(), info.get_num_buckets(), ctx);
        let lake_offsets = self
            .pin_lake(restored.is_restored(), restored_phase, &info, ctx)
            .await?;
        let start = match (restored.is_restored(), &self.config.start) {
            (true, _) => Some(restored_offsets),
            (false, StartPosition::Offsets(offsets)) => Some(offsets.clone()),
            (false, _) => lake_offsets,
        };
        self.next_offsets = self
            .start_offsets(&table, &owned, restored.is_restored(), start)
            .await?;
        self.settle_start(&name, restored.is_restored()).await?;
        self.end_offsets = self.end_offsets_of(&table, &owned).await?;
        self.backlog_end = self.backlog_of(&table, &owned).await?;
        self.partitions = partitions.map(|known| Partitions {
            known,
            next_discovery: matches!(self.config.end, EndPosition::Unbounded)
                .then(|| Instant::now() + PARTITION_DISCOVERY_INTERVAL),
            buckets: info.get_num_buckets(),
            subtask: ctx.subtask_index,
            parallelism: ctx.parallelism,
        });

        let scanner = self.open_scanner(&connection, &table).await?;
        self.open_lake_rows(ctx, &table).await?;
        self.queued_next = self.next_offsets.clone();
        self.scanner = Some(scanner);
        self.connection = Some(connection);
        tracing::info!(table = %name, subtask = ctx.subtask_index, offsets = ?self.next_offsets, "fluss source opened");
        Ok(())
    }

    async fn poll_next(&mut self) -> Result<SourcePoll> {
        if let Some(rows) = &mut self.lake_rows {
            match rows.next().await? {
                Some(batch) => {
                    if let Some(phase) = &mut self.lake_phase {
                        phase.emitted += batch.num_rows() as u64;
                    }
                    return Ok(SourcePoll::Batch(batch));
                }
                None => {
                    self.lake_rows = None;
                    self.lake_phase = None;
                }
            }
        }
        if let Some((slot, base, batch)) = self.ready.pop_front() {
            let next = base + batch.num_rows() as i64;
            let entry = self.next_offsets.entry(slot).or_insert(next);
            debug_assert!(
                *entry <= base || *entry == next,
                "offsets only move forward"
            );
            *entry = next;
            return Ok(SourcePoll::Batch(batch));
        }
        if self.finished() {
            return Ok(SourcePoll::End);
        }
        if self.take_backlog_read() {
            tracing::debug!(table = %self.config.table, offsets = ?self.next_offsets, "fluss source read its backlog");
            return Ok(SourcePoll::BacklogRead);
        }
        if self
            .partitions
            .as_ref()
            .and_then(|p| p.next_discovery)
            .is_some_and(|at| Instant::now() >= at)
        {
            self.discover_partitions().await?;
        }
        let scanner = self.scanner.as_ref().expect("opened before polled");
        let polled = scanner
            .poll(self.config.poll_timeout)
            .await
            .map_err(fluss_error(&format!(
                "poll {}.{}",
                self.config.database, self.config.table
            )))?;
        if polled.is_empty() {
            return Ok(SourcePoll::Idle(Duration::ZERO));
        }
        let mut by_slot: Vec<_> = polled
            .into_records_by_buckets()
            .into_iter()
            .map(|(b, records)| {
                let slot = Slot {
                    partition: b.partition_id(),
                    bucket: b.bucket_id(),
                };
                (slot, records)
            })
            .collect();
        by_slot.sort_by_key(|(s, _)| *s);
        for (slot, records) in by_slot {
            // Records the client fetched before a dropped partition was released.
            if self.next_offsets.contains_key(&slot) {
                self.queue_batches(slot, &records)?;
            }
        }
        Ok(SourcePoll::Idle(Duration::ZERO))
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Bytes> {
        let offsets = encode_offsets(&self.next_offsets);
        Ok(match &self.lake_phase {
            Some(phase) => phase.encode(offsets),
            None => offsets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluss::metadata::{DataField, DataTypes, RowType};
    use fluss::record::ArrowReader;

    /// Records as `(batch, first row, first offset, rows)` spans over batches of 10 rows (batch
    /// `k` committed at `k` ms) are cut into runs of these lengths.
    fn check_runs(spans: &[(usize, usize, i64, usize)], expected: &[usize]) {
        let row_type = Arc::new(RowType::new(vec![DataField::new(
            "id",
            DataTypes::bigint(),
            None,
        )]));
        let readers: Vec<ArrowReader> = (0..3)
            .map(|k| {
                let ids = Int64Array::from_iter_values(k * 10..k * 10 + 10);
                let batch = RecordBatch::try_from_iter([("id", Arc::new(ids) as ArrayRef)]);
                ArrowReader::new(Arc::new(batch.unwrap()), row_type.clone()).unwrap()
            })
            .collect();
        let mut records = Vec::new();
        for &(batch, row, offset, rows) in spans {
            for i in 0..rows {
                records.push(ScanRecord::new(
                    readers[batch].read(row + i),
                    offset + i as i64,
                    batch as i64,
                    FlussChangeType::AppendOnly,
                ));
            }
        }
        let mut runs = Vec::new();
        let mut start = 0;
        while start < records.len() {
            let len = run_len(&records[start..]).unwrap();
            runs.push(len);
            start += len;
        }
        assert_eq!(runs, expected, "runs of {spans:?}");
    }

    #[test]
    fn records_are_cut_into_runs_of_one_batch_with_contiguous_offsets() {
        check_runs(&[(0, 0, 0, 10)], &[10]);
        // A poll that ends inside a batch, and the next poll that starts there.
        check_runs(&[(0, 0, 0, 7)], &[7]);
        check_runs(&[(0, 7, 7, 3), (1, 0, 10, 10)], &[3, 10]);
        // A start inside a batch, then two whole batches.
        check_runs(
            &[(0, 4, 4, 6), (1, 0, 10, 10), (2, 0, 20, 10)],
            &[6, 10, 10],
        );
        // Offsets that jump inside one batch (a client out of order) end a run there.
        check_runs(&[(0, 0, 0, 5), (0, 5, 7, 5)], &[5, 5]);
        // Rows of one batch that skip a row end a run there.
        check_runs(&[(1, 0, 10, 3), (1, 4, 13, 6)], &[3, 6]);
    }

    #[test]
    fn every_bucket_of_every_partition_has_one_owner() {
        for parallelism in 1..=4 {
            for partition in [None, Some(0), Some(7), Some(12)] {
                for bucket in 0..5 {
                    let slot = Slot { partition, bucket };
                    let owners = (0..parallelism)
                        .filter(|i| owned_by(&slot, *i, parallelism))
                        .count();
                    assert_eq!(owners, 1, "{slot:?} at parallelism {parallelism}");
                }
            }
        }
        // Unpartitioned: the rule from before partitions, b % n.
        assert!(owned_by(&Slot::table(5), 1, 2));
    }

    #[test]
    fn offsets_state_round_trips_and_rejects_damage() {
        let table = |bucket| Slot {
            partition: None,
            bucket,
        };
        let partition = |p, bucket| Slot {
            partition: Some(p),
            bucket,
        };
        let plain: BTreeMap<Slot, i64> = [(table(0), 10), (table(3), 0), (table(7), i64::MAX)]
            .into_iter()
            .collect();
        let partitioned: BTreeMap<Slot, i64> = [
            (partition(4, 0), 10),
            (partition(4, 1), 3),
            (partition(9, 0), 0),
        ]
        .into_iter()
        .collect();
        for offsets in [&plain, &partitioned, &BTreeMap::new()] {
            assert_eq!(&decode_offsets(encode_offsets(offsets)).unwrap(), offsets);
            let mut damaged = encode_offsets(offsets).to_vec();
            damaged.pop();
            assert!(
                decode_offsets(Bytes::from(damaged))
                    .unwrap_err()
                    .to_string()
                    .contains("damaged")
            );
        }
        // An unpartitioned table's state is the format from before partitions.
        assert_eq!(encode_offsets(&plain).len(), 4 + 3 * 12);
    }
}
