//! silt's edge: the `silt` binary and everything that talks to the outside world: the CLI,
//! configuration files and environment, job definitions and YAML pipelines, the REST and
//! Flight SQL APIs, and the services `silt up` runs (tiering, query, jobs), plus `silt verify`.
//! It converts outside formats by hand into engine, hotstore and connector types; those crates
//! stay free of serde, HTTP and YAML.
//!
//! Entry point: [`cli::run`]. Measurement (`silt bench`) lives in the `silt-bench` crate, which
//! depends on this one; this crate must not depend on it. The fault hooks the trials need
//! ([`lake_faults`], `silt up --crash-at`, the hot store's) exist only with the
//! `fault-injection` feature, which test builds turn on and the product build leaves off.

pub mod cli;
pub mod config;
pub mod demo;
pub mod job;
#[cfg(feature = "fault-injection")]
pub mod lake_faults;
pub mod memory;
pub mod paths;
pub mod query;
pub mod rest;
pub mod tiering;
pub mod up;
pub mod verify;
