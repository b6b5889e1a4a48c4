//! One table over REST: `GET /v1/tables/{db}.{table}` (its schema, kind, keys and properties as
//! the hot tier describes it, for any table) and `GET /v1/tables/{db}.{table}/history` (the
//! tiering service's bounded history of a lake-enabled table: see `tiering::history`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};

use super::{Status, kind_name};
use crate::rest::ApiError;
use crate::tiering::{HISTORY_INTERVAL, Sample};
use crate::verify::parse_table_name;

/// `GET /v1/tables/{db}.{table}`.
#[derive(Serialize)]
pub(super) struct TableBody {
    table: String,
    table_id: i64,
    /// `log` or `primary_key`.
    kind: &'static str,
    schema: Vec<ColumnBody>,
    /// Column names; empty for a log table.
    primary_key: Vec<String>,
    partition_keys: Vec<String>,
    bucket_keys: Vec<String>,
    bucket_count: i32,
    /// The table's Fluss properties (`table.*`), and those it was created with that Fluss
    /// does not interpret.
    properties: BTreeMap<String, String>,
    custom_properties: BTreeMap<String, String>,
    /// Whether tiering takes it (`table.datalake.enabled`, or silt's custom property).
    lake_enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
    /// ms since the epoch.
    created_ms: i64,
}

#[derive(Serialize)]
struct ColumnBody {
    name: String,
    /// The Fluss type without its nullability (`BIGINT`, `DECIMAL(10, 2)`, `ARRAY<INT>`).
    #[serde(rename = "type")]
    data_type: String,
    nullable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
}

/// `GET /v1/tables/{db}.{table}`: 404 naming the table when the hot tier has no such table.
pub(super) async fn describe(
    State(state): State<Arc<Status>>,
    Path(name): Path<String>,
) -> Result<Json<TableBody>, ApiError> {
    let (database, table) =
        parse_table_name(&name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let info = (state.tiering.table_info(&database, &table).await)
        .map_err(|e| ApiError::internal(format!("{e:#}")))?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no table {name} in the hot tier (GET /v1/tables lists the lake-enabled ones)"
            ))
        })?;
    Ok(Json(table_body(&name, &info)))
}

fn table_body(name: &str, info: &fluss::metadata::TableInfo) -> TableBody {
    let sorted = |m: &std::collections::HashMap<String, String>| -> BTreeMap<String, String> {
        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    TableBody {
        table: name.to_string(),
        table_id: info.get_table_id(),
        kind: kind_name(info.has_primary_key()),
        schema: (info.get_schema().columns().iter())
            .map(|c| ColumnBody {
                name: c.name().to_string(),
                data_type: type_name(c.data_type()),
                nullable: c.data_type().is_nullable(),
                comment: c.comment().map(str::to_string),
            })
            .collect(),
        primary_key: info.get_primary_keys().clone(),
        partition_keys: info.get_partition_keys().to_vec(),
        bucket_keys: info.get_bucket_keys().to_vec(),
        bucket_count: info.get_num_buckets(),
        properties: sorted(info.get_properties()),
        custom_properties: sorted(info.get_custom_properties()),
        lake_enabled: silt_connectors::fluss::is_lake_enabled(info),
        comment: info.get_comment().map(str::to_string),
        created_ms: info.get_created_time(),
    }
}

/// Fluss prints a type with its nullability (`BIGINT NOT NULL`); the body says it apart.
fn type_name(data_type: &fluss::metadata::DataType) -> String {
    let text = data_type.to_string();
    match text.strip_suffix(" NOT NULL") {
        Some(bare) if !data_type.is_nullable() => bare.to_string(),
        _ => text,
    }
}

#[derive(Deserialize)]
pub(super) struct HistoryParams {
    /// Only samples taken after this (ms since the epoch); all kept ones when absent.
    since_ms: Option<i64>,
}

/// `GET /v1/tables/{db}.{table}/history`.
#[derive(Serialize)]
pub(super) struct HistoryBody {
    table: String,
    interval_ms: u128,
    samples: Vec<Sample>,
}

/// `GET /v1/tables/{db}.{table}/history?since_ms=`: 404 for a table tiering does not know.
pub(super) async fn history(
    State(state): State<Arc<Status>>,
    Path(name): Path<String>,
    Query(params): Query<HistoryParams>,
) -> Result<Json<HistoryBody>, ApiError> {
    let (database, table) =
        parse_table_name(&name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let since_ms = params.since_ms.unwrap_or(i64::MIN);
    let samples = (state.tiering.history(&database, &table, since_ms).await).ok_or_else(|| {
        ApiError::not_found(format!(
            "no lake-enabled table {name} (GET /v1/tables lists them; a table is tiered once \
             table.datalake.enabled=true)"
        ))
    })?;
    Ok(Json(HistoryBody {
        table: name,
        interval_ms: HISTORY_INTERVAL.as_millis(),
        samples,
    }))
}

#[cfg(test)]
mod tests {
    use fluss::metadata::DataTypes;

    use super::*;

    #[test]
    fn a_type_is_named_without_its_nullability() {
        assert_eq!(type_name(&DataTypes::bigint().as_non_nullable()), "BIGINT");
        assert_eq!(type_name(&DataTypes::bigint()), "BIGINT");
        assert_eq!(type_name(&DataTypes::decimal(10, 2)), "DECIMAL(10, 2)");
    }
}
