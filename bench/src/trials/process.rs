//! The `silt up` child process of a trial, the small disk it may run on, and the power-loss cut.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rand::Rng;
use rand::rngs::SmallRng;
use silt_hotstore::storage::durability::ABORT_AFTER_DURABLE_WRITE_ENV;

/// What `silt up` writes to stderr when the fault hook aborts it (hotstore's `durability.rs`).
const ABORT_MARKER: &str = "fault injection: aborting after durable write";

/// What `silt up --crash-at` writes to stderr when it aborts at a tiering committer point
/// (`jobs/src/tiering.rs`).
const COMMIT_CRASH_MARKER: &str = "crash injected at";

/// What `silt up` prints when it stops on a storage failure (`up/mod.rs`).
const STORAGE_FAILED_MARKER: &str = "the hot store's storage failed";

/// How many times a start is tried before the trial gives up: the fixed port may still be held
/// for a moment by the process that was just killed.
pub(super) const START_ATTEMPTS_MAX: u32 = 5;

/// Where and how every `silt up` of one trial runs. Restarts keep the port and the data
/// directory, so the workload's clients retry into the restarted process as real clients do.
pub(super) struct SiltSetup {
    pub data: PathBuf,
    pub dir: PathBuf,
    pub control: PathBuf,
    pub listen: SocketAddr,
    /// Configuration of every start, as `SILT_*` environment variables.
    pub settings: Vec<(&'static str, String)>,
}

/// How a `silt up` that we did not kill ended.
pub(super) enum Exit {
    /// The `SILT_FAULT_ABORT_AFTER_DURABLE_WRITE` hook fired: the planned crash between a durable
    /// write and its acknowledgement.
    Aborted,
    /// silt stopped itself because its storage failed in a way only a restart recovers (e.g. a
    /// full disk poisoned the kv store): by design under a disk fault, a bug otherwise.
    StorageFailed(String),
    /// `--crash-at` fired: the planned crash at a tiering committer point.
    CommitCrash(CommitPoint),
    /// Anything else: a crash silt should not have had. Carries the status and the log's tail.
    Unexpected(String),
}

/// A tiering committer point `silt up --crash-at` aborts at (connectors' `FaultPoint`): with the
/// writers' files written but nothing committed, or with the Delta commit durable but neither
/// the hot store's lake-offset registry nor the job's checkpoint updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CommitPoint {
    BeforeCommit,
    AfterCommit,
}

impl CommitPoint {
    /// The value of `--crash-at`.
    fn flag(self) -> &'static str {
        match self {
            CommitPoint::BeforeCommit => "before-commit",
            CommitPoint::AfterCommit => "after-commit",
        }
    }

    /// The file `silt up` creates when it crashes there (once per file: `jobs/src/up/mod.rs`).
    fn marker(self, data: &Path) -> PathBuf {
        data.join(match self {
            CommitPoint::BeforeCommit => ".crashed-BeforeCommit",
            CommitPoint::AfterCommit => ".crashed-AfterCommit",
        })
    }

    /// The fault's name in the trials' counts.
    pub fn fault_name(self) -> &'static str {
        match self {
            CommitPoint::BeforeCommit => "crash-before-commit",
            CommitPoint::AfterCommit => "crash-after-commit",
        }
    }
}

/// How a start is armed to crash by itself.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Armed {
    /// Abort right after this durable write (`SILT_FAULT_ABORT_AFTER_DURABLE_WRITE`).
    pub abort_after: Option<u64>,
    /// Abort at the first tiering commit that reaches this point (`--crash-at`).
    pub crash_at: Option<CommitPoint>,
}

/// A running `silt up`.
pub(super) struct Silt {
    child: Child,
    log: PathBuf,
    /// The crashes this process is armed with.
    pub armed: Armed,
}

impl SiltSetup {
    pub fn bootstrap(&self) -> String {
        self.listen.to_string()
    }

    /// Starts `silt up` (the `starts`-th of this trial), armed as `armed` says; tries up to
    /// `attempts` times.
    pub fn start(&self, starts: u32, armed: Armed, attempts: u32) -> Result<Silt> {
        if let Some(point) = armed.crash_at {
            // silt crashes at a point only while its marker is absent.
            let marker = point.marker(&self.data);
            if marker.exists() {
                std::fs::remove_file(&marker)
                    .with_context(|| format!("removing {}", marker.display()))?;
            }
        }
        let mut last = None;
        for attempt in 0..attempts.clamp(1, START_ATTEMPTS_MAX) {
            let log = self.dir.join(format!("silt-{starts}.log"));
            match self.start_once(&log, armed) {
                Ok(silt) => return Ok(silt),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(200 << attempt));
        }
        Err(last.expect("at least one attempt"))
    }

    fn start_once(&self, log: &Path, armed: Armed) -> Result<Silt> {
        let (exe, silt) = crate::silt_program()?;
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let mut command = Command::new(exe);
        command
            .arg(silt)
            .args([
                "--data-dir",
                &self.data.to_string_lossy(),
                "--log",
                "warn,silt_jobs=info,silt_connectors=info",
                "up",
                "--status-every-s",
                "3600",
            ])
            .args(
                armed
                    .crash_at
                    .iter()
                    .flat_map(|point| ["--crash-at", point.flag()]),
            )
            // A plain log: the failure summaries quote its lines.
            .env("NO_COLOR", "1")
            .env("SILT_HOTSTORE__LISTEN", self.listen.to_string())
            .env("SILT_REST__LISTEN", "127.0.0.1:0")
            // Flight SQL is not exercised here; its fixed default port would clash.
            .env("SILT_QUERY__FLIGHT_LISTEN", "\"\"")
            .envs(self.settings.iter().map(|(k, v)| (k, v)))
            .env_remove(ABORT_AFTER_DURABLE_WRITE_ENV)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        #[cfg(feature = "fault-injection")]
        command.env(silt_jobs::lake_faults::ENV, &self.control);
        if let Some(n) = armed.abort_after {
            command.env(ABORT_AFTER_DURABLE_WRITE_ENV, n.to_string());
        }
        let mut child = command.spawn().context("starting silt up")?;
        let stdout = child.stdout.take().context("piped stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(tail) = line.strip_prefix("hotstore: Fluss wire protocol on ") {
                    let _ = tx.send(tail.split_whitespace().next().unwrap_or("").to_string());
                }
            }
        });
        let reported = rx.recv_timeout(Duration::from_secs(60));
        let mut silt = Silt {
            child,
            log: log.to_path_buf(),
            armed,
        };
        match reported {
            Ok(addr) if addr == self.listen.to_string() => Ok(silt),
            Ok(addr) => bail!(
                "silt up listens on {addr}, not on the trial's fixed {}",
                self.listen
            ),
            Err(_) => {
                silt.kill();
                bail!(
                    "silt up exited or did not report its address within 60 s: {}",
                    log_tail(log, 3)
                )
            }
        }
    }
}

impl Silt {
    /// `None` while running; how it ended otherwise.
    pub fn exited(&mut self) -> Option<Exit> {
        let status = match self.child.try_wait() {
            Ok(None) => return None,
            Ok(Some(status)) => status.to_string(),
            Err(e) => format!("unknown status ({e})"),
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        Some(if log.contains(ABORT_MARKER) {
            Exit::Aborted
        } else if let Some(point) = self
            .armed
            .crash_at
            .filter(|_| log.contains(COMMIT_CRASH_MARKER))
        {
            Exit::CommitCrash(point)
        } else if log.contains(STORAGE_FAILED_MARKER) {
            Exit::StorageFailed(format!("{status}: {}", log_tail(&self.log, 1)))
        } else {
            Exit::Unexpected(format!("{status}: {}", log_tail(&self.log, 3)))
        })
    }

    /// The last lines of this process's log that say what went wrong.
    pub fn log_excerpt(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        // The hot store's own complaints first (its kv store is fjall), then any error, then
        // any warning.
        let hot = |l: &&str| {
            (l.contains("ERROR") || l.contains("WARN"))
                && (l.contains("silt_hotstore") || l.contains("fjall"))
        };
        let mut lines: Vec<&str> = text.lines().filter(hot).rev().take(2).collect();
        if lines.is_empty() {
            let errors = text.lines().filter(|l| l.contains("ERROR"));
            lines = errors.rev().take(2).collect();
        }
        if lines.is_empty() {
            let warnings = text.lines().filter(|l| l.contains("WARN"));
            lines = warnings.rev().take(2).collect();
        }
        lines.reverse();
        format!("{} ({})", lines.join(" | "), self.log.display())
    }

    /// SIGKILL, and wait until the process is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Silt {
    fn drop(&mut self) {
        self.kill();
    }
}

fn log_tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut tail: Vec<&str> = text.lines().rev().take(lines).collect();
    tail.reverse();
    format!("{} (log {})", tail.join(" | "), log.display())
}

/// A free loopback port for one trial's `silt up`, below the kernel's ephemeral range: a port
/// inside it could be taken, while silt is down, by a client's own outgoing connection (or a
/// TCP self-connect of a client retrying into the closed port), and the restart could not bind.
pub(super) fn pick_port(rng: &mut SmallRng) -> Result<SocketAddr> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 20000u16.min(ephemeral_low.saturating_sub(2000));
    for _ in 0..100 {
        let port = rng.random_range(low..ephemeral_low);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if TcpListener::bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    bail!("no free loopback port in {low}..{ephemeral_low} after 100 tries")
}

/// A tmpfs under the trial directory, unmounted on drop.
pub(super) struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    pub fn mount(path: &Path, bytes: u64) -> Result<SmallDisk, String> {
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallDisk {
            path: path.to_path_buf(),
        })
    }

    /// Fills the disk up to `free_bytes` short of full; returns the filler's path. With 0 every
    /// write fails; with a few KiB a large batch is refused while a later small one still fits.
    pub fn fill(&self, free_bytes: u64) -> Result<PathBuf> {
        use std::io::Write as _;
        let filler = self.path.join("filler");
        let mut f = std::fs::File::create(&filler)?;
        let chunk = vec![0u8; 1 << 20];
        let mut size = chunk.len();
        while size > 0 {
            match f.write(&chunk[..size]) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => size /= 2,
            }
        }
        if free_bytes > 0 {
            let len = f.metadata()?.len();
            f.set_len(len.saturating_sub(free_bytes))?;
        }
        let _ = f.sync_all();
        Ok(filler)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).output();
    }
}

/// Whether [`power_loss`] over `root` would cut only what was never fsynced. Each fsync of the
/// test build leaves an 8-byte `<file>.synced` sidecar, rewritten (truncate, then write) after
/// the sync: a full disk or a kill between the two leaves it shorter, and a cut by it would take
/// durable data. `Err` names such a sidecar.
pub(super) fn power_loss_is_sound(root: &Path) -> Result<(), String> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "synced") {
                let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
                if len != 8 {
                    return Err(format!(
                        "sidecar {} holds {len} bytes, not 8",
                        path.display()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Cuts every log segment and mark journal under `root` back to what its last fsync made
/// durable (hotstore's `simulate_power_loss`); returns the bytes cut.
#[cfg(feature = "fault-injection")]
pub(super) fn power_loss(root: &Path) -> std::io::Result<u64> {
    silt_hotstore::storage::durability::simulate_power_loss(root)
}

#[cfg(not(feature = "fault-injection"))]
pub(super) fn power_loss(_root: &Path) -> std::io::Result<u64> {
    Err(std::io::Error::other(super::WITHOUT_FEATURE))
}
