//! The published JSON Schema (`conf/job-definition.schema.json`) against the serde types and
//! the examples: every example definition and every example pipeline (compiled) validates
//! against the schema; the schema's properties and enums are exactly the fields and variants
//! serde accepts; and mistakes are rejected by both.
//!
//! The validator below implements the part of JSON Schema 2020-12 the file uses (type,
//! properties, required, additionalProperties, enum, const, minimum, maximum, minItems, items,
//! local $ref, allOf, if/then); `pattern` is not checked here (the Rust side checks names).

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserialize, Visitor};
use serde_json::Value;
use silt_jobs::job::definition::{
    CheckpointDef, DeltaSinkDef, EdgeDef, FilterDef, FlussSinkDef, FlussSourceDef, JobDefinition,
    OPERATOR_TYPES, OperatorDef, PartitioningDef, PrintSinkDef, ProjectDef, SinkModeDef, SqlDef,
    StartDef, parse_json,
};
use silt_jobs::job::{Format, parse_submission};

fn conf() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf")
}

fn schema() -> Value {
    let text = std::fs::read_to_string(conf().join("job-definition.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn resolve<'a>(root: &'a Value, reference: &str) -> &'a Value {
    let pointer = reference.strip_prefix('#').expect("local refs only");
    root.pointer(pointer)
        .unwrap_or_else(|| panic!("dangling $ref {reference}"))
}

/// Returns the problems of `value` against `schema` (empty: valid), each with its path.
fn check(root: &Value, schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        check(root, resolve(root, r), value, path, out);
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        let ok = match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            other => panic!("type {other} not supported by this validator"),
        };
        if !ok {
            out.push(format!("{path}: not a {t}"));
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        out.push(format!("{path}: {value} is not one of {options:?}"));
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        out.push(format!("{path}: {value} is not {c}"));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            out.push(format!("{path}: {n} < {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            out.push(format!("{path}: {n} > {max}"));
        }
    }
    if let Some(items) = value.as_array() {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            out.push(format!("{path}: fewer than {min} items"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                check(root, item_schema, item, &format!("{path}[{i}]"), out);
            }
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = name.as_str().unwrap();
            if !object.contains_key(name) {
                out.push(format!("{path}: missing {name}"));
            }
        }
        for (key, v) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(s) => check(root, s, v, &format!("{path}.{key}"), out),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => out.push(format!("{path}: unknown property {key}")),
                    Some(s @ Value::Object(_)) => check(root, s, v, &format!("{path}.{key}"), out),
                    _ => {}
                },
            }
        }
    }
    for sub in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        check(root, sub, value, path, out);
    }
    if let Some(condition) = schema.get("if") {
        let mut trial = Vec::new();
        check(root, condition, value, path, &mut trial);
        if trial.is_empty()
            && let Some(then) = schema.get("then")
        {
            check(root, then, value, path, out);
        }
    }
}

fn problems(value: &Value) -> Vec<String> {
    let root = schema();
    let mut out = Vec::new();
    check(&root, &root, value, "$", &mut out);
    out
}

/// Every example: conf/jobs/*.json as written, conf/pipelines/*.yaml as compiled.
fn examples() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for dir in ["jobs", "pipelines"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(conf().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let format = if dir == "jobs" {
                Format::Json
            } else {
                Format::Yaml
            };
            let (definition, _) = parse_submission(&text, format)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            out.push((
                file.display().to_string(),
                serde_json::to_value(definition).unwrap(),
            ));
        }
    }
    assert!(out.len() >= 4, "the examples are missing");
    out
}

#[test]
fn every_example_validates_against_the_schema() {
    for (name, value) in examples() {
        assert_eq!(problems(&value), Vec::<String>::new(), "{name}");
    }
}

#[test]
fn mistakes_are_rejected_by_the_schema_and_by_serde() {
    let (_, base) = examples()
        .into_iter()
        .find(|(n, _)| n.ends_with("orders-fanout.json"))
        .unwrap();
    // (mutation, the path serde names)
    let cases: Vec<(Box<dyn Fn(&mut Value)>, &str)> = vec![
        (Box::new(|v| v["nmae"] = "x".into()), "nmae"),
        (
            Box::new(|v| v["operators"][0]["config"]["start"] = "soon".into()),
            "operators[0].config.start",
        ),
        (
            Box::new(|v| v["operators"][1]["config"]["statment"] = "x".into()),
            "operators[1].config.statment",
        ),
        (
            Box::new(|v| {
                v["operators"][2]["config"]
                    .as_object_mut()
                    .unwrap()
                    .remove("mode");
            }),
            "operators[2].config.mode",
        ),
        (
            Box::new(|v| v["edges"][0]["partitioning"] = "random".into()),
            "edges[0].partitioning",
        ),
        (
            Box::new(|v| v["operators"][5]["config"]["system_columns"] = "yes".into()),
            "operators[5].config.system_columns",
        ),
    ];
    for (mutate, path) in cases {
        let mut value = base.clone();
        mutate(&mut value);
        assert!(
            !problems(&value).is_empty(),
            "the schema accepts a mistake at {path}"
        );
        // serde rejects it too, naming the path (configs are checked at compile time, so parse
        // them the way the compiler does).
        let text = serde_json::to_string(&value).unwrap();
        let error = match parse_json(&text) {
            Err(e) => e.0[0].path.clone(),
            Ok(def) => config_error(&def).unwrap_or_else(|| panic!("serde accepts {path}")),
        };
        assert_eq!(error, path);
    }
}

/// The first config that does not deserialize into its operator's type, as a path.
fn config_error(def: &JobDefinition) -> Option<String> {
    fn try_as<T: serde::de::DeserializeOwned>(v: &Value, base: &str) -> Option<String> {
        serde_path_to_error::deserialize::<_, T>(v.clone())
            .err()
            .map(|e| {
                let p = e.path().to_string();
                let message = e.inner().to_string();
                let field = message
                    .strip_prefix("missing field `")
                    .and_then(|r| r.split('`').next())
                    .map(|f| format!(".{f}"))
                    .unwrap_or_default();
                if p == "." {
                    format!("{base}{field}")
                } else {
                    format!("{base}.{p}{field}")
                }
            })
    }
    def.operators.iter().enumerate().find_map(|(i, op)| {
        let base = format!("operators[{i}].config");
        match op.kind.as_str() {
            "fluss-source" => try_as::<FlussSourceDef>(&op.config, &base),
            "filter" => try_as::<FilterDef>(&op.config, &base),
            "project" => try_as::<ProjectDef>(&op.config, &base),
            "sql" => try_as::<SqlDef>(&op.config, &base),
            "delta-sink" => try_as::<DeltaSinkDef>(&op.config, &base),
            "fluss-sink" => try_as::<FlussSinkDef>(&op.config, &base),
            "print-sink" => try_as::<PrintSinkDef>(&op.config, &base),
            _ => None,
        }
    })
}

/// What serde's derive tells a deserializer: a struct's field names or an enum's variants.
struct Introspect<'a>(&'a RefCell<Vec<&'static str>>);

impl<'de> de::Deserializer<'de> for Introspect<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("introspection only"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.borrow_mut().extend(fields);
        Err(de::Error::custom("introspection only"))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.borrow_mut().extend(variants);
        Err(de::Error::custom("introspection only"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map identifier ignored_any
    }
}

fn names_of<'de, T: Deserialize<'de>>() -> Vec<String> {
    let seen = RefCell::new(Vec::new());
    let _ = T::deserialize(Introspect(&seen));
    let mut names: Vec<String> = seen.into_inner().iter().map(|s| s.to_string()).collect();
    names.sort();
    names
}

fn schema_names(node: &Value, key: &str) -> Vec<String> {
    let mut names: Vec<String> = match key {
        "properties" => node["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect(),
        _ => node["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect(),
    };
    names.sort();
    names
}

#[test]
fn the_schema_has_exactly_the_fields_and_variants_serde_accepts() {
    let s = schema();
    let defs = &s["$defs"];
    let structs: Vec<(&str, &Value, Vec<String>)> = vec![
        ("JobDefinition", &s, names_of::<JobDefinition>()),
        (
            "CheckpointDef",
            &s["properties"]["checkpoint"],
            names_of::<CheckpointDef>(),
        ),
        ("OperatorDef", &defs["operator"], names_of::<OperatorDef>()),
        ("EdgeDef", &defs["edge"], names_of::<EdgeDef>()),
        (
            "FlussSourceDef",
            &defs["fluss-source"],
            names_of::<FlussSourceDef>(),
        ),
        ("FilterDef", &defs["filter"], names_of::<FilterDef>()),
        ("ProjectDef", &defs["project"], names_of::<ProjectDef>()),
        ("SqlDef", &defs["sql"], names_of::<SqlDef>()),
        (
            "DeltaSinkDef",
            &defs["delta-sink"],
            names_of::<DeltaSinkDef>(),
        ),
        (
            "FlussSinkDef",
            &defs["fluss-sink"],
            names_of::<FlussSinkDef>(),
        ),
        (
            "PrintSinkDef",
            &defs["print-sink"],
            names_of::<PrintSinkDef>(),
        ),
    ];
    for (name, node, fields) in structs {
        assert!(!fields.is_empty(), "{name}: introspection found no fields");
        assert_eq!(schema_names(node, "properties"), fields, "{name}");
    }
    let enums: Vec<(&str, &Value, Vec<String>)> = vec![
        (
            "StartDef",
            &defs["fluss-source"]["properties"]["start"],
            names_of::<StartDef>(),
        ),
        (
            "PartitioningDef",
            &defs["edge"]["properties"]["partitioning"],
            names_of::<PartitioningDef>(),
        ),
        (
            "SinkModeDef",
            &defs["delta-sink"]["properties"]["mode"],
            names_of::<SinkModeDef>(),
        ),
        (
            "SinkModeDef",
            &defs["fluss-sink"]["properties"]["mode"],
            names_of::<SinkModeDef>(),
        ),
    ];
    for (name, node, variants) in enums {
        assert_eq!(schema_names(node, "enum"), variants, "{name}");
    }
    let mut types: Vec<String> = OPERATOR_TYPES.iter().map(|t| t.to_string()).collect();
    types.sort();
    assert_eq!(
        schema_names(&defs["operator"]["properties"]["type"], "enum"),
        types
    );
    for t in OPERATOR_TYPES {
        assert!(defs.get(*t).is_some(), "no config schema for {t}");
    }
}
