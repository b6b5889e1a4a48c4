//! Runs the official Apache Fluss Java client harness of `integration-tests/java-client/`
//! (its `run.sh`: build if needed, then one JVM running the named scenarios) against a Fluss
//! endpoint. The jars and classes are cached in `java-client/.cache` across runs.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process::{drain, wait_until};

/// run.sh's (build.sh's) exit code for "skipped: java, javac, mvn or the jars are missing".
pub const EXIT_SKIP: i32 = 77;

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
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg(harness_dir().join("run.sh"))
        .arg(version)
        .arg(bootstrap)
        .args(scenarios)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a run past its deadline is killed with Maven or the JVM.
        .process_group(0)
        .spawn()
        .context("run java-client/run.sh")?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_until(&mut child, started + deadline)?;
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    let Some(status) = status else {
        bail!(
            "java-client/run.sh {version} did not finish within {deadline:?}; killed it\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    };
    if status.code() == Some(EXIT_SKIP) {
        let reason = stderr
            .lines()
            .rfind(|line| line.starts_with("SKIPPED: "))
            .map(|line| line.trim_start_matches("SKIPPED: ").to_string())
            .unwrap_or_else(|| format!("java-client/run.sh exited {EXIT_SKIP}:\n{stderr}"));
        return Ok(Ran::Skipped(reason));
    }
    Ok(Ran::Finished(Finished {
        status,
        stdout,
        stderr,
        duration: started.elapsed(),
    }))
}

/// Runs `scenario` with every client version of [`CLIENT_VERSIONS`], each writing what it
/// wrote down into `output` (`JAVA_CLIENT_OUTPUT_DIR`); the versions that ran (a version that
/// could not run here printed SKIPPED with its reason).
pub async fn run_scenario_with_every_version(
    test: &str,
    bootstrap: &str,
    scenario: &'static str,
    output: &std::path::Path,
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
