//! The LSP wire: framing, JSON-RPC messages, and the per-connection adapter.
//! Framing and stdio live in `moonkale_wire`, shared with the shim and the
//! client; the messages in `moonkale_protocol::jsonrpc`.

pub mod connection;
pub use moonkale_protocol::jsonrpc as message;
pub use moonkale_wire::{framing, stdio};
