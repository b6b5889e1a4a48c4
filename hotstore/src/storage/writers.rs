//! Per-writer idempotence state of one log tablet: the last few batches of every writer.
//!
//! A snapshot (`<base>.writers`) is written when a segment is rolled and holds the state for all
//! offsets below `<base>`; recovery loads the active segment's snapshot and replays the active
//! segment on top. Layout: `count u32`, then per writer `writer_id i64 | n u8 | n × (sequence
//! i32 | base_offset i64 | last_offset i64)`, then a CRC-32C (u32) of everything before it.

use std::collections::{HashMap, VecDeque};

/// How many recent batches per writer are remembered for duplicate detection, matching the
/// client's limit of in-flight batches per bucket.
pub const WRITER_BATCHES_RETAINED: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchMeta {
    pub sequence: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SequenceCheck {
    Append,
    Duplicate(BatchMeta),
    OutOfOrder { expected: i32 },
}

fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WriterTable {
    writers: HashMap<i64, VecDeque<BatchMeta>>,
}

impl WriterTable {
    /// Decides what to do with batch `sequence` of `writer_id`, given that `pending` lists the
    /// (writer, sequence) pairs accepted earlier in the same append.
    pub fn check(&self, writer_id: i64, sequence: i32, pending: &[(i64, i32)]) -> SequenceCheck {
        let last_pending = pending
            .iter()
            .rev()
            .find(|(w, _)| *w == writer_id)
            .map(|(_, s)| *s);
        let recent = self.writers.get(&writer_id);
        if let Some(meta) = recent.and_then(|r| r.iter().find(|m| m.sequence == sequence)) {
            return SequenceCheck::Duplicate(*meta);
        }
        let last = last_pending.or_else(|| recent.and_then(|r| r.back()).map(|m| m.sequence));
        match last {
            None => SequenceCheck::Append,
            Some(last) if next_sequence(last) == sequence => SequenceCheck::Append,
            Some(last) => SequenceCheck::OutOfOrder {
                expected: next_sequence(last),
            },
        }
    }

    /// Records an appended batch; when the table is full, forgets the writer that appended
    /// least recently.
    pub fn record(&mut self, writer_id: i64, meta: BatchMeta, writers_max: usize) {
        if !self.writers.contains_key(&writer_id) && self.writers.len() >= writers_max {
            let oldest = self
                .writers
                .iter()
                .min_by_key(|(_, r)| r.back().map_or(i64::MIN, |m| m.last_offset))
                .map(|(w, _)| *w);
            if let Some(oldest) = oldest {
                self.writers.remove(&oldest);
            }
        }
        let recent = self.writers.entry(writer_id).or_default();
        if recent.len() == WRITER_BATCHES_RETAINED {
            recent.pop_front();
        }
        recent.push_back(meta);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.writers.len()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.writers.len() as u32).to_le_bytes());
        let mut ids: Vec<&i64> = self.writers.keys().collect();
        ids.sort();
        for id in ids {
            let recent = &self.writers[id];
            out.extend_from_slice(&id.to_le_bytes());
            out.push(recent.len() as u8);
            for m in recent {
                out.extend_from_slice(&m.sequence.to_le_bytes());
                out.extend_from_slice(&m.base_offset.to_le_bytes());
                out.extend_from_slice(&m.last_offset.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a snapshot, or `None` when it is damaged.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let body = bytes.get(..bytes.len().checked_sub(4)?)?;
        let crc = u32::from_le_bytes(bytes.get(body.len()..)?.try_into().ok()?);
        if crc32c::crc32c(body) != crc {
            return None;
        }
        let mut cursor = Cursor { buf: body, pos: 0 };
        let count = u32::from_le_bytes(cursor.take()?);
        let mut writers = HashMap::new();
        for _ in 0..count {
            let id = i64::from_le_bytes(cursor.take()?);
            let n = cursor.take::<1>()?[0] as usize;
            if n > WRITER_BATCHES_RETAINED {
                return None;
            }
            let mut recent = VecDeque::with_capacity(n);
            for _ in 0..n {
                recent.push_back(BatchMeta {
                    sequence: i32::from_le_bytes(cursor.take()?),
                    base_offset: i64::from_le_bytes(cursor.take()?),
                    last_offset: i64::from_le_bytes(cursor.take()?),
                });
            }
            writers.insert(id, recent);
        }
        (cursor.pos == body.len()).then_some(WriterTable { writers })
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let out = self.buf.get(self.pos..self.pos + N)?.try_into().ok()?;
        self.pos += N;
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one helper: a table after appending `(writer, sequence)` batches of 2 offsets each.
    fn table(batches: &[(i64, i32)]) -> WriterTable {
        let mut t = WriterTable::default();
        for (i, (w, s)) in batches.iter().enumerate() {
            let base = 2 * i as i64;
            t.record(
                *w,
                BatchMeta {
                    sequence: *s,
                    base_offset: base,
                    last_offset: base + 1,
                },
                3,
            );
        }
        t
    }

    #[test]
    fn accepts_next_detects_duplicates_and_gaps() {
        let t = table(&[(1, 0), (1, 1), (2, 7)]);
        assert_eq!(t.check(1, 2, &[]), SequenceCheck::Append);
        assert_eq!(
            t.check(1, 1, &[]),
            SequenceCheck::Duplicate(BatchMeta {
                sequence: 1,
                base_offset: 2,
                last_offset: 3
            })
        );
        assert_eq!(
            t.check(1, 5, &[]),
            SequenceCheck::OutOfOrder { expected: 2 }
        );
        assert_eq!(t.check(1, 3, &[(1, 2)]), SequenceCheck::Append);
        assert_eq!(t.check(9, 42, &[]), SequenceCheck::Append, "unknown writer");
        let wrapped = table(&[(3, i32::MAX)]);
        assert_eq!(wrapped.check(3, 0, &[]), SequenceCheck::Append);
    }

    #[test]
    fn forgets_old_batches_and_least_recent_writers() {
        let t = table(&[(1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (1, 5)]);
        assert_eq!(
            t.check(1, 0, &[]),
            SequenceCheck::OutOfOrder { expected: 6 }
        );
        assert!(matches!(t.check(1, 1, &[]), SequenceCheck::Duplicate(_)));
        let t = table(&[(1, 0), (2, 0), (3, 0), (4, 0)]);
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.check(1, 5, &[]),
            SequenceCheck::Append,
            "writer 1 was evicted"
        );
    }

    #[test]
    fn snapshot_round_trips_and_rejects_damage() {
        let t = table(&[(1, 0), (1, 1), (-5, 3)]);
        let bytes = t.encode();
        assert_eq!(WriterTable::decode(&bytes), Some(t));
        assert_eq!(WriterTable::decode(&bytes[..bytes.len() - 1]), None);
        let mut flipped = bytes.clone();
        flipped[6] ^= 1;
        assert_eq!(WriterTable::decode(&flipped), None);
        assert_eq!(WriterTable::decode(&[]), None);
    }
}
