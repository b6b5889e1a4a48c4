//! The official clients' own test suites, run against a Fluss endpoint: fluss-rs 1.0.0's
//! integration suite (from the crate's registry package, built against silt's stand-in for its
//! unpublished `fluss-test-cluster`, `integration-tests/official-suites/fluss-test-cluster/`) and
//! pyfluss 1.0.0's test suite (from its source distribution on PyPI). Nothing of either suite is
//! kept in the repository: both are unpacked at test time under a work directory the caller
//! names (the target directory's, so a CI machine reuses the suite's build between runs).
//!
//! Upstream runs each suite against one server with two listeners, a plaintext one and a SASL
//! one with the users [`SASL_USERS`]; here two servers stand in for them ([`Endpoints`]).
//!
//! Bounds: the build and the run each have a deadline, past which the process group is killed
//! and the run is an error naming what did not finish.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::process::{ScriptRun, run_script};

/// The users both suites authenticate as on the SASL endpoint.
pub const SASL_USERS: [(&str, &str); 2] = [("admin", "admin-secret"), ("alice", "alice-secret")];

/// The version of both suites: the client silt is built and tested with.
pub const SUITE_VERSION: &str = "1.0.0";

/// Tests in fluss-rs 1.0.0's integration suite (`tests/test_fluss.rs`), and in pyfluss 1.0.0's
/// (`bindings/python/test`, examples included): a run that found fewer did not run the suite.
pub const FLUSS_RS_TESTS: usize = 81;
pub const PYFLUSS_TESTS: usize = 98;

/// `silt up`'s environment for the SASL stand-in: SASL on, with [`SASL_USERS`] (silt's own
/// clients use the first).
pub fn sasl_server_env() -> Vec<(&'static str, String)> {
    let users: Vec<String> = SASL_USERS
        .iter()
        .map(|(u, p)| format!("{{username: {u}, password: {p}}}"))
        .collect();
    vec![
        ("SILT_HOTSTORE__SASL__ENABLED", "true".to_string()),
        (
            "SILT_HOTSTORE__SASL__USERS",
            format!("[{}]", users.join(", ")),
        ),
    ]
}

/// Where a suite runs: the plaintext listener, and the SASL one when there is one.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub plaintext: String,
    pub sasl: Option<String>,
}

/// Each test of a suite run and how it ended.
#[derive(Debug, Default)]
pub struct SuiteRun {
    pub outcomes: BTreeMap<String, Outcome>,
    /// What the run printed, for a failing test to show.
    pub output: String,
    pub duration: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
}

impl SuiteRun {
    pub fn named(&self, outcome: Outcome) -> Vec<&str> {
        self.outcomes
            .iter()
            .filter(|(_, o)| **o == outcome)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// `passed/total`, and the failed and skipped tests by name.
    pub fn summary(&self) -> String {
        let failed = self.named(Outcome::Failed);
        let skipped = self.named(Outcome::Skipped);
        format!(
            "{} of {} passed in {:.0?}; failed: {failed:?}; skipped: {skipped:?}",
            self.named(Outcome::Passed).len(),
            self.outcomes.len(),
            self.duration
        )
    }
}

/// A suite that ran, or why it could not run here.
pub enum Ran {
    Run(SuiteRun),
    Skipped(String),
}

/// Unpacks fluss-rs 1.0.0's package under `work_dir`, builds its integration suite against the
/// stand-in cluster crate (bounded by `build_deadline`) and runs it against `endpoints`
/// (bounded by `run_deadline`).
pub fn run_fluss_rs(
    work_dir: &Path,
    endpoints: &Endpoints,
    build_deadline: Duration,
    run_deadline: Duration,
) -> Result<Ran> {
    let workspace = prepare_fluss_rs_workspace(work_dir)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let suite_command = |extra: &[&str]| {
        let mut command = Command::new(&cargo);
        command
            .current_dir(&workspace)
            .args(["test", "-p", "fluss-rs", "--features", "integration_tests"])
            .args(["--test", "test_fluss"])
            .args(extra)
            .env("CARGO_TARGET_DIR", workspace.join("target"))
            .env("CARGO_TERM_COLOR", "never")
            // The outer build's settings are silt's, not the suite's.
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET_DIR");
        command
    };
    let built = run_script(
        suite_command(&["--no-run"]),
        "building fluss-rs's integration suite",
        build_deadline,
        80,
    )?;
    let ScriptRun::Exited(built) = built else {
        bail!("cargo exited {}", crate::process::SCRIPT_EXIT_SKIP);
    };
    ensure!(
        built.status.success(),
        "fluss-rs's integration suite did not build ({}):\n{}",
        built.status,
        crate::process::tail(&built.stderr, 80)
    );
    let mut run = suite_command(&["--", "--test-threads", "4"]);
    run.env("SILT_SUITE_BOOTSTRAP", &endpoints.plaintext);
    if let Some(sasl) = &endpoints.sasl {
        run.env("SILT_SUITE_SASL_BOOTSTRAP", sasl);
    }
    let ScriptRun::Exited(ran) =
        run_script(run, "fluss-rs's integration suite", run_deadline, 400)?
    else {
        bail!("cargo exited {}", crate::process::SCRIPT_EXIT_SKIP);
    };
    let outcomes = parse_libtest(&ran.stdout);
    Ok(Ran::Run(SuiteRun {
        outcomes,
        output: format!(
            "{}\n--- stderr (last lines) ---\n{}",
            ran.stdout,
            crate::process::tail(&ran.stderr, 200)
        ),
        duration: ran.duration,
    }))
}

/// `<work_dir>/fluss-rs-<version>/`: a workspace of the unpacked package (`fluss/`) and the
/// stand-in (`fluss-test-cluster/`), the package's lock file at its root. Unpacked once; the
/// stand-in is copied afresh every time, so an edit to it reaches the next run.
fn prepare_fluss_rs_workspace(work_dir: &Path) -> Result<PathBuf> {
    let workspace = work_dir.join(format!("fluss-rs-{SUITE_VERSION}"));
    let package = workspace.join("fluss");
    if !package.join("Cargo.toml").exists() {
        let crate_file = registry_crate_file("fluss-rs", SUITE_VERSION)?;
        let unpack = workspace.join("unpack");
        std::fs::create_dir_all(&unpack)?;
        let status = Command::new("tar")
            .arg("xzf")
            .arg(&crate_file)
            .arg("-C")
            .arg(&unpack)
            .status()
            .context("run tar")?;
        ensure!(
            status.success(),
            "tar could not unpack {}",
            crate_file.display()
        );
        let unpacked = unpack.join(format!("fluss-rs-{SUITE_VERSION}"));
        // The package's lock file pins what the suite was released with; it moves to the
        // workspace root, where cargo looks for it.
        let _ = std::fs::rename(unpacked.join("Cargo.lock"), workspace.join("Cargo.lock"));
        let manifest = std::fs::read_to_string(unpacked.join("Cargo.toml"))?;
        // The registry's manifest drops the path-only dev-dependency on the test cluster.
        std::fs::write(
            unpacked.join("Cargo.toml"),
            format!(
                "{manifest}\n[dev-dependencies.fluss-test-cluster]\npath = \"../fluss-test-cluster\"\n"
            ),
        )?;
        std::fs::rename(&unpacked, &package)?;
        std::fs::remove_dir_all(&unpack)?;
    }
    let stand_in = crate::repo_dir().join("integration-tests/official-suites/fluss-test-cluster");
    let copy = workspace.join("fluss-test-cluster");
    std::fs::create_dir_all(copy.join("src"))?;
    for file in ["Cargo.toml", "src/lib.rs"] {
        std::fs::copy(stand_in.join(file), copy.join(file))
            .with_context(|| format!("copy the stand-in's {file}"))?;
    }
    std::fs::write(
        workspace.join("Cargo.toml"),
        "[workspace]\nresolver = \"2\"\nmembers = [\"fluss\", \"fluss-test-cluster\"]\n",
    )?;
    Ok(workspace)
}

/// The `.crate` file cargo keeps of `name-version` (silt's own build downloaded fluss-rs).
fn registry_crate_file(name: &str, version: &str) -> Result<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let cache = home.join("registry/cache");
    let file = format!("{name}-{version}.crate");
    for index in std::fs::read_dir(&cache)
        .with_context(|| format!("read {}", cache.display()))?
        .flatten()
    {
        let candidate = index.path().join(&file);
        if candidate.exists() {
            return Ok(candidate);
        }
    }
    bail!(
        "{file} is not in {} (cargo keeps it there once silt's build fetched it; run `cargo fetch`)",
        cache.display()
    )
}

/// `test <name> ... ok|FAILED|ignored` lines of libtest's output.
fn parse_libtest(stdout: &str) -> BTreeMap<String, Outcome> {
    stdout
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("test ")?;
            let (name, result) = rest.rsplit_once(" ... ")?;
            let outcome = match result.trim() {
                "ok" => Outcome::Passed,
                "FAILED" => Outcome::Failed,
                r if r.starts_with("ignored") => Outcome::Skipped,
                _ => return None,
            };
            Some((name.trim().to_string(), outcome))
        })
        .collect()
}

/// Runs pyfluss's test suite (its source distribution's `bindings/python/test`, which also runs
/// its examples) against `endpoints` with the installed pyfluss, bounded by `deadline`. Skips
/// where python3, pyfluss at [`SUITE_VERSION`] or the suite's test dependencies (pytest,
/// pytest-asyncio, pytest-timeout, filelock) are missing, or where the source distribution cannot be fetched.
pub fn run_pyfluss(work_dir: &Path, endpoints: &Endpoints, deadline: Duration) -> Result<Ran> {
    if let Some(missing) = python_missing()? {
        return Ok(Ran::Skipped(missing));
    }
    let sources = match pyfluss_sources(work_dir)? {
        Ok(sources) => sources,
        Err(reason) => return Ok(Ran::Skipped(reason)),
    };
    let junit = work_dir.join("pyfluss-junit.xml");
    let _ = std::fs::remove_file(&junit);
    // The suite's own pytest settings (asyncio mode, a per-test timeout) are in the
    // distribution's pyproject.toml; it runs from `bindings/python`, where no `fluss` source
    // folder shadows the installed client.
    let mut command = Command::new("python3");
    command
        .current_dir(&sources)
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA"])
        .arg("-c")
        .arg(sources.join("../../pyproject.toml"))
        .arg("--rootdir")
        .arg(&sources)
        .arg(format!("--junitxml={}", junit.display()))
        .arg("test")
        .env("FLUSS_BOOTSTRAP_SERVERS", &endpoints.plaintext)
        .env(
            "FLUSS_SASL_BOOTSTRAP_SERVERS",
            endpoints.sasl.as_deref().unwrap_or(&endpoints.plaintext),
        );
    let ScriptRun::Exited(ran) = run_script(command, "pyfluss's test suite", deadline, 200)? else {
        bail!("pytest exited {}", crate::process::SCRIPT_EXIT_SKIP);
    };
    let report = std::fs::read_to_string(&junit).with_context(|| {
        format!(
            "pytest wrote no report ({}):\n{}\n{}",
            ran.status,
            ran.stdout,
            crate::process::tail(&ran.stderr, 60)
        )
    })?;
    Ok(Ran::Run(SuiteRun {
        outcomes: parse_junit(&report),
        output: format!(
            "{}\n--- stderr (last lines) ---\n{}",
            ran.stdout,
            crate::process::tail(&ran.stderr, 100)
        ),
        duration: ran.duration,
    }))
}

/// Why the Python side cannot run here, if it cannot.
fn python_missing() -> Result<Option<String>> {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import importlib.metadata as m, fluss, pytest, pytest_asyncio, pytest_timeout, filelock, pyarrow; print(m.version('pyfluss'))",
        ])
        .output();
    Ok(match probe {
        Err(e) => Some(format!("python3 cannot run ({e})")),
        Ok(out) if !out.status.success() => Some(format!(
            "pyfluss, pytest, pytest-asyncio, pytest-timeout, filelock or pyarrow is not importable ({}); pip install -r integration-tests/python/requirements.txt",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        )),
        Ok(out) => {
            let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (version != SUITE_VERSION)
                .then(|| format!("pyfluss {version} is installed; the suite is {SUITE_VERSION}'s"))
        }
    })
}

/// `<work_dir>/pyfluss-<version>/bindings/python`, from the source distribution (downloaded
/// once with pip); `Err(reason)` when it cannot be fetched.
fn pyfluss_sources(work_dir: &Path) -> Result<Result<PathBuf, String>> {
    let root = work_dir.join(format!("pyfluss-{SUITE_VERSION}"));
    let sources = root.join("bindings/python");
    if sources.join("test").is_dir() {
        return Ok(Ok(sources));
    }
    let download = work_dir.join("pyfluss-sdist");
    let fetched = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-deps", "--no-binary", ":all:"])
        .arg(format!("pyfluss=={SUITE_VERSION}"))
        .arg("-d")
        .arg(&download)
        .output()
        .context("run pip download")?;
    let archive = download.join(format!("pyfluss-{SUITE_VERSION}.tar.gz"));
    if !archive.exists() {
        return Ok(Err(format!(
            "pyfluss {SUITE_VERSION}'s source distribution could not be downloaded: {}",
            String::from_utf8_lossy(&fetched.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        )));
    }
    let status = Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .arg("-C")
        .arg(work_dir)
        .status()
        .context("run tar")?;
    ensure!(
        status.success(),
        "tar could not unpack {}",
        archive.display()
    );
    ensure!(
        sources.join("test").is_dir(),
        "{} has no bindings/python/test",
        archive.display()
    );
    Ok(Ok(sources))
}

/// Each `<testcase>` of a JUnit report and how it ended.
fn parse_junit(report: &str) -> BTreeMap<String, Outcome> {
    let mut outcomes = BTreeMap::new();
    for case in report.split("<testcase ").skip(1) {
        // ` name="` is also the tail of ` classname="`: attributes are found by their space.
        let case = format!(" {case}");
        let attribute = |name: &str| {
            let start = case.find(&format!(" {name}=\""))? + name.len() + 3;
            let end = case[start..].find('"')? + start;
            Some(case[start..end].to_string())
        };
        let (Some(class), Some(name)) = (attribute("classname"), attribute("name")) else {
            continue;
        };
        // A case with children ends at its closing tag; one written `<testcase .../>` has none.
        let open_end = case.find('>').unwrap_or(case.len());
        let body = if case[..open_end].ends_with('/') {
            ""
        } else {
            &case[open_end..case.find("</testcase>").unwrap_or(case.len())]
        };
        let outcome = if body.contains("<failure") || body.contains("<error") {
            Outcome::Failed
        } else if body.contains("<skipped") {
            Outcome::Skipped
        } else {
            Outcome::Passed
        };
        // A test can fail in its teardown too: the worst of its cases counts.
        let entry = outcomes
            .entry(format!("{class}::{name}"))
            .or_insert(outcome);
        if outcome == Outcome::Failed {
            *entry = Outcome::Failed;
        }
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_lines_are_read() {
        let out = "running 3 tests\ntest a::b ... ok\ntest a::c ... FAILED\ntest a::d ... ignored, needs x\nnoise\n";
        let parsed = parse_libtest(out);
        assert_eq!(parsed["a::b"], Outcome::Passed);
        assert_eq!(parsed["a::c"], Outcome::Failed);
        assert_eq!(parsed["a::d"], Outcome::Skipped);
        assert_eq!(parsed.len(), 3);
    }

    #[test]
    fn junit_cases_are_read() {
        let report = r#"<testsuite><testcase classname="t.a" name="ok1" time="0.1" /><testcase classname="t.a" name="bad" time="1"><failure message="x">boom</failure></testcase><testcase classname="t.b" name="skip" time="0"><skipped message="why"/></testcase><testcase classname="t.b" name="ok2" time="0.2"></testcase></testsuite>"#;
        let parsed = parse_junit(report);
        assert_eq!(parsed["t.a::ok1"], Outcome::Passed);
        assert_eq!(parsed["t.a::bad"], Outcome::Failed);
        assert_eq!(parsed["t.b::skip"], Outcome::Skipped);
        assert_eq!(parsed["t.b::ok2"], Outcome::Passed);
    }
}
