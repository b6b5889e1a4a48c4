//! The merge-engine scenario (issue 16): primary-key tables with `table.merge-engine`
//! (`first_row`, `versioned`), `table.delete.behavior`, and the tables a server must refuse,
//! written and read through the official fluss-rs client against any Fluss endpoint (silt's
//! hotstore or a real Apache Fluss 0.9.1 cluster) and recorded as a [`MergeRecord`], so
//! `hotstore_merge_engines.rs` checks silt against Fluss's semantics and `fluss_real.rs` compares
//! the two servers field by field.
//!
//! Every table is the user table of silt-testkit, `(id INT PRIMARY KEY, name STRING, score
//! BIGINT)`, in one bucket; `score` is the versioned engine's version column. Each write is
//! acknowledged (or refused) before the next is sent, so the changelog order is fixed.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fluss::client::{FlussAdmin, FlussConnection, FlussTable};
use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
use fluss::rpc::message::OffsetSpec;
use silt_testkit::hotstore::{api_code, connect_to};
use silt_testkit::rows::{UserRow, lookup_user, read_user, user, user_schema};

/// The database the scenario owns; dropped (cascade) before the scenario starts.
pub const DATABASE: &str = "silt_merge_engines";
const ENGINE: &str = "table.merge-engine";
const VER: &str = "table.merge-engine.versioned.ver-column";
const DELETES: &str = "table.delete.behavior";
/// Upper bound on every poll of the scenario.
const POLL_DEADLINE: Duration = Duration::from_secs(30);

/// One write of a case: an upsert of `(id, name, score)`, a delete, or a partial update of
/// `(id, score)`.
#[derive(Debug, Clone, Copy)]
enum Write {
    Upsert(i32, &'static str, Option<i64>),
    Delete(i32),
    PartialScore(i32, i64),
}
use Write::{Delete, PartialScore, Upsert};

/// A primary-key table, what is written to it, and how many changelog records a server that
/// follows Fluss 0.9.1 appends for that (the scan waits for that many, then looks for extras).
struct Case {
    name: &'static str,
    properties: &'static [(&'static str, &'static str)],
    writes: &'static [Write],
    changelog_records: usize,
}

const CASES: &[Case] = &[
    Case {
        name: "first_row",
        properties: &[(ENGINE, "first_row")],
        writes: &[
            Upsert(1, "a", Some(1)),
            Upsert(2, "b", Some(1)),
            Upsert(1, "a2", Some(2)),
            Delete(2),
            Upsert(3, "c", None),
            Upsert(3, "c2", Some(5)),
        ],
        changelog_records: 3,
    },
    Case {
        name: "first_row_delete_disabled",
        properties: &[(ENGINE, "first_row"), (DELETES, "disable")],
        writes: &[Upsert(1, "a", Some(1)), Delete(1), Upsert(2, "b", Some(2))],
        changelog_records: 2,
    },
    Case {
        name: "versioned",
        properties: &[(ENGINE, "versioned"), (VER, "score")],
        writes: &[
            Upsert(1, "a", Some(5)),
            Upsert(1, "lower", Some(4)),
            Upsert(1, "equal", Some(5)),
            Upsert(1, "higher", Some(9)),
            Upsert(1, "null", None),
            Upsert(2, "b", None),
            Upsert(2, "b2", None),
            Upsert(2, "b3", Some(i64::MIN)),
            Delete(1),
            Upsert(3, "c", Some(1)),
        ],
        changelog_records: 11,
    },
    Case {
        name: "versioned_delete_disabled",
        properties: &[(ENGINE, "versioned"), (VER, "score"), (DELETES, "disable")],
        writes: &[Upsert(1, "a", Some(1)), Delete(1), Upsert(1, "a2", Some(2))],
        changelog_records: 3,
    },
    Case {
        name: "delete_ignored",
        properties: &[(DELETES, "ignore")],
        writes: &[
            Upsert(1, "a", Some(1)),
            Delete(1),
            Delete(2),
            PartialScore(1, 7),
        ],
        changelog_records: 3,
    },
    Case {
        name: "delete_disabled",
        properties: &[(DELETES, "disable")],
        writes: &[Upsert(1, "a", Some(1)), Delete(1), Upsert(2, "b", Some(2))],
        changelog_records: 2,
    },
];

/// Partial updates on merge tables: Fluss refuses them, silt too (the code may differ).
const PARTIAL_UPDATE_CASES: &[(&str, &[(&str, &str)])] = &[
    ("first_row", &[(ENGINE, "first_row")]),
    ("versioned", &[(ENGINE, "versioned"), (VER, "score")]),
];

/// Tables a server must refuse (or, where silt and Fluss differ, one of them accepts):
/// name, primary key, properties.
const CREATES: &[(&str, bool, &[(&str, &str)])] = &[
    (
        "versioned_without_ver_column",
        true,
        &[(ENGINE, "versioned")],
    ),
    (
        "versioned_unknown_ver_column",
        true,
        &[(ENGINE, "versioned"), (VER, "version")],
    ),
    (
        "versioned_string_ver_column",
        true,
        &[(ENGINE, "versioned"), (VER, "name")],
    ),
    (
        "first_row_delete_allowed",
        true,
        &[(ENGINE, "first_row"), (DELETES, "allow")],
    ),
    ("unknown_merge_engine", true, &[(ENGINE, "last_row")]),
    ("unknown_delete_behavior", true, &[(DELETES, "drop")]),
    ("log_table_merge_engine", false, &[(ENGINE, "first_row")]),
    ("log_table_delete_behavior", false, &[(DELETES, "ignore")]),
    ("aggregation", true, &[(ENGINE, "aggregation")]),
];

/// Everything observable that two conforming servers must agree on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergeRecord {
    pub cases: BTreeMap<&'static str, CaseRecord>,
    /// Outcome of a partial update of a key that has a row, per merge engine.
    pub partial_updates: BTreeMap<&'static str, String>,
    /// Outcome of each CreateTable of [`CREATES`].
    pub creates: BTreeMap<&'static str, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CaseRecord {
    /// `ok` or the error code of each write, in order.
    pub writes: Vec<String>,
    /// Change type and row of each changelog record, in offset order.
    pub changelog: Vec<(String, UserRow)>,
    /// The offset of each changelog record and the bucket's log end offset after the writes:
    /// Fluss spends an offset on a write that changed nothing, silt does not.
    pub offsets: Vec<i64>,
    pub log_end_offset: i64,
    /// The row of every key written, as a lookup returns it.
    pub lookups: BTreeMap<i32, Option<UserRow>>,
}

/// Runs the whole scenario against `bootstrap` (`host:port`). Fails only where the server
/// breaks the client's basic expectations (a table that should exist cannot be read).
pub async fn run(bootstrap: &str) -> Result<MergeRecord> {
    let connection = connect_to(bootstrap).await?;
    let admin = connection.get_admin()?;
    admin
        .drop_database(DATABASE, true, true)
        .await
        .context("drop the database left by an earlier run")?;
    admin.create_database(DATABASE, None, false).await?;
    let mut record = MergeRecord::default();
    for case in CASES {
        let path = TablePath::new(DATABASE, case.name);
        admin
            .create_table(&path, &descriptor(true, case.properties)?, false)
            .await
            .with_context(|| format!("create {path}"))?;
        let outcome = run_case(&connection, &admin, &path, case).await;
        record.cases.insert(
            case.name,
            outcome.with_context(|| format!("case {}", case.name))?,
        );
    }
    for (engine, properties) in PARTIAL_UPDATE_CASES {
        let path = TablePath::new(DATABASE, format!("partial_{engine}"));
        admin
            .create_table(&path, &descriptor(true, properties)?, false)
            .await
            .with_context(|| format!("create {path}"))?;
        let table = connection.get_table(&path).await?;
        let writer = table.new_upsert()?.create_writer()?;
        writer.upsert(&user(1, Some("a"), Some(1)))?.await?;
        let partial = table
            .new_upsert()?
            .partial_update_with_column_names(&["id", "score"])?
            .create_writer()?;
        let outcome = match partial.upsert(&user(1, None, Some(2))) {
            Ok(ack) => outcome(ack.await),
            Err(error) => outcome::<()>(Err(error)),
        };
        record.partial_updates.insert(engine, outcome);
    }
    for (name, primary_key, properties) in CREATES {
        let path = TablePath::new(DATABASE, format!("create_{name}"));
        let created = admin
            .create_table(&path, &descriptor(*primary_key, properties)?, false)
            .await;
        record.creates.insert(name, outcome(created));
    }
    Ok(record)
}

fn descriptor(primary_key: bool, properties: &[(&str, &str)]) -> Result<TableDescriptor> {
    let schema = if primary_key {
        user_schema()?
    } else {
        Schema::builder()
            .column("id", DataTypes::int())
            .column("name", DataTypes::string())
            .column("score", DataTypes::bigint())
            .build()?
    };
    let mut builder = TableDescriptor::builder()
        .schema(schema)
        .distributed_by(Some(1), vec![]);
    for (key, value) in properties {
        builder = builder.property(*key, *value);
    }
    Ok(builder.build()?)
}

/// `ok`, the Fluss error code of an API error, or `client: ...` for an error the client
/// raised itself.
fn outcome<T>(result: fluss::error::Result<T>) -> String {
    match result {
        Ok(_) => "ok".to_string(),
        Err(error) => match api_code(&error) {
            Some(code) => code.to_string(),
            None => format!("client: {error}"),
        },
    }
}

async fn run_case(
    connection: &FlussConnection,
    admin: &FlussAdmin,
    path: &TablePath,
    case: &Case,
) -> Result<CaseRecord> {
    let table = connection.get_table(path).await?;
    let writer = table.new_upsert()?.create_writer()?;
    let partial = table
        .new_upsert()?
        .partial_update_with_column_names(&["id", "score"])?
        .create_writer()?;
    let mut writes = Vec::new();
    for write in case.writes {
        let sent = match *write {
            Upsert(id, name, score) => writer.upsert(&user(id, Some(name), score)),
            Delete(id) => writer.delete(&user(id, None, None)),
            PartialScore(id, score) => partial.upsert(&user(id, None, Some(score))),
        };
        writes.push(match sent {
            Ok(ack) => outcome(ack.await),
            Err(error) => outcome::<()>(Err(error)),
        });
    }
    let log_end_offset = *admin
        .list_offsets(path, &[0], OffsetSpec::Latest)
        .await?
        .get(&0)
        .context("latest offset of bucket 0")?;
    let records = read_changelog(&table, case.changelog_records).await?;
    let mut lookuper = table.new_lookup()?.create_lookuper()?;
    let mut lookups = BTreeMap::new();
    for write in case.writes {
        let id = match *write {
            Upsert(id, ..) | Delete(id) | PartialScore(id, _) => id,
        };
        if !lookups.contains_key(&id) {
            lookups.insert(id, lookup_user(&mut lookuper, id).await?);
        }
    }
    Ok(CaseRecord {
        writes,
        offsets: records.iter().map(|(offset, ..)| *offset).collect(),
        changelog: records
            .into_iter()
            .map(|(_, change, row)| (change, row))
            .collect(),
        log_end_offset,
        lookups,
    })
}

/// The changelog from offset 0: waits for `expected` records (bounded), then polls once more
/// to catch records a correct server would not have appended.
async fn read_changelog(
    table: &FlussTable<'_>,
    expected: usize,
) -> Result<Vec<(i64, String, UserRow)>> {
    let scanner = table.new_scan().create_log_scanner()?;
    scanner.subscribe(0, 0).await?;
    let mut records = Vec::new();
    let started = Instant::now();
    let mut last_poll = false;
    loop {
        let wait = if last_poll { 1000 } else { 300 };
        for record in scanner.poll(Duration::from_millis(wait)).await? {
            records.push((
                record.offset(),
                record.change_type().short_string().to_string(),
                read_user(record.row())?,
            ));
        }
        if last_poll {
            return Ok(records);
        }
        last_poll = records.len() >= expected || started.elapsed() > POLL_DEADLINE;
    }
}

fn row(id: i32, name: &str, score: Option<i64>) -> UserRow {
    UserRow {
        id,
        name: Some(name.to_string()),
        score,
    }
}

/// What Apache Fluss 0.9.1 defines for these tables (apache/fluss `FirstRowRowMerger`,
/// `VersionedRowMerger`, `KvTablet.processDeletion`, `TableDescriptorValidation`); the real
/// server must pass it, and so must silt. Where they may differ, it accepts either answer.
pub fn check(record: &MergeRecord) {
    let changes = |case: &str| -> Vec<(&str, UserRow)> {
        record.cases[case]
            .changelog
            .iter()
            .map(|(change, row)| (change.as_str(), row.clone()))
            .collect()
    };
    let writes = |case: &str| -> Vec<&str> {
        record.cases[case]
            .writes
            .iter()
            .map(String::as_str)
            .collect()
    };
    let lookup = |case: &str, id: i32| record.cases[case].lookups[&id].clone();

    // first_row: the first row per key stays; later upserts and deletes change nothing.
    assert_eq!(
        writes("first_row"),
        ["ok"; 6],
        "every write is acknowledged"
    );
    assert_eq!(
        changes("first_row"),
        [
            ("+I", row(1, "a", Some(1))),
            ("+I", row(2, "b", Some(1))),
            ("+I", row(3, "c", None)),
        ]
    );
    assert_eq!(lookup("first_row", 1), Some(row(1, "a", Some(1))));
    assert_eq!(
        lookup("first_row", 2),
        Some(row(2, "b", Some(1))),
        "delete ignored"
    );
    assert_eq!(lookup("first_row", 3), Some(row(3, "c", None)));
    // DeletionDisabledException, and the writer carries on.
    assert_eq!(writes("first_row_delete_disabled"), ["ok", "57", "ok"]);
    assert_eq!(
        lookup("first_row_delete_disabled", 1),
        Some(row(1, "a", Some(1)))
    );

    // versioned: a version >= the row's replaces it; a null version is the smallest.
    assert_eq!(writes("versioned"), ["ok"; 10]);
    assert_eq!(
        changes("versioned"),
        [
            ("+I", row(1, "a", Some(5))),
            ("-U", row(1, "a", Some(5))),
            ("+U", row(1, "equal", Some(5))),
            ("-U", row(1, "equal", Some(5))),
            ("+U", row(1, "higher", Some(9))),
            ("+I", row(2, "b", None)),
            ("-U", row(2, "b", None)),
            ("+U", row(2, "b2", None)),
            ("-U", row(2, "b2", None)),
            ("+U", row(2, "b3", Some(i64::MIN))),
            ("+I", row(3, "c", Some(1))),
        ]
    );
    assert_eq!(lookup("versioned", 1), Some(row(1, "higher", Some(9))));
    assert_eq!(lookup("versioned", 2), Some(row(2, "b3", Some(i64::MIN))));
    assert_eq!(writes("versioned_delete_disabled"), ["ok", "57", "ok"]);
    assert_eq!(
        lookup("versioned_delete_disabled", 1),
        Some(row(1, "a2", Some(2)))
    );

    // table.delete.behavior on a table without a merge engine.
    assert_eq!(writes("delete_ignored"), ["ok"; 4]);
    assert_eq!(
        changes("delete_ignored"),
        [
            ("+I", row(1, "a", Some(1))),
            ("-U", row(1, "a", Some(1))),
            ("+U", row(1, "a", Some(7))),
        ],
        "deletes ignored, a partial update merged"
    );
    assert_eq!(writes("delete_disabled"), ["ok", "57", "ok"]);
    assert_eq!(lookup("delete_disabled", 1), Some(row(1, "a", Some(1))));

    for (engine, outcome) in &record.partial_updates {
        assert_ne!(
            outcome, "ok",
            "a partial update of a {engine} table is refused"
        );
    }
    for (name, outcome) in &record.creates {
        match *name {
            // Fluss 0.9.1 accepts it; silt refuses it.
            "aggregation" => {}
            // Fluss parses the engine before it validates the table: UnknownServerError.
            "unknown_merge_engine" => assert!(
                ["39", "-1"].contains(&outcome.as_str()),
                "{name}: {outcome}"
            ),
            _ => assert_eq!(outcome, "39", "{name}: InvalidConfigException"),
        }
    }
}

/// Where silt's record may differ from Apache Fluss 0.9.1's, and why (fluss-real/OBSERVED.md
/// has the detail). Keys are field names as [`differences`] reports them.
pub const KNOWN_DIFFERENCES: &[(&str, &str)] = &[
    (
        "first_row/offsets",
        "Fluss spends an offset (an empty batch) on a write that changed nothing; silt records a durable mark instead",
    ),
    ("versioned/offsets", "as first_row/offsets"),
    ("delete_ignored/offsets", "as first_row/offsets"),
    (
        "partial_updates/first_row",
        "silt answers InvalidTargetColumn (35); Fluss an UnsupportedOperationException as UnknownServerError (-1)",
    ),
    ("partial_updates/versioned", "as partial_updates/first_row"),
    (
        "creates/unknown_merge_engine",
        "silt answers InvalidConfig (39); Fluss parses table.merge-engine before validating the table and fails with UnknownServerError (-1)",
    ),
    (
        "creates/aggregation",
        "silt refuses the aggregation merge engine (InvalidConfig, 39): it implements first_row and versioned",
    ),
];

pub use silt_testkit::differential::Difference;

/// Every field of the two records that differs, case by case.
pub fn differences(ours: &MergeRecord, reference: &MergeRecord) -> Vec<Difference> {
    let mut differences = silt_testkit::differential::Differences::new(KNOWN_DIFFERENCES);
    let mut compare = |field: String, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        differences.compare(&field, a, b)
    };
    for case in CASES {
        let (a, b) = (ours.cases.get(case.name), reference.cases.get(case.name));
        let field = |name: &str| format!("{}/{name}", case.name);
        compare(
            field("writes"),
            &a.map(|c| &c.writes),
            &b.map(|c| &c.writes),
        );
        compare(
            field("changelog"),
            &a.map(|c| &c.changelog),
            &b.map(|c| &c.changelog),
        );
        compare(
            field("offsets"),
            &a.map(|c| (&c.offsets, c.log_end_offset)),
            &b.map(|c| (&c.offsets, c.log_end_offset)),
        );
        compare(
            field("lookups"),
            &a.map(|c| &c.lookups),
            &b.map(|c| &c.lookups),
        );
    }
    for (engine, _) in PARTIAL_UPDATE_CASES {
        compare(
            format!("partial_updates/{engine}"),
            &ours.partial_updates.get(engine),
            &reference.partial_updates.get(engine),
        );
    }
    for (name, ..) in CREATES {
        compare(
            format!("creates/{name}"),
            &ours.creates.get(name),
            &reference.creates.get(name),
        );
    }
    drop(compare);
    differences.found
}
