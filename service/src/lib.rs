//! moonkale-service: one long-running process per workspace that editors
//! attach to as a language server.
//!
//! # Layout
//! - [`core`] and [`hub`] (the `moonkale-hub` crate): the pure text model
//!   and the single owner of workspace state, fed by [`hub::Event`].
//! - [`lsp`]: the LSP wire: framing with caps and JSON-RPC messages
//!   (re-exported from `moonkale-wire` and `moonkale-protocol`), and the
//!   per-connection adapter with the LSP lifecycle.
//! - [`ide`]: Claude Code's IDE: lock file and WebSocket MCP server.
//! - [`mcp`]: the MCP both MCP servers (the IDE's, the hosted session's
//!   editor tools) speak.
//! - [`runtime`]: where a workspace's socket, token and info files live
//!   (`moonkale_wire::runtime`, shared with the shim and the client).
//! - [`lifetime`]: how long the process lives (signals, `stop`, idle exit).
//! - [`server`]: listeners (unix socket, loopback TCP, stdio) that wire
//!   connections to a hub.
//! - [`client`]: a small LSP client used by `status` and tests.
//! - [`clock`]: the one `now_ms` of stored timestamps.
//! - [`agent`]: the agent host: crash-safe session transcripts.
//! - [`change_sources`]: where change records come from: the change-set
//!   host's port and the CLI sessions the service started.
//! - [`changes`]: the change-set host: Claude's edits kept for review,
//!   undone atomically.
//! - [`user_state`]: what is kept for the user outside every workspace
//!   (transcripts, workspace trust).
//! - [`workspace_fs`]: paths confined to the workspace, files opened
//!   beneath its descriptor.
//! - [`doctor`]: the first-run check.
//! - [`id_prefix`]: ids given by a unique prefix on the command line.
//! - [`printable`]: untrusted text made safe to print on a terminal.
//! - [`stdout`]: what a command prints; a closed pipe ends it quietly.

pub mod acp;
pub mod agent;
pub mod agent_client;
pub mod change_sources;
pub mod changes;
pub mod changes_client;
pub mod client;
pub mod clock;
pub mod doctor;
pub mod error;
pub mod http;
pub mod id_prefix;
pub mod ide;
pub mod lifetime;
pub mod lsp;
pub mod mcp;
pub mod peer;
pub mod remote;
pub mod runtime;
pub mod sandbox_link;
pub mod server;
pub mod stdout;
pub mod terminal;
pub mod user_state;
pub mod web;
pub mod workspace_fs;

pub use error::{Error, Result};
/// The hub and the text model live in their own crate, which depends on no
/// adapter of this one.
pub use moonkale_hub::{self as hub, core, printable};
