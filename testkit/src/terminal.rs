//! What a person sees of a command: [`log_lines`] finds the lines `tracing`'s formatter wrote
//! in a command's output, [`escape_codes`] the colour codes a redirected output must not hold,
//! and [`Tmux`] runs a command in a real terminal (a detached tmux session on a private
//! socket) and reads its screen.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

/// The lines of `text` that `tracing`'s formatter wrote: a timestamp word followed by a level,
/// wherever it starts (a log line written after a progress line's `\r` shares its line).
pub fn log_lines(text: &str) -> Vec<String> {
    let plain = strip_ansi(text);
    plain
        .split(['\n', '\r'])
        .filter(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.windows(2).any(|w| {
                let stamp = w[0].as_bytes();
                stamp.len() >= 20
                    && stamp[4] == b'-'
                    && stamp[10] == b'T'
                    && stamp.ends_with(b"Z")
                    && ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&w[1])
            })
        })
        .map(str::to_string)
        .collect()
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// How many ANSI escape sequences (`ESC [`) `text` holds.
pub fn escape_codes(text: &str) -> usize {
    text.matches("\u{1b}[").count()
}

/// A command running in a detached tmux session of its own tmux server (a private socket, so
/// no one else's sessions are touched); the server is killed when this drops.
pub struct Tmux {
    socket: String,
}

/// The tmux binary the tests use.
const TMUX: &str = "tmux";

impl Tmux {
    /// Starts `command` (run by the shell, in `dir`) in a `width` x `height` terminal. `None`
    /// when there is no tmux on this machine (the caller skips, saying so).
    pub fn start(command: &str, dir: &Path, width: u16, height: u16) -> Result<Option<Tmux>> {
        if Command::new(TMUX).arg("-V").output().is_err() {
            return Ok(None);
        }
        let socket = format!("silt-test-{}-{}", std::process::id(), nanos());
        let tmux = Tmux { socket };
        let status = tmux
            .command()
            .args(["new-session", "-d", "-s", "silt", "-x", &width.to_string()])
            .args([
                "-y",
                &height.to_string(),
                "-c",
                &dir.to_string_lossy(),
                command,
            ])
            .status()
            .context("starting a tmux session")?;
        ensure!(status.success(), "tmux new-session failed: {status}");
        Ok(Some(tmux))
    }

    fn command(&self) -> Command {
        let mut command = Command::new(TMUX);
        command
            .args(["-L", &self.socket])
            .stdin(Stdio::null())
            .env_remove("TMUX");
        command
    }

    /// The screen and its scrollback, as text (no escape codes: tmux renders them).
    pub fn capture(&self) -> Result<String> {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-J", "-t", "silt", "-S", "-"])
            .output()
            .context("tmux capture-pane")?;
        ensure!(
            out.status.success(),
            "tmux capture-pane: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Types `keys` (tmux's names: `C-c` is Ctrl-C).
    pub fn send_keys(&self, keys: &str) -> Result<()> {
        let status = self
            .command()
            .args(["send-keys", "-t", "silt", keys])
            .status()?;
        ensure!(status.success(), "tmux send-keys {keys}: {status}");
        Ok(())
    }

    /// Waits up to `timeout` for the session's command to exit (the session ends with it).
    pub fn wait_exit(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while self
            .command()
            .args(["has-session", "-t", "silt"])
            .stderr(Stdio::null())
            .status()?
            .success()
        {
            ensure!(
                Instant::now() < deadline,
                "the command in tmux did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command()
            .arg("kill-server")
            .stderr(Stdio::null())
            .status();
    }
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}
