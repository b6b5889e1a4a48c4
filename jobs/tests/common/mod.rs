//! Starting the real `silt` binary for tests: `silt up` on ephemeral ports over a scratch data
//! directory, with its Fluss and REST addresses read from its stdout.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

/// A running `silt up`; killed (SIGKILL) when dropped.
pub struct Silt {
    pub child: Child,
    /// The hotstore's Fluss address.
    pub bootstrap: String,
    /// The REST API's `http://host:port`.
    pub rest: String,
    /// The Arrow Flight SQL endpoint's `grpc://host:port`, when it is on.
    pub flight: Option<String>,
}

/// Starts `silt up` over `data_dir` on ephemeral ports and waits until both listen lines came.
pub fn start_silt(data_dir: &Path) -> Result<Silt> {
    start_silt_with(data_dir, &[], &[])
}

/// As [`start_silt`], with extra `up` arguments and extra environment variables.
pub fn start_silt_with(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Result<Silt> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args([
            "--data-dir",
            &data_dir.to_string_lossy(),
            "--log",
            "warn",
            "up",
            "--status-every-s",
            "3600",
        ])
        .args(extra)
        .env("SILT_HOTSTORE__LISTEN", "127.0.0.1:0")
        .env("SILT_REST__LISTEN", "127.0.0.1:0")
        .env("SILT_QUERY__FLIGHT_LISTEN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting silt up")?;
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    // `silt up` prints the Flight line before the REST line, so it is set when `rx` answers.
    let flight = std::sync::Arc::new(std::sync::Mutex::new(None));
    let flight_seen = flight.clone();
    std::thread::spawn(move || {
        let (mut bootstrap, mut rest) = (None, None);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(tail) = line.strip_prefix("hotstore: Fluss wire protocol on ") {
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
        }
    });
    let (bootstrap, rest) = rx
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| anyhow!("silt up did not report its addresses within 30 s"))?;
    let flight = flight.lock().unwrap().clone();
    Ok(Silt {
        child,
        bootstrap,
        rest,
        flight,
    })
}

impl Silt {
    /// SIGKILL: no shutdown hook runs.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Silt {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
