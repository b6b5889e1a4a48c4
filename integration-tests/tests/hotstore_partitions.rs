//! Partitioned tables (issue 17, the hot store's part) through the official fluss-rs client:
//! the partition scenario of `common::partitions` (create, write to two partitions and read
//! each back alone, look keys up per partition, list, drop and recreate, Fluss's error codes),
//! then what only silt's files show (a dropped partition's tablets are deleted), the raw
//! answers for unknown partitions, and a restart: partitions, their rows and their ids
//! survive, and an id is never given out again.

mod common;

use std::collections::BTreeMap;

use anyhow::{Result, ensure};
use bytes::Bytes;
use common::partitions::{self, DATABASE, DAY_1, DAY_2, LOG_TABLE, PK_TABLE};
use common::raw_fluss;
use fluss::metadata::TablePath;
use fluss::rpc::message::OffsetSpec;
use prost::Message;
use silt_hotstore::protocol::api;
use silt_hotstore::protocol::messages::*;
use silt_testkit::hotstore::{self, connect};

/// The error code of a raw call that must fail as a whole.
async fn request_error(addr: &str, api_key: i16, body: &impl Message) -> Result<i32> {
    let (ok, response) = raw_fluss::call(addr, api_key, &body.encode_to_vec()).await?;
    ensure!(!ok, "api key {api_key} succeeded; it must fail");
    Ok(ErrorResponse::decode(response)?.error_code)
}

fn partition_dir(
    data_dir: &std::path::Path,
    table_id: i64,
    partition_id: i64,
) -> std::path::PathBuf {
    data_dir
        .join("tables")
        .join(format!("table-{table_id}"))
        .join(format!("partition-{partition_id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_isolated_dropped_and_survive_a_restart() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let events = TablePath::new(DATABASE, LOG_TABLE);
    let users = TablePath::new(DATABASE, PK_TABLE);
    let (ids_before, events_id, users_id) = {
        let server = hotstore::start(dir.path()).await?;
        let connection = connect(&server).await?;
        let admin = connection.get_admin()?;
        let record = partitions::run(&connection).await?;
        eprintln!("silt, partition scenario: {record:#?}");
        partitions::check(&record)?;
        let events_id = admin.get_table_info(&events).await?.get_table_id();
        let users_id = admin.get_table_info(&users).await?.get_table_id();
        let ids = partitions::partition_ids(&admin, &events).await?;
        let user_ids = partitions::partition_ids(&admin, &users).await?;
        // Every live partition has its tablets on disk, and only those: the dropped DAY_1's
        // directory (an id below the recreated one's, not live) is gone.
        let table_dir = dir.path().join("tables").join(format!("table-{events_id}"));
        let mut on_disk: Vec<String> = std::fs::read_dir(&table_dir)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        on_disk.sort();
        let mut live: Vec<String> = ids.values().map(|id| format!("partition-{id}")).collect();
        live.sort();
        ensure!(
            on_disk == live,
            "{table_dir:?} holds {on_disk:?}; live partitions {ids:?}"
        );

        // Raw answers a client cannot provoke: an unknown partition by name or id fails the
        // metadata request; a write to an unknown partition id, or without one, fails its
        // bucket with UNKNOWN_TABLE_OR_BUCKET.
        let addr = server.local_addr().to_string();
        let by_name = MetadataRequest {
            table_path: Vec::new(),
            partitions_path: vec![PbPhysicalTablePath {
                database_name: DATABASE.into(),
                table_name: LOG_TABLE.into(),
                partition_name: Some("1999-01-01".into()),
            }],
            partitions_id: Vec::new(),
        };
        ensure!(request_error(&addr, api::METADATA, &by_name).await? == 36);
        let by_id = MetadataRequest {
            table_path: Vec::new(),
            partitions_path: Vec::new(),
            partitions_id: vec![999_999],
        };
        ensure!(request_error(&addr, api::METADATA, &by_id).await? == 36);
        let known = MetadataRequest {
            table_path: vec![PbTablePath {
                database_name: DATABASE.into(),
                table_name: LOG_TABLE.into(),
            }],
            partitions_path: Vec::new(),
            partitions_id: vec![ids[DAY_2]],
        };
        let (ok, body) = raw_fluss::call(&addr, api::METADATA, &known.encode_to_vec()).await?;
        ensure!(ok);
        let metadata = MetadataResponse::decode(body)?;
        ensure!(
            metadata.table_metadata[0].bucket_metadata.is_empty(),
            "a partitioned table has no buckets of its own"
        );
        ensure!(
            metadata.partition_metadata.len() == 1
                && metadata.partition_metadata[0].partition_name == DAY_2
                && metadata.partition_metadata[0].bucket_metadata.len()
                    == partitions::BUCKETS as usize,
            "{metadata:?}"
        );
        for partition_id in [Some(999_999), None] {
            let produce = ProduceLogRequest {
                acks: -1,
                table_id: events_id,
                timeout_ms: 5_000,
                buckets_req: vec![PbWriteReqForBucket {
                    partition_id,
                    bucket_id: 0,
                    records: Bytes::new(),
                    original_partition_name: None,
                    routing_bucket_count: None,
                }],
            };
            let (ok, body) =
                raw_fluss::call(&addr, api::PRODUCE_LOG, &produce.encode_to_vec()).await?;
            ensure!(ok);
            let response = ProduceLogResponse::decode(body)?;
            ensure!(
                response.buckets_resp[0].error_code == Some(21),
                "partition {partition_id:?}: {response:?}"
            );
        }
        server.shutdown().await?;
        let mut all: BTreeMap<String, i64> = ids;
        all.extend(
            user_ids
                .into_iter()
                .map(|(name, id)| (format!("users/{name}"), id)),
        );
        (all, events_id, users_id)
    };

    // After a restart: the same partitions with the same ids, their rows and keys, and a new
    // partition gets an id above every id given out before (dropped ones included).
    let server = hotstore::start(dir.path()).await?;
    let connection = connect(&server).await?;
    let admin = connection.get_admin()?;
    let ids = partitions::partition_ids(&admin, &events).await?;
    let user_ids = partitions::partition_ids(&admin, &users).await?;
    let mut after: BTreeMap<String, i64> = ids.clone();
    after.extend(
        user_ids
            .iter()
            .map(|(name, id)| (format!("users/{name}"), *id)),
    );
    ensure!(
        after == ids_before,
        "before {ids_before:?}, after {after:?}"
    );
    let log = connection.get_table(&events).await?;
    ensure!(partitions::scan_partition(&log, ids[DAY_2], 3).await? == vec![11, 12, 13]);
    ensure!(
        partitions::scan_partition(&log, ids[DAY_1], 0)
            .await?
            .is_empty()
    );
    // silt drops a partition at once: the name resolves to the recreated, empty partition.
    let latest = admin
        .list_partition_offsets(&events, DAY_1, &[0, 1], OffsetSpec::Latest)
        .await?;
    ensure!(latest.values().all(|&offset| offset == 0), "{latest:?}");
    let pk = connection.get_table(&users).await?;
    let mut lookuper = pk.new_lookup()?.create_lookuper()?;
    ensure!(partitions::lookup(&mut lookuper, DAY_1, 1).await? == Some("alice2".into()));
    ensure!(partitions::lookup(&mut lookuper, DAY_2, 1).await? == Some("bob".into()));
    admin
        .create_partition(&events, &partitions::day("2024-05-03"), false)
        .await?;
    let newest = partitions::partition_ids(&admin, &events).await?["2024-05-03"];
    // The scenario's dropped DAY_1 had an id below the recreated one's; every id seen so far
    // is below the new one.
    let highest_before = ids_before.values().max().copied().unwrap_or(-1);
    ensure!(
        newest > highest_before,
        "new partition id {newest} is not above every earlier id ({ids_before:?})"
    );

    // DropTable of a partitioned table deletes every partition's tablets.
    admin.drop_table(&users, false).await?;
    for id in user_ids.values() {
        let gone = partition_dir(dir.path(), users_id, *id);
        ensure!(!gone.exists(), "{gone:?} survives its table");
    }
    admin
        .drop_partition(&events, &partitions::day(DAY_2), false)
        .await?;
    ensure!(!partition_dir(dir.path(), events_id, ids[DAY_2]).exists());
    server.shutdown().await?;
    Ok(())
}
