//! Several tiering workers over one hot tier: each lake-enabled table is tiered by one worker
//! at a time, by a lease kept in the lake's own object store, beside the tables, under
//! `<lake_root>/__leases/`. Nothing else is needed: no consensus of silt's own, no clock shared
//! between workers, no store that can compare-and-swap (a local file system cannot; it can create
//! a file only if it is absent, which is all this takes).
//!
//! - **A lease is an epoch file**, `__leases/table-<id>/epoch-<n>`, named by table id (a table
//!   dropped and created again under its name is another table, with other leases). The worker
//!   that creates epoch `n + 1` (create-if-absent: exactly one creator wins) holds the table
//!   while epoch `n + 1` is the highest. It renews by rewriting its epoch file every discovery
//!   pass, and gives the table back by marking it released.
//! - **Expiry is observed, never computed from clocks**: a worker takes a table over when the
//!   highest epoch file has not changed (its e-tag, or size and time) for a whole lease duration
//!   by its own monotonic clock, as Kubernetes' leader election judges a Lease. A worker that
//!   stops, crashes or is paused loses its tables within the lease duration plus one poll.
//! - **Fair shares**: workers announce themselves in `__leases/workers/<id>` (rewritten every
//!   pass; live while it changes, by the same observation). A worker claims free tables up to
//!   its share, `ceil(tables / live workers)`, and gives one back per pass while it holds more,
//!   so a worker that joins gets tables without anyone stopping.
//! - **Correctness does not rest on the lease.** Two workers tiering one table at once (a paused
//!   one waking before it noticed) duplicate nothing: every lake commit carries each bucket's
//!   end offset as a Delta `txn`, a commit plans against the lake's offsets as they are (ranges
//!   the lake has are dropped, a gap is refused), and Delta refuses a commit that raced another
//!   on the same `txn` ids. The lease keeps the work in one place (a primary-key table's key
//!   index is rebuilt at every hand-over) and moves it when a worker goes away.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_trait::async_trait;
use futures::TryStreamExt as _;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use silt_connectors::changelog::BucketKey;
use tracing::{info, warn};

use super::coordinator::{Candidate, Coordinator, RegistryUpdate};

pub use silt_connectors::lake::layout::LEASES_DIR;

/// How a worker takes part.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// This worker's name, unique among the workers of one lake (kept in the data directory, so
    /// a restarted worker takes its own tables back at once).
    pub worker: String,
    /// How long a lease lives without being renewed.
    pub duration: Duration,
}

/// What an epoch file holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Epoch {
    worker: String,
    /// Rewrites since the claim: each renewal changes the file.
    renewals: u64,
    released: bool,
}

/// A file another worker keeps rewriting, as this worker last saw it.
#[derive(Debug, Clone)]
struct Seen {
    version: String,
    since: Instant,
}

impl Seen {
    /// Updates the observation with `version` (now); answers whether it has not changed for
    /// `duration`.
    fn stale(slot: &mut Option<Seen>, version: String, duration: Duration) -> bool {
        match slot {
            Some(seen) if seen.version == version => seen.since.elapsed() >= duration,
            _ => {
                *slot = Some(Seen {
                    version,
                    since: Instant::now(),
                });
                false
            }
        }
    }
}

#[derive(Default)]
struct State {
    /// Tables held: table id -> (epoch, renewals written).
    held: BTreeMap<i64, (u64, u64)>,
    /// Per table id, the highest epoch file of another worker as last seen.
    epochs: BTreeMap<i64, (u64, Option<Seen>)>,
    /// Other workers' files as last seen.
    workers: BTreeMap<String, Option<Seen>>,
    heartbeats: u64,
}

/// The leased coordinator: this worker tiers the tables it holds a lease on.
pub struct Leased {
    store: Arc<dyn ObjectStore>,
    config: LeaseConfig,
    /// The co-located hot store's lake-offset registry, when this worker runs beside one.
    registry: Option<RegistryUpdate>,
    state: Mutex<State>,
}

impl Leased {
    /// Leases in `store` (rooted at the lake root).
    pub fn new(
        store: Arc<dyn ObjectStore>,
        config: LeaseConfig,
        registry: Option<RegistryUpdate>,
    ) -> Leased {
        Leased {
            store,
            config,
            registry,
            state: Mutex::new(State::default()),
        }
    }

    /// The store of the lake at `lake_root` (a local directory or a URL) for leases.
    pub fn store_for(
        lake_root: &str,
        options: &std::collections::HashMap<String, String>,
    ) -> Result<Arc<dyn ObjectStore>> {
        if lake_root.contains("://") {
            let url = url::Url::parse(lake_root)
                .with_context(|| format!("lake root {lake_root:?} is not a URL"))?;
            silt_connectors::delta::register_object_stores();
            return deltalake::logstore::store_for(&url, options.clone())
                .with_context(|| format!("the object store of {lake_root}"));
        }
        std::fs::create_dir_all(lake_root)
            .with_context(|| format!("cannot create the lake root {lake_root}"))?;
        Ok(Arc::new(
            object_store::local::LocalFileSystem::new_with_prefix(lake_root)
                .with_context(|| format!("the lake root {lake_root}"))?,
        ))
    }

    fn table_dir(table_id: i64) -> Path {
        Path::from(format!("{LEASES_DIR}/table-{table_id}"))
    }

    fn epoch_path(table_id: i64, epoch: u64) -> Path {
        Path::from(format!("{LEASES_DIR}/table-{table_id}/epoch-{epoch:020}"))
    }

    /// The highest epoch of a table, with the file's version and content; `None` for none.
    async fn highest(&self, table_id: i64) -> Result<Option<(u64, String, Epoch)>> {
        let listed: Vec<object_store::ObjectMeta> = self
            .store
            .list(Some(&Self::table_dir(table_id)))
            .try_collect()
            .await
            .with_context(|| format!("listing the leases of table id {table_id}"))?;
        let Some((epoch, meta)) = listed
            .into_iter()
            .filter_map(|m| {
                let name = m.location.filename()?.to_string();
                let epoch = name.strip_prefix("epoch-")?.parse::<u64>().ok()?;
                Some((epoch, m))
            })
            .max_by_key(|(epoch, _)| *epoch)
        else {
            return Ok(None);
        };
        let bytes = self
            .store
            .get(&meta.location)
            .await
            .with_context(|| format!("reading {}", meta.location))?
            .bytes()
            .await?;
        // A file being written is seen as it was or as it is; unreadable content counts as a
        // released lease of nobody, so a torn write never keeps a table from being tiered.
        let content = serde_json::from_slice(&bytes).unwrap_or(Epoch {
            worker: String::new(),
            renewals: 0,
            released: true,
        });
        Ok(Some((epoch, version_of(&meta), content)))
    }

    async fn write_epoch(
        &self,
        table_id: i64,
        epoch: u64,
        content: &Epoch,
        create: bool,
    ) -> Result<bool> {
        let body = PutPayload::from(serde_json::to_vec(content)?);
        let mode = if create {
            PutMode::Create
        } else {
            PutMode::Overwrite
        };
        let put = self
            .store
            .put_opts(
                &Self::epoch_path(table_id, epoch),
                body,
                PutOptions::from(mode),
            )
            .await;
        match put {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e)
                .with_context(|| format!("writing lease epoch {epoch} of table id {table_id}")),
        }
    }

    /// Announces this worker and counts the live ones (itself included).
    async fn live_workers(&self) -> Result<usize> {
        let beat = {
            let mut state = self.state.lock().unwrap();
            state.heartbeats += 1;
            state.heartbeats
        };
        let mine = Path::from(format!("{LEASES_DIR}/workers/{}", self.config.worker));
        self.store
            .put(&mine, PutPayload::from(beat.to_string().into_bytes()))
            .await
            .with_context(|| format!("announcing worker {}", self.config.worker))?;
        let listed: Vec<object_store::ObjectMeta> = self
            .store
            .list(Some(&Path::from(format!("{LEASES_DIR}/workers"))))
            .try_collect()
            .await
            .context("listing the tiering workers")?;
        let mut state = self.state.lock().unwrap();
        let mut live = 1;
        for meta in listed {
            let Some(name) = meta.location.filename().map(str::to_string) else {
                continue;
            };
            if name == self.config.worker {
                continue;
            }
            let seen = state.workers.entry(name).or_default();
            if !Seen::stale(seen, version_of(&meta), self.config.duration) {
                live += 1;
            }
        }
        Ok(live)
    }

    /// One table's lease this pass: held (renewed), free to claim, or another live worker's.
    async fn look(&self, table_id: i64) -> Result<Look> {
        let highest = self.highest(table_id).await?;
        let mut state = self.state.lock().unwrap();
        let Some((epoch, version, content)) = highest else {
            state.held.remove(&table_id);
            return Ok(Look::Free { next: 1 });
        };
        if content.worker == self.config.worker && !content.released {
            return Ok(Look::Mine {
                epoch,
                renewals: content.renewals,
            });
        }
        if state.held.remove(&table_id).is_some() {
            warn!(table_id, epoch, holder = %content.worker, "tiering: another worker holds this table now; stopping its job here");
        }
        if content.released {
            return Ok(Look::Free { next: epoch + 1 });
        }
        let (seen_epoch, seen) = state.epochs.entry(table_id).or_insert((epoch, None));
        if *seen_epoch != epoch {
            *seen_epoch = epoch;
            *seen = None;
        }
        Ok(if Seen::stale(seen, version, self.config.duration) {
            Look::Expired {
                next: epoch + 1,
                holder: content.worker,
            }
        } else {
            Look::Taken
        })
    }
}

/// A table's lease as one pass found it.
enum Look {
    Mine { epoch: u64, renewals: u64 },
    Free { next: u64 },
    Expired { next: u64, holder: String },
    Taken,
}

/// A version of an object that changes whenever it is rewritten.
fn version_of(meta: &object_store::ObjectMeta) -> String {
    match &meta.e_tag {
        Some(tag) => tag.clone(),
        None => format!(
            "{}-{}",
            meta.last_modified.timestamp_nanos_opt().unwrap_or(0),
            meta.size
        ),
    }
}

#[async_trait]
impl Coordinator for Leased {
    async fn assign(&self, tables: &[Candidate]) -> Result<BTreeSet<i64>> {
        let live = self.live_workers().await?;
        let share = tables.len().div_ceil(live.max(1));
        let mut mine: Vec<(i64, u64, u64)> = Vec::new();
        let mut claimable: Vec<(i64, u64, Option<String>)> = Vec::new();
        for table in tables {
            match self.look(table.table_id).await? {
                Look::Mine { epoch, renewals } => mine.push((table.table_id, epoch, renewals)),
                Look::Free { next } => claimable.push((table.table_id, next, None)),
                Look::Expired { next, holder } => {
                    claimable.push((table.table_id, next, Some(holder)))
                }
                Look::Taken => {}
            }
        }
        // Renew what this worker holds; give one back while it holds more than its share.
        let mut held = BTreeSet::new();
        let over = mine.len().saturating_sub(share);
        for (i, (table_id, epoch, renewals)) in mine.into_iter().enumerate() {
            let release = i < over.min(1);
            let content = Epoch {
                worker: self.config.worker.clone(),
                renewals: renewals + 1,
                released: release,
            };
            self.write_epoch(table_id, epoch, &content, false).await?;
            if release {
                info!(
                    table_id,
                    epoch,
                    share,
                    "tiering: holding more than this worker's share; giving a table back"
                );
                self.state.lock().unwrap().held.remove(&table_id);
            } else {
                self.state
                    .lock()
                    .unwrap()
                    .held
                    .insert(table_id, (epoch, renewals + 1));
                held.insert(table_id);
            }
        }
        // Claim free and expired tables up to the share, starting at a place of this worker's
        // own so that workers starting together do not all race for the same table.
        let offset = (fxhash(&self.config.worker) as usize) % claimable.len().max(1);
        claimable.rotate_left(offset);
        for (table_id, next, holder) in claimable {
            if held.len() >= share {
                break;
            }
            let content = Epoch {
                worker: self.config.worker.clone(),
                renewals: 0,
                released: false,
            };
            if self.write_epoch(table_id, next, &content, true).await? {
                match holder {
                    Some(holder) => {
                        info!(table_id, epoch = next, %holder, "tiering: took over a table whose worker stopped renewing its lease")
                    }
                    None => info!(table_id, epoch = next, "tiering: claimed a table"),
                }
                self.state.lock().unwrap().held.insert(table_id, (next, 0));
                held.insert(table_id);
            }
        }
        Ok(held)
    }

    fn record_lake_snapshot(
        &self,
        table_id: i64,
        snapshot: i64,
        offsets: &[(BucketKey, i64)],
    ) -> Result<()> {
        super::coordinator::record_in(self.registry.as_ref(), table_id, snapshot, offsets)
    }

    async fn release_all(&self) {
        let held: Vec<(i64, (u64, u64))> = std::mem::take(&mut self.state.lock().unwrap().held)
            .into_iter()
            .collect();
        for (table_id, (epoch, renewals)) in held {
            let content = Epoch {
                worker: self.config.worker.clone(),
                renewals: renewals + 1,
                released: true,
            };
            if let Err(e) = self.write_epoch(table_id, epoch, &content, false).await {
                warn!(table_id, error = %format!("{e:#}"), "tiering: could not give a table back at shutdown; another worker takes it when the lease expires");
            }
        }
    }
}

/// A small stable hash of a worker's name (FNV-1a).
fn fxhash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// This worker's name: kept in `<data_dir>/tiering-worker`, made once (host name and a random
/// suffix), so a restarted worker is the same worker and takes its own tables back at once.
pub fn worker_name(data_dir: &std::path::Path) -> Result<String> {
    let file = data_dir.join("tiering-worker");
    if let Ok(name) = std::fs::read_to_string(&file) {
        let name = name.trim();
        if !name.is_empty() {
            return Ok(name.to_string());
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(40)
        .collect();
    let name = format!(
        "{}-{:08x}",
        if host.is_empty() { "silt" } else { &host },
        rand::random::<u32>()
    );
    std::fs::create_dir_all(data_dir)?;
    std::fs::write(&file, &name).with_context(|| format!("writing {}", file.display()))?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(store: &Arc<dyn ObjectStore>, name: &str, duration: Duration) -> Leased {
        Leased::new(
            store.clone(),
            LeaseConfig {
                worker: name.into(),
                duration,
            },
            None,
        )
    }

    fn tables(ids: &[i64]) -> Vec<Candidate> {
        ids.iter()
            .map(|id| Candidate {
                database: "db".into(),
                table: format!("t{id}"),
                table_id: *id,
            })
            .collect()
    }

    fn local() -> (tempfile::TempDir, Arc<dyn ObjectStore>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Leased::store_for(&dir.path().to_string_lossy(), &Default::default()).unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn one_worker_holds_every_table_and_keeps_them() {
        let (_dir, store) = local();
        let a = worker(&store, "a", Duration::from_secs(60));
        let all = tables(&[1, 2, 3]);
        assert_eq!(a.assign(&all).await.unwrap(), BTreeSet::from([1, 2, 3]));
        assert_eq!(a.assign(&all).await.unwrap(), BTreeSet::from([1, 2, 3]));
    }

    #[tokio::test]
    async fn two_workers_split_the_tables_and_never_hold_one_together() {
        let (_dir, store) = local();
        let (a, b) = (
            worker(&store, "a", Duration::from_millis(300)),
            worker(&store, "b", Duration::from_millis(300)),
        );
        let all = tables(&[1, 2, 3, 4, 5, 6]);
        let mut last = (BTreeSet::new(), BTreeSet::new());
        for _ in 0..20 {
            let held_a = a.assign(&all).await.unwrap();
            let held_b = b.assign(&all).await.unwrap();
            assert!(held_a.is_disjoint(&held_b), "{held_a:?} {held_b:?}");
            last = (held_a, held_b);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Once both know of each other, each holds its share and between them all.
        assert_eq!(last.0.len(), 3, "{last:?}");
        assert_eq!(last.1.len(), 3, "{last:?}");
    }

    #[tokio::test]
    async fn a_worker_that_stops_renewing_loses_its_tables_after_the_lease_and_learns_it() {
        let (_dir, store) = local();
        let duration = Duration::from_millis(400);
        let (a, b) = (worker(&store, "a", duration), worker(&store, "b", duration));
        let all = tables(&[1, 2]);
        assert_eq!(a.assign(&all).await.unwrap(), BTreeSet::from([1, 2]));
        // b sees both taken; while a renews, nothing moves.
        let start = Instant::now();
        let mut held_b = BTreeSet::new();
        while start.elapsed() < duration * 2 {
            a.assign(&all).await.unwrap();
            held_b = b.assign(&all).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            held_b.len(),
            1,
            "b gets its share from a live a: {held_b:?}"
        );
        // a pauses (no renewals): within the lease and a pass b holds both.
        let paused = Instant::now();
        while b.assign(&all).await.unwrap().len() < 2 {
            assert!(paused.elapsed() < duration * 4, "b never took a's tables");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // b last saw a renew just before the pause (its passes are 50 ms apart).
        assert!(
            paused.elapsed() >= duration - Duration::from_millis(100),
            "not before the lease ran out: {:?}",
            paused.elapsed()
        );
        // a wakes: it holds nothing b took.
        let woken = a.assign(&all).await.unwrap();
        let now_b = b.assign(&all).await.unwrap();
        assert!(woken.is_disjoint(&now_b), "{woken:?} {now_b:?}");
    }

    #[tokio::test]
    async fn a_released_table_is_taken_at_once() {
        let (_dir, store) = local();
        let (a, b) = (
            worker(&store, "a", Duration::from_secs(60)),
            worker(&store, "b", Duration::from_secs(60)),
        );
        let all = tables(&[7]);
        assert_eq!(a.assign(&all).await.unwrap(), BTreeSet::from([7]));
        assert!(b.assign(&all).await.unwrap().is_empty());
        a.release_all().await;
        assert_eq!(b.assign(&all).await.unwrap(), BTreeSet::from([7]));
    }
}
