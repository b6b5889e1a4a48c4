//! The block of a block-based table (RocksDB's `BlockBuilder` format, binary-search index
//! type), shared by data, index, meta-index and properties blocks.
//!
//! A block is its entries, then the restart array, then the restart count:
//! ```text
//! entry    := varint32 shared | varint32 non_shared | varint32 value_len | key[shared..] | value
//! restarts := fixed32 offset of each restart entry (shared = 0), in order
//! footer   := fixed32 restart count (top bit 0: binary search only, no hash index)
//! ```
//! Every `restart_interval`-th entry is a restart point, whose key is stored whole; the others
//! share a prefix with the key before them.

use super::coding::{Cursor, put_fixed32, put_varint32};

/// A block entry: key, value.
pub(crate) type Entry = (Vec<u8>, Vec<u8>);

/// The top bit of a block's footer says it carries a hash index (RocksDB's
/// `kDataBlockBinaryAndHash`); silt never writes one and reads only blocks without.
const HASH_INDEX_BIT: u32 = 1 << 31;

/// Builds one block from keys added in increasing order.
#[derive(Debug)]
pub(crate) struct BlockBuilder {
    buffer: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    /// Entries since the last restart point.
    since_restart: usize,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockBuilder {
    pub(crate) fn new(restart_interval: usize) -> Self {
        assert!(restart_interval >= 1, "a restart interval is at least 1");
        BlockBuilder {
            buffer: Vec::new(),
            restarts: vec![0],
            restart_interval,
            since_restart: 0,
            last_key: Vec::new(),
            entries: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The bytes [`BlockBuilder::finish`] would answer now.
    pub(crate) fn size_estimate(&self) -> usize {
        self.buffer.len() + 4 * self.restarts.len() + 4
    }

    /// Adds an entry. Keys must increase in the table's key order, which the caller checks
    /// (for internal keys that is not bytewise order: `a` + suffix sorts after `a\0` + suffix
    /// bytewise, before it as internal keys). Answers an error when the block would pass
    /// 4 GiB (offsets are 32 bits).
    pub(crate) fn add(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let shared = if self.since_restart < self.restart_interval {
            common_prefix(&self.last_key, key)
        } else {
            let offset = u32::try_from(self.buffer.len())
                .map_err(|_| "a block grew past 4 GiB".to_string())?;
            self.restarts.push(offset);
            self.since_restart = 0;
            0
        };
        let too_long = |what: &str| format!("a block {what} of more than 4 GiB");
        put_varint32(&mut self.buffer, shared as u32);
        let non_shared = u32::try_from(key.len() - shared).map_err(|_| too_long("key"))?;
        put_varint32(&mut self.buffer, non_shared);
        let value_len = u32::try_from(value.len()).map_err(|_| too_long("value"))?;
        put_varint32(&mut self.buffer, value_len);
        self.buffer.extend_from_slice(&key[shared..]);
        self.buffer.extend_from_slice(value);
        u32::try_from(self.buffer.len()).map_err(|_| "a block grew past 4 GiB".to_string())?;
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.since_restart += 1;
        self.entries += 1;
        Ok(())
    }

    /// The finished block, and the builder emptied for the next one.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let mut block = std::mem::take(&mut self.buffer);
        for &restart in &self.restarts {
            put_fixed32(&mut block, restart);
        }
        put_fixed32(&mut block, self.restarts.len() as u32);
        self.restarts = vec![0];
        self.since_restart = 0;
        self.last_key.clear();
        self.entries = 0;
        block
    }
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The entries of a block, in order, with their keys whole. Checks the restart array: its
/// count fits the block, its offsets increase and each names the start of an entry that shares
/// nothing with the key before it; and that the entries end exactly where the array starts.
pub(crate) fn entries(block: &[u8]) -> Result<Vec<Entry>, String> {
    let restarts = restart_offsets(block)?;
    let end = block.len() - 4 * (restarts.len() + 1);
    let mut cursor = Cursor::new(&block[..end]);
    let mut entries: Vec<Entry> = Vec::new();
    let mut next_restart = restarts.iter().peekable();
    let mut key: Vec<u8> = Vec::new();
    while !cursor.is_empty() {
        let at = cursor.position();
        let is_restart = next_restart.peek().is_some_and(|&&r| r as usize == at);
        if is_restart {
            next_restart.next();
        }
        let (shared, non_shared, value_len) = entry_header(&mut cursor, at)?;
        if shared > key.len() || (is_restart && shared != 0) {
            return Err(format!(
                "entry at byte {at} shares {shared} bytes with a key of {} (restart point: \
                 {is_restart})",
                key.len()
            ));
        }
        let delta = cursor
            .bytes(non_shared)
            .ok_or("an entry's key runs past the block")?;
        let value = cursor
            .bytes(value_len)
            .ok_or("an entry's value runs past the block")?;
        key.truncate(shared);
        key.extend_from_slice(delta);
        entries.push((key.clone(), value.to_vec()));
    }
    match next_restart.next() {
        None => Ok(entries),
        // An empty block: its one restart point names where an entry would start.
        Some(0) if entries.is_empty() && restarts.len() == 1 => Ok(entries),
        Some(offset) => Err(format!(
            "restart offset {offset} is not the start of an entry"
        )),
    }
}

/// The restart array of a block, checked to fit it and to increase from 0.
fn restart_offsets(block: &[u8]) -> Result<Vec<u32>, String> {
    let mut footer = Cursor::new(
        block
            .get(block.len().saturating_sub(4)..)
            .unwrap_or_default(),
    );
    let count = footer.fixed32().ok_or("a block shorter than its footer")?;
    if count & HASH_INDEX_BIT != 0 {
        return Err("a block with a hash index (silt writes none)".into());
    }
    let array_bytes = (count as usize + 1) * 4;
    let Some(array_start) = block.len().checked_sub(array_bytes) else {
        return Err(format!(
            "{count} restart points do not fit a block of {} bytes",
            block.len()
        ));
    };
    if count == 0 {
        return Err("a block without a restart point".into());
    }
    let mut array = Cursor::new(&block[array_start..]);
    let offsets: Vec<u32> = (0..count).filter_map(|_| array.fixed32()).collect();
    let increasing = offsets.windows(2).all(|w| w[0] < w[1]);
    if offsets[0] != 0 || !increasing || offsets.iter().any(|&o| o as usize > array_start) {
        return Err(format!(
            "restart offsets {offsets:?} do not increase from 0 inside the block"
        ));
    }
    Ok(offsets)
}

fn entry_header(cursor: &mut Cursor<'_>, at: usize) -> Result<(usize, usize, usize), String> {
    let mut field = || {
        cursor
            .varint32()
            .map(|v| v as usize)
            .ok_or_else(|| format!("entry at byte {at} has a malformed header"))
    };
    Ok((field()?, field()?, field()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one helper: builds a block of `keys` (values `v<key>`) at `interval`, checks it reads
    /// back, and returns its bytes.
    fn build(interval: usize, keys: &[&str]) -> Vec<u8> {
        let mut builder = BlockBuilder::new(interval);
        for key in keys {
            builder
                .add(key.as_bytes(), format!("v{key}").as_bytes())
                .unwrap();
        }
        assert_eq!(builder.size_estimate(), {
            let mut copy = BlockBuilder::new(interval);
            for key in keys {
                copy.add(key.as_bytes(), format!("v{key}").as_bytes())
                    .unwrap();
            }
            copy.finish().len()
        });
        let block = builder.finish();
        let read: Vec<(Vec<u8>, Vec<u8>)> = entries(&block).unwrap();
        let expected: Vec<(Vec<u8>, Vec<u8>)> = keys
            .iter()
            .map(|k| (k.as_bytes().to_vec(), format!("v{k}").into_bytes()))
            .collect();
        assert_eq!(read, expected);
        assert!(builder.is_empty(), "finish empties the builder");
        block
    }

    #[test]
    fn entries_share_prefixes_between_restart_points() {
        let block = build(2, &["apple", "apply", "apricot"]);
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[0, 5, 6][..], b"apple", b"vapple",       // restart 0 at byte 0
            &[4, 1, 6], b"y", b"vapply",               // shares "appl"
            &[0, 7, 8], b"apricot", b"vapricot",       // restart 1 at byte 24
            &[0, 0, 0, 0], &[24, 0, 0, 0],             // restart offsets
            &[2, 0, 0, 0],                             // restart count, top bit 0
        ]
        .concat();
        assert_eq!(block, expected);
    }

    #[test]
    fn an_interval_of_one_stores_every_key_whole() {
        let block = build(1, &["a", "ab", "abc"]);
        let restarts = restart_offsets(&block).unwrap();
        assert_eq!(restarts.len(), 3);
        assert_eq!(
            &block[block.len() - 4..],
            &[3, 0, 0, 0],
            "three restart points"
        );
    }

    #[test]
    fn sixteen_keys_per_restart_by_default() {
        let keys: Vec<String> = (0..40).map(|i| format!("key{i:03}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let block = build(16, &keys);
        assert_eq!(
            restart_offsets(&block).unwrap().len(),
            3,
            "entries 0, 16 and 32"
        );
    }

    #[test]
    fn an_empty_block_has_one_restart_point() {
        let block = BlockBuilder::new(16).finish();
        assert_eq!(block, [0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(entries(&block).unwrap(), vec![]);
    }

    /// Each damaged block is refused with a reason, never read wrongly or panicked on.
    #[test]
    fn damaged_blocks_are_refused() {
        let good = build(2, &["apple", "apply", "apricot"]);
        let with = |at: usize, byte: u8| {
            let mut block = good.clone();
            block[at] = byte;
            block
        };
        let len = good.len();
        for (what, block) in [
            ("too short", vec![1, 0, 0]),
            ("no restart point", vec![0, 0, 0, 0]),
            ("a hash index", with(len - 1, 0x80)),
            ("more restarts than bytes", with(len - 4, 200)),
            ("a restart offset inside an entry", with(len - 8, 5)),
            ("a restart entry that shares", with(24, 1)),
            ("a key longer than the block", with(1, 120)),
            ("a first restart offset not 0", with(len - 12, 1)),
        ] {
            assert!(entries(&block).is_err(), "{what}: {:?}", entries(&block));
        }
    }
}
