/// jemalloc instead of glibc's malloc. Under a steady load `silt up`'s live heap stays flat
/// (heaptrack: a 44 MiB peak over a 5-minute log-table soak) while glibc's per-thread arenas
/// kept the freed memory of ~90 threads: the resident set grew 50 MB a minute (`silt bench
/// soak`). jemalloc with background threads hands freed pages back to the kernel after
/// `dirty_decay_ms`.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (`MALLOC_CONF` in the environment overrides them).
#[cfg(not(target_env = "msvc"))]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    silt_jobs::cli::run().unwrap_or_else(|e| silt_jobs::cli::failure(&e))
}
