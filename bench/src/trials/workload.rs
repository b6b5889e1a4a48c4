//! The trials' workload: several clients (each its own connection, so its own writer id) write
//! every table at once, each shared by many tasks, for the whole trial, faults included. A
//! client's retries outlast a restart of `silt up` (which keeps its port), so a write in flight
//! when the process died is retried into the restarted one, as real clients do.
//!
//! What is recorded, per row or primary-key op: when it was issued (before the client was
//! called) and when its own write future resolved `Ok` (its acknowledgement). Only those
//! count as acknowledged; a write whose future failed, or never resolved, was merely attempted
//! and may or may not be stored.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fluss::client::{AppendWriter, FlussConnection, Metadata, UpsertWriter, WriteResultFuture};
use fluss::metadata::TablePath;
use fluss::row::GenericRow;
use fluss::rpc::FlussError;
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{DB, TableSpec};

/// Rows (log) or ops (primary key) per group a task issues before it waits for their acks.
const GROUP_ROWS: [usize; 6] = [1, 2, 5, 20, 80, 300];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PkOp {
    Upsert,
    Partial,
    Delete,
}

/// When a write was issued and, if it was, acknowledged: microseconds since the trial began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub issued_us: u64,
    pub acked_us: Option<u64>,
    /// The client reported the write failed (it may still have been stored).
    pub refused: bool,
}

impl Stamp {
    fn issued(epoch: Instant) -> Stamp {
        Stamp {
            issued_us: now_us(epoch),
            acked_us: None,
            refused: false,
        }
    }

    /// Neither acknowledged nor refused: still in flight.
    pub fn unresolved(&self) -> bool {
        self.acked_us.is_none() && !self.refused
    }
}

/// Which client and task issued a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Origin {
    pub client: u16,
    pub task: u16,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct LogWrite {
    pub table: usize,
    pub id: i64,
    pub origin: Origin,
    pub stamp: Stamp,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct PkWrite {
    pub table: usize,
    pub key: i64,
    /// Unique per op in a trial: the `ver` column of the image it writes.
    pub ver: i64,
    pub op: PkOp,
    pub origin: Origin,
    pub stamp: Stamp,
}

/// Everything the workload attempted.
#[derive(Debug, Default)]
pub(super) struct Records {
    pub log: Vec<LogWrite>,
    pub pk: Vec<PkWrite>,
    /// Errors of refused writes by message (first line), with counts.
    pub errors: BTreeMap<String, u64>,
    /// Times a client had lost a table's metadata and looked the table up again.
    pub table_lookups: u64,
}

impl Records {
    pub fn acked(&self) -> u64 {
        let log = self.log.iter().filter(|w| w.stamp.acked_us.is_some());
        let pk = self.pk.iter().filter(|w| w.stamp.acked_us.is_some());
        (log.count() + pk.count()) as u64
    }

    /// Writes neither acknowledged nor refused.
    pub fn unresolved(&self) -> u64 {
        let log = self.log.iter().filter(|w| w.stamp.unresolved());
        let pk = self.pk.iter().filter(|w| w.stamp.unresolved());
        (log.count() + pk.count()) as u64
    }

    /// Writes still unresolved count as refused (`why`): their client died, and nothing will
    /// answer them (they may have been stored, as any refused write may).
    pub fn give_up(&mut self, why: &str) -> u64 {
        let log = self.log.iter_mut().map(|w| &mut w.stamp);
        let pk = self.pk.iter_mut().map(|w| &mut w.stamp);
        let mut given_up = 0;
        for stamp in log.chain(pk).filter(|s| s.unresolved()) {
            stamp.refused = true;
            given_up += 1;
        }
        if given_up > 0 {
            *self.errors.entry(why.to_string()).or_default() += given_up;
        }
        given_up
    }

    pub fn extend(&mut self, other: Records) {
        self.log.extend(other.log);
        self.pk.extend(other.pk);
        for (e, n) in other.errors {
            *self.errors.entry(e).or_default() += n;
        }
        self.table_lookups += other.table_lookups;
    }
}

/// One client of the workload: its own connection and writer id, its writer settings, and how
/// many tasks share its writers.
#[derive(Debug, Clone)]
pub(super) struct ClientPlan {
    pub batch_bytes: i32,
    pub dynamic_batch_size: bool,
    pub inflight_per_bucket: usize,
    pub batch_timeout_ms: i64,
    pub tasks: u16,
    /// Writes primary-key tables with partial updates (`id`, `ver`, `score`) only; otherwise
    /// with full upserts and deletes. fluss-rs 1.0 cannot mix the two in one client: it refuses
    /// a write whose target columns differ from those of the bucket's open batch, and fails a
    /// whole request whose batches differ.
    pub partial_updates: bool,
}

impl ClientPlan {
    /// The first client keeps fluss-rs's defaults (2 MiB batches, dynamic sizing, 5 requests in
    /// flight per bucket); the others draw small batches, dynamic or not, and 2 to 5 in flight.
    pub fn draw(index: usize, rng: &mut SmallRng) -> ClientPlan {
        let defaults = fluss::config::Config::default();
        if index == 0 {
            return ClientPlan {
                batch_bytes: defaults.writer_batch_size,
                dynamic_batch_size: defaults.writer_dynamic_batch_size_enabled,
                inflight_per_bucket: defaults.writer_max_inflight_requests_per_bucket,
                batch_timeout_ms: defaults.writer_batch_timeout_ms,
                tasks: rng.random_range(2..5),
                partial_updates: false,
            };
        }
        ClientPlan {
            batch_bytes: [512, 2048, 8192, 32768][rng.random_range(0..4)],
            dynamic_batch_size: rng.random_bool(0.7),
            inflight_per_bucket: rng.random_range(2..=5),
            // Not 0: fluss-rs 1.0's sender then debug-asserts a next wake-up of 0 ms and dies.
            batch_timeout_ms: [1, 2, 20, 100][rng.random_range(0..4)],
            tasks: rng.random_range(3..9),
            partial_updates: rng.random_bool(0.4),
        }
    }

    fn config(&self, bootstrap: &str) -> fluss::config::Config {
        let mut config = fluss::config::Config::default();
        config.bootstrap_servers = bootstrap.to_string();
        config.writer_batch_size = self.batch_bytes;
        config.writer_dynamic_batch_size_enabled = self.dynamic_batch_size;
        config.writer_dynamic_batch_size_min = (self.batch_bytes / 4)
            .max(128)
            .min(config.writer_dynamic_batch_size_min);
        config.writer_max_inflight_requests_per_bucket = self.inflight_per_bucket;
        config.writer_batch_timeout_ms = self.batch_timeout_ms;
        // Retries without end (the default), so a write outlives a restart of `silt up`.
        config.writer_retries = i32::MAX;
        // A full buffer blocks the caller's thread (for ever by default); bounded, it refuses.
        config.writer_buffer_wait_timeout_ms = 10_000;
        config
    }

    pub fn describe(&self) -> String {
        format!(
            "{} tasks, {} B batches{}, {} in flight per bucket, linger {} ms{}",
            self.tasks,
            self.batch_bytes,
            if self.dynamic_batch_size {
                " (dynamic)"
            } else {
                ""
            },
            self.inflight_per_bucket,
            self.batch_timeout_ms,
            if self.partial_updates {
                ", partial updates"
            } else {
                ""
            }
        )
    }
}

enum TableWriter {
    Log(AppendWriter),
    /// Full upserts and deletes.
    Pk(UpsertWriter),
    /// Partial updates of `id`, `ver`, `score`.
    PkPartial(UpsertWriter),
}

/// What a workload writes, and how.
pub(super) struct WorkloadPlan<'a> {
    pub tables: &'a [TableSpec],
    pub clients: &'a [ClientPlan],
    pub pk_keys: i64,
    /// Log ids and primary-key `ver`s count up from here, so workloads started with ranges
    /// apart write ids no other one writes.
    pub first_id: i64,
    /// The name of the threads of the workload's runtime (whose panics are the clients').
    pub thread_name: String,
}

/// The running workload.
pub(super) struct Workload {
    /// The workload's own runtime: a client that spins (fluss-rs 1.0 retries a retriable error
    /// at once, without backoff) or blocks cannot starve the trial's driver.
    runtime: Option<tokio::runtime::Runtime>,
    stop: watch::Sender<bool>,
    tasks: Vec<(JoinHandle<()>, Arc<Mutex<Records>>)>,
    /// Kept open for as long as the tasks may use them.
    connections: Vec<FlussConnection>,
}

/// What a task needs to write.
struct TaskContext {
    origin: Origin,
    seed: u64,
    tables: Arc<Vec<TableSpec>>,
    writers: Arc<Vec<TableWriter>>,
    metadata: Arc<Metadata>,
    pk_keys: i64,
    epoch: Instant,
    next_id: Arc<AtomicI64>,
    next_ver: Arc<AtomicI64>,
    records: Arc<Mutex<Records>>,
    stop: watch::Receiver<bool>,
    /// Set when the client refused a write because it no longer knows the table.
    table_unknown: std::sync::atomic::AtomicBool,
}

/// Connects one client and opens its writer of every table.
async fn connect(
    bootstrap: String,
    plan: ClientPlan,
    tables: Arc<Vec<TableSpec>>,
) -> Result<(FlussConnection, Vec<TableWriter>)> {
    let connection = FlussConnection::new(plan.config(&bootstrap)).await?;
    let mut writers = Vec::new();
    for t in tables.iter() {
        let table = connection
            .get_table(&TablePath::new(DB, &t.name))
            .await
            .with_context(|| format!("opening {DB}.{}", t.name))?;
        // A partitioned table's key holds its partition column, which a partial update names.
        let partial: &[&str] = match t.day {
            None => &["id", "ver", "score"],
            Some(_) => &["id", "ver", "score", super::PARTITION_COLUMN],
        };
        writers.push(match (t.primary_key, plan.partial_updates) {
            (false, _) => TableWriter::Log(table.new_append()?.create_writer()?),
            (true, false) => TableWriter::Pk(table.new_upsert()?.create_writer()?),
            (true, true) => TableWriter::PkPartial(
                table
                    .new_upsert()?
                    .partial_update_with_column_names(partial)?
                    .create_writer()?,
            ),
        });
    }
    Ok((connection, writers))
}

impl Workload {
    /// Connects every client and starts its tasks; `silt up` must be running.
    pub async fn start(
        bootstrap: &str,
        plan: &WorkloadPlan<'_>,
        epoch: Instant,
        rng: &mut SmallRng,
    ) -> Result<Workload> {
        let WorkloadPlan {
            tables,
            clients,
            pk_keys,
            first_id,
            ..
        } = *plan;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(&plan.thread_name)
            .enable_all()
            .build()
            .context("starting the workload's runtime")?;
        let handle = runtime.handle().clone();
        // Owned by the workload at once: a start that fails (silt may be down) drops it through
        // `Drop for Workload`, which may run on the driver's runtime.
        let mut workload = Workload {
            runtime: Some(runtime),
            stop: watch::channel(false).0,
            tasks: Vec::new(),
            connections: Vec::new(),
        };
        let stop_rx = workload.stop.subscribe();
        let tables = Arc::new(tables.to_vec());
        let next_id = Arc::new(AtomicI64::new(first_id));
        let next_ver = Arc::new(AtomicI64::new(first_id));
        // Every client connects before any task writes: an armed `silt up` may abort at its
        // first durable writes, and a connection attempt should not be what that interrupts.
        let mut client_writers = Vec::new();
        for (c, plan) in clients.iter().enumerate() {
            let connecting = connect(bootstrap.to_string(), plan.clone(), tables.clone());
            let connected = handle.spawn(connecting).await?;
            let (connection, writers) =
                connected.with_context(|| format!("connecting workload client {c}"))?;
            client_writers.push((Arc::new(writers), connection.get_metadata()));
            workload.connections.push(connection);
        }
        for (c, (plan, (writers, metadata))) in clients.iter().zip(client_writers).enumerate() {
            for task in 0..plan.tasks {
                let records = Arc::new(Mutex::new(Records::default()));
                let context = TaskContext {
                    origin: Origin {
                        client: c as u16,
                        task,
                    },
                    seed: rng.random(),
                    tables: tables.clone(),
                    writers: writers.clone(),
                    metadata: metadata.clone(),
                    pk_keys,
                    epoch,
                    next_id: next_id.clone(),
                    next_ver: next_ver.clone(),
                    records: records.clone(),
                    stop: stop_rx.clone(),
                    table_unknown: Default::default(),
                };
                let task = handle.spawn(run_task(context));
                workload.tasks.push((task, records));
            }
        }
        Ok(workload)
    }

    /// Tells the tasks to issue nothing more, waits up to `deadline` for every write already
    /// issued to resolve, and returns what was written. Writes still unresolved at the deadline
    /// are left as attempted (their tasks are stopped).
    pub async fn finish(self, deadline: Duration) -> Records {
        self.finish_unless(deadline, || false).await
    }

    /// As [`Workload::finish`], but stops waiting as soon as `dead()` says the clients can no
    /// longer answer.
    pub async fn finish_unless(mut self, deadline: Duration, dead: impl Fn() -> bool) -> Records {
        const POLL: Duration = Duration::from_millis(100);
        let _ = self.stop.send(true);
        let until = tokio::time::Instant::now() + deadline;
        let mut all = Records::default();
        for (handle, records) in std::mem::take(&mut self.tasks) {
            let abort = handle.abort_handle();
            tokio::pin!(handle);
            loop {
                if tokio::time::Instant::now() >= until || dead() {
                    abort.abort();
                    break;
                }
                let tick = (tokio::time::Instant::now() + POLL).min(until);
                tokio::select! {
                    _ = &mut handle => break,
                    () = tokio::time::sleep_until(tick) => {}
                }
            }
            let records = std::mem::take(&mut *records.lock().unwrap_or_else(|p| p.into_inner()));
            all.extend(records);
        }
        all
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.connections.clear();
        if let Some(runtime) = self.runtime.take() {
            // Not a plain drop: that would block, and this may run on the driver's runtime.
            runtime.shutdown_background();
        }
    }
}

async fn run_task(context: TaskContext) {
    let mut rng = SmallRng::seed_from_u64(context.seed);
    while !*context.stop.borrow() {
        let t = rng.random_range(0..context.tables.len());
        let n = GROUP_ROWS[rng.random_range(0..GROUP_ROWS.len())];
        // Queueing a write may block this thread while the client's buffer is full, and the
        // client's sender, which frees it, runs on this runtime: let it move elsewhere.
        let pending = tokio::task::block_in_place(|| match &context.writers[t] {
            TableWriter::Log(writer) => issue_log_group(&context, t, writer, n),
            TableWriter::Pk(writer) => {
                let op = if rng.random_bool(0.8) {
                    PkOp::Upsert
                } else {
                    PkOp::Delete
                };
                issue_pk_group(&context, t, writer, op, n, &mut rng)
            }
            TableWriter::PkPartial(writer) => {
                issue_pk_group(&context, t, writer, PkOp::Partial, n, &mut rng)
            }
        });
        let refused_at_once = pending.len() < n;
        await_group(&context, pending).await;
        if !refused_at_once {
            tokio::task::yield_now().await;
            continue;
        }
        // The client refused writes without sending them. fluss-rs 1.0 forgets every table
        // when it re-initializes its metadata from the bootstrap server (after `silt up` was
        // unreachable), then refuses writes with TableNotExist until the table is looked up
        // again: do what an application would, and look it up. Back off either way rather than
        // spin, which would hold a runtime thread.
        if context.table_unknown.swap(false, Ordering::Relaxed) {
            let path = TablePath::new(DB, &context.tables[t].name);
            let _ = context.metadata.update_table_metadata(&path).await;
            context
                .records
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .table_lookups += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A write in flight: whether it is a log row or a primary-key op, its index in the task's
/// records, and its future.
type Pending = Vec<(bool, usize, WriteResultFuture)>;

fn now_us(epoch: Instant) -> u64 {
    epoch.elapsed().as_micros() as u64
}

fn issue_log_group(context: &TaskContext, t: usize, writer: &AppendWriter, n: usize) -> Pending {
    let spec = &context.tables[t];
    let mut pending = Vec::with_capacity(n);
    let mut records = context.records.lock().unwrap_or_else(|p| p.into_inner());
    // One range per group, so a group's rows have consecutive ids.
    let first = context.next_id.fetch_add(n as i64, Ordering::Relaxed);
    for id in first..first + n as i64 {
        let payload = format!("{}-{id}", spec.name);
        let mut row = GenericRow::new(3 + usize::from(spec.day.is_some()));
        row.set_field(0, id);
        row.set_field(1, (id % 1000) as i32);
        row.set_field(2, payload.as_str());
        if let Some(day) = &spec.day {
            row.set_field(3, day.as_str());
        }
        let index = records.log.len();
        records.log.push(LogWrite {
            table: t,
            id,
            origin: context.origin,
            stamp: Stamp::issued(context.epoch),
        });
        match writer.append(&row) {
            Ok(future) => pending.push((true, index, future)),
            Err(e) => {
                records.log[index].stamp.refused = true;
                refused_at_once(context, &mut records, &e);
            }
        }
    }
    pending
}

fn issue_pk_group(
    context: &TaskContext,
    t: usize,
    writer: &UpsertWriter,
    op: PkOp,
    n: usize,
    rng: &mut SmallRng,
) -> Pending {
    let day = context.tables[t].day.as_deref();
    let mut pending = Vec::with_capacity(n);
    let mut records = context.records.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..n {
        let key = rng.random_range(0..context.pk_keys);
        let ver = context.next_ver.fetch_add(1, Ordering::Relaxed);
        let note = format!("note-{ver}");
        let mut row = GenericRow::new(4 + usize::from(day.is_some()));
        row.set_field(0, key);
        row.set_field(1, ver);
        row.set_field(2, rng.random_range(-1000i64..1000));
        if op != PkOp::Partial {
            row.set_field(3, note.as_str());
        }
        if let Some(day) = day {
            row.set_field(4, day);
        }
        let index = records.pk.len();
        records.pk.push(PkWrite {
            table: t,
            key,
            ver,
            op,
            origin: context.origin,
            stamp: Stamp::issued(context.epoch),
        });
        let future = match op {
            PkOp::Delete => writer.delete(&row),
            PkOp::Upsert | PkOp::Partial => writer.upsert(&row),
        };
        match future {
            Ok(future) => pending.push((false, index, future)),
            Err(e) => {
                records.pk[index].stamp.refused = true;
                refused_at_once(context, &mut records, &e);
            }
        }
    }
    pending
}

fn refused_at_once(context: &TaskContext, records: &mut Records, e: &fluss::error::Error) {
    if e.api_error() == Some(FlussError::TableNotExist) {
        context.table_unknown.store(true, Ordering::Relaxed);
    }
    *records
        .errors
        .entry(first_line(&e.to_string()))
        .or_default() += 1;
}

/// Waits for every write of a group, stamping each acknowledgement as its own future resolves.
async fn await_group(context: &TaskContext, pending: Pending) {
    let mut futures: FuturesUnordered<_> = pending
        .into_iter()
        .map(|(log, index, future)| async move { (log, index, future.await) })
        .collect();
    while let Some((log, index, result)) = futures.next().await {
        let now = now_us(context.epoch);
        let mut records = context.records.lock().unwrap_or_else(|p| p.into_inner());
        let stamp = if log {
            records.log.get_mut(index).map(|w| &mut w.stamp)
        } else {
            records.pk.get_mut(index).map(|w| &mut w.stamp)
        };
        // Taken by `Workload::finish` while this task, aborted, still ran: the write stays
        // unresolved there (attempted, maybe stored).
        let Some(stamp) = stamp else {
            return;
        };
        match result {
            Ok(()) => stamp.acked_us = Some(now),
            Err(e) => {
                stamp.refused = true;
                *records
                    .errors
                    .entry(first_line(&e.to_string()))
                    .or_default() += 1;
            }
        }
    }
}

pub(super) fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    line.chars().take(160).collect()
}

/// A log write the server refused, at least in part.
pub(super) struct ProbeRefused {
    /// Per row: acknowledged anyway (another bucket's batch may have fit).
    pub acked: Vec<bool>,
    pub error: String,
}

/// One write of `ids` to a log table through a client that neither retries nor deduplicates,
/// to see what the server answers. `Ok(None)`: acknowledged; `Ok(Some(_))`: refused, maybe in
/// part.
pub(super) async fn probe_write(
    bootstrap: &str,
    table: &str,
    ids: &[i64],
    payload_bytes: usize,
) -> Result<Option<ProbeRefused>> {
    let config = fluss::config::Config {
        bootstrap_servers: bootstrap.to_string(),
        writer_retries: 0,
        writer_enable_idempotence: false,
        ..Default::default()
    };
    let connection = FlussConnection::new(config).await?;
    let table = connection.get_table(&TablePath::new(DB, table)).await?;
    let appender = table.new_append()?.create_writer()?;
    let mut results = Vec::with_capacity(ids.len());
    for &id in ids {
        let payload = format!("probe-{id}-{}", "x".repeat(payload_bytes));
        let mut row = GenericRow::new(3);
        row.set_field(0, id);
        row.set_field(1, (id % 1000) as i32);
        row.set_field(2, payload.as_str());
        results.push(appender.append(&row)?);
    }
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        let flushed = appender.flush().await;
        (flushed, futures::future::join_all(results).await)
    })
    .await;
    let Ok((flushed, results)) = waited else {
        return Ok(Some(ProbeRefused {
            acked: vec![false; ids.len()],
            error: "not answered within 10 s".into(),
        }));
    };
    let mut error = flushed.err().map(|e| format!("flush: {e}"));
    let acked = results
        .into_iter()
        .map(|r| match r {
            Ok(()) => true,
            Err(e) => {
                error.get_or_insert_with(|| format!("write refused: {e}"));
                false
            }
        })
        .collect();
    Ok(error.map(|error| ProbeRefused { acked, error }))
}
