//! Helpers shared by integration tests. Each test binary includes this with `mod common;` and
//! uses only what it needs.
#![allow(dead_code)]

pub mod fluss_real;
pub mod java_client;
pub mod raw_fluss;
pub mod scenario;
