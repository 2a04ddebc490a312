//! The crate's one error type.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Names the two ways to point at a `claude` elsewhere: the variable
    /// (read by every command and every service it starts) and `serve`'s
    /// and `lsp`'s `--claude`.
    #[error(
        "the claude CLI was not found ({looked}); install it with `npm install -g @anthropic-ai/claude-code`, \
         or name it with MOONKALE_CLAUDE_BIN=PATH (or `--claude PATH` for a service you start)"
    )]
    NotFound { looked: String },
    #[error(
        "{0} is not an executable file: fix the path given with --claude or MOONKALE_CLAUDE_BIN"
    )]
    NotExecutable(PathBuf),
    #[error("argument {index} contains a line break; prompts go over stdin, never in argv")]
    LineBreakInArgv { index: usize },
    #[error("argument {index} has {len} bytes; at most {max} are passed in argv")]
    ArgTooLong {
        index: usize,
        len: usize,
        max: usize,
    },
    #[error("Claude's edit record does not add up: {0}")]
    BadEditRecord(String),
    /// `--version` gave no version: the real cause, for the sentence a
    /// person reads first.
    #[error("{program} could not be started: {source}")]
    NotStarted {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} {status}{}", said.as_deref().map(|s| format!(" ({s})")).unwrap_or_default())]
    VersionFailed {
        program: String,
        status: std::process::ExitStatus,
        /// The last line it wrote on stderr.
        said: Option<String>,
    },
    #[error("{program} did not answer --version within {timeout:?}")]
    VersionTimedOut {
        program: String,
        timeout: std::time::Duration,
    },
    #[error("{program} --version printed no version ({printed:?})")]
    NoVersion { program: String, printed: String },
}
