//! Which small files of a log table's bucket a tiering commit rewrites.
//!
//! A log table gets one file per bucket per checkpoint: at 1 s freshness, 3,600 files an hour
//! per bucket, every one of which a query plans over and every loaded snapshot holds. A commit
//! that appends to a bucket also rewrites a run of that bucket's small files into one file
//! (removes and add with `dataChange: false`, in the same Delta commit as the appends and the
//! txn actions, so a conflict fails the whole commit and its replay starts over; there is no
//! second writer to race).
//!
//! **The run** is a suffix of the bucket's files in offset order: files never interleave their
//! offset ranges, so a bucket stays a sequence of files each holding a range in offset order.
//! Files of at least half the target size are done and never rewritten again. Walking back
//! from the newest file, an older file joins the run while it is no larger than the files after
//! it together and the run stays within the target size; the run is rewritten once it holds
//! `small_files_max` files. This is a binary counter over the bucket's tail: a row is rewritten
//! about log2(target / (small_files_max × file size)) times, and a bucket holds at most
//! `small_files_max` plus that many small files.
//!
//! **Off the commit path** ([`Compactor`]): the rewrite used to run inside the commit and
//! stalled it (1-1.3 s at 100k rows/s), and every row waiting for that commit waited with it.
//! Now the runs are chosen after commit N from the snapshot it made, rewritten on the process's
//! low-priority thread ([`silt_rt::background`]) while later checkpoints commit, and their removes and adds ride in the first later
//! commit that finds the rewrite done. There is still one writer (the committer), and the run's
//! files cannot change under the task: nothing but these rewrites removes a log table's files,
//! and one is in flight at a time. Before a done rewrite joins a commit, every file it removes
//! must still be active and every file it adds must exist, or it is dropped and its files are
//! orphans for maintenance. A commit that finds the rewrite still running after
//! `small_files_max` commits waits for it, so a bucket's small files stay bounded (by twice
//! `small_files_max` plus the counter's). A rewrite that never reaches a commit (a restart, a
//! failure) leaves orphans that maintenance deletes; a done one's files are kept from
//! maintenance until a commit carries or drops them. Dropping the [`Compactor`] (the sink
//! closing) aborts a running rewrite.
//!
//! **Bounds:** a run reads at most the target size; one rewrite holds at most one run per
//! bucket and at most `target_file_bytes` in all (further buckets wait for later rewrites).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use arrow::datatypes::SchemaRef;
use deltalake::DeltaTable;
use deltalake::kernel::{Action, Add, Remove};
use object_store::ObjectStoreExt as _;
use roaring::RoaringTreemap;
use silt_rt::background::{BackgroundTask, background};
use tracing::{info, warn};

use super::DeltaSinkConfig;
use super::error::{Error, Result};
use super::files::{add_bucket, copy_rows, first_offset, writer_properties};
use crate::changelog::BucketKey;
use silt_rt::clock::now_ms;

/// A data file of one bucket, as the choice of a run needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TailFile {
    pub path: String,
    pub bytes: u64,
    /// The smallest `__offset` the file holds: orders a bucket's files.
    pub first_offset: i64,
}

/// The run of `files` (one bucket's files, any order) to rewrite into one, oldest first, or
/// nothing while the bucket's tail holds fewer than `files_min` small files.
pub(super) fn pick_run(
    mut files: Vec<TailFile>,
    target_bytes: u64,
    files_min: usize,
) -> Vec<TailFile> {
    files.sort_by_key(|f| f.first_offset);
    let done = target_bytes / 2;
    let mut run = Vec::new();
    let mut run_bytes = 0u64;
    for file in files.into_iter().rev() {
        if file.bytes >= done {
            break;
        }
        let joins =
            run.is_empty() || (file.bytes <= run_bytes && run_bytes + file.bytes <= target_bytes);
        if !joins {
            break;
        }
        run_bytes += file.bytes;
        run.push(file);
    }
    if run.len() < files_min.max(2) {
        return Vec::new();
    }
    run.reverse();
    run
}

/// A done rewrite: the removes of its runs' files and the adds of the files that replace them
/// (`dataChange: false`).
pub(super) struct Rewrite {
    pub actions: Vec<Action>,
    pub files: usize,
    pub rows: u64,
    pub bytes: u64,
}

impl Rewrite {
    fn removed(&self) -> impl Iterator<Item = &str> {
        self.actions.iter().filter_map(|a| match a {
            Action::Remove(r) => Some(r.path.as_str()),
            _ => None,
        })
    }

    fn added(&self) -> impl Iterator<Item = &str> {
        self.actions.iter().filter_map(|a| match a {
            Action::Add(add) => Some(add.path.as_str()),
            _ => None,
        })
    }
}

/// A log table's compaction, prepared between commits (see the module doc).
#[derive(Default)]
pub(super) struct Compactor {
    running: Option<Running>,
    done: Option<Rewrite>,
}

struct Running {
    task: BackgroundTask<Result<Rewrite>>,
    /// Commits made since it started.
    commits: usize,
}

/// One bucket's run: its files (remove and add actions) and the writer of the file replacing
/// them.
struct Run {
    bucket: BucketKey,
    files: Vec<(Remove, Add)>,
    bytes: u64,
    writer: deltalake::writer::RecordBatchWriter,
}

impl Compactor {
    /// Starts rewriting the runs `pick_run` chooses in `buckets` (the buckets the last commit
    /// appended to) of `table`, unless a rewrite is already running or waiting for a commit.
    pub fn start(
        &mut self,
        table: &DeltaTable,
        config: &DeltaSinkConfig,
        lake_schema: &SchemaRef,
        buckets: &BTreeSet<BucketKey>,
    ) -> Result<()> {
        if self.running.is_some() || self.done.is_some() {
            return Ok(());
        }
        let runs = pick_runs(table, config, buckets)?;
        if runs.is_empty() {
            return Ok(());
        }
        let store = table.object_store();
        let lake_schema = lake_schema.clone();
        let uri = config.table_uri.clone();
        // On the low-priority thread: the rewrite gets the cores the data path leaves idle.
        let Some(task) = background().spawn(rewrite(store, lake_schema, uri, runs)) else {
            return Ok(()); // the thread is busy with others' work: a later commit starts it
        };
        self.running = Some(Running { task, commits: 0 });
        Ok(())
    }

    /// The rewrite a commit of `table` about to be made can carry: a done one whose removed
    /// files are all still active and whose added files exist, or nothing. Waits for a running
    /// rewrite only once it has missed `waits_max` commits.
    pub async fn take(
        &mut self,
        table: &DeltaTable,
        uri: &str,
        waits_max: usize,
    ) -> Result<Option<Rewrite>> {
        let mut wait = false;
        if let Some(running) = &mut self.running {
            running.commits += 1;
            wait = running.commits > waits_max;
            if wait {
                info!(
                    table = uri,
                    commits = running.commits,
                    "the commit waits for the compaction prepared since that many commits"
                );
            }
        }
        self.collect(wait, uri).await;
        let Some(rewrite) = self.done.take() else {
            return Ok(None);
        };
        let state = table.snapshot().map_err(Error::delta(uri))?;
        let active: HashSet<String> = state
            .log_data()
            .iter()
            .map(|f| f.path().to_string())
            .collect();
        let store = table.object_store();
        let mut stale = rewrite
            .removed()
            .find(|p| !active.contains(*p))
            .map(str::to_string);
        for path in rewrite.added() {
            if stale.is_some() {
                break;
            }
            if store.head(&deltalake::Path::from(path)).await.is_err() {
                stale = Some(path.to_string());
            }
        }
        if let Some(path) = stale {
            warn!(table = uri, %path, "dropped a prepared compaction whose files changed under it (its files are orphans for maintenance)");
            return Ok(None);
        }
        // The files leave the table with this commit, not when the run was picked: the
        // retention that keeps them for readers of older versions counts from here.
        let now_ms = now_ms();
        let mut rewrite = rewrite;
        for action in &mut rewrite.actions {
            if let Action::Remove(remove) = action {
                remove.deletion_timestamp = Some(now_ms);
            }
        }
        Ok(Some(rewrite))
    }

    /// The files of a done rewrite that no commit has carried yet (maintenance must keep them);
    /// with `wait`, once a running rewrite is done.
    pub async fn waiting_files(&mut self, wait: bool, uri: &str) -> Vec<String> {
        self.collect(wait, uri).await;
        self.done
            .iter()
            .flat_map(|r| r.added().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    /// Moves a finished rewrite (with `wait`, a running one once it finishes) to `done`. A
    /// failed rewrite costs only small files: it is logged and forgotten.
    async fn collect(&mut self, wait: bool, uri: &str) {
        let Some(mut running) = self.running.take() else {
            return;
        };
        let output = if wait {
            running.task.join().await
        } else {
            match running.task.try_take() {
                Ok(output) => output,
                Err(task) => {
                    running.task = task;
                    self.running = Some(running);
                    return;
                }
            }
        };
        match output {
            Some(Ok(rewrite)) => self.done = Some(rewrite),
            Some(Err(e)) => {
                warn!(table = uri, error = %e, "a compaction failed; its bucket stays as it is until the next one")
            }
            None => warn!(table = uri, "a compaction ended without a result"),
        }
    }
}

/// The runs to rewrite in `buckets` of `table`, within `target_file_bytes` in all.
fn pick_runs(
    table: &DeltaTable,
    config: &DeltaSinkConfig,
    buckets: &BTreeSet<BucketKey>,
) -> Result<Vec<Run>> {
    let uri = config.table_uri.as_str();
    let state = table.snapshot().map_err(Error::delta(uri))?;
    let target = config.target_file_bytes;
    let mut tails: BTreeMap<BucketKey, Vec<TailFile>> = BTreeMap::new();
    let mut files: HashMap<String, (Remove, Add)> = HashMap::new();
    let mut unordered: BTreeSet<BucketKey> = BTreeSet::new();
    for f in state.log_data().iter() {
        let bytes = u64::try_from(f.size()).unwrap_or(0);
        if bytes >= target / 2 {
            continue; // done: the common case once a table is old
        }
        #[allow(deprecated)] // add_action: the partition value and statistics of the file
        let add = f.add_action();
        let bucket = add_bucket(&add)?;
        if !buckets.contains(&bucket) {
            continue;
        }
        let Some(first_offset) = first_offset(&add) else {
            // Without the statistic (a table wider than Delta's indexed columns) a bucket's
            // files cannot be ordered: its files stay as they are.
            unordered.insert(bucket);
            continue;
        };
        let path = f.path().to_string();
        files.insert(path.clone(), (f.remove_action(false), add));
        let tail = TailFile {
            path,
            bytes,
            first_offset,
        };
        tails.entry(bucket).or_default().push(tail);
    }
    let mut runs = Vec::new();
    let mut budget = target;
    for (bucket, tail) in tails {
        if unordered.contains(&bucket) {
            continue;
        }
        let run = pick_run(tail, target, config.small_files_max);
        let bytes: u64 = run.iter().map(|f| f.bytes).sum();
        if run.is_empty() || bytes > budget {
            continue;
        }
        budget -= bytes;
        let writer = deltalake::writer::RecordBatchWriter::for_table(table)
            .map_err(Error::delta(uri))?
            .with_target_file_size(target)
            .with_writer_properties(writer_properties(config));
        runs.push(Run {
            bucket,
            files: run
                .iter()
                .map(|f| files.remove(&f.path).expect("listed above"))
                .collect(),
            bytes,
            writer,
        });
    }
    Ok(runs)
}

/// Rewrites each run into one file (or a few, at the target size).
async fn rewrite(
    store: deltalake::logstore::ObjectStoreRef,
    lake_schema: SchemaRef,
    uri: String,
    runs: Vec<Run>,
) -> Result<Rewrite> {
    let mut done = Rewrite {
        actions: Vec::new(),
        files: 0,
        rows: 0,
        bytes: 0,
    };
    let none = RoaringTreemap::new();
    for mut run in runs {
        let mut rows = 0u64;
        for (remove, add) in &run.files {
            rows += copy_rows(
                store.as_ref(),
                &lake_schema,
                &uri,
                add,
                &none,
                &mut run.writer,
            )
            .await?;
            done.actions.push(Action::Remove(remove.clone()));
        }
        let merged = deltalake::writer::DeltaWriter::flush(&mut run.writer)
            .await
            .map_err(Error::delta(&uri))?;
        info!(
            table = %uri,
            bucket = %run.bucket,
            files = run.files.len(),
            bytes = run.bytes,
            rows,
            "compacted a run of small files, for the next commit"
        );
        done.files += run.files.len();
        done.rows += rows;
        done.bytes += run.bytes;
        done.actions.extend(merged.into_iter().map(|mut add| {
            add.data_change = false;
            Action::Add(add)
        }));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: i64, bytes: u64) -> TailFile {
        TailFile {
            path: format!("f{n}"),
            bytes,
            first_offset: n * 100,
        }
    }

    /// Plays `commits` commits of one `bytes`-sized file each against the rule, merging runs
    /// as a commit would; returns the bucket's file sizes and the bytes rewritten.
    fn play(commits: i64, bytes: u64, target: u64, files_min: usize) -> (Vec<u64>, u64) {
        let mut files: Vec<TailFile> = Vec::new();
        let mut rewritten = 0;
        for n in 0..commits {
            let run = pick_run(files.clone(), target, files_min);
            if !run.is_empty() {
                let merged: u64 = run.iter().map(|f| f.bytes).sum();
                rewritten += merged;
                let first = run[0].first_offset;
                files.retain(|f| !run.contains(f));
                files.push(TailFile {
                    path: format!("m{n}"),
                    bytes: merged,
                    first_offset: first,
                });
            }
            files.push(file(n + 1_000, bytes));
        }
        files.sort_by_key(|f| f.first_offset);
        (files.iter().map(|f| f.bytes).collect(), rewritten)
    }

    /// The run picked (1,000-byte target, 16 files at least) from files of the `head` sizes
    /// followed by `small` files of 10 bytes, oldest first; file `n` is named `f<n>`.
    fn run_after(head: &[u64], small: usize) -> Vec<TailFile> {
        let sizes = head.iter().copied().chain(std::iter::repeat_n(10, small));
        let files = sizes.enumerate().map(|(n, b)| file(n as i64, b)).collect();
        pick_run(files, 1_000, 16)
    }

    #[test]
    fn nothing_until_the_tail_holds_enough_small_files() {
        assert!(run_after(&[], 15).is_empty());
        let run = run_after(&[], 16);
        assert_eq!(run.len(), 16);
        assert_eq!(run[0].path, "f0", "oldest first");
    }

    #[test]
    fn files_of_half_the_target_are_never_rewritten() {
        let run = run_after(&[500, 600], 18);
        assert_eq!(run.len(), 18);
        assert!(run.iter().all(|f| f.bytes == 10));
    }

    #[test]
    fn a_run_never_skips_a_file_in_offset_order() {
        // An older file larger than everything after it stops the run: the run stays a suffix.
        let run = run_after(&[10, 400], 16);
        assert_eq!(run.len(), 16);
        assert_eq!(run[0].path, "f2");
    }

    #[test]
    fn a_steady_load_keeps_the_file_count_and_the_rewrites_bounded() {
        // 1 s freshness for ten hours: 36,000 files of 30 KB, a 128 MiB target.
        let target = 128 << 20;
        let (sizes, rewritten) = play(36_000, 30_000, target, 16);
        let written = 36_000 * 30_000u64;
        let small = sizes.iter().filter(|&&b| b < target / 2).count();
        assert!(small <= 16 + 16, "{small} small files: {sizes:?}");
        assert!(sizes.len() < 60, "{} files", sizes.len());
        let amplification = rewritten as f64 / written as f64;
        assert!(
            amplification < 14.0,
            "each byte rewritten {amplification:.1} times"
        );
        assert_eq!(
            sizes.iter().sum::<u64>(),
            written,
            "no byte lost or doubled"
        );
    }
}
