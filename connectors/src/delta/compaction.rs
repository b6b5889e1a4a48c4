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
//! **Bounds:** a run reads at most the target size; a commit rewrites at most one run per
//! bucket and at most `target_file_bytes` in all (further buckets wait for later commits).

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

    #[test]
    fn nothing_until_the_tail_holds_enough_small_files() {
        let files: Vec<TailFile> = (0..15).map(|n| file(n, 10)).collect();
        assert!(pick_run(files.clone(), 1_000, 16).is_empty());
        let mut more = files;
        more.push(file(15, 10));
        let run = pick_run(more, 1_000, 16);
        assert_eq!(run.len(), 16);
        assert_eq!(run[0].path, "f0", "oldest first");
    }

    #[test]
    fn files_of_half_the_target_are_never_rewritten() {
        let mut files = vec![file(0, 500), file(1, 600)];
        files.extend((2..20).map(|n| file(n, 10)));
        let run = pick_run(files, 1_000, 16);
        assert_eq!(run.len(), 18);
        assert!(run.iter().all(|f| f.bytes == 10));
    }

    #[test]
    fn a_run_never_skips_a_file_in_offset_order() {
        // An older file larger than everything after it stops the run: the run stays a suffix.
        let mut files = vec![file(0, 10), file(1, 400)];
        files.extend((2..18).map(|n| file(n, 10)));
        let run = pick_run(files, 1_000, 16);
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
