//! What every layer of silt uses and none owns: the process's [`io_threads`] for blocking file
//! I/O, its low-priority [`background`] thread, the wall [`clock`], the one [`duration`]
//! grammar of flags, table properties and pipelines, and the repair of a [`kv_dir`] a kill left
//! half-created.
//!
//! **Boundary:** a leaf crate. It depends on nothing of silt, and nothing here knows of Fluss,
//! Delta, the dataflow engine, HTTP or SQL; the hot store, the engine, the connectors and the
//! edge all depend on it (rust-analyzer's `stdx` is the model).

pub mod background;
pub mod clock;
pub mod duration;
pub mod io_threads;
pub mod kv_dir;
