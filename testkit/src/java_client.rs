//! Runs the official Apache Fluss Java client harness of `integration-tests/java-client/`
//! (its `run.sh`: build if needed, then one JVM running the named scenarios) against a Fluss
//! endpoint. The jars and classes are cached in `java-client/.cache` across runs.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use silt_hotstore::ServerHandle;

use crate::process::{SCRIPT_EXIT_SKIP, ScriptRun, run_script};

/// run.sh's (build.sh's) exit code for "skipped: java, javac, mvn or the jars are missing".
pub const EXIT_SKIP: i32 = SCRIPT_EXIT_SKIP;

/// The fluss-client versions the harness is built against (build.sh's SUPPORTED_VERSIONS).
pub const CLIENT_VERSIONS: [&str; 2] = ["1.0.0", "0.9.1-incubating"];

/// build.sh's bound on Maven's fetch of one version, unless JAVA_CLIENT_FETCH_TIMEOUT_S says.
const FETCH_TIMEOUT_DEFAULT: Duration = Duration::from_secs(300);

/// The harness's own bound on one scenario (`Main.SCENARIO_DEADLINE`: past it, it prints every
/// thread's stack and exits). A run is killed only past all of its scenarios' bounds plus
/// [`RUN_SLACK`], so only a JVM that cannot even do that is killed.
const SCENARIO_DEADLINE: Duration = Duration::from_secs(300);

/// JVM start-up and compiling the harness, on a loaded machine.
const RUN_SLACK: Duration = Duration::from_secs(60);

/// Lines of a failed run's stderr (stack traces, the client's warnings) kept in its error.
const STDERR_LINES_MAX: usize = 60;

pub enum Ran {
    Finished(Finished),
    /// Why the harness could not run here (printed by the caller as SKIPPED).
    Skipped(String),
}

pub struct Finished {
    pub status: ExitStatus,
    /// One line per scenario: `<name> ok: ...` or `<name> FAILED: ...`.
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
}

impl Finished {
    /// The line the harness printed for `scenario`, if any.
    pub fn line_of(&self, scenario: &str) -> Option<&str> {
        let prefix = format!("{scenario} ");
        self.stdout.lines().find(|line| line.starts_with(&prefix))
    }

    /// Whether the run exited 0 and printed an `ok` line for every scenario in `scenarios`.
    pub fn all_ok(&self, scenarios: &[&str]) -> bool {
        self.status.success()
            && scenarios.iter().all(|scenario| {
                self.line_of(scenario)
                    .is_some_and(|line| line.starts_with(&format!("{scenario} ok:")))
            })
    }
}

/// `integration-tests/java-client/`: the harness, and its cache under `.cache/`.
pub fn harness_dir() -> PathBuf {
    crate::repo_dir().join("integration-tests/java-client")
}

fn fetch_timeout() -> Duration {
    std::env::var("JAVA_CLIENT_FETCH_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(FETCH_TIMEOUT_DEFAULT)
}

/// Runs `scenarios` with fluss-client `version` against `bootstrap` (blocking; call it from
/// `spawn_blocking` in async tests). Kills the run's process group past its deadline.
pub fn run(version: &str, bootstrap: &str, scenarios: &[&str]) -> Result<Ran> {
    run_with_env(version, bootstrap, scenarios, &[])
}

/// As [`run`], with `env` added to the run's environment: how a test tells a scenario where to
/// leave what the test checks next (`partitioned-lake` reads `JAVA_CLIENT_OUTPUT_DIR`).
pub fn run_with_env(
    version: &str,
    bootstrap: &str,
    scenarios: &[&str],
    env: &[(&str, &str)],
) -> Result<Ran> {
    let scenario_count = u32::try_from(scenarios.len()).context("scenario count")?;
    let deadline = fetch_timeout() + SCENARIO_DEADLINE * scenario_count + RUN_SLACK;
    let mut script = Command::new("bash");
    script
        .arg(harness_dir().join("run.sh"))
        .arg(version)
        .arg(bootstrap)
        .args(scenarios)
        .envs(env.iter().copied());
    let what = format!("java-client/run.sh {version}");
    let exit = match run_script(script, &what, deadline, usize::MAX)? {
        ScriptRun::Skipped(reason) => return Ok(Ran::Skipped(reason)),
        ScriptRun::Exited(exit) => exit,
    };
    Ok(Ran::Finished(Finished {
        status: exit.status,
        stdout: exit.stdout,
        stderr: exit.stderr,
        duration: exit.duration,
    }))
}

/// Runs `scenario` with every client version of [`CLIENT_VERSIONS`], each writing what it
/// wrote down into `output` (`JAVA_CLIENT_OUTPUT_DIR`); the versions that ran (a version that
/// could not run here printed SKIPPED with its reason).
pub async fn run_scenario_with_every_version(
    test: &str,
    bootstrap: &str,
    scenario: &'static str,
    output: &Path,
) -> Result<Vec<&'static str>> {
    let mut versions = Vec::new();
    for version in CLIENT_VERSIONS {
        let env = vec![(
            "JAVA_CLIENT_OUTPUT_DIR",
            output.to_string_lossy().to_string(),
        )];
        if run_scenario(test, version, bootstrap, scenario, env).await? {
            versions.push(version);
        }
    }
    Ok(versions)
}

/// A hot store started for tiering, after a scenario of every client version ran against it
/// ([`run_scenario_for_tiering`]).
pub struct ScenarioForTiering {
    pub server: Arc<ServerHandle>,
    /// The store's Fluss address.
    pub bootstrap: String,
    /// Where the scenario wrote the rows each table must hold (`<database>.<table>.rows`).
    pub expected_dir: PathBuf,
    /// The versions that ran (never empty).
    pub versions: Vec<&'static str>,
}

/// Starts a hot store for tiering over `dir` (two buckets a table unless it says otherwise) and
/// runs `scenario` against it with every client version, each writing what it wrote down into
/// `<dir>/expected`. `None` when no version could run here: each printed SKIPPED and why, and
/// so has `test`, which then has nothing to check.
pub async fn run_scenario_for_tiering(
    test: &str,
    dir: &Path,
    scenario: &'static str,
) -> Result<Option<ScenarioForTiering>> {
    let server = crate::hotstore::start_for_tiering(dir, 2).await?;
    let bootstrap = server.local_addr().to_string();
    let expected_dir = dir.join("expected");
    std::fs::create_dir(&expected_dir)
        .with_context(|| format!("create {}", expected_dir.display()))?;
    let versions =
        run_scenario_with_every_version(test, &bootstrap, scenario, &expected_dir).await?;
    if versions.is_empty() {
        crate::skip(
            test,
            "no fluss-client version could run here (reasons above)",
        )?;
        return Ok(None);
    }
    Ok(Some(ScenarioForTiering {
        server,
        bootstrap,
        expected_dir,
        versions,
    }))
}

/// Runs `scenario` with fluss-client `version` against `bootstrap` from an async test (on a
/// blocking thread), with `env` added (see [`run_with_env`]), and prints what it said.
/// `Ok(false)`: it cannot run here, printed as `SKIPPED: <test>: fluss-client <version>: <why>`.
/// An error: the scenario failed; it holds the scenario's lines and the tail of its stderr.
pub async fn run_scenario(
    test: &str,
    version: &'static str,
    bootstrap: &str,
    scenario: &'static str,
    env: Vec<(&'static str, String)>,
) -> Result<bool> {
    let endpoint = bootstrap.to_string();
    let ran = tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_with_env(version, &endpoint, &[scenario], &env)
    })
    .await??;
    let run = match ran {
        Ran::Skipped(reason) => {
            crate::skip(test, &format!("fluss-client {version}: {reason}"))?;
            return Ok(false);
        }
        Ran::Finished(run) => run,
    };
    println!(
        "fluss-client {version}, {scenario}, {:.1} s:\n{}",
        run.duration.as_secs_f64(),
        run.stdout
    );
    let stderr: Vec<&str> = run.stderr.lines().collect();
    let tail = &stderr[stderr.len().saturating_sub(STDERR_LINES_MAX)..];
    anyhow::ensure!(
        run.all_ok(&[scenario]),
        "fluss-client {version}, {scenario} ({}):\n{}stderr (last {} lines):\n{}",
        run.status,
        run.stdout,
        tail.len(),
        tail.join("\n")
    );
    Ok(true)
}
