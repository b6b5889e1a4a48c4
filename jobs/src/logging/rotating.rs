//! A log file rotated by size and bounded in total: `<name>.log` grows to about
//! `file_bytes_max` (a record is never split, so a file may pass it by one record), then
//! becomes `<name>.log.1`, the older ones move up one number, and the one that would become
//! `<name>.log.<files_max>` is deleted. So the directory never holds more than `files_max`
//! files of the log, about `files_max * file_bytes_max` bytes. A restart appends to
//! `<name>.log`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The rotated log; tracing writes to it through a `Mutex` (one record per write).
#[derive(Debug)]
pub struct RotatingFile {
    dir: PathBuf,
    name: String,
    file: File,
    /// Bytes in the current file.
    len: u64,
    file_bytes_max: u64,
    files_max: usize,
}

impl RotatingFile {
    /// Opens (creating `dir` and the file) `<dir>/<name>.log` for appending.
    pub fn open(dir: &Path, name: &str, file_bytes_max: u64, files_max: usize) -> io::Result<Self> {
        assert!(
            files_max >= 1 && file_bytes_max > 0,
            "checked by the config"
        );
        std::fs::create_dir_all(dir)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path(dir, name, 0))?;
        let len = file.metadata()?.len();
        Ok(RotatingFile {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            file,
            len,
            file_bytes_max,
            files_max,
        })
    }

    /// `<name>.log` for 0, `<name>.log.<n>` for the n-th older one.
    pub fn path(&self, n: usize) -> PathBuf {
        log_path(&self.dir, &self.name, n)
    }

    /// Moves every file up one number (dropping the oldest) and starts an empty `<name>.log`.
    /// A rename that fails loses that file, never the bound: the new file is created empty.
    fn rotate(&mut self) -> io::Result<()> {
        let _ = std::fs::remove_file(self.path(self.files_max - 1));
        for n in (0..self.files_max - 1).rev() {
            let _ = std::fs::rename(self.path(n), self.path(n + 1));
        }
        self.file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(self.path(0))?;
        self.len = 0;
        Ok(())
    }
}

/// `<dir>/<name>.log` for 0, `<dir>/<name>.log.<n>` for the n-th older one.
pub fn log_path(dir: &Path, name: &str, n: usize) -> PathBuf {
    match n {
        0 => dir.join(format!("{name}.log")),
        n => dir.join(format!("{name}.log.{n}")),
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.len > 0 && self.len + buf.len() as u64 > self.file_bytes_max {
            self.rotate()?;
        }
        let written = self.file.write(buf)?;
        self.len += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `records` records of 10 bytes under (file_bytes_max, files_max) and answers the
    /// log's files, newest first, with their sizes and first record.
    fn rotate(records: usize, file_bytes_max: u64, files_max: usize) -> Vec<(String, u64, String)> {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RotatingFile::open(dir.path(), "silt", file_bytes_max, files_max).unwrap();
        for i in 0..records {
            log.write_all(format!("record {i:02}\n").as_bytes())
                .unwrap();
        }
        let mut files: Vec<(String, u64, String)> = (0..files_max + 2)
            .map(|n| log.path(n))
            .filter(|p| p.exists())
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                let first = text.lines().next().unwrap_or_default().to_string();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, text.len() as u64, first)
            })
            .collect();
        files.sort_by_key(|(name, ..)| name.len());
        files
    }

    #[test]
    fn the_log_is_rotated_and_bounded() {
        let f = |name: &str, len, first: &str| (name.to_string(), len, first.to_string());
        for (records, bytes_max, files_max, expected) in [
            // Under the size: one file.
            (3, 100, 3, vec![f("silt.log", 30, "record 00")]),
            // Three records a file; 10 records: the newest file has the last one.
            (
                10,
                30,
                3,
                vec![
                    f("silt.log", 10, "record 09"),
                    f("silt.log.1", 30, "record 06"),
                    f("silt.log.2", 30, "record 03"),
                ],
            ),
            // One file: it starts again when full.
            (7, 30, 1, vec![f("silt.log", 10, "record 06")]),
            // A record larger than the bound still goes in whole.
            (
                2,
                5,
                2,
                vec![
                    f("silt.log", 10, "record 01"),
                    f("silt.log.1", 10, "record 00"),
                ],
            ),
        ] {
            assert_eq!(
                rotate(records, bytes_max, files_max),
                expected,
                "{records} records, {bytes_max} bytes, {files_max} files"
            );
        }
    }

    #[test]
    fn a_restart_appends_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        for run in 0..2 {
            let mut log = RotatingFile::open(dir.path(), "silt", 1000, 2).unwrap();
            log.write_all(format!("run {run}\n").as_bytes()).unwrap();
        }
        let text = std::fs::read_to_string(dir.path().join("silt.log")).unwrap();
        assert_eq!(text, "run 0\nrun 1\n");
    }
}
