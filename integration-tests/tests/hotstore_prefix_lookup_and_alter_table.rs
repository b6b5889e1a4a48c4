//! PrefixLookup and AlterTable through the official fluss-rs client (`lookup_by(..)` and the
//! admin's `alter_table`), as Apache Fluss 0.9.1 answers them: a bucket-key prefix lookup gives
//! every current row whose primary key starts with the bucket key (and no row of a bucket key
//! whose encoding merely starts with the same bytes); AlterTable sets and resets the alterable
//! `table.*` options and custom properties, refuses the rest by name, and keeps what it changed
//! across a restart. The errors at the wire.

mod common;

use std::collections::BTreeSet;

use anyhow::{Result, ensure};
use common::raw_fluss;
use fluss::client::FlussTable;
use fluss::metadata::{AlterConfig, AlterConfigOpType, AlterTableChanges, DataTypes, TablePath};
use fluss::row::{DataGetters, GenericRow};
use prost::Message;
use silt_hotstore::protocol::messages::{
    ErrorResponse, PbPrefixLookupReqForBucket, PrefixLookupRequest, PrefixLookupResponse,
};
use silt_hotstore::protocol::{api, code};
use silt_hotstore::{ServerConfig, ServerHandle};
use silt_testkit::hotstore::{self, api_code};
use silt_testkit::tables::{Table, text_log};

/// `shop.orders`: `customer STRING, order_id BIGINT, amount BIGINT`, keyed by
/// `(customer, order_id)` and distributed by `customer`, 3 buckets.
fn orders() -> Table {
    Table::primary_key("shop", "orders", &["customer", "order_id"])
        .column("customer", DataTypes::string())
        .column("order_id", DataTypes::bigint())
        .column("amount", DataTypes::bigint())
        .bucket_key(&["customer"])
}

fn prefix_lookup_rows_max(rows: usize) -> impl FnOnce(&mut ServerConfig) {
    move |config| config.prefix_lookup_rows_max = rows
}

fn order(customer: &str, order_id: i64, amount: i64) -> GenericRow<'static> {
    let mut row = GenericRow::new(3);
    row.set_field(0, customer.to_string());
    row.set_field(1, order_id);
    row.set_field(2, amount);
    row
}

/// Every `(order_id, amount)` of `customer`, through fluss-rs's prefix lookuper.
async fn orders_of(table: &FlussTable<'_>, customer: &str) -> Result<BTreeSet<(i64, i64)>> {
    let mut lookuper = table
        .new_lookup()?
        .lookup_by(vec!["customer".to_string()])
        .create_lookuper()?;
    let mut key = GenericRow::new(1);
    key.set_field(0, customer.to_string());
    let result = lookuper.lookup(&key).await?;
    let mut found = BTreeSet::new();
    for row in result.get_rows()? {
        ensure!(
            row.get_string(0)? == customer,
            "a row of {customer:?} belongs to {:?}",
            row.get_string(0)?
        );
        found.insert((row.get_long(1)?, row.get_long(2)?));
    }
    Ok(found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_lookup_answers_every_current_row_of_its_bucket_key() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(prefix_lookup_rows_max(1000)).await?;
    orders().create(&connection).await?;
    let table = connection.get_table(&orders().path).await?;
    ensure!(orders_of(&table, "a").await?.is_empty(), "an empty table");

    let writer = table.new_upsert()?.create_writer()?;
    // "a", "ab" and "abc" share leading characters: the encoded bucket key of "a" must not
    // match the rows of "ab" (each field's encoding carries its length).
    for (customer, orders) in [("a", 1..=3), ("ab", 1..=2), ("abc", 1..=4), ("b", 1..=1)] {
        for order_id in orders {
            writer.upsert(&order(customer, order_id, order_id * 10))?;
        }
    }
    writer.upsert(&order("a", 2, 99))?;
    writer.delete(&order("abc", 3, 0))?;
    writer.flush().await?;

    for (customer, expected) in [
        ("a", vec![(1, 10), (2, 99), (3, 30)]),
        ("ab", vec![(1, 10), (2, 20)]),
        ("abc", vec![(1, 10), (2, 20), (4, 40)]),
        ("b", vec![(1, 10)]),
        ("", vec![]),
        ("nobody", vec![]),
    ] {
        let found = orders_of(&table, customer).await?;
        ensure!(
            found == expected.into_iter().collect(),
            "orders of {customer:?}: {found:?}"
        );
    }
    server.shutdown().await?;
    Ok(())
}

/// A prefix lookup answering more rows than `prefix_lookup_rows_max` is refused, never cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_lookup_past_its_row_bound_is_refused_by_name() -> Result<()> {
    let (_dir, server, connection) = hotstore::scratch_with(prefix_lookup_rows_max(5)).await?;
    orders().create(&connection).await?;
    let table = connection.get_table(&orders().path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    for order_id in 1..=6 {
        writer.upsert(&order("many", order_id, 1))?;
    }
    for order_id in 1..=5 {
        writer.upsert(&order("five", order_id, 1))?;
    }
    writer.flush().await?;
    ensure!(orders_of(&table, "five").await?.len() == 5, "at the bound");
    // fluss-rs's lookup client folds the error response into its own error, message kept.
    let refused = orders_of(&table, "many").await.err();
    let message = format!("{refused:?}");
    ensure!(
        message.contains(&format!("code: {}", code::RECORD_TOO_LARGE))
            && message.contains("prefix_lookup_rows_max 5 rows: look up fewer keys"),
        "{message}"
    );
    server.shutdown().await?;
    Ok(())
}

/// The top-level error code of a raw PrefixLookup, or per bucket the codes it answered.
async fn prefix_lookup(
    server: &ServerHandle,
    request: PrefixLookupRequest,
) -> Result<Result<Vec<Option<i32>>, i32>> {
    let addr = server.local_addr().to_string();
    let (success, body) =
        raw_fluss::call(&addr, api::PREFIX_LOOKUP, &request.encode_to_vec()).await?;
    if !success {
        return Ok(Err(ErrorResponse::decode(body)?.error_code));
    }
    let response = PrefixLookupResponse::decode(body)?;
    Ok(Ok(response
        .buckets_resp
        .iter()
        .map(|b| b.error_code)
        .collect()))
}

fn lookup_of(table_id: i64, bucket_id: i32, keys: Vec<Vec<u8>>) -> PrefixLookupRequest {
    PrefixLookupRequest {
        table_id,
        buckets_req: vec![PbPrefixLookupReqForBucket {
            partition_id: None,
            bucket_id,
            keys,
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_prefix_lookups_are_refused_by_name() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = hotstore::start_with(dir.path(), |config| config.lookup_keys_max = 3).await?;
    let connection = hotstore::connect(&server).await?;
    let orders_id = orders().create(&connection).await?;
    let log_id = text_log("shop", "events").create(&connection).await?;
    // Distributed by the second key column: its encoding is no prefix of the primary key's.
    let by_second = Table::primary_key("shop", "by_second", &["customer", "order_id"])
        .column("customer", DataTypes::string())
        .column("order_id", DataTypes::bigint())
        .bucket_key(&["order_id"]);
    let by_second_id = by_second.create(&connection).await?;
    let key = vec![1, b'a'];
    for (what, request, expected) in [
        (
            "a key of one bucket",
            lookup_of(orders_id, 0, vec![key.clone()]),
            Ok(vec![None]),
        ),
        (
            "a log table",
            lookup_of(log_id, 0, vec![key.clone()]),
            Err(code::NON_PRIMARY_KEY_TABLE),
        ),
        (
            "an unknown table",
            lookup_of(987_654, 0, vec![key.clone()]),
            Err(code::UNKNOWN_TABLE_OR_BUCKET),
        ),
        (
            "a bucket key that is not a leading part of the primary key",
            lookup_of(by_second_id, 0, vec![key.clone()]),
            Err(code::INVALID_TABLE),
        ),
        (
            "more keys than lookup_keys_max",
            lookup_of(orders_id, 0, vec![key.clone(); 4]),
            Err(code::RECORD_TOO_LARGE),
        ),
        (
            "an unknown bucket: that bucket's error",
            lookup_of(orders_id, 9, vec![key.clone()]),
            Ok(vec![Some(code::UNKNOWN_TABLE_OR_BUCKET)]),
        ),
        (
            "an empty key: that bucket's error",
            lookup_of(orders_id, 0, vec![Vec::new()]),
            Ok(vec![Some(code::CORRUPT_MESSAGE)]),
        ),
        (
            "a partition of an unpartitioned table",
            PrefixLookupRequest {
                table_id: orders_id,
                buckets_req: vec![PbPrefixLookupReqForBucket {
                    partition_id: Some(4),
                    bucket_id: 0,
                    keys: vec![key.clone()],
                }],
            },
            Ok(vec![Some(code::UNKNOWN_TABLE_OR_BUCKET)]),
        ),
    ] {
        let answered = prefix_lookup(&server, request).await?;
        ensure!(
            answered == expected,
            "{what}: expected {expected:?}, got {answered:?}"
        );
    }
    server.shutdown().await?;
    Ok(())
}

fn set(key: &str, value: &str) -> AlterConfig {
    AlterConfig::new(key, Some(value.to_string()), AlterConfigOpType::Set)
}

fn reset(key: &str) -> AlterConfig {
    AlterConfig::new(key, None, AlterConfigOpType::Delete)
}

fn config_changes(changes: Vec<AlterConfig>) -> AlterTableChanges {
    AlterTableChanges {
        config_changes: changes,
        ..AlterTableChanges::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_sets_and_resets_what_fluss_allows_and_keeps_it_across_a_restart() -> Result<()>
{
    let (dir, server, connection) = hotstore::scratch().await?;
    let admin = connection.get_admin()?;
    let events = text_log("shop", "events").property("table.log.ttl", "7d");
    events.create(&connection).await?;
    let path = events.path.clone();
    let before = admin.get_table_info(&path).await?;

    admin
        .alter_table(
            &path,
            false,
            config_changes(vec![
                set("table.datalake.freshness", "2min"),
                set("table.log.tiered.local-segments", "4"),
                set("owner", "team-a"),
            ]),
        )
        .await?;
    admin
        .alter_table(
            &path,
            false,
            config_changes(vec![reset("table.log.tiered.local-segments")]),
        )
        .await?;
    let after = admin.get_table_info(&path).await?;
    let properties = after.get_properties();
    ensure!(
        properties
            .get("table.datalake.freshness")
            .map(String::as_str)
            == Some("2min")
            && !properties.contains_key("table.log.tiered.local-segments")
            && properties.get("table.log.ttl").map(String::as_str) == Some("7d")
            && after
                .get_custom_properties()
                .get("owner")
                .map(String::as_str)
                == Some("team-a"),
        "{properties:?} {:?}",
        after.get_custom_properties()
    );
    ensure!(
        after.get_table_id() == before.get_table_id()
            && after.get_modified_time() >= before.get_modified_time(),
        "{before:?} -> {after:?}"
    );

    let unknown = TablePath::new("shop", "nope");
    // (what, table, changes, the error code it is refused with)
    let refusals = [
        (
            "a table option Fluss does not let change",
            &path,
            config_changes(vec![set("table.log.ttl", "1d")]),
            code::INVALID_ALTER_TABLE,
        ),
        (
            "an unknown table option",
            &path,
            config_changes(vec![set("table.nope", "1")]),
            code::INVALID_ALTER_TABLE,
        ),
        (
            "datalake.enabled that is not a boolean",
            &path,
            config_changes(vec![set("table.datalake.enabled", "yes")]),
            code::INVALID_CONFIG,
        ),
        (
            "local segments of 0",
            &path,
            config_changes(vec![set("table.log.tiered.local-segments", "0")]),
            code::INVALID_CONFIG,
        ),
        (
            "an append op",
            &path,
            config_changes(vec![AlterConfig::new(
                "owner",
                Some("b".into()),
                AlterConfigOpType::Append,
            )]),
            code::INVALID_ALTER_TABLE,
        ),
        (
            "a schema change",
            &path,
            silt_testkit::tables::drop_column("v"),
            code::INVALID_ALTER_TABLE,
        ),
        (
            "an unknown table",
            &unknown,
            config_changes(vec![set("owner", "x")]),
            code::TABLE_NOT_EXIST,
        ),
    ];
    for (what, table, changes, expected) in refusals {
        let outcome = admin.alter_table(table, false, changes).await.err();
        ensure!(
            outcome.as_ref().and_then(api_code) == Some(expected),
            "{what}: expected code {expected}, got {outcome:?}"
        );
    }
    admin
        .alter_table(&unknown, true, config_changes(vec![set("owner", "x")]))
        .await?;
    ensure!(
        admin.get_table_info(&path).await?.get_properties() == properties,
        "a refused alteration changed nothing"
    );

    server.shutdown().await?;
    let server = hotstore::start(dir.path()).await?;
    let connection = hotstore::connect(&server).await?;
    let reopened = connection.get_admin()?.get_table_info(&path).await?;
    ensure!(
        reopened.get_properties() == properties
            && reopened.get_custom_properties() == after.get_custom_properties(),
        "after a restart: {reopened:?}"
    );
    server.shutdown().await?;
    Ok(())
}
