//! silt's edge: the `silt` binary and everything that talks to the outside world (CLI,
//! configuration files and environment, and, as they land, job definitions, YAML pipelines,
//! the REST API and the services `silt up` runs). It converts outside formats by hand into
//! engine, hotstore and connector types; those crates stay free of serde, HTTP and YAML.
//!
//! Entry point: [`cli::main`].

pub mod bench;
pub mod bench_hotstore;
pub mod bench_query;
pub mod bench_soak;
pub mod cli;
pub mod config;
pub mod demo;
pub mod job;
pub mod lake_faults;
pub mod paths;
pub mod query;
pub mod rest;
pub mod tiering;
pub mod trials;
pub mod up;
pub mod verify;
