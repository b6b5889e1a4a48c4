//! Primary-key tables through the official fluss-rs client against silt's hotstore: the
//! changelog of upsert(1), upsert(2), upsert(1'), delete(2) is +I, +I, -U, +U, -D at offsets
//! 0..4; an unchanged upsert adds nothing; lookups return the latest row or nothing; a partial
//! update keeps the other columns; the kv state survives a restart.

use std::time::Duration;

use anyhow::Result;
use fluss::client::FlussTable;
use fluss::metadata::{TableDescriptor, TablePath};
use fluss::record::ScanRecord;
use fluss::rpc::message::OffsetSpec;
use silt_testkit::hotstore::{self, connect};
use silt_testkit::rows::{self, UserRow, read_user, user};
use silt_testkit::scan::Read;

fn expect(id: i32, name: &str, score: i64) -> UserRow {
    UserRow {
        id,
        name: Some(name.to_string()),
        score: Some(score),
    }
}

fn descriptor() -> Result<TableDescriptor> {
    rows::user_table()
}

async fn lookup(table: &FlussTable<'_>, id: i32) -> Result<Option<UserRow>> {
    let mut lookuper = table.new_lookup()?.create_lookuper()?;
    rows::lookup_user(&mut lookuper, id).await
}

async fn changelog(
    table: &FlussTable<'_>,
    from: i64,
    expected: usize,
) -> Result<Vec<(i64, String, UserRow)>> {
    let scanner = table.new_scan().create_log_scanner()?;
    scanner.subscribe(0, from).await?;
    let entry = |record: &ScanRecord| {
        Ok((
            record.offset(),
            record.change_type().short_string().to_string(),
            read_user(record.row())?,
        ))
    };
    let mut entries = Read::new("changelog", expected)
        .records(&scanner, entry)
        .await?;
    // A short extra poll catches entries that should not be there.
    for record in scanner.poll(Duration::from_millis(300)).await? {
        entries.push(entry(&record)?);
    }
    Ok(entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_and_deletes_produce_the_changelog() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = TablePath::new("fluss", "users");
    {
        let (server, connection) =
            hotstore::start_with_table(dir.path(), &path, &descriptor()?).await?;
        let table = connection.get_table(&path).await?;
        let writer = table.new_upsert()?.create_writer()?;
        let mut steps = rows::alice_and_bob();
        steps.push(("unchanged upsert", user(1, Some("alice2"), Some(11)), false));
        steps.push(("delete of an absent key", user(3, None, None), true));
        rows::write_each(&writer, steps).await?;

        let entries = changelog(&table, 0, 5).await?;
        let expected = vec![
            (0, "+I".to_string(), expect(1, "alice", 10)),
            (1, "+I".to_string(), expect(2, "bob", 20)),
            (2, "-U".to_string(), expect(1, "alice", 10)),
            (3, "+U".to_string(), expect(1, "alice2", 11)),
            (4, "-D".to_string(), expect(2, "bob", 20)),
        ];
        assert_eq!(entries, expected);

        assert_eq!(lookup(&table, 1).await?, Some(expect(1, "alice2", 11)));
        assert_eq!(lookup(&table, 2).await?, None);
        assert_eq!(lookup(&table, 3).await?, None);
        let latest = connection
            .get_admin()?
            .list_offsets(&path, &[0], OffsetSpec::Latest)
            .await?;
        assert_eq!(latest[&0], 5);

        // Partial update of (id, score): name keeps its value; the changelog has full images.
        let partial = table
            .new_upsert()?
            .partial_update_with_column_names(&["id", "score"])?
            .create_writer()?;
        partial.upsert(&user(1, None, Some(99)))?.await?;
        partial.upsert(&user(4, None, Some(7)))?.await?;
        assert_eq!(lookup(&table, 1).await?, Some(expect(1, "alice2", 99)));
        assert_eq!(
            lookup(&table, 4).await?,
            Some(UserRow {
                id: 4,
                name: None,
                score: Some(7)
            })
        );
        let entries = changelog(&table, 5, 3).await?;
        assert_eq!(
            entries,
            vec![
                (5, "-U".to_string(), expect(1, "alice2", 11)),
                (6, "+U".to_string(), expect(1, "alice2", 99)),
                (
                    7,
                    "+I".to_string(),
                    UserRow {
                        id: 4,
                        name: None,
                        score: Some(7)
                    }
                ),
            ]
        );
        server.shutdown().await?;
    }

    // After a restart the rows are still there.
    let server = hotstore::start(dir.path()).await?;
    let connection = connect(&server).await?;
    let table = connection.get_table(&path).await?;
    assert_eq!(lookup(&table, 1).await?, Some(expect(1, "alice2", 99)));
    assert_eq!(lookup(&table, 2).await?, None);
    let writer = table.new_upsert()?.create_writer()?;
    writer.upsert(&user(1, Some("carol"), Some(1)))?.await?;
    let entries = changelog(&table, 8, 2).await?;
    assert_eq!(
        entries,
        vec![
            (8, "-U".to_string(), expect(1, "alice2", 99)),
            (9, "+U".to_string(), expect(1, "carol", 1))
        ]
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_across_buckets() -> Result<()> {
    let path = TablePath::new("fluss", "many");
    let (_dir, server, connection) =
        hotstore::scratch_with_table(&path, &rows::user_table_of(4)?).await?;
    let table = connection.get_table(&path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    for id in 0..5000 {
        drop(writer.upsert(&user(id, Some("x"), Some(i64::from(id))))?);
    }
    writer.flush().await?;
    for id in [0, 1, 2499, 4999] {
        assert_eq!(
            lookup(&table, id).await?,
            Some(expect(id, "x", i64::from(id)))
        );
    }
    let latest = connection
        .get_admin()?
        .list_offsets(&path, &[0, 1, 2, 3], OffsetSpec::Latest)
        .await?;
    assert_eq!(
        latest.values().sum::<i64>(),
        5000,
        "one +I per key: {latest:?}"
    );
    server.shutdown().await?;
    Ok(())
}
