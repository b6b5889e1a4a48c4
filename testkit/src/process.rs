//! Child processes of tests: [`SiltProcess`], the real `silt up` on ephemeral ports over a
//! scratch data directory with its addresses read from its stdout (30 s to report them), and
//! [`ChildGuard`], which kills any other child (a hot store re-run of the test binary, an S3
//! server) when the test ends, however it ends.
//!
//! The `silt` binary is built only for the tests of its own package; they name it with
//! [`silt_bin!`] (`env!("CARGO_BIN_EXE_silt")` at the call site).

use std::io::{BufRead, BufReader, Read};
use std::ops::{Deref, DerefMut};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};

use crate::http;
use crate::wait::{self, Look};

/// The path of the `silt` binary, in a test of the package that builds it.
#[macro_export]
macro_rules! silt_bin {
    () => {
        env!("CARGO_BIN_EXE_silt")
    };
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct ChildGuard(pub Child);

impl Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `command` with its stdout piped and hands each line of its stdout to `watch` on a
/// thread of its own, which sends on the channel what it looks for. Its stderr is kept, the
/// last [`LOG_TAIL_LINES`] lines, for a failing test to show. The child (`what`, for the error)
/// is killed when the guard drops.
pub fn spawn_watching_stdout<T: Send + 'static>(
    command: &mut Command,
    what: &str,
    mut watch: impl FnMut(&str, &mpsc::Sender<T>) + Send + 'static,
) -> Result<(ChildGuard, mpsc::Receiver<T>, LogTail)> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {what}"))?;
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            watch(&line, &tx);
        }
    });
    let log = LogTail::default();
    let stderr = child.stderr.take().expect("piped");
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            kept.push(line);
        }
    });
    Ok((ChildGuard(child), rx, log))
}

/// Lines of a child's stderr kept for a failing test to show.
pub const LOG_TAIL_LINES: usize = 200;

/// The last [`LOG_TAIL_LINES`] lines a child wrote to its stderr.
#[derive(Clone, Default)]
pub struct LogTail(Arc<Mutex<std::collections::VecDeque<String>>>);

impl LogTail {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == LOG_TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The last `n` lines, one a line (empty when the child wrote none).
    pub fn last(&self, n: usize) -> String {
        let lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let skip = lines.len().saturating_sub(n);
        lines
            .iter()
            .skip(skip)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A loopback port free at the time of asking.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A running `silt up`; killed (SIGKILL) when dropped.
pub struct SiltProcess {
    pub child: ChildGuard,
    /// The hot tier's Fluss address: its own hot store's, or under `--bootstrap` the cluster's.
    pub bootstrap: String,
    /// The REST API's `http://host:port`.
    pub rest: String,
    /// The Arrow Flight SQL endpoint's `grpc://host:port`, when it is on.
    pub flight: Option<String>,
    /// Its log (stderr, warnings and errors by default), for a failing test to show.
    pub log: LogTail,
    /// What it printed on stdout: the addresses, then the status lines.
    pub stdout: LogTail,
}

impl SiltProcess {
    /// Starts `silt up` (the binary at `silt`) over `data_dir` on ephemeral ports and waits
    /// until both listen lines came.
    pub fn start(silt: &str, data_dir: &Path) -> Result<SiltProcess> {
        SiltProcess::start_with(silt, data_dir, &[], &[])
    }

    /// The Arrow Flight SQL endpoint (`grpc://host:port`); an error when `silt up` printed none.
    pub fn flight_endpoint(&self) -> Result<&str> {
        self.flight
            .as_deref()
            .context("silt up printed no flight line")
    }

    /// As [`SiltProcess::start`], with `rest.token` set to `token`.
    pub fn start_with_token(silt: &str, data_dir: &Path, token: &str) -> Result<SiltProcess> {
        SiltProcess::start_with(silt, data_dir, &[], &[("SILT_REST__TOKEN", token)])
    }

    /// As [`SiltProcess::start`], with extra `up` arguments and extra environment variables.
    pub fn start_with(
        silt: &str,
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<SiltProcess> {
        let up = ["--log", "warn", "up", "--status-every-s", "3600"];
        SiltProcess::spawn(silt, data_dir, &up, extra, env)
    }

    /// `silt up` as a user starts it, with its shipped log settings (no `--log`, none of
    /// `SILT_LOG` and `SILT_LOG_STDERR` from the test's environment) and its status every
    /// `--status-every-s` unless `extra` says otherwise; only its ports are ephemeral.
    pub fn start_as_shipped(silt: &str, data_dir: &Path, extra: &[&str]) -> Result<SiltProcess> {
        SiltProcess::spawn(silt, data_dir, &["up"], extra, &[])
    }

    /// Runs `silt --data-dir <data_dir> <up...> <extra...>` on ephemeral ports and waits until
    /// it printed its addresses.
    fn spawn(
        silt: &str,
        data_dir: &Path,
        up: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<SiltProcess> {
        let mut command = Command::new(silt);
        command
            .args(["--data-dir", &data_dir.to_string_lossy()])
            .args(up)
            .args(extra)
            .env_remove("SILT_LOG")
            .env_remove("SILT_LOG_STDERR")
            .env("SILT_HOTSTORE__LISTEN", "127.0.0.1:0")
            .env("SILT_REST__LISTEN", "127.0.0.1:0")
            .env("SILT_QUERY__FLIGHT_LISTEN", "127.0.0.1:0")
            .envs(env.iter().copied());
        // `silt up` prints the Flight line before the REST line, so it is set when `rx` answers.
        let flight = Arc::new(Mutex::new(None));
        let flight_seen = flight.clone();
        let stdout = LogTail::default();
        let kept = stdout.clone();
        let (mut bootstrap, mut rest) = (None, None);
        let (child, rx, log) = spawn_watching_stdout(&mut command, "silt up", move |line, tx| {
            kept.push(line.to_string());
            // Its own hot store's address, or (`--bootstrap`) the Fluss cluster's.
            let hot_tier = line
                .strip_prefix("hotstore: Fluss wire protocol on ")
                .or_else(|| line.strip_prefix("hot tier: the Fluss cluster at "));
            if let Some(tail) = hot_tier {
                bootstrap = tail.split_whitespace().next().map(str::to_string);
            }
            if let Some(tail) = line.strip_prefix("flight: Arrow Flight SQL on ") {
                *flight_seen.lock().unwrap() = Some(tail.trim().to_string());
            }
            if let Some(tail) = line.strip_prefix("rest: REST API on ") {
                rest = Some(tail.trim().to_string());
            }
            if let (Some(b), Some(r)) = (&bootstrap, &rest) {
                let _ = tx.send((b.clone(), r.clone()));
                bootstrap = None;
            }
        })?;
        // On an error `child` is dropped, which kills it rather than leave it running.
        let (bootstrap, rest) = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| {
            anyhow!(
                "silt up did not report its addresses within 30 s (or exited); its stderr:\n{}",
                log.last(30)
            )
        })?;
        let flight = flight.lock().unwrap().clone();
        Ok(SiltProcess {
            child,
            bootstrap,
            rest,
            flight,
            log,
            stdout,
        })
    }

    /// Ctrl-C (SIGINT), as a person stops it, then waits up to `timeout` for it to exit.
    pub fn interrupt(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-INT", &pid]).status()?;
        ensure!(status.success(), "kill -INT {pid} failed: {status}");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(exit) = self.child.try_wait()? {
                return Ok(exit);
            }
            ensure!(
                Instant::now() < deadline,
                "silt up did not exit within {timeout:?} of Ctrl-C"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Rows of `table` (`db.name`) in the lake, as the REST API's `GET /v1/tables` reports
    /// them: the sum of its buckets' lake offsets, 0 if it is not listed.
    pub fn lake_rows(&self, table: &str) -> Result<i64> {
        let (status, body) = http::get(&self.rest, "/v1/tables", None)?;
        ensure!(status == 200, "GET /v1/tables: {status} {body}");
        let tables: serde_json::Value = serde_json::from_str(&body)?;
        Ok(tables
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["table"] == table)
            .flat_map(|t| t["buckets"].as_array().cloned().unwrap_or_default())
            .map(|b| b["lake_offset"].as_i64().unwrap_or(0))
            .sum())
    }

    /// Waits until [`SiltProcess::lake_rows`] of `table` is `rows`; fails after `timeout`
    /// naming how many it last saw.
    pub async fn wait_lake_rows(&self, table: &str, rows: i64, timeout: Duration) -> Result<()> {
        let what = format!("the lake of {table} holding {rows} rows");
        wait::until(&what, timeout, Duration::from_millis(250), || async {
            let tiered = self.lake_rows(table)?;
            Ok(if tiered == rows {
                Look::Done(())
            } else {
                Look::NotYet(format!("{tiered} rows"))
            })
        })
        .await
    }

    /// SIGKILL: no shutdown hook runs.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exit code of the harness scripts (`run.sh`, `build.sh`, `start.sh`) for "skipped: java,
/// javac, mvn or the jars are missing".
pub const SCRIPT_EXIT_SKIP: i32 = 77;

/// A harness script that exited, not with [`SCRIPT_EXIT_SKIP`].
pub(crate) struct ScriptExit {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
}

/// How a harness script's run ended.
pub(crate) enum ScriptRun {
    Exited(ScriptExit),
    /// It exited with [`SCRIPT_EXIT_SKIP`]; why, from its last `SKIPPED: ` line (all of its
    /// stderr when it printed none).
    Skipped(String),
}

/// Runs `script` (a harness's `run.sh`, its arguments and environment set) with no stdin and
/// its output read to the end. Past `deadline` its process group is killed and the run is an
/// error naming `what`, with its stdout and the last `stderr_lines_max` lines of its stderr.
pub(crate) fn run_script(
    mut script: Command,
    what: &str,
    deadline: Duration,
    stderr_lines_max: usize,
) -> Result<ScriptRun> {
    let started = Instant::now();
    let mut child = script
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a run past its deadline is killed with Maven or the JVM.
        .process_group(0)
        .spawn()
        .with_context(|| format!("run {what}"))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_until(&mut child, started + deadline)?;
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    let Some(status) = status else {
        bail!(
            "{what} did not finish within {deadline:?}; killed it\nstdout:\n{stdout}\nstderr:\n{}",
            tail(&stderr, stderr_lines_max)
        );
    };
    if status.code() == Some(SCRIPT_EXIT_SKIP) {
        let reason = stderr
            .lines()
            .rfind(|line| line.starts_with("SKIPPED: "))
            .map(|line| line.trim_start_matches("SKIPPED: ").to_string())
            .unwrap_or_else(|| format!("{what} exited {SCRIPT_EXIT_SKIP}:\n{stderr}"));
        return Ok(ScriptRun::Skipped(reason));
    }
    Ok(ScriptRun::Exited(ScriptExit {
        status,
        stdout,
        stderr,
        duration: started.elapsed(),
    }))
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Reads a child's pipe to its end on a thread of its own (so a full pipe never blocks the
/// child); the text, lossily decoded.
pub(crate) fn drain(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

/// The child's exit status, or None once `deadline` passed (the child's group is then killed).
pub(crate) fn wait_until(child: &mut Child, deadline: Instant) -> Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() > deadline {
            // The group of the child this function started, and only it.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child's stderr is kept, its last lines only, while its stdout is watched.
    #[test]
    fn a_childs_stderr_tail_is_kept_and_bounded() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "for i in $(seq 1 300); do echo line$i >&2; done; echo done",
        ]);
        let (_child, rx, log) = spawn_watching_stdout(&mut command, "sh", |line, tx| {
            if line == "done" {
                let _ = tx.send(());
            }
        })
        .unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // stdout's last line can come before stderr's reader has taken stderr's.
        let deadline = Instant::now() + Duration::from_secs(10);
        while log.last(1) != "line300" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(log.last(2), "line299\nline300");
        assert_eq!(log.last(1000).lines().count(), LOG_TAIL_LINES);
    }
}
