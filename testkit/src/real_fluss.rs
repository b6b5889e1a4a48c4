//! Starts and stops the real Apache Fluss cluster of `integration-tests/fluss-real/` through its
//! scripts. The cluster runs in its own scratch directory and on its own ports; [`RealFluss`]
//! stops it when dropped. Where java, mvn or the Fluss jars are missing, [`RealFluss::start`]
//! answers [`Started::Skipped`] with the reason, which the test prints as `SKIPPED: ...`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// start.sh's exit code for "skipped: java, mvn or the jars are missing".
pub const EXIT_SKIP: i32 = crate::process::SCRIPT_EXIT_SKIP;

/// Ports of the test's cluster, away from start.sh's interactive defaults (9223/9224/12181)
/// so a cluster someone started by hand does not collide with the test's.
const ZK_PORT: u16 = 12281;
const COORDINATOR_PORT: u16 = 9323;
const TABLET_PORT: u16 = 9324;
/// The SASL listeners of [`RealFluss::start_with_sasl`].
const COORDINATOR_SASL_PORT: u16 = 9325;
const TABLET_SASL_PORT: u16 = 9326;

pub enum Started {
    Running(RealFluss),
    /// Why the cluster could not be started here (printed by the caller as SKIPPED).
    Skipped(String),
}

pub struct RealFluss {
    pub bootstrap: String,
    /// The SASL/PLAIN listener's bootstrap address, when the cluster has one.
    pub sasl_bootstrap: Option<String>,
    /// The tablet server, leader of every bucket (a single-node cluster).
    pub tablet: String,
    pub start_duration: Duration,
    work_dir: PathBuf,
}

/// `integration-tests/fluss-real/`: the scripts, and the jar cache under `.cache/`.
pub fn harness_dir() -> PathBuf {
    crate::repo_dir().join("integration-tests/fluss-real")
}

fn script(name: &str, work_dir: &Path) -> Command {
    let mut command = Command::new("bash");
    command
        .arg(harness_dir().join(name))
        .env("FLUSS_REAL_WORK_DIR", work_dir)
        .env("FLUSS_REAL_ZK_PORT", ZK_PORT.to_string())
        .env("FLUSS_REAL_COORDINATOR_PORT", COORDINATOR_PORT.to_string())
        .env("FLUSS_REAL_TABLET_PORT", TABLET_PORT.to_string())
        .stdin(Stdio::null());
    command
}

impl RealFluss {
    /// Runs start.sh with a work dir of its own (`name` tells concurrent users apart). Jars are
    /// cached in `fluss-real/.cache/lib` across runs.
    pub fn start(name: &str) -> Result<Started> {
        Self::start_with_conf(name, "")
    }

    /// As [`RealFluss::start`], with `extra_conf` (`server.yaml` lines, e.g.
    /// `kv.snapshot.interval: 1s`) added to both servers' configuration.
    pub fn start_with_conf(name: &str, extra_conf: &str) -> Result<Started> {
        RealFluss::start_with_options(name, extra_conf, &[], 1)
    }

    /// A cluster of `tablets` tablet servers (ids `0..tablets`), replication factor
    /// `min(tablets, 3)`, as [`RealFluss::start_with_conf`] otherwise.
    pub fn start_cluster(name: &str, tablets: usize, extra_conf: &str) -> Result<Started> {
        RealFluss::start_with_options(name, extra_conf, &[], tablets)
    }

    /// As [`RealFluss::start`], with a second listener on each server that speaks SASL/PLAIN
    /// for `users`, as Fluss's own test cluster has.
    pub fn start_with_sasl(name: &str, users: &[(&str, &str)]) -> Result<Started> {
        RealFluss::start_with_options(name, "", users, 1)
    }

    fn start_with_options(
        name: &str,
        extra_conf: &str,
        users: &[(&str, &str)],
        tablets: usize,
    ) -> Result<Started> {
        let work_dir = harness_dir().join(".cache").join(format!("run-{name}"));
        // A cluster left behind by a killed earlier run of the same test is stopped first;
        // stop.sh touches only processes started from this work dir.
        script("stop.sh", &work_dir)
            .stderr(Stdio::null())
            .status()
            .context("run fluss-real/stop.sh")?;
        let started = Instant::now();
        let mut start = script("start.sh", &work_dir);
        if !users.is_empty() {
            let users: Vec<String> = users.iter().map(|(u, p)| format!("{u}:{p}")).collect();
            start
                .env("FLUSS_REAL_SASL_USERS", users.join(" "))
                .env(
                    "FLUSS_REAL_COORDINATOR_SASL_PORT",
                    COORDINATOR_SASL_PORT.to_string(),
                )
                .env("FLUSS_REAL_TABLET_SASL_PORT", TABLET_SASL_PORT.to_string());
        }
        let output = start
            .env("FLUSS_REAL_EXTRA_CONF", extra_conf)
            .env("FLUSS_REAL_TABLETS", tablets.to_string())
            .stderr(Stdio::inherit())
            .output()
            .context("run fluss-real/start.sh")?;
        let start_duration = started.elapsed();
        match output.status.code() {
            Some(0) => {}
            Some(EXIT_SKIP) => {
                return Ok(Started::Skipped(
                    "fluss-real/start.sh skipped (java, mvn or the Fluss jars are unavailable; see its message above)".into(),
                ));
            }
            other => bail!("fluss-real/start.sh failed with exit code {other:?}"),
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let Some(bootstrap) = stdout
            .lines()
            .last()
            .map(str::trim)
            .filter(|l| !l.is_empty())
        else {
            bail!("fluss-real/start.sh printed no bootstrap address");
        };
        // With SASL users, the line before the bootstrap address is the SASL listener's.
        let sasl_bootstrap = (!users.is_empty())
            .then(|| stdout.lines().rev().nth(1).map(|l| l.trim().to_string()))
            .flatten();
        Ok(Started::Running(RealFluss {
            bootstrap: bootstrap.to_string(),
            sasl_bootstrap,
            tablet: format!("127.0.0.1:{TABLET_PORT}"),
            start_duration,
            work_dir,
        }))
    }
}

impl RealFluss {
    /// The data directory of tablet server 0 (its local log segments).
    pub fn tablet_data_dir(&self) -> PathBuf {
        self.work_dir.join("tablet-data")
    }

    /// The cluster's `remote.data.dir` (a local directory): where it moves old log segments.
    pub fn remote_data_dir(&self) -> PathBuf {
        self.work_dir.join("remote-data")
    }

    /// Kills tablet server `id` (SIGKILL, `start.sh --kill-tablet`); it stays down until
    /// [`RealFluss::start_tablet`].
    pub fn kill_tablet(&self, id: usize) -> Result<()> {
        self.tablet_script("--kill-tablet", id)
    }

    /// Starts tablet server `id` again over its data; returns once it has registered.
    pub fn start_tablet(&self, id: usize) -> Result<()> {
        self.tablet_script("--start-tablet", id)
    }

    fn tablet_script(&self, mode: &str, id: usize) -> Result<()> {
        let status = script("start.sh", &self.work_dir)
            .args([mode, &id.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .with_context(|| format!("run fluss-real/start.sh {mode} {id}"))?;
        if !status.success() {
            bail!("fluss-real/start.sh {mode} {id} failed: {status}");
        }
        Ok(())
    }

    /// Stops the tablet server cleanly and starts it again over the same data (`start.sh
    /// --restart-tablet`); returns once it has registered again.
    pub fn restart_tablet(&self) -> Result<()> {
        let status = script("start.sh", &self.work_dir)
            .arg("--restart-tablet")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .context("run fluss-real/start.sh --restart-tablet")?;
        if !status.success() {
            bail!("fluss-real/start.sh --restart-tablet failed: {status}");
        }
        Ok(())
    }
}

impl Drop for RealFluss {
    fn drop(&mut self) {
        match script("stop.sh", &self.work_dir).status() {
            Ok(status) if status.success() => {}
            other => eprintln!("fluss-real/stop.sh did not stop the cluster cleanly: {other:?}"),
        }
    }
}
