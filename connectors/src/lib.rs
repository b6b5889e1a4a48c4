//! silt's connectors: one module per external system, each implementing the engine's
//! `Source` / `Operator` traits. `fluss` reads changelogs through the fluss-rs client (from
//! silt's hotstore or a real Apache Fluss cluster); `delta` tiers them into Delta Lake tables
//! exactly once; `changelog` is the row contract between them.
//! `lake` is the DataFusion catalog over silt's tables (`db.t`, `db.t$lake`) for bounded SQL.
//!
//! **Boundary:** connectors depend on the engine's traits, never the other way round; they know
//! nothing of YAML, HTTP or the CLI (jobs/ converts definitions into their config structs).

pub mod changelog;
pub mod delta;
pub mod fluss;
pub mod formats;
pub mod lake;
pub mod lake_format;
pub mod transform;
