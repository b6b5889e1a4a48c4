//! The sparse index of one segment: every `index_interval_bytes` of batches, one entry giving a
//! batch's base offset, byte position and commit timestamp. One structure serves as both the
//! offset index and the time index, because commit timestamps never decrease within a bucket.
//!
//! On disk (`<base>.index`, written once when the segment is rolled): the entries as
//! `offset i64 | position u64 | timestamp_ms i64`, little-endian, then a CRC-32C of them (u32).
//! The active segment's index lives in memory only and is rebuilt by recovery.

const ENTRY_BYTES: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub offset: i64,
    pub position: u64,
    pub timestamp_ms: i64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct SparseIndex {
    entries: Vec<IndexEntry>,
    bytes_since_entry: u64,
}

impl SparseIndex {
    /// Records a batch appended at `position`; indexes it when it is the first batch of the
    /// segment or `interval_bytes` have passed since the last entry.
    pub fn on_batch(&mut self, entry: IndexEntry, size_bytes: u64, interval_bytes: u32) {
        if let Some(last) = self.entries.last() {
            debug_assert!(entry.offset > last.offset && entry.position > last.position);
            debug_assert!(entry.timestamp_ms >= last.timestamp_ms);
        }
        if self.entries.is_empty() || self.bytes_since_entry >= u64::from(interval_bytes) {
            self.entries.push(entry);
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += size_bytes;
    }

    pub fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    /// The last entry at or before `offset`: a scan for `offset` may start there.
    pub fn floor_by_offset(&self, offset: i64) -> Option<IndexEntry> {
        let after = self.entries.partition_point(|e| e.offset <= offset);
        after.checked_sub(1).map(|i| self.entries[i])
    }

    /// The last entry whose timestamp is below `timestamp_ms`: every batch before it is older
    /// too, so a scan for the first batch at or after `timestamp_ms` may start there.
    pub fn floor_before_timestamp(&self, timestamp_ms: i64) -> Option<IndexEntry> {
        let after = self
            .entries
            .partition_point(|e| e.timestamp_ms < timestamp_ms);
        after.checked_sub(1).map(|i| self.entries[i])
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * ENTRY_BYTES + super::FILE_CRC_BYTES);
        for e in &self.entries {
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.position.to_le_bytes());
            out.extend_from_slice(&e.timestamp_ms.to_le_bytes());
        }
        super::with_crc(out)
    }

    /// Decodes an index file, or `None` when it is damaged or inconsistent with a segment of
    /// `segment_bytes` starting at `base_offset` (the caller then rebuilds it from the segment).
    /// `bytes_since_entry` is left at 0: the segment is closed and gets no more entries.
    pub fn decode(bytes: &[u8], base_offset: i64, segment_bytes: u64) -> Option<Self> {
        let body = super::checked_body(bytes)?;
        if !body.len().is_multiple_of(ENTRY_BYTES) {
            return None;
        }
        let entries: Vec<IndexEntry> = body
            .chunks_exact(ENTRY_BYTES)
            .map(|c| IndexEntry {
                offset: i64::from_le_bytes(c[0..8].try_into().expect("8 bytes")),
                position: u64::from_le_bytes(c[8..16].try_into().expect("8 bytes")),
                timestamp_ms: i64::from_le_bytes(c[16..24].try_into().expect("8 bytes")),
            })
            .collect();
        let first_ok = match entries.first() {
            Some(first) => first.offset == base_offset && first.position == 0,
            None => segment_bytes == 0,
        };
        let ordered = entries.windows(2).all(|w| {
            w[0].offset < w[1].offset
                && w[0].position < w[1].position
                && w[0].timestamp_ms <= w[1].timestamp_ms
        });
        let inside = entries.last().is_none_or(|e| e.position < segment_bytes);
        (first_ok && ordered && inside).then_some(SparseIndex {
            entries,
            bytes_since_entry: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one helper: an index over batches of `size` bytes, each one offset and 10 ms apart.
    fn index(batches: i64, size: u64, interval_bytes: u32) -> SparseIndex {
        let mut index = SparseIndex::default();
        for i in 0..batches {
            let entry = IndexEntry {
                offset: 100 + i,
                position: i as u64 * size,
                timestamp_ms: 1000 + 10 * i,
            };
            index.on_batch(entry, size, interval_bytes);
        }
        index
    }

    #[test]
    fn indexes_every_interval_and_finds_floors() {
        let idx = index(10, 100, 250);
        let offsets: Vec<i64> = idx.entries.iter().map(|e| e.offset).collect();
        assert_eq!(offsets, vec![100, 103, 106, 109]);
        assert_eq!(idx.floor_by_offset(99), None);
        assert_eq!(idx.floor_by_offset(105).map(|e| e.offset), Some(103));
        assert_eq!(idx.floor_by_offset(500).map(|e| e.offset), Some(109));
        assert_eq!(idx.floor_before_timestamp(1000), None);
        assert_eq!(
            idx.floor_before_timestamp(1031).map(|e| e.offset),
            Some(103)
        );
        assert_eq!(
            idx.floor_before_timestamp(1030).map(|e| e.offset),
            Some(100)
        );
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let idx = index(50, 64, 128);
        let bytes = idx.encode();
        let back = SparseIndex::decode(&bytes, 100, 50 * 64).unwrap();
        assert_eq!(back.entries, idx.entries);
        assert!(
            SparseIndex::decode(&bytes, 101, 50 * 64).is_none(),
            "wrong base offset"
        );
        assert!(
            SparseIndex::decode(&bytes, 100, 10).is_none(),
            "entries past the segment end"
        );
        assert!(SparseIndex::decode(&bytes[..bytes.len() - 1], 100, 50 * 64).is_none());
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        assert!(SparseIndex::decode(&flipped, 100, 50 * 64).is_none());
    }
}
