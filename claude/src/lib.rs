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
//!
//! Running the process (spawn, shutdown of its process group) and sessions
//! on disk come next (issue 4).

pub mod binary;
pub mod control;
pub mod launch;
pub mod stream;

mod error;

pub use error::{Error, Result};
