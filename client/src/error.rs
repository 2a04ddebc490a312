//! The client's one error type.

use std::path::PathBuf;

use moonkale_protocol::jsonrpc::code;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The service's socket could not be reached.
    #[error("connecting to {}: {source}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The service answered the request with a JSON-RPC error. Its code is
    /// for programs ([`Error::code`]); people read the message alone.
    #[error("{message}")]
    Remote { code: i64, message: String },
    /// The connection ended (or was never usable); nothing more comes.
    #[error("the connection closed")]
    Closed,
    /// What the service answered does not have the type the method's
    /// result has.
    #[error("unexpected answer to {method}: {why}")]
    Decode { method: &'static str, why: String },
    /// Starting the service failed (its log could not be opened, its
    /// binary not run).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The runtime directory could not be used (to find or start a
    /// service), said as the wire crate says it.
    #[error(transparent)]
    Wire(#[from] moonkale_wire::Error),
    /// A value we were given cannot go on the wire (a URI that does not
    /// parse, …).
    #[error("{0}")]
    Invalid(String),
}

/// `-32801`: LSP's "content modified", which asks for a retry.
const CONTENT_MODIFIED: i64 = -32801;

impl Error {
    /// The JSON-RPC error code, if the service answered with one.
    pub fn code(&self) -> Option<i64> {
        match self {
            Error::Remote { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the same request may succeed if sent again later: the
    /// service was busy (an internal error, or a session or terminal whose
    /// queue was full: "busy; try again"). A closed connection, a refused
    /// request and a bad answer are not retryable on this handle.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Remote { code, message } => {
                *code == code::INTERNAL_ERROR
                    || *code == CONTENT_MODIFIED
                    || (*code == code::REQUEST_FAILED && message.ends_with("try again"))
            }
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_code_and_say_whether_to_retry() {
        let remote = |code, message: &str| Error::Remote {
            code,
            message: message.into(),
        };
        let busy = remote(code::REQUEST_FAILED, "the session is busy; try again");
        assert!(busy.is_retryable());
        assert_eq!(busy.code(), Some(code::REQUEST_FAILED));
        assert!(
            remote(
                code::INTERNAL_ERROR,
                "the terminals are busy or stopping; try again"
            )
            .is_retryable()
        );
        assert!(!remote(code::INVALID_PARAMS, "no terminal 3").is_retryable());
        assert!(!remote(code::REQUEST_FAILED, "the session has ended").is_retryable());
        assert!(!Error::Closed.is_retryable());
        assert_eq!(busy.to_string(), "the session is busy; try again");
    }
}
