//! Declarative YAML pipelines in the shape of Flink CDC's: a `source`, a list of `transform`
//! rules (each a `projection` and/or a `filter`), a `sink`, and `pipeline` settings (`name`,
//! `parallelism`, `checkpoint.interval`). A pipeline compiles into a [`JobDefinition`]: the
//! source, then per rule a `filter` (over the rule's input columns) followed by a `project`,
//! then the sink. Problems are reported at the pipeline's own paths (`transform[1].filter`).
//!
//! ```yaml
//! source:   { type: fluss, table: demo.orders, start: earliest }
//! transform:
//!   - projection: id, upper(status) AS status, amount * 2 AS doubled
//!     filter: amount > 10
//! sink:     { type: delta, mode: append }
//! pipeline: { name: orders-to-delta, parallelism: 2, checkpoint: { interval: 5s } }
//! ```

use serde::Deserialize;

use super::definition::{
    CheckpointDef, JobDefinition, OperatorDef, PathNames, StartDef, ValidationError,
    ValidationErrors,
};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    pub source: SourceSpec,
    #[serde(default)]
    pub transform: Vec<TransformRule>,
    /// `type` (`delta`, `fluss` or `print`) plus that sink's config keys.
    pub sink: serde_json::Map<String, serde_json::Value>,
    pub pipeline: PipelineSettings,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// `fluss` (or `fluss-source`).
    #[serde(rename = "type")]
    pub kind: String,
    pub table: String,
    #[serde(default)]
    pub start: StartDef,
    #[serde(default)]
    pub timestamp_ms: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformRule {
    /// A SQL select list: `id, upper(name) AS name`.
    #[serde(default)]
    pub projection: Option<String>,
    /// A SQL boolean expression over the rule's input columns.
    #[serde(default)]
    pub filter: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSettings {
    pub name: String,
    #[serde(default)]
    pub parallelism: Option<u32>,
    #[serde(default)]
    pub checkpoint: Option<CheckpointSettings>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSettings {
    /// A duration: `500ms`, `5s`, `1min`.
    pub interval: String,
}

/// Where each compiled operator came from in the pipeline.
#[derive(Debug, Clone)]
enum Origin {
    Source,
    Filter(usize),
    Projection(usize),
    Sink,
}

/// Names problems at the pipeline's paths.
#[derive(Debug, Clone)]
pub struct PipelinePaths {
    origins: Vec<Origin>,
}

impl PathNames for PipelinePaths {
    fn operator(&self, index: usize, field: &str) -> String {
        let config = field.strip_prefix("config");
        let config_key = config.map(|c| c.trim_start_matches('.'));
        match (self.origins.get(index), config_key) {
            (Some(Origin::Source), Some("")) => "source".into(),
            (Some(Origin::Source), Some(key)) => format!("source.{key}"),
            (Some(Origin::Source), None) if field == "parallelism" => "pipeline.parallelism".into(),
            (Some(Origin::Source), None) => "source".into(),
            (Some(Origin::Filter(i)), Some(_)) => format!("transform[{i}].filter"),
            (Some(Origin::Projection(i)), Some(key)) => {
                // `expressions[k]` is the k-th item of the select list.
                match key.strip_prefix("expressions[") {
                    Some(rest) => format!(
                        "transform[{i}].projection (item {})",
                        rest.trim_end_matches(']')
                    ),
                    None => format!("transform[{i}].projection"),
                }
            }
            (Some(Origin::Filter(i) | Origin::Projection(i)), None) => format!("transform[{i}]"),
            (Some(Origin::Sink), Some("")) => "sink".into(),
            (Some(Origin::Sink), Some(key)) => format!("sink.{key}"),
            (Some(Origin::Sink), None) if field == "type" => "sink.type".into(),
            (Some(Origin::Sink), None) => "sink".into(),
            (None, _) => format!("operators[{index}]"),
        }
    }

    fn edge(&self, _index: usize, _field: &str) -> String {
        "pipeline".into()
    }

    fn job(&self, field: &str) -> String {
        match field {
            "checkpoint.interval_ms" => "pipeline.checkpoint.interval".into(),
            other => format!("pipeline.{other}"),
        }
    }
}

/// Parses a pipeline from YAML; a syntax or shape error names its path.
pub fn parse_yaml(text: &str) -> Result<Pipeline, ValidationErrors> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        ValidationErrors(vec![super::definition::serde_error(
            "",
            &e.path().to_string(),
            e.inner().to_string(),
        )])
    })
}

/// Splits a select list at its top-level commas (not inside parentheses or quotes).
pub fn split_select_list(list: &str) -> Vec<String> {
    let (mut items, mut current) = (Vec::new(), String::new());
    let (mut depth, mut quote) = (0i32, None::<char>);
    for c in list.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, ',') if depth == 0 => {
                items.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() || !items.is_empty() {
        items.push(current.trim().to_string());
    }
    items
}

fn error(path: &str, message: impl Into<String>) -> ValidationErrors {
    ValidationErrors::one(path, message)
}

impl Pipeline {
    /// Compiles the pipeline into a job definition and the path names that point back here.
    pub fn to_definition(&self) -> Result<(JobDefinition, PipelinePaths), ValidationErrors> {
        let mut operators = vec![self.source_operator()?];
        let mut origins = vec![Origin::Source];
        for (i, rule) in self.transform.iter().enumerate() {
            for (operator, origin) in transform_operators(i, rule)? {
                operators.push(operator);
                origins.push(origin);
            }
        }
        operators.push(self.sink_operator()?);
        origins.push(Origin::Sink);
        let checkpoint = match &self.pipeline.checkpoint {
            Some(c) => {
                let interval = silt_rt::duration::parse_duration(&c.interval).map_err(|e| {
                    ValidationErrors(vec![ValidationError {
                        path: "pipeline.checkpoint.interval".into(),
                        message: format!("{e:#}"),
                    }])
                })?;
                Some(CheckpointDef {
                    interval_ms: Some(interval.as_millis().max(1) as u64),
                })
            }
            None => None,
        };
        let definition = JobDefinition {
            name: self.pipeline.name.clone(),
            parallelism: self.pipeline.parallelism,
            checkpoint,
            operators,
            edges: None,
        };
        Ok((definition, PipelinePaths { origins }))
    }

    /// `source:` as a fluss-source operator.
    fn source_operator(&self) -> Result<OperatorDef, ValidationErrors> {
        if !matches!(self.source.kind.as_str(), "fluss" | "fluss-source") {
            return Err(error(
                "source.type",
                format!("unknown source type {} (known: fluss)", self.source.kind),
            ));
        }
        let mut source = serde_json::json!({
            "table": self.source.table,
            "start": self.source.start,
        });
        if let Some(ms) = self.source.timestamp_ms {
            source["timestamp_ms"] = ms.into();
        }
        Ok(OperatorDef {
            name: "source".into(),
            kind: "fluss-source".into(),
            parallelism: None,
            config: source,
        })
    }

    /// `sink:` as the operator its `type` names, with the rest of its keys as the config.
    fn sink_operator(&self) -> Result<OperatorDef, ValidationErrors> {
        let mut sink = self.sink.clone();
        let kind = match sink.remove("type") {
            Some(serde_json::Value::String(t)) => t,
            _ => {
                return Err(error(
                    "sink.type",
                    "missing sink type (use delta, fluss or print)",
                ));
            }
        };
        let kind = match kind.as_str() {
            "delta" | "delta-sink" => "delta-sink",
            "fluss" | "fluss-sink" => "fluss-sink",
            "print" | "print-sink" => "print-sink",
            other => {
                return Err(error(
                    "sink.type",
                    format!("unknown sink type {other} (known: delta, fluss, print)"),
                ));
            }
        };
        Ok(OperatorDef {
            name: "sink".into(),
            kind: kind.into(),
            parallelism: None,
            config: serde_json::Value::Object(sink),
        })
    }
}

/// `transform[i]` as its filter, then its projection (either may be absent, not both).
fn transform_operators(
    i: usize,
    rule: &TransformRule,
) -> Result<Vec<(OperatorDef, Origin)>, ValidationErrors> {
    if rule.projection.is_none() && rule.filter.is_none() {
        return Err(error(
            &format!("transform[{i}]"),
            "a transform rule needs a projection, a filter or both",
        ));
    }
    let mut operators = Vec::new();
    if let Some(filter) = &rule.filter {
        operators.push((
            OperatorDef {
                name: format!("transform-{i}-filter"),
                kind: "filter".into(),
                parallelism: None,
                config: serde_json::json!({ "predicate": filter }),
            },
            Origin::Filter(i),
        ));
    }
    if let Some(projection) = &rule.projection {
        let items = split_select_list(projection);
        if items.iter().any(|s| s.is_empty()) {
            return Err(error(
                &format!("transform[{i}].projection"),
                "an item of the select list is empty (check the commas)",
            ));
        }
        operators.push((
            OperatorDef {
                name: format!("transform-{i}-projection"),
                kind: "project".into(),
                parallelism: None,
                config: serde_json::json!({ "expressions": items }),
            },
            Origin::Projection(i),
        ));
    }
    Ok(operators)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_lists_split_at_top_level_commas() {
        let cases: &[(&str, &[&str])] = &[
            ("id", &["id"]),
            ("id, name", &["id", "name"]),
            (
                "id, concat(a, ',', b) AS ab, 'x,y' AS s",
                &["id", "concat(a, ',', b) AS ab", "'x,y' AS s"],
            ),
            ("a,,b", &["a", "", "b"]),
        ];
        for (list, expected) in cases {
            assert_eq!(split_select_list(list), *expected, "{list}");
        }
    }

    #[test]
    fn shape_errors_name_the_pipeline_path() {
        let cases = [
            (
                "source: {type: fluss, table: a.b}\nsink: {type: print}\n",
                "pipeline",
            ),
            (
                "source: {type: fluss, table: a.b, strat: earliest}\nsink: {type: print}\npipeline: {name: p}\n",
                "source.strat",
            ),
            (
                "source: {type: fluss, table: a.b, start: soon}\nsink: {type: print}\npipeline: {name: p}\n",
                "source.start",
            ),
            (
                "source: {type: fluss, table: a.b}\ntransform: [{filtr: x}]\nsink: {type: print}\npipeline: {name: p}\n",
                "transform[0].filtr",
            ),
        ];
        for (yaml, path) in cases {
            let err = parse_yaml(yaml).expect_err(yaml);
            assert_eq!(err.0[0].path, path, "{yaml}: {err}");
        }
        let p = parse_yaml(
            "source: {type: fluss, table: a.b}\ntransform: [{description: nothing}]\nsink: {type: print}\npipeline: {name: p}\n",
        )
        .unwrap();
        assert_eq!(p.to_definition().unwrap_err().0[0].path, "transform[0]");
        let p = parse_yaml(
            "source: {type: fluss, table: a.b}\nsink: {type: kafka}\npipeline: {name: p, checkpoint: {interval: 5s}}\n",
        )
        .unwrap();
        assert_eq!(p.to_definition().unwrap_err().0[0].path, "sink.type");
    }
}
