//! Flink SQL as a test client: runs SQL scripts through the harness of
//! `integration-tests/flink-sql/` (Flink 1.20.3 in one JVM, a local mini cluster per job, with
//! the official Apache Fluss connector `fluss-flink-1.20` 0.9.1-incubating) against a Fluss
//! endpoint, and parses what each statement answered. The harness's jars and classes are
//! cached in `flink-sql/.cache` across runs (its `build.sh`), so only the first run fetches.
//!
//! A script is plain Flink SQL where `${bootstrap}` stands for the endpoint; comment lines
//! `-- @name NAME` label the next statement's output and `-- @rows N` bounds a streaming read
//! (stop after N rows and a settle time that shows any row past N). The harness stops a script
//! at its first error and goes on with the next script, so checks that fail today can sit in
//! scripts of their own beside the ones that must pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use anyhow::{Context, Result, bail};

pub use crate::process::tail;
use crate::process::{SCRIPT_EXIT_SKIP, ScriptRun, run_script};
use serde_json::Value;

/// run.sh's (build.sh's) exit code for "skipped: java, javac, mvn or the jars are missing".
pub const EXIT_SKIP: i32 = SCRIPT_EXIT_SKIP;

/// build.sh's bound on Maven's fetch, unless FLINK_SQL_FETCH_TIMEOUT_S says.
const FETCH_TIMEOUT_DEFAULT: Duration = Duration::from_secs(300);

/// The harness's bound on one statement (FLINK_SQL_STATEMENT_TIMEOUT_S's default): past it, a
/// job is cancelled and the statement fails. A run is killed only past every statement's bound
/// plus [`RUN_SLACK`], so only a JVM that cannot even do that is killed.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);

/// JVM start-up, compiling the harness and the mini cluster's shutdown, on a loaded machine.
const RUN_SLACK: Duration = Duration::from_secs(90);

pub enum Ran {
    Finished(Run),
    /// Why the harness could not run here (the caller prints it as SKIPPED).
    Skipped(String),
}

/// One run of the harness over some scripts.
pub struct Run {
    pub status: ExitStatus,
    /// Every statement that printed a line, in the order they ran.
    pub statements: Vec<Statement>,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
}

pub struct Statement {
    /// The script's name (without `.sql`).
    pub script: String,
    /// `@name`, or the statement's number in its script (from 1).
    pub name: String,
    /// The script line it starts on.
    pub line: i64,
    pub sql: String,
    pub outcome: Outcome,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok {
        ms: u64,
        mode: String,
    },
    /// The error Flink raised, with its causes (one per line).
    Failed(String),
    /// It printed rows but no end line: the JVM died or was killed while it ran.
    Unfinished,
}

/// One result row: its Flink row kind (`+I`, `-U`, `+U`, `-D`) and its fields as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub kind: String,
    pub values: Vec<Value>,
}

impl Row {
    /// The fields as `a|b|c`, as [`crate::lake::rows_of`] renders lake rows: strings bare,
    /// numbers in decimal, null as `NULL`.
    pub fn text(&self) -> String {
        let cells: Vec<String> = self
            .values
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                Value::Null => "NULL".to_string(),
                other => other.to_string(),
            })
            .collect();
        cells.join("|")
    }
}

impl Run {
    /// The statement `name` of `script`; fails naming the statements that ran.
    pub fn statement(&self, script: &str, name: &str) -> Result<&Statement> {
        self.statements
            .iter()
            .find(|s| s.script == script && s.name == name)
            .with_context(|| {
                let ran: Vec<String> = self
                    .statements
                    .iter()
                    .filter(|s| s.script == script)
                    .map(|s| s.name.clone())
                    .collect();
                format!(
                    "{script}: statement {name} did not run (it ran: {}); a statement before it failed?\n{}",
                    ran.join(", "),
                    self.failures().join("\n")
                )
            })
    }

    /// The sorted `a|b|c` rows of an insert-only result (a batch read, a streaming read of a
    /// log table). Fails with the statement's error if it failed, or if it retracted a row.
    pub fn rows(&self, script: &str, name: &str) -> Result<Vec<String>> {
        let statement = self.ok_statement(script, name)?;
        if let Some(row) = statement.rows.iter().find(|r| r.kind != "+I") {
            bail!(
                "{script}/{name}: expected inserts only, got {} {}",
                row.kind,
                row.text()
            );
        }
        let mut rows: Vec<String> = statement.rows.iter().map(Row::text).collect();
        rows.sort();
        Ok(rows)
    }

    /// The sorted rows a changelog result leaves (`+I`/`+U` add a row, `-U`/`-D` take one
    /// away), as a streaming read of a primary-key table shows its current image. Fails if the
    /// statement failed or a retraction removes a row that was not there.
    pub fn changelog_image(&self, script: &str, name: &str) -> Result<Vec<String>> {
        let statement = self.ok_statement(script, name)?;
        let mut image: BTreeMap<String, usize> = BTreeMap::new();
        for row in &statement.rows {
            let text = row.text();
            match row.kind.as_str() {
                "+I" | "+U" => *image.entry(text).or_default() += 1,
                "-U" | "-D" => match image.get_mut(&text) {
                    Some(n) if *n > 1 => *n -= 1,
                    Some(_) => {
                        image.remove(&text);
                    }
                    None => bail!(
                        "{script}/{name}: {} {text} retracts a row never added",
                        row.kind
                    ),
                },
                other => bail!("{script}/{name}: unknown row kind {other}"),
            }
        }
        Ok(image
            .into_iter()
            .flat_map(|(row, n)| std::iter::repeat_n(row, n))
            .collect())
    }

    fn ok_statement(&self, script: &str, name: &str) -> Result<&Statement> {
        let statement = self.statement(script, name)?;
        match &statement.outcome {
            Outcome::Ok { .. } => Ok(statement),
            Outcome::Failed(error) => bail!("{script}/{name} failed: {}\n{error}", statement.sql),
            Outcome::Unfinished => bail!("{script}/{name} never finished: {}", statement.sql),
        }
    }

    /// Whether `script` ran and every statement of it that ran succeeded.
    pub fn script_ok(&self, script: &str) -> bool {
        let mut ran = self
            .statements
            .iter()
            .filter(|s| s.script == script)
            .peekable();
        ran.peek().is_some() && ran.all(|s| matches!(s.outcome, Outcome::Ok { .. }))
    }

    /// One line per failed statement: its script, name, line, SQL and error.
    pub fn failures(&self) -> Vec<String> {
        self.statements
            .iter()
            .filter_map(|s| {
                let error = match &s.outcome {
                    Outcome::Ok { .. } => return None,
                    Outcome::Failed(error) => error.clone(),
                    Outcome::Unfinished => "never finished (the JVM died or was killed)".into(),
                };
                Some(format!(
                    "{}.sql line {} ({}): {}\n  error: {}",
                    s.script,
                    s.line,
                    s.name,
                    s.sql,
                    error.replace('\n', "\n  ")
                ))
            })
            .collect()
    }

    /// Each statement's outcome and time on one line, for the test's log.
    pub fn summary(&self) -> String {
        let mut text = String::new();
        for s in &self.statements {
            let outcome = match &s.outcome {
                Outcome::Ok { ms, mode } => format!("ok {ms} ms {mode}, {} rows", s.rows.len()),
                Outcome::Failed(error) => {
                    format!("FAILED: {}", error.lines().last().unwrap_or_default())
                }
                Outcome::Unfinished => "UNFINISHED".to_string(),
            };
            text.push_str(&format!("  {}/{}: {outcome}\n", s.script, s.name));
        }
        text
    }
}

/// `integration-tests/flink-sql/`: the harness, and its cache under `.cache/`.
pub fn harness_dir() -> PathBuf {
    crate::repo_dir().join("integration-tests/flink-sql")
}

fn env_secs(name: &str, fallback: Duration) -> Duration {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(fallback)
}

/// Runs `scripts` (name, SQL) in one JVM against `bootstrap`, writing them as `<name>.sql`
/// under `dir` (blocking; call it from `spawn_blocking` in async tests). Kills the run's
/// process group past its deadline.
pub fn run(bootstrap: &str, dir: &Path, scripts: &[(&str, String)]) -> Result<Ran> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut paths = Vec::new();
    let mut statement_count: u32 = 0;
    for (name, sql) in scripts {
        let path = dir.join(format!("{name}.sql"));
        std::fs::write(&path, sql).with_context(|| format!("write {}", path.display()))?;
        paths.push(path);
        statement_count += u32::try_from(sql.matches(';').count()).context("statements")? + 1;
    }
    let deadline = env_secs("FLINK_SQL_FETCH_TIMEOUT_S", FETCH_TIMEOUT_DEFAULT)
        + env_secs("FLINK_SQL_STATEMENT_TIMEOUT_S", STATEMENT_TIMEOUT) * statement_count
        + RUN_SLACK;
    let mut script = Command::new("bash");
    script
        .arg(harness_dir().join("run.sh"))
        .arg(bootstrap)
        .args(&paths);
    let exit = match run_script(script, "flink-sql/run.sh", deadline, 80)? {
        ScriptRun::Skipped(reason) => return Ok(Ran::Skipped(reason)),
        ScriptRun::Exited(exit) => exit,
    };
    let statements = parse(&exit.stdout).with_context(|| {
        format!(
            "parse the harness's output\nstderr:\n{}",
            tail(&exit.stderr, 80)
        )
    })?;
    Ok(Ran::Finished(Run {
        status: exit.status,
        statements,
        stdout: exit.stdout,
        stderr: exit.stderr,
        duration: exit.duration,
    }))
}

/// The harness's stdout (one JSON object per line) as statements with their rows.
fn parse(stdout: &str) -> Result<Vec<Statement>> {
    let mut statements: Vec<Statement> = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        let value: Value = serde_json::from_str(line).with_context(|| line.to_string())?;
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        let script = text("script")
            .unwrap_or_default()
            .trim_end_matches(".sql")
            .to_string();
        let Some(name) = text("statement") else {
            // The script itself could not be read or parsed.
            statements.push(Statement {
                script,
                name: "(script)".into(),
                line: 0,
                sql: String::new(),
                outcome: Outcome::Failed(text("error").unwrap_or_default()),
                rows: Vec::new(),
            });
            continue;
        };
        let position = statements
            .iter()
            .position(|s| s.script == script && s.name == name && s.outcome == Outcome::Unfinished);
        let index = position.unwrap_or_else(|| {
            statements.push(Statement {
                script: script.clone(),
                name: name.clone(),
                line: value.get("line").and_then(Value::as_i64).unwrap_or(0),
                sql: String::new(),
                outcome: Outcome::Unfinished,
                rows: Vec::new(),
            });
            statements.len() - 1
        });
        let statement = &mut statements[index];
        if let Some(row) = value.get("row") {
            statement.rows.push(Row {
                kind: text("kind").context("a row line without a kind")?,
                values: row
                    .as_array()
                    .context("a row that is not an array")?
                    .clone(),
            });
            continue;
        }
        statement.sql = text("sql").unwrap_or_default();
        statement.outcome = match text("status").as_deref() {
            Some("ok") => Outcome::Ok {
                ms: value.get("ms").and_then(Value::as_u64).unwrap_or(0),
                mode: text("mode").unwrap_or_default(),
            },
            Some("error") => Outcome::Failed(text("error").unwrap_or_default()),
            other => bail!("a statement line with status {other:?}: {line}"),
        };
    }
    Ok(statements)
}
