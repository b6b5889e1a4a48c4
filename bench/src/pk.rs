//! `silt bench pk`: primary-key tiering as the table grows. For each size it bulk-loads a
//! primary-key lake of that many keys (8 buckets, one `bigint` key, deletion vectors on, the
//! default; `--copy-on-write` for the MERGE that rewrites files), opens the primary-key committer on it, and times its commits of `changed` random
//! changed keys: the first after the open builds the key index from the lake (reported apart),
//! the median of the next `commits` is the steady cost. Beside them: the key index's bytes on
//! disk per key against the key's raw bytes, what its block cache and memtables hold in memory
//! (bounded by `lake.key_index_cache_bytes`), and the ratio of the largest size's commit to the
//! smallest's.
//!
//! The commits are the tiering job's own (`LakeTable::plan` + `apply` on staged change files, as
//! its committer runs them); the load writes the lake's Parquet straight through deltalake, as
//! a first tiering of a large table would leave it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::{
    Array, Int8Array, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::object_store::ObjectStoreExt as _;
use parquet::arrow::ArrowWriter;
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use silt_connectors::changelog::{BucketKey, ChangeType};
use silt_connectors::delta::{
    BucketRange, Committable, DeltaSinkConfig, KeyIndex, LakeTable, LogFiles, STAGING_DIR,
    TableKind, open_indexes_memory,
};

use crate::report::{Table, say};

/// The flags of `silt bench pk`.
#[derive(Debug, Clone, clap::Args)]
pub struct PkBenchOptions {
    /// Table sizes in keys, smallest first (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    pub keys: Vec<u64>,
    /// Keys changed by each timed commit (random keys of the whole table).
    #[arg(long, default_value_t = 10_000)]
    pub changed: usize,
    /// Timed commits per size, after the one that builds the key index.
    #[arg(long, default_value_t = 5)]
    pub commits: usize,
    /// Copy-on-write MERGE instead of deletion vectors and the key index (a commit rewrites
    /// every file holding a changed key).
    #[arg(long)]
    pub copy_on_write: bool,
    /// Scratch directory (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

const BUCKETS: i64 = 8;
/// Raw bytes of one key: the `bigint` key column.
const RAW_KEY_BYTES: f64 = 8.0;
const LOAD_BATCH_ROWS: usize = 100_000;

/// What one size measured.
struct Measured {
    keys: u64,
    load_s: f64,
    /// The first commit after the open: it builds the key index from the lake.
    index_build_s: f64,
    /// Median of the timed commits.
    commit_s: f64,
    /// The key index's keys on disk once flushed and compacted into one run.
    index_disk_bytes: u64,
    index_journal_bytes: u64,
    /// Block cache, its bound and memtables of the open key indexes after the commits.
    index_cache_bytes: u64,
    index_cache_capacity_bytes: u64,
    index_memtable_bytes: u64,
    rss_mb: f64,
    files_removed: usize,
    files_added: usize,
}

pub async fn pk(options: PkBenchOptions) -> Result<()> {
    anyhow::ensure!(
        !options.keys.is_empty() && options.keys.iter().all(|k| *k as usize > options.changed),
        "--keys needs sizes larger than --changed ({})",
        options.changed
    );
    let mut measured = Vec::new();
    for &keys in &options.keys {
        let mut builder = tempfile::Builder::new();
        builder.prefix("silt-bench-pk-");
        let dir = match &options.dir {
            Some(d) => builder.tempdir_in(d)?,
            None => builder.tempdir()?,
        };
        measured.push(one_size(dir.path(), keys, &options).await?);
    }
    print_report(&options, &measured);
    Ok(())
}

/// The lake's user columns: a `bigint` key, a short string, a timestamp.
fn user_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// Rows of `keys` (all of one bucket) with offsets from `first_offset`, in `schema` (the lake's,
/// or the staged one with `__change_type` last).
fn rows(
    schema: &SchemaRef,
    bucket: i32,
    keys: &[i64],
    first_offset: i64,
    change: Option<ChangeType>,
) -> Result<RecordBatch> {
    let offsets = first_offset..first_offset + keys.len() as i64;
    let mut columns: Vec<Arc<dyn Array>> = vec![
        Arc::new(Int64Array::from_iter_values(keys.iter().copied())),
        Arc::new(StringArray::from_iter_values(
            offsets.clone().map(|o| format!("value-{o}")),
        )),
        // The lake stores the millisecond column as microseconds.
        Arc::new(TimestampMicrosecondArray::from_iter_values(offsets.clone())),
        Arc::new(Int32Array::from_value(bucket, keys.len())),
        Arc::new(Int64Array::from_iter_values(offsets.clone())),
        Arc::new(TimestampMicrosecondArray::from_iter_values(offsets).with_timezone("UTC")),
    ];
    if let Some(change) = change {
        columns.push(Arc::new(Int8Array::from_value(change as i8, keys.len())));
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

async fn one_size(dir: &Path, keys: u64, options: &PkBenchOptions) -> Result<Measured> {
    let uri = dir.join("lake").to_string_lossy().to_string();
    let index_dir = dir.join("key-index");
    let mut config = DeltaSinkConfig::new(
        &uri,
        "bench",
        TableKind::PrimaryKey {
            key_columns: vec!["k".into()],
        },
        user_schema(),
    );
    config.key_index_dir = Some(index_dir.clone());
    config.deletion_vectors = !options.copy_on_write;
    let cache_bound = config.key_index_cache_bytes;
    // Creates the table, deletion vectors on.
    let mut lake = LakeTable::open(Arc::new(config)).await?;

    say!("{keys} keys: loading the lake ...");
    let started = Instant::now();
    let mut ends = load(&uri, keys).await?;
    let load_s = started.elapsed().as_secs_f64();
    lake.refresh().await?;

    say!(
        "  loaded in {load_s:.1} s; {} commits of {} changed keys ...",
        1 + options.commits,
        options.changed
    );
    let mut rng = SmallRng::seed_from_u64(7);
    let mut times = Vec::new();
    let (mut files_removed, mut files_added) = (0, 0);
    for round in 0..=options.commits {
        let committable =
            stage_changes(&lake, &mut rng, keys, options.changed, round, &mut ends).await?;
        let started = Instant::now();
        let plan = lake.plan(&[committable]).await?;
        let commit = lake.apply(&plan).await?;
        times.push(started.elapsed().as_secs_f64());
        let log = std::fs::read_to_string(
            Path::new(&uri).join(format!("_delta_log/{:020}.json", commit.delta_version)),
        )?;
        files_removed = log.lines().filter(|l| l.starts_with("{\"remove\"")).count();
        files_added = log.lines().filter(|l| l.starts_with("{\"add\"")).count();
    }
    let index_build_s = times.remove(0);
    times.sort_by(f64::total_cmp);
    let memory = open_indexes_memory();
    let rss_mb = crate::procfs::status_field("self", "VmRSS").unwrap_or(0.0) / 1024.0;
    drop(lake);
    let (index_disk_bytes, index_journal_bytes) = if options.copy_on_write {
        (0, 0)
    } else {
        let journal_bytes = dir_bytes(&index_dir)?.1;
        let index = KeyIndex::open(Some(&index_dir), &[DataType::Int64], cache_bound)?;
        (index.settle()?, journal_bytes)
    };
    Ok(Measured {
        keys,
        load_s,
        index_build_s,
        commit_s: times[times.len() / 2],
        index_disk_bytes,
        index_journal_bytes,
        index_cache_bytes: memory.cache_bytes,
        index_cache_capacity_bytes: memory.cache_capacity_bytes.max(cache_bound),
        index_memtable_bytes: memory.write_buffer_bytes,
        rss_mb,
        files_removed,
        files_added,
    })
}

/// Bulk-loads keys `0..keys` (key % 8 = bucket, sorted within a bucket) as one commit of data
/// files; answers each bucket's end offset.
async fn load(uri: &str, keys: u64) -> Result<BTreeMap<i32, i64>> {
    let config = Arc::new(DeltaSinkConfig::new(
        uri,
        "bench",
        TableKind::Log,
        user_schema(),
    ));
    let mut loader = LakeTable::open(config.clone()).await?;
    let schema = loader.lake_schema().clone();
    // Files rolled at the sink's target size, as tiering writes them.
    let mut files = LogFiles::open(&loader, &config)?;
    let mut committable = Committable {
        checkpoint_id: 1,
        writer: 0,
        adds: Vec::new(),
        staged: Vec::new(),
        buckets: BTreeMap::new(),
    };
    let mut ends = BTreeMap::new();
    for b in 0..BUCKETS {
        let bucket_keys: Vec<i64> = (b..keys as i64).step_by(BUCKETS as usize).collect();
        for (i, chunk) in bucket_keys.chunks(LOAD_BATCH_ROWS).enumerate() {
            let batch = rows(&schema, b as i32, chunk, (i * LOAD_BATCH_ROWS) as i64, None)?;
            files.write(batch).await?;
        }
        // One bucket's files at a time keeps the writer's buffers to one bucket.
        committable.adds.extend(files.flush().await?);
        let n = bucket_keys.len() as i64;
        ends.insert(b as i32, n);
        committable.buckets.insert(
            BucketKey::table(b as i32),
            BucketRange {
                follows: Some(0),
                start: 0,
                end: n,
                rows: n as u64,
            },
        );
    }
    let plan = loader.plan(&[committable]).await?;
    loader.apply(&plan).await?;
    Ok(ends)
}

/// Stages one change file of `changed` random distinct keys (updates) as a writer would, and
/// answers its committable; moves `ends` on.
async fn stage_changes(
    lake: &LakeTable,
    rng: &mut SmallRng,
    keys: u64,
    changed: usize,
    round: usize,
    ends: &mut BTreeMap<i32, i64>,
) -> Result<Committable> {
    let mut picked = BTreeSet::new();
    while picked.len() < changed {
        picked.insert(rng.random_range(0..keys as i64));
    }
    let mut by_bucket: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for k in picked {
        by_bucket.entry((k % BUCKETS) as i32).or_default().push(k);
    }
    let schema = lake.staged_schema();
    let mut bytes = Vec::new();
    let mut parquet = ArrowWriter::try_new(&mut bytes, schema.clone(), None)?;
    let mut committable = Committable {
        checkpoint_id: 2 + round as u64,
        writer: 0,
        adds: Vec::new(),
        staged: Vec::new(),
        buckets: BTreeMap::new(),
    };
    for (&b, bucket_keys) in &by_bucket {
        let start = ends[&b];
        let batch = rows(
            &schema,
            b,
            bucket_keys,
            start,
            Some(ChangeType::UpdateAfter),
        )?;
        parquet.write(&batch)?;
        let end = start + bucket_keys.len() as i64;
        committable.buckets.insert(
            BucketKey::table(b),
            BucketRange {
                follows: Some(start),
                start,
                end,
                rows: bucket_keys.len() as u64,
            },
        );
        ends.insert(b, end);
    }
    parquet.close()?;
    let path = format!("{STAGING_DIR}/bench-{round}.parquet");
    lake.table()
        .object_store()
        .put(&deltalake::Path::from(path.as_str()), bytes.into())
        .await
        .with_context(|| format!("staging {path}"))?;
    committable.staged.push(path);
    Ok(committable)
}

/// Bytes of the files under `dir`: (sorted tables and metadata, journals). fjall preallocates
/// its journal (64 MiB), whatever the index holds.
fn dir_bytes(dir: &Path) -> Result<(u64, u64)> {
    let (mut tables, mut journals) = (0, 0);
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            let (t, j) = dir_bytes(&entry.path())?;
            tables += t;
            journals += j;
        } else if entry.path().extension().is_some_and(|e| e == "jnl") {
            journals += meta.len();
        } else {
            tables += meta.len();
        }
    }
    Ok((tables, journals))
}

fn print_report(options: &PkBenchOptions, measured: &[Measured]) {
    say!();
    say!(
        "silt bench pk (profile: {}, {BUCKETS} buckets, {}, {} changed keys a commit, median of {})",
        crate::report::profile(),
        if options.copy_on_write {
            "copy-on-write MERGE"
        } else {
            "deletion vectors + key index"
        },
        options.changed,
        options.commits
    );
    let mb = |b: u64| format!("{:.1}", b as f64 / 1_048_576.0);
    let mut table = Table::new([
        "keys",
        "load_s",
        "index_build_s",
        "commit_s",
        "commit_us_per_key",
        "index_mb",
        "journal_mb",
        "index_b_per_key",
        "index/raw_key",
        "cache_mb",
        "cache_bound_mb",
        "memtable_mb",
        "rss_mb",
        "files_-/+",
    ])
    .named("sizes");
    for m in measured {
        let per_key = m.index_disk_bytes as f64 / m.keys as f64;
        table.row([
            m.keys.to_string(),
            format!("{:.1}", m.load_s),
            format!("{:.2}", m.index_build_s),
            format!("{:.3}", m.commit_s),
            format!("{:.1}", m.commit_s * 1e6 / options.changed as f64),
            mb(m.index_disk_bytes),
            mb(m.index_journal_bytes),
            format!("{per_key:.1}"),
            format!("{:.2}", per_key / RAW_KEY_BYTES),
            mb(m.index_cache_bytes),
            mb(m.index_cache_capacity_bytes),
            mb(m.index_memtable_bytes),
            format!("{:.0}", m.rss_mb),
            format!("{}/{}", m.files_removed, m.files_added),
        ]);
    }
    if let (Some(first), Some(last)) = (measured.first(), measured.last())
        && measured.len() > 1
    {
        table.note(format!(
            "commit time, {} keys / {} keys ({:.0}x the keys): {:.2}x (target <= 2x for 100x)",
            last.keys,
            first.keys,
            last.keys as f64 / first.keys as f64,
            last.commit_s / first.commit_s
        ));
    }
    table.note(format!(
        "index_mb, index_b_per_key: the key index's keys on disk after the commits, flushed and compacted into one run (what it settles to); its journal (preallocated) apart; raw key = {RAW_KEY_BYTES} bytes (one bigint); target index <= 2x raw"
    ));
    table.print();
}
