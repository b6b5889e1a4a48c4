//! The differential scenario the integration tests run against silt's hotstore and against a
//! real Apache Fluss cluster, and the raw requests it needs. Each test binary includes this
//! with `mod common;` and uses only what it needs; the fixtures (servers, harnesses, waits)
//! are in silt-testkit.
#![allow(dead_code)]

pub mod partitions;
pub mod raw_fluss;
pub mod scenario;
