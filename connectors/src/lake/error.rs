//! The lake catalog's errors. What a user can fix (an unknown table, a table that is not
//! lake-enabled, a hot tail too large to read) is kept apart from failures of the systems
//! underneath (Fluss, Delta, DataFusion) and from broken invariants (`Internal`).

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "unknown table {name} (known: {known}); tables are named db.t, db.t$lake or db.t$lake$snapshots"
    )]
    UnknownTable { name: String, known: String },

    #[error("{message}")]
    User { message: String },

    #[error("fluss: {0}")]
    Fluss(String),

    #[error("datafusion: {0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),

    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),

    #[error("lake table {uri}: {message}")]
    Format { uri: String, message: String },

    #[error("internal error (a bug in silt): {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn user(message: impl Into<String>) -> Error {
        Error::User {
            message: message.into(),
        }
    }

    /// Whether a user can fix this by changing the query (or the table name).
    pub fn is_user_error(&self) -> bool {
        matches!(self, Error::UnknownTable { .. } | Error::User { .. })
    }

    pub(crate) fn format(uri: &str) -> impl Fn(anyhow::Error) -> Error + '_ {
        move |e| Error::Format {
            uri: uri.to_string(),
            message: format!("{e:#}"),
        }
    }

    pub(crate) fn fluss(context: &str) -> impl Fn(fluss::error::Error) -> Error + '_ {
        move |e| Error::Fluss(format!("{context}: {e}"))
    }
}
