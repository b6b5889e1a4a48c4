//! silt's edge: the `silt` binary and everything that talks to the outside world: the CLI,
//! configuration files and environment, job definitions and YAML pipelines, the REST and
//! Flight SQL APIs and the web console, and the services `silt up` runs (tiering, query,
//! jobs), plus `silt verify`.
//! It converts outside formats by hand into engine, hotstore and connector types; those crates
//! stay free of serde, HTTP and YAML.
//!
//! Entry point: [`cli::run`]. Measurement (`silt bench`) lives in the `silt-bench` crate, which
//! depends on this one; this crate must not depend on it. The fault hooks the trials need
//! ([`lake_faults`], `silt up --crash-at`, the hot store's) exist only with the
//! `fault-injection` feature, which test builds turn on and the product build leaves off.

// The OpenAPI document (`job::routes`) is one `json!` literal, deeper than the default 128.
#![recursion_limit = "256"]

pub mod build_info;
pub mod cli;
pub mod config;
pub mod console;
pub mod demo;
pub mod job;
#[cfg(feature = "fault-injection")]
pub mod lake_faults;
pub mod logging;
pub mod memory;
pub mod output;
pub mod progress;
pub mod query;
pub mod rest;
pub mod settings;
pub mod status;
pub mod tiering;
pub mod up;
pub mod verify;

/// Helpers the unit tests of several modules share.
#[cfg(test)]
pub(crate) mod test_util {
    /// Asserts that an error message names every one of `parts`: the thing that is wrong and
    /// how to fix it.
    #[track_caller]
    pub fn assert_mentions(error: impl std::fmt::Display, parts: &[&str]) {
        let message = error.to_string();
        for part in parts {
            assert!(message.contains(part), "{part:?} is not in: {message}");
        }
    }
}

/// Declares the allocator of silt's binaries: jemalloc with background threads, which hands
/// freed pages back to the kernel after `dirty_decay_ms`. Under a steady load `silt up`'s live
/// heap stayed flat while glibc's per-thread arenas kept the freed memory of ~90 threads (the
/// resident set grew 50 MB a minute in `silt bench soak`). `silt` and `silt-bench` (whose
/// trials and soak run `silt up` from it) both use it, so what is measured is what ships.
/// One arena (`narenas:1`; jemalloc's default is four per CPU): with the threads' caches in
/// front of it, one arena halved fragmentation (`active - allocated`: 25 MB against 55 MB on
/// average over minutes 10-27 of the soak, slope +46 against +116 MB/h) at equal tiering lag
/// and query latency. `_RJEM_MALLOC_CONF` in the environment overrides the options.
#[cfg(not(target_env = "msvc"))]
#[doc(hidden)]
pub use tikv_jemallocator;

#[macro_export]
macro_rules! silt_allocator {
    () => {
        #[cfg(not(target_env = "msvc"))]
        #[global_allocator]
        static ALLOCATOR: $crate::tikv_jemallocator::Jemalloc = $crate::tikv_jemallocator::Jemalloc;

        #[cfg(not(target_env = "msvc"))]
        #[allow(non_upper_case_globals)]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        pub static malloc_conf: &[u8] =
            b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:1\0";
    };
}
