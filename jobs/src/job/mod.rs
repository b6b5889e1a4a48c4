//! User jobs: JSON job definitions and YAML pipelines ([`definition`], [`pipeline`]), the
//! service that runs, persists and resumes them ([`service`]), their REST routes and OpenAPI
//! document ([`routes`]), the structured job graph ([`topology`]), where a problem is in the
//! submitted text ([`position`]), and the `silt job` commands ([`cli`]) with their small HTTP
//! client ([`client`]).

pub mod cli;
pub mod client;
pub mod definition;
pub mod pipeline;
pub mod position;
pub mod routes;
pub mod service;
pub mod topology;

use definition::{JobDefinition, JsonPaths, PathNames, ValidationErrors};

/// A submission body's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    /// From a Content-Type header, else by sniffing the text (`{` starts JSON).
    pub fn detect(content_type: Option<&str>, text: &str) -> Format {
        match content_type.map(|c| c.to_ascii_lowercase()) {
            Some(c) if c.contains("json") => Format::Json,
            Some(c) if c.contains("yaml") || c.contains("yml") => Format::Yaml,
            _ if text.trim_start().starts_with('{') => Format::Json,
            _ => Format::Yaml,
        }
    }
}

/// Parses a submission: a JSON job definition, or YAML holding either a pipeline (`source`,
/// `transform`, `sink`, `pipeline`) or a job definition (`operators`). Returns the definition
/// and how to name paths in its errors.
pub fn parse_submission(
    text: &str,
    format: Format,
) -> Result<(JobDefinition, Box<dyn PathNames>), ValidationErrors> {
    match format {
        Format::Json => Ok((definition::parse_json(text)?, Box::new(JsonPaths))),
        Format::Yaml => {
            let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text)
                .map_err(|e| ValidationErrors::one("", format!("not valid YAML: {e}")))?;
            let is_definition = value
                .as_mapping()
                .is_some_and(|m| m.contains_key("operators"));
            if is_definition {
                let de = serde_yaml_ng::Deserializer::from_str(text);
                let def = serde_path_to_error::deserialize(de).map_err(|e| {
                    ValidationErrors(vec![definition::serde_error(
                        "",
                        &e.path().to_string(),
                        e.inner().to_string(),
                    )])
                })?;
                Ok((def, Box::new(JsonPaths)))
            } else {
                let pipeline = pipeline::parse_yaml(text)?;
                let (def, paths) = pipeline.to_definition()?;
                Ok((def, Box::new(paths)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"name": "j", "operators": [
        {"name": "s", "type": "fluss-source", "config": {"table": "a.b"}},
        {"name": "p", "type": "print-sink"}]}"#;

    #[test]
    fn formats_are_detected_and_yaml_may_hold_a_definition() {
        assert_eq!(
            Format::detect(Some("application/json"), "x: 1"),
            Format::Json
        );
        assert_eq!(Format::detect(Some("text/yaml"), "{}"), Format::Yaml);
        assert_eq!(Format::detect(None, "  {\"a\": 1}"), Format::Json);
        assert_eq!(
            Format::detect(Some("text/plain"), "source: x"),
            Format::Yaml
        );
        let (from_json, _) = parse_submission(JSON, Format::Json).unwrap();
        let yaml = serde_yaml_ng::to_string(&from_json).unwrap();
        let (from_yaml, paths) = parse_submission(&yaml, Format::Yaml).unwrap();
        assert_eq!(from_json, from_yaml);
        assert_eq!(
            paths.operator(0, "config.table"),
            "operators[0].config.table"
        );
        let err = parse_submission("operators: [{name: s, tipe: x}]\nname: j\n", Format::Yaml)
            .err()
            .unwrap();
        assert_eq!(err.0[0].path, "operators[0].tipe");
        let err = parse_submission("source: [", Format::Yaml).err().unwrap();
        assert!(err.0[0].message.starts_with("not valid YAML"), "{err}");
    }
}
