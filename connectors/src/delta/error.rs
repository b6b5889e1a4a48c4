//! The Delta sink's errors. What a user can fix (a type Delta cannot store, a bad config, a
//! second job writing the same table) is kept apart from broken invariants (`Internal`).

use deltalake::DeltaTableError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("column {column} has type {data_type} which Delta cannot store; {hint}")]
    UnsupportedType {
        column: String,
        data_type: String,
        hint: String,
    },

    #[error("invalid delta sink config: {0}")]
    Config(String),

    #[error("delta table {uri}: {source}")]
    Delta {
        uri: String,
        #[source]
        source: DeltaTableError,
    },

    #[error(
        "delta table {uri}: another writer committed the same txn app ids first ({message}); \
         only one tiering job may write a table (stop the other one)"
    )]
    Conflict { uri: String, message: String },

    #[error("delta table {uri} does not match this sink: {message}")]
    TableMismatch { uri: String, message: String },

    #[error("changelog batch does not fit the table: {0}")]
    Batch(String),

    #[error("committable is corrupt: {0} (a bug, or state written by another version of silt)")]
    Committable(String),

    #[error("storage {path}: {source}")]
    Storage {
        path: String,
        #[source]
        source: object_store::Error,
    },

    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "delta table {uri} (silt table {table_id}), {bucket}: the commit continues from offset {follows}, but {after} {expected}; offsets {expected}..{follows} were never written (a lost committable, or a checkpoint restored over a replaced lake), so the commit is refused rather than leave a hole; restart the job from the lake's txn offsets (the tiering service does so itself)"
    )]
    OffsetGap {
        uri: String,
        table_id: String,
        bucket: crate::changelog::BucketKey,
        /// Where the refused range continues from.
        follows: i64,
        /// Where the lake ends for the bucket (see `after`).
        expected: i64,
        after: GapAfter,
    },

    #[error("commit hook failed: {0}")]
    Hook(String),

    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),

    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),

    #[error("datafusion: {0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),

    #[error("internal error (a bug in silt): {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a refused commit would have continued after (see [`Error::OffsetGap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapAfter {
    /// The lake's txn offset of the bucket.
    LakeTxn,
    /// The end of a committable planned into the same commit before it.
    EarlierCommittable,
    /// The lake holds nothing of the bucket; the changelog starts here.
    ChangelogStart,
}

impl std::fmt::Display for GapAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GapAfter::LakeTxn => "the lake's txn offset for it is",
            GapAfter::EarlierCommittable => "the committable before it in the same commit ends at",
            GapAfter::ChangelogStart => "the lake holds nothing of it and its changelog starts at",
        })
    }
}

impl Error {
    pub(crate) fn delta(uri: &str) -> impl Fn(DeltaTableError) -> Error + '_ {
        move |source| Error::Delta {
            uri: uri.to_string(),
            source,
        }
    }
}

impl Error {
    /// Who can fix it: the user (the table, the configuration, another writer, the store or
    /// the disk) or silt (a broken invariant, a batch or committable silt built wrong).
    pub fn cause(&self) -> silt_engine::Cause {
        use silt_engine::Cause::{Silt, User};
        match self {
            Error::UnsupportedType { .. }
            | Error::Config(_)
            | Error::Delta { .. }
            | Error::Conflict { .. }
            | Error::TableMismatch { .. }
            | Error::Storage { .. }
            | Error::Io { .. } => User,
            Error::Batch(_)
            | Error::Committable(_)
            | Error::OffsetGap { .. }
            | Error::Hook(_)
            | Error::Arrow(_)
            | Error::Parquet(_)
            | Error::DataFusion(_)
            | Error::Internal(_) => Silt,
        }
    }
}

/// Kept whole: a job's failure keeps the Delta error as its source, and says whose it is.
impl From<Error> for silt_engine::Error {
    fn from(e: Error) -> Self {
        silt_engine::Error::external(e.cause(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's failure keeps the Delta error itself (a caller can downcast it) and says whose
    /// it is: another writer is the user's to stop, a hole in the offsets is silt's bug.
    #[test]
    fn the_engine_error_keeps_the_delta_error_and_its_cause() {
        let conflict: silt_engine::Error = Error::Conflict {
            uri: "file:///lake/db/t".into(),
            message: "txn app id taken".into(),
        }
        .into();
        assert_eq!(conflict.cause(), silt_engine::Cause::User);
        let source = std::error::Error::source(&conflict).expect("the delta error as source");
        assert!(
            matches!(source.downcast_ref::<Error>(), Some(Error::Conflict { .. })),
            "{source:?}"
        );
        assert!(
            conflict.to_string().contains("stop the other one"),
            "{conflict}"
        );

        let gap: silt_engine::Error = Error::OffsetGap {
            uri: "file:///lake/db/t".into(),
            table_id: "7".into(),
            bucket: crate::changelog::BucketKey::table(0),
            follows: 20,
            expected: 10,
            after: GapAfter::LakeTxn,
        }
        .into();
        assert_eq!(gap.cause(), silt_engine::Cause::Silt);
    }
}
