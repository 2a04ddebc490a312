//! `moonkale/status`: a snapshot of what the service holds for its
//! workspace (also `moonkale-service status --json`).

use std::path::PathBuf;

use lsp_types::Position;
use serde::{Deserialize, Serialize};

use crate::{NoParams, notification, request};

request!(
    /// The status snapshot.
    StatusRequest,
    "moonkale/status",
    NoParams => Status
);

request!(
    /// The status snapshot now, and [`Changed`] from now on.
    Subscribe,
    "moonkale/status/subscribe",
    NoParams => Status
);

notification!(
    /// To subscribers: who is in the workspace or what waits for the user
    /// changed (editors attached or gone, Claude Code clients, proposals,
    /// trust, pending change sets, the warm spare); the new snapshot. Not
    /// sent for documents, selections or diagnostics, which change at the
    /// speed of typing.
    Changed,
    "moonkale/status/changed",
    Status
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub workspace: PathBuf,
    pub pid: u32,
    /// The editor with the most recent sign of use.
    pub active_editor: Option<u64>,
    pub editors: Vec<EditorStatus>,
    pub diagnostics: Vec<DiagnosticsCount>,
    /// Bytes held against the workspace's cap: every editor's buffers
    /// (text, URI, language id) and the diagnostics.
    pub total_bytes: usize,
    /// Claude Code CLIs connected to the IDE server.
    pub claude_clients: Vec<ClaudeClientStatus>,
    /// Edits Claude Code proposed that wait for the user.
    pub pending_proposals: Vec<ProposalStatus>,
    /// Whether the user trusts the workspace (its Claude Code settings load
    /// in hosted sessions); `None` without an agent.
    pub trusted: Option<bool>,
    /// Change sets (Claude's edits made without asking) waiting for review,
    /// and the files with pending hunks in them.
    #[serde(default)]
    pub pending_change_sets: usize,
    #[serde(default)]
    pub pending_changed_files: usize,
    /// The warm spare `claude` the agent host keeps started for the next
    /// new session, if one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_spare: Option<SpareStatus>,
}

/// The agent host's warm spare CLI: a `claude` process started ahead with
/// the settings the next `moonkale/agent/start` is predicted to use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpareStatus {
    /// The CLI's process id (0 while it starts).
    pub pid: u32,
    pub permission_mode: crate::PermissionMode,
    pub model: Option<String>,
    /// Started with the repository's own settings (the workspace is
    /// trusted).
    pub trusted: bool,
    /// Started in the workspace's default sandbox.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub jailed: bool,
    /// The resident memory of the CLI process itself, read by the service
    /// from `/proc`: the CLI's own memory, apart from the service's.
    pub rss_bytes: Option<u64>,
}

/// How an editor is connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Stdio,
    Unix,
    Tcp,
    /// The remote front door (`serve --listen`): WebSocket, bearer token.
    Remote,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaudeClientStatus {
    pub id: u64,
    /// From the CLI's `ide_connected`.
    pub pid: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProposalStatus {
    pub tab_name: String,
    pub target: String,
    pub document: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EditorStatus {
    pub id: u64,
    /// `clientInfo.name`, else a name from the connection.
    pub client: String,
    pub client_version: Option<String>,
    pub process_id: Option<u32>,
    pub transport: Transport,
    /// `utf-8`, `utf-16` or `utf-32`.
    pub position_encoding: String,
    pub active: bool,
    pub selection: Option<SelectionStatus>,
    pub documents: Vec<DocumentStatus>,
}

/// Lines and columns are 0-based; columns count chars (utf-32), whatever
/// the editor negotiated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectionStatus {
    pub uri: String,
    pub anchor: Position,
    pub cursor: Position,
    /// What told us: `moonkale/selectionChanged`, `codeAction`, `hover`,
    /// `edit`, ...
    pub source: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentStatus {
    pub uri: String,
    pub language_id: String,
    pub version: i32,
    pub dirty: bool,
    pub in_sync: bool,
    pub bytes: usize,
    pub lines: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsCount {
    pub uri: String,
    pub source: String,
    pub errors: usize,
    pub warnings: usize,
    pub information: usize,
    pub hints: usize,
}

/// What `moonkale-service status` shows (and prints with `--json`): the
/// hub's snapshot and what the command adds from outside the hub.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    #[serde(flatten)]
    pub status: Status,
    /// The port of Claude Code's IDE server the service published.
    pub ide_port: Option<u16>,
    /// Every `claude` the service runs, read from `/proc`.
    #[serde(default)]
    pub claudes: Vec<ClaudeProcess>,
    /// The user's default sandbox for this workspace, described.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The workspace's terminals.
    #[serde(default)]
    pub terminals: Vec<crate::terminal::TerminalInfo>,
}

/// A `claude` process the service runs: a hosted session's or the spare's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaudeProcess {
    pub pid: u32,
    pub session: String,
    /// The hosted session's state; `None` for the spare (and a session the
    /// service no longer lists).
    pub state: Option<crate::agent::SessionState>,
    /// The warm spare's CLI.
    #[serde(default)]
    pub spare: bool,
    pub rss_bytes: u64,
    #[serde(default)]
    pub jailed: bool,
}
