//! Clients that fluss-rs 1.0 kills: its sender panics (`cluster.rs`:
//! `get_table_path_by_id(..).unwrap()`) when it refreshes a table's or partition's metadata
//! after it re-initialized its cluster from the bootstrap server, which it does when `silt up`
//! was unreachable: the new cluster knows no table. The client's writes never resolve after
//! that. A panic hook tells which client died (by its runtime's thread name), so its workload
//! can be replaced, as an application would restart a dead writer, and the dead one's
//! unresolved writes count as refused (they may be stored, as any refused write may).
//!
//! Only the workloads that replace their clients are watched: those of partitions
//! ([`super::partitions`]) and of tables dropped and created again ([`super::recreated`]), by
//! the prefixes of their threads' names. Every other panic goes to the previous hook.
//! [`Writers`] keeps one owner's clients (a partition's, a table incarnation's), one at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::workload::{Records, Workload};
use super::{RESOLVE_DEADLINE, Trial};

/// The thread name prefixes of the watched workloads.
pub(super) const PARTITION_THREADS: &str = "trial-partition-";
pub(super) const TABLE_THREADS: &str = "trial-table-";
/// Why the unresolved writes of a dead client count as refused.
pub(super) const DEAD_CLIENT: &str = "its client died: fluss-rs 1.0's sender panicked";
/// Each client of an owner (a new one replaces one that died) writes ids from a range of its
/// own inside the owner's: at most [`CLIENTS_MAX`] of them, each [`CLIENT_SPAN`] ids wide.
pub(super) const CLIENT_SPAN: i64 = 1 << 26;
pub(super) const CLIENTS_MAX: u32 = 64;
/// After a client died with writes in flight: how long the high watermarks of what it wrote
/// must stay put before they are read for good, and how long that may take at most.
const QUIET: Duration = Duration::from_millis(500);
const QUIET_WAIT_MAX: Duration = Duration::from_secs(10);

/// The threads on which fluss-rs panicked: their clients are dead.
static PANICKED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
static PANIC_HOOK: Once = Once::new();

/// Records fluss-rs's panics on the watched workloads' threads, leaving every other panic to
/// the previous hook.
pub(super) fn watch_client_panics() {
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current()
                .name()
                .unwrap_or_default()
                .to_string();
            let known = info.location().is_some_and(|l| {
                l.file().contains("fluss-rs") && l.file().ends_with("src/cluster/cluster.rs")
            });
            let watched = [PARTITION_THREADS, TABLE_THREADS]
                .iter()
                .any(|p| thread.starts_with(p));
            if known && watched {
                PANICKED
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(thread);
                return;
            }
            previous(info);
        }));
    });
}

/// Whether the client whose runtime's threads are named `thread` died.
pub(super) fn client_died(thread: &str) -> bool {
    PANICKED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(thread)
}

/// The writers of one owner of rows (a partition, an incarnation of a table): its workload while
/// it is open, one client at a time, and what its stopped workloads wrote.
#[derive(Default)]
pub(super) struct Writers {
    workload: Option<Workload>,
    /// Clients started so far, and the thread name of the current one's runtime.
    clients: u32,
    thread: String,
    /// What its stopped workloads wrote.
    pub records: Records,
}

impl Writers {
    /// Names the next client (threads `<thread_prefix><n>`) and answers the first id of its
    /// range inside the owner's, which starts at `first_id`.
    pub fn next_client(&mut self, thread_prefix: &str, first_id: i64) -> (String, i64) {
        assert!(
            self.clients < CLIENTS_MAX,
            "{thread_prefix}: too many clients"
        );
        let thread = format!("{thread_prefix}{}", self.clients);
        let first = first_id + i64::from(self.clients) * CLIENT_SPAN;
        self.clients += 1;
        self.thread.clone_from(&thread);
        (thread, first)
    }

    /// The workload of the client [`Writers::next_client`] named.
    pub fn started(&mut self, workload: Workload) {
        self.workload = Some(workload);
    }

    pub fn open(&self) -> bool {
        self.workload.is_some()
    }

    /// Whether the current client died while writing, and another may replace it.
    pub fn replaceable(&self) -> bool {
        self.open() && client_died(&self.thread) && self.clients < CLIENTS_MAX
    }

    /// Stops the workload of a dead client (nothing will answer its writes) and keeps what it
    /// wrote; answers how many writes count as refused.
    pub async fn retire(&mut self, trial: &mut Trial<'_>) -> Result<u64> {
        let Some(workload) = self.workload.take() else {
            return Ok(0);
        };
        let mut records = trial
            .drive(workload.finish_unless(RESOLVE_DEADLINE, || true))
            .await?;
        let given_up = records.give_up(DEAD_CLIENT);
        self.records.extend(records);
        Ok(given_up)
    }

    /// Stops writing and waits for the writes to resolve (no longer once the client died);
    /// answers, when it died, how many writes count as refused.
    pub async fn close(&mut self, trial: &mut Trial<'_>) -> Result<Option<u64>> {
        let Some(workload) = self.workload.take() else {
            return Ok(None);
        };
        let thread = self.thread.clone();
        let finish = workload.finish_unless(RESOLVE_DEADLINE, move || client_died(&thread));
        let records = trial.drive(finish).await?;
        Ok(self.collect(records))
    }

    /// The open workload, to be finished elsewhere, with the thread name that tells whether
    /// its client died.
    pub fn take(&mut self) -> Option<(Workload, String)> {
        Some((self.workload.take()?, self.thread.clone()))
    }

    /// Keeps what a stopped workload wrote; when its client died, its unresolved writes count
    /// as refused, and how many is the answer.
    pub fn collect(&mut self, mut records: Records) -> Option<u64> {
        let given_up = client_died(&self.thread).then(|| records.give_up(DEAD_CLIENT));
        self.records.extend(records);
        given_up
    }
}

/// After the owners' (`owners`: "partitions") workloads stopped: writes never answered fail the
/// trial; refused ones are noted, with the most frequent error.
pub(super) fn note_unanswered<'a>(
    trial: &mut Trial<'_>,
    owners: &str,
    records: impl Iterator<Item = &'a Records>,
) {
    let mut unresolved = 0;
    let mut errors: BTreeMap<&str, u64> = BTreeMap::new();
    for r in records {
        unresolved += r.unresolved();
        for (e, n) in &r.errors {
            *errors.entry(e.as_str()).or_default() += n;
        }
    }
    if unresolved > 0 {
        trial.outcome.fail("writes never answered");
        trial.note(format!(
            "{unresolved} writes to {owners} neither acknowledged nor refused {} s after they \
             stopped",
            RESOLVE_DEADLINE.as_secs()
        ));
    }
    if let Some((first, _)) = errors.iter().max_by_key(|(_, n)| **n) {
        let refused: u64 = errors.values().sum();
        trial.note(format!(
            "{refused} writes to {owners} refused by the client or server (most often: {first})"
        ));
    }
}

/// A client that died with writes in flight may still have some stored after it died: silt
/// finishes a request it received even when nobody waits for the answer (those writes count as
/// refused, and may be stored, as any refused write may). Before what an owner holds is read
/// for the last time (its drop), waits until the high watermarks `high` reads stay put for
/// [`QUIET`], at most [`QUIET_WAIT_MAX`].
pub(super) async fn await_quiet(
    trial: &mut Trial<'_>,
    high: impl AsyncFn() -> Result<Vec<BTreeMap<i32, i64>>>,
) -> Result<()> {
    let until = Instant::now() + QUIET_WAIT_MAX;
    let mut last = None;
    while Instant::now() < until {
        let now = high().await.ok();
        if now.is_some() && now == last {
            return Ok(());
        }
        last = now;
        trial.watch(QUIET).await?;
    }
    Ok(())
}
