//! A lake read directly, judged against what the hot store held: the checks the partitioned
//! tables ([`super::partitions`]) and the tables dropped and created again
//! ([`super::recreated`]) share. Each judges the rows of one lake table, or of one partition of
//! one, at the lake's newest version:
//!
//! - log: every offset below the txn offset once, each the row the hot store holds there (below
//!   its log start, or when the hot store could not be read: one of the owner's own ids), none
//!   at or past the txn offset;
//! - primary key: one image per key, the last one the changelog has below the txn offsets;
//! - txn offsets: never past the high watermarks, at them once caught up, never back from
//!   what they were when the owner was dropped.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::Path;

use anyhow::Result;
use arrow::array::{Array, RecordBatch};
use silt_connectors::changelog::{BUCKET_COLUMN, OFFSET_COLUMN, PARTITION_ID_COLUMN};

use super::check::{Change, Place};
use super::{HotView, SHOW_MAX, Trial, i64_column};

/// What a lake check found, by kind; each kind a verify failure named `<prefix>: <kind>`.
pub(super) struct Problems {
    prefix: &'static str,
    kinds: BTreeMap<&'static str, Vec<String>>,
    /// Rows (or images) of dropped owners the lake holds more than once.
    pub twice: u64,
}

impl Problems {
    pub fn new(prefix: &'static str) -> Problems {
        Problems {
            prefix,
            kinds: BTreeMap::new(),
            twice: 0,
        }
    }

    pub fn push(&mut self, kind: &'static str, note: String) {
        self.kinds.entry(kind).or_default().push(note);
    }

    /// An id of a log table is written once in a trial: two lake rows of it are one row twice,
    /// in whichever partitions they lie. (Verify counts those of live partitions as extra
    /// rows: only those of `dropped` ones count here.)
    pub fn log_rows_twice(
        &mut self,
        table: &str,
        by_partition: &HashMap<i64, Vec<LakeRow>>,
        dropped: &std::collections::BTreeSet<i64>,
    ) {
        let mut seen: HashMap<i64, (i64, Place)> = HashMap::new();
        for row in by_partition.values().flatten() {
            if let Some((p, at)) = seen.insert(row.id, (row.partition, row.at)) {
                if dropped.contains(&p) || dropped.contains(&row.partition) {
                    self.twice += 1;
                }
                self.push(
                    "a row twice",
                    format!(
                        "{table}: id {} in p{p} {at:?} and in p{} {:?}",
                        row.id, row.partition, row.at
                    ),
                );
            }
        }
    }

    /// Fails the trial for each kind found, with its first notes.
    pub fn report(self, trial: &mut Trial<'_>) {
        trial.outcome.rows_duplicated += self.twice;
        for (kind, notes) in self.kinds {
            let kind = format!("{}: {kind}", self.prefix);
            for note in notes.iter().take(SHOW_MAX) {
                trial.note(note.clone());
            }
            if notes.len() > SHOW_MAX {
                trial.note(format!("  and {} more ({kind})", notes.len() - SHOW_MAX));
            }
            trial.outcome.fail(kind);
        }
    }
}

/// The txn offsets `txn` of an owner whose buckets the hot store held up to `high` never pass
/// them; a live owner's reach them (the lake caught up); a dropped one's never went back from
/// `at_drop`, what they were when it was dropped.
pub(super) fn check_txn(
    name: &str,
    high: &BTreeMap<i32, i64>,
    txn: &BTreeMap<i32, i64>,
    at_drop: Option<&BTreeMap<i32, i64>>,
    problems: &mut Problems,
) {
    for (bucket, hw) in high {
        let at = txn.get(bucket).copied().unwrap_or(0);
        if at > *hw {
            problems.push(
                "offsets the owner never had",
                format!("{name}: bucket {bucket}: lake txn offset {at} > high watermark {hw}"),
            );
        }
        match at_drop {
            None if at < *hw => problems.push(
                "behind the hot store after catch-up",
                format!("{name}: bucket {bucket}: lake txn offset {at} < high watermark {hw}"),
            ),
            Some(before) => {
                let before = before.get(bucket).copied().unwrap_or(0);
                if at < before {
                    problems.push(
                        "a dropped owner's offsets went back",
                        format!(
                            "{name}: bucket {bucket}: lake txn offset {at}, {before} at the drop"
                        ),
                    );
                }
            }
            None => {}
        }
    }
}

/// A log table's (or partition's) lake rows: every offset below the txn offset once, each the
/// row the hot store holds there (`hot`; below its log start, or without it, one of the owner's
/// `own` ids), none at or past it.
pub(super) fn check_log_rows(
    name: &str,
    own: Range<i64>,
    hot: Option<&HotView>,
    buckets: i32,
    txn: &BTreeMap<i32, i64>,
    rows: &[LakeRow],
    problems: &mut Problems,
) -> Result<()> {
    let hot: BTreeMap<Place, i64> = match hot {
        Some(view) => view.log_rows()?.into_iter().collect(),
        None => BTreeMap::new(),
    };
    let mut at: BTreeMap<i32, BTreeMap<i64, u32>> = BTreeMap::new();
    for row in rows {
        *at.entry(row.at.bucket)
            .or_default()
            .entry(row.at.offset)
            .or_default() += 1;
        match hot.get(&row.at) {
            Some(id) if *id == row.id => {}
            Some(id) => problems.push(
                "differs from the hot store",
                format!(
                    "{name}: {:?} holds id {} in the lake, {id} in the hot store",
                    row.at, row.id
                ),
            ),
            None if own.contains(&row.id) => {}
            None => problems.push(
                "rows its writers never wrote",
                format!(
                    "{name}: {:?} holds id {}, not one of its own",
                    row.at, row.id
                ),
            ),
        }
    }
    for bucket in 0..buckets {
        let end = txn.get(&bucket).copied().unwrap_or(0);
        let offsets = at.remove(&bucket).unwrap_or_default();
        check_bucket_offsets(name, bucket, end, &offsets, problems);
    }
    if !at.is_empty() {
        problems.push(
            "rows of buckets the table does not have",
            format!("{name}: buckets {:?}", at.keys().collect::<Vec<_>>()),
        );
    }
    Ok(())
}

/// One bucket of a log lake: the rows per offset (`offsets`) cover `0..end` once each.
fn check_bucket_offsets(
    name: &str,
    bucket: i32,
    end: i64,
    offsets: &BTreeMap<i64, u32>,
    problems: &mut Problems,
) {
    let twice: Vec<i64> = offsets
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(o, _)| *o)
        .collect();
    if !twice.is_empty() {
        problems.push(
            "an offset twice",
            format!(
                "{name}: bucket {bucket}: {} offsets twice, first {}",
                twice.len(),
                twice[0]
            ),
        );
    }
    let beyond = offsets.keys().filter(|o| **o >= end).count();
    if beyond > 0 {
        problems.push(
            "rows past the txn offset",
            format!("{name}: bucket {bucket}: {beyond} rows at or past txn offset {end}"),
        );
    }
    let missing: Vec<i64> = (0..end).filter(|o| !offsets.contains_key(o)).collect();
    if !missing.is_empty() {
        problems.push(
            "rows missing below the txn offset",
            format!(
                "{name}: bucket {bucket}: {} of the offsets below {end} missing, first {}",
                missing.len(),
                missing[0]
            ),
        );
    }
}

/// A primary-key table's (or partition's) lake rows: one image per key, each a `ver` of the
/// owner's `own`; with the hot store's view `hot`, the last image its changelog has below the
/// txn offsets (a key the held changelog says nothing of lies below its bucket's log start,
/// where hot retention cut it). `live`: images twice of a dropped owner count as duplicated
/// rows (verify counts the live ones).
pub(super) fn check_pk_rows(
    name: &str,
    own: Range<i64>,
    live: bool,
    hot: Option<&HotView>,
    txn: &BTreeMap<i32, i64>,
    rows: &[LakeRow],
    problems: &mut Problems,
) -> Result<()> {
    let mut lake: HashMap<i64, &LakeRow> = HashMap::new();
    for row in rows {
        if row.ver.is_none_or(|v| !own.contains(&v)) {
            problems.push(
                "rows its writers never wrote",
                format!(
                    "{name}: key {} at {:?} has ver {:?}, not one of its own",
                    row.id, row.at, row.ver
                ),
            );
        }
        if let Some(first) = lake.insert(row.id, row) {
            problems.twice += u64::from(!live);
            problems.push(
                "an image twice",
                format!(
                    "{name}: key {} at {:?} and at {:?}",
                    row.id, first.at, row.at
                ),
            );
        }
    }
    match hot {
        Some(view) => check_last_images(name, view, txn, &lake, problems),
        None => Ok(()),
    }
}

/// The lake's image per key (`lake`) is the last of the changelog `view` below `txn`.
fn check_last_images(
    name: &str,
    view: &HotView,
    txn: &BTreeMap<i32, i64>,
    lake: &HashMap<i64, &LakeRow>,
    problems: &mut Problems,
) -> Result<()> {
    const KIND: &str = "not the last image per key";
    let mut changes = view.pk_changes()?;
    changes.sort_by_key(|c| c.at);
    let mut want: HashMap<i64, Option<&Change>> = HashMap::new();
    for c in &changes {
        if c.at.offset >= txn.get(&c.at.bucket).copied().unwrap_or(0) {
            continue;
        }
        if c.change.is_upsert() {
            want.insert(c.key, Some(c));
        } else if c.change == silt_connectors::changelog::ChangeType::Delete {
            want.insert(c.key, None);
        }
    }
    for (key, image) in &want {
        let note = match (image, lake.get(key)) {
            (Some(c), Some(row)) if c.ver == row.ver => continue,
            (None, None) => continue,
            (Some(c), Some(row)) => format!(
                "{name}: key {key}: ver {:?} in the lake (at {:?}), the changelog's last is ver \
                 {:?} at {:?}",
                row.ver, row.at, c.ver, c.at
            ),
            (Some(c), None) => format!(
                "{name}: key {key}: absent from the lake, last ver {:?} at {:?}",
                c.ver, c.at
            ),
            (None, Some(row)) => format!(
                "{name}: key {key}: deleted, yet in the lake (ver {:?} at {:?})",
                row.ver, row.at
            ),
        };
        problems.push(KIND, note);
    }
    for (key, row) in lake {
        let start = view.log_start.get(&row.at.bucket).copied().unwrap_or(0);
        if !want.contains_key(key) && row.at.offset >= start {
            problems.push(
                KIND,
                format!(
                    "{name}: key {key}: ver {:?} at {:?} in the lake, which no change of the \
                     changelog explains",
                    row.ver, row.at
                ),
            );
        }
    }
    Ok(())
}

/// A lake row: its partition (-1 in an unpartitioned table), where the hot store had it, its
/// id (the key of a primary-key table) and `ver`.
#[derive(Debug, Clone, Copy)]
pub(super) struct LakeRow {
    pub partition: i64,
    pub at: Place,
    pub id: i64,
    pub ver: Option<i64>,
}

/// The rows of a lake's batches.
pub(super) fn lake_rows(batches: &[RecordBatch], primary_key: bool) -> Result<Vec<LakeRow>> {
    let mut rows = Vec::new();
    for b in batches {
        let partitions = match b.column_by_name(PARTITION_ID_COLUMN) {
            Some(_) => Some(i64_column(b, PARTITION_ID_COLUMN)?),
            None => None,
        };
        let buckets = i64_column(b, BUCKET_COLUMN)?;
        let offsets = i64_column(b, OFFSET_COLUMN)?;
        let ids = i64_column(b, "id")?;
        let vers = if primary_key {
            Some(i64_column(b, "ver")?)
        } else {
            None
        };
        for i in 0..b.num_rows() {
            rows.push(LakeRow {
                partition: partitions.as_ref().map_or(-1, |p| p.value(i)),
                at: Place {
                    bucket: buckets.value(i) as i32,
                    offset: offsets.value(i),
                },
                id: ids.value(i),
                ver: vers
                    .as_ref()
                    .and_then(|v| (!v.is_null(i)).then(|| v.value(i))),
            });
        }
    }
    Ok(rows)
}

/// Whether the Delta table at `dir` has a commit: a `<version>.json` in its `_delta_log`.
pub(super) fn has_commit(dir: &Path) -> bool {
    std::fs::read_dir(dir.join("_delta_log"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.strip_suffix(".json")
                .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// A data file committed a second time by [`plant_copy`].
pub(super) struct Planted {
    /// The file, in the lake it was copied from, and its copy, in the lake it was added to.
    pub file: String,
    pub copy: String,
    pub rows: u64,
}

/// Tests of the checker (`--plant`): copies the first data file of the lake at `from` whose
/// partition id (none in an unpartitioned table) `pick` chooses into the lake at `to` (which
/// may be `from`), under a name of its own, and adds it there in a Delta commit of its own.
/// None when `pick` chooses no file, and when either lake has no commit yet (a lake dropped
/// before its first commit was moved aside with an empty `_delta_log`, which no reader opens).
pub(super) async fn plant_copy(
    from: &Path,
    to: &Path,
    pick: impl Fn(Option<&str>) -> bool,
) -> Result<Option<Planted>> {
    use deltalake::kernel::Action;
    use deltalake::kernel::transaction::{CommitBuilder, TableReference};
    use deltalake::protocol::{DeltaOperation, SaveMode};
    if !has_commit(from) || !has_commit(to) {
        return Ok(None);
    }
    let open = async |dir: &Path| {
        let url = deltalake::ensure_table_uri(dir.to_string_lossy())?;
        anyhow::Ok(deltalake::open_table(url).await?)
    };
    let source = open(from).await?;
    let file = source.snapshot()?.log_data().iter().find(|f| {
        let partition = f.partition_values_map().get(PARTITION_ID_COLUMN).cloned();
        pick(partition.flatten().as_deref())
    });
    let Some(file) = file else {
        return Ok(None);
    };
    #[allow(deprecated)] // the file's own add action, to commit again under a new name
    let mut add = file.add_action();
    let copy = format!("{}-planted.parquet", add.path.trim_end_matches(".parquet"));
    if let Some(dir) = to.join(&copy).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::copy(from.join(&add.path), to.join(&copy))?;
    let planted = Planted {
        file: std::mem::replace(&mut add.path, copy.clone()),
        copy,
        rows: file.num_records().unwrap_or(0) as u64,
    };
    add.data_change = true;
    let target = open(to).await?;
    let operation = DeltaOperation::Write {
        mode: SaveMode::Append,
        partition_by: None,
        predicate: None,
    };
    CommitBuilder::default()
        .with_actions(vec![Action::Add(add)])
        .build(
            Some(target.snapshot()? as &dyn TableReference),
            target.log_store(),
            operation,
        )
        .await?;
    Ok(Some(planted))
}
