//! The primary-key write path, the kv tablet's write-ahead rule: an upsert looks up the old row
//! and appends the changelog to the bucket's log tablet as one Fluss ARROW log batch with
//! per-record change types and full row images (`+I` for a new key, `-U` (old) then `+U` (new)
//! for an update, `-D` (old) for a delete, nothing when the row did not change). Only once that
//! batch is durable are the changes applied to the kv tablet, which records the log offset it
//! applied. A partial update (`target_columns`) merges the written columns into the old row.
//!
//! The table's merge rules ([`MergeRules`]: Fluss's `table.merge-engine` and
//! `table.delete.behavior`) decide what a write does to the old row: a `first_row` table keeps
//! it, a `versioned` table keeps it over a lower version, an ignored delete leaves it. A write
//! that the rules turn into no change appends nothing, and its sequence still counts through
//! the log tablet's durable mark, so a retry is acknowledged as a duplicate. A refused write
//! (a disabled delete, a partial update of a merge table) fails the whole bucket's batch before
//! anything is appended, as in Fluss.
//!
//! The kv tablet stores each row as the Fluss lookup value: the schema id (`i16`, little
//! endian) followed by the row in the table's kv format, so a lookup returns it as stored.

use super::rows::{
    DELETE, INSERT, RowCodec, SCHEMA_ID_BYTES, UPDATE_AFTER, UPDATE_BEFORE, row_count_delta,
};
use super::{Bucket, TableRuntime};
use crate::catalog::{DELETE_BEHAVIOR, DeleteBehavior, MergeEngine, MergeRules};
use crate::codec::build::{HeaderFields, build_batch};
use crate::protocol::{ApiError, code};
use crate::storage::WriterCheck;
use bytes::Bytes;
use std::collections::HashMap;

/// A key and its new row (`None`: delete), as a PutKv carries them.
pub(crate) type Write = (Bytes, Option<Bytes>);

/// One bucket's part of a PutKv.
pub(crate) struct KvWrite<'a> {
    pub writes: Vec<Write>,
    pub writer_id: i64,
    pub sequence: i32,
    /// The written columns of a partial update (`None`: whole rows).
    pub targets: Option<&'a [usize]>,
    pub mode: MergeMode,
}

/// How a PutKv combines with the rows it finds (its `agg_mode`, Fluss's `MergeMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MergeMode {
    /// Through the table's merge rules.
    Merge,
    /// Rows replaced and deleted as they come, whatever the table's rules
    /// ([`MergeRules::OVERWRITE`]).
    Overwrite,
}

/// Writes one bucket's upserts and deletes of a PutKv: reads each key's old row, appends the
/// changelog (with the writer's id and sequence, durably), then applies the new rows to the kv
/// tablet. Returns the log end offset to acknowledge.
pub(crate) async fn write(
    table: &TableRuntime,
    bucket: &Bucket,
    write: KvWrite<'_>,
) -> Result<i64, ApiError> {
    let KvWrite {
        writes,
        writer_id,
        sequence,
        targets,
        mode,
    } = write;
    let rules = merge_rules(table, mode)?;
    refuse_partial_merge(table, &rules, targets)?;
    let codec = RowCodec::new(table)?;
    let kv = bucket
        .kv
        .as_ref()
        .ok_or_else(|| ApiError::new(code::NON_PRIMARY_KEY_TABLE, "bucket has no kv tablet"))?;
    let _guard = bucket.write_lock.lock().await;
    catch_up_kv(table, bucket)?;
    let context = bucket.name();
    // The bucket's log tablet keeps the writer state of log and kv writes alike (Fluss's rule,
    // surviving restarts): the changelog batch carries this write's writer id and sequence.
    let check = bucket
        .log
        .check_writer(writer_id, sequence)
        .map_err(|e| bucket.storage_error(&context, e))?;
    if let WriterCheck::Duplicate { next_offset } = check {
        tracing::debug!(
            bucket = bucket.id,
            writer_id,
            sequence,
            "acknowledging retried kv batch without applying"
        );
        return Ok(next_offset);
    }
    let Staged {
        pending,
        change_types,
        images,
    } = stage(table, bucket, &rules, &codec, writes, targets)?;
    if change_types.is_empty() {
        // Nothing to append, but the sequence must still count, durably.
        return bucket
            .log
            .record_unchanged_write(writer_id, sequence)
            .map_err(|e| bucket.storage_error(&context, e));
    }
    let writer = (writer_id, sequence);
    let changelog = changelog_batch(table, &codec, writer, &change_types, &images)?;
    // The changelog is the write-ahead log: once it holds the batch (with its writer id and
    // sequence), the write is done, and a retry after a failed kv apply or a crash is answered
    // as a duplicate rather than applied again.
    let info = bucket.append_changelog(changelog).await?;
    crate::storage::durability::after_durable_write();
    let changes: Vec<(Vec<u8>, Option<Vec<u8>>)> =
        pending.into_iter().map(|(k, v)| (k.to_vec(), v)).collect();
    let row_count_delta = row_count_delta(&change_types);
    if let Err(e) = kv.apply(&changes, row_count_delta, info.next_offset) {
        bucket
            .kv_behind
            .store(true, std::sync::atomic::Ordering::Release);
        return Err(bucket.storage_error(&context, e));
    }
    Ok(info.next_offset)
}

/// A merge engine takes whole rows: a partial update (`targets`) of its table is refused.
fn refuse_partial_merge(
    table: &TableRuntime,
    rules: &MergeRules,
    targets: Option<&[usize]>,
) -> Result<(), ApiError> {
    match (targets, rules.engine.name()) {
        (Some(_), Some(engine)) => Err(ApiError::new(
            code::INVALID_TARGET_COLUMN,
            format!(
                "partial update of {} is not supported by its {engine} merge engine: write whole rows",
                table.entry.qualified_name()
            ),
        )),
        _ => Ok(()),
    }
}

/// A previous apply failed after its changelog was durable: catches the kv up from the log
/// before anything is decided on its state.
fn catch_up_kv(table: &TableRuntime, bucket: &Bucket) -> Result<(), ApiError> {
    if bucket.kv_behind.load(std::sync::atomic::Ordering::Acquire) {
        super::recovery::recover(table, bucket)?;
        bucket
            .kv_behind
            .store(false, std::sync::atomic::Ordering::Release);
    }
    Ok(())
}

/// A PutKv's changes before they are logged: each key's new value (by key, so a key written
/// twice in one batch sees its first write), and the changelog's change types and row images.
#[derive(Default)]
struct Staged {
    pending: HashMap<Bytes, Option<Vec<u8>>>,
    change_types: Vec<u8>,
    images: Vec<Vec<u8>>,
}

impl Staged {
    /// Logs the change from `old` to `new` (stored rows; `None`: no row); false when there is
    /// none.
    fn record(&mut self, old: &Option<Vec<u8>>, new: &Option<Vec<u8>>) -> bool {
        match (old, new) {
            (None, None) => return false,
            (Some(old), Some(new)) if old == new => return false,
            (None, Some(new)) => {
                self.change_types.push(INSERT);
                self.images.push(new.clone());
            }
            (Some(old), Some(new)) => {
                self.change_types.extend([UPDATE_BEFORE, UPDATE_AFTER]);
                self.images.push(old.clone());
                self.images.push(new.clone());
            }
            (Some(old), None) => {
                self.change_types.push(DELETE);
                self.images.push(old.clone());
            }
        }
        true
    }
}

/// Whether a delete is applied under the table's delete behavior (`false`: ignored); an error
/// where deletes are disabled.
fn admits_delete(table: &TableRuntime, rules: &MergeRules) -> Result<bool, ApiError> {
    match rules.deletes {
        DeleteBehavior::Allow => Ok(true),
        DeleteBehavior::Ignore => Ok(false),
        DeleteBehavior::Disable => Err(ApiError::new(
            code::DELETION_DISABLED,
            format!(
                "deletes from {} are disabled ({DELETE_BEHAVIOR} is disable): write rows, or create the table with allow or ignore",
                table.entry.qualified_name(),
            ),
        )),
    }
}

/// Reads each written key's current row (in the current schema) and decides, by the table's
/// merge rules, its new row and the changes it logs.
fn stage(
    table: &TableRuntime,
    bucket: &Bucket,
    rules: &MergeRules,
    codec: &RowCodec,
    writes: Vec<Write>,
    targets: Option<&[usize]>,
) -> Result<Staged, ApiError> {
    let kv = bucket
        .kv
        .as_ref()
        .ok_or_else(|| ApiError::new(code::NON_PRIMARY_KEY_TABLE, "bucket has no kv tablet"))?;
    let context = bucket.name();
    let mut staged = Staged::default();
    for (key, value) in writes {
        if value.is_none() && !admits_delete(table, rules)? {
            continue;
        }
        let old = match staged.pending.get(&key) {
            Some(staged) => staged.clone(),
            None => kv
                .get(&key)
                .map_err(|e| bucket.storage_error(&context, e))?
                // A row stored under an earlier schema is merged and logged in the current one.
                .map(|v| codec.current_stored(v.to_vec()))
                .transpose()?,
        };
        let old_row = old
            .as_deref()
            .map(|stored| &stored[SCHEMA_ID_BYTES.min(stored.len())..]);
        let new = match (&value, targets) {
            (Some(row), None) if keeps_old_row(rules.engine, codec, old_row, row)? => continue,
            (Some(row), None) => Some(codec.stored(row)),
            (Some(row), Some(targets)) => {
                // A new key gets the next value of the table's auto-increment column.
                let assigned = match (&table.auto_increment, old_row) {
                    (Some(column), None) => Some((
                        column.column,
                        column.next(&table.entry.qualified_name())?,
                        column.is_int,
                    )),
                    _ => None,
                };
                Some(codec.stored(&codec.merge_assigning(old_row, row, targets, assigned)?))
            }
            (None, None) => None,
            (None, Some(targets)) => match old_row {
                // A partial delete nulls the target columns; the row goes once only the key is left.
                Some(old_row) if !covers_all_non_key(table, targets) => {
                    Some(codec.stored(&codec.merge(Some(old_row), old_row, targets, true)?))
                }
                _ => None,
            },
        };
        if staged.record(&old, &new) {
            staged.pending.insert(key, new);
        }
    }
    Ok(staged)
}

/// The rules a write goes by: the table's, or none under [`MergeMode::Overwrite`]. A table
/// whose properties silt refuses can exist only if an older silt created it; it is not written
/// rather than written as last-write-wins.
fn merge_rules(table: &TableRuntime, mode: MergeMode) -> Result<MergeRules, ApiError> {
    match mode {
        MergeMode::Overwrite => Ok(MergeRules::OVERWRITE),
        MergeMode::Merge => MergeRules::of(&table.entry.descriptor).map_err(|reason| {
            ApiError::new(
                code::INVALID_CONFIG,
                format!(
                    "table {} cannot be written: {reason} (an older silt created it without checking; recreate it)",
                    table.entry.qualified_name()
                ),
            )
        }),
    }
}

/// Whether the merge engine keeps the key's row `old` over an upsert of `new` (both without
/// schema id): `first_row` always, `versioned` when `new`'s version is lower.
fn keeps_old_row(
    engine: MergeEngine,
    codec: &RowCodec,
    old: Option<&[u8]>,
    new: &[u8],
) -> Result<bool, ApiError> {
    let Some(old) = old else { return Ok(false) };
    match engine {
        MergeEngine::LastWrite => Ok(false),
        MergeEngine::FirstRow => Ok(true),
        MergeEngine::Versioned(column) => {
            Ok(codec.version(old, column)? > codec.version(new, column)?)
        }
    }
}

fn covers_all_non_key(table: &TableRuntime, targets: &[usize]) -> bool {
    let schema = table.entry.descriptor.schema();
    let keys = schema.primary_key_indexes();
    (0..schema.row_type().fields().len()).all(|pos| keys.contains(&pos) || targets.contains(&pos))
}

/// Builds one ARROW changelog batch from stored row images (schema id + row).
fn changelog_batch(
    table: &TableRuntime,
    codec: &RowCodec,
    (writer_id, batch_sequence): (i64, i32),
    change_types: &[u8],
    images: &[Vec<u8>],
) -> Result<Bytes, ApiError> {
    let internal = |e: fluss::error::Error| {
        ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("changelog encode: {e}"))
    };
    let mut builder =
        fluss::record::RowAppendRecordBatchBuilder::new(&codec.row_type).map_err(internal)?;
    for image in images {
        let row = codec.decoder.decode(&image[SCHEMA_ID_BYTES..]);
        builder.append(&row).map_err(internal)?;
    }
    let record_batch = builder.build_arrow_record_batch().map_err(internal)?;
    debug_assert_eq!(
        record_batch.schema().fields().len(),
        table.arrow_schema.fields().len()
    );
    let message = crate::codec::arrow::encode_arrow_message(&record_batch)
        .map_err(|e| ApiError::new(code::UNKNOWN_SERVER_ERROR, format!("changelog encode: {e}")))?;
    Ok(build_batch(
        HeaderFields {
            base_offset: 0,
            commit_timestamp: 0,
            schema_id: codec.schema_id,
            append_only: false,
            writer_id,
            batch_sequence,
            record_count: change_types.len() as i32,
        },
        change_types,
        &message,
    ))
}
