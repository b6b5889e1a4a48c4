//! Which silt table a lake belongs to, and moving another table's lake out of the way.
//!
//! **Contract:** a lake table belongs to one silt table id. The sink records the id in the
//! Delta table's configuration under [`OWNER_KEY`] when it creates the table; lakes created
//! before that name it in their description (`tiered by silt from table <id>`, written since the
//! first sink), and a lake that names no owner belongs to the id whose txn app ids
//! (`silt-<id>-<bucket>`) it holds. A table dropped and created again under the same name gets a
//! new id, so until the tiering service moves the old lake aside its location holds a lake that
//! is not the new table's: readers ([`lake_owner`], `read_lake_offsets`) treat it as absent, and
//! a sink refuses to write into it.

use std::collections::HashMap;

use deltalake::kernel::Metadata;
use deltalake::{DeltaTable, Path};
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::{ObjectStore, ObjectStoreExt as _};
use tracing::info;
use url::Url;

use super::error::{Error, Result};
use super::log::{load_existing, txn_versions};
use crate::lake_format::LakeOwner;

/// The Delta configuration key naming the silt table id a lake belongs to.
pub const OWNER_KEY: &str = "silt.table.id";

/// The description the sink gives the tables it creates; lakes older than [`OWNER_KEY`] name
/// their owner only here.
pub(crate) const DESCRIPTION_PREFIX: &str = "tiered by silt from table ";

/// Objects copied or deleted at once when a lake moves on an object store.
const MOVE_CONCURRENCY: usize = 8;
/// A move logs its progress every this many objects.
const MOVE_PROGRESS_EVERY: u64 = 1_000;

/// The owner a Delta table's metadata names: [`OWNER_KEY`], else the sink's description.
pub fn recorded_owner(metadata: &Metadata) -> Option<String> {
    if let Some(id) = metadata.configuration().get(OWNER_KEY) {
        return Some(id.clone());
    }
    metadata
        .description()
        .and_then(|d| d.strip_prefix(DESCRIPTION_PREFIX))
        .map(|id| id.trim().to_string())
}

/// Whose lake `table` is, for table id `table_id` with buckets `buckets` (used only when the
/// table names no owner: then it is ours if it holds a txn of ours, nobody's if it holds no
/// file, and foreign otherwise).
pub(crate) async fn owner_of(
    table: &DeltaTable,
    uri: &str,
    table_id: &str,
    buckets: impl IntoIterator<Item = crate::changelog::BucketKey>,
) -> Result<LakeOwner> {
    let snapshot = table.snapshot().map_err(Error::delta(uri))?;
    if let Some(owner) = recorded_owner(snapshot.metadata()) {
        return Ok(if owner == table_id {
            LakeOwner::Owned
        } else {
            LakeOwner::Foreign { owner: Some(owner) }
        });
    }
    if !txn_versions(table, uri, table_id, buckets)
        .await?
        .is_empty()
    {
        return Ok(LakeOwner::Owned);
    }
    Ok(if snapshot.log_data().num_files() == 0 {
        // An empty table claims nothing: whoever tiers here first may adopt it.
        LakeOwner::Owned
    } else {
        LakeOwner::Foreign { owner: None }
    })
}

/// Whose lake the location `table_uri` holds, for table id `table_id` of `bucket_count`
/// buckets (a lake that names no owner is from before partitioned tables, so its buckets are
/// an unpartitioned table's).
pub async fn lake_owner(
    table_uri: &str,
    storage_options: &HashMap<String, String>,
    table_id: &str,
    bucket_count: u32,
) -> Result<LakeOwner> {
    let Some(table) = load_existing(table_uri, storage_options).await? else {
        return Ok(LakeOwner::Absent);
    };
    let buckets = (0..bucket_count as i32).map(crate::changelog::BucketKey::table);
    owner_of(&table, table_uri, table_id, buckets).await
}

/// Moves the lake at `<lake_root>/<from>` to `<lake_root>/<to>` (both relative, `/`-separated)
/// and returns where it went. A local root renames the directory (atomic; when `to` exists, a
/// free name `<to>.<n>` is taken). An object store root copies every object, then deletes the
/// originals, the Delta log last and newest first, so an interrupted move leaves the lake
/// readable where it was and a retry (to the same `to`) completes it. Both are bounded: at most
/// [`MOVE_CONCURRENCY`] requests in flight, progress logged every [`MOVE_PROGRESS_EVERY`]
/// objects.
pub async fn move_lake(
    lake_root: &str,
    storage_options: &HashMap<String, String>,
    from: &str,
    to: &str,
) -> Result<String> {
    let root = lake_root.trim_end_matches('/');
    if !root.contains("://") {
        return rename_local(root, from, to);
    }
    let url = Url::parse(root).map_err(|e| {
        Error::Config(format!(
            "lake root {root:?} is not a url ({e}); use a local path or e.g. s3://bucket/prefix"
        ))
    })?;
    let store = deltalake::logstore::store_for(&url, storage_options.clone())
        .map_err(Error::delta(root))?;
    let moved = move_objects(store.as_ref(), &Path::from(from), &Path::from(to)).await?;
    info!(from = %format!("{root}/{from}"), to = %format!("{root}/{to}"), objects = moved, "moved a lake");
    Ok(format!("{root}/{to}"))
}

fn rename_local(root: &str, from: &str, to: &str) -> Result<String> {
    let io = |path: &std::path::Path| {
        let path = path.display().to_string();
        move |source: std::io::Error| Error::Io {
            path: path.clone(),
            source,
        }
    };
    let source = std::path::Path::new(root).join(from);
    let mut target = std::path::Path::new(root).join(to);
    // Bounded: a hundred lakes moved under one name is a loop, not history.
    for n in 1..=100 {
        if !target.exists() {
            break;
        }
        target = std::path::Path::new(root).join(format!("{to}.{n}"));
    }
    if target.exists() {
        return Err(Error::Config(format!(
            "cannot move the lake at {} aside: {} and its numbered variants exist (remove old ones)",
            source.display(),
            target.display()
        )));
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    std::fs::rename(&source, &target).map_err(io(&source))?;
    info!(from = %source.display(), to = %target.display(), "moved a lake");
    Ok(target.display().to_string())
}

/// Copies every object under `from` to the same place under `to`, then deletes the originals
/// (data first, then `_delta_log/` newest first). Returns how many objects moved.
pub(crate) async fn move_objects(store: &dyn ObjectStore, from: &Path, to: &Path) -> Result<u64> {
    let storage = |path: &Path| {
        let path = path.to_string();
        move |source: object_store::Error| Error::Storage {
            path: path.clone(),
            source,
        }
    };
    let relative = |location: &Path| -> Result<Path> {
        let parts: Vec<_> = location
            .prefix_match(from)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "{location} was listed under {from} but is not below it"
                ))
            })?
            .collect();
        Ok(Path::from_iter(to.parts().chain(parts)))
    };
    let copied = std::sync::atomic::AtomicU64::new(0);
    store
        .list(Some(from))
        .map_err(storage(from))
        .map(|meta| {
            let (copied, relative, storage) = (&copied, &relative, &storage);
            async move {
                let meta = meta?;
                let target = relative(&meta.location)?;
                store
                    .copy(&meta.location, &target)
                    .await
                    .map_err(storage(&meta.location))?;
                let n = copied.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n % MOVE_PROGRESS_EVERY == 0 {
                    info!(from = %from, to = %to, objects = n, "moving a lake: copied");
                }
                Ok::<_, Error>(())
            }
        })
        .buffer_unordered(MOVE_CONCURRENCY)
        .try_collect::<()>()
        .await?;

    // Data first, in any order; the Delta log last and newest first, so what is left of an
    // interrupted delete is still an older version of the table.
    let log = Path::from_iter(from.parts().chain(Path::from("_delta_log").parts()));
    let mut log_objects = Vec::new();
    let mut listing = store.list(Some(from));
    let mut doomed = Vec::new();
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(storage(from))?;
        if meta.location.prefix_matches(&log) {
            log_objects.push(meta.location);
        } else {
            doomed.push(meta.location);
        }
        if doomed.len() >= MOVE_PROGRESS_EVERY as usize {
            delete_all(store, std::mem::take(&mut doomed)).await?;
        }
    }
    drop(listing);
    delete_all(store, doomed).await?;
    log_objects.sort_unstable_by(|a, b| b.as_ref().cmp(a.as_ref()));
    for location in log_objects {
        store.delete(&location).await.map_err(storage(&location))?;
    }
    Ok(copied.into_inner())
}

async fn delete_all(store: &dyn ObjectStore, locations: Vec<Path>) -> Result<()> {
    futures::stream::iter(locations)
        .map(|location| async move {
            store
                .delete(&location)
                .await
                .map_err(|source| Error::Storage {
                    path: location.to_string(),
                    source,
                })
        })
        .buffer_unordered(MOVE_CONCURRENCY)
        .try_collect::<()>()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn moving_objects_copies_everything_then_deletes_the_originals() {
        let store = InMemory::new();
        let objects = [
            "db/t/_delta_log/00000000000000000000.json",
            "db/t/_delta_log/00000000000000000001.json",
            "db/t/__bucket=0/part-1.parquet",
            "db/t/__bucket=1/part-2.parquet",
            "db/tt/_delta_log/00000000000000000000.json",
        ];
        for (i, name) in objects.iter().enumerate() {
            store
                .put(&Path::from(*name), vec![i as u8; i + 1].into())
                .await
                .unwrap();
        }
        let moved = move_objects(&store, &Path::from("db/t"), &Path::from("__dropped/db.t-7"))
            .await
            .unwrap();
        assert_eq!(moved, 4);
        let mut left: Vec<String> = store
            .list(None)
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        left.sort();
        assert_eq!(
            left,
            [
                "__dropped/db.t-7/__bucket=0/part-1.parquet",
                "__dropped/db.t-7/__bucket=1/part-2.parquet",
                "__dropped/db.t-7/_delta_log/00000000000000000000.json",
                "__dropped/db.t-7/_delta_log/00000000000000000001.json",
                "db/tt/_delta_log/00000000000000000000.json",
            ],
            "a sibling whose name starts the same stays"
        );
        let copy = store
            .get(&Path::from("__dropped/db.t-7/__bucket=1/part-2.parquet"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(copy.as_ref(), [3u8; 4], "contents move with the names");
    }
}
