//! Deletion vectors in Delta's format (PROTOCOL.md, "Deletion Vector Format"), for primary-key
//! lake tables: a commit marks the rows its changes supersede as deleted instead of rewriting
//! the files that hold them.
//!
//! A vector file starts with the format version byte (1). Each vector in it is: its size
//! (u32 big-endian, counting the magic and the bitmap), the magic 1681511377 (u32
//! little-endian), a 64-bit roaring bitmap of row positions in the portable format, and a
//! CRC-32 of magic + bitmap (u32 big-endian). A descriptor of storage type `u` names the file
//! relative to the table root by a z85-encoded UUID, optionally after a prefix directory.

use deltalake::Path;
use deltalake::kernel::{DeletionVectorDescriptor, StorageType};
use object_store::{GetOptions, GetRange, ObjectStore};
use roaring::RoaringTreemap;

use super::error::{Error, Result};

const MAGIC: u32 = 1_681_511_377;
const FORMAT_VERSION: u8 = 1;
/// The z85 encoding of a 16-byte UUID.
const ENCODED_UUID_LEN: usize = 20;

/// One vector file being built: several vectors, one per data file of a commit.
pub struct DvFileWriter {
    uuid: uuid::Uuid,
    bytes: Vec<u8>,
}

impl DvFileWriter {
    pub fn new() -> Self {
        DvFileWriter {
            uuid: uuid::Uuid::new_v4(),
            bytes: vec![FORMAT_VERSION],
        }
    }

    /// Appends `deleted` and returns the descriptor an add action carries for it.
    pub fn push(&mut self, deleted: &RoaringTreemap) -> Result<DeletionVectorDescriptor> {
        let mut bitmap = Vec::with_capacity(deleted.serialized_size());
        deleted
            .serialize_into(&mut bitmap)
            .map_err(|e| Error::Internal(format!("serializing a deletion vector: {e}")))?;
        let too_big = || Error::Internal("a deletion vector file over 2 GiB".into());
        let offset = i32::try_from(self.bytes.len()).map_err(|_| too_big())?;
        let size = i32::try_from(bitmap.len() + 4).map_err(|_| too_big())?;
        self.bytes.extend_from_slice(&(size as u32).to_be_bytes());
        self.bytes.extend_from_slice(&MAGIC.to_le_bytes());
        self.bytes.extend_from_slice(&bitmap);
        self.bytes
            .extend_from_slice(&checksum(&bitmap).to_be_bytes());
        Ok(DeletionVectorDescriptor {
            storage_type: StorageType::UuidRelativePath,
            path_or_inline_dv: z85::encode(self.uuid.as_bytes()),
            offset: Some(offset),
            size_in_bytes: size,
            cardinality: deleted.len() as i64,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.len() == 1
    }

    /// The file's path relative to the table root.
    pub fn path(&self) -> String {
        format!("deletion_vector_{}.bin", self.uuid)
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

fn checksum(bitmap: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&MAGIC.to_le_bytes());
    crc.update(bitmap);
    crc.finalize()
}

/// The path, relative to the table root, of the file a descriptor points into; `None` for an
/// inline vector.
pub fn relative_path(dv: &DeletionVectorDescriptor) -> Result<Option<String>> {
    let encoded = dv.path_or_inline_dv.as_str();
    match dv.storage_type {
        StorageType::Inline => Ok(None),
        StorageType::UuidRelativePath => {
            let split = encoded
                .len()
                .checked_sub(ENCODED_UUID_LEN)
                .filter(|&s| encoded.is_char_boundary(s))
                .ok_or_else(|| corrupt(dv, "the encoded uuid is too short"))?;
            let (prefix, id) = encoded.split_at(split);
            let bytes = z85::decode(id).map_err(|_| corrupt(dv, "the uuid is not z85"))?;
            let uuid = uuid::Uuid::from_slice(&bytes)
                .map_err(|_| corrupt(dv, "the uuid is not 16 bytes"))?;
            Ok(Some(if prefix.is_empty() {
                format!("deletion_vector_{uuid}.bin")
            } else {
                format!("{prefix}/deletion_vector_{uuid}.bin")
            }))
        }
        StorageType::AbsolutePath => Err(corrupt(
            dv,
            "absolute deletion vector paths are not supported (silt writes relative ones)",
        )),
    }
}

fn corrupt(dv: &DeletionVectorDescriptor, why: &str) -> Error {
    Error::Internal(format!(
        "deletion vector {:?} ({:?}): {why}",
        dv.path_or_inline_dv, dv.storage_type
    ))
}

/// Reads the rows a descriptor deletes. `table_root` is the table's path in `store`.
pub async fn read(
    store: &dyn ObjectStore,
    table_root: &Path,
    dv: &DeletionVectorDescriptor,
) -> Result<RoaringTreemap> {
    let Some(relative) = relative_path(dv)? else {
        let bytes = z85::decode(&dv.path_or_inline_dv)
            .map_err(|_| corrupt(dv, "the inline vector is not z85"))?;
        return decode(dv, &bytes);
    };
    let size = usize::try_from(dv.size_in_bytes).map_err(|_| corrupt(dv, "negative size"))?;
    let offset =
        usize::try_from(dv.offset.unwrap_or(1)).map_err(|_| corrupt(dv, "negative offset"))?;
    let path = Path::from(format!("{table_root}/{relative}").trim_start_matches('/'));
    let storage = |source| Error::Storage {
        path: path.to_string(),
        source,
    };
    // size field, magic + bitmap, crc
    let range = offset as u64..(offset + 4 + size + 4) as u64;
    let bytes = store
        .get_opts(
            &path,
            GetOptions {
                range: Some(GetRange::Bounded(range)),
                ..GetOptions::default()
            },
        )
        .await
        .map_err(storage)?
        .bytes()
        .await
        .map_err(storage)?;
    if bytes.len() != 4 + size + 4 {
        return Err(corrupt(dv, "the file is shorter than the vector"));
    }
    let stored_size = u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    if stored_size != size {
        return Err(corrupt(dv, "the size in the file differs from the log's"));
    }
    let crc = u32::from_be_bytes(bytes[4 + size..].try_into().expect("4 bytes"));
    if crc != checksum(&bytes[8..4 + size]) {
        return Err(corrupt(dv, "checksum mismatch"));
    }
    decode(dv, &bytes[4..4 + size])
}

/// `bytes` = magic + bitmap.
fn decode(dv: &DeletionVectorDescriptor, bytes: &[u8]) -> Result<RoaringTreemap> {
    let magic = bytes
        .get(..4)
        .map(|m| u32::from_le_bytes(m.try_into().expect("4 bytes")))
        .ok_or_else(|| corrupt(dv, "no magic"))?;
    if magic != MAGIC {
        return Err(corrupt(dv, "wrong magic (not a portable roaring bitmap)"));
    }
    let bitmap = RoaringTreemap::deserialize_from(&bytes[4..])
        .map_err(|e| corrupt(dv, &format!("bad bitmap: {e}")))?;
    if bitmap.len() as i64 != dv.cardinality {
        return Err(corrupt(dv, "cardinality differs from the log's"));
    }
    Ok(bitmap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt as _;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn vectors_round_trip_through_a_shared_file() {
        let store = InMemory::new();
        let root = Path::from("lake/t");
        let mut writer = DvFileWriter::new();
        let a: RoaringTreemap = [0u64, 5, 7, 1 << 33].into_iter().collect();
        let b: RoaringTreemap = (100u64..10_000).step_by(3).collect();
        let da = writer.push(&a).unwrap();
        let db = writer.push(&b).unwrap();
        assert_eq!(da.offset, Some(1));
        assert_eq!(db.cardinality, b.len() as i64);
        let path = Path::from(format!("{root}/{}", writer.path()));
        assert_eq!(
            relative_path(&da).unwrap().as_deref(),
            Some(writer.path().as_str())
        );
        store.put(&path, writer.into_bytes().into()).await.unwrap();
        assert_eq!(read(&store, &root, &da).await.unwrap(), a);
        assert_eq!(read(&store, &root, &db).await.unwrap(), b);
    }

    #[tokio::test]
    async fn a_damaged_vector_is_an_error_not_a_wrong_answer() {
        let store = InMemory::new();
        let root = Path::from("t");
        let mut writer = DvFileWriter::new();
        let dv = writer.push(&[1u64, 2, 3].into_iter().collect()).unwrap();
        let path = Path::from(format!("{root}/{}", writer.path()));
        let mut bytes = writer.into_bytes();
        let last = bytes.len() - 6;
        bytes[last] ^= 0xff;
        store.put(&path, bytes.into()).await.unwrap();
        let err = read(&store, &root, &dv).await.unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        let mut wrong = dv.clone();
        wrong.cardinality = 4;
        wrong.path_or_inline_dv = "short".into();
        assert!(read(&store, &root, &wrong).await.is_err());
    }
}
