//! The web console (`/ui/`) in a real headless Chromium against the `silt` binary: the overview
//! of `silt up --demo`, a pipeline submitted through the page, a query past its deadline, a bad
//! YAML's error at its line, and the bearer token. Skipped, saying why, without Chromium and its
//! driver.
//!
//! `SILTTEST_CONSOLE_SCREENSHOTS=DIR` keeps the overview's and the job page's screenshots in
//! DIR (how the README's were taken); otherwise they go to the test's scratch directory.

use std::time::Duration;

use anyhow::{Result, ensure};
use serde_json::json;
use silt_testkit::browser::{Browser, Started};
use silt_testkit::process::SiltProcess;
use silt_testkit::{http, silt_bin};

const WAIT: Duration = Duration::from_secs(60);

/// One browser at a time: a session holds about 1 GB over its processes.
static ONE_BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn browser(test: &str) -> Result<Option<Browser>> {
    match Browser::start()? {
        Started::Running(browser) => Ok(Some(browser)),
        Started::Skipped(reason) => {
            eprintln!("SKIPPED: {test}: {reason}");
            Ok(None)
        }
    }
}

fn url(silt: &SiltProcess, fragment: &str) -> String {
    format!(
        "http://{}/ui/{fragment}",
        silt.rest.trim_start_matches("http://")
    )
}

/// Opens the console's page `fragment` and waits until it shows the element `ready`.
fn open(browser: &Browser, silt: &SiltProcess, fragment: &str, ready: &str) -> Result<()> {
    browser.go(&url(silt, fragment))?;
    browser.wait_for(
        &format!("{ready} on the page {fragment}"),
        &format!("return document.querySelector({ready:?}) !== null"),
        WAIT,
    )?;
    Ok(())
}

/// Sets a text field's value as typing would leave it (one `input` event).
fn set_text(browser: &Browser, css: &str, text: &str) -> Result<()> {
    browser.eval(
        "const e = document.querySelector(arguments[0]); e.value = arguments[1]; \
         e.dispatchEvent(new Event('input', {bubbles: true}));",
        json!([css, text]),
    )?;
    Ok(())
}

fn screenshot(browser: &Browser, scratch: &std::path::Path, name: &str) -> Result<()> {
    let dir = std::env::var_os("SILTTEST_CONSOLE_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| scratch.to_path_buf());
    std::fs::create_dir_all(&dir)?;
    browser.screenshot(&dir.join(name))
}

const PIPELINE: &str = "\
source:    { type: fluss, table: demo.orders, start: earliest }
transform:
  - filter: amount > 10 AND status <> 'cancelled'
    projection: order_id, upper(status) AS status
sink:      { type: print }
pipeline:  { name: console-test, parallelism: 1, checkpoint: { interval: 2s } }
";

/// The filter on line 4 is not SQL.
const BAD_PIPELINE: &str = "\
source:    { type: fluss, table: demo.orders, start: earliest }
transform:
  - projection: order_id, status
  - filter: amount >>> 10
sink:      { type: print }
pipeline:  { name: console-bad, parallelism: 1 }
";

#[test]
fn the_console_shows_the_demo_runs_a_pipeline_and_a_query_past_its_deadline() -> Result<()> {
    let _one = ONE_BROWSER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(browser) = browser("the_console_shows_the_demo")? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start_with(silt_bin!(), &dir.path().join("data"), &["--demo"], &[])?;

    // Overview: both demo tables, and a lag that moves.
    browser.go(&url(&silt, "#/"))?;
    browser.wait_for(
        "both demo tables in the overview",
        "const rows = [...document.querySelectorAll('#tables-table tbody tr')] \
             .map(r => r.dataset.table); \
         return rows.includes('demo.orders') && rows.includes('demo.customers');",
        WAIT,
    )?;
    let lag = "const c = document.querySelector( \
                   '#tables-table tr[data-table=\"demo.orders\"] .lag-offsets'); \
               return c ? c.textContent : null;";
    let first = browser.wait_for("the lag of demo.orders", lag, WAIT)?;
    browser.wait_for(
        "the lag of demo.orders to change",
        &format!(
            "const now = (() => {{ {lag} }})(); return now !== null && now !== {first} ? now : null;"
        ),
        WAIT,
    )?;
    screenshot(&browser, dir.path(), "console-overview.png")?;

    // A table's page: its schema from silt, the history silt keeps, and a verify run that ends
    // in its verdict.
    open(&browser, &silt, "#/table/demo.customers", "#schema-table")?;
    let schema = browser.eval(
        "return [...document.querySelectorAll('#schema-table tbody tr')] \
             .map(r => r.textContent)",
        json!([]),
    )?;
    ensure!(
        schema.to_string().contains("primary key"),
        "the key column is not marked: {schema}"
    );
    browser.wait_for(
        "the history note naming silt's samples",
        "return /samples kept by silt/.test(document.querySelector('#tb-hist-note').textContent)",
        WAIT,
    )?;
    browser.click("#verify-btn")?;
    let verdict = browser.wait_for(
        "the verify run's verdict",
        "const v = document.querySelector('#verify-verdict'); return v ? v.textContent : null;",
        Duration::from_secs(120),
    )?;
    ensure!(
        verdict
            .as_str()
            .is_some_and(|v| v.contains("MATCH") && !v.contains("MISMATCH")),
        "verify of demo.customers did not match: {verdict}"
    );
    browser.eval(
        "document.querySelector('#verify-verdict').scrollIntoView({block: 'center'})",
        json!([]),
    )?;
    screenshot(&browser, dir.path(), "console-table.png")?;

    // A query past a 50 ms deadline shows the deadline error with its progress.
    open(&browser, &silt, "#/query", "#q-sql")?;
    set_text(
        &browser,
        "#q-sql",
        "SELECT sum(a.amount * b.amount * c.amount) FROM demo.orders a, demo.orders b, demo.orders c",
    )?;
    set_text(&browser, "#q-deadline", "50ms")?;
    browser.click("#q-run")?;
    let error = browser.wait_for(
        "the deadline error",
        "const e = document.querySelector('#q-error'); \
         return e ? [e.dataset.kind, e.textContent] : null;",
        WAIT,
    )?;
    ensure!(
        error[0] == "deadline" && error[1].as_str().is_some_and(|t| t.contains("50ms")),
        "not the deadline error: {error}"
    );

    // A pipeline submitted through the page runs, with its graph drawn.
    open(&browser, &silt, "#/jobs", "#ed-text")?;
    set_text(&browser, "#ed-text", PIPELINE)?;
    browser.click("#ed-submit")?;
    browser.wait_for(
        "the job page of the submitted pipeline",
        "return location.hash.startsWith('#/job/') ? location.hash : null",
        WAIT,
    )?;
    // The graph comes from the job's topology, not from its text lines.
    let job = browser.wait_for(
        "the job running, with its graph",
        "const sub = document.querySelector('#job-sub'); \
         const nodes = document.querySelectorAll('#job-graph svg g.node').length; \
         const note = document.querySelector('#job-graph-note').textContent; \
         return sub && /running/i.test(sub.textContent) && nodes >= 2 && note === '' \
             ? [sub.textContent, nodes] : null;",
        WAIT,
    )?;
    eprintln!("job page: {job}");
    browser.wait_for(
        "a checkpoint of the job on its page",
        "return document.querySelectorAll('#cps-table tbody tr').length > 0",
        WAIT,
    )?;
    screenshot(&browser, dir.path(), "console-job.png")?;

    // A bad YAML: its error at line 4, where the filter is, as silt placed it.
    open(&browser, &silt, "#/jobs", "#ed-text")?;
    set_text(&browser, "#ed-text", BAD_PIPELINE)?;
    browser.click("#ed-validate")?;
    let line = browser.wait_for(
        "the validation error at a line",
        "const e = document.querySelector('#ed-errors li[data-line]'); \
         return e ? [e.dataset.line, e.textContent, e.querySelector('a.line').title] : null;",
        WAIT,
    )?;
    ensure!(line[0] == "4", "the error is not at line 4: {line}");
    ensure!(
        line[2] == "line given by silt",
        "the line is not the server's: {line}"
    );
    Ok(())
}

#[test]
fn behind_a_token_the_console_asks_for_it_and_nothing_leaks_without_it() -> Result<()> {
    let _one = ONE_BROWSER.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir()?;
    let token = "console-test-token";
    let silt = SiltProcess::start_with(
        silt_bin!(),
        &dir.path().join("data"),
        &["--demo"],
        &[("SILT_REST__TOKEN", token)],
    )?;
    // Without the token: the page's fixed files, and nothing of the API.
    let (code, page) = http::get(&silt.rest, "/ui/", None)?;
    ensure!(code == 200 && page.contains("silt console"), "/ui/: {code}");
    ensure!(
        !page.contains("demo.orders"),
        "the page itself names a table"
    );
    for path in [
        "/v1/tables",
        "/v1/jobs",
        "/v1/hot",
        "/metrics",
        "/openapi.json",
    ] {
        let (code, body) = http::get(&silt.rest, path, None)?;
        ensure!(code == 401, "{path} without the token: {code} {body}");
    }
    let (code, _) = http::get(&silt.rest, "/ui/no-such-file", None)?;
    ensure!(code == 404, "an unknown console file: {code}");

    let Some(browser) = browser("behind_a_token_the_console_asks_for_it")? else {
        return Ok(());
    };
    browser.go(&url(&silt, "#/"))?;
    let asks = "return document.querySelector('#token-dialog').open";
    browser.wait_for("the token prompt", asks, WAIT)?;
    browser.type_into("#token-input", "wrong-token\n")?;
    browser.wait_for(
        "the wrong token refused",
        "const e = document.querySelector('#token-error'); \
         return document.querySelector('#token-dialog').open && !e.hidden ? e.textContent : null;",
        WAIT,
    )?;
    browser.type_into("#token-input", &format!("{token}\n"))?;
    browser.wait_for(
        "the overview with the token",
        "const rows = [...document.querySelectorAll('#tables-table tbody tr')] \
             .map(r => r.dataset.table); \
         return !document.querySelector('#token-dialog').open && rows.includes('demo.orders');",
        WAIT,
    )?;
    Ok(())
}

/// Tables the overview must draw in under a second (issue 36).
const MANY_TABLES: usize = 500;

/// 500 lake-enabled tables in a real `silt up`: the overview draws every one, and says how long
/// it took; the draw is held to under a second. The time from navigation to the rows on screen
/// and a status read of 500 tables (one ListOffsets each) are printed: they depend on the
/// build's profile and the machine.
#[test]
fn the_overview_of_500_tables_draws_in_under_a_second() -> Result<()> {
    let _one = ONE_BROWSER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(browser) = browser("the_overview_of_500_tables")? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let silt = SiltProcess::start(silt_bin!(), &dir.path().join("data"))?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let connection = silt_testkit::hotstore::connect_to(&silt.bootstrap).await?;
        for i in 0..MANY_TABLES {
            silt_testkit::tables::Table::log("many", &format!("t{i:03}"))
                .column("id", fluss::metadata::DataTypes::bigint())
                .buckets(1)
                .lake("1h")
                .create(&connection)
                .await?;
        }
        anyhow::Ok(())
    })?;
    runtime.block_on(silt_testkit::wait::until(
        "tiering to take every table",
        Duration::from_secs(300),
        Duration::from_secs(2),
        || async {
            let (_, body) = http::get(&silt.rest, "/v1/tables", None)?;
            let tables: serde_json::Value = serde_json::from_str(&body)?;
            let n = tables.as_array().map_or(0, Vec::len);
            Ok(match n >= MANY_TABLES {
                true => silt_testkit::wait::Look::Done(()),
                false => silt_testkit::wait::Look::NotYet(format!("{n} tables")),
            })
        },
    ))?;
    // Past the status cache's age, so that what is timed lists every table's offsets afresh.
    std::thread::sleep(Duration::from_millis(1100));
    let read = std::time::Instant::now();
    http::get(&silt.rest, "/v1/tables", None)?;
    let read_ms = read.elapsed().as_millis();
    std::thread::sleep(Duration::from_millis(1100));
    browser.go(&url(&silt, "#/"))?;
    let drawn = browser.wait_for(
        "every table in the overview",
        &format!(
            "const t = document.querySelector('#tables-table'); \
             return t && t.querySelectorAll('tbody tr').length === {MANY_TABLES} \
                 ? [Number(t.dataset.renderMs), performance.now()] : null;"
        ),
        WAIT,
    )?;
    let (draw_ms, shown_ms) = (drawn[0].as_f64().unwrap(), drawn[1].as_f64().unwrap());
    eprintln!(
        "overview of {MANY_TABLES} tables: drawn in {draw_ms:.1} ms; on screen {shown_ms:.0} ms \
         after navigation; GET /v1/tables listing every table afresh: {read_ms} ms"
    );
    ensure!(
        draw_ms < 1000.0,
        "the overview of {MANY_TABLES} tables took {draw_ms:.1} ms to draw"
    );
    Ok(())
}
