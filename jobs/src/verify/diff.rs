//! Comparing the hot changelog with the lake: rows in Arrow's row format (exact equality for
//! every type), as multisets for log tables and by key for primary-key tables, and the diff
//! printed with offsets as ranges and the lake file an extra row came from.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

#[cfg(test)]
use super::read::held_lake_rows;
use super::read::{bucket_keys, column, int64};
use super::{FILE_COLUMN, TableReport, Verdict};
use anyhow::{Result, anyhow};
use arrow::array::{Array, ArrayRef, Int8Array, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use silt_connectors::changelog::{
    BUCKET_COLUMN, BucketKey, CHANGE_TYPE_COLUMN, ChangeType, OFFSET_COLUMN,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Hot,
    Lake,
}

/// One side of the comparison: every row's user columns in Arrow's row format (so equality is
/// exact for every type), its key's bytes, and where it came from, for the diff.
pub(super) struct Side {
    rows: Vec<Entry>,
    /// Display strings are made only for rows that are reported.
    batches: Vec<RecordBatch>,
    names: Vec<String>,
    key_names: Vec<String>,
}

struct Entry {
    row: Vec<u8>,
    key: Vec<u8>,
    bucket: BucketKey,
    offset: i64,
    change: ChangeType,
    /// (batch, row) for display.
    at: (usize, usize),
    file: Option<Arc<str>>,
}

impl Side {
    pub(super) fn empty(
        lake_schema: &SchemaRef,
        user_fields: usize,
        key_columns: &[String],
    ) -> Result<Self> {
        Self::from_batches(&[], lake_schema, user_fields, key_columns, Origin::Lake)
    }

    pub(super) fn from_batches(
        batches: &[RecordBatch],
        lake_schema: &SchemaRef,
        user_fields: usize,
        key_columns: &[String],
        origin: Origin,
    ) -> Result<Self> {
        let fields = &lake_schema.fields()[..user_fields];
        let names: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
        let key_index: Vec<usize> = key_columns
            .iter()
            .map(|k| {
                names
                    .iter()
                    .position(|n| n == k)
                    .ok_or_else(|| anyhow!("key column {k} is not a column of the table"))
            })
            .collect::<Result<_>>()?;
        let encoder = Encoder {
            rows: RowConverter::new(
                fields
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?,
            keys: RowConverter::new(
                key_index
                    .iter()
                    .map(|i| SortField::new(fields[*i].data_type().clone()))
                    .collect(),
            )?,
            key_index,
        };
        let mut rows = Vec::new();
        let mut kept = Vec::with_capacity(batches.len());
        for batch in batches {
            if batch.num_rows() == 0 {
                continue;
            }
            let columns = user_columns(batch, fields, origin)?;
            rows.extend(encoder.entries(batch, &columns, origin, kept.len())?);
            kept.push(RecordBatch::try_new(
                Arc::new(arrow::datatypes::Schema::new(fields.to_vec())),
                columns,
            )?);
        }
        Ok(Side {
            rows,
            batches: kept,
            names,
            key_names: key_columns.to_vec(),
        })
    }

    /// `col=value, ...` of one row's user columns.
    fn show(&self, e: &Entry) -> String {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n}={}", self.value(e, i)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn show_key(&self, e: &Entry) -> String {
        self.key_names
            .iter()
            .filter_map(|k| {
                let i = self.names.iter().position(|n| n == k)?;
                Some(format!("{k}={}", self.value(e, i)))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The value of user column `column` of one row, as displayed (`null`, `?` when it cannot
    /// be formatted).
    fn value(&self, e: &Entry, column: usize) -> String {
        let batch = &self.batches[e.at.0];
        let options = FormatOptions::default().with_null("null");
        ArrayFormatter::try_new(batch.column(column).as_ref(), &options)
            .map(|f| f.value(e.at.1).to_string())
            .unwrap_or_else(|_| "?".into())
    }
}

/// Encodes a side's rows: the user columns and the key columns, each in Arrow's row format.
struct Encoder {
    rows: RowConverter,
    keys: RowConverter,
    /// The key columns' indexes among the user columns (none for a log table).
    key_index: Vec<usize>,
}

impl Encoder {
    /// The entries of one batch (its user columns `columns`, in the lake's types), which is
    /// batch `index` of its side.
    fn entries(
        &self,
        batch: &RecordBatch,
        columns: &[ArrayRef],
        origin: Origin,
        index: usize,
    ) -> Result<Vec<Entry>> {
        let converted = self.rows.convert_columns(columns)?;
        let keys = if self.key_index.is_empty() {
            None
        } else {
            let key_columns: Vec<ArrayRef> =
                self.key_index.iter().map(|i| columns[*i].clone()).collect();
            Some(self.keys.convert_columns(&key_columns)?)
        };
        let buckets = bucket_keys(batch)?;
        let offsets = int64(batch, OFFSET_COLUMN)?;
        let changes = change_types(batch, origin)?;
        let files = file_names(batch, origin)?;
        let files = files
            .as_ref()
            .and_then(|f| f.as_any().downcast_ref::<StringArray>());
        let mut last_file: Option<Arc<str>> = None;
        let mut entries = Vec::with_capacity(buckets.len());
        for (i, &bucket) in buckets.iter().enumerate() {
            let change = match &changes {
                Some(c) => ChangeType::from_i8(c.value(i))
                    .ok_or_else(|| anyhow!("unknown change type {}", c.value(i)))?,
                None => ChangeType::AppendOnly,
            };
            // Rows of one file come together: they share one name.
            let file = files.filter(|f| !f.is_null(i)).map(|f| {
                let name = f.value(i);
                match &last_file {
                    Some(l) if l.as_ref() == name => l.clone(),
                    _ => {
                        let l: Arc<str> = Arc::from(name);
                        last_file = Some(l.clone());
                        l
                    }
                }
            });
            entries.push(Entry {
                row: converted.row(i).as_ref().to_vec(),
                key: keys
                    .as_ref()
                    .map(|k| k.row(i).as_ref().to_vec())
                    .unwrap_or_default(),
                bucket,
                offset: offsets.value(i),
                change,
                at: (index, i),
                file,
            });
        }
        Ok(entries)
    }
}

fn short_file(file: &Option<Arc<str>>) -> String {
    match file {
        None => "an unknown file".into(),
        Some(f) => {
            // `__bucket=1/part-...parquet` is enough to find it under the table.
            let parts: Vec<&str> = f.rsplitn(3, '/').collect();
            match parts.as_slice() {
                [name, dir, _] if dir.starts_with(BUCKET_COLUMN) => format!("{dir}/{name}"),
                [name, ..] => name.to_string(),
                [] => f.to_string(),
            }
        }
    }
}

/// A batch's user columns in the lake's types: the tiering writer casts the same way, and the
/// lake reader may hand back view or dictionary types. A lake not yet tiered since its table
/// gained a column (ADD COLUMN, nullable) lacks it: its rows read it as null, as Delta readers
/// do.
fn user_columns(
    batch: &RecordBatch,
    fields: &[arrow::datatypes::FieldRef],
    origin: Origin,
) -> Result<Vec<ArrayRef>> {
    fields
        .iter()
        .map(|f| match (origin, batch.column_by_name(f.name())) {
            (Origin::Lake, None) if f.is_nullable() => Ok(arrow::array::new_null_array(
                f.data_type(),
                batch.num_rows(),
            )),
            _ => Ok(cast(column(batch, f.name())?, f.data_type())?),
        })
        .collect()
}

/// The change type of each row of a changelog batch (`None` for the lake's, all appends or
/// images).
fn change_types(batch: &RecordBatch, origin: Origin) -> Result<Option<Int8Array>> {
    Ok(match origin {
        Origin::Hot => Some(
            column(batch, CHANGE_TYPE_COLUMN)?
                .as_any()
                .downcast_ref::<Int8Array>()
                .ok_or_else(|| anyhow!("{CHANGE_TYPE_COLUMN} is not Int8"))?
                .clone(),
        ),
        Origin::Lake => None,
    })
}

/// The data file of each row of a lake batch, as strings (`None` for the changelog's).
fn file_names(batch: &RecordBatch, origin: Origin) -> Result<Option<ArrayRef>> {
    Ok(match origin {
        Origin::Lake => batch
            .column_by_name(FILE_COLUMN)
            .map(|c| cast(c, &arrow::datatypes::DataType::Utf8))
            .transpose()?,
        Origin::Hot => None,
    })
}

impl TableReport {
    /// Compares the two sides as the table's kind asks (a primary-key table by key, a log
    /// table as multisets) and records what differs and the verdict.
    pub(super) fn compare(
        &mut self,
        hot: &Side,
        lake: &Side,
        start: &BTreeMap<BucketKey, i64>,
        show_max: usize,
    ) -> Result<()> {
        if self.primary_key {
            compare_by_key(hot, lake, start, show_max, self)?;
        } else {
            compare_multisets(hot, lake, show_max, self)?;
        }
        self.verdict = if self.missing + self.extra + self.differing + self.duplicate_keys == 0 {
            Verdict::Match
        } else {
            Verdict::Mismatch
        };
        Ok(())
    }
}

/// Log tables: every hot row once in the lake, nothing else. Rows are matched as a multiset of
/// user columns; a missing and an extra row at the same `(bucket, offset)` are reported as one
/// differing row.
pub(super) fn compare_multisets(
    hot: &Side,
    lake: &Side,
    show_max: usize,
    report: &mut TableReport,
) -> Result<()> {
    report.hot_rows = hot.rows.len();
    report.lake_rows = lake.rows.len();
    let (missing, extra) = surplus_rows(hot, lake);
    let Unmatched {
        only_missing,
        only_extra,
        differing,
    } = pair_by_offset(missing, &extra);
    report.missing = only_missing.len();
    report.extra = only_extra.len();
    report.differing = differing.len();
    section(
        report,
        "missing from the lake",
        &only_missing,
        show_max,
        |m| format!("  - {} offset {}: {}", m.bucket, m.offset, hot.show(m)),
    );
    if !only_missing.is_empty() {
        report.details.push(format!(
            "  missing offsets by bucket: {}",
            ranges(&only_missing)
        ));
    }
    if !only_extra.is_empty() {
        show_extra(lake, &only_extra, show_max, report);
    }
    section(report, "differing", &differing, show_max, |(h, l)| {
        format!(
            "  ~ {} offset {} in {}: hot {{{}}} lake {{{}}}",
            h.bucket,
            h.offset,
            short_file(&l.file),
            hot.show(h),
            lake.show(l)
        )
    });
    Ok(())
}

/// The hot rows the lake lacks and the lake rows the hot side lacks, as multisets: each side
/// is walked once, taking as many occurrences of a row as its surplus says.
fn surplus_rows<'s>(hot: &'s Side, lake: &'s Side) -> (Vec<&'s Entry>, Vec<&'s Entry>) {
    let mut counts: HashMap<&[u8], i64> = HashMap::with_capacity(hot.rows.len());
    for e in &hot.rows {
        *counts.entry(&e.row).or_default() += 1;
    }
    for e in &lake.rows {
        *counts.entry(&e.row).or_default() -= 1;
    }
    let mut surplus = counts.clone();
    let mut missing: Vec<&Entry> = Vec::new();
    for e in &hot.rows {
        let s = surplus.get_mut(e.row.as_slice()).expect("counted");
        if *s > 0 {
            *s -= 1;
            missing.push(e);
        }
    }
    let mut surplus = counts;
    let mut extra: Vec<&Entry> = Vec::new();
    for e in &lake.rows {
        let s = surplus.get_mut(e.row.as_slice()).expect("counted");
        if *s < 0 {
            *s += 1;
            extra.push(e);
        }
    }
    (missing, extra)
}

/// The rows of a multiset comparison that did not match.
struct Unmatched<'s> {
    only_missing: Vec<&'s Entry>,
    only_extra: Vec<&'s Entry>,
    /// (hot, lake) at the same `(bucket, offset)`.
    differing: Vec<(&'s Entry, &'s Entry)>,
}

/// Missing and extra rows at the same `(bucket, offset)` are one differing row.
fn pair_by_offset<'s>(missing: Vec<&'s Entry>, extra: &[&'s Entry]) -> Unmatched<'s> {
    let extra_at: HashMap<(BucketKey, i64), usize> = extra
        .iter()
        .enumerate()
        .map(|(i, e)| ((e.bucket, e.offset), i))
        .collect();
    let mut paired = vec![false; extra.len()];
    let mut differing = Vec::new();
    let mut only_missing = Vec::new();
    for m in missing {
        match extra_at.get(&(m.bucket, m.offset)) {
            Some(&i) if !paired[i] => {
                paired[i] = true;
                differing.push((m, extra[i]));
            }
            _ => only_missing.push(m),
        }
    }
    let only_extra: Vec<&Entry> = extra
        .iter()
        .zip(&paired)
        .filter(|(_, p)| !**p)
        .map(|(e, _)| *e)
        .collect();
    Unmatched {
        only_missing,
        only_extra,
        differing,
    }
}

/// The rows only the lake has, each with the files holding another copy at its `(bucket,
/// offset)` (which copy of a duplicated row is the extra one is arbitrary: every file holding
/// one is named).
fn show_extra(lake: &Side, only_extra: &[&Entry], show_max: usize, report: &mut TableReport) {
    let wanted: std::collections::HashSet<(BucketKey, i64)> =
        only_extra.iter().map(|e| (e.bucket, e.offset)).collect();
    let mut holders: HashMap<(BucketKey, i64), Vec<&Entry>> = HashMap::new();
    for e in &lake.rows {
        if wanted.contains(&(e.bucket, e.offset)) {
            holders.entry((e.bucket, e.offset)).or_default().push(e);
        }
    }
    section(report, "extra in the lake", only_extra, show_max, |e| {
        let others: Vec<String> = holders
            .get(&(e.bucket, e.offset))
            .map(|hs| {
                hs.iter()
                    .filter(|h| h.file != e.file)
                    .map(|h| short_file(&h.file))
                    .collect()
            })
            .unwrap_or_default();
        let also = if others.is_empty() {
            String::new()
        } else {
            format!(" (also in {})", others.join(", "))
        };
        format!(
            "  + {} offset {} in {}{also}: {}",
            e.bucket,
            e.offset,
            short_file(&e.file),
            lake.show(e)
        )
    });
    let involved: Vec<&Entry> = holders.values().flatten().copied().collect();
    report.details.push(format!(
        "  lake files holding the extra rows or other copies of them: {}",
        by_file(&involved)
    ));
}

/// One section of a report: `title (count, first n):`, then a line for each of the first
/// `show_max` items. Nothing when there are none.
fn section<T>(
    report: &mut TableReport,
    title: &str,
    items: &[T],
    show_max: usize,
    line: impl Fn(&T) -> String,
) {
    if items.is_empty() {
        return;
    }
    report.details.push(format!(
        "{title} ({}, first {}):",
        items.len(),
        show_max.min(items.len())
    ));
    report.details.extend(items.iter().take(show_max).map(line));
}

/// `bucket 0: [3, 5), 9; bucket 2: ...`: offsets compressed into ranges.
fn ranges(entries: &[&Entry]) -> String {
    let mut by_bucket: BTreeMap<BucketKey, Vec<i64>> = BTreeMap::new();
    for e in entries {
        by_bucket.entry(e.bucket).or_default().push(e.offset);
    }
    by_bucket
        .into_iter()
        .map(|(b, mut offsets)| {
            offsets.sort_unstable();
            offsets.dedup();
            let mut parts = Vec::new();
            let mut i = 0;
            while i < offsets.len() {
                let mut j = i;
                while j + 1 < offsets.len() && offsets[j + 1] == offsets[j] + 1 {
                    j += 1;
                }
                parts.push(if i == j {
                    offsets[i].to_string()
                } else {
                    format!("[{}, {})", offsets[i], offsets[j] + 1)
                });
                i = j + 1;
            }
            let shown = parts.len().min(8);
            let more = if parts.len() > shown {
                format!(" and {} more ranges", parts.len() - shown)
            } else {
                String::new()
            };
            format!("{b}: {}{more}", parts[..shown].join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn by_file(entries: &[&Entry]) -> String {
    let mut files: BTreeMap<String, usize> = BTreeMap::new();
    for e in entries {
        *files.entry(short_file(&e.file)).or_default() += 1;
    }
    files
        .into_iter()
        .map(|(f, n)| format!("{f} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Primary-key tables: the hot side is reduced to the last change per key (deletes remove the
/// key); the lake must hold exactly one row per live key, equal to that image.
pub(super) fn compare_by_key(
    hot: &Side,
    lake: &Side,
    start: &BTreeMap<BucketKey, i64>,
    show_max: usize,
    report: &mut TableReport,
) -> Result<()> {
    let retention = start.values().any(|s| *s > 0);
    let last = last_changes(hot);
    let live: HashMap<&[u8], &Entry> = last
        .iter()
        .filter(|(_, e)| e.change != ChangeType::Delete)
        .map(|(k, e)| (*k, *e))
        .collect();
    let mut lake_by_key: HashMap<&[u8], Vec<&Entry>> = HashMap::new();
    for e in &lake.rows {
        lake_by_key.entry(&e.key).or_default().push(e);
    }
    report.hot_rows = live.len();
    report.lake_rows = lake.rows.len();
    let mut missing: Vec<&Entry> = Vec::new();
    let mut differing: Vec<(&Entry, &Entry)> = Vec::new();
    for (key, h) in &live {
        match lake_by_key.get(key) {
            None => missing.push(h),
            Some(ls) => {
                if let Some(l) = ls.iter().find(|l| l.row != h.row) {
                    differing.push((h, l));
                }
            }
        }
    }
    let mut extra = extra_keys(&last, &lake_by_key, retention, &mut report.unchecked);
    missing.sort_by_key(|e| (e.bucket, e.offset));
    differing.sort_by_key(|(h, _)| (h.bucket, h.offset));
    extra.sort_by_key(|(e, _)| (e.bucket, e.offset));
    report.missing = missing.len();
    report.extra = extra.len();
    report.differing = differing.len();
    let mismatches = KeyMismatches {
        missing,
        extra,
        differing,
    };
    show_keys(hot, lake, &mismatches, show_max, report);
    Ok(())
}

/// The last change per key, in offset order per bucket (a key lives in one bucket).
fn last_changes(hot: &Side) -> HashMap<&[u8], &Entry> {
    let mut order: Vec<&Entry> = hot.rows.iter().collect();
    order.sort_by_key(|e| (e.bucket, e.offset));
    let mut last: HashMap<&[u8], &Entry> = HashMap::new();
    for e in order {
        match e.change {
            // `-U` is the old image; its `+U` follows and decides.
            ChangeType::UpdateBefore => {}
            _ => {
                last.insert(&e.key, e);
            }
        }
    }
    last
}

/// The lake rows no live key accounts for, each with the reason. With retention, a key the
/// changelog no longer holds cannot be judged: its rows are counted in `unchecked`.
fn extra_keys<'s>(
    last: &HashMap<&[u8], &'s Entry>,
    lake_by_key: &HashMap<&[u8], Vec<&'s Entry>>,
    retention: bool,
    unchecked: &mut usize,
) -> Vec<(&'s Entry, &'static str)> {
    let mut extra: Vec<(&Entry, &'static str)> = Vec::new();
    for (key, ls) in lake_by_key {
        let reason = match last.get(key) {
            Some(h) if h.change == ChangeType::Delete => Some("deleted in the hot store"),
            Some(_) => None,
            None if retention => {
                *unchecked += ls.len();
                continue;
            }
            None => Some("never written"),
        };
        if let Some(reason) = reason {
            extra.extend(ls.iter().map(|l| (*l, reason)));
        } else if ls.len() > 1 {
            // One image is right (or differing, counted above); the others are duplicates.
            extra.extend(ls.iter().skip(1).map(|l| (*l, "duplicate key")));
        }
    }
    extra
}

/// The sections of a primary-key table's report: missing, extra and differing keys.
fn show_keys(
    hot: &Side,
    lake: &Side,
    mismatches: &KeyMismatches<'_>,
    show_max: usize,
    report: &mut TableReport,
) {
    let KeyMismatches {
        missing,
        extra,
        differing,
    } = mismatches;
    section(
        report,
        "keys missing from the lake",
        missing,
        show_max,
        |m| {
            format!(
                "  - key {{{}}} ({} offset {}): {}",
                hot.show_key(m),
                m.bucket,
                m.offset,
                hot.show(m)
            )
        },
    );
    section(
        report,
        "extra keys in the lake",
        extra,
        show_max,
        |(e, reason)| {
            format!(
                "  + key {{{}}} ({reason}; {} offset {} in {}): {}",
                lake.show_key(e),
                e.bucket,
                e.offset,
                short_file(&e.file),
                lake.show(e)
            )
        },
    );
    section(report, "differing keys", differing, show_max, |(h, l)| {
        format!(
            "  ~ key {{{}}} ({} offset {}, lake file {}): hot {{{}}} lake {{{}}}",
            hot.show_key(h),
            h.bucket,
            h.offset,
            short_file(&l.file),
            hot.show(h),
            lake.show(l)
        )
    });
}

/// The rows of a primary-key table's comparison that did not match.
struct KeyMismatches<'s> {
    missing: Vec<&'s Entry>,
    /// Each with the reason it is extra.
    extra: Vec<(&'s Entry, &'static str)>,
    /// (hot, lake) images of the same key.
    differing: Vec<(&'s Entry, &'s Entry)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array};

    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    /// One changelog or lake row: (id, v, bucket, offset, change type).
    type Row = (i64, &'static str, i32, i64, i8);

    fn lake_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
            Field::new(BUCKET_COLUMN, DataType::Int32, false),
            Field::new(OFFSET_COLUMN, DataType::Int64, false),
            Field::new(
                "__timestamp",
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                false,
            ),
        ]))
    }

    fn batch(rows: &[Row], origin: Origin) -> RecordBatch {
        let mut fields = vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
            Field::new(BUCKET_COLUMN, DataType::Int32, false),
            Field::new(OFFSET_COLUMN, DataType::Int64, false),
        ];
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3))),
        ];
        match origin {
            Origin::Hot => {
                fields.push(Field::new(CHANGE_TYPE_COLUMN, DataType::Int8, false));
                columns.push(Arc::new(Int8Array::from_iter_values(
                    rows.iter().map(|r| r.4),
                )));
            }
            Origin::Lake => {
                fields.push(Field::new(FILE_COLUMN, DataType::Utf8, false));
                columns.push(Arc::new(StringArray::from_iter_values(
                    rows.iter()
                        .map(|r| format!("__bucket={}/f{}.parquet", r.2, r.4)),
                )));
            }
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// Compares hot rows with lake rows (lake rows' last field names their file) and returns
    /// (missing, extra, differing, unchecked).
    fn diff(
        hot: &[Row],
        lake: &[Row],
        keys: &[&str],
        earliest: i64,
    ) -> (usize, usize, usize, usize) {
        let schema = lake_schema();
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let start = silt_connectors::changelog::table_buckets([(0, earliest), (1, earliest)]);
        let hot =
            Side::from_batches(&[batch(hot, Origin::Hot)], &schema, 2, &keys, Origin::Hot).unwrap();
        let lake_batches =
            held_lake_rows(vec![batch(lake, Origin::Lake)], &start, !keys.is_empty()).unwrap();
        let lake = Side::from_batches(&lake_batches, &schema, 2, &keys, Origin::Lake).unwrap();
        let mut report = TableReport::new("t.t", !keys.is_empty());
        report.compare(&hot, &lake, &start, 10).unwrap();
        (
            report.missing,
            report.extra,
            report.differing,
            report.unchecked,
        )
    }

    const A: i8 = 0; // append-only
    const I: i8 = 1;
    const UB: i8 = 2;
    const UA: i8 = 3;
    const D: i8 = 4;

    #[test]
    fn log_tables_compare_as_multisets() {
        let hot: &[Row] = &[(1, "a", 0, 0, A), (2, "b", 0, 1, A), (2, "b", 1, 0, A)];
        let lake: [Row; 3] = [(1, "a", 0, 0, 0), (2, "b", 0, 1, 0), (2, "b", 1, 0, 0)];
        let [a, b0, b1] = lake;
        // Retention dropped offset 0 of each bucket: lake rows below it are not compared.
        let held: &[Row] = &[(2, "b", 0, 1, A)];
        // (hot, lake, earliest held offset, (missing, extra, differing, unchecked))
        let cases: [(&[Row], &[Row], i64, _); 5] = [
            (hot, &lake, 0, (0, 0, 0, 0)),
            // A lost row, a duplicated row, a changed row (same bucket and offset, other values).
            (hot, &[a, b0], 0, (1, 0, 0, 0)),
            (hot, &[a, (1, "a", 0, 0, 1), b0, b1], 0, (0, 1, 0, 0)),
            (hot, &[a, (2, "x", 0, 1, 0), b1], 0, (0, 0, 1, 0)),
            (held, &lake, 1, (0, 0, 0, 0)),
        ];
        for (hot, lake, earliest, want) in cases {
            let got = diff(hot, lake, &[], earliest);
            assert_eq!(got, want, "hot {hot:?}, lake {lake:?}");
        }
    }

    #[test]
    fn primary_key_tables_compare_the_last_image_per_key() {
        // id 1: inserted then updated; id 2: inserted then deleted; id 3: inserted.
        let hot = [
            (1, "a", 0, 0, I),
            (2, "b", 1, 0, I),
            (1, "a", 0, 1, UB),
            (1, "a2", 0, 2, UA),
            (2, "b", 1, 1, D),
            (3, "c", 1, 2, I),
        ];
        let good: &[Row] = &[(1, "a2", 0, 2, 0), (3, "c", 1, 2, 0)];
        // Retention dropped offsets < 2: only 1 and 3 are decided by the held changelog; a lake
        // key the held range never mentions is unchecked, not extra.
        let held: &[Row] = &[(1, "a2", 0, 2, UA), (3, "c", 1, 2, I)];
        // (hot, lake, earliest held offset, (missing, extra, differing, unchecked))
        #[rustfmt::skip]
        let cases: [(&[Row], &[Row], i64, _); 5] = [
            (&hot, good, 0, (0, 0, 0, 0)),
            // The old image of 1, the deleted 2 resurrected, 3 missing.
            (&hot, &[(1, "a", 0, 0, 0), (2, "b", 1, 0, 0)], 0, (1, 1, 1, 0)),
            // A key held twice.
            (&hot, &[good[0], (1, "a2", 0, 2, 1), good[1]], 0, (0, 1, 0, 0)),
            (held, &[good[0], good[1], (9, "z", 0, 0, 0)], 2, (0, 0, 0, 1)),
            (held, &[(1, "a", 0, 0, 0), good[1]], 2, (0, 0, 1, 0)),
        ];
        for (hot, lake, earliest, want) in cases {
            let got = diff(hot, lake, &["id"], earliest);
            assert_eq!(got, want, "hot {hot:?}, lake {lake:?}");
        }
    }

    #[test]
    fn offsets_are_shown_as_ranges() {
        let entry = |bucket, offset| Entry {
            row: vec![],
            key: vec![],
            bucket: BucketKey::table(bucket),
            offset,
            change: ChangeType::AppendOnly,
            at: (0, 0),
            file: None,
        };
        let es = [entry(0, 3), entry(0, 4), entry(0, 9), entry(2, 0)];
        let refs: Vec<&Entry> = es.iter().collect();
        assert_eq!(ranges(&refs), "bucket 0: [3, 5), 9; bucket 2: 0");
    }
}
