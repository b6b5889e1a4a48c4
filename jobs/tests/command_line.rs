//! The command line as people and scripts use it (issue 37): the built `silt` with its shipped
//! log settings, its stdout and stderr read apart. A script gets the result alone on stdout (a
//! submit's job id, a verdict; `--format json` documents holding the fields the README lists);
//! redirected output holds neither colour codes nor log lines, and `silt up` keeps its log in
//! its data directory; `silt up --demo` in a real terminal shows its status lines with nothing
//! between them for 30 s; completions, the man page and the version come from the one
//! definition of the flags.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use silt_testkit::process::SiltProcess;
use silt_testkit::terminal::{Tmux, escape_codes, log_lines};
use silt_testkit::wait::{self, Look};
use silt_testkit::{repo_dir, silt_bin, skip};

const WAIT: Duration = Duration::from_secs(60);
const EVERY: Duration = Duration::from_millis(250);
const PIPELINE: &str = "conf/pipelines/big-orders-to-delta.yaml";

/// What one run of `silt` printed.
struct Printed {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Printed {
    /// The run, for a failing assertion.
    fn shown(&self) -> String {
        let (code, stdout, stderr) = (self.code, &self.stdout, &self.stderr);
        format!("exit {code}\n--- stdout\n{stdout}--- stderr\n{stderr}")
    }

    /// Exit `code`, and nothing a person's terminal would add: no colour codes, no log lines.
    fn expect(&self, code: i32) -> &Printed {
        assert_eq!(self.code, code, "{}", self.shown());
        let colour = escape_codes(&self.stdout) + escape_codes(&self.stderr);
        assert_eq!(
            colour,
            0,
            "colour codes in redirected output: {}",
            self.shown()
        );
        let logged = [log_lines(&self.stdout), log_lines(&self.stderr)].concat();
        assert!(logged.is_empty(), "log lines {logged:?}: {}", self.shown());
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", self.shown()))
    }
}

/// A running `silt up` and its data directory.
struct Up {
    process: SiltProcess,
    data: PathBuf,
}

/// Runs `silt args` from the repository's root as a user's shell would (their log settings
/// unset, colour allowed), stdout and stderr redirected, against `up` when given.
fn silt(args: &[&str], up: Option<&Up>) -> Printed {
    let mut command = Command::new(silt_bin!());
    command
        .args(args)
        .current_dir(repo_dir())
        .env_remove("SILT_LOG")
        .env_remove("SILT_LOG_STDERR")
        .env_remove("NO_COLOR");
    if let Some(Up { process, data }) = up {
        command
            .env("SILT_HOTSTORE__LISTEN", &process.bootstrap)
            .env(
                "SILT_REST__LISTEN",
                process.rest.trim_start_matches("http://"),
            )
            .env("SILT_DATA_DIR", data);
    }
    let out = command.output().expect("silt runs");
    Printed {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The field names of the README's bullet on `command`: its backquoted snake_case words.
fn readme_fields(command: &str) -> BTreeSet<String> {
    let readme = std::fs::read_to_string(repo_dir().join("README.md")).expect("README.md");
    let start = readme
        .find(&format!("- `{command}`"))
        .unwrap_or_else(|| panic!("README.md has no bullet on `{command}`"));
    let bullet = &readme[start + 2..];
    let end = [bullet.find("\n- "), bullet.find("\n\n")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(bullet.len());
    let fields: BTreeSet<String> = bullet[..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect();
    assert!(
        fields.len() >= 5,
        "too few fields in the README's `{command}`: {fields:?}"
    );
    fields
}

/// Every key and string value in `value`, at any depth.
fn words(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                out.insert(key.clone());
                words(value, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| words(v, out)),
        Value::String(s) => {
            out.insert(s.clone());
        }
        _ => {}
    }
}

/// Asserts that `documents` hold every field the README lists for `command`, less `optional`
/// (fields only some answers carry).
fn assert_readme_fields(command: &str, documents: &[Value], optional: &[&str]) {
    let mut found = BTreeSet::new();
    documents.iter().for_each(|d| words(d, &mut found));
    let missing: Vec<String> = readme_fields(command)
        .into_iter()
        .filter(|f| !found.contains(f) && !optional.contains(&f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "`{command}` lacks {missing:?}: {documents:?}"
    );
}

/// Waits until the lake of `table` holds rows, as it does by the time a user asks.
async fn wait_lake(up: &Up, table: &str) -> Result<()> {
    wait::until(&format!("the lake of {table}"), WAIT, EVERY, || async {
        let rows = up.process.lake_rows(table)?;
        Ok(if rows > 0 {
            Look::Done(())
        } else {
            Look::NotYet(format!("{rows} rows"))
        })
    })
    .await
}

/// Waits until job `id` runs and completed a checkpoint.
async fn wait_running(up: &Up, id: &str) -> Result<()> {
    wait::until(&format!("job {id} running"), WAIT, EVERY, || async {
        let job = silt(&["job", "status", id, "--format", "json"], Some(up)).json();
        let running = job["state"] == "running" && job["checkpoints_completed"].as_u64() >= Some(1);
        Ok(if running {
            Look::Done(())
        } else {
            Look::NotYet(job.to_string())
        })
    })
    .await
}

/// The job commands: a submit prints the id alone; `--format json` answers the README's fields.
async fn job_commands(up: &Up) -> Result<()> {
    let valid = silt(&["job", "validate", PIPELINE, "--format", "json"], Some(up));
    let doc = valid.expect(0).json();
    assert!(
        doc["valid"] == true && doc["graph"].as_array().is_some_and(|g| !g.is_empty()),
        "{doc}"
    );
    let bad = std::env::temp_dir().join(format!("silt-bad-{}.yaml", std::process::id()));
    let pipeline = std::fs::read_to_string(repo_dir().join(PIPELINE))?;
    std::fs::write(&bad, pipeline.replace("demo.orders", "demo.orderz"))?;
    let invalid = silt(
        &[
            "job",
            "--format",
            "json",
            "validate",
            &bad.to_string_lossy(),
        ],
        Some(up),
    );
    std::fs::remove_file(&bad)?;
    let doc = invalid.expect(1).json();
    assert_eq!(
        (&doc["valid"], &doc["errors"][0]["path"]),
        (&Value::from(false), &Value::from("source.table")),
        "{doc}"
    );

    let submit = silt(&["job", "submit", PIPELINE], Some(up));
    submit.expect(0);
    let id = submit.stdout.strip_suffix('\n').unwrap_or_default();
    assert!(
        !id.is_empty() && !id.contains(char::is_whitespace),
        "stdout is not the id alone: {}",
        submit.shown()
    );
    assert!(
        submit.stderr.contains(&format!("submitted job {id} (")),
        "{}",
        submit.shown()
    );
    wait_running(up, id).await?;

    let list = silt(&["job", "list", "--format", "json"], Some(up));
    let jobs = list.expect(0).json();
    assert!(
        jobs.as_array()
            .is_some_and(|j| j.iter().any(|j| j["id"] == id)),
        "{jobs}"
    );
    let status = silt(&["job", "status", id, "--format", "json"], Some(up))
        .expect(0)
        .json();
    let text = silt(&["job", "status", id], Some(up));
    assert!(
        text.expect(0).stdout.contains(&format!("job {id} (")),
        "{}",
        text.shown()
    );
    let stopped = silt(&["job", "--format", "json", "stop", id], Some(up))
        .expect(0)
        .json();
    assert_eq!(stopped["state"], "finished", "{stopped}");
    assert_eq!(
        stopped["checkpoints"]
            .as_array()
            .and_then(|c| c.last())
            .map(|c| &c["is_final"]),
        Some(&Value::from(true)),
        "{stopped}"
    );
    let command = "silt job submit|status|stop|cancel --format json";
    assert_readme_fields(
        command,
        &[status, stopped, jobs],
        // The back-pressure ratio needs two reads of the job a second apart.
        &["failure", "failure_cause", "backpressure_ratio"],
    );
    Ok(())
}

/// `silt verify`: the verdict alone on stdout, the diff on stderr; JSON with the README's fields.
fn verify_commands(up: &Up) {
    let one = silt(&["verify", "demo.orders", "--deadline", "60s"], Some(up));
    assert_eq!(
        one.expect(0).stdout,
        "verify demo.orders: MATCH\n",
        "{}",
        one.shown()
    );
    assert!(
        one.stderr
            .contains("verify demo.orders (log table): lake version"),
        "{}",
        one.shown()
    );
    let all = silt(&["verify", "--all", "--format", "json"], Some(up));
    let doc = all.expect(0).json();
    let tables = doc["tables"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        (&doc["verdict"], tables.len()),
        (&Value::from("match"), 2),
        "{doc}"
    );
    assert_readme_fields("silt verify --format json", &[doc], &["partition_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_read_results_on_stdout_and_the_log_goes_to_a_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let process =
        SiltProcess::start_as_shipped(silt_bin!(), &data, &["--demo", "--status-every-s", "2"])?;
    let mut up = Up {
        process,
        data: data.clone(),
    };
    for table in ["demo.orders", "demo.customers"] {
        wait_lake(&up, table).await?;
    }
    job_commands(&up).await?;
    verify_commands(&up);

    // Ctrl-C; then what `silt up` itself printed, redirected as it was.
    let process = &mut up.process;
    let exit = process.interrupt(Duration::from_secs(120))?;
    assert!(
        exit.success(),
        "silt up exited {exit}: {}",
        process.log.last(50)
    );
    let stopped = |text: &str| text.contains("demo workload wrote");
    wait::until(
        "the last line of silt up",
        Duration::from_secs(5),
        EVERY,
        || async {
            let out = process.stdout.last(1000);
            Ok(if stopped(&out) {
                Look::Done(())
            } else {
                Look::NotYet(out)
            })
        },
    )
    .await?;
    let (stdout, stderr) = (process.stdout.last(1000), process.log.last(1000));
    let shown = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let status_lines = stdout
        .lines()
        .filter(|l| l.starts_with("demo.orders "))
        .count();
    assert!(status_lines >= 3, "{status_lines} status lines: {shown}");
    assert_eq!(escape_codes(&stdout) + escape_codes(&stderr), 0, "{shown}");
    assert_eq!(log_lines(&stdout), Vec::<String>::new(), "{shown}");
    let info: Vec<String> = log_lines(&stderr)
        .into_iter()
        .filter(|l| l.contains(" INFO "))
        .collect();
    assert!(info.is_empty(), "info lines on stderr: {shown}");

    let log =
        std::fs::read_to_string(data.join("log").join("silt.log")).context("silt up's log file")?;
    assert!(
        log.contains("silt up starting") && log_lines(&log).len() >= 5,
        "{log}"
    );
    assert_eq!(escape_codes(&log), 0, "colour codes in the log file");
    assert!(
        stdout.contains(&format!(
            "log: {}",
            data.join("log").join("silt.log").display()
        )),
        "{shown}"
    );
    Ok(())
}

/// `silt up --status-format json`: every line of stdout is one JSON object, started, statuses,
/// stopping and stopped, holding the README's fields.
#[test]
fn silt_up_prints_json_status_lines_for_scripts() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let args = [
        "--demo",
        "--status-format",
        "json",
        "--status-every-s",
        "1",
        "--run-for-s",
        "12",
    ];
    let out = Command::new(silt_bin!())
        .args(["--data-dir", &data.to_string_lossy(), "up"])
        .args(args)
        .env_remove("SILT_LOG")
        .env_remove("SILT_LOG_STDERR")
        .env_remove("NO_COLOR")
        .env("SILT_HOTSTORE__LISTEN", "127.0.0.1:0")
        .env("SILT_REST__LISTEN", "127.0.0.1:0")
        .env("SILT_QUERY__FLIGHT_LISTEN", "127.0.0.1:0")
        .output()?;
    let printed = Printed {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    printed.expect(0);
    let events: Vec<Value> = (printed.stdout.lines())
        .map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}")))
        .collect::<Result<_>>()?;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?"))
        .collect();
    let statuses = kinds.iter().filter(|k| **k == "status").count();
    ensure!(
        kinds.first() == Some(&"started")
            && kinds.ends_with(&["stopping", "stopped"])
            && statuses >= 5,
        "events {kinds:?}: {}",
        printed.shown()
    );
    let rows = events.last().and_then(|e| e["demo_rows_written"].as_u64());
    assert!(rows.is_some_and(|r| r > 0), "{}", printed.shown());
    let tables = events
        .iter()
        .filter_map(|e| e["tables"].as_array())
        .flatten()
        .count();
    assert!(tables > 0, "no status names a table: {}", printed.shown());
    // `external` and `stalled` need a Fluss cluster and a stalled table; `error` an unreadable status.
    assert_readme_fields(
        "silt up --status-format json",
        &events,
        &["error", "external", "stalled"],
    );
    Ok(())
}

/// What the terminal shows of `silt up --demo`: after its addresses, only its status lines
/// (the log goes to its file), with no log line among them for 30 s.
#[test]
fn silt_up_in_a_terminal_shows_status_lines_and_no_log_between_them() -> Result<()> {
    const TEST: &str = "silt_up_in_a_terminal_shows_status_lines_and_no_log_between_them";
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let command = format!(
        "env -u SILT_LOG -u SILT_LOG_STDERR -u NO_COLOR SILT_HOTSTORE__LISTEN=127.0.0.1:0 \
         SILT_REST__LISTEN=127.0.0.1:0 SILT_QUERY__FLIGHT_LISTEN=127.0.0.1:0 \
         '{}' --data-dir '{}' up --demo",
        silt_bin!(),
        data.display()
    );
    let Some(tmux) = Tmux::start(&command, dir.path(), 200, 50)? else {
        return skip(TEST, "no tmux on this machine (apt-get install tmux)");
    };
    let is_status = |l: &&str| l.starts_with("demo.orders ") || l.starts_with("demo.customers ");
    let first_seen = Instant::now() + WAIT;
    while !tmux.capture()?.lines().any(|l| is_status(&l)) {
        ensure!(
            Instant::now() < first_seen,
            "no status line within {WAIT:?}:\n{}",
            tmux.capture()?
        );
        std::thread::sleep(EVERY);
    }
    std::thread::sleep(Duration::from_secs(31));
    let screen = tmux.capture()?;
    tmux.send_keys("C-c")?;
    tmux.wait_exit(Duration::from_secs(120))?;

    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    let first = lines
        .iter()
        .position(|l| is_status(l))
        .context("no status line")?;
    let last = lines
        .iter()
        .rposition(|l| is_status(l))
        .context("no status line")?;
    let between: Vec<&&str> = lines[first..=last]
        .iter()
        .filter(|l| !is_status(l))
        .collect();
    assert!(
        between.is_empty(),
        "lines among the status lines: {between:?}\n{screen}"
    );
    // Two tables, a line each every 5 s, for 30 s.
    assert!(
        last - first + 1 >= 12,
        "too few status lines in 30 s:\n{screen}"
    );
    assert_eq!(log_lines(&screen), Vec::<String>::new(), "{screen}");
    assert!(
        lines[0].starts_with("hotstore: Fluss wire protocol on "),
        "{screen}"
    );
    Ok(())
}

/// `silt --version` names the build; the completions and the man page carry the flags.
#[test]
fn version_completions_and_man_page_come_from_the_flags() -> Result<()> {
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(repo_dir())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("unknown".to_string(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        });
    let version = silt(&["--version"], None);
    let expected = format!("(commit {commit}, debug build, features: fault-injection)");
    assert!(
        version.expect(0).stdout.starts_with("silt 0.") && version.stdout.contains(&expected),
        "{expected}: {}",
        version.shown()
    );

    for (shell, mark) in [
        ("bash", "_silt()"),
        ("zsh", "#compdef silt"),
        ("fish", "complete -c silt"),
    ] {
        let script = silt(&["completions", shell], None);
        let out = &script.expect(0).stdout;
        assert!(
            out.contains(mark) && out.contains("status-format") && out.contains("log-stderr"),
            "{shell}: {}",
            script.shown()
        );
    }
    silt(&["completions", "cmd"], None).expect(2);

    let man = silt(&["man"], None);
    let page = &man.expect(0).stdout;
    assert!(
        page.contains(".TH silt 1") && page.contains("log\\-stderr") && page.contains("Exit codes"),
        "{}",
        man.shown()
    );
    let dir = tempfile::tempdir()?;
    silt(&["man", "--dir", &dir.path().to_string_lossy()], None).expect(0);
    for page in ["silt.1", "silt-up.1", "silt-job-submit.1", "silt-verify.1"] {
        assert!(Path::new(&dir.path().join(page)).is_file(), "no {page}");
    }
    Ok(())
}
