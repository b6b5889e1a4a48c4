//! The real-time view `db.t`: the pinned lake version plus the hot tail, user columns only.
//!
//! The tail is read through the Fluss source (one subtask owning every bucket) from the lake's
//! txn offsets up to the captured high watermarks. A log table's view is the union of both
//! tiers. A primary-key table's tail is reduced to the last change per key; those keys replace
//! their lake rows (anti join), and only keys whose last change is an upsert come back.
//!
//! The tail a query built is kept for the next query of the table ([`super::kept_tail`]), which
//! then reads from the hot store only what arrived since and drops what the lake took over.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, Int8Array, RecordBatch};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::view::ViewTable;
use datafusion::common::ScalarValue;
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan, LogicalPlanBuilder, cast, ident, lit};
use fluss::rpc::message::OffsetSpec;
use silt_engine::{RestoredState, Source as _, SourcePoll, TaskContext};

use super::{
    Error, LakeCatalog, PinnedLake, QueryProgress, RealtimeView, Result, Stage, TableMeta,
    kept_tail,
};
use crate::changelog::{BucketKey, CHANGE_TYPE_COLUMN, ChangeType, OFFSET_COLUMN};
use crate::fluss::{EndPosition, FlussSource, FlussSourceConfig, StartPosition};
use crate::lake_format::LakeFormat;

pub(super) async fn provider(
    catalog: &LakeCatalog,
    meta: &TableMeta,
    pinned: &PinnedLake,
    high_watermarks: &BTreeMap<BucketKey, i64>,
    progress: &Arc<QueryProgress>,
) -> Result<RealtimeView> {
    let (tail, tail_offsets_read) = tail(catalog, meta, pinned, high_watermarks, progress).await?;
    let user_schema = meta.user_schema.clone();
    let format = catalog.config().format.as_ref();
    let tail_plan = |batch: RecordBatch| -> Result<LogicalPlanBuilder> {
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
        Ok(LogicalPlanBuilder::scan(
            "tail",
            provider_as_source(Arc::new(table)),
            None,
        )?)
    };
    let lake = match &pinned.table {
        Some(_) => {
            let provider = catalog.lake_provider(meta, pinned).await?;
            let lake_schema = provider.schema();
            Some(
                LogicalPlanBuilder::scan("lake", provider_as_source(provider), None)?
                    .project(lake_columns(format, &user_schema, &lake_schema))?,
            )
        }
        None => None,
    };

    let plan: LogicalPlan = if meta.primary_key.is_empty() {
        let tail = tail_plan(tail)?.project(user_columns(format, &user_schema))?;
        match lake {
            Some(lake) => lake.union(tail.build()?)?.build()?,
            None => tail.build()?,
        }
    } else {
        let reduced = tail;
        let upserts = filter_record_batch(&reduced, &is_upsert(&reduced)?)?;
        let upserts = tail_plan(upserts)?.project(user_columns(format, &user_schema))?;
        match lake {
            Some(lake) => {
                let keys: Vec<Expr> = meta.primary_key.iter().map(ident).collect();
                let changed = tail_plan(reduced)?
                    .project(keys)?
                    .alias("changed")?
                    .build()?;
                let left: Vec<datafusion::common::Column> = meta
                    .primary_key
                    .iter()
                    .map(|k| datafusion::common::Column::new(Some("lake"), k))
                    .collect();
                let right: Vec<datafusion::common::Column> = meta
                    .primary_key
                    .iter()
                    .map(|k| datafusion::common::Column::new(Some("changed"), k))
                    .collect();
                lake.alias("lake")?
                    .join(changed, JoinType::LeftAnti, (left, right), None)?
                    .union(upserts.build()?)?
                    .build()?
            }
            None => upserts.build()?,
        }
    };
    Ok(RealtimeView {
        provider: Arc::new(ViewTable::new(plan, None)),
        tail_offsets_read,
    })
}

/// The table's hot tail as the view uses it (a primary-key table's reduced to the last change
/// per key) and how many offsets of it were read now: what the kept tail of the table still
/// holds, plus what arrived since. Keeps the result for the next query.
async fn tail(
    catalog: &LakeCatalog,
    meta: &TableMeta,
    pinned: &PinnedLake,
    high_watermarks: &BTreeMap<BucketKey, i64>,
    progress: &Arc<QueryProgress>,
) -> Result<(RecordBatch, i64)> {
    let started = std::time::Instant::now();
    let kept = catalog.kept_tails.get(meta.table_id, &meta.user_schema);
    // Where the changelog of each bucket the lake has nothing of starts now: one request,
    // only when there is such a bucket, so its tail can be kept too.
    let earliest = if high_watermarks
        .keys()
        .any(|b| !pinned.offsets.contains_key(b))
    {
        catalog.bucket_offsets(meta, OffsetSpec::Earliest).await?
    } else {
        BTreeMap::new()
    };
    let mut reuse = kept_tail::reuse(kept.as_deref(), &pinned.offsets, &earliest, high_watermarks)?;
    let source_schema = kept.as_ref().map(|k| k.source_schema.clone());
    let (new, read) = match read_tail(
        catalog,
        meta,
        &reuse,
        source_schema,
        high_watermarks,
        progress,
    )
    .await?
    {
        Some(read) => read,
        // The hot store answered in other columns than those kept (the table changed in
        // between): read the whole tail again.
        None => {
            reuse = kept_tail::reuse(None, &pinned.offsets, &earliest, high_watermarks)?;
            read_tail(catalog, meta, &reuse, None, high_watermarks, progress)
                .await?
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "the hot tail of {} changed its columns while read",
                        meta.name()
                    ))
                })?
        }
    };
    let read_at = started.elapsed();
    let source_schema = new.schema();
    let tail = kept_tail::merge(reuse.rows, new, &meta.primary_key)?;
    tracing::debug!(
        table = %meta.name(),
        offsets_read = read,
        rows = tail.num_rows(),
        kept = kept.is_some(),
        read_ms = read_at.as_secs_f64() * 1e3,
        merge_ms = (started.elapsed() - read_at).as_secs_f64() * 1e3,
        "hot tail of a real-time view"
    );
    catalog.kept_tails.keep(
        meta.table_id,
        kept_tail::KeptTail {
            user_schema: meta.user_schema.clone(),
            source_schema,
            ranges: kept_tail::ranges(&pinned.offsets, &earliest, high_watermarks),
            rows: tail.clone(),
        },
    );
    Ok((tail, read))
}

/// The user's columns, cast to the types the lake stores them in, so both tiers agree: the
/// tail's casts are the lossless ones tiering makes ([`LakeFormat::lake_data_type`]), and the lake's only
/// undo how DataFusion reads it (views of strings and binaries). Going the other way, from the
/// lake to the types the Fluss client reads, has no cast for a BINARY(n) (FixedSizeBinary).
/// A type the lake cannot store (a table that is not tiered) stays as the client reads it.
fn user_columns(format: &dyn LakeFormat, schema: &SchemaRef) -> Vec<Expr> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let lake_type = format
                .lake_data_type(f.name(), f.data_type())
                .unwrap_or_else(|_| f.data_type().clone());
            cast(ident(f.name()), lake_type).alias(f.name())
        })
        .collect()
}

/// [`user_columns`] of the lake, whose schema may lack columns the table gained since its
/// last tiering (Fluss's ADD COLUMN, always nullable): those read as null, as they do for the
/// lake's older rows once it has them.
fn lake_columns(format: &dyn LakeFormat, user: &SchemaRef, lake: &SchemaRef) -> Vec<Expr> {
    user_columns(format, user)
        .into_iter()
        .zip(user.fields())
        .map(|(column, field)| {
            if lake.index_of(field.name()).is_ok() {
                return column;
            }
            let lake_type = format
                .lake_data_type(field.name(), field.data_type())
                .unwrap_or_else(|_| field.data_type().clone());
            cast(lit(ScalarValue::Null), lake_type).alias(field.name())
        })
        .collect()
}

fn is_upsert(batch: &RecordBatch) -> Result<BooleanArray> {
    let types = batch
        .column_by_name(CHANGE_TYPE_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<Int8Array>())
        .ok_or_else(|| Error::Internal(format!("tail batch without {CHANGE_TYPE_COLUMN}")))?;
    Ok(types
        .iter()
        .map(|t| {
            Some(
                t.and_then(ChangeType::from_i8)
                    .is_some_and(ChangeType::is_upsert),
            )
        })
        .collect())
}

/// Reads what `reuse` leaves to read, up to the high watermarks, through the Fluss source: the
/// new rows (without the kept ones) and the offsets read. `None` when the hot store's columns
/// are not `kept_schema`, those the kept rows were read in.
async fn read_tail(
    catalog: &LakeCatalog,
    meta: &TableMeta,
    reuse: &kept_tail::Reuse,
    kept_schema: Option<SchemaRef>,
    high_watermarks: &BTreeMap<BucketKey, i64>,
    progress: &Arc<QueryProgress>,
) -> Result<Option<(RecordBatch, i64)>> {
    let total = reuse.offsets_to_read;
    let name = meta.name();
    progress.set_stage(Stage::ReadingHotTail {
        table: name.clone(),
        offsets_read: 0,
        offsets_total: total,
    });
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut bytes: usize = reuse.rows.iter().map(|b| b.get_array_memory_size()).sum();
    let mut read = 0i64;
    if reuse.needs_read() {
        let mut config = FlussSourceConfig::new(
            catalog.config().bootstrap_servers.clone(),
            meta.database.clone(),
            meta.table.clone(),
        );
        // Buckets the lake never saw start at the earliest offset the hot store keeps; a
        // partition created after the high watermarks were captured is not read.
        config.start = StartPosition::Offsets(reuse.start.clone());
        config.credentials = catalog.config().credentials.clone();
        config.end = EndPosition::Offsets(high_watermarks.clone());
        // Rows kept for the next query name their bucket; a partitioned table's need the
        // partition too. A table of the name but another id is not this table's tail.
        config.partition_id_column = meta.is_partitioned();
        config.table_id = Some(meta.table_id);
        let mut source = FlussSource::new(config);
        let ctx = TaskContext::single(format!("query {name}"), "hot-tail");
        source
            .open(&ctx, RestoredState::default())
            .await
            .map_err(|e| Error::Fluss(format!("reading the hot tail of {name}: {e}")))?;
        loop {
            match source
                .poll_next()
                .await
                .map_err(|e| Error::Fluss(format!("reading the hot tail of {name}: {e}")))?
            {
                SourcePoll::Batch(batch) => {
                    if kept_schema.as_ref().is_some_and(|s| *s != batch.schema()) {
                        return Ok(None);
                    }
                    read += batch.num_rows() as i64;
                    bytes += batch.get_array_memory_size();
                    if bytes > catalog.config().tail_bytes_max {
                        return Err(Error::user(format!(
                            "the hot tail of {name} holds more than {} bytes ({read} of {total} offsets read); wait for tiering to catch up (wait_for_tiering) or query {name}$lake",
                            catalog.config().tail_bytes_max
                        )));
                    }
                    batches.push(batch);
                    progress.set_stage(Stage::ReadingHotTail {
                        table: name.clone(),
                        offsets_read: read,
                        offsets_total: total,
                    });
                }
                SourcePoll::End => break,
                _ => {}
            }
        }
    }
    let schema = batches
        .first()
        .map(|b| b.schema())
        .or(kept_schema)
        .unwrap_or_else(|| tail_schema(&meta.user_schema, meta.is_partitioned()));
    let batch = concat_batches(&schema, &batches)?;
    debug_assert!(batch.column_by_name(OFFSET_COLUMN).is_some());
    Ok(Some((batch, read)))
}

/// The columns of an empty tail, as the source would have read them.
fn tail_schema(user: &SchemaRef, partitioned: bool) -> SchemaRef {
    let mut fields: Vec<_> = user.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(crate::changelog::stream_system_fields());
    if partitioned {
        fields.push(crate::changelog::partition_id_field());
    }
    Arc::new(Schema::new(fields))
}
