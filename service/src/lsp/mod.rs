//! The LSP wire: framing, JSON-RPC messages, and the per-connection adapter.

pub mod connection;
pub mod framing;
pub use moonkale_protocol::jsonrpc as message;
pub mod stdio;
