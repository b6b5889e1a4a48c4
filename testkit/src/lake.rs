//! Reading back what tests wrote: a Delta table through DataFusion (registered as `lake`), a
//! silt table through its changelog up to its high watermarks, and record batches as rows of
//! text (`a|b|c`) or as columns of one type. Every read is bounded (a changelog read gives up
//! after 30 s).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use arrow::array::{Array, Int8Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::DataType;
use datafusion::prelude::SessionContext;
use silt_connectors::changelog::{CHANGE_TYPE_COLUMN, ChangeType};
use silt_connectors::fluss::{EndPosition, FlussSource, FlussSourceConfig};
use silt_engine::{RestoredState, Source, SourcePoll, TaskContext};

/// `sql` over the newest version of the Delta table at `uri`, registered as `lake`.
pub async fn query(uri: &Path, sql: &str) -> Result<Vec<RecordBatch>> {
    let delta = deltalake::open_table(deltalake::ensure_table_uri(uri.to_string_lossy())?).await?;
    run_sql(delta, sql).await
}

/// As [`query`], for a table in an object store opened with `options`.
pub async fn query_with_options(
    uri: &str,
    options: &HashMap<String, String>,
    sql: &str,
) -> Result<Vec<RecordBatch>> {
    let url = deltalake::ensure_table_uri(uri)?;
    let delta = deltalake::open_table_with_storage_options(url, options.clone())
        .await
        .with_context(|| format!("open {uri}"))?;
    run_sql(delta, sql).await
}

async fn run_sql(delta: deltalake::DeltaTable, sql: &str) -> Result<Vec<RecordBatch>> {
    let ctx = SessionContext::new();
    ctx.register_table("lake", delta.table_provider().await?)?;
    Ok(ctx.sql(sql).await?.collect().await?)
}

/// `sql` over the Delta table at `uri` as sorted `a|b|c` rows; empty before its first commit.
pub async fn delta_rows(uri: &Path, sql: &str) -> Result<Vec<String>> {
    if !uri.join("_delta_log").exists() {
        return Ok(Vec::new());
    }
    Ok(sorted(rows_of(&query(uri, sql).await?)))
}

/// The latest image per key of a primary-key silt table, read from its changelog up to the
/// high watermarks, as sorted rows of its user columns (the key is the first column).
pub async fn silt_table_rows(bootstrap: &str, database: &str, table: &str) -> Result<Vec<String>> {
    let mut config = FlussSourceConfig::new(bootstrap, database, table);
    config.end = EndPosition::LatestAtOpen;
    let mut source = FlussSource::new(config);
    let ctx = TaskContext {
        job_name: "test".into(),
        vertex_name: "read".into(),
        subtask_index: 0,
        parallelism: 1,
        attempt: 0,
    };
    source.open(&ctx, RestoredState::default()).await?;
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if Instant::now() > deadline {
            bail!("reading {database}.{table} timed out");
        }
        match source.poll_next().await? {
            SourcePoll::End => break,
            SourcePoll::Idle(_) | SourcePoll::BacklogRead => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            SourcePoll::Batch(batch) => {
                let changes = batch
                    .column_by_name(CHANGE_TYPE_COLUMN)
                    .and_then(|c| c.as_any().downcast_ref::<Int8Array>().cloned())
                    .ok_or_else(|| anyhow!("no change type column"))?;
                let users = batch.num_columns() - 4;
                let user_batch = batch.project(&(0..users).collect::<Vec<_>>())?;
                for (i, row) in rows_of(&[user_batch]).into_iter().enumerate() {
                    let key = row.split('|').next().unwrap_or_default().to_string();
                    match ChangeType::from_i8(changes.value(i)).context("change type")? {
                        ChangeType::Delete => {
                            latest.remove(&key);
                        }
                        ChangeType::UpdateBefore => {}
                        _ => {
                            latest.insert(key, row);
                        }
                    }
                }
            }
        }
    }
    Ok(sorted(latest.into_values().collect()))
}

/// Rows as `a|b|c` strings, in batch order.
pub fn rows_of(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, i).unwrap())
                .collect();
            rows.push(cells.join("|"));
        }
    }
    rows
}

pub fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

/// Column `column` of every batch, cast to BIGINT (so INT and BIGINT columns read alike).
pub fn i64s(batches: &[RecordBatch], column: usize) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let a = arrow::compute::cast(b.column(column), &DataType::Int64).unwrap();
            a.as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect()
}

/// Column `column` of every batch as strings (DataFusion may read strings as Utf8View).
pub fn strings(batches: &[RecordBatch], column: usize) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let a = arrow::compute::cast(b.column(column), &DataType::Utf8).unwrap();
            let a = a.as_any().downcast_ref::<StringArray>().unwrap();
            (0..a.len())
                .map(|i| a.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Runs `body` in python with `t = deltalake.DeltaTable(uri)` (an outside reader of the lake)
/// and returns what it printed; `None`, saying SKIPPED in `test`, when python's deltalake is
/// missing. Panics when the script fails.
pub fn python_deltalake(test: &str, body: &str, uri: &str) -> Option<String> {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import deltalake"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!(
            "SKIPPED (python part of {test}): `python3 -c 'import deltalake'` fails (pip install deltalake)"
        );
        return None;
    }
    // os._exit: python deltalake sometimes aborts in interpreter teardown after the read
    // succeeded; skip the teardown.
    let script = format!(
        "import sys, os, deltalake\nt = deltalake.DeltaTable(sys.argv[1])\n{body}\nsys.stdout.flush()\nos._exit(0)"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script, uri])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `sql` through silt's query service (`timeout` its deadline), as sorted `a|b|c` rows.
#[cfg(feature = "services")]
pub async fn query_rows(
    queries: &silt_jobs::query::QueryService,
    sql: &str,
    timeout: Duration,
) -> Result<Vec<String>> {
    let result = queries
        .execute(silt_jobs::query::QueryRequest::new(sql, timeout))
        .await
        .with_context(|| sql.to_string())?;
    Ok(sorted(rows_of(&result.batches)))
}

/// The Arrow schema of the key-value table the Delta sink tests and benches write: `k BIGINT
/// NOT NULL` (the key of a primary-key table), `v STRING`, `ts TIMESTAMP(3) NOT NULL`.
pub fn key_value_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{Field, Schema, TimeUnit};
    std::sync::Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// Puts `parquet` (a data file's bytes) into the staging directory of `lake` as
/// `<name>.parquet`, where a writer stages a file before the commit that adds it; answers the
/// path a [`Committable`](silt_connectors::delta::Committable) names it by.
pub async fn stage_parquet(
    lake: &silt_connectors::delta::LakeTable,
    name: &str,
    parquet: Vec<u8>,
) -> Result<String> {
    use datafusion::object_store::ObjectStoreExt as _;
    let path = format!("{}/{name}.parquet", silt_connectors::delta::STAGING_DIR);
    lake.table()
        .object_store()
        .put(&deltalake::Path::from(path.as_str()), parquet.into())
        .await
        .with_context(|| format!("stage {path}"))?;
    Ok(path)
}
