//! Partitioned tables in the trials (issue 17): in a seeded share of the trials, beside the
//! random tables, a day-partitioned lake-enabled log table (`plog`) and a partitioned
//! primary-key table (`ppk`, keyed by `id` and the day), written through fluss-rs into several
//! partitions while the faults strike, with partitions created, dropped and created again
//! under a dropped name between and around the faults.
//!
//! Every partition is written by its own incarnation of the workload ([`Workload`]: its own
//! client, so its own connection and writer id, with ids and `ver`s from a range of its own):
//! fluss-rs caches a partition's id by name for as long as a connection lives, so a partition
//! created again under a dropped name is written through a fresh one, as an application
//! would. A partition is dropped the way day partitions are: its writers stop first (their
//! writes resolve), then its rows are read back from the hot store (the last time they can
//! be), then it is dropped, right away or once the lake covers it.
//!
//! The checks, per partition (each incarnation of a day apart):
//! - the hot store against what was written, as for any table ([`super::judge_view`]); a
//!   dropped partition as it was read just before its drop;
//! - `silt verify` of each table: MATCH over the partitions the hot store still has;
//! - the lake at its newest version, read directly: every row of a log partition once, at the
//!   (bucket, offset) the hot store gave it, every offset below the partition's txn offset
//!   present (no gap), no id in two places of the lake; a primary-key partition holds the last
//!   image per key of its changelog up to its txn offsets, once, each a `ver` it wrote. A live partition's txn offsets
//!   reach the hot high watermarks; a dropped partition's rows tiered before its drop stay
//!   (its txn offsets never go back), and those are exactly the rows it held, once; except in
//!   the primary-key table once the day is created again: a primary-key lake holds one row per
//!   key, so the dropped partition's rows leave it (all of them at once, before the new
//!   partition's first commit);
//! - hot retention never moved a partition bucket's log start past its lake txn offset.
//!
//! fluss-rs 1.0's sender may panic and leave a client dead ([`super::clients`]): its partition
//! then gets a new client, and the dead one's unresolved writes count as refused. The summary
//! counts these panics.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use fluss::metadata::{DataTypes, PartitionSpec, TableDescriptor, TablePath};
use fluss::rpc::message::OffsetSpec;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use silt_connectors::changelog::BucketKey;
use silt_connectors::delta::{LakeOffsets, read_lake_offsets};
use silt_jobs::tiering::{DATALAKE_ENABLED, DATALAKE_FRESHNESS};
use silt_jobs::verify::read_lake;

use super::clients::{
    PARTITION_THREADS, Writers, await_quiet, note_unanswered, watch_client_panics,
};
use super::lake_check::{
    LakeRow, Problems, check_log_rows, check_pk_rows, check_txn, lake_rows, plant_copy,
};
use super::workload::{ClientPlan, Records, Workload, WorkloadPlan};
use super::{
    DB, HotView, PARTITION_COLUMN, TableSpec, Trial, TrialsOptions, Written, judge_view, lake_root,
    trial_columns,
};

/// The partitioned log table and primary-key table.
const LOG_TABLE: &str = "plog";
const PK_TABLE: &str = "ppk";
/// The share of seeds that have partitioned tables: half, which keeps a run of the suite
/// about as long as before (see the module's figures in bench/tests/trials.rs).
const SHARE: f64 = 0.5;
/// The ids and `ver`s of incarnation k of a partition are `FIRST_ID + k * ID_SPAN ..`: apart
/// from the main workload's (from 0), the probes' (from 2^40) and every other incarnation's.
const FIRST_ID: i64 = 1 << 44;
/// (Each client of an incarnation writes a range of its own inside it: [`Writers`].)
const ID_SPAN: i64 = 1 << 32;
const _: () = assert!(super::clients::CLIENT_SPAN * super::clients::CLIENTS_MAX as i64 <= ID_SPAN);
/// How long a drop planned for a tiered partition waits for the lake to cover it.
const TIERED_WAIT: Duration = Duration::from_secs(20);

/// What happens to the partitions at one moment of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A partition for the next day, written from now on.
    Create,
    /// The oldest partition written stops being written (it stays, and is tiered).
    Close,
    /// The oldest live partition stops being written and is dropped: once the lake covers it
    /// (`tiered`), or at once, with rows the lake may not have yet.
    Drop { tiered: bool },
    /// The day dropped last is created again (a new partition under the old name) and written.
    Recreate,
}

impl Step {
    fn describe(self) -> &'static str {
        match self {
            Step::Create => "create",
            Step::Close => "close",
            Step::Drop { tiered: true } => "drop once tiered",
            Step::Drop { tiered: false } => "drop",
            Step::Recreate => "create a dropped day again",
        }
    }
}

/// A seed's partitioned tables and what happens to their partitions, drawn from a stream of
/// its own (the rest of the seed's plan is what it was before partitions were drawn).
pub(super) struct PartitionPlan {
    log_buckets: i32,
    pk_buckets: i32,
    pk_keys: i64,
    freshness_ms: [u64; 2],
    /// The client every incarnation of a partition writes through (each its own).
    client: ClientPlan,
    /// Per phase: its steps, and whether they come before the phase's fault (else after it).
    phases: Vec<(Vec<Step>, bool)>,
    rng: SmallRng,
}

impl PartitionPlan {
    pub fn draw(seed: u64, phases: i32) -> Option<PartitionPlan> {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x9A27_0017);
        if !rng.random_bool(SHARE) {
            return None;
        }
        let mut client = ClientPlan::draw(1, &mut rng);
        client.tasks = rng.random_range(2..4);
        let drop_step = |rng: &mut SmallRng| Step::Drop {
            tiered: rng.random_bool(0.5),
        };
        // The first two phases drop a partition and create its day again; the others draw.
        let phases = (0..phases)
            .map(|phase| {
                let steps = match phase {
                    0 => vec![Step::Create, drop_step(&mut rng)],
                    1 => vec![Step::Recreate],
                    _ => match rng.random_range(0..5) {
                        0 => vec![Step::Create],
                        1 => vec![Step::Close],
                        2 => vec![drop_step(&mut rng)],
                        3 => vec![Step::Recreate],
                        _ => vec![Step::Create, drop_step(&mut rng)],
                    },
                };
                (steps, rng.random_bool(0.5))
            })
            .collect();
        Some(PartitionPlan {
            log_buckets: rng.random_range(1..4),
            pk_buckets: rng.random_range(1..4),
            pk_keys: [20, 150][rng.random_range(0..2)],
            freshness_ms: [rng.random_range(200..700), rng.random_range(200..700)],
            client,
            phases,
            rng,
        })
    }

    fn describe(&self) -> String {
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(steps, before)| {
                let steps: Vec<&str> = steps.iter().map(|s| s.describe()).collect();
                format!(
                    "{} {} the fault",
                    steps.join(" + "),
                    if *before { "before" } else { "after" }
                )
            })
            .collect();
        format!(
            "partitioned tables: {LOG_TABLE} ({} buckets), {PK_TABLE} ({} buckets, {} keys per \
             partition); each partition written by {}; phases: {}",
            self.log_buckets,
            self.pk_buckets,
            self.pk_keys,
            self.client.describe(),
            phases.join("; ")
        )
    }
}

/// What the seeds with partitioned tables did with them, and what was checked.
#[derive(Debug, Default, Clone)]
pub(super) struct PartitionCounts {
    pub seeds: u64,
    pub created: u64,
    pub dropped: u64,
    /// Partitions created under the name of a dropped one.
    pub recreated: u64,
    /// Drops that waited for the lake to cover the partition first.
    pub dropped_tiered: u64,
    /// Rows and primary-key ops acknowledged to partitions.
    pub acked: u64,
    /// Lake rows checked against the hot store, of live and of dropped partitions.
    pub lake_rows_live: u64,
    pub lake_rows_dropped: u64,
    /// Partition buckets whose log start hot retention had moved.
    pub buckets_cut: u64,
    /// Clients of partitions whose fluss-rs sender panicked (see the module's doc).
    pub client_panics: u64,
    /// Dropped partitions of the primary-key table whose rows left its lake once their day was
    /// created again (one row per key).
    pub retired: u64,
}

impl PartitionCounts {
    pub fn add(&mut self, other: &PartitionCounts) {
        self.seeds += other.seeds;
        self.created += other.created;
        self.dropped += other.dropped;
        self.recreated += other.recreated;
        self.dropped_tiered += other.dropped_tiered;
        self.acked += other.acked;
        self.lake_rows_live += other.lake_rows_live;
        self.lake_rows_dropped += other.lake_rows_dropped;
        self.buckets_cut += other.buckets_cut;
        self.client_panics += other.client_panics;
        self.retired += other.retired;
    }

    pub fn describe(&self) -> String {
        format!(
            "{} seeds; {} partitions created, {} dropped ({} once tiered), {} created again \
             under a dropped name; {} rows and ops acknowledged; lake rows checked: {} in live \
             partitions, {} in dropped ones; {} partition buckets had their log start moved; \
             {} clients replaced after fluss-rs 1.0's sender panicked; {} dropped primary-key \
             partitions left the lake when their day was created again",
            self.seeds,
            self.created,
            self.dropped,
            self.dropped_tiered,
            self.recreated,
            self.acked,
            self.lake_rows_live,
            self.lake_rows_dropped,
            self.buckets_cut,
            self.client_panics,
            self.retired
        )
    }
}

/// What a dropped partition held just before its drop.
struct Dropped {
    /// Per table (log, primary key): the hot store's view of the partition.
    views: [HotView; 2],
    /// Per table: the lake's txn offsets of the partition's buckets just before the drop.
    lake: [BTreeMap<i32, i64>; 2],
}

/// One partition: a day created once (a day created again is another incarnation).
struct Incarnation {
    day: String,
    /// Its partition id in each table (log, primary key).
    ids: [i64; 2],
    /// Its workloads' ids and `ver`s start here.
    first_id: i64,
    /// Its clients, one at a time, and what they wrote.
    writers: Writers,
    dropped: Option<Dropped>,
}

impl Incarnation {
    fn name(&self, table: usize) -> String {
        let t = [LOG_TABLE, PK_TABLE][table];
        format!("{t}[{}, p{}]", self.day, self.ids[table])
    }

    fn live(&self) -> bool {
        self.dropped.is_none()
    }
}

/// The partitioned tables of a running trial.
pub(super) struct Partitions {
    plan: PartitionPlan,
    /// The log table and the primary-key table.
    specs: [TableSpec; 2],
    table_ids: [i64; 2],
    incarnations: Vec<Incarnation>,
    /// Days created so far.
    days: u32,
    epoch: Instant,
    /// The incarnations whose workloads [`Partitions::take_open`] took.
    taken: Vec<usize>,
}

impl Partitions {
    /// Creates the tables and two partitions, and starts writing them.
    pub async fn start(
        trial: &mut Trial<'_>,
        plan: PartitionPlan,
        epoch: Instant,
    ) -> Result<Partitions> {
        watch_client_panics();
        trial.note(plan.describe());
        let spec = |name: &str, primary_key: bool, buckets: i32| TableSpec {
            name: name.to_string(),
            primary_key,
            buckets,
            day: None,
        };
        let specs = [
            spec(LOG_TABLE, false, plan.log_buckets),
            spec(PK_TABLE, true, plan.pk_buckets),
        ];
        let mut table_ids = [0; 2];
        for (t, spec) in specs.iter().enumerate() {
            let descriptor = descriptor(spec, plan.freshness_ms[t])?;
            let path = TablePath::new(DB, &spec.name);
            table_ids[t] = trial
                .with_admin(&format!("creating {DB}.{}", spec.name), async |admin| {
                    admin.create_table(&path, &descriptor, true).await?;
                    Ok(admin.get_table_info(&path).await?.table_id)
                })
                .await?;
        }
        let mut partitions = Partitions {
            plan,
            specs,
            table_ids,
            incarnations: Vec::new(),
            days: 0,
            epoch,
            taken: Vec::new(),
        };
        trial.outcome.partitioned.seeds = 1;
        for _ in 0..2 {
            partitions.create(trial).await?;
        }
        Ok(partitions)
    }

    /// The tables' specs (no day: the whole table).
    pub fn specs(&self) -> &[TableSpec] {
        &self.specs
    }

    /// Replaces every open partition's client that died (see the module's doc).
    async fn revive(&mut self, trial: &mut Trial<'_>) -> Result<()> {
        for i in self.open().collect::<Vec<_>>() {
            if !self.incarnations[i].writers.replaceable() {
                continue;
            }
            let day = self.incarnations[i].day.clone();
            let given_up = self.incarnations[i].writers.retire(trial).await?;
            trial.outcome.partitioned.client_panics += 1;
            trial.note(format!(
                "partition {day}: fluss-rs's sender panicked; {given_up} writes in flight count \
                 as refused, a new client writes on"
            ));
            let workload = self.start_client(trial, i).await?;
            self.incarnations[i].writers.started(workload);
        }
        Ok(())
    }

    /// Starts the next client of incarnation `i` (its own connection and id range).
    async fn start_client(&mut self, trial: &mut Trial<'_>, i: usize) -> Result<Workload> {
        let inc = &mut self.incarnations[i];
        let day = inc.day.clone();
        let prefix = format!("{PARTITION_THREADS}{i}-");
        let (thread_name, first_id) = inc.writers.next_client(&prefix, inc.first_id);
        let tables: Vec<TableSpec> = self
            .specs
            .iter()
            .map(|s| TableSpec {
                day: Some(day.clone()),
                ..s.clone()
            })
            .collect();
        let clients = [self.plan.client.clone()];
        let plan = WorkloadPlan {
            tables: &tables,
            clients: &clients,
            pk_keys: self.plan.pk_keys,
            first_id,
            thread_name,
        };
        let epoch = self.epoch;
        let seed: u64 = self.plan.rng.random();
        let bootstrap = trial.setup.bootstrap();
        trial
            .admin(&format!("starting the writers of partition {day}"), || {
                let (bootstrap, plan) = (&bootstrap, &plan);
                async move {
                    let mut rng = SmallRng::seed_from_u64(seed);
                    Workload::start(bootstrap, plan, epoch, &mut rng).await
                }
            })
            .await
    }

    /// Runs the steps of `phase` that come before its fault (`before`) or after it.
    pub async fn step(&mut self, trial: &mut Trial<'_>, phase: usize, before: bool) -> Result<()> {
        let Some((steps, when)) = self.plan.phases.get(phase).cloned() else {
            return Ok(());
        };
        self.revive(trial).await?;
        if when != before {
            return Ok(());
        }
        for step in steps {
            match step {
                Step::Create => self.create(trial).await?,
                Step::Close => {
                    let open: Vec<usize> = self.open().collect();
                    if open.len() > 1 {
                        self.close(trial, open[0]).await?;
                    }
                }
                Step::Drop { tiered } => {
                    // The oldest live partition, unless it is the only one written.
                    let open = self.open().count();
                    let target = self
                        .incarnations
                        .iter()
                        .position(|i| i.live() && (!i.writers.open() || open > 1));
                    if let Some(i) = target {
                        self.drop(trial, i, tiered).await?;
                    }
                }
                Step::Recreate => {
                    let dropped = self.incarnations.iter().rev().find(|i| {
                        !i.live() && !self.incarnations.iter().any(|j| j.live() && j.day == i.day)
                    });
                    if let Some(day) = dropped.map(|i| i.day.clone()) {
                        self.create_day(trial, day, true).await?;
                    }
                }
            }
        }
        Ok(())
    }

    fn open(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.incarnations.len()).filter(|i| self.incarnations[*i].writers.open())
    }

    async fn create(&mut self, trial: &mut Trial<'_>) -> Result<()> {
        self.days += 1;
        let day = format!("2026-12-{:02}", self.days);
        self.create_day(trial, day, false).await
    }

    /// Creates the partition `day` in both tables and starts its workload.
    async fn create_day(&mut self, trial: &mut Trial<'_>, day: String, again: bool) -> Result<()> {
        let mut ids = [0; 2];
        for (t, spec) in self.specs.iter().enumerate() {
            let path = TablePath::new(DB, &spec.name);
            let what = format!("creating partition {day} of {DB}.{}", spec.name);
            ids[t] = trial
                .with_admin(&what, async |admin| {
                    admin.create_partition(&path, &spec_of(&day), true).await?;
                    let infos = admin.list_partition_infos(&path).await?;
                    infos
                        .iter()
                        .find(|p| p.get_partition_name() == day)
                        .map(|p| p.get_partition_id())
                        .ok_or_else(|| anyhow!("partition {day} is not listed"))
                })
                .await?;
        }
        let k = self.incarnations.len();
        self.incarnations.push(Incarnation {
            day: day.clone(),
            ids,
            first_id: FIRST_ID + k as i64 * ID_SPAN,
            writers: Writers::default(),
            dropped: None,
        });
        let workload = self.start_client(trial, k).await?;
        self.incarnations[k].writers.started(workload);
        let counts = &mut trial.outcome.partitioned;
        counts.created += 1;
        counts.recreated += u64::from(again);
        trial.note(format!(
            "partition {day} created{} (p{} in {LOG_TABLE}, p{} in {PK_TABLE})",
            if again { " again" } else { "" },
            ids[0],
            ids[1]
        ));
        Ok(())
    }

    /// Stops writing incarnation `i` and waits for its writes to resolve; answers whether its
    /// client died with writes in flight.
    async fn close(&mut self, trial: &mut Trial<'_>, i: usize) -> Result<bool> {
        let given_up = self.incarnations[i].writers.close(trial).await?;
        self.count_panic(trial, i, given_up);
        Ok(given_up.is_some())
    }

    /// Counts and notes the panic of incarnation `i`'s last client, when it died with
    /// `given_up` writes unresolved (which count as refused).
    fn count_panic(&self, trial: &mut Trial<'_>, i: usize, given_up: Option<u64>) {
        let Some(given_up) = given_up else {
            return;
        };
        trial.outcome.partitioned.client_panics += 1;
        trial.note(format!(
            "partition {}: fluss-rs's sender panicked; {given_up} writes in flight count as \
             refused",
            self.incarnations[i].day
        ));
    }

    /// Stops writing incarnation `i`, reads what the hot store holds of it (once the lake
    /// covers it when `tiered`), and drops it.
    async fn drop(&mut self, trial: &mut Trial<'_>, i: usize, tiered: bool) -> Result<()> {
        let died = self.close(trial, i).await?;
        trial.await_acked_visible().await?;
        let inc = &self.incarnations[i];
        let (day, ids) = (inc.day.clone(), inc.ids);
        if died {
            let bootstrap = trial.setup.bootstrap();
            let high = async || {
                let log = high_watermarks(&bootstrap, &self.specs[0], &day).await?;
                Ok(vec![
                    log,
                    high_watermarks(&bootstrap, &self.specs[1], &day).await?,
                ])
            };
            await_quiet(trial, high).await?;
        }
        let covered = tiered && self.wait_tiered(trial, i).await?;
        let bootstrap = trial.setup.bootstrap();
        let data = trial.setup.data.clone();
        let mut views = Vec::new();
        let mut lake = Vec::new();
        for (t, spec) in self.specs.iter().enumerate() {
            let table_id = self.table_ids[t];
            let what = format!("reading partition {day} of {DB}.{}", spec.name);
            let view = trial
                .admin(&what, || {
                    let (bootstrap, data, day) = (&bootstrap, &data, &day);
                    async move {
                        let connection = silt_connectors::fluss::connect(bootstrap).await?;
                        let partition = Some((ids[t], day.as_str()));
                        HotView::read(data, &connection, bootstrap, spec, table_id, partition).await
                    }
                })
                .await?;
            views.push(view);
            let offsets = self.lake_offsets(trial, t, &[ids[t]]).await?;
            lake.push(partition_offsets(offsets.as_ref(), ids[t]));
        }
        for spec in &self.specs {
            let path = TablePath::new(DB, &spec.name);
            let what = format!("dropping partition {day} of {DB}.{}", spec.name);
            trial
                .with_admin(&what, async |admin| {
                    admin.drop_partition(&path, &spec_of(&day), true).await?;
                    Ok(())
                })
                .await?;
        }
        let held: Vec<String> = views
            .iter()
            .zip(&lake)
            .map(|(v, l)| {
                let hw: i64 = v.read_up_to.values().sum();
                let tiered: i64 = l.values().sum();
                format!("{tiered} of {hw} offsets tiered")
            })
            .collect();
        trial.note(format!(
            "partition {day} dropped{} ({LOG_TABLE}: {}; {PK_TABLE}: {})",
            if !tiered {
                ""
            } else if covered {
                " once the lake covered it"
            } else {
                " (the lake did not cover it in time)"
            },
            held[0],
            held[1]
        ));
        let counts = &mut trial.outcome.partitioned;
        counts.dropped += 1;
        counts.dropped_tiered += u64::from(covered);
        let [log, pk]: [HotView; 2] = views.try_into().map_err(|_| anyhow!("two views"))?;
        let [log_lake, pk_lake]: [BTreeMap<i32, i64>; 2] =
            lake.try_into().map_err(|_| anyhow!("two lakes"))?;
        self.incarnations[i].dropped = Some(Dropped {
            views: [log, pk],
            lake: [log_lake, pk_lake],
        });
        Ok(())
    }

    /// Waits (up to [`TIERED_WAIT`]) until the lake's txn offsets of incarnation `i` reach its
    /// high watermarks in both tables; whether they did.
    async fn wait_tiered(&self, trial: &mut Trial<'_>, i: usize) -> Result<bool> {
        let until = Instant::now() + TIERED_WAIT;
        let inc = &self.incarnations[i];
        let (day, ids) = (inc.day.clone(), inc.ids);
        let bootstrap = trial.setup.bootstrap();
        while Instant::now() < until {
            trial.reap().await?;
            let mut covered = true;
            for (t, spec) in self.specs.iter().enumerate() {
                let high = high_watermarks(&bootstrap, spec, &day).await;
                let lake = self.lake_offsets(trial, t, &[ids[t]]).await;
                let (Ok(high), Ok(lake)) = (high, lake) else {
                    covered = false;
                    break;
                };
                let lake = partition_offsets(lake.as_ref(), ids[t]);
                covered &= high
                    .iter()
                    .all(|(b, hw)| lake.get(b).copied().unwrap_or(0) >= *hw);
            }
            if covered {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(false)
    }

    /// The lake's txn offsets of the buckets of `partitions` in table `t` (none without a lake).
    async fn lake_offsets(
        &self,
        trial: &Trial<'_>,
        t: usize,
        partitions: &[i64],
    ) -> Result<Option<LakeOffsets>> {
        let spec = &self.specs[t];
        let uri = format!("{}/{DB}/{}", lake_root(&trial.setup.data), spec.name);
        let buckets: Vec<BucketKey> = partitions
            .iter()
            .flat_map(|p| (0..spec.buckets).map(|b| BucketKey::partition(*p, b)))
            .collect();
        read_lake_offsets(
            &uri,
            &HashMap::new(),
            &self.table_ids[t].to_string(),
            &buckets,
        )
        .await
        .with_context(|| format!("reading the lake offsets of {}", spec.name))
    }

    /// The workloads still writing, taken to be finished with the trial's own, each with the
    /// thread name that tells whether its client died.
    pub fn take_open(&mut self) -> Vec<(Workload, String)> {
        self.taken = self.open().collect();
        let taken = self.taken.clone();
        taken
            .into_iter()
            .filter_map(|i| self.incarnations[i].writers.take())
            .collect()
    }

    /// What the workloads [`Partitions::take_open`] took wrote, in the same order.
    pub fn finished(&mut self, trial: &mut Trial<'_>, records: Vec<Records>) {
        for (i, records) in std::mem::take(&mut self.taken).into_iter().zip(records) {
            let given_up = self.incarnations[i].writers.collect(records);
            self.count_panic(trial, i, given_up);
        }
        let records = self.incarnations.iter().map(|i| &i.writers.records);
        note_unanswered(trial, "partitions", records);
        trial.outcome.partitioned.acked = self.acked();
    }

    /// Rows and ops acknowledged to every partition.
    pub fn acked(&self) -> u64 {
        self.incarnations
            .iter()
            .map(|i| i.writers.records.acked())
            .sum()
    }

    /// Tests of the checker (`--plant`): commits a data file of a dropped partition of the log
    /// table's lake a second time (a copy under a new name, added by a Delta commit of its own),
    /// which `silt verify` cannot see (it leaves dropped partitions out) and the lake check
    /// must report as rows twice. Answers the rows planted.
    pub async fn plant(&self, trial: &mut Trial<'_>) -> Result<u64> {
        let dropped: Vec<String> = self
            .incarnations
            .iter()
            .filter(|i| !i.live())
            .map(|i| i.ids[0].to_string())
            .collect();
        let dir = trial.setup.data.join("lake").join(DB).join(LOG_TABLE);
        let pick = |p: Option<&str>| p.is_some_and(|p| dropped.iter().any(|d| d == p));
        let Some(planted) = plant_copy(&dir, &dir, pick).await? else {
            trial.note(format!(
                "planted nothing in {LOG_TABLE}'s lake: no dropped partition has a file"
            ));
            return Ok(0);
        };
        trial.note(format!(
            "planted: {} of {LOG_TABLE} committed again as {} ({} rows)",
            planted.file, planted.copy, planted.rows
        ));
        Ok(planted.rows)
    }

    /// The checks of the module's contract, once the faults are over and every write resolved.
    pub async fn check(&self, trial: &mut Trial<'_>, options: &TrialsOptions) -> Result<()> {
        for spec in &self.specs {
            super::verify_caught_up(trial, &spec.name, options).await?;
        }
        let bootstrap = trial.setup.bootstrap();
        let data = trial.setup.data.clone();
        // Live partitions as the hot store holds them now; dropped ones as it held them.
        let mut live: Vec<[Option<HotView>; 2]> = Vec::new();
        for inc in &self.incarnations {
            let mut views = [None, None];
            if inc.live() {
                for (t, spec) in self.specs.iter().enumerate() {
                    let table_id = self.table_ids[t];
                    let partition = Some((inc.ids[t], inc.day.as_str()));
                    let connection = silt_connectors::fluss::connect(&bootstrap).await?;
                    let view =
                        HotView::read(&data, &connection, &bootstrap, spec, table_id, partition)
                            .await
                            .with_context(|| format!("reading {}", inc.name(t)))?;
                    views[t] = Some(view);
                }
            }
            live.push(views);
        }
        for (inc, views) in self.incarnations.iter().zip(&live) {
            for (t, written) in written(inc).iter().enumerate() {
                let view = self.view(inc, views, t);
                trial.outcome.partitioned.buckets_cut +=
                    view.log_start.values().filter(|s| **s > 0).count() as u64;
                judge_view(trial, &inc.name(t), t == 1, view, written)?;
            }
        }
        for t in 0..2 {
            self.check_lake(trial, t, &live).await?;
        }
        Ok(())
    }

    fn view<'a>(
        &self,
        inc: &'a Incarnation,
        live: &'a [Option<HotView>; 2],
        t: usize,
    ) -> &'a HotView {
        match &inc.dropped {
            Some(d) => &d.views[t],
            None => live[t].as_ref().expect("a live partition's view was read"),
        }
    }

    /// The lake of table `t` at its newest version, partition by partition, against what the
    /// hot store held (see the module's contract).
    /// Table `t` has no lake: a failure if any of its partitions holds rows.
    fn check_no_lake(&self, trial: &mut Trial<'_>, t: usize, live: &[[Option<HotView>; 2]]) {
        let held = |(i, views): (&Incarnation, &[Option<HotView>; 2])| {
            self.view(i, views, t).read_up_to.values().any(|hw| *hw > 0)
        };
        if self.incarnations.iter().zip(live).any(held) {
            trial.outcome.fail("partitioned lake: missing");
            let name = &self.specs[t].name;
            trial.note(format!("{name}: no lake, yet its partitions hold rows"));
        }
    }

    async fn check_lake(
        &self,
        trial: &mut Trial<'_>,
        t: usize,
        live: &[[Option<HotView>; 2]],
    ) -> Result<()> {
        let spec = &self.specs[t];
        let ids: Vec<i64> = self.incarnations.iter().map(|i| i.ids[t]).collect();
        let Some(lake) = self.lake_offsets(trial, t, &ids).await? else {
            self.check_no_lake(trial, t, live);
            return Ok(());
        };
        let uri = format!("{}/{DB}/{}", lake_root(&trial.setup.data), spec.name);
        let rows = lake_rows(
            &read_lake(&uri, &HashMap::new(), lake.delta_version).await?,
            t == 1,
        )?;
        let mut by_partition: HashMap<i64, Vec<LakeRow>> = HashMap::new();
        for row in rows {
            by_partition.entry(row.partition).or_default().push(row);
        }
        let mut problems = Problems::new("partitioned lake");
        let dropped: BTreeSet<i64> = self
            .incarnations
            .iter()
            .filter(|i| !i.live())
            .map(|i| i.ids[t])
            .collect();
        if t == 0 {
            problems.log_rows_twice(&spec.name, &by_partition, &dropped);
        }
        for partition in by_partition.keys().filter(|p| !ids.contains(p)) {
            problems.push(
                "rows of a partition no one created",
                format!(
                    "{}: {} rows of p{partition}",
                    spec.name,
                    by_partition[partition].len()
                ),
            );
        }
        for (k, views) in live.iter().enumerate() {
            let p = self.incarnations[k].ids[t];
            let rows = by_partition.remove(&p).unwrap_or_default();
            let txn = partition_offsets(Some(&lake), p);
            self.check_partition_lake(trial, (k, t), views, &txn, &rows, &mut problems)?;
        }
        problems.report(trial);
        Ok(())
    }

    /// The lake rows `rows` and txn offsets `txn` of incarnation `k` in table `t`.
    ///
    /// A primary-key lake holds one row per key, so once a day dropped from a primary-key table
    /// is created again, the dropped partition's rows leave its lake (in a commit of their own,
    /// before the new partition's first): all of them, or none yet.
    fn check_partition_lake(
        &self,
        trial: &mut Trial<'_>,
        (k, t): (usize, usize),
        views: &[Option<HotView>; 2],
        txn: &BTreeMap<i32, i64>,
        rows: &[LakeRow],
        problems: &mut Problems,
    ) -> Result<()> {
        let inc = &self.incarnations[k];
        let view = self.view(inc, views, t);
        let name = inc.name(t);
        let at_drop = inc.dropped.as_ref().map(|d| &d.lake[t]);
        check_txn(&name, &view.read_up_to, txn, at_drop, problems);
        let own = inc.first_id..inc.first_id + ID_SPAN;
        let day_again = self.incarnations[k + 1..].iter().any(|i| i.day == inc.day);
        let counts = &mut trial.outcome.partitioned;
        if t == 0 {
            check_log_rows(
                &name,
                own,
                Some(view),
                self.specs[t].buckets,
                txn,
                rows,
                problems,
            )?;
        } else if !inc.live() && day_again && rows.is_empty() {
            counts.retired += 1;
        } else {
            check_pk_rows(&name, own, inc.live(), Some(view), txn, rows, problems)?;
        }
        if inc.live() {
            counts.lake_rows_live += rows.len() as u64;
        } else {
            counts.lake_rows_dropped += rows.len() as u64;
        }
        Ok(())
    }
}

/// The txn offsets of partition `partition`'s buckets.
fn partition_offsets(lake: Option<&LakeOffsets>, partition: i64) -> BTreeMap<i32, i64> {
    lake.iter()
        .flat_map(|l| &l.bucket_offsets)
        .filter(|(k, _)| k.partition == Some(partition))
        .map(|(k, o)| (k.bucket, *o))
        .collect()
}

/// What incarnation `inc` wrote to each table.
fn written(inc: &Incarnation) -> [Written; 2] {
    let mut out = [Written::default(), Written::default()];
    let records = &inc.writers.records;
    for w in records.log.iter().filter(|w| w.table == 0) {
        out[0].log.insert(w.id, w.stamp.acked_us.is_some());
        out[0].origins.insert(w.id, (w.origin, w.stamp.acked_us));
    }
    out[1].pk = records
        .pk
        .iter()
        .filter(|w| w.table == 1)
        .copied()
        .collect();
    out
}

async fn high_watermarks(
    bootstrap: &str,
    spec: &TableSpec,
    day: &str,
) -> Result<BTreeMap<i32, i64>> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let ids: Vec<i32> = (0..spec.buckets).collect();
    let listed = connection
        .get_admin()?
        .list_partition_offsets(
            &TablePath::new(DB, &spec.name),
            day,
            &ids,
            OffsetSpec::Latest,
        )
        .await?;
    Ok(ids
        .iter()
        .map(|b| (*b, listed.get(b).copied().unwrap_or(0)))
        .collect())
}

fn spec_of(day: &str) -> PartitionSpec {
    PartitionSpec::new(HashMap::from([(PARTITION_COLUMN, day)]))
}

/// A partitioned table: the day partitions it, and is part of a primary key.
fn descriptor(spec: &TableSpec, freshness_ms: u64) -> Result<TableDescriptor> {
    let columns = trial_columns(spec.primary_key).column(PARTITION_COLUMN, DataTypes::string());
    let schema = if spec.primary_key {
        columns.primary_key(vec!["id", PARTITION_COLUMN])?.build()?
    } else {
        columns.build()?
    };
    let bucket_keys = if spec.primary_key {
        vec!["id".to_string()]
    } else {
        vec![]
    };
    Ok(TableDescriptor::builder()
        .schema(schema)
        .partitioned_by(vec![PARTITION_COLUMN.to_string()])
        .distributed_by(Some(spec.buckets), bucket_keys)
        .property(DATALAKE_ENABLED, "true")
        .property(DATALAKE_FRESHNESS, format!("{freshness_ms}ms"))
        .build()?)
}
