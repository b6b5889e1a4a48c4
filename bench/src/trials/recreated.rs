//! Tables dropped and created again under their name (issue 33): in a seeded share of the
//! trials, beside the random tables, a lake-enabled log table (`rlog`) and primary-key table
//! (`rpk`) are dropped while the other clients write, tiering runs and the faults strike, and
//! created again under the same name, which gives them a new table id: at once, or after a
//! pause longer than tiering's discovery interval. The first phase of such a seed drops and
//! creates again both tables; each later phase draws whether to, and which.
//!
//! An incarnation is one table id. It is written by clients of its own ([`Writers`]: a fresh
//! connection, as fluss-rs caches a table's id by its name for as long as a connection lives),
//! with ids and `ver`s from a range of its own, so a row of one incarnation found in another's
//! hot store or lake says where it came from. A table is dropped as an application would drop
//! it: its writers stop first (their writes resolve), its rows are read back from the hot
//! store (the last time they can be), then it is dropped, at once or once the lake covers it.
//!
//! The checks, per incarnation:
//! - the hot store against what was acknowledged to it, as for any table
//!   ([`super::judge_view`]): none lost, none twice, no row of another incarnation; a dropped
//!   incarnation as it was read just before its drop (then its rows leave the hot store, by
//!   right);
//! - `silt verify` of each table: MATCH for its live incarnation;
//! - the live incarnation's lake at `<lake>/<db>/<table>`, read directly
//!   ([`super::lake_check`]): it names the new table id as its owner, its txn offsets reach the
//!   high watermarks, it holds the hot store's rows below them and no row, id or `ver` of an
//!   older incarnation (the identity bugs of issue 33 were a lake-offset registry and job
//!   sinks keyed by the table's name);
//! - a dropped incarnation's lake, which the next incarnation's tiering job moves aside whole to
//!   `<lake>/__dropped/<db>.<table>-<id>` (`jobs/src/tiering.rs`): in one piece, its txn
//!   offsets never back from where they were at the drop nor past what the hot store held, its
//!   rows those the hot store held there, each once (one image per key of a primary-key table).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fluss::metadata::TablePath;
use fluss::rpc::message::OffsetSpec;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use silt_connectors::changelog::BucketKey;
use silt_connectors::delta::{LakeOffsets, LakeOwner, lake_owner, read_lake_offsets};
use silt_jobs::verify::read_lake;

use super::clients::{TABLE_THREADS, Writers, await_quiet, note_unanswered, watch_client_panics};
use super::lake_check::{
    LakeRow, Problems, check_log_rows, check_pk_rows, check_txn, has_commit, lake_rows, plant_copy,
};
use super::workload::{ClientPlan, Records, Workload, WorkloadPlan};
use super::{
    DB, HotView, TableSpec, Trial, TrialsOptions, Written, judge_view, lake_root, table_descriptor,
};

/// The log table and the primary-key table, by index.
const TABLES: [&str; 2] = ["rlog", "rpk"];
/// The share of seeds that drop and create again tables.
const SHARE: f64 = 0.5;
/// The ids and `ver`s of the k-th incarnation a trial creates (of either table) are
/// `FIRST_ID + k * ID_SPAN ..`: apart from the main workload's (from 0), the probes' (from
/// 2^40), the partitions' (from 2^44) and every other incarnation's.
const FIRST_ID: i64 = 1 << 50;
const ID_SPAN: i64 = 1 << 32;
const _: () = assert!(super::clients::CLIENT_SPAN * super::clients::CLIENTS_MAX as i64 <= ID_SPAN);
/// How long a drop planned for a tiered table waits for the lake to cover it.
const TIERED_WAIT: Duration = Duration::from_secs(20);
/// How long `--plant` waits for the live incarnation's lake to make its first commit and for a
/// dropped incarnation's lake to be moved aside.
const PLANT_WAIT: Duration = Duration::from_secs(60);
/// How long a dropped name stays free before the table is created again: some pauses shorter
/// than tiering's discovery interval (2 s), so the service may see the new id before it sees
/// the old one gone, some longer.
const GAPS_MS: [u64; 4] = [0, 0, 500, 2500];

/// What happens to the tables at one moment of a phase.
#[derive(Debug, Clone, Copy)]
struct Step {
    /// Which tables (log, primary key) are dropped and created again.
    tables: [bool; 2],
    /// Dropped once the lake covers them, else at once (with rows the lake may not have yet).
    tiered: bool,
    /// The pause between the drops and the creates.
    gap_ms: u64,
}

impl Step {
    fn draw(rng: &mut SmallRng, both: bool) -> Step {
        let tables = match rng.random_range(0..3) {
            _ if both => [true, true],
            0 => [true, false],
            1 => [false, true],
            _ => [true, true],
        };
        Step {
            tables,
            tiered: rng.random_bool(0.5),
            gap_ms: GAPS_MS[rng.random_range(0..GAPS_MS.len())],
        }
    }

    fn chosen(self) -> impl Iterator<Item = usize> {
        (0..2).filter(move |t| self.tables[*t])
    }

    fn describe(self) -> String {
        let names: Vec<&str> = self.chosen().map(|t| TABLES[t]).collect();
        format!(
            "{} dropped{} and created again {}",
            names.join(" + "),
            if self.tiered { " once tiered" } else { "" },
            match self.gap_ms {
                0 => "at once".to_string(),
                ms => format!("{ms} ms later"),
            }
        )
    }
}

/// A seed's re-created tables and what happens to them, drawn from a stream of its own (the
/// rest of the seed's plan is what it was before re-creation was drawn).
pub(super) struct RecreatePlan {
    buckets: [i32; 2],
    pk_keys: i64,
    freshness_ms: [u64; 2],
    /// The client every incarnation is written through (each its own).
    client: ClientPlan,
    /// Per phase: its step, if any, and whether it comes before the phase's fault (else after).
    phases: Vec<(Option<Step>, bool)>,
    rng: SmallRng,
}

impl RecreatePlan {
    pub fn draw(seed: u64, phases: i32) -> Option<RecreatePlan> {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x0033_D20F);
        if !rng.random_bool(SHARE) {
            return None;
        }
        let mut client = ClientPlan::draw(1, &mut rng);
        client.tasks = rng.random_range(2..4);
        let phases = (0..phases)
            .map(|phase| {
                let step = match phase {
                    0 => Some(Step::draw(&mut rng, true)),
                    _ if rng.random_bool(0.5) => Some(Step::draw(&mut rng, false)),
                    _ => None,
                };
                (step, rng.random_bool(0.5))
            })
            .collect();
        Some(RecreatePlan {
            buckets: [rng.random_range(1..4), rng.random_range(1..4)],
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
            .map(|(step, before)| match step {
                None => "nothing".to_string(),
                Some(step) => format!(
                    "{} {} the fault",
                    step.describe(),
                    if *before { "before" } else { "after" }
                ),
            })
            .collect();
        format!(
            "re-created tables: {} ({} buckets), {} ({} buckets, {} keys); each incarnation \
             written by {}; phases: {}",
            TABLES[0],
            self.buckets[0],
            TABLES[1],
            self.buckets[1],
            self.pk_keys,
            self.client.describe(),
            phases.join("; ")
        )
    }
}

/// What the seeds with re-created tables did with them, and what was checked.
#[derive(Debug, Default, Clone)]
pub(super) struct RecreateCounts {
    pub seeds: u64,
    /// Tables dropped and created again under their name, and of those, how many were dropped
    /// once the lake covered them.
    pub recreated: u64,
    pub dropped_tiered: u64,
    /// Incarnations judged (live and dropped), and the rows and ops acknowledged to them.
    pub incarnations: u64,
    pub acked: u64,
    /// Lake rows checked: of live incarnations, and of dropped ones in the lakes moved aside
    /// under `__dropped` (how many such lakes were found).
    pub lake_rows_live: u64,
    pub lake_rows_dropped: u64,
    pub dropped_lakes: u64,
    /// Clients replaced after fluss-rs's sender panicked ([`super::clients`]).
    pub client_panics: u64,
}

impl RecreateCounts {
    pub fn add(&mut self, other: &RecreateCounts) {
        self.seeds += other.seeds;
        self.recreated += other.recreated;
        self.dropped_tiered += other.dropped_tiered;
        self.incarnations += other.incarnations;
        self.acked += other.acked;
        self.lake_rows_live += other.lake_rows_live;
        self.lake_rows_dropped += other.lake_rows_dropped;
        self.dropped_lakes += other.dropped_lakes;
        self.client_panics += other.client_panics;
    }

    pub fn describe(&self) -> String {
        format!(
            "{} seeds; {} tables dropped and created again under their name ({} once tiered); \
             {} incarnations judged, {} rows and ops acknowledged to them; lake rows checked: \
             {} in live incarnations, {} in {} dropped lakes; {} clients replaced after \
             fluss-rs 1.0's sender panicked",
            self.seeds,
            self.recreated,
            self.dropped_tiered,
            self.incarnations,
            self.acked,
            self.lake_rows_live,
            self.lake_rows_dropped,
            self.dropped_lakes,
            self.client_panics
        )
    }
}

/// What a dropped incarnation held just before its drop.
struct Dropped {
    view: HotView,
    /// The lake's txn offsets of its buckets.
    lake: BTreeMap<i32, i64>,
}

/// One table id of a table's name.
struct Incarnation {
    table_id: i64,
    /// Its writers' ids and `ver`s start here.
    first_id: i64,
    writers: Writers,
    dropped: Option<Dropped>,
}

/// The re-created tables of a running trial.
pub(super) struct Recreated {
    plan: RecreatePlan,
    /// The log table and the primary-key table.
    specs: [TableSpec; 2],
    /// Per table, its incarnations in the order they were created: all but the last dropped
    /// (the last too, between a drop and the create).
    incarnations: [Vec<Incarnation>; 2],
    /// Incarnations created so far, of both tables: the next one's id range.
    created: i64,
    epoch: Instant,
    /// The tables whose workloads [`Recreated::take_open`] took.
    taken: Vec<usize>,
}

impl Recreated {
    /// Creates the tables and starts writing them.
    pub async fn start(
        trial: &mut Trial<'_>,
        plan: RecreatePlan,
        epoch: Instant,
    ) -> Result<Recreated> {
        watch_client_panics();
        trial.note(plan.describe());
        let spec = |t: usize| TableSpec {
            name: TABLES[t].to_string(),
            primary_key: t == 1,
            buckets: plan.buckets[t],
            day: None,
        };
        let mut recreated = Recreated {
            specs: [spec(0), spec(1)],
            plan,
            incarnations: [Vec::new(), Vec::new()],
            created: 0,
            epoch,
            taken: Vec::new(),
        };
        trial.outcome.recreated.seeds = 1;
        for t in 0..2 {
            recreated.create(trial, t).await?;
        }
        Ok(recreated)
    }

    /// The tables' specs.
    pub fn specs(&self) -> &[TableSpec] {
        &self.specs
    }

    /// Table `t`'s last incarnation: the live one, unless it was just dropped.
    fn last(&mut self, t: usize) -> &mut Incarnation {
        self.incarnations[t]
            .last_mut()
            .expect("created at the start")
    }

    fn name(&self, t: usize, inc: &Incarnation) -> String {
        format!("{}[id {}]", self.specs[t].name, inc.table_id)
    }

    /// Runs the step of `phase`, if it comes before its fault (`before`) or after it.
    pub async fn step(&mut self, trial: &mut Trial<'_>, phase: usize, before: bool) -> Result<()> {
        let Some((step, when)) = self.plan.phases.get(phase).copied() else {
            return Ok(());
        };
        self.revive(trial).await?;
        let Some(step) = step.filter(|_| when == before) else {
            return Ok(());
        };
        for t in step.chosen() {
            self.drop(trial, t, step.tiered).await?;
        }
        trial.watch(Duration::from_millis(step.gap_ms)).await?;
        for t in step.chosen() {
            self.create(trial, t).await?;
            trial.outcome.recreated.recreated += 1;
        }
        Ok(())
    }

    /// Replaces every live incarnation's client that died (see [`super::clients`]).
    async fn revive(&mut self, trial: &mut Trial<'_>) -> Result<()> {
        for t in 0..2 {
            if !self.last(t).writers.replaceable() {
                continue;
            }
            let given_up = self.last(t).writers.retire(trial).await?;
            trial.outcome.recreated.client_panics += 1;
            let name = self.name(t, self.incarnations[t].last().expect("live"));
            trial.note(format!(
                "{name}: fluss-rs's sender panicked; {given_up} writes in flight count as \
                 refused, a new client writes on"
            ));
            self.start_client(trial, t).await?;
        }
        Ok(())
    }

    /// Counts and notes the panic of table `t`'s last client, when it died with `given_up`
    /// writes unresolved (which count as refused).
    fn count_panic(&self, trial: &mut Trial<'_>, t: usize, given_up: Option<u64>) {
        let (Some(given_up), Some(inc)) = (given_up, self.incarnations[t].last()) else {
            return;
        };
        trial.outcome.recreated.client_panics += 1;
        trial.note(format!(
            "{}: fluss-rs's sender panicked; {given_up} writes in flight count as refused",
            self.name(t, inc)
        ));
    }

    /// Creates table `t` (again, when it had incarnations) and starts writing the new one.
    async fn create(&mut self, trial: &mut Trial<'_>, t: usize) -> Result<()> {
        let spec = self.specs[t].clone();
        let descriptor = table_descriptor(&spec, self.plan.freshness_ms[t])?;
        let path = TablePath::new(DB, &spec.name);
        let table_id = trial
            .with_admin(&format!("creating {DB}.{}", spec.name), async |admin| {
                admin.create_table(&path, &descriptor, true).await?;
                Ok(admin.get_table_info(&path).await?.table_id)
            })
            .await?;
        if self.incarnations[t].iter().any(|i| i.table_id == table_id) {
            bail!(
                "{DB}.{} was created again and has table id {table_id}, which a dropped \
                 incarnation had: its drop did not last, or the id was given twice",
                spec.name
            );
        }
        let again = !self.incarnations[t].is_empty();
        self.incarnations[t].push(Incarnation {
            table_id,
            first_id: FIRST_ID + self.created * ID_SPAN,
            writers: Writers::default(),
            dropped: None,
        });
        self.created += 1;
        self.start_client(trial, t).await?;
        if again {
            trial.note(format!(
                "{DB}.{} created again: table id {table_id}",
                spec.name
            ));
        }
        Ok(())
    }

    /// Starts the next client of table `t`'s last incarnation (its own connection and ids).
    async fn start_client(&mut self, trial: &mut Trial<'_>, t: usize) -> Result<()> {
        let k = self.incarnations[t].len() - 1;
        let spec = self.specs[t].clone();
        let inc = &mut self.incarnations[t][k];
        let prefix = format!("{TABLE_THREADS}{}-{k}-", spec.name);
        let (thread_name, first_id) = inc.writers.next_client(&prefix, inc.first_id);
        let tables = [spec];
        let clients = [self.plan.client.clone()];
        let plan = WorkloadPlan {
            tables: &tables,
            clients: &clients,
            pk_keys: self.plan.pk_keys,
            first_id,
            thread_name,
        };
        let (epoch, seed) = (self.epoch, self.plan.rng.random::<u64>());
        let bootstrap = trial.setup.bootstrap();
        let what = format!("starting the writers of {DB}.{}", tables[0].name);
        let workload = trial
            .admin(&what, || {
                let (bootstrap, plan) = (&bootstrap, &plan);
                async move {
                    let mut rng = SmallRng::seed_from_u64(seed);
                    Workload::start(bootstrap, plan, epoch, &mut rng).await
                }
            })
            .await?;
        self.incarnations[t][k].writers.started(workload);
        Ok(())
    }

    /// Stops writing table `t`, reads what the hot store holds of it (once the lake covers it
    /// when `tiered`) and the lake's txn offsets, and drops it.
    async fn drop(&mut self, trial: &mut Trial<'_>, t: usize, tiered: bool) -> Result<()> {
        let given_up = self.last(t).writers.close(trial).await?;
        self.count_panic(trial, t, given_up);
        trial.await_acked_visible().await?;
        let table_id = self.last(t).table_id;
        let spec = self.specs[t].clone();
        let bootstrap = trial.setup.bootstrap();
        if given_up.is_some() {
            let high = async || Ok(vec![high_watermarks(&bootstrap, &spec).await?]);
            await_quiet(trial, high).await?;
        }
        let covered = tiered && wait_tiered(trial, &spec, table_id).await?;
        let data = trial.setup.data.clone();
        let view = trial
            .admin(&format!("reading {DB}.{}", spec.name), || {
                let (bootstrap, data, spec) = (&bootstrap, &data, &spec);
                async move {
                    let connection = silt_connectors::fluss::connect(bootstrap).await?;
                    HotView::read(data, &connection, bootstrap, spec, table_id, None).await
                }
            })
            .await?;
        let lake = lake_offsets(&table_uri(&data, &spec), &spec, table_id).await?;
        let lake = table_offsets(lake.as_ref());
        let path = TablePath::new(DB, &spec.name);
        trial
            .with_admin(&format!("dropping {DB}.{}", spec.name), async |admin| {
                Ok(admin.drop_table(&path, true).await?)
            })
            .await?;
        let held: i64 = view.read_up_to.values().sum();
        let tiered_offsets: i64 = lake.values().sum();
        trial.note(format!(
            "{DB}.{} (table id {table_id}) dropped{} ({tiered_offsets} of {held} offsets tiered)",
            spec.name,
            match (tiered, covered) {
                (false, _) => "",
                (true, true) => " once the lake covered it",
                (true, false) => " (the lake did not cover it in time)",
            }
        ));
        trial.outcome.recreated.dropped_tiered += u64::from(covered);
        self.last(t).dropped = Some(Dropped { view, lake });
        Ok(())
    }

    /// The workloads still writing, taken to be finished with the trial's own, each with the
    /// thread name that tells whether its client died.
    pub fn take_open(&mut self) -> Vec<(Workload, String)> {
        self.taken.clear();
        let mut open = Vec::new();
        for t in 0..2 {
            if let Some(workload) = self.last(t).writers.take() {
                self.taken.push(t);
                open.push(workload);
            }
        }
        open
    }

    /// What the workloads [`Recreated::take_open`] took wrote, in the same order.
    pub fn finished(&mut self, trial: &mut Trial<'_>, records: Vec<Records>) {
        for (t, records) in std::mem::take(&mut self.taken).into_iter().zip(records) {
            let given_up = self.last(t).writers.collect(records);
            self.count_panic(trial, t, given_up);
        }
        let records = self
            .incarnations
            .iter()
            .flatten()
            .map(|i| &i.writers.records);
        note_unanswered(trial, "re-created tables", records);
        trial.outcome.recreated.acked = self.acked();
    }

    /// Rows and ops acknowledged to every incarnation.
    pub fn acked(&self) -> u64 {
        let incarnations = self.incarnations.iter().flatten();
        incarnations.map(|i| i.writers.records.acked()).sum()
    }

    /// Tests of the checker (`--plant`): commits a data file of a dropped incarnation's lake of
    /// the log table into the live incarnation's lake, as a lake known by the table's name
    /// alone would have kept it: `silt verify` finds its rows extra, the lake check rows the
    /// live incarnation never wrote. Answers the rows planted.
    pub async fn plant(&self, trial: &mut Trial<'_>) -> Result<u64> {
        let spec = &self.specs[0];
        let lake = trial.setup.data.join("lake");
        let live = lake.join(DB).join(&spec.name);
        // The live incarnation was created late in the trial, and silt may have been down when
        // a drop came: the live lake's first commit, and the move of a dropped lake aside, can
        // come seconds after the writes settled on a slow machine.
        let until = Instant::now() + PLANT_WAIT;
        loop {
            let dropped = self.incarnations[0].iter().filter(|i| i.dropped.is_some());
            for inc in dropped {
                let relative = silt_connectors::lake::layout::dropped_lake_relative(
                    DB,
                    &spec.name,
                    Some(inc.table_id),
                )?;
                let from = lake.join(relative);
                if !from.exists() || !has_commit(&live) {
                    continue;
                }
                if let Some(planted) = plant_copy(&from, &live, |_| true).await? {
                    trial.note(format!(
                        "planted: {} of the dropped {} committed into its live lake as {} ({} rows)",
                        planted.file,
                        self.name(0, inc),
                        planted.copy,
                        planted.rows
                    ));
                    return Ok(planted.rows);
                }
            }
            if Instant::now() >= until {
                break;
            }
            trial.watch(Duration::from_millis(200)).await?;
        }
        let note = format!(
            "planted nothing in {}'s live lake: within {} s, no dropped lake had a file to take, \
             or the live lake had no commit",
            spec.name,
            PLANT_WAIT.as_secs()
        );
        trial.note(note);
        Ok(0)
    }

    /// The checks of the module's contract, once the faults are over and every write resolved.
    pub async fn check(&self, trial: &mut Trial<'_>, options: &TrialsOptions) -> Result<()> {
        for spec in &self.specs {
            super::verify_caught_up(trial, &spec.name, options).await?;
        }
        let bootstrap = trial.setup.bootstrap();
        let data = trial.setup.data.clone();
        for (t, spec) in self.specs.iter().enumerate() {
            let live_id = self.incarnations[t].last().expect("created").table_id;
            let connection = silt_connectors::fluss::connect(&bootstrap).await?;
            let live = HotView::read(&data, &connection, &bootstrap, spec, live_id, None)
                .await
                .with_context(|| format!("reading {DB}.{}", spec.name))?;
            for inc in &self.incarnations[t] {
                let view = inc.dropped.as_ref().map_or(&live, |d| &d.view);
                judge_view(trial, &self.name(t, inc), t == 1, view, &written(inc))?;
            }
            trial.outcome.recreated.incarnations += self.incarnations[t].len() as u64;
            self.check_lakes(trial, t, &live).await?;
        }
        Ok(())
    }

    /// The lake of every incarnation of table `t`, against what the hot store held (`live`: the
    /// live incarnation's view now); see the module's contract.
    async fn check_lakes(&self, trial: &mut Trial<'_>, t: usize, live: &HotView) -> Result<()> {
        let spec = &self.specs[t];
        let data = trial.setup.data.clone();
        let mut problems = Problems::new("re-created lake");
        for inc in &self.incarnations[t] {
            let name = self.name(t, inc);
            let (view, at_drop) = match &inc.dropped {
                Some(d) => (&d.view, Some(&d.lake)),
                None => (live, None),
            };
            let (txn, rows) = match at_drop {
                None => live_lake(&data, spec, inc.table_id, &name, &mut problems).await?,
                Some(_) => {
                    let (lakes, txn, rows) = dropped_lake(&data, spec, inc.table_id).await?;
                    if lakes > 1 {
                        let note = format!("{name}: its rows lie in {lakes} lakes");
                        problems.push("a dropped table's lake in pieces", note);
                    }
                    trial.outcome.recreated.dropped_lakes += lakes;
                    (txn, rows)
                }
            };
            check_txn(&name, &view.read_up_to, &txn, at_drop, &mut problems);
            let own = inc.first_id..inc.first_id + ID_SPAN;
            let live = at_drop.is_none();
            if spec.primary_key {
                check_pk_rows(&name, own, live, Some(view), &txn, &rows, &mut problems)?;
            } else {
                let buckets = spec.buckets;
                check_log_rows(&name, own, Some(view), buckets, &txn, &rows, &mut problems)?;
            }
            let counts = &mut trial.outcome.recreated;
            match live {
                true => counts.lake_rows_live += rows.len() as u64,
                false => counts.lake_rows_dropped += rows.len() as u64,
            }
        }
        problems.report(trial);
        Ok(())
    }
}

/// Waits (up to [`TIERED_WAIT`]) until the lake's txn offsets of table `spec` (id `table_id`)
/// reach its high watermarks; whether they did.
async fn wait_tiered(trial: &mut Trial<'_>, spec: &TableSpec, table_id: i64) -> Result<bool> {
    let until = Instant::now() + TIERED_WAIT;
    let bootstrap = trial.setup.bootstrap();
    let uri = table_uri(&trial.setup.data, spec);
    while Instant::now() < until {
        trial.reap().await?;
        let high = high_watermarks(&bootstrap, spec).await;
        let lake = lake_offsets(&uri, spec, table_id).await;
        if let (Ok(high), Ok(lake)) = (high, lake) {
            let lake = table_offsets(lake.as_ref());
            let covered = |(b, hw): (&i32, &i64)| lake.get(b).copied().unwrap_or(0) >= *hw;
            if high.iter().all(covered) {
                return Ok(true);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(false)
}

/// The live incarnation's lake (table id `table_id`) at the table's place: its txn offsets and
/// rows; none, with a problem, when another table's lake is there.
async fn live_lake(
    data: &Path,
    spec: &TableSpec,
    table_id: i64,
    name: &str,
    problems: &mut Problems,
) -> Result<(BTreeMap<i32, i64>, Vec<LakeRow>)> {
    let uri = table_uri(data, spec);
    let owner = lake_owner(
        &uri,
        &HashMap::new(),
        &table_id.to_string(),
        spec.buckets as u32,
    )
    .await
    .with_context(|| format!("reading who owns the lake at {uri}"))?;
    if let LakeOwner::Foreign { owner } = owner {
        let note = format!("{name}: the lake at {uri} belongs to table id {owner:?}");
        problems.push("another table's lake at the table's place", note);
    }
    read_table_lake(&uri, spec, table_id).await
}

/// A dropped incarnation's (table id `table_id`) lake: how many lakes hold it (under
/// `__dropped`, and the table's place if it was never moved), the txn offsets and rows of the
/// first.
async fn dropped_lake(
    data: &Path,
    spec: &TableSpec,
    table_id: i64,
) -> Result<(u64, BTreeMap<i32, i64>, Vec<LakeRow>)> {
    let relative =
        silt_connectors::lake::layout::dropped_lake_relative(DB, &spec.name, Some(table_id))?;
    let moved = data.join("lake").join(&relative);
    let (dir, base) = (moved.parent().expect("under __dropped"), moved.file_name());
    let base = base.expect("a name").to_string_lossy().to_string();
    // A move to a name taken already takes `<name>.<n>`.
    let is_ours = |name: &str| {
        let numbered = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit());
        name.strip_prefix(base.as_str())
            .is_some_and(|s| s.is_empty() || s.strip_prefix('.').is_some_and(numbered))
    };
    let mut uris: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| is_ours(n))
            .map(|n| dir.join(n).to_string_lossy().to_string())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    uris.sort();
    let place = table_uri(data, spec);
    if lake_offsets(&place, spec, table_id).await?.is_some() {
        uris.push(place);
    }
    let Some(first) = uris.first() else {
        return Ok((0, BTreeMap::new(), Vec::new()));
    };
    let (txn, rows) = read_table_lake(first, spec, table_id).await?;
    Ok((uris.len() as u64, txn, rows))
}

/// The txn offsets and rows of table id `table_id`'s lake at `uri` (none when no lake of it
/// is there).
async fn read_table_lake(
    uri: &str,
    spec: &TableSpec,
    table_id: i64,
) -> Result<(BTreeMap<i32, i64>, Vec<LakeRow>)> {
    let Some(offsets) = lake_offsets(uri, spec, table_id).await? else {
        return Ok((BTreeMap::new(), Vec::new()));
    };
    let batches = read_lake(uri, &HashMap::new(), offsets.delta_version).await?;
    let rows = lake_rows(&batches, spec.primary_key)?;
    Ok((table_offsets(Some(&offsets)), rows))
}

/// The lake's txn offsets of table `spec`'s buckets for table id `table_id` (none without a
/// lake of that id at `uri`).
async fn lake_offsets(uri: &str, spec: &TableSpec, table_id: i64) -> Result<Option<LakeOffsets>> {
    let buckets: Vec<BucketKey> = (0..spec.buckets).map(BucketKey::table).collect();
    read_lake_offsets(uri, &HashMap::new(), &table_id.to_string(), &buckets)
        .await
        .with_context(|| format!("reading the lake offsets at {uri}"))
}

/// The txn offsets per bucket.
fn table_offsets(lake: Option<&LakeOffsets>) -> BTreeMap<i32, i64> {
    let offsets = lake.iter().flat_map(|l| &l.bucket_offsets);
    offsets.map(|(k, o)| (k.bucket, *o)).collect()
}

/// Where table `spec`'s lake lives.
fn table_uri(data: &Path, spec: &TableSpec) -> String {
    format!("{}/{DB}/{}", lake_root(data), spec.name)
}

async fn high_watermarks(bootstrap: &str, spec: &TableSpec) -> Result<BTreeMap<i32, i64>> {
    let connection = silt_connectors::fluss::connect(bootstrap).await?;
    let ids: Vec<i32> = (0..spec.buckets).collect();
    let path = TablePath::new(DB, &spec.name);
    let listed = connection
        .get_admin()?
        .list_offsets(&path, &ids, OffsetSpec::Latest)
        .await?;
    Ok(ids
        .iter()
        .map(|b| (*b, listed.get(b).copied().unwrap_or(0)))
        .collect())
}

/// What incarnation `inc` wrote (its workloads write one table).
fn written(inc: &Incarnation) -> Written {
    let records = &inc.writers.records;
    let mut out = Written::default();
    for w in &records.log {
        out.log.insert(w.id, w.stamp.acked_us.is_some());
        out.origins.insert(w.id, (w.origin, w.stamp.acked_us));
    }
    out.pk.clone_from(&records.pk);
    out
}
