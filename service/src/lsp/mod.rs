//! The LSP wire: framing, JSON-RPC messages, the per-connection adapter
//! and its URI rewriter.
//! Framing and stdio live in `moonkale_wire`, shared with the shim and the
//! client; the messages in `moonkale_protocol::jsonrpc`.

pub mod connection;
pub mod uri_rewrite;
pub use moonkale_protocol::jsonrpc as message;
pub use moonkale_wire::{framing, stdio};
