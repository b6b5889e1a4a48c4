//! The allocator's own account of memory, next to the resident set the kernel reports: how much
//! the heap holds live (`allocated`), in pages it uses (`active`), and what jemalloc keeps
//! mapped and resident. A resident set that grows while `allocated` stays flat is the
//! allocator keeping freed pages, not a leak. Served as `GET /v1/memory`; `silt bench soak`
//! samples it.
//!
//! The figures are jemalloc's, the allocator of the `silt` binary; a program that links this
//! library with another allocator (the tests) reads near-zero figures.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct AllocatorStats {
    pub allocated_bytes: u64,
    pub active_bytes: u64,
    pub resident_bytes: u64,
    pub mapped_bytes: u64,
    pub retained_bytes: u64,
    /// The allocator's own bookkeeping.
    pub metadata_bytes: u64,
    /// Freed objects the threads' caches hold for reuse. jemalloc counts them in `allocated`
    /// (the arenas handed them out), so the live heap is `allocated` less this.
    pub thread_cache_bytes: u64,
    /// The C library's malloc (used by C dependencies such as zstd, not by Rust code): bytes
    /// in use, and bytes it keeps free inside its arenas. Absent off glibc.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub c_malloc_in_use_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub c_malloc_free_bytes: Option<u64>,
}

/// glibc's malloc statistics: (in use, free inside its arenas).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn c_malloc_stats() -> (Option<u64>, Option<u64>) {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct of counters.
    let info = unsafe { libc::mallinfo2() };
    (
        Some((info.uordblks + info.hblkhd) as u64),
        Some(info.fordblks as u64),
    )
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn c_malloc_stats() -> (Option<u64>, Option<u64>) {
    (None, None)
}

/// jemalloc's statistics, refreshed now; `None` where jemalloc is not linked.
#[cfg(not(target_env = "msvc"))]
pub fn allocator_stats() -> Option<AllocatorStats> {
    use std::ffi::{CStr, c_void};

    fn read(name: &CStr) -> Option<u64> {
        let mut value: usize = 0;
        let mut len = std::mem::size_of::<usize>();
        // SAFETY: `name` is a NUL-terminated mallctl name whose value is a size_t, and `value`
        // and `len` describe a buffer of exactly that size.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&raw mut value).cast::<c_void>(),
                &raw mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        (rc == 0).then_some(value as u64)
    }
    // Statistics are cached until the epoch advances.
    let mut epoch: u64 = 1;
    let mut len = std::mem::size_of::<u64>();
    // SAFETY: "epoch" takes and returns a uint64_t; both buffers are exactly that size.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            (&raw mut epoch).cast::<c_void>(),
            &raw mut len,
            (&raw mut epoch).cast::<c_void>(),
            std::mem::size_of::<u64>(),
        )
    };
    if rc != 0 {
        return None;
    }
    let (c_malloc_in_use_bytes, c_malloc_free_bytes) = c_malloc_stats();
    Some(AllocatorStats {
        allocated_bytes: read(c"stats.allocated")?,
        active_bytes: read(c"stats.active")?,
        resident_bytes: read(c"stats.resident")?,
        mapped_bytes: read(c"stats.mapped")?,
        retained_bytes: read(c"stats.retained")?,
        metadata_bytes: read(c"stats.metadata")?,
        // 4096 is MALLCTL_ARENAS_ALL: summed over every arena.
        thread_cache_bytes: read(c"stats.arenas.4096.tcache_bytes").unwrap_or(0),
        c_malloc_in_use_bytes,
        c_malloc_free_bytes,
    })
}

#[cfg(target_env = "msvc")]
pub fn allocator_stats() -> Option<AllocatorStats> {
    None
}
