//! The tidy test, after TigerBeetle's `src/tidy.zig` and rust-analyzer's `xtask tidy`: rules
//! that keep the code what ARCHITECTURE.md and STYLE.md say it is, checked on every
//! `cargo test --workspace` (and alone, in seconds, by `cargo test -p silt-tidy`).
//!
//! - [`crate_edges`]: every member's `[dependencies]` (`[target.*.dependencies]` and
//!   `[build-dependencies]` too, not dev-dependencies) name only the silt crates its layer may,
//!   as [`LAYERS`] lists them after ARCHITECTURE.md's "Crate layers"; an optional edge only
//!   behind the feature named there (the test kit's silt-jobs behind `services`). And the tests
//!   of a crate build no more of the product than [`TEST_BUILDS`] allows: the dev-dependencies
//!   are followed, with the features they ask for, through every silt crate they reach.
//! - [`function_length`]: no function of product code longer than [`FN_LINES_MAX`] lines, except
//!   those on `naughty::LONG_FNS`.
//! - [`file_length`]: no product file longer than [`FILE_LINES_MAX`] lines, except those on
//!   `naughty::LONG_FILES`.
//!
//! Product code is `src/` of [`PRODUCT_CRATES`], less test code: `#[cfg(test)]` items and the
//! files of `#[cfg(test)] mod name;` (with their folders), files named `*_tests.rs`, `tests.rs`
//! or `test_server.rs`, and `tests/` folders. How a function is found and measured is in
//! `source.rs`: a brace matcher over the tokens, with comments and literals blanked; a function's
//! lines run from its `fn` line through its closing brace. A file's lines are its lines less
//! those of its `#[cfg(test)]` items.
//!
//! The naughty lists may only shrink: the test fails on an offender not on its list (shorten
//! it) and on a listed one that is no longer an offender, or gone (remove it from the list).
//! Code that moves (a split file, a merge of another branch) changes the lists' keys, so after
//! a merge regenerate them: `TIDY_BLESS=1 cargo test -p silt-tidy` rewrites
//! `tidy/tests/tidy/naughty.rs` from the tree, or copy the lists a failure prints. A new entry
//! needs a reason in review; the point of the lists is to end.

mod manifest;
mod naughty;
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use manifest::{Kind, Manifest};

/// STYLE.md's (TigerBeetle's) bound on a function.
const FN_LINES_MAX: usize = 70;
/// The bound on a product file, test code excluded.
const FILE_LINES_MAX: usize = 1000;
/// The crates whose `src/` is product code (bench, testkit and the tests are not).
const PRODUCT_CRATES: &[&str] = &["rt", "engine", "hotstore", "connectors", "jobs"];

/// One member of the workspace and the silt crates its `[dependencies]` may name.
struct Layer {
    package: &'static str,
    /// Silt crates it may depend on unconditionally.
    uses: &'static [&'static str],
    /// Silt crates it may depend on only as optional dependencies that no feature but the named
    /// one (and features that include it) turns on.
    uses_behind_feature: &'static [(&'static str, &'static str)],
}

/// ARCHITECTURE.md's "Crate layers", bottom up. Change both together.
const LAYERS: &[Layer] = &[
    // 0: the leaf.
    layer("silt-rt", &[]),
    // 1: side by side, neither knows the other.
    layer("silt-engine", &["silt-rt"]),
    layer("silt-hotstore", &["silt-rt"]),
    // 2: the hot store only through the Fluss protocol, never silt-hotstore.
    layer("silt-connectors", &["silt-rt", "silt-engine"]),
    // 3: the edge.
    layer(
        "silt-jobs",
        &["silt-rt", "silt-engine", "silt-hotstore", "silt-connectors"],
    ),
    // 4: measurement, test support, tests.
    layer(
        "silt-bench",
        &[
            "silt-rt",
            "silt-engine",
            "silt-hotstore",
            "silt-connectors",
            "silt-jobs",
        ],
    ),
    Layer {
        package: "silt-testkit",
        uses: &["silt-engine"],
        uses_behind_feature: &[
            ("silt-hotstore", "hotstore"),
            ("silt-connectors", "hotstore"),
            ("silt-jobs", "services"),
        ],
    },
    layer("silt-integration-tests", &[]),
    layer("silt-tidy", &[]),
];

const fn layer(package: &'static str, uses: &'static [&'static str]) -> Layer {
    Layer {
        package,
        uses,
        uses_behind_feature: &[],
    }
}

/// Silt crates that `cargo test -p <crate>` must not build (ARCHITECTURE.md's boundary "a crate's
/// tests build only what that crate sits on").
const TEST_BUILDS: &[(&str, &[&str])] = &[
    (
        "silt-engine",
        &["silt-hotstore", "silt-connectors", "silt-jobs"],
    ),
    ("silt-connectors", &["silt-jobs"]),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tidy/ is a folder of the workspace")
        .to_path_buf()
}

/// Every member's manifest, by package name, and the folder of each.
fn members() -> (BTreeMap<String, Manifest>, BTreeMap<String, String>) {
    let root = Manifest::read(&repo().join("Cargo.toml"));
    let (mut manifests, mut dirs) = (BTreeMap::new(), BTreeMap::new());
    for dir in &root.members {
        let manifest = Manifest::read(&repo().join(dir).join("Cargo.toml"));
        dirs.insert(manifest.package.clone(), dir.clone());
        manifests.insert(manifest.package.clone(), manifest);
    }
    (manifests, dirs)
}

#[test]
fn crate_edges() {
    let (manifests, dirs) = members();
    let mut problems = Vec::new();
    for package in manifests.keys() {
        if !LAYERS.iter().any(|l| l.package == package) {
            problems.push(format!(
                "{package} ({}/) has no row in LAYERS: add it to ARCHITECTURE.md's \"Crate layers\" and to LAYERS",
                dirs[package]
            ));
        }
    }
    for layer in LAYERS {
        match manifests.get(layer.package) {
            Some(manifest) => {
                let at = format!("{}/Cargo.toml", dirs[layer.package]);
                problems.extend(layer_problems(layer, manifest, &manifests, &at));
            }
            None => problems.push(format!(
                "LAYERS names {}, which is not a workspace member: remove its row",
                layer.package
            )),
        }
    }
    if let Some(tidy) = manifests.get("silt-tidy").filter(|m| !m.deps.is_empty()) {
        let names: Vec<&str> = tidy.deps.iter().map(|d| d.name.as_str()).collect();
        problems.push(format!(
            "tidy/Cargo.toml: silt-tidy depends on {names:?}; it must stay on std alone, the \
             cheapest test of the workspace"
        ));
    }
    for (package, forbidden) in TEST_BUILDS {
        let built = test_build(package, &manifests);
        let wrong: Vec<&str> = forbidden
            .iter()
            .copied()
            .filter(|c| built.contains(*c))
            .collect();
        if !wrong.is_empty() {
            problems.push(format!(
                "`cargo test -p {package}` builds {wrong:?} (it builds {built:?}): a crate's tests \
                 build only what it sits on (TEST_BUILDS); check its dev-dependencies' features"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "crate edges that ARCHITECTURE.md's \"Crate layers\" does not allow (tidy/tests/tidy/main.rs, LAYERS):\n  {}\n",
        problems.join("\n  ")
    );
}

/// What is wrong with the silt edges of one member's `[dependencies]`.
fn layer_problems(
    layer: &Layer,
    manifest: &Manifest,
    manifests: &BTreeMap<String, Manifest>,
    at: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let silt_deps = manifest
        .deps
        .iter()
        .filter(|d| d.kind != Kind::Dev && manifests.contains_key(&d.name));
    for dep in silt_deps {
        let name = dep.name.as_str();
        let feature = layer
            .uses_behind_feature
            .iter()
            .find(|(d, _)| *d == name)
            .map(|(_, f)| *f);
        if layer.uses.contains(&name) {
            continue;
        }
        let Some(feature) = feature else {
            problems.push(format!(
                "{at}: {} depends on {name}; its layer may use only {:?}",
                layer.package, layer.uses
            ));
            continue;
        };
        if !dep.optional {
            problems.push(format!(
                "{at}: {name} must be an optional dependency of {}, behind its `{feature}` feature",
                layer.package
            ));
        }
        for other in manifest
            .features
            .keys()
            .chain(["default".to_string()].iter())
        {
            let on = manifest.closure(&BTreeSet::from([other.clone()]));
            let allowed = other != "default" && on.contains(feature);
            if Manifest::enables(&on, name) && !allowed {
                problems.push(format!(
                    "{at}: feature `{other}` of {} turns on {name}, which only `{feature}` may",
                    layer.package
                ));
            }
        }
    }
    problems
}

/// The silt crates `cargo test -p package` builds: its dependencies and dev-dependencies with
/// the features they ask for, then every silt crate those reach through their `[dependencies]`,
/// optional ones where a feature asked for (or a default) turns them on. (Features a crate's
/// own features turn on in its dependencies, `x/feature`, are not followed: none here adds a
/// silt edge.)
fn test_build(package: &str, manifests: &BTreeMap<String, Manifest>) -> BTreeSet<String> {
    let mut features: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut todo = vec![(package.to_string(), BTreeSet::new(), true)];
    while let Some((name, asked, with_dev)) = todo.pop() {
        let Some(manifest) = manifests.get(&name) else {
            continue;
        };
        let first = !features.contains_key(&name);
        let known = features.entry(name.clone()).or_default();
        let grew = asked.iter().any(|f| !known.contains(f));
        known.extend(asked);
        if !first && !grew {
            continue;
        }
        let mut on = known.clone();
        on.insert("default".to_string());
        let on = manifest.closure(&on);
        for dep in &manifest.deps {
            let wanted = match dep.kind {
                Kind::Dev => with_dev,
                _ => !dep.optional || Manifest::enables(&on, &dep.name),
            };
            if wanted && manifests.contains_key(&dep.name) {
                let asked = dep.features.iter().cloned().collect();
                todo.push((dep.name.clone(), asked, false));
            }
        }
    }
    features.into_keys().collect()
}

/// A product source file and what its scan found.
struct SourceFile {
    path: String,
    scan: source::Scan,
}

/// Every product source file of [`PRODUCT_CRATES`], test code left out, in path order.
fn product_files() -> Vec<SourceFile> {
    let mut paths = Vec::new();
    for krate in PRODUCT_CRATES {
        rust_files(&repo().join(krate).join("src"), &mut paths);
    }
    let mut files = Vec::new();
    let mut test_paths: BTreeSet<PathBuf> = BTreeSet::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("tidy: cannot read {}: {e}", path.display()));
        let scan = source::scan(&text);
        assert!(
            scan.balanced,
            "tidy: the scan of {} ends with a brace or parenthesis open: it misread the file; \
             teach tidy/tests/tidy/source.rs the construct",
            path.display()
        );
        for module in &scan.test_modules {
            test_paths.extend(module_paths(&path, module));
        }
        let relative = path.strip_prefix(repo()).expect("under the repository");
        files.push((
            path.clone(),
            relative.to_string_lossy().replace('\\', "/"),
            scan,
        ));
    }
    files
        .into_iter()
        .filter(|(path, relative, _)| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let test_name =
                name.ends_with("_tests.rs") || name == "tests.rs" || name == "test_server.rs";
            let in_test_module = test_paths.iter().any(|t| path.starts_with(t));
            !test_name && !in_test_module && !relative.split('/').any(|c| c == "tests")
        })
        .map(|(_, path, scan)| SourceFile { path, scan })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.map(|e| e.expect("read dir").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file (and folder) of `mod module;` declared in `parent`.
fn module_paths(parent: &Path, module: &str) -> Vec<PathBuf> {
    let dir = parent.parent().expect("a file has a folder");
    let stem = parent.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let dir = match stem {
        "lib" | "main" | "mod" => dir.to_path_buf(),
        _ => dir.join(stem),
    };
    vec![dir.join(format!("{module}.rs")), dir.join(module)]
}

#[test]
fn function_length() {
    let mut long: BTreeMap<String, usize> = BTreeMap::new();
    for file in product_files() {
        for function in &file.scan.functions {
            let key = format!("{} {}", file.path, function.name);
            // Two functions of one name in one file share a key: the longer one counts.
            let lines = long.entry(key).or_default();
            *lines = (*lines).max(function.lines);
        }
    }
    long.retain(|_, lines| *lines > FN_LINES_MAX);
    check_naughty_list(
        "LONG_FNS",
        &format!("functions over {FN_LINES_MAX} lines (STYLE.md: short enough to read at once)"),
        naughty::LONG_FNS,
        &long,
    );
}

#[test]
fn file_length() {
    let long: BTreeMap<String, usize> = product_files()
        .into_iter()
        .filter(|f| f.scan.product_lines > FILE_LINES_MAX)
        .map(|f| (f.path, f.scan.product_lines))
        .collect();
    check_naughty_list(
        "LONG_FILES",
        &format!("product files over {FILE_LINES_MAX} lines, test code left out"),
        naughty::LONG_FILES,
        &long,
    );
}

/// Fails unless `listed` is exactly the keys of `found` (the offenders in the tree), printing
/// the lines to add and remove and the list to paste; with `TIDY_BLESS=1`, rewrites the list in
/// `naughty.rs` instead.
fn check_naughty_list(list: &str, what: &str, listed: &[&str], found: &BTreeMap<String, usize>) {
    let listed: BTreeSet<&str> = listed.iter().copied().collect();
    let line = |key: &str| format!("    \"{key}\", // {} lines", found[key]);
    let new: Vec<String> = found
        .keys()
        .filter(|k| !listed.contains(k.as_str()))
        .map(|k| line(k))
        .collect();
    let gone: Vec<String> = listed
        .iter()
        .filter(|k| !found.contains_key(**k))
        .map(|k| format!("    \"{k}\","))
        .collect();
    if new.is_empty() && gone.is_empty() {
        return;
    }
    let whole: Vec<String> = found.keys().map(|k| line(k)).collect();
    if std::env::var_os("TIDY_BLESS").is_some() {
        bless(list, &whole);
        return;
    }
    panic!(
        "{what}: naughty list {list} (tidy/tests/tidy/naughty.rs) does not match the tree.\n\n\
         New offenders, not on the list (shorten them; only if that cannot be, add the line):\n{}\n\n\
         Listed, but now within the bound or gone (remove the line: the list only shrinks):\n{}\n\n\
         After a merge moved code, regenerate: TIDY_BLESS=1 cargo test -p silt-tidy, or paste:\n\
         pub const {list}: &[&str] = &[\n{}\n];\n",
        none_if_empty(&new),
        none_if_empty(&gone),
        whole.join("\n")
    );
}

fn none_if_empty(lines: &[String]) -> String {
    if lines.is_empty() {
        "    (none)".to_string()
    } else {
        lines.join("\n")
    }
}

/// Replaces the entries of `pub const <list>` in naughty.rs with `entries`.
fn bless(list: &str, entries: &[String]) {
    // The tests run on threads of one process, and both lists are in one file.
    static FILE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = FILE.lock().unwrap_or_else(|e| e.into_inner());
    let path = repo().join("tidy/tests/tidy/naughty.rs");
    let text = std::fs::read_to_string(&path).expect("read naughty.rs");
    let open = format!("pub const {list}: &[&str] = &[");
    let start = text.find(&open).expect("the list in naughty.rs") + open.len();
    let end = start + text[start..].find("];").expect("the list's end");
    let body: String = entries.iter().map(|e| format!("\n{e}")).collect();
    let text = format!("{}{body}\n{}", &text[..start], &text[end..]);
    std::fs::write(&path, text).expect("write naughty.rs");
    // To the handle itself: the harness captures eprintln!.
    let note = format!(
        "tidy: rewrote {list} in {} ({} entries)\n",
        path.display(),
        entries.len()
    );
    std::io::Write::write_all(&mut std::io::stderr(), note.as_bytes()).expect("write stderr");
}
