//! moonkale-wire: the bytes between moonkale's processes on one machine.
//!
//! - [`framing`]: LSP's `Content-Length` frames, with hard caps for hostile
//!   peers; every reader and writer of frames (service, shim, client) uses it.
//! - [`stdio`]: stdin and stdout registered with tokio's reactor, for a
//!   language server on stdio.
//! - [`runtime`]: the runtime directory, where a workspace's service
//!   publishes its socket, token and pid, and the one rule of whether that
//!   service is alive (its pid runs and is no zombie).
//!
//! The messages inside the frames are typed in `moonkale_protocol::jsonrpc`,
//! which does no IO; this crate is the IO that carries them.
//!
//! **Invariant:** this crate depends on the protocol crate alone of ours, and
//! on no PTY, TLS or WebSocket crate: the shim and the front-end client build
//! it without the server.

mod error;
pub mod framing;
pub mod runtime;
pub mod stdio;

pub use error::{Error, Result};
