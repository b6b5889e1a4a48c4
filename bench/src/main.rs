/// The same allocator and options as `silt` (jobs/src/main.rs): the trials and the soak run `silt
/// up` from this binary (`silt-bench silt up ...`), so what they measure and stress must be what
/// the product runs.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (`MALLOC_CONF` in the environment overrides them).
#[cfg(not(target_env = "msvc"))]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    silt_bench::cli::run().unwrap_or_else(|e| silt_jobs::cli::failure(&e))
}
