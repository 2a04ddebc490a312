//! The wire crate's one error type: a frame that cannot be read, or a
//! runtime directory or file that cannot be used.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not a valid LSP header block.
    #[error("bad header: {0}")]
    BadHeader(String),
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame")]
    UnexpectedEof,
    /// Reading the stream of frames failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A file of the runtime directory (or the workspace folder) could not
    /// be created, read or locked; `context` says which and what for.
    #[error("{context}: {source}")]
    File {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("runtime directory {path} is unsafe: {why}")]
    UnsafeRuntimeDir { path: PathBuf, why: String },
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub fn file(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::File {
            context: context.into(),
            source,
        }
    }
}

/// Adds a description of what was being done to an IO error.
pub(crate) trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::file(what(), e))
    }
}
