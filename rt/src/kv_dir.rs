//! The directory of an embedded LSM database (fjall) that a kill interrupted while the database
//! was being created.
//!
//! fjall creates a database in this order: its `lock` file, an empty `keyspaces` folder, the
//! first journal `0.jnl` (preallocated and synced), and last the `version` marker, synced. When
//! it opens a directory it looks only at the marker: without one it creates the database anew,
//! and the journal it creates with `create_new` already exists, so every later open fails with
//! `AlreadyExists` and the directory stays unusable. No write can have gone through a database
//! whose marker was never written (writes begin after the open returns), so such a directory is
//! emptied of what the creation left and created again.

use std::io;
use std::path::Path;

/// What fjall writes before its `version` marker.
const CREATION_ENTRIES: [&str; 3] = ["lock", "keyspaces", "0.jnl"];
const VERSION_MARKER: &str = "version";

/// Removes what an interrupted creation of the database in `dir` left: `lock`, an empty
/// `keyspaces` and `0.jnl`, with no `version` marker or an empty one. Returns whether it removed
/// anything. Leaves alone a directory that holds anything else (a database with data, or not a
/// database), so its open fails with fjall's own error.
pub fn clear_interrupted_creation(dir: &Path) -> io::Result<bool> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry?.file_name());
    }
    let marker = dir.join(VERSION_MARKER);
    let marker_written = match std::fs::metadata(&marker) {
        Ok(meta) => meta.len() > 0,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    let only_creation = names.iter().all(|name| {
        name.to_str()
            .is_some_and(|n| n == VERSION_MARKER || CREATION_ENTRIES.contains(&n))
    });
    let keyspaces = dir.join("keyspaces");
    let keyspaces_empty = match std::fs::read_dir(&keyspaces) {
        Ok(mut inside) => inside.next().is_none(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Err(e) => return Err(e),
    };
    if names.is_empty() || marker_written || !only_creation || !keyspaces_empty {
        return Ok(false);
    }
    for name in CREATION_ENTRIES.iter().chain([&VERSION_MARKER]) {
        let path = dir.join(name);
        let removed = if *name == "keyspaces" {
            std::fs::remove_dir(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    tracing::warn!(dir = %dir.display(), "a kill interrupted the creation of this kv database; creating it again (it held no data)");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interrupted(dir: &Path) {
        std::fs::create_dir_all(dir.join("keyspaces")).unwrap();
        std::fs::write(dir.join("lock"), b"").unwrap();
        std::fs::write(dir.join("0.jnl"), [0u8; 64]).unwrap();
    }

    #[test]
    fn an_interrupted_creation_is_cleared() {
        let dir = std::env::temp_dir().join(format!("silt-kv-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        interrupted(&dir);
        assert!(clear_interrupted_creation(&dir).unwrap());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // An empty marker (killed before its header was synced) is the same case.
        interrupted(&dir);
        std::fs::write(dir.join(VERSION_MARKER), b"").unwrap();
        assert!(clear_interrupted_creation(&dir).unwrap());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_database_or_anything_else_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("silt-kv-dir-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!clear_interrupted_creation(&dir).unwrap());
        // A created database: marker written.
        interrupted(&dir);
        std::fs::write(dir.join(VERSION_MARKER), b"FJL3").unwrap();
        assert!(!clear_interrupted_creation(&dir).unwrap());
        std::fs::remove_file(dir.join(VERSION_MARKER)).unwrap();
        // A keyspace folder with a tree in it.
        std::fs::create_dir_all(dir.join("keyspaces").join("0")).unwrap();
        assert!(!clear_interrupted_creation(&dir).unwrap());
        std::fs::remove_dir(dir.join("keyspaces").join("0")).unwrap();
        // A file fjall does not write.
        std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
        assert!(!clear_interrupted_creation(&dir).unwrap());
        assert!(dir.join("0.jnl").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
