//! PrefixLookup: every row of a primary-key table whose primary key starts with a given bucket
//! key, read from the kv tablet, as Fluss 0.9.1 answers it (`Replica.prefixLookup`, a RocksDB
//! prefix scan over the encoded primary keys).
//!
//! The request carries, per bucket, encoded bucket keys; the answer carries, per bucket and in
//! request order, one list per key with the stored value (schema id and row, as a lookup
//! returns it) of every matching row, in key order. A key that matches nothing gets an empty
//! list.
//!
//! **Why a byte prefix scan is correct.** The kv tablet is keyed by the primary key bytes the
//! client wrote, unchanged. The clients encode a primary key with the compacted key encoder
//! (fields one after another, each self-delimiting: varints, fixed widths, length-prefixed
//! bytes) whenever the table names no lake format or uses `table.kv.format-version` 2, and
//! they encode the lookup's bucket key with the same encoder. Since the bucket key is a
//! leading run of the primary key's fields, its encoding is a byte prefix of the encoding of
//! every primary key holding those values, and, each field being self-delimiting, of no other.
//! At `table.kv.format-version` 1 with `table.datalake.format` `paimon`, the clients encode both
//! in Paimon's binary row layout instead: a header (8 bytes up to 56 fields), then one 8-byte
//! slot per field. There the bucket key's encoding is a byte prefix of the primary key's exactly
//! when the header widths agree and every bucket-key field lives wholly in its slot (fixed-width
//! types; a string's slot holds an offset that depends on the row's width). Fluss scans the
//! bytes whatever the layout (`Replica.prefixLookup`); silt answers the layouts where the scan
//! is right and refuses the others, as it refuses a bucket key that is not a leading run of
//! the primary key (the clients refuse it too). An `iceberg` key has one field, so its bucket
//! key is the whole primary key and its encoding the whole key.
//!
//! Bounds: the keys of one request are at most `lookup_keys_max`, and the rows it answers at
//! most `prefix_lookup_rows_max` holding at most `fetch_response_bytes_max` bytes of values;
//! past either the request is refused with
//! RECORD_TOO_LARGE, never answered with fewer rows. Bucket-level failures (an unknown bucket, a
//! storage error) are that bucket's error in the response, as Fluss puts them.

use crate::catalog::{DATALAKE_FORMAT, KV_FORMAT_VERSION};
use crate::protocol::messages::*;
use crate::protocol::{self, ApiError, code};
use crate::service::Service;
use crate::tablets::{Bucket, TableRuntime};
use bytes::Bytes;

pub(crate) fn prefix_lookup(
    service: &Service,
    body: Bytes,
    api_version: i16,
) -> Result<PrefixLookupResponse, ApiError> {
    let request: PrefixLookupRequest = protocol::decode(body, "PrefixLookup")?;
    let table = service.table_runtime(request.table_id)?;
    super::kv::check_client_version(&table.entry, api_version)?;
    check_prefix_layout(&table)?;
    let keys: usize = request.buckets_req.iter().map(|b| b.keys.len()).sum();
    let keys_max = service.config.lookup_keys_max;
    if keys > keys_max {
        return Err(ApiError::new(
            code::RECORD_TOO_LARGE,
            format!(
                "prefix lookup of {keys} keys of {} exceeds lookup_keys_max {keys_max}: send \
                 fewer keys per request",
                table.entry.qualified_name()
            ),
        ));
    }
    let mut budget = RowBudget {
        rows_left: service.config.prefix_lookup_rows_max,
        rows_max: service.config.prefix_lookup_rows_max,
        bytes_left: service.config.fetch_response_bytes_max,
    };
    let mut buckets_resp = Vec::with_capacity(request.buckets_req.len());
    for bucket_request in &request.buckets_req {
        let answer = table
            .bucket(bucket_request.partition_id, bucket_request.bucket_id)
            .and_then(|bucket| bucket_values(&table, &bucket, &bucket_request.keys, &mut budget));
        let response = match answer {
            Ok(value_lists) => PbPrefixLookupRespForBucket {
                partition_id: bucket_request.partition_id,
                bucket_id: bucket_request.bucket_id,
                error_code: None,
                error_message: None,
                value_lists,
            },
            // Past the row bound the whole request is refused, never answered in part.
            Err(error) if error.code == code::RECORD_TOO_LARGE => return Err(error),
            Err(error) => PbPrefixLookupRespForBucket {
                partition_id: bucket_request.partition_id,
                bucket_id: bucket_request.bucket_id,
                error_code: Some(error.code),
                error_message: Some(error.message),
                value_lists: Vec::new(),
            },
        };
        buckets_resp.push(response);
    }
    Ok(PrefixLookupResponse { buckets_resp })
}

/// Rows, and bytes of their values, one request may still answer.
struct RowBudget {
    rows_left: usize,
    rows_max: usize,
    bytes_left: usize,
}

/// The table has a primary key whose encoding starts with the bucket key's (module docs).
fn check_prefix_layout(table: &TableRuntime) -> Result<(), ApiError> {
    let name = table.entry.qualified_name();
    let descriptor = &table.entry.descriptor;
    // The kv key of a partitioned table leaves the partition keys out (each partition has its
    // own tablets), as Fluss's physical primary key does.
    let Some(primary_key) = crate::catalog::physical_primary_key(descriptor) else {
        return Err(ApiError::new(
            code::NON_PRIMARY_KEY_TABLE,
            format!("table {name} has no primary key: prefix lookups need one"),
        ));
    };
    let bucket_keys = descriptor.bucket_keys();
    let leading = bucket_keys.len() <= primary_key.len()
        && bucket_keys
            .iter()
            .zip(&primary_key)
            .all(|(b, p)| *b == p.as_str());
    if bucket_keys.is_empty() || !leading {
        return Err(ApiError::new(
            code::INVALID_TABLE,
            format!(
                "prefix lookup on {name}: its bucket key {bucket_keys:?} is not a leading part of \
                 its primary key {primary_key:?}; look rows up by the whole primary key, or \
                 create the table with a bucket key that is"
            ),
        ));
    }
    let properties = descriptor.properties();
    let kv_format_version = properties.get(KV_FORMAT_VERSION).map(String::as_str);
    let paimon_layout = properties
        .get(DATALAKE_FORMAT)
        .is_some_and(|format| format.eq_ignore_ascii_case("paimon"));
    if !paimon_layout || kv_format_version.is_some_and(|version| version.trim() != "1") {
        return Ok(());
    }
    let columns = descriptor.schema().columns();
    let field_outside_slot = bucket_keys.iter().find(|key| {
        columns
            .iter()
            .find(|c| c.name() == **key)
            .is_none_or(|c| !fits_paimon_slot(c.data_type()))
    });
    if primary_key.len() > PAIMON_HEADER_FIELDS_MAX || field_outside_slot.is_some() {
        let why = match field_outside_slot {
            Some(field) => format!("its bucket key field {field} is not fixed-width"),
            None => format!("its primary key has more than {PAIMON_HEADER_FIELDS_MAX} fields"),
        };
        return Err(ApiError::new(
            code::INVALID_TABLE,
            format!(
                "prefix lookup on {name}: its keys are encoded in Paimon's row layout \
                 ({DATALAKE_FORMAT} paimon, {KV_FORMAT_VERSION} 1) and {why}, so a bucket key is \
                 not a byte prefix of its primary keys; create the table with \
                 '{KV_FORMAT_VERSION}' = '2' for prefix lookups"
            ),
        ));
    }
    Ok(())
}

/// Fields of a Paimon binary row whose 8-byte header holds their null bits (and the row kind).
const PAIMON_HEADER_FIELDS_MAX: usize = 56;

/// Whether Paimon's binary row keeps a value of `data_type` wholly in its 8-byte slot: fixed
/// widths, compact decimals (precision up to 18) and millisecond timestamps.
fn fits_paimon_slot(data_type: &fluss::metadata::DataType) -> bool {
    use fluss::metadata::DataType as T;
    match data_type {
        T::Boolean(_) | T::TinyInt(_) | T::SmallInt(_) | T::Int(_) | T::BigInt(_) => true,
        T::Float(_) | T::Double(_) | T::Date(_) | T::Time(_) => true,
        T::Decimal(d) => d.precision() <= 18,
        T::Timestamp(t) => t.precision() <= 3,
        T::TimestampLTz(t) => t.precision() <= 3,
        _ => false,
    }
}

/// Each key's matching values in key order, one list per key, charged to `budget`.
fn bucket_values(
    table: &TableRuntime,
    bucket: &Bucket,
    keys: &[Vec<u8>],
    budget: &mut RowBudget,
) -> Result<Vec<PbValueList>, ApiError> {
    let context = || format!("{} bucket {}", table.entry.qualified_name(), bucket.id);
    let kv = super::kv_tablet(table, bucket)?;
    let mut value_lists = Vec::with_capacity(keys.len());
    for key in keys {
        if key.is_empty() {
            return Err(ApiError::new(
                code::CORRUPT_MESSAGE,
                format!(
                    "prefix lookup on {} with an empty key: send the encoded bucket key",
                    context()
                ),
            ));
        }
        let mut values = Vec::new();
        for entry in kv.prefix(key) {
            let (_, value) = entry.map_err(|e| bucket.storage_error(&context(), e))?;
            if budget.rows_left == 0 {
                return Err(ApiError::new(
                    code::RECORD_TOO_LARGE,
                    format!(
                        "prefix lookup on {} answers more than prefix_lookup_rows_max {} rows: \
                         look up fewer keys per request, or read the table with a scan",
                        table.entry.qualified_name(),
                        budget.rows_max
                    ),
                ));
            }
            budget.rows_left -= 1;
            budget.bytes_left = budget.bytes_left.checked_sub(value.len()).ok_or_else(|| {
                ApiError::new(
                    code::RECORD_TOO_LARGE,
                    format!(
                        "prefix lookup on {} answers more than fetch_response_bytes_max bytes: \
                         look up fewer keys per request, or read the table with a scan",
                        table.entry.qualified_name()
                    ),
                )
            })?;
            values.push(value.to_vec());
        }
        value_lists.push(PbValueList { values });
    }
    Ok(value_lists)
}
