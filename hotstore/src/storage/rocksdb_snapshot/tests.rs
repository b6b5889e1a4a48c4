//! Directories as a whole: what [`DirWriter`] writes reads back through [`SnapshotReader`],
//! and the files are laid out as RocksDB expects them.

use super::*;

/// The one helper: writes `entries` with `config` into a fresh directory and reads them back;
/// answers what was written and the directory.
fn write_dir(
    entries: &[(Vec<u8>, Vec<u8>)],
    config: WriterConfig,
) -> (WrittenDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = DirWriter::create(dir.path(), config);
    for (key, value) in entries {
        writer.add(key, value).unwrap();
    }
    let written = writer.finish().unwrap();
    let reader = SnapshotReader::open(dir.path()).unwrap();
    let read: Vec<(Vec<u8>, Vec<u8>)> = reader.entries().map(Result::unwrap).collect();
    assert_eq!(read, entries, "read back");
    assert_eq!(written.entries, entries.len() as u64);
    for file in &written.files {
        let on_disk = std::fs::metadata(dir.path().join(&file.name))
            .unwrap()
            .len();
        assert_eq!(on_disk, file.bytes, "{}", file.name);
    }
    (written, dir)
}

fn rows(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..n as u32)
        .map(|i| {
            (
                i.to_be_bytes().to_vec(),
                [&[1, 0][..], &vec![b'r'; (i % 97) as usize]].concat(),
            )
        })
        .collect()
}

fn names(written: &WrittenDir) -> Vec<&str> {
    written.files.iter().map(|f| f.name.as_str()).collect()
}

fn small_tables() -> WriterConfig {
    WriterConfig {
        table_bytes_target: 8 * 1024,
        block_bytes_target: 512,
    }
}

#[test]
fn an_empty_snapshot_is_a_manifest_without_tables() {
    let (written, dir) = write_dir(&[], WriterConfig::default());
    assert_eq!(names(&written), ["MANIFEST-000001", "CURRENT"]);
    assert_eq!(
        std::fs::read(dir.path().join("CURRENT")).unwrap(),
        b"MANIFEST-000001\n"
    );
    let manifest = std::fs::read(dir.path().join("MANIFEST-000001")).unwrap();
    let records = manifest::read_records(&manifest).unwrap();
    let edit = VersionEdit::decode(&records[0]).unwrap();
    assert_eq!(
        edit,
        VersionEdit {
            comparator: "leveldb.BytewiseComparator".into(),
            log_number: 0,
            next_file_number: 2,
            last_sequence: 0,
            files: vec![],
        }
    );
}

#[test]
fn rows_fill_tables_in_key_order_on_level_6() {
    let entries = rows(2000);
    let (written, dir) = write_dir(&entries, small_tables());
    let tables: Vec<&str> = names(&written)
        .into_iter()
        .filter(|n| n.ends_with(".sst"))
        .collect();
    assert!(tables.len() > 5, "{tables:?}");
    assert_eq!(tables[0], "000002.sst");
    assert_eq!(tables[1], "000003.sst");
    let manifest = std::fs::read(dir.path().join("MANIFEST-000001")).unwrap();
    let edit = VersionEdit::decode(&manifest::read_records(&manifest).unwrap()[0]).unwrap();
    assert_eq!(edit.next_file_number, 2 + tables.len() as u64);
    assert!(
        edit.files
            .iter()
            .all(|f| f.level == 6 && f.largest_seqno == 0)
    );
    assert_eq!(
        edit.files[0].smallest,
        [&0u32.to_be_bytes()[..], &[1, 0, 0, 0, 0, 0, 0, 0]].concat()
    );
    assert_eq!(
        SnapshotReader::open(dir.path()).unwrap().table_names(),
        tables,
        "the reader lists the tables the MANIFEST names"
    );
}

/// With thousands of tables the one version edit is a record longer than a 32 KiB log block:
/// framed in fragments, and read back whole.
#[test]
fn a_manifest_of_many_tables_spans_log_blocks() {
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..3000u32)
        .map(|i| {
            (
                [b"a key long enough to matter ", &i.to_be_bytes()[..]].concat(),
                vec![0, 0],
            )
        })
        .collect();
    let config = WriterConfig {
        table_bytes_target: 1,
        block_bytes_target: 1,
    };
    let (written, _dir) = write_dir(&entries, config);
    let manifest = written
        .files
        .iter()
        .find(|f| f.name.starts_with("MANIFEST"))
        .unwrap();
    assert!(
        manifest.bytes > 2 * manifest::LOG_BLOCK_BYTES as u64,
        "{manifest:?}"
    );
}

#[test]
fn keys_out_of_order_across_tables_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = DirWriter::create(
        dir.path(),
        WriterConfig {
            table_bytes_target: 1,
            block_bytes_target: 1,
        },
    );
    writer.add(b"b", b"").unwrap();
    for key in [&b"a"[..], b"b"] {
        assert!(matches!(
            writer.add(key, b""),
            Err(Error::KeysOutOfOrder { entry: 1, .. })
        ));
    }
}

/// What a reader must not accept: a table whose size differs from its MANIFEST entry (RocksDB's
/// "Sst file size mismatch"), a damaged MANIFEST, a CURRENT without its newline.
#[test]
fn damaged_directories_are_refused() {
    let (_, dir) = write_dir(&rows(300), small_tables());
    let path = |name: &str| dir.path().join(name);
    let read_all = || -> Result<usize> {
        let reader = SnapshotReader::open(dir.path())?;
        reader.entries().try_fold(0, |n, e| e.map(|_| n + 1))
    };
    let table = std::fs::read(path("000003.sst")).unwrap();
    std::fs::write(path("000003.sst"), [&table[..], b"x"].concat()).unwrap();
    let error = read_all().unwrap_err().to_string();
    assert!(
        error.contains("000003.sst") && error.contains("MANIFEST says"),
        "{error}"
    );
    std::fs::write(path("000003.sst"), &table).unwrap();
    assert_eq!(read_all().unwrap(), 300);

    let manifest = std::fs::read(path("MANIFEST-000001")).unwrap();
    let mut damaged = manifest.clone();
    damaged[10] ^= 1;
    std::fs::write(path("MANIFEST-000001"), &damaged).unwrap();
    assert!(read_all().unwrap_err().to_string().contains("checksum"));
    std::fs::write(path("MANIFEST-000001"), &manifest).unwrap();

    std::fs::write(path("CURRENT"), b"MANIFEST-000001").unwrap();
    assert!(read_all().unwrap_err().to_string().contains("newline"));
}
