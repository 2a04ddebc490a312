//! Driving the `claude` CLI headless, as the official SDKs do: one
//! long-lived process per session, stream-json on stdin and stdout, the
//! control protocol on the same streams (agent-host.md §1).
//!
//! This crate knows the CLI, not the service: it has no dependency on it.
//!
//! # Layout
//! - [`binary`]: finding the executable safely.
//! - [`launch`]: the argv and the scrubbed environment of a session's process.
//! - [`stream`]: decoding stdout into typed messages (unknown types pass
//!   through), with a line-length cap.
//! - [`control`]: what the host writes: user turns and control messages.
//! - [`process`]: one running CLI: its own process group, stdout decoded,
//!   stderr drained, shut down whole.
//! - [`edits`]: Claude's records of the files it changed (Edit, MultiEdit,
//!   Write results), turned into the text before and after.
//! - [`sessions`]: the CLI's own transcripts: list a project's sessions,
//!   render one.
//!
//! Sessions (and transcripts) come next.

pub mod binary;
pub mod control;
pub mod edits;
pub mod launch;
pub mod process;
pub mod sessions;
pub mod stream;

mod error;

pub use error::{Error, Result};
