//! Per-writer idempotence state of one log tablet: the last few batches of every writer.
//!
//! The rule is Fluss's (`WriterAppendInfo` in apache/fluss): a batch whose sequence equals one
//! of its writer's last [`WRITER_BATCHES_RETAINED`] batches is a retry and is answered with the
//! original offsets; otherwise it must carry the next sequence, and a writer the tablet does
//! not know must start at sequence 0. Anything else is out of order. Accepting an unknown
//! writer at any sequence lost acknowledged writes: when batch 1 of a new writer reached the
//! server before batch 0, 1 was stored, 0 was answered out of order, and the client (which
//! reads "out of order at or below my last acknowledged sequence" as "already committed")
//! dropped it.
//!
//! A snapshot (`<base>.writers`) is written when a segment is rolled and holds the state for all
//! offsets below `<base>`; recovery loads the active segment's snapshot and replays the active
//! segment on top. Layout: `count u32`, then per writer `writer_id i64 | n u8 | n × (sequence
//! i32 | base_offset i64 | last_offset i64)`, then a CRC-32C (u32) of everything before it.
//!
//! A write that changed nothing (a primary-key upsert of an unchanged row, a delete of a missing
//! key) appends no batch, yet its sequence must be remembered across a restart, or its retry
//! would be applied after another writer's change. Such a write leaves a [`WriterMark`] in the
//! active segment's mark journal (`<base>.marks`, fsynced before the write is acknowledged):
//! `writer_id i64 | sequence i32 | log_end_offset i64 | crc32c u32` per mark, replayed in offset
//! order among the active segment's batches. A roll's snapshot covers the marks before it.

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
            None if sequence == 0 => SequenceCheck::Append,
            None => SequenceCheck::OutOfOrder { expected: 0 },
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

    /// Applies a mark replayed from the journal, unless the writer already holds its sequence
    /// (a mark the segment snapshot already covers).
    pub fn record_mark(&mut self, mark: &WriterMark, writers_max: usize) {
        let known = self
            .writers
            .get(&mark.writer_id)
            .is_some_and(|r| r.iter().any(|m| m.sequence == mark.sequence));
        if !known {
            self.record(mark.writer_id, mark.meta(), writers_max);
        }
    }

    /// The highest writer id this tablet remembers (new writer ids must lie above every one).
    pub fn max_writer_id(&self) -> Option<i64> {
        self.writers.keys().copied().max()
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
        super::with_crc(out)
    }

    /// Decodes a snapshot, or `None` when it is damaged.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let body = super::checked_body(bytes)?;
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

/// A write of `writer_id` with batch `sequence` that changed nothing, acknowledged when the
/// log ended at `log_end_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriterMark {
    pub writer_id: i64,
    pub sequence: i32,
    pub log_end_offset: i64,
}

pub(crate) const MARK_BYTES: usize = 24;

impl WriterMark {
    /// As batch metadata: an empty range at the log end (a retry is answered with that end).
    pub fn meta(&self) -> BatchMeta {
        BatchMeta {
            sequence: self.sequence,
            base_offset: self.log_end_offset,
            last_offset: self.log_end_offset - 1,
        }
    }

    pub fn encode(&self) -> [u8; MARK_BYTES] {
        let mut out = [0u8; MARK_BYTES];
        out[..8].copy_from_slice(&self.writer_id.to_le_bytes());
        out[8..12].copy_from_slice(&self.sequence.to_le_bytes());
        out[12..20].copy_from_slice(&self.log_end_offset.to_le_bytes());
        let crc = crc32c::crc32c(&out[..20]);
        out[20..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a journal: the marks up to the first torn or damaged one, and the bytes they
    /// take (the rest is a torn tail to cut).
    pub fn decode_all(bytes: &[u8]) -> (Vec<WriterMark>, usize) {
        let mut marks = Vec::with_capacity(bytes.len() / MARK_BYTES);
        for chunk in bytes.chunks_exact(MARK_BYTES) {
            let crc = u32::from_le_bytes(chunk[20..].try_into().expect("4 bytes"));
            if crc32c::crc32c(&chunk[..20]) != crc {
                break;
            }
            marks.push(WriterMark {
                writer_id: i64::from_le_bytes(chunk[..8].try_into().expect("8 bytes")),
                sequence: i32::from_le_bytes(chunk[8..12].try_into().expect("4 bytes")),
                log_end_offset: i64::from_le_bytes(chunk[12..20].try_into().expect("8 bytes")),
            });
        }
        let valid = marks.len() * MARK_BYTES;
        (marks, valid)
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
        assert_eq!(
            t.check(9, 42, &[]),
            SequenceCheck::OutOfOrder { expected: 0 },
            "an unknown writer starts at sequence 0"
        );
        assert_eq!(t.check(9, 0, &[]), SequenceCheck::Append);
        assert_eq!(t.check(9, 1, &[(9, 0)]), SequenceCheck::Append);
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
            SequenceCheck::OutOfOrder { expected: 0 },
            "writer 1 was evicted: it is unknown again"
        );
    }

    #[test]
    fn marks_round_trip_stop_at_damage_and_count_as_batches() {
        let marks = [
            WriterMark {
                writer_id: 4,
                sequence: 0,
                log_end_offset: 10,
            },
            WriterMark {
                writer_id: 4,
                sequence: 1,
                log_end_offset: 10,
            },
        ];
        let mut journal: Vec<u8> = marks.iter().flat_map(|m| m.encode()).collect();
        journal.extend_from_slice(&[1, 2, 3]);
        assert_eq!(
            WriterMark::decode_all(&journal),
            (marks.to_vec(), 2 * MARK_BYTES)
        );
        journal[MARK_BYTES + 3] ^= 1;
        assert_eq!(
            WriterMark::decode_all(&journal),
            (marks[..1].to_vec(), MARK_BYTES)
        );

        let mut t = WriterTable::default();
        t.record_mark(&marks[0], 3);
        t.record_mark(&marks[0], 3);
        assert_eq!(t.check(4, 1, &[]), SequenceCheck::Append);
        assert_eq!(
            t.check(4, 0, &[]),
            SequenceCheck::Duplicate(marks[0].meta())
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
