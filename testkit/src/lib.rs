//! silt's test kit: every fixture the test crates share, so that none is written twice.
//!
//! A test starts an in-process hot store ([`hotstore::start`]) or the real `silt` binary
//! ([`process::SiltProcess`]) over its own scratch directory, creates tables through the
//! official fluss-rs client ([`tables`]), tiers them ([`tiering::service`]), waits for a
//! condition with a deadline ([`wait`]), reads a log through a scanner until enough has
//! arrived ([`scan`]) and reads back what the lake holds ([`lake`]). Tests against what no one
//! here wrote start a real Apache Fluss cluster ([`real_fluss`]) or the
//! official Java client ([`java_client`]); both skip, saying why, where Java or Maven is missing.
//! The console's tests drive a headless Chromium ([`browser`]), skipped likewise without one.
//!
//! Bounds: every wait in this crate has a deadline and fails naming what it waited for; every
//! child process it starts is killed when its guard is dropped.
//!
//! This crate is for tests only (`publish = false`). The unit tests inside `*/src` cannot use
//! it: a crate's own unit tests would see two copies of its types.
//!
//! Layers, by cargo feature, so that a crate's tests build no more of the product than they
//! test: without features, what needs nothing of silt above the engine ([`wait`], [`faults`],
//! [`differential`], [`http`], [`browser`], [`process`], [`terminal`] and the script harnesses); with
//! `hotstore`, the in-process hot store and what works on it, over silt-hotstore and
//! silt-connectors (`hotstore`, `tables`, `rows`, `scan`, `changelog`, `kv_snapshots`,
//! `java_client`, `lake`); with
//! `services`, what needs silt-jobs (`tiering`, `lake::query_rows`). It must not depend on
//! silt-jobs without `services` (the tidy test checks the manifest).

pub mod browser;
pub mod differential;
pub mod faults;
pub mod flink_sql;
pub mod http;
pub mod official_suites;
pub mod process;
pub mod real_fluss;
pub mod terminal;
pub mod wait;

#[cfg(feature = "hotstore")]
pub mod changelog;
#[cfg(feature = "hotstore")]
pub mod hotstore;
#[cfg(feature = "hotstore")]
pub mod java_client;
#[cfg(feature = "hotstore")]
pub mod kv_snapshots;
#[cfg(feature = "hotstore")]
pub mod lake;
#[cfg(feature = "hotstore")]
pub mod rows;
#[cfg(feature = "hotstore")]
pub mod scan;
#[cfg(feature = "hotstore")]
pub mod tables;

#[cfg(feature = "services")]
pub mod tiering;

/// The root of the repository (the workspace).
pub fn repo_dir() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ is a folder of the workspace")
}

/// The text of `conf/<relative>` in the repository (the example pipelines, configuration);
/// panics naming the file if it cannot be read.
pub fn read_conf(relative: &str) -> String {
    let path = repo_dir().join("conf").join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Reports that `test` did not run here and why, as `SKIPPED: <test>: <reason>` on stderr. It
/// writes to the stderr handle itself: the test harness captures `println!`/`eprintln!`, and a
/// skip must be visible without `--nocapture`.
pub fn skip(test: &str, reason: &str) -> anyhow::Result<()> {
    use std::io::Write;
    std::io::stderr().write_all(format!("SKIPPED: {test}: {reason}\n").as_bytes())?;
    Ok(())
}
