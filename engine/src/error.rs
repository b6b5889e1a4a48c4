//! The engine's error type.

use std::time::Duration;

/// An operator's own error, kept whole (its type and its source chain) inside [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Who can fix what made a job fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The job's definition, input or configuration, another writer, or the machine (a full
    /// disk, an unreachable store): the user can fix it, and the message says how.
    User,
    /// A broken invariant or an unexpected failure in silt's own code: a bug to report.
    Silt,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::User => "user",
            Cause::Silt => "silt",
        }
    }
}

/// Everything that can go wrong in the runtime. Variants a user can fix (an invalid graph,
/// a checkpoint storage URL that does not parse) are kept apart from failures of operators
/// and from broken invariants (`Internal`), which are bugs; [`Error::cause`] says which.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid job graph: {0}")]
    InvalidGraph(String),

    /// An operator's or a source's error, with the task that raised it. `source` is the
    /// operator's own error (a Delta conflict, a Fluss client error), not its text.
    #[error("operator {vertex}[{subtask}] failed: {source}")]
    Operator {
        vertex: String,
        subtask: u32,
        cause: Cause,
        #[source]
        source: BoxError,
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
    /// An error raised by an operator's own code that its user can fix (the message says
    /// how), for use inside `Operator` and `Source` impls.
    pub fn operator(message: impl Into<String>) -> Self {
        Error::external(Cause::User, message.into())
    }

    /// A broken invariant inside an operator's own code: a bug in silt.
    pub fn operator_bug(message: impl Into<String>) -> Self {
        Error::external(Cause::Silt, message.into())
    }

    /// An operator's own error type, kept whole as the source. The task that runs the
    /// operator fills in its name and subtask.
    pub fn external(cause: Cause, source: impl Into<BoxError>) -> Self {
        Error::Operator {
            vertex: String::new(),
            subtask: 0,
            cause,
            source: source.into(),
        }
    }

    /// `context: source`, keeping `source` as the error's source (a Fluss client error under
    /// what the operator was doing).
    pub fn with_context(
        cause: Cause,
        context: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::external(
            cause,
            WithContext {
                context: context.into(),
                source: source.into(),
            },
        )
    }

    /// Whether the user or silt can fix this.
    pub fn cause(&self) -> Cause {
        match self {
            Error::Operator { cause, .. } => *cause,
            Error::RestartsExhausted { last, .. } => last.cause(),
            Error::InvalidGraph(_)
            | Error::Storage(_)
            | Error::StorageUrl { .. }
            | Error::CheckpointTimeout { .. }
            | Error::NotRunning { .. }
            | Error::Io { .. } => Cause::User,
            Error::Arrow(_) | Error::Internal(_) => Cause::Silt,
        }
    }

    pub(crate) fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// What an operator was doing when another library's error stopped it.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct WithContext {
    context: String,
    #[source]
    source: BoxError,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
