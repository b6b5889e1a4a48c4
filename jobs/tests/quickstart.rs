//! The README's quickstart, run as a user types it: `silt up --demo` as a child process (ports
//! on 127.0.0.1:0, data in a scratch directory), then every command of the quickstart's code
//! block, read from README.md itself so that this test fails when the README drifts. Each runs
//! through `sh -c` from the repository's root with `silt` on the `PATH` and the child's
//! addresses in the `SILT_*` environment, the README's text as written. A line that sets a
//! shell variable (`id=$(silt job submit ...)`) sets it for the lines after it, as one shell
//! session would. Each must exit 0, print what it promises, and print neither log lines among
//! its results nor colour codes into the redirected output.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use silt_testkit::process::SiltProcess;
use silt_testkit::terminal::{escape_codes, log_lines};
use silt_testkit::wait::{self, Look};
use silt_testkit::{http, repo_dir, silt_bin};

const SECTION: &str = "## Quickstart: the three front doors";
const WAIT: Duration = Duration::from_secs(40);
const EVERY: Duration = Duration::from_millis(250);

/// The commands of the first `sh` block in the quickstart section: its lines that are neither
/// blank nor comments, trailing comments kept (the shell drops them).
fn quickstart_commands(readme: &str) -> Vec<String> {
    let start = readme
        .find(SECTION)
        .expect("README.md has the quickstart section");
    let section = &readme[start + SECTION.len()..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(block, _)| block)
        .expect("the quickstart section has a ```sh block");
    block
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// Checks what one command printed against what the README promises of it.
fn check(command: &str, stdout: &str, stderr: &str) -> Result<()> {
    let words: Vec<&str> = command.split_whitespace().collect();
    match words[1..] {
        ["sql", ..] => {
            // `silt sql` prints the rows on stdout and their count on stderr.
            let rows = stderr
                .lines()
                .find_map(|l| l.strip_suffix(" rows").or(l.strip_suffix(" row")))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .context("no row count on stderr")?;
            ensure!(rows > 0 && !stdout.trim().is_empty(), "no rows");
        }
        ["job", "validate", ..] => ensure!(
            stdout.contains("fluss-source demo.orders") && stdout.trim_end().ends_with("valid"),
            "no compiled graph"
        ),
        ["job", "list", ..] => ensure!(stdout.contains("running"), "no running job"),
        ["job", "status", ..] => ensure!(
            stdout.contains("state running") && stdout.contains("sink-writer"),
            "not running, or no operators"
        ),
        ["job", "stop", ..] => ensure!(
            stderr.contains("(finished) with final checkpoint") && !stderr.contains("checkpoint -"),
            "not stopped with a final checkpoint"
        ),
        ["verify", "--all", ..] => ensure!(
            stdout.lines().count() >= 2
                && stdout.lines().all(|l| l.ends_with(": MATCH"))
                && stderr.contains(" match, 0 do not")
                && stderr.contains("done in"),
            "not one MATCH per table on stdout, or no summary on stderr"
        ),
        ["verify", table, ..] => ensure!(
            stdout.contains(&format!("verify {table}: MATCH")),
            "no match"
        ),
        _ => bail!("a command this test does not know; say here what it must print"),
    }
    Ok(())
}

/// `name=$(command)`: the variable a quickstart line sets, and the command.
fn assignment(line: &str) -> Option<(&str, &str)> {
    let (name, rest) = line.split_once("=$(")?;
    let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let command = rest.split_once(')')?.0;
    name_ok.then_some((name, command))
}

/// Runs `command` as a shell would, with `silt` from `bin_dir`, `silt up`'s addresses and
/// data directory and the shell variables set so far (`vars`) in the environment.
fn run(
    command: &str,
    bin_dir: &Path,
    silt: &SiltProcess,
    data_dir: &Path,
    vars: &[(String, String)],
) -> Result<Output> {
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))?;
    Command::new("sh")
        .args(["-c", command])
        .current_dir(repo_dir())
        .env("PATH", path)
        .env("SILT_HOTSTORE__LISTEN", &silt.bootstrap)
        .env("SILT_REST__LISTEN", silt.rest.trim_start_matches("http://"))
        .env("SILT_DATA_DIR", data_dir)
        .envs(vars.iter().map(|(k, v)| (k, v)))
        // As a user's shell has it: the commands' own log defaults.
        .env_remove("SILT_LOG")
        .env_remove("SILT_CONFIG")
        .output()
        .with_context(|| format!("running {command}"))
}

/// Waits until `id` runs and completed a checkpoint, as it has by the time a user asks.
async fn wait_running(silt: &SiltProcess, id: &str) -> Result<()> {
    wait::until(&format!("job {id} running"), WAIT, EVERY, || async {
        let (_, body) = http::get(&silt.rest, &format!("/v1/jobs/{id}"), None)?;
        let status: Value = serde_json::from_str(&body).unwrap_or_default();
        Ok(
            if status["state"] == "running" && status["checkpoints_completed"].as_u64() >= Some(1) {
                Look::Done(())
            } else {
                Look::NotYet(body)
            },
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_quickstart_command_works_as_written_against_the_demo() -> Result<()> {
    let commands = quickstart_commands(&std::fs::read_to_string(repo_dir().join("README.md"))?);
    assert!(commands.len() >= 5, "too few commands: {commands:?}");
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("data");
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir)?;
    std::os::unix::fs::symlink(silt_bin!(), bin_dir.join("silt"))?;
    let silt = SiltProcess::start_with(silt_bin!(), &data_dir, &["--demo"], &[])?;
    // A user types the first query seconds after `silt up --demo`: the lake has a version.
    for table in ["demo.orders", "demo.customers"] {
        wait::until(&format!("the lake of {table}"), WAIT, EVERY, || async {
            let rows = silt.lake_rows(table)?;
            Ok(if rows > 0 {
                Look::Done(())
            } else {
                Look::NotYet(format!("{rows} rows"))
            })
        })
        .await?;
    }

    let mut vars: Vec<(String, String)> = Vec::new();
    for command in &commands {
        if let Some((name, inner)) = assignment(command) {
            // As the shell sets it: the command's stdout, less its trailing newlines.
            let output = run(inner, &bin_dir, &silt, &data_dir, &vars)?;
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            let shown = format!("{command}\n--- stdout\n{stdout}--- stderr\n{stderr}");
            assert_eq!(output.status.code(), Some(0), "{shown}");
            let value = stdout.trim_end_matches('\n').to_string();
            ensure!(
                !value.is_empty() && !value.contains(char::is_whitespace),
                "{name} is not one word: {shown}"
            );
            if inner.starts_with("silt job submit") {
                wait_running(&silt, &value).await.context(shown)?;
            }
            vars.push((name.to_string(), value));
            continue;
        }
        ensure!(
            command.starts_with("silt "),
            "not a silt command: {command}"
        );
        let output = run(command, &bin_dir, &silt, &data_dir, &vars)?;
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        let shown = format!("{command}\n--- stdout\n{stdout}--- stderr\n{stderr}");
        assert_eq!(output.status.code(), Some(0), "{shown}");
        let logged = [log_lines(&stdout), log_lines(&stderr)].concat();
        assert!(logged.is_empty(), "log lines {logged:?} in {shown}");
        assert!(
            escape_codes(&stdout) + escape_codes(&stderr) == 0,
            "colour codes in redirected output: {shown}"
        );
        check(command, &stdout, &stderr).with_context(|| shown.clone())?;
    }
    assert!(
        vars.iter().any(|(name, _)| name == "id"),
        "the quickstart submits no job into $id"
    );
    Ok(())
}

/// Regression (issue 14): `silt verify --all` wrote the Fluss source's info line into its
/// progress line; this is the line it wrote, and what must not be taken for a log line.
#[test]
fn log_lines_are_recognised_inside_progress_lines() {
    let progress = "\r[1/2] verifying demo.customers ...                    \u{1b}[2m2026-12-02T07:57:20.583933Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2msilt_connectors::fluss::source\u{1b}[0m\u{1b}[2m:\u{1b}[0m fluss source opened\n\r[2/2] done in 10.1 s\n";
    assert_eq!(log_lines(progress).len(), 1, "{progress:?}");
    let plain = "2026-12-02T07:57:20Z WARN x: y\n";
    assert_eq!(log_lines(plain).len(), 1);
    let results =
        "| 2 | 2026-12-02T07:57:10.393Z | {\"0\":700} |\n3 rows\nverify demo.orders: MATCH\n";
    assert_eq!(log_lines(results), Vec::<String>::new());
}
