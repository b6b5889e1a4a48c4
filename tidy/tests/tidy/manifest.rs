//! Just enough of TOML to read the workspace's manifests: the package name, the members, the
//! dependencies of each kind (a `[target.*.dependencies]` table counts as `[dependencies]`),
//! whether a dependency is optional and which features it asks for, and the `[features]` table.
//!
//! It reads the forms the manifests here use: `name.workspace = true`, `name = "1"`,
//! `name = { ... }` (on one line or several), dotted keys (`name.optional = true`) and
//! `[dependencies.name]` tables. Anything it cannot read as one of them is an error naming the
//! line, so a new form fails the test instead of being skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Dev,
    Build,
}

#[derive(Debug, Clone)]
pub struct Dep {
    pub name: String,
    pub kind: Kind,
    pub optional: bool,
    pub features: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Manifest {
    pub package: String,
    pub members: Vec<String>,
    pub deps: Vec<Dep>,
    pub features: BTreeMap<String, Vec<String>>,
}

impl Manifest {
    pub fn read(path: &Path) -> Manifest {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("tidy: cannot read {}: {e}", path.display()));
        parse(&text).unwrap_or_else(|e| panic!("tidy: {}: {e}", path.display()))
    }

    /// Everything `features` turn on, transitively (feature names and `dep:x` / `x/f` items).
    pub fn closure(&self, features: &BTreeSet<String>) -> BTreeSet<String> {
        let mut on = BTreeSet::new();
        let mut todo: Vec<String> = features.iter().cloned().collect();
        while let Some(feature) = todo.pop() {
            if on.insert(feature.clone()) {
                todo.extend(self.features.get(&feature).into_iter().flatten().cloned());
            }
        }
        on
    }

    /// True if the features in `on` (a [`Manifest::closure`]) turn on the optional `dep`.
    pub fn enables(on: &BTreeSet<String>, dep: &str) -> bool {
        on.iter().any(|item| {
            item == dep
                || item.strip_prefix("dep:") == Some(dep)
                || item.split_once('/').map(|(d, _)| d) == Some(dep)
        })
    }
}

/// Where a key-value line goes.
enum Section {
    Package,
    Workspace,
    Deps(Kind),
    /// `[dependencies.name]`: the index of the dependency its keys describe.
    DepTable(usize),
    Features,
    Other,
}

fn parse(text: &str) -> Result<Manifest, String> {
    let mut manifest = Manifest::default();
    let mut section = Section::Other;
    for (line_no, line) in logical_lines(text) {
        let at = |e: String| format!("line {line_no}: {e}");
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_start_matches('[').trim_end_matches(']').trim();
            section = section_of(header, &mut manifest.deps);
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| at(format!("not `key = value`: {line}")))?;
        let (key, value) = (key.trim(), value.trim());
        match &section {
            Section::Package if key == "name" => manifest.package = unquote(value),
            Section::Workspace if key == "members" => manifest.members = strings(value),
            Section::Deps(kind) => {
                let (name, field) = match key.split_once('.') {
                    Some((name, field)) => (name, Some(field)),
                    None => (key, None),
                };
                let index = dep_index(&mut manifest.deps, name, *kind);
                match field {
                    Some(field) => set_field(&mut manifest.deps[index], field, value),
                    None if value.starts_with('{') => {
                        for (field, value) in inline_table(value) {
                            set_field(&mut manifest.deps[index], &field, &value);
                        }
                    }
                    None => {}
                }
            }
            Section::DepTable(index) => set_field(&mut manifest.deps[*index], key, value),
            Section::Features => {
                manifest.features.insert(key.to_string(), strings(value));
            }
            _ => {}
        }
    }
    Ok(manifest)
}

fn section_of(header: &str, deps: &mut Vec<Dep>) -> Section {
    let kind_of = |name: &str| match name {
        "dependencies" => Some(Kind::Normal),
        "dev-dependencies" => Some(Kind::Dev),
        "build-dependencies" => Some(Kind::Build),
        _ => None,
    };
    // `target.'cfg(...)'.dependencies`: the cfg may hold dots, the kind is the last part.
    let last = header.rsplit('.').next().unwrap_or(header);
    match header {
        "package" => Section::Package,
        "workspace" => Section::Workspace,
        "features" => Section::Features,
        _ if header.starts_with("target.") => match kind_of(last) {
            Some(kind) => Section::Deps(kind),
            None => Section::Other,
        },
        _ => match header.split_once('.') {
            None => kind_of(header).map_or(Section::Other, Section::Deps),
            Some((table, name)) => match kind_of(table) {
                Some(kind) => Section::DepTable(dep_index(deps, name, kind)),
                None => Section::Other,
            },
        },
    }
}

fn dep_index(deps: &mut Vec<Dep>, name: &str, kind: Kind) -> usize {
    if let Some(i) = deps.iter().position(|d| d.name == name && d.kind == kind) {
        return i;
    }
    deps.push(Dep {
        name: name.to_string(),
        kind,
        optional: false,
        features: Vec::new(),
    });
    deps.len() - 1
}

fn set_field(dep: &mut Dep, field: &str, value: &str) {
    match field.trim() {
        "optional" => dep.optional = value.trim() == "true",
        "features" => dep.features = strings(value),
        // A renamed dependency: the edge is to the package.
        "package" => dep.name = unquote(value),
        _ => {}
    }
}

/// The lines of `text` without comments, a value that spans lines (an array or an inline
/// table left open) joined into one, each with the number of its first line.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = strip_comment(raw);
        let (first, mut joined) = open.take().unwrap_or((i + 1, String::new()));
        joined.push_str(line.trim());
        joined.push(' ');
        if depth(&joined) > 0 {
            open = Some((first, joined));
        } else if !joined.trim().is_empty() {
            lines.push((first, joined.trim().to_string()));
        }
    }
    lines
}

fn strip_comment(line: &str) -> &str {
    match outside_strings(line).into_iter().find(|&(_, c)| c == '#') {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

/// Open `[` and `{` outside strings, less closed ones (a header line's brackets balance).
fn depth(text: &str) -> i32 {
    outside_strings(text)
        .into_iter()
        .map(|(_, c)| match c {
            '[' | '{' => 1,
            ']' | '}' => -1,
            _ => 0,
        })
        .sum()
}

/// The characters of `text` outside its strings (`"..."` and `'...'`; the manifests here
/// escape no quote), with their byte offsets.
fn outside_strings(text: &str) -> Vec<(usize, char)> {
    let mut quote = None;
    let mut outside = Vec::new();
    for (i, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None => outside.push((i, c)),
        }
    }
    outside
}

/// The `key = value` pairs of `{ ... }`, split at its top-level commas.
fn inline_table(value: &str) -> Vec<(String, String)> {
    let inner = value.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cuts = vec![0];
    let mut nested = 0;
    for (i, c) in outside_strings(inner) {
        match c {
            '[' | '{' => nested += 1,
            ']' | '}' => nested -= 1,
            ',' if nested == 0 => cuts.push(i + 1),
            _ => {}
        }
    }
    cuts.push(inner.len() + 1);
    cuts.windows(2)
        .filter_map(|w| inner[w[0]..w[1] - 1].split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The quoted strings of an array (or of a single string).
fn strings(value: &str) -> Vec<String> {
    value
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn unquote(value: &str) -> String {
    strings(value).into_iter().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_forms_the_manifests_use() {
        let m = parse(
            r#"
[package]
name = "silt-x" # a comment
[features]
services = ["hotstore", "dep:silt-jobs"]
hotstore = [
    "dep:silt-hotstore", # why
]
[dependencies]
silt-rt.workspace = true
silt-jobs = { path = "../jobs", optional = true }
silt-hotstore = { workspace = true, optional = true, features = ["a", "b"] }
[target.'cfg(not(target_env = "msvc"))'.dependencies]
silt-engine = "1"
[dev-dependencies]
silt-testkit = { workspace = true, features = ["services"] }
[dependencies.renamed]
package = "silt-connectors"
"#,
        )
        .unwrap();
        assert_eq!(m.package, "silt-x");
        let names: Vec<_> = m.deps.iter().map(|d| (d.name.as_str(), d.kind)).collect();
        assert_eq!(
            names,
            [
                ("silt-rt", Kind::Normal),
                ("silt-jobs", Kind::Normal),
                ("silt-hotstore", Kind::Normal),
                ("silt-engine", Kind::Normal),
                ("silt-testkit", Kind::Dev),
                ("silt-connectors", Kind::Normal),
            ]
        );
        assert!(m.deps[1].optional && m.deps[2].optional && !m.deps[0].optional);
        assert_eq!(m.deps[2].features, ["a", "b"]);
        assert_eq!(m.deps[4].features, ["services"]);
        let on = m.closure(&BTreeSet::from(["services".to_string()]));
        assert!(Manifest::enables(&on, "silt-jobs") && Manifest::enables(&on, "silt-hotstore"));
        let on = m.closure(&BTreeSet::from(["hotstore".to_string()]));
        assert!(!Manifest::enables(&on, "silt-jobs"));
    }
}
