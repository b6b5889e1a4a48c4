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

impl Error {
    pub(crate) fn delta(uri: &str) -> impl Fn(DeltaTableError) -> Error + '_ {
        move |source| Error::Delta {
            uri: uri.to_string(),
            source,
        }
    }
}

impl From<Error> for silt_engine::Error {
    fn from(e: Error) -> Self {
        silt_engine::Error::operator(e.to_string())
    }
}
