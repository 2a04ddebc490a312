//! moonkale-protocol: the types on moonkale-service's wire, shared by the
//! service, the editor shim, the front-door client and the tests.
//!
//! - [`jsonrpc`]: JSON-RPC 2.0 messages as LSP uses them, parsed defensively.
//! - [`ide`]: Claude Code's IDE protocol: MCP tool results, `selection_changed`.
//! - [`PermissionMode`]: how much Claude Code may do without asking.
//!
//! **Invariant:** this crate does no IO and depends on nothing of the
//! service: a front end compiles it alone.

pub mod ide;
pub mod jsonrpc;
mod permission_mode;

pub use permission_mode::PermissionMode;
