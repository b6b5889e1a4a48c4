//! The `silt-bench` binary's command line: every bench answers `--help`, and a bad flag, value
//! or bench is a usage error (exit 2) with clap's message.

use std::process::Command;

fn silt_bench(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_silt-bench"))
        .args(args)
        .output()
        .expect("running silt-bench");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_bench_answers_help() {
    for bench in ["tiering", "hotstore", "query", "soak", "trials", "pk"] {
        let (code, stdout, stderr) = silt_bench(&[bench, "--help"]);
        assert_eq!(code, Some(0), "silt bench {bench} --help: {stderr}");
        assert!(
            stdout.contains(&format!("Usage: silt bench {bench}")),
            "silt bench {bench} --help: {stdout}"
        );
    }
}

#[test]
fn a_bad_flag_value_or_bench_exits_2() {
    let (code, _, stderr) = silt_bench(&[]);
    assert_eq!(code, Some(2), "no bench: {stderr}");
    assert!(stderr.contains("Usage: silt bench"), "no bench: {stderr}");
    for args in [
        &["tiering", "--no-such-flag"][..],
        &["tiering", "--rows", "many"],
        &["trials", "--catch-up", "soon"],
        &["soak", "--silt-env", "NO_EQUALS_SIGN"],
        &["no-such-bench"],
    ] {
        let (code, _, stderr) = silt_bench(args);
        assert_eq!(code, Some(2), "silt bench {args:?}: {stderr}");
        assert!(
            stderr.starts_with("error:"),
            "silt bench {args:?}: {stderr}"
        );
    }
}

/// `silt-bench silt ...` is silt's own command line (how the trials start `silt up`).
#[test]
fn silt_bench_silt_runs_silts_command_line() {
    let (code, stdout, stderr) = silt_bench(&["silt", "up", "--help"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("Usage: silt up"), "{stdout}");
    let (code, _, stderr) = silt_bench(&["silt", "up", "--no-such-flag"]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// `--format json`: a real (small) bench run prints only its tables on stdout, each one line of
/// JSON with the fields the README lists; the lines for people go to stderr, with no escape codes
/// in either.
#[test]
fn format_json_prints_only_the_tables_on_stdout() {
    let (code, stdout, stderr) = silt_bench(&[
        "--format",
        "json",
        "query",
        "--lake-rows",
        "20000",
        "--runs",
        "1",
        "--deadline-queries",
        "2",
        "--cross-rows",
        "2000",
        "--pk-keys",
        "2000",
        "--lake-changes",
        "200",
        "--tail-changes",
        "200",
    ]);
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let tables: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    assert_eq!(tables.len(), 1, "one table: {stdout}");
    let table = &tables[0];
    assert_eq!(table["bench"], "query");
    assert_eq!(table["table"], "figures");
    assert_eq!(table["columns"], serde_json::json!(["figure", "value"]));
    let rows = table["rows"].as_array().expect("rows");
    assert!(
        rows.iter()
            .any(|r| r["figure"].as_str().is_some_and(|f| f.contains("deadline"))),
        "a deadline figure: {rows:?}"
    );
    let view = rows
        .iter()
        .find(|r| r["figure"] == "view equals the changelog as written")
        .expect("the view's check, its indent trimmed");
    assert_eq!(view["value"], "yes");
    assert!(table["notes"].is_array());
    assert!(
        stderr.contains("deadline precision:"),
        "the lines for people are on stderr: {stderr}"
    );
    assert!(!stdout.contains('\u{1b}') && !stderr.contains('\u{1b}'));
}

/// `silt bench pk` at two small sizes: a row per size with the commit time, and the key index's
/// bytes per key read from its files on disk.
#[test]
fn the_pk_bench_measures_each_size() {
    let (code, stdout, stderr) = silt_bench(&[
        "--format",
        "json",
        "pk",
        "--keys",
        "20000,60000",
        "--changed",
        "500",
        "--commits",
        "1",
    ]);
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let table: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON table");
    assert_eq!(table["bench"], "pk");
    let rows = table["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (row, keys) in rows.iter().zip(["20000", "60000"]) {
        assert_eq!(row["keys"], keys);
        let number = |column: &str| -> f64 {
            row[column]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{column} of {row}"))
        };
        assert!(number("commit_s") > 0.0, "{row}");
        // Each key's entry is a 13-byte key and a 12-byte value before fjall's encoding.
        assert!(number("index_b_per_key") > 5.0, "{row}");
    }
    let (code, _, stderr) = silt_bench(&["pk", "--keys", "100", "--changed", "500"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--keys needs sizes larger than --changed"),
        "{stderr}"
    );
}
