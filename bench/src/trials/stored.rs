//! The batches a table's log tablets hold on disk, read straight from the segment files under
//! the data directory (`hotstore/tables/table-<id>/bucket-<b>/log/<base offset>.log`, a
//! partition's under `table-<id>/partition-<partition id>/`, whole batches back to back), so a finding can name the batch each copy of a row came in: its base
//! offset, writer id and batch sequence.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use silt_hotstore::codec::BatchHeader;

/// One stored batch.
#[derive(Debug, Clone)]
pub(super) struct StoredBatch {
    pub header: BatchHeader,
    pub segment: String,
    pub position: u64,
}

impl StoredBatch {
    pub fn describe(&self) -> String {
        let writer = if self.header.writer_id < 0 {
            "no writer id".to_string()
        } else {
            format!(
                "writer {} seq {}",
                self.header.writer_id, self.header.batch_sequence
            )
        };
        format!(
            "batch base {} (offsets {}..={}, {} records), {writer}, committed at {} ms, {} @{}",
            self.header.base_offset,
            self.header.base_offset,
            self.header.last_offset(),
            self.header.record_count,
            self.header.commit_timestamp_ms,
            self.segment,
            self.position
        )
    }
}

/// Every bucket's stored batches of one table, by base offset.
#[derive(Debug, Default)]
pub(super) struct StoredLog {
    buckets: BTreeMap<i32, BTreeMap<i64, StoredBatch>>,
    /// Problems met while reading (a segment that cannot be read, a torn tail).
    pub problems: Vec<String>,
}

impl StoredLog {
    /// Reads the buckets of table `table_id`, or of its partition `partition`.
    pub fn read(data: &Path, table_id: i64, partition: Option<i64>, buckets: i32) -> StoredLog {
        let mut stored = StoredLog::default();
        let mut table = data
            .join("hotstore")
            .join("tables")
            .join(format!("table-{table_id}"));
        if let Some(id) = partition {
            table = table.join(format!("partition-{id}"));
        }
        for bucket in 0..buckets {
            let dir = table.join(format!("bucket-{bucket}")).join("log");
            let batches = stored.buckets.entry(bucket).or_default();
            for segment in segments(&dir) {
                read_segment(&segment, batches, &mut stored.problems);
            }
        }
        stored
    }

    /// The stored batch holding `offset` of `bucket`.
    pub fn batch_of(&self, bucket: i32, offset: i64) -> Option<&StoredBatch> {
        let (_, batch) = self.buckets.get(&bucket)?.range(..=offset).next_back()?;
        (offset <= batch.header.last_offset()).then_some(batch)
    }

    /// The offset after the last stored batch of `bucket`.
    pub fn end(&self, bucket: i32) -> Option<i64> {
        let (_, last) = self.buckets.get(&bucket)?.last_key_value()?;
        Some(last.header.next_offset())
    }

    /// `bucket b offset o in <batch>`, or says that no stored batch holds it.
    pub fn describe_copy(&self, bucket: i32, offset: i64) -> String {
        match self.batch_of(bucket, offset) {
            Some(batch) => format!("bucket {bucket} offset {offset} in {}", batch.describe()),
            None => format!("bucket {bucket} offset {offset} in no stored batch"),
        }
    }
}

/// The `<20 digits>.log` segment files of a log tablet directory, in offset order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().to_string();
            let stem = name.strip_suffix(".log")?;
            let base = (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
                .then(|| stem.parse::<i64>().ok())??;
            Some((base, entry.path()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

fn read_segment(path: &Path, batches: &mut BTreeMap<i64, StoredBatch>, problems: &mut Vec<String>) {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            problems.push(format!("cannot read {}: {e}", path.display()));
            return;
        }
    };
    let segment = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut position = 0usize;
    while position < bytes.len() {
        let header = match BatchHeader::parse(&bytes[position..], position as u64) {
            Ok(h) if h.size_bytes() <= bytes.len() - position => h,
            Ok(h) => {
                problems.push(format!(
                    "{} ends inside a batch at {position} ({} of {} bytes)",
                    path.display(),
                    bytes.len() - position,
                    h.size_bytes()
                ));
                return;
            }
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                return;
            }
        };
        let size = header.size_bytes();
        let batch = StoredBatch {
            header,
            segment: segment.clone(),
            position: position as u64,
        };
        if let Some(other) = batches.insert(header.base_offset, batch) {
            problems.push(format!(
                "two stored batches at base offset {}: {} and {}",
                header.base_offset,
                other.describe(),
                batches[&header.base_offset].describe()
            ));
        }
        position += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A magic-0, append-only batch of `records` offsets from `base` with 4 payload bytes.
    fn batch(base: i64, records: i32, writer_id: i64, sequence: i32) -> Vec<u8> {
        let mut b = vec![0u8; 52];
        b[0..8].copy_from_slice(&base.to_le_bytes());
        b[8..12].copy_from_slice(&(52i32 - 12).to_le_bytes());
        b[27] = 1;
        b[28..32].copy_from_slice(&(records - 1).to_le_bytes());
        b[32..40].copy_from_slice(&writer_id.to_le_bytes());
        b[40..44].copy_from_slice(&sequence.to_le_bytes());
        b[44..48].copy_from_slice(&records.to_le_bytes());
        b
    }

    #[test]
    fn copies_are_found_in_the_stored_batches_and_a_torn_tail_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("hotstore/tables/table-7/bucket-0/log");
        std::fs::create_dir_all(&log).unwrap();
        let first = [batch(0, 3, 11, 0), batch(3, 2, 12, 0)].concat();
        std::fs::write(log.join(format!("{:020}.log", 0)), first).unwrap();
        let mut second = batch(5, 4, 11, 1);
        second.extend_from_slice(&batch(9, 1, 11, 2)[..50]);
        std::fs::write(log.join(format!("{:020}.log", 5)), second).unwrap();
        std::fs::write(log.join(format!("{:020}.index", 0)), b"not a log").unwrap();

        let stored = StoredLog::read(dir.path(), 7, None, 2);
        let cases = [
            (0, 2, Some((0, 11, 0))),
            (0, 4, Some((3, 12, 0))),
            (0, 8, Some((5, 11, 1))),
        ];
        for (bucket, offset, expected) in cases {
            let found = stored.batch_of(bucket, offset).map(|b| {
                (
                    b.header.base_offset,
                    b.header.writer_id,
                    b.header.batch_sequence,
                )
            });
            assert_eq!(found, expected, "bucket {bucket} offset {offset}");
        }
        assert!(
            stored.batch_of(0, 9).is_none(),
            "the torn batch is not a stored batch"
        );
        assert!(stored.batch_of(1, 0).is_none(), "bucket 1 holds nothing");
        assert!(stored.describe_copy(0, 4).contains("writer 12 seq 0"));
        assert_eq!(stored.problems.len(), 1, "{:?}", stored.problems);
        assert!(stored.problems[0].contains("ends inside a batch"));
    }
}
