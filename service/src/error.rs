//! The service library's one error type.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("runtime directory {path} is unsafe: {why}")]
    UnsafeRuntimeDir { path: PathBuf, why: String },
    #[error("a moonkale-service already runs for {workspace} (pid {pid})")]
    AlreadyRunning { workspace: PathBuf, pid: String },
    #[error(
        "{workspace} is inside {enclosing}, which moonkale-service (pid {pid}) serves: use that service"
    )]
    InsideServed {
        workspace: PathBuf,
        enclosing: PathBuf,
        pid: u32,
    },
    #[error(
        "{workspace} is inside {enclosing}, whose service is being started (by pid {pid}): use that service"
    )]
    InsideStarting {
        workspace: PathBuf,
        enclosing: PathBuf,
        pid: u32,
    },
    #[error(
        "no moonkale-service runs for {workspace}: start one with `moonkale-service serve \
         --workspace {workspace}`, or open the workspace in an editor set up with moonkale-shim"
    )]
    NotRunning { workspace: PathBuf },
    #[error("LSP address {0} is not a loopback address; LSP has no authentication of its own")]
    NonLoopback(std::net::SocketAddr),
    #[error("framing: {0}")]
    Framing(moonkale_wire::Error),
    /// The service's own sentence (a JSON-RPC error's message).
    #[error("{0}")]
    Remote(String),
    #[error("the connection closed")]
    Closed,
    #[error("{0}")]
    Invalid(String),
    /// Reaching a remote service failed; the sentence says why and what to do.
    #[error("{0}")]
    Connect(String),
    /// A front-door call failed (`moonkale_client`).
    #[error(transparent)]
    Client(#[from] moonkale_client::Error),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The wire crate's errors as the service has always said them: a runtime
/// file's under its own variants, a frame's as [`Error::Framing`].
impl From<moonkale_wire::Error> for Error {
    fn from(e: moonkale_wire::Error) -> Error {
        use moonkale_wire::Error as W;
        match e {
            W::File { context, source } => Error::Io { context, source },
            W::UnsafeRuntimeDir { path, why } => Error::UnsafeRuntimeDir { path, why },
            W::Invalid(why) => Error::Invalid(why),
            frame @ (W::BadHeader(_) | W::UnexpectedEof | W::Io(_)) => Error::Framing(frame),
        }
    }
}

/// Adds a description of what was being done to an IO error.
pub trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }
}
