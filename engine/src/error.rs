//! The engine's error type.

use std::time::Duration;

/// Everything that can go wrong in the runtime. Variants a user can fix (an invalid graph,
/// a checkpoint storage URL that does not parse) are kept apart from failures of operators
/// and from broken invariants (`Internal`), which are bugs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid job graph: {0}")]
    InvalidGraph(String),

    #[error("operator {vertex}[{subtask}] failed: {message}")]
    Operator {
        vertex: String,
        subtask: u32,
        message: String,
    },

    #[error("checkpoint storage: {0}")]
    Storage(String),

    #[error(
        "checkpoint storage url {url:?} is not supported: {reason} (use a local path, file://, or s3://)"
    )]
    StorageUrl { url: String, reason: String },

    #[error(
        "checkpoint {checkpoint_id} timed out after {timeout:?} (raise checkpoint.timeout or lower the load)"
    )]
    CheckpointTimeout {
        checkpoint_id: u64,
        timeout: Duration,
    },

    #[error("job {job} is {state}; {action} needs a running job")]
    NotRunning {
        job: String,
        state: String,
        action: &'static str,
    },

    #[error("job gave up after {attempts} attempts; last failure: {last}")]
    RestartsExhausted { attempts: u32, last: Box<Error> },

    #[error("io error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),

    #[error("internal error (a bug in silt): {0}")]
    Internal(String),
}

impl Error {
    /// An error raised by an operator's own code, for use inside `Operator` and `Source` impls.
    pub fn operator(message: impl Into<String>) -> Self {
        Error::Operator {
            vertex: String::new(),
            subtask: 0,
            message: message.into(),
        }
    }

    pub(crate) fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
