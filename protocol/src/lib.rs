//! moonkale-protocol: the types on moonkale-service's wire, shared by the
//! service, the editor shim, the front-door client and the tests.
//!
//! - [`jsonrpc`]: JSON-RPC 2.0 messages as LSP uses them, parsed defensively.
//! - [`PermissionMode`]: how much Claude Code may do without asking.
//! - [`ApprovalId`]: which question of which session an answer is for.
//!
//! **Invariant:** this crate does no IO and depends on nothing of the
//! service: a front end compiles it alone.

mod approval_id;
pub mod jsonrpc;
mod permission_mode;

pub use approval_id::ApprovalId;
pub use permission_mode::PermissionMode;
