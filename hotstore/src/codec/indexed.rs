//! The INDEXED log format (`table.log.format = INDEXED`, written by Fluss's Java client): a
//! batch's records follow its header (and statistics, which this format never has), each as a
//! little-endian `i32` length, then that many bytes: a change-type byte and an `IndexedRow`.
//! The server stores and serves these batches as received; it only checks that their records
//! frame exactly the batch and number what the header counts, so every reader can walk them.

/// The change-type bytes Fluss defines (`ChangeType`): +A, +I, -U, +U, -D.
const CHANGE_TYPES: std::ops::RangeInclusive<u8> = 0..=4;

/// Checks that `records` holds exactly `record_count` length-framed records, each with a known
/// change type and a row of at least one byte of null bits; the reason otherwise.
pub fn check_records(records: &[u8], record_count: i32) -> Result<(), String> {
    let mut rest = records;
    for index in 0..record_count {
        let Some((length, tail)) = rest.split_first_chunk::<4>() else {
            return Err(format!("record {index} has no length"));
        };
        let length = i32::from_le_bytes(*length);
        let Some(body) = usize::try_from(length).ok().and_then(|n| tail.get(..n)) else {
            return Err(format!(
                "record {index} claims {length} bytes, {} are left",
                tail.len()
            ));
        };
        match body.split_first() {
            Some((change_type, row)) if CHANGE_TYPES.contains(change_type) && !row.is_empty() => {}
            Some((change_type, _)) if !CHANGE_TYPES.contains(change_type) => {
                return Err(format!(
                    "record {index} has unknown change type {change_type}"
                ));
            }
            _ => return Err(format!("record {index} holds no row")),
        }
        rest = &tail[body.len()..];
    }
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes follow the {record_count} records the header counts",
            rest.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(change_type: u8, row: &[u8]) -> Vec<u8> {
        let mut out = ((row.len() + 1) as i32).to_le_bytes().to_vec();
        out.push(change_type);
        out.extend_from_slice(row);
        out
    }

    #[test]
    fn records_must_frame_the_batch_exactly() {
        let two = [record(4, &[0, 1, 2]), record(0, &[0])].concat();
        let cases: Vec<(&str, Vec<u8>, i32, bool)> = vec![
            ("two records", two.clone(), 2, true),
            ("no records", vec![], 0, true),
            ("fewer than counted", two.clone(), 3, false),
            ("more than counted", two.clone(), 1, false),
            ("truncated", two[..two.len() - 1].to_vec(), 2, false),
            ("negative length", (-5i32).to_le_bytes().to_vec(), 1, false),
            ("unknown change type", record(9, &[0]), 1, false),
            ("empty row", record(0, &[]), 1, false),
            (
                "length past the end",
                i32::MAX.to_le_bytes().to_vec(),
                1,
                false,
            ),
        ];
        for (what, records, count, ok) in cases {
            assert_eq!(check_records(&records, count).is_ok(), ok, "{what}");
        }
    }
}
