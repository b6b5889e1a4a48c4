//! A lake table's Delta log as silt reads it: the txn app id of each bucket (`silt-<table
//! id>-<bucket>`, `silt-<table id>-p<partition id>-<bucket>`), the txn versions (the end
//! offsets tiered so far), and the table at a URI when there is one.

use std::collections::{BTreeMap, HashMap};

use deltalake::DeltaTable;
use url::Url;

use super::error::{Error, Result};
use crate::changelog::BucketKey;

/// The txn app id of one bucket of one table: `silt-<table_id>-<bucket>`, or for a bucket of a
/// partition `silt-<table_id>-p<partition id>-<bucket>`.
pub fn app_id(table_id: &str, bucket: BucketKey) -> String {
    match bucket.partition {
        None => format!("silt-{table_id}-{}", bucket.bucket),
        Some(partition) => format!("silt-{table_id}-p{partition}-{}", bucket.bucket),
    }
}

/// The bucket whose txn app id of table `table_id` is `app` (see [`app_id`]); `None` for any
/// other app id.
pub fn bucket_of_app_id(table_id: &str, app: &str) -> Option<BucketKey> {
    let rest = app
        .strip_prefix("silt-")?
        .strip_prefix(table_id)?
        .strip_prefix('-')?;
    match rest.strip_prefix('p') {
        None => Some(BucketKey::table(rest.parse().ok()?)),
        Some(partitioned) => {
            let (partition, bucket) = partitioned.split_once('-')?;
            Some(BucketKey::partition(
                partition.parse().ok()?,
                bucket.parse().ok()?,
            ))
        }
    }
}

/// The Delta table at `table_uri`, or `None` when there is none (a local path without a
/// `_delta_log`, or a table without a version).
pub(crate) async fn load_existing(
    table_uri: &str,
    storage_options: &HashMap<String, String>,
) -> Result<Option<DeltaTable>> {
    if !table_uri.contains("://") && !std::path::Path::new(table_uri).exists() {
        return Ok(None);
    }
    let url = table_url(table_uri)?;
    let table = DeltaTable::try_from_url_with_storage_options(url, storage_options.clone())
        .await
        .map_err(Error::delta(table_uri))?;
    Ok(table.version().is_some().then_some(table))
}

/// A local path (created when missing) or an object store URL.
pub(crate) fn table_url(table_uri: &str) -> Result<Url> {
    deltalake::ensure_table_uri(table_uri).map_err(Error::delta(table_uri))
}

pub(crate) async fn txn_versions(
    table: &DeltaTable,
    uri: &str,
    table_id: &str,
    buckets: impl IntoIterator<Item = BucketKey>,
) -> Result<BTreeMap<BucketKey, i64>> {
    let state = table.snapshot().map_err(Error::delta(uri))?;
    let log_store = table.log_store();
    let mut versions = BTreeMap::new();
    for bucket in buckets {
        let version = state
            .transaction_version(log_store.as_ref(), app_id(table_id, bucket))
            .await
            .map_err(Error::delta(uri))?;
        if let Some(v) = version {
            versions.insert(bucket, v);
        }
    }
    Ok(versions)
}
