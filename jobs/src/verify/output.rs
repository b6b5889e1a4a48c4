//! What `silt verify` prints. Text (the default): each table's verdict on stdout
//! (`verify db.t: MATCH`, what a script reads); the diff (what was compared, the counts, the
//! first rows that differ) on stderr, for every table checked alone and with `--all` for those
//! that do not match, then the summary table. JSON (`--format json`): one document on stdout,
//! `{"verdict", "exit_code", "tables": [...]}` (fields in [`TableJson`]), nothing else but
//! progress. Progress (which table, the wait for tiering) is drawn on stderr on a terminal.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::{
    EXIT_DEADLINE, EXIT_MATCH, EXIT_MISMATCH, TableReport, Verdict, VerifyOptions,
    lake_enabled_tables, parse_table_name, verify_table,
};
use crate::output::{Format, print_json};
use crate::progress::Progress;

/// `silt verify`: one table or every lake-enabled one. Prints as the module says and returns
/// the exit code (0 match, 1 mismatch, 3 deadline passed; with several tables the worst wins,
/// a mismatch over a deadline).
pub async fn run(
    options: &VerifyOptions,
    table: Option<&str>,
    all: bool,
    format: Format,
) -> Result<u8> {
    let connection =
        silt_connectors::fluss::connect_with(&options.bootstrap, options.credentials.as_ref())
            .await
            .with_context(|| {
                format!(
                    "cannot reach the hot tier at {}: is `silt up` (or the Fluss cluster) running? \
             (set --bootstrap, hot_tier.bootstrap or hotstore.listen)",
                    options.bootstrap
                )
            })?;
    let tables = match (table, all) {
        (Some(name), false) => vec![parse_table_name(name)?],
        (None, true) => lake_enabled_tables(&connection).await?,
        _ => bail!("name one table (silt verify db.t) or pass --all"),
    };
    let progress = match all {
        true => Progress::steps(tables.len() as u64),
        false => Progress::spinner(),
    };
    let options = VerifyOptions {
        progress: progress.clone(),
        ..options.clone()
    };
    let started = Instant::now();
    let mut reports = Vec::with_capacity(tables.len());
    for (database, name) in &tables {
        progress.set_message(format!("{database}.{name}"));
        let report = match verify_table(&connection, database, name, &options).await {
            Ok(r) => r,
            Err(e) if all => failed(database, name, &e),
            Err(e) => {
                progress.finish();
                return Err(e);
            }
        };
        progress.inc();
        if format == Format::Text {
            progress.suspend(|| print_text(&report, all));
        }
        reports.push(report);
    }
    progress.finish();
    let code = exit_code(&reports);
    match format {
        Format::Json => print_json(&document(&reports, code))?,
        Format::Text if tables.is_empty() => eprintln!("verify: no lake-enabled tables"),
        Format::Text if all => {
            let seconds = started.elapsed().as_secs_f64();
            eprintln!("{}\nverify: done in {seconds:.1} s", summary(&reports));
        }
        Format::Text => {}
    }
    Ok(code)
}

/// With `--all`, a table that could not be checked is a mismatch saying why.
fn failed(database: &str, name: &str, e: &anyhow::Error) -> TableReport {
    let mut r = TableReport::new(&format!("{database}.{name}"), false);
    r.details.push(format!("verify failed: {e:#}"));
    r
}

/// The diff on stderr (with `--all` only of a table that does not match), the verdict on stdout.
fn print_text(report: &TableReport, all: bool) {
    if !all || report.verdict != Verdict::Match {
        eprint!("{}", report.render_diff());
    }
    println!("{}", report.verdict_line());
}

/// The worst verdict's exit code: a mismatch over a deadline, a deadline over a match.
fn exit_code(reports: &[TableReport]) -> u8 {
    if reports.iter().any(|r| r.verdict == Verdict::Mismatch) {
        EXIT_MISMATCH
    } else if reports.iter().any(|r| r.verdict == Verdict::DeadlinePassed) {
        EXIT_DEADLINE
    } else {
        EXIT_MATCH
    }
}

/// `match`, `mismatch` or `deadline_passed`.
fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Match => "match",
        Verdict::Mismatch => "mismatch",
        Verdict::DeadlinePassed => "deadline_passed",
    }
}

/// `silt verify --format json`'s document.
#[derive(Debug, Serialize)]
struct Document<'a> {
    /// The worst table's verdict (`match` when there are no tables).
    verdict: &'static str,
    exit_code: u8,
    tables: Vec<TableJson<'a>>,
}

/// One table of the JSON document.
#[derive(Debug, Serialize)]
pub(super) struct TableJson<'a> {
    table: &'a str,
    /// `log` or `primary_key`.
    kind: &'static str,
    verdict: &'static str,
    /// The lake version compared (null: no lake yet).
    lake_version: Option<u64>,
    /// Rows (log table) or live keys (primary-key table) on each side.
    hot_rows: usize,
    lake_rows: usize,
    missing: usize,
    extra: usize,
    differing: usize,
    unchecked: usize,
    duplicate_keys: usize,
    buckets: Vec<BucketJson>,
    /// The first rows that differ and notes, as the text diff shows them.
    details: &'a [String],
}

#[derive(Debug, Serialize)]
struct BucketJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    partition_id: Option<i64>,
    bucket: i32,
    /// The earliest offset the hot store held, the high watermark captured, and the lake's
    /// offset the comparison ran up to.
    earliest_offset: i64,
    high_watermark: i64,
    lake_offset: i64,
}

fn document(reports: &[TableReport], code: u8) -> Document<'_> {
    let verdict = match code {
        EXIT_MISMATCH => Verdict::Mismatch,
        EXIT_DEADLINE => Verdict::DeadlinePassed,
        _ => Verdict::Match,
    };
    Document {
        verdict: verdict_name(verdict),
        exit_code: code,
        tables: reports.iter().map(table_json).collect(),
    }
}

pub(super) fn table_json(r: &TableReport) -> TableJson<'_> {
    TableJson {
        table: &r.table,
        kind: crate::status::kind_name(r.primary_key),
        verdict: verdict_name(r.verdict),
        lake_version: r.delta_version,
        hot_rows: r.hot_rows,
        lake_rows: r.lake_rows,
        missing: r.missing,
        extra: r.extra,
        differing: r.differing,
        unchecked: r.unchecked,
        duplicate_keys: r.duplicate_keys,
        buckets: (r.buckets.iter())
            .map(|(b, (earliest, hw, lake))| BucketJson {
                partition_id: b.partition,
                bucket: b.bucket,
                earliest_offset: *earliest,
                high_watermark: *hw,
                lake_offset: *lake,
            })
            .collect(),
        details: &r.details,
    }
}

/// The summary table of `silt verify --all`.
pub fn summary(reports: &[TableReport]) -> String {
    let mut out = format!(
        "{:<28} {:<5} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}  {}\n",
        "table", "kind", "version", "hot", "lake", "missing", "extra", "differing", "result"
    );
    for r in reports {
        out.push_str(&format!(
            "{:<28} {:<5} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}  {}\n",
            r.table,
            if r.primary_key { "pk" } else { "log" },
            r.delta_version.map_or("-".into(), |v| v.to_string()),
            r.hot_rows,
            r.lake_rows,
            r.missing,
            r.extra,
            r.differing,
            match r.verdict {
                Verdict::Match => "match",
                Verdict::Mismatch => "MISMATCH",
                Verdict::DeadlinePassed => "deadline passed",
            }
        ));
    }
    let failed = reports
        .iter()
        .filter(|r| r.verdict != Verdict::Match)
        .count();
    out.push_str(&format!(
        "{} tables: {} match, {failed} do not",
        reports.len(),
        reports.len() - failed
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(table: &str, verdict: Verdict) -> TableReport {
        let mut r = TableReport::new(table, table.ends_with("pk"));
        r.verdict = verdict;
        r
    }

    /// The worst verdict wins, in the exit code and in the JSON document.
    #[test]
    fn the_worst_verdict_decides() {
        use Verdict::*;
        for (verdicts, code, name) in [
            (&[][..], 0, "match"),
            (&[Match, Match], 0, "match"),
            (&[Match, DeadlinePassed], 3, "deadline_passed"),
            (&[DeadlinePassed, Mismatch, Match], 1, "mismatch"),
        ] {
            let reports: Vec<TableReport> = (verdicts.iter().enumerate())
                .map(|(i, v)| report(&format!("db.t{i}"), *v))
                .collect();
            let code_found = exit_code(&reports);
            let doc = serde_json::to_value(document(&reports, code_found)).unwrap();
            assert_eq!(
                (code_found, doc["verdict"].as_str()),
                (code, Some(name)),
                "{verdicts:?}"
            );
        }
    }

    #[test]
    fn a_table_in_json_names_its_kind_and_buckets() {
        let mut r = report("db.pk", Verdict::Match);
        r.buckets.insert(
            silt_connectors::changelog::BucketKey::partition(4, 1),
            (2, 10, 10),
        );
        let v = serde_json::to_value(table_json(&r)).unwrap();
        assert_eq!(v["kind"], "primary_key");
        assert_eq!(
            v["buckets"][0],
            serde_json::json!({"partition_id": 4, "bucket": 1, "earliest_offset": 2,
                               "high_watermark": 10, "lake_offset": 10})
        );
    }
}
