//! The LSP wire: framing, JSON-RPC messages, and the per-connection adapter.

pub mod connection;
pub mod framing;
pub mod message;
pub mod stdio;
