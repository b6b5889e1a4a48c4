//! Where a problem is in the submitted text: the 1-based line and column of the value at an
//! error's path (`source.table`, `transform[1].filter`, `operators[3].config.predicate`), so the
//! console can mark the line and the CLI can print it.
//!
//! YAML (block and flow styles alike) is walked with `serde_yaml_ng` itself: a seed follows the
//! path and, at the value, fails on purpose; the deserializer marks that error with where the
//! value's event starts, which [`serde_yaml_ng::Error::location`] then gives. That reuses the
//! parser already compiled in rather than a second YAML parser or `unsafe-libyaml`'s raw API.
//! JSON has no spans in `serde_json`, so a small scanner walks the path over the text (objects,
//! arrays, strings with escapes); it does not recurse, so a deeply nested body cannot overflow
//! the stack. When the path is not in the text (a missing field, the empty path of a syntax
//! error), the parser's own `at line N column M` in the message is used, else no position.

use serde::Serialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::Format;
use super::definition::{ValidationError, ValidationErrors};

/// A place in a text, both 1-based; the column counts characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    pub line: u32,
    pub column: u32,
}

/// A problem as the REST API answers it: `path`, `message`, and `line` and `column` when known.
#[derive(Debug, Serialize)]
pub struct LocatedError<'e> {
    #[serde(flatten)]
    pub error: &'e ValidationError,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}

/// Every problem of `errors` with its place in `text`, when it can be found.
pub fn locate_all<'e>(
    errors: &'e ValidationErrors,
    text: &str,
    format: Format,
) -> Vec<LocatedError<'e>> {
    errors
        .0
        .iter()
        .map(|error| LocatedError {
            error,
            position: locate(text, format, &error.path, &error.message),
        })
        .collect()
}

/// The place of the value at `path` in `text`, else the place a parser's `message` names.
pub fn locate(text: &str, format: Format, path: &str, message: &str) -> Option<Position> {
    let found = steps(path).and_then(|steps| match format {
        Format::Json => json_offset(text, &steps).map(|offset| position_at(text, offset)),
        Format::Yaml => yaml_position(text, &steps),
    });
    found.or_else(|| position_in_message(message).map(|p| within(text, p)))
}

/// `position`, or the end of `text` when it lies past the last line: libyaml reports an
/// unclosed flow collection on the line after the text.
fn within(text: &str, position: Position) -> Position {
    let lines = text.lines().count().max(1);
    if position.line as usize > lines {
        position_at(text, text.trim_end().len())
    } else {
        position
    }
}

/// One step of a path: a key of a mapping or an index into a sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// The steps of `operators[3].config.predicate`; a trailing note (` (item 1)`) is dropped.
/// `None` for the empty path and for anything not spelled like a path.
fn steps(path: &str) -> Option<Vec<Step>> {
    let path = path.split(" (").next().unwrap_or_default().trim();
    if path.is_empty() {
        return None;
    }
    let mut steps = Vec::new();
    for segment in path.split('.') {
        let (key, mut indexes) = segment.split_once('[').unwrap_or((segment, ""));
        if key.is_empty() {
            return None;
        }
        steps.push(Step::Key(key.to_string()));
        while !indexes.is_empty() {
            let (index, rest) = indexes.split_once(']')?;
            steps.push(Step::Index(index.parse().ok()?));
            indexes = rest.strip_prefix('[').unwrap_or(rest);
            if !rest.is_empty() && !rest.starts_with('[') {
                return None;
            }
        }
    }
    Some(steps)
}

/// The first `at line N column M` of a parser's message (serde_yaml's and serde_json's errors
/// say it so; a YAML syntax error may go on with `while parsing ... at line ...`, the place
/// the construct began, which is not where the problem is).
fn position_in_message(message: &str) -> Option<Position> {
    let (_, tail) = message.split_once("at line ")?;
    let (line, tail) = tail.split_once(" column ")?;
    let column: String = tail.chars().take_while(char::is_ascii_digit).collect();
    let position = Position {
        line: line.trim().parse().ok()?,
        column: column.parse().ok()?,
    };
    (position.line > 0 && position.column > 0).then_some(position)
}

/// The line and column of byte `offset` of `text`.
fn position_at(text: &str, offset: usize) -> Position {
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Position {
        line: before.matches('\n').count() as u32 + 1,
        column: before[line_start..].chars().count() as u32 + 1,
    }
}

/// What [`Found`] expects; an error that names it is the one raised at the value.
const FOUND: &str = "the value at the error's path";

/// Where the value at `steps` starts in a YAML text, from the mark of the error [`Found`]
/// raises there.
fn yaml_position(text: &str, steps: &[Step]) -> Option<Position> {
    let error = Seek(steps)
        .deserialize(serde_yaml_ng::Deserializer::from_str(text))
        .err()?;
    if !error.to_string().contains(FOUND) {
        return None;
    }
    let location = error.location()?;
    Some(Position {
        line: u32::try_from(location.line()).ok()?,
        column: u32::try_from(location.column()).ok()?,
    })
}

/// Follows the remaining steps; answers `Ok` when the path is not there.
struct Seek<'s>(&'s [Step]);

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if self.0.is_empty() {
            deserializer.deserialize_any(Found)
        } else {
            deserializer.deserialize_any(self)
        }
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a mapping or sequence on the path")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Step::Key(key), rest)) = self.0.split_first() else {
            return Ok(());
        };
        while let Some(name) = map.next_key::<serde_yaml_ng::Value>()? {
            if name.as_str() == Some(key.as_str()) {
                return map.next_value_seed(Seek(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Step::Index(index), rest)) = self.0.split_first() else {
            return Ok(());
        };
        for _ in 0..*index {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Seek(rest)).map(|_| ())
    }
}

/// Refuses whatever value it is given: every `visit_*` keeps serde's default, an invalid-type
/// error that names [`FOUND`].
struct Found;

impl Visitor<'_> for Found {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(FOUND)
    }
}

/// The byte offset where the value at `steps` starts in a JSON text; `None` when the path is
/// not there or the text around it is not JSON.
fn json_offset(text: &str, steps: &[Step]) -> Option<usize> {
    let mut at = skip_space(text, 0);
    for step in steps {
        at = match step {
            Step::Key(key) => json_member(text, at, key)?,
            Step::Index(index) => json_item(text, at, *index)?,
        };
    }
    Some(at)
}

/// The start of member `key`'s value in the object at `at`.
fn json_member(text: &str, at: usize, key: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    let mut i = skip_space(text, at + 1);
    while bytes.get(i) == Some(&b'"') {
        let end = string_end(bytes, i)?;
        let name: String = serde_json::from_str(&text[i..end]).ok()?;
        i = skip_space(text, end);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        i = skip_space(text, i + 1);
        if name == key {
            // No value at all (the text ends): the parser's message says where.
            return (i < bytes.len()).then_some(i);
        }
        i = skip_space(text, value_end(bytes, i)?);
        if bytes.get(i) != Some(&b',') {
            return None;
        }
        i = skip_space(text, i + 1);
    }
    None
}

/// The start of item `index` of the array at `at`.
fn json_item(text: &str, at: usize, index: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.get(at) != Some(&b'[') {
        return None;
    }
    let mut i = skip_space(text, at + 1);
    for _ in 0..index {
        if matches!(bytes.get(i), None | Some(b']')) {
            return None;
        }
        i = skip_space(text, value_end(bytes, i)?);
        if bytes.get(i) != Some(&b',') {
            return None;
        }
        i = skip_space(text, i + 1);
    }
    (!matches!(bytes.get(i), None | Some(b']'))).then_some(i)
}

fn skip_space(text: &str, at: usize) -> usize {
    let rest = text.get(at..).unwrap_or_default();
    at + (rest.len() - rest.trim_start().len())
}

/// Just past the closing quote of the string that opens at `at`.
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        match bytes.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// Just past the value that starts at `at`: a string, an object or array (by depth, strings
/// skipped whole), or a number or literal.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let (mut i, mut depth) = (at, 0usize);
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = string_end(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => depth -= 1,
                    _ => {}
                }
                i += 1;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
        _ => {
            let len = bytes[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())
                .unwrap_or(bytes.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `line:column` of `path` in `text`, or `-` when unknown.
    fn check(format: Format, text: &str, path: &str, message: &str) -> String {
        locate(text, format, path, message)
            .map_or("-".into(), |p| format!("{}:{}", p.line, p.column))
    }

    const BLOCK: &str = "\
source:
  type: fluss
  table: demo.orders
transform:
  - projection: order_id, status
  - filter: amount >>> 10
    description: \"a [bracket], {brace}\"
sink:
  type: print
pipeline:
  name: p
";

    const FLOW: &str = "\
source:    { type: fluss, table: demo.orders, start: earliest }
transform: [{projection: 'a, b'}, {filter: amount >>> 10}]
sink:      { type: print }
pipeline:  { name: p, checkpoint: { interval: 5s } }
";

    const JSON: &str = r#"{"name": "j", "operators": [
  {"name": "s", "type": "fluss-source", "config": {"table": "a.b"}},
  {"name": "f\"[x]", "type": "filter", "config": {"predicate": "x > 1", "e": [1, {"a": "}"}]}},
  {"name": "p",
   "type": "print-sink"}]}"#;

    #[test]
    fn yaml_paths_point_at_their_values() {
        let cases = [
            (BLOCK, "source.table", "3:10"),
            (BLOCK, "source", "2:3"),
            (BLOCK, "transform[1].filter", "6:13"),
            (BLOCK, "transform[0].projection (item 1)", "5:17"),
            (BLOCK, "transform[1].description", "7:18"),
            (BLOCK, "pipeline.name", "11:9"),
            (FLOW, "source.table", "1:34"),
            (FLOW, "transform[1].filter", "2:44"),
            (FLOW, "pipeline.checkpoint.interval", "4:47"),
            (FLOW, "sink", "3:12"),
        ];
        for (text, path, want) in cases {
            assert_eq!(check(Format::Yaml, text, path, ""), want, "{path}");
        }
    }

    #[test]
    fn json_paths_point_at_their_values() {
        let cases = [
            ("name", "1:10"),
            ("operators[0].config.table", "2:61"),
            ("operators[1].config.predicate", "3:64"),
            ("operators[1].config.e[1].a", "3:88"),
            ("operators[2].type", "5:12"),
            ("operators[2]", "4:3"),
        ];
        for (path, want) in cases {
            assert_eq!(check(Format::Json, JSON, path, ""), want, "{path}");
        }
    }

    #[test]
    fn paths_that_are_not_there_have_no_place() {
        let cases = [
            (Format::Yaml, BLOCK, "pipeline.parallelism"),
            (Format::Yaml, BLOCK, "transform[2].filter"),
            (Format::Yaml, BLOCK, "source.table.deeper"),
            (Format::Yaml, FLOW, "transform[0].filter"),
            (Format::Yaml, BLOCK, ""),
            (Format::Yaml, "source: [unclosed", "source.table"),
            (Format::Json, JSON, "operators[3]"),
            (Format::Json, JSON, "operators[0].config.start"),
            (Format::Json, JSON, "edges"),
            (Format::Json, "{\"name\": ", "name"),
            (Format::Json, "{\"name\": \"x\", \"a\": ", "a"),
            (Format::Json, "[[[[[[[[[[[[", "name"),
        ];
        for (format, text, path) in cases {
            assert_eq!(check(format, text, path, "no place named"), "-", "{path}");
        }
    }

    #[test]
    fn a_parsers_own_position_is_used_when_the_path_has_none() {
        for (text, want) in [
            ("source: [unclosed\n", "1:18"),
            ("source: [unclosed", "1:18"),
        ] {
            let error = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text).unwrap_err();
            let message = format!("not valid YAML: {error}");
            assert_eq!(check(Format::Yaml, text, "", &message), want, "{message}");
        }
        let error = serde_json::from_str::<serde_json::Value>("{\"a\": }").unwrap_err();
        assert_eq!(
            check(Format::Json, "{\"a\": }", "", &error.to_string()),
            "1:7"
        );
        // The path wins over the message: it names the value, the message may name the key.
        assert_eq!(
            check(
                Format::Yaml,
                BLOCK,
                "source.table",
                "bad at line 2 column 3"
            ),
            "3:10"
        );
    }

    #[test]
    fn errors_serialize_with_their_place_only_when_known() {
        let errors = ValidationErrors(vec![
            ValidationError {
                path: "source.table".into(),
                message: "unknown table".into(),
            },
            ValidationError {
                path: "pipeline.parallelism".into(),
                message: "missing".into(),
            },
        ]);
        let located = serde_json::to_value(locate_all(&errors, BLOCK, Format::Yaml)).unwrap();
        assert_eq!(
            located,
            serde_json::json!([
                {"path": "source.table", "message": "unknown table", "line": 3, "column": 10},
                {"path": "pipeline.parallelism", "message": "missing"}
            ])
        );
    }
}
