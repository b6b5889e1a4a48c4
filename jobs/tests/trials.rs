//! The seeded fault trials (`silt bench trials`) in `cargo test`: a handful of seeds, each a
//! random workload against `silt up` with faults (SIGKILL, a second tiering job, a failing lake
//! store, a full disk), then catch-up and verify of every table. Zero rows lost, zero
//! duplicated, zero verify failures.
//!
//! `SILTTEST_TRIAL_SEEDS` sets how many seeds run (default 3); `SILTTEST_TRIAL_FIRST_SEED` the
//! first one. `silt bench trials --seeds 300` runs hundreds outside `cargo test`.

use std::process::Command;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn seeded_fault_trials_lose_and_duplicate_nothing() {
    let seeds = env_u64("SILTTEST_TRIAL_SEEDS", 3);
    let first = env_u64("SILTTEST_TRIAL_FIRST_SEED", 1);
    let out = Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(["--log", "off", "bench", "trials"])
        .args(["--seeds", &seeds.to_string(), "--seed", &first.to_string()])
        .output()
        .expect("running silt bench trials");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let line = |label: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(label))
            .map(|l| l[label.len()..].trim().to_string())
            .unwrap_or_else(|| panic!("no {label:?} line in the summary"))
    };
    assert_eq!(line("seeds run"), seeds.to_string());
    assert_eq!(line("rows lost"), "0");
    assert_eq!(line("rows duplicated"), "0");
    assert_eq!(line("verify failures"), "0");
    let written: u64 = line("rows written (acked)").parse().unwrap();
    assert!(written > 0, "the workload wrote something");
    let faults = line("faults injected");
    assert!(
        faults.contains("kill") || faults.contains("second-job") || faults.contains("store"),
        "faults were injected: {faults}"
    );
    assert_eq!(out.status.code(), Some(0), "silt bench trials passed");
}
