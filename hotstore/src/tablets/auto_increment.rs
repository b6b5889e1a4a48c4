//! Auto-increment columns (Fluss 0.9: `Schema.enable_auto_increment`, one INT or BIGINT column
//! of a primary-key table, outside its key). The server gives the column a value when an upsert
//! inserts a new key; writes that name the column, or full-row writes of such a table, are
//! refused (the kv handler checks). Values are unique in the table and start at 1; they are not
//! dense: as Fluss hands out ranges from a table-wide counter, silt reserves a range of
//! `table.auto-increment.cache-size` values (100,000 by default) at a time and persists its end
//! before handing out the first of it, so a restart starts after the last reserved range and a
//! value is never given twice. The value lands in the changelog's image of the row, so recovery
//! replays it and needs no counter.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::catalog::TableEntry;
use crate::protocol::{ApiError, code};

/// The table property sizing a reservation, as Fluss names it.
pub const CACHE_SIZE: &str = "table.auto-increment.cache-size";
const CACHE_SIZE_DEFAULT: i64 = 100_000;
/// The file, in the table's directory, holding the end of the last reserved range.
const RESERVED_FILE: &str = "auto-increment";

pub(crate) struct AutoIncrement {
    /// The column's position in the table's rows.
    pub column: usize,
    /// The largest value the column's type holds.
    max: i64,
    /// Whether values are INT (else BIGINT).
    pub is_int: bool,
    cache_size: i64,
    file: PathBuf,
    /// The next value, and the last one of the reserved range (`next > reserved_through`: none
    /// left).
    state: Mutex<(i64, i64)>,
}

impl AutoIncrement {
    /// The allocator of `entry`'s auto-increment column, kept under `table_dir`; `None` for a
    /// table without one.
    pub fn open(
        entry: &TableEntry,
        table_dir: &Path,
    ) -> crate::error::Result<Option<AutoIncrement>> {
        let schema = entry.descriptor.schema();
        let Some(name) = schema.auto_increment_col_names().first() else {
            return Ok(None);
        };
        let fields = schema.row_type().fields();
        let invalid = |reason: String| crate::error::Error::Config {
            message: format!("table {}: {reason}", entry.qualified_name()),
        };
        let Some(column) = fields.iter().position(|f| f.name() == name) else {
            return Err(invalid(format!(
                "auto-increment column {name} is not a column"
            )));
        };
        let (is_int, max) = match fields[column].data_type() {
            fluss::metadata::DataType::Int(_) => (true, i64::from(i32::MAX)),
            fluss::metadata::DataType::BigInt(_) => (false, i64::MAX),
            other => {
                return Err(invalid(format!(
                    "auto-increment column {name} is {other:?}; it must be INT or BIGINT"
                )));
            }
        };
        let cache_size = match entry.descriptor.properties().get(CACHE_SIZE) {
            Some(text) => text
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    invalid(format!("{CACHE_SIZE} {text:?} is not a positive number"))
                })?,
            None => CACHE_SIZE_DEFAULT,
        };
        let file = table_dir.join(RESERVED_FILE);
        let reserved_through = match std::fs::read_to_string(&file) {
            Ok(text) => {
                text.trim()
                    .parse::<i64>()
                    .map_err(|e| crate::error::Error::CatalogCorrupt {
                        path: file.clone(),
                        reason: format!("not a number: {e}"),
                    })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(source) => return Err(crate::error::Error::Io { path: file, source }),
        };
        Ok(Some(AutoIncrement {
            column,
            max,
            is_int,
            cache_size,
            file,
            state: Mutex::new((reserved_through + 1, reserved_through)),
        }))
    }

    /// The next value; reserves (durably) a new range when the current one is used up.
    pub fn next(&self, table: &str) -> Result<i64, ApiError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (next, reserved_through) = *state;
        if next > self.max {
            return Err(ApiError::new(
                code::UNKNOWN_SERVER_ERROR,
                format!(
                    "Reached maximum value of sequence \"<{table}.{}>\" ({}).",
                    self.column, self.max
                ),
            ));
        }
        if next > reserved_through {
            let through = next.saturating_add(self.cache_size - 1).min(self.max);
            self.persist(through).map_err(|e| {
                ApiError::new(
                    code::KV_STORAGE_EXCEPTION,
                    format!("reserving auto-increment values of {table}: {e}"),
                )
            })?;
            state.1 = through;
        }
        state.0 = next + 1;
        Ok(next)
    }

    /// Writes the end of a reservation: a new file renamed over the old one, both synced, so a
    /// crash leaves the old end or the new one.
    fn persist(&self, through: i64) -> std::io::Result<()> {
        use std::io::Write;
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let partial = self.file.with_extension("partial");
        let mut out = std::fs::File::create(&partial)?;
        out.write_all(through.to_string().as_bytes())?;
        out.sync_all()?;
        std::fs::rename(&partial, &self.file)?;
        if let Some(dir) = self.file.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator(dir: &Path, cache_size: i64, max: i64) -> AutoIncrement {
        let file = dir.join(RESERVED_FILE);
        let through = std::fs::read_to_string(&file)
            .map(|t| t.trim().parse().unwrap())
            .unwrap_or(0);
        AutoIncrement {
            column: 2,
            max,
            is_int: false,
            cache_size,
            file,
            state: Mutex::new((through + 1, through)),
        }
    }

    /// Values start at 1, and a restart never gives one again: it starts after the range
    /// reserved before it.
    #[test]
    fn values_are_never_given_twice_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let first = allocator(dir.path(), 3, i64::MAX);
        let got: Vec<i64> = (0..4).map(|_| first.next("t").unwrap()).collect();
        assert_eq!(got, [1, 2, 3, 4]);
        drop(first);
        let restarted = allocator(dir.path(), 3, i64::MAX);
        assert_eq!(restarted.next("t").unwrap(), 7, "after the reserved 4..=6");
        let other_dir = tempfile::tempdir().unwrap();
        let bounded = allocator(other_dir.path(), 10, 2);
        assert_eq!(bounded.next("t").unwrap(), 1);
        assert_eq!(bounded.next("t").unwrap(), 2);
        let error = bounded.next("t").unwrap_err();
        assert!(
            error.message.contains("Reached maximum value"),
            "{}",
            error.message
        );
    }
}
