//! Reusable buffers for fetch reads.
//!
//! A fetch reads a byte range of a segment into memory; the response hands those bytes to the
//! socket as they are (see `protocol::frame`).
//! With a fresh allocation per read, most of the cost of a large fetch was the kernel's:
//! jemalloc returns freed pages within about a second (`dirty_decay_ms`, `muzzy_decay_ms: 0`),
//! so each read's buffer was new pages, faulted in and zeroed (perf of `silt bench hotstore`'s
//! uncompressed fetch, release: `read_bounded` 25% of the process, most of it page faults).
//! A read takes a buffer from this pool and the [`Bytes`] it returns hands the buffer back when
//! the last reference is dropped.
//!
//! Bounds: at most [`POOLED_MAX`] buffers are kept, each of at most [`POOLED_BYTES_MAX`]
//! capacity (16 MiB held at most); larger reads allocate as before.

use std::sync::Mutex;

use bytes::Bytes;

/// Buffers kept for reuse.
pub const POOLED_MAX: usize = 8;
/// Capacity above which a buffer is freed rather than kept.
pub const POOLED_BYTES_MAX: usize = 2 * 1024 * 1024;

/// The buffers of every fetch read.
static POOL: ReadBuffers = ReadBuffers::new();

/// Reads `len` bytes of `file` at `offset` into a pooled buffer and returns them as [`Bytes`].
/// The read fills the whole buffer or fails: a reused buffer still holds an earlier read's
/// bytes (it is not zeroed again), and only a full read may return it to a reader.
pub fn read_exact_at(file: &std::fs::File, offset: u64, len: usize) -> std::io::Result<Bytes> {
    use std::os::unix::fs::FileExt;
    POOL.read_into(len, |buffer| file.read_exact_at(buffer, offset))
}

/// A bounded pool of read buffers.
struct ReadBuffers {
    kept: Mutex<Vec<Vec<u8>>>,
}

impl ReadBuffers {
    const fn new() -> Self {
        ReadBuffers {
            kept: Mutex::new(Vec::new()),
        }
    }

    fn read_into<E>(
        &'static self,
        len: usize,
        read: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Bytes, E> {
        let mut buffer = if len <= POOLED_BYTES_MAX {
            self.lock().pop().unwrap_or_default()
        } else {
            Vec::new()
        };
        // The buffer's bytes are an earlier read's, and `read` overwrites all `len` of them or
        // fails (then nothing is returned), so only growth past them is zeroed: zeroing a
        // reused buffer cost 7% of the server's fetch time (perf, 2M rows uncompressed).
        if buffer.len() >= len {
            buffer.truncate(len);
        } else {
            buffer.resize(len, 0);
        }
        match read(&mut buffer) {
            Ok(()) => Ok(Bytes::from_owner(Pooled { buffer, pool: self })),
            Err(e) => {
                self.give_back(buffer);
                Err(e)
            }
        }
    }

    fn give_back(&self, buffer: Vec<u8>) {
        if buffer.capacity() > POOLED_BYTES_MAX {
            return;
        }
        let mut kept = self.lock();
        if kept.len() < POOLED_MAX {
            kept.push(buffer);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A pooled buffer behind a [`Bytes`]: back to its pool when the bytes are dropped.
struct Pooled {
    buffer: Vec<u8>,
    pool: &'static ReadBuffers,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_bounded() {
        let pool: &'static ReadBuffers = Box::leak(Box::new(ReadBuffers::new()));
        let first = pool
            .read_into::<()>(1000, |b| {
                b.fill(7);
                Ok(())
            })
            .unwrap();
        assert_eq!(first.len(), 1000);
        assert!(first.iter().all(|&b| b == 7));
        let address = first.as_ptr();
        drop(first);
        assert_eq!(pool.lock().len(), 1, "a dropped read gives its buffer back");
        let again = pool
            .read_into::<()>(10, |b| {
                assert!(
                    b.iter().all(|&x| x == 7),
                    "a reused buffer is not zeroed again: `read` overwrites it"
                );
                Ok(())
            })
            .unwrap();
        assert_eq!(again.as_ptr(), address, "the next read uses it again");
        drop(again);
        // A failed read gives its buffer back and returns the error.
        assert_eq!(pool.read_into(10, |_| Err("no")), Err::<Bytes, _>("no"));
        assert_eq!(pool.lock().len(), 1);
        // Larger reads are not pooled, and the pool never holds more than its bound.
        let big: Vec<Bytes> = (0..POOLED_MAX * 2)
            .map(|_| {
                pool.read_into::<()>(POOLED_BYTES_MAX + 1, |_| Ok(()))
                    .unwrap()
            })
            .collect();
        drop(big);
        assert_eq!(pool.lock().len(), 1, "large buffers are freed");
        let small: Vec<Bytes> = (0..POOLED_MAX * 2)
            .map(|_| pool.read_into::<()>(100, |_| Ok(())).unwrap())
            .collect();
        drop(small);
        assert_eq!(pool.lock().len(), POOLED_MAX);
    }

    /// The public read fills the buffer from the file or fails; a short file is an error, not
    /// a buffer with an earlier read's bytes at its end.
    #[test]
    fn a_read_is_the_files_bytes_or_an_error() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&(0..=255u8).collect::<Vec<_>>()).unwrap();
        let stale = read_exact_at(&file, 0, 200).unwrap();
        drop(stale);
        let read = read_exact_at(&file, 10, 100).unwrap();
        assert_eq!(&read[..], &(10..110u8).collect::<Vec<_>>()[..]);
        drop(read);
        let past_the_end = read_exact_at(&file, 200, 100).unwrap_err();
        assert_eq!(past_the_end.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
