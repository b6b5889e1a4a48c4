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
    for bench in ["tiering", "hotstore", "query", "soak", "trials"] {
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
