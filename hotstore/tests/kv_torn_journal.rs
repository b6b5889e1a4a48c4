//! Regression: a SIGKILL while fjall's journal writer is in the middle of a batch leaves a
//! partial entry followed by the zeros of the preallocated journal file. In debug builds fjall's
//! journal decoder hit a `debug_assert_eq!(value_len, on_disk_value_len)` on that tail and
//! panicked, so `silt up` could not restart after the kill (found by `silt bench trials`, seed
//! 156, kill fault); release builds truncate the torn batch. The workspace turns fjall's debug
//! assertions off so every build recovers the same way. This test writes such a tail by hand
//! and reopens the store: it must open, keep every committed change and drop the torn one.

use std::path::{Path, PathBuf};

use silt_hotstore::storage::{KvConfig, KvStore};

/// fjall's journal files are the preallocated (largest) files under the database directory.
fn journal_files(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().is_file())
        .filter(|entry| entry.metadata().unwrap().len() >= 64 * 1024 * 1024)
        .map(walkdir::DirEntry::into_path)
        .collect()
}

#[test]
fn a_torn_journal_batch_is_dropped_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = KvStore::open(dir.path(), KvConfig::default()).unwrap();
        let tablet = store.open_tablet("t1_b0").unwrap();
        for i in 0..50u32 {
            let key = format!("k{i}");
            tablet
                .apply(
                    &[(key.as_bytes(), Some(b"v".as_slice()))],
                    1,
                    i64::from(i) + 1,
                )
                .unwrap();
        }
        store.persist().unwrap();
    }
    let journals = journal_files(dir.path());
    assert!(!journals.is_empty(), "fjall preallocates its journal");
    for journal in journals {
        let mut bytes = std::fs::read(&journal).unwrap();
        let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
        // Start of a batch of one item, then an item cut after its value length: what a kill
        // between two buffered writes leaves in front of the preallocated zeros.
        let mut torn = vec![1u8];
        torn.extend(1u32.to_le_bytes());
        torn.extend(9_999u64.to_le_bytes());
        torn.push(2); // item
        torn.push(0); // value type: value
        torn.push(0); // no compression
        torn.extend(0u64.to_le_bytes()); // keyspace
        torn.extend(1u16.to_le_bytes()); // key length
        torn.extend(8u32.to_le_bytes()); // value length; the on-disk length reads as 0
        bytes[end..end + torn.len()].copy_from_slice(&torn);
        std::fs::write(&journal, bytes).unwrap();
    }
    let store = KvStore::open(dir.path(), KvConfig::default()).expect("reopens after a torn batch");
    let tablet = store.open_tablet("t1_b0").unwrap();
    assert_eq!(
        tablet.applied_offset().unwrap(),
        50,
        "every committed batch survives"
    );
    assert_eq!(
        tablet.get(b"k49").unwrap().as_deref(),
        Some(b"v".as_slice())
    );
}
