use super::properties::DATALAKE_ENABLED_SHOWN;
use super::*;

fn log_table_json(bucket_count: Option<i64>) -> Vec<u8> {
    let mut value = json!({
        "version": 1,
        "schema": {"version": 1, "columns": [{"name": "a", "data_type": {"type": "INTEGER"}}]},
        "partition_key": [],
        "properties": {"table.datalake.enabled": "true"},
        "custom_properties": {},
    });
    if let Some(count) = bucket_count {
        value["bucket_count"] = json!(count);
    }
    serde_json::to_vec(&value).unwrap()
}

/// A catalog of 3 default buckets holding the lake-enabled log table `fluss.t`.
fn catalog_with_log_table(dir: &std::path::Path) -> (Catalog, Arc<TableEntry>) {
    let catalog = Catalog::open(dir, 3, 64).unwrap();
    let entry = catalog
        .create_table("fluss", "t", &log_table_json(None), false)
        .unwrap()
        .unwrap();
    (catalog, entry)
}

/// Clients see `table.datalake.enabled` as the custom property `silt.datalake.enabled`
/// (Flink's connector would plan a lake union read of the table otherwise); the stored JSON
/// keeps it, and the view follows an AlterTable and a reopen.
#[test]
fn clients_see_datalake_enabled_as_a_custom_property() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, entry) = catalog_with_log_table(dir.path());
    let shown =
        |entry: &TableEntry| -> Value { serde_json::from_slice(&entry.client_json).unwrap() };
    let stored: Value = serde_json::from_slice(&entry.json).unwrap();
    assert_eq!(stored["properties"][DATALAKE_ENABLED], json!("true"));
    let view = shown(&entry);
    assert_eq!(view["properties"].get(DATALAKE_ENABLED), None);
    assert_eq!(
        view["custom_properties"][DATALAKE_ENABLED_SHOWN],
        json!("true")
    );
    assert_eq!(view["bucket_count"], stored["bucket_count"]);
    assert_eq!(view["schema"], stored["schema"]);

    let altered = catalog
        .alter_table_properties(
            "fluss",
            "t",
            &[PropertyChange::Set {
                key: DATALAKE_ENABLED.to_string(),
                value: "false".to_string(),
            }],
            false,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        shown(&altered)["custom_properties"][DATALAKE_ENABLED_SHOWN],
        json!("false")
    );
    drop(catalog);
    let reopened = Catalog::open(dir.path(), 3, 64).unwrap();
    let view = shown(&reopened.table("fluss", "t").unwrap());
    assert_eq!(view["properties"].get(DATALAKE_ENABLED), None);
    assert_eq!(
        view["custom_properties"][DATALAKE_ENABLED_SHOWN],
        json!("false")
    );

    // A table without the property is served as stored.
    let plain = br#"{"properties":{"table.log.ttl":"1 h"},"custom_properties":{}}"#;
    assert_eq!(client_view(plain), plain.to_vec());
}

#[test]
fn table_json_is_completed_and_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, entry) = catalog_with_log_table(dir.path());
    assert_eq!(entry.bucket_count, 3);
    let stored: Value = serde_json::from_slice(&entry.json).unwrap();
    assert_eq!(stored["bucket_count"], json!(3));
    assert_eq!(
        stored["properties"]["table.datalake.enabled"],
        json!("true")
    );
    drop(catalog);
    let reopened = Catalog::open(dir.path(), 3, 64).unwrap();
    assert_eq!(reopened.table("fluss", "t").unwrap().id, entry.id);
    let err = reopened
        .create_table("fluss", "t", &log_table_json(Some(2)), false)
        .unwrap_err();
    assert_eq!(err.code, code::TABLE_ALREADY_EXIST);
    let err = reopened
        .create_table("fluss", "u", &log_table_json(Some(65)), false)
        .unwrap_err();
    assert_eq!(err.code, code::INVALID_CONFIG);
    // Log formats: INDEXED for a log table that is not tiered; nothing else but ARROW.
    let with_format = |format: &str, lake: bool| {
        let mut table: Value = serde_json::from_slice(&log_table_json(None)).unwrap();
        table["properties"]["table.log.format"] = json!(format);
        table["properties"]["table.datalake.enabled"] = json!(lake.to_string());
        serde_json::to_vec(&table).unwrap()
    };
    reopened
        .create_table("fluss", "v", &with_format("INDEXED", false), false)
        .unwrap();
    for (name, format, lake) in [("w", "COMPACTED", false), ("x", "INDEXED", true)] {
        let err = reopened
            .create_table("fluss", name, &with_format(format, lake), false)
            .unwrap_err();
        assert_eq!(err.code, code::INVALID_CONFIG, "{format} lake={lake}");
    }
    let err = reopened
        .alter_table_properties(
            "fluss",
            "v",
            &[PropertyChange::Set {
                key: "table.datalake.enabled".into(),
                value: "true".into(),
            }],
            false,
        )
        .unwrap_err();
    assert!(err.message.contains("cannot be tiered"), "{}", err.message);
}

/// The user table `(id INT PRIMARY KEY, name STRING, ver <ver_type>)`, without its
/// primary key when `primary_key` is false, with `properties`.
fn merge_table_json(
    primary_key: bool,
    ver_type: fluss::metadata::DataType,
    properties: &[(&str, &str)],
) -> Vec<u8> {
    use fluss::metadata::{DataTypes, Schema};
    let mut schema = Schema::builder()
        .column("id", DataTypes::int())
        .column("name", DataTypes::string())
        .column("ver", ver_type);
    if primary_key {
        schema = schema.primary_key(vec!["id"]).unwrap();
    }
    let mut descriptor = TableDescriptor::builder()
        .schema(schema.build().unwrap())
        .distributed_by(Some(1), vec![]);
    for (key, value) in properties {
        descriptor = descriptor.property(*key, *value);
    }
    serde_json::to_vec(&descriptor.build().unwrap().serialize_json().unwrap()).unwrap()
}

/// Creates the table and returns `ok` or its error code and message.
fn create_merge_table(
    primary_key: bool,
    ver_type: fluss::metadata::DataType,
    properties: &[(&str, &str)],
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog::open(dir.path(), 1, 64).unwrap();
    let json = merge_table_json(primary_key, ver_type, properties);
    match catalog.create_table("fluss", "t", &json, false) {
        Ok(_) => "ok".to_string(),
        Err(error) => format!("{}: {}", error.code, error.message),
    }
}

#[test]
fn merge_engine_properties_are_validated_as_fluss_does() {
    use fluss::metadata::DataTypes;
    const ENGINE: &str = "table.merge-engine";
    const VER: &str = "table.merge-engine.versioned.ver-column";
    const DELETES: &str = "table.delete.behavior";
    let bigint = DataTypes::bigint;
    // (primary key, type of `ver`, properties, the answer starts with, and contains)
    type Case<'a> = (
        bool,
        fluss::metadata::DataType,
        &'a [(&'a str, &'a str)],
        &'a str,
        &'a str,
    );
    #[rustfmt::skip]
    let cases: &[Case] = &[
        (true, bigint(), &[(ENGINE, "first_row")], "ok", ""),
        (true, bigint(), &[(ENGINE, "FIRST_ROW")], "ok", ""),
        (true, bigint(), &[(ENGINE, "versioned"), (VER, "ver")], "ok", ""),
        (true, DataTypes::int(), &[(ENGINE, "versioned"), (VER, "ver")], "ok", ""),
        (true, DataTypes::timestamp(), &[(ENGINE, "Versioned"), (VER, "ver")], "ok", ""),
        (true, DataTypes::timestamp_ltz(), &[(ENGINE, "versioned"), (VER, "ver")], "ok", ""),
        (true, bigint(), &[(DELETES, "ignore")], "ok", ""),
        (true, bigint(), &[(DELETES, "DISABLE")], "ok", ""),
        (true, bigint(), &[(DELETES, "allow")], "ok", ""),
        (true, bigint(), &[(ENGINE, "first_row"), (DELETES, "disable")], "ok", ""),
        (true, bigint(), &[(ENGINE, "versioned"), (VER, "ver"), (DELETES, "ignore")], "ok", ""),
        (true, bigint(), &[(ENGINE, "aggregation")], "39: ", "silt implements first_row and versioned"),
        (true, bigint(), &[(ENGINE, "aggregation")], "39: ", ENGINE),
        (true, bigint(), &[(ENGINE, "last_row")], "39: ", "'last_row'"),
        (true, bigint(), &[(ENGINE, "last_row")], "39: ", "silt implements first_row and versioned"),
        (false, bigint(), &[(ENGINE, "first_row")], "39: ", "primary-key table"),
        (true, bigint(), &[(ENGINE, "versioned")], "39: ", VER),
        (true, bigint(), &[(ENGINE, "versioned"), (VER, "version")], "39: ", "'version'"),
        (true, DataTypes::string(), &[(ENGINE, "versioned"), (VER, "ver")], "39: ", "INT, BIGINT, TIMESTAMP or TIMESTAMP_LTZ"),
        (true, DataTypes::double(), &[(ENGINE, "versioned"), (VER, "ver")], "39: ", "'ver'"),
        (true, bigint(), &[(ENGINE, "first_row"), (DELETES, "allow")], "39: ", "ignore"),
        (true, bigint(), &[(ENGINE, "versioned"), (VER, "ver"), (DELETES, "ALLOW")], "39: ", DELETES),
        (true, bigint(), &[(DELETES, "drop")], "39: ", "'drop'"),
        (false, bigint(), &[(DELETES, "ignore")], "39: ", "primary-key table"),
    ];
    for (primary_key, ver_type, properties, starts_with, contains) in cases {
        let answer = create_merge_table(*primary_key, ver_type.clone(), properties);
        assert!(
            answer.starts_with(starts_with) && answer.contains(contains),
            "{properties:?} (primary key: {primary_key}, ver {ver_type}): {answer}"
        );
    }

    // As in Fluss, a merge table gets the engine's default delete behavior written in.
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog::open(dir.path(), 1, 64).unwrap();
    for (name, properties, stored) in [
        ("a", &[(ENGINE, "first_row")][..], json!("IGNORE")),
        (
            "b",
            &[(ENGINE, "first_row"), (DELETES, "disable")][..],
            json!("disable"),
        ),
        ("c", &[][..], Value::Null),
    ] {
        let json = merge_table_json(true, bigint(), properties);
        let entry = catalog
            .create_table("fluss", name, &json, false)
            .unwrap()
            .unwrap();
        let value: Value = serde_json::from_slice(&entry.json).unwrap();
        assert_eq!(value["properties"][DELETES], stored, "{properties:?}");
    }
}

/// `(dt STRING, region STRING, id INT)`, partitioned by (dt, region); a PK table with
/// `primary_key` when given.
fn partitioned_json(primary_key: Option<&[&str]>, partition_keys: &[&str]) -> Vec<u8> {
    use fluss::metadata::{DataTypes, Schema};
    let mut schema = Schema::builder()
        .column("dt", DataTypes::string())
        .column("region", DataTypes::string())
        .column("id", DataTypes::int())
        .column("amount", DataTypes::decimal(10, 2));
    if let Some(keys) = primary_key {
        schema = schema.primary_key(keys.to_vec()).unwrap();
    }
    let descriptor = TableDescriptor::builder()
        .schema(schema.build().unwrap())
        .partitioned_by(partition_keys.to_vec())
        .distributed_by(Some(2), vec![])
        .build()
        .unwrap();
    serde_json::to_vec(&descriptor.serialize_json().unwrap()).unwrap()
}

/// (primary key, partition keys, expected code)
type TableCase<'a> = (Option<&'a [&'a str]>, &'a [&'a str], i32);
/// (table, partition spec, expected code)
type SpecCase<'a> = (&'a str, &'a [(&'a str, &'a str)], i32);

/// A change of `fluss.<table>`'s partition `spec` that does not ignore its answer.
fn change<'a>(table: &'a str, spec: &'a [(String, String)]) -> PartitionChange<'a> {
    PartitionChange {
        database: "fluss",
        table,
        spec,
        ignore: false,
    }
}

fn code_of<T>(result: Result<T, ApiError>) -> i32 {
    result.map_or_else(|e| e.code, |_| 0)
}

#[test]
fn partitioned_tables_are_checked_as_fluss_does() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog::open(dir.path(), 1, 64).unwrap();
    // (primary key, partition keys, expected code)
    let cases: &[TableCase] = &[
        (None, &["dt"], 0),
        (None, &["dt", "region"], 0),
        (Some(&["dt", "id"]), &["dt"], 0),
        (Some(&["id"]), &["dt"], code::INVALID_TABLE),
        (Some(&["dt", "id"]), &["dt", "region"], code::INVALID_TABLE),
        (None, &["nope"], code::INVALID_TABLE),
        (None, &["amount"], code::INVALID_TABLE),
    ];
    for (i, (primary_key, keys, expected)) in cases.iter().enumerate() {
        let json = partitioned_json(*primary_key, keys);
        let result = catalog.create_table("fluss", &format!("t{i}"), &json, false);
        assert_eq!(code_of(result), *expected, "{primary_key:?} by {keys:?}");
    }
    // Auto-partitioned tables: one key; several keys with the time key named (Fluss stores
    // num-precreate 0 for them); refused without partition keys or beyond the partition
    // limit of pre-created partitions.
    let auto = |keys: &[&str], properties: &[(&str, &str)]| {
        let mut json: Value = serde_json::from_slice(&partitioned_json(None, keys)).unwrap();
        json["properties"]["table.auto-partition.enabled"] = json!("true");
        for (key, value) in properties {
            json["properties"][key] = json!(value);
        }
        serde_json::to_vec(&json).unwrap()
    };
    let created = catalog
        .create_table("fluss", "auto1", &auto(&["dt"], &[]), false)
        .unwrap()
        .unwrap();
    assert!(
        AutoPartitionStrategy::of("fluss.auto1", &created.descriptor)
            .unwrap()
            .is_some()
    );
    let several = catalog
        .create_table(
            "fluss",
            "auto2",
            &auto(&["dt", "region"], &[("table.auto-partition.key", "dt")]),
            false,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        several.descriptor.properties()["table.auto-partition.num-precreate"],
        "0"
    );
    let unpartitioned = catalog.create_table("fluss", "auto3", &auto(&[], &[]), false);
    assert_eq!(code_of(unpartitioned), code::INVALID_CONFIG);
    let catalog = catalog.with_partitions_per_table_max(10);
    for (precreate, expected) in [
        ("10", 0),
        ("11", code::INVALID_CONFIG),
        ("-1", code::INVALID_CONFIG),
    ] {
        let json = auto(
            &["dt"],
            &[("table.auto-partition.num-precreate", precreate)],
        );
        let result = catalog.create_table("fluss", &format!("pre{precreate}"), &json, false);
        assert_eq!(code_of(result), expected, "num-precreate {precreate}");
    }
}

#[test]
fn partition_specs_are_checked_and_ids_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog::open(dir.path(), 1, 64)
        .unwrap()
        .with_partitions_per_table_max(3);
    let json = partitioned_json(None, &["dt", "region"]);
    catalog.create_table("fluss", "t", &json, false).unwrap();
    catalog
        .create_table("fluss", "plain", &log_table_json(Some(1)), false)
        .unwrap();
    let spec = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let create = |table: &str, pairs: &[(&str, &str)]| {
        code_of(catalog.create_partition(change(table, &spec(pairs))))
    };
    let first = [("dt", "20240501"), ("region", "eu")];
    // (table, spec, expected code), in order: ids 0 and 1 are given out.
    let cases: &[SpecCase] = &[
        ("t", &first, 0),
        ("t", &[("region", "us"), ("dt", "20240501")], 0),
        ("t", &first, code::PARTITION_ALREADY_EXISTS),
        ("plain", &[("dt", "1")], code::TABLE_NOT_PARTITIONED),
        ("nope", &[("dt", "1")], code::TABLE_NOT_EXIST),
    ];
    for (table, pairs, expected) in cases {
        assert_eq!(create(table, pairs), *expected, "{table} {pairs:?}");
    }
    // Specs Fluss refuses: a key missing, one too many, one twice, an unknown one, and
    // values that cannot name a partition.
    for pairs in [
        &[("dt", "20240501")][..],
        &[("dt", "1"), ("region", "eu"), ("x", "1")],
        &[("dt", "1"), ("dt", "2")],
        &[("dt", "1"), ("zone", "eu")],
        &[("dt", "2024/05"), ("region", "eu")],
        &[("dt", "a$b"), ("region", "eu")],
        &[("dt", ""), ("region", "eu")],
        &[("dt", "__x"), ("region", "eu")],
    ] {
        assert_eq!(
            create("t", pairs),
            code::PARTITION_SPEC_INVALID,
            "{pairs:?}"
        );
    }
    let (_, listed) = catalog.list_partitions("fluss", "t", None).unwrap();
    let names: Vec<(&str, i64)> = listed.iter().map(|p| (p.name.as_str(), p.id)).collect();
    assert_eq!(names, [("20240501$eu", 0), ("20240501$us", 1)]);
    let (_, by_region) = catalog
        .list_partitions("fluss", "t", Some(&spec(&[("region", "us")])))
        .unwrap();
    assert_eq!(by_region.len(), 1);
    assert_eq!(
        by_region[0].qualified_name(&["dt".into(), "region".into()]),
        "dt=20240501/region=us"
    );

    // Dropped ids are not given out again, not even after a reopen.
    let dropped = catalog
        .drop_partition(change("t", &spec(&first)))
        .unwrap()
        .unwrap();
    assert_eq!(dropped.1.id, 0);
    let again = catalog.drop_partition(change("t", &spec(&first)));
    assert_eq!(code_of(again), code::PARTITION_NOT_EXISTS);
    drop(catalog);
    let catalog = Catalog::open(dir.path(), 1, 64)
        .unwrap()
        .with_partitions_per_table_max(3);
    let (_, created) = catalog
        .create_partition(change("t", &spec(&first)))
        .unwrap()
        .unwrap();
    assert_eq!(created.id, 2);
    assert_eq!(catalog.partition_by_id(1).unwrap().1.name, "20240501$us");
    assert_eq!(
        code_of(catalog.partition_by_id(0)),
        code::PARTITION_NOT_EXISTS
    );
    catalog
        .create_partition(change("t", &spec(&[("dt", "3"), ("region", "eu")])))
        .unwrap();
    let full = catalog.create_partition(change("t", &spec(&[("dt", "4"), ("region", "eu")])));
    assert_eq!(code_of(full), code::PARTITION_MAX_NUM);

    // Dropping the table drops its partitions; their ids stay used.
    let table_id = catalog.table("fluss", "t").unwrap().id;
    catalog.drop_table("fluss", "t", false).unwrap();
    assert!(catalog.partitions_of(table_id).is_empty());
    catalog.create_table("fluss", "t", &json, false).unwrap();
    let (_, fresh) = catalog
        .create_partition(change("t", &spec(&[("dt", "1"), ("region", "eu")])))
        .unwrap()
        .unwrap();
    assert_eq!(fresh.id, 4);
}

#[test]
fn names_are_validated() {
    for (name, ok) in [
        ("orders", true),
        ("a-b_9", true),
        ("", false),
        ("__x", false),
        ("a.b", false),
    ] {
        assert_eq!(
            validate_name(name, code::INVALID_TABLE, "table").is_ok(),
            ok,
            "{name}"
        );
    }
}
