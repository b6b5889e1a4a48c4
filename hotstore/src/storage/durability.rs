//! Every fsync of log data goes through [`sync_data`], so a test build can see what was made
//! durable and what was not.
//!
//! With the `fault-injection` feature (and in the crate's own unit tests) each successful sync
//! leaves a sidecar `<file>.synced` holding the file length it made durable, and syncs of files
//! under a directory armed with [`fail_syncs_under`] fail with an I/O error.
//! [`simulate_power_loss`] then cuts every log segment and mark journal back to what was synced,
//! as a machine crash would after the page cache is lost. The product build compiles none of it:
//! `sync_data` is `File::sync_data`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use silt_rt::io_threads::IoThreads;

/// fsyncs the data of `file` (at `path`).
pub(crate) fn sync_data(file: &File, path: &Path) -> std::io::Result<()> {
    #[cfg(any(test, feature = "fault-injection"))]
    hooks::before_sync(path)?;
    file.sync_data()?;
    #[cfg(any(test, feature = "fault-injection"))]
    hooks::after_sync(file, path);
    #[cfg(not(any(test, feature = "fault-injection")))]
    let _ = path;
    Ok(())
}

/// The hot store's fsync threads. The appenders' group-commit fsyncs run here rather than in
/// tokio's blocking pool: an fsync is waited on by every producer of its bucket, so it must not
/// queue behind queries' and tiering's file I/O, and a steady stream of fsyncs through the
/// shared pool kept each thread the pool ever grew (and its allocator cache) alive for good.
fn fsync_threads() -> &'static IoThreads {
    static THREADS: OnceLock<IoThreads> = OnceLock::new();
    THREADS.get_or_init(|| IoThreads::start("silt-fsync", 4, 1024))
}

/// [`sync_data`] on the hot store's fsync threads, for async callers.
pub(crate) async fn sync_data_off_runtime(file: Arc<File>, path: PathBuf) -> std::io::Result<()> {
    fsync_threads()
        .run(move || sync_data(&file, &path))
        .await
        .and_then(|synced| synced)
}

#[cfg(any(test, feature = "fault-injection"))]
pub use hooks::{fail_syncs_under, simulate_power_loss};

/// Environment variable of a test build: `N` makes the process abort right after its `N`-th
/// durable write (log append or primary-key changelog), before the write is acknowledged: the
/// crash that leaves a client retrying a batch the server already holds.
pub const ABORT_AFTER_DURABLE_WRITE_ENV: &str = "SILT_FAULT_ABORT_AFTER_DURABLE_WRITE";

/// Called once a write is durable and before it is acknowledged. Does nothing in the product
/// build; in a test build, aborts the process at the write named by
/// [`ABORT_AFTER_DURABLE_WRITE_ENV`].
pub(crate) fn after_durable_write() {
    #[cfg(feature = "fault-injection")]
    hooks::abort_at_durable_write();
}

#[cfg(any(test, feature = "fault-injection"))]
mod hooks {
    use std::fs::File;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static FAILING_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    const SIDECAR_EXTENSION: &str = "synced";

    fn sidecar(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_os_string();
        name.push(".");
        name.push(SIDECAR_EXTENSION);
        PathBuf::from(name)
    }

    /// Makes every later sync of a file under `dir` fail (`fail`), or succeed again.
    pub fn fail_syncs_under(dir: &Path, fail: bool) {
        let mut dirs = FAILING_DIRS.lock().unwrap_or_else(|p| p.into_inner());
        dirs.retain(|d| d != dir);
        if fail {
            dirs.push(dir.to_path_buf());
        }
    }

    #[cfg(feature = "fault-injection")]
    pub(super) fn abort_at_durable_write() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static WRITES: AtomicU64 = AtomicU64::new(0);
        static ABORT_AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        let abort_at = ABORT_AT.get_or_init(|| {
            std::env::var(super::ABORT_AFTER_DURABLE_WRITE_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
        });
        if let Some(at) = abort_at
            && WRITES.fetch_add(1, Ordering::Relaxed) + 1 == *at
        {
            eprintln!(
                "fault injection: aborting after durable write {at}, before acknowledging it"
            );
            std::process::abort();
        }
    }

    pub(super) fn before_sync(path: &Path) -> io::Result<()> {
        let dirs = FAILING_DIRS.lock().unwrap_or_else(|p| p.into_inner());
        if dirs.iter().any(|d| path.starts_with(d)) {
            return Err(io::Error::other(format!(
                "injected fsync failure of {}",
                path.display()
            )));
        }
        Ok(())
    }

    pub(super) fn after_sync(file: &File, path: &Path) {
        if let Ok(meta) = file.metadata() {
            // Not synced itself: it records what the sync it follows made durable, and is read
            // only by `simulate_power_loss` after a kill, when the page cache still holds it.
            let _ = std::fs::write(sidecar(path), meta.len().to_le_bytes());
        }
    }

    /// `<20 digits>.log` or `<20 digits>.marks`: the files whose unsynced tail a power loss
    /// takes.
    fn is_segment_data(name: &str) -> bool {
        let stem = name
            .strip_suffix(".log")
            .or_else(|| name.strip_suffix(".marks"));
        stem.is_some_and(|s| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()))
    }

    /// Cuts every log segment (`<base>.log`) and mark journal (`<base>.marks`) under `root`
    /// (other files, such as the kv store's journal, are left alone) back to the
    /// length its last sync made durable (0 when it was never synced): what a power loss
    /// leaves of them once the page cache is gone. Returns the bytes cut.
    pub fn simulate_power_loss(root: &Path) -> io::Result<u64> {
        let mut cut = 0;
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if !is_segment_data(name) {
                    continue;
                }
                let synced = match std::fs::read(sidecar(&path)) {
                    Ok(bytes) => bytes
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, u64::from_le_bytes),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
                    Err(e) => return Err(e),
                };
                let len = std::fs::metadata(&path)?.len();
                if len > synced {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)?
                        .set_len(synced)?;
                    cut += len - synced;
                }
            }
        }
        Ok(cut)
    }
}
