//! What `moonkale-service status` shows: a serializable snapshot of the hub,
//! and its human-readable rendering.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{EditorId, Transport};
use crate::core::LineCol;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub workspace: PathBuf,
    pub pid: u32,
    pub active_editor: Option<EditorId>,
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
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaudeClientStatus {
    pub id: u64,
    /// From the CLI's `ide_connected`.
    pub pid: Option<u32>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProposalStatus {
    pub tab_name: String,
    pub target: String,
    pub document: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EditorStatus {
    pub id: EditorId,
    pub client: String,
    pub client_version: Option<String>,
    pub process_id: Option<u32>,
    pub transport: Transport,
    pub position_encoding: &'static str,
    pub active: bool,
    pub selection: Option<SelectionStatus>,
    pub documents: Vec<DocumentStatus>,
}

/// Lines and columns are 0-based; columns count chars (utf-32).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectionStatus {
    pub uri: String,
    #[serde(serialize_with = "ser_line_col")]
    pub anchor: LineCol,
    #[serde(serialize_with = "ser_line_col")]
    pub cursor: LineCol,
    /// What told us: `moonkale/selectionChanged`, `codeAction`, `hover`, `edit`, ...
    pub source: &'static str,
}

#[derive(Debug, Serialize)]
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

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsCount {
    pub uri: String,
    pub source: String,
    pub errors: usize,
    pub warnings: usize,
    pub information: usize,
    pub hints: usize,
}

fn ser_line_col<S: serde::Serializer>(p: &LineCol, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut st = s.serialize_struct("Position", 2)?;
    st.serialize_field("line", &p.line)?;
    st.serialize_field("character", &p.col)?;
    st.end()
}

/// Renders a `moonkale/status` answer (as JSON) for people. Every string
/// in it came from an editor or the file system: each is printed on one
/// line without control sequences ([`crate::printable::one_line`]).
pub fn render(status: &serde_json::Value) -> String {
    let s = |v: &serde_json::Value| crate::printable::one_line(v.as_str().unwrap_or("?"));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "workspace {} (pid {})",
        s(&status["workspace"]),
        status["pid"]
    );
    if let Some(port) = status["idePort"].as_u64() {
        let _ = writeln!(
            out,
            "Claude Code IDE on 127.0.0.1:{port} (CLAUDE_CODE_SSE_PORT={port})"
        );
    }
    match status["trusted"].as_bool() {
        Some(true) => {
            let _ = writeln!(
                out,
                "trusted: Claude Code sessions load this repository's own settings"
            );
        }
        Some(false) => {
            let _ = writeln!(
                out,
                "not trusted: Claude Code sessions load only your own settings (`moonkale-service trust` to change)"
            );
        }
        None => {}
    }
    let editors = status["editors"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "{} editor(s) attached", editors.len());
    for ed in &editors {
        let version = ed["clientVersion"]
            .as_str()
            .map(|v| format!(" {}", crate::printable::one_line(v)))
            .unwrap_or_default();
        let active = if ed["active"].as_bool() == Some(true) {
            "  [active]"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  #{} {}{} via {}, {}{}",
            ed["id"],
            s(&ed["client"]),
            version,
            s(&ed["transport"]),
            s(&ed["positionEncoding"]),
            active
        );
        if let Some(sel) = ed["selection"].as_object() {
            let p = |v: &serde_json::Value| format!("{}:{}", v["line"], v["character"]);
            let _ = writeln!(
                out,
                "    selection {} {} -> {} (from {})",
                s(&sel["uri"]),
                p(&sel["anchor"]),
                p(&sel["cursor"]),
                s(&sel["source"])
            );
        }
        for doc in ed["documents"].as_array().into_iter().flatten() {
            let flags = format!(
                "{}{}",
                if doc["dirty"].as_bool() == Some(true) {
                    " modified"
                } else {
                    ""
                },
                if doc["inSync"].as_bool() == Some(false) {
                    " OUT OF SYNC"
                } else {
                    ""
                }
            );
            let _ = writeln!(
                out,
                "    v{:<5} {}{}",
                doc["version"].as_i64().unwrap_or_default(),
                s(&doc["uri"]),
                flags
            );
        }
    }
    let diags = status["diagnostics"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "diagnostics for {} (document, source) pair(s)",
        diags.len()
    );
    for d in &diags {
        let _ = writeln!(
            out,
            "  {} [{}]: {} error(s), {} warning(s), {} info, {} hint(s)",
            s(&d["uri"]),
            s(&d["source"]),
            d["errors"],
            d["warnings"],
            d["information"],
            d["hints"]
        );
    }
    out
}
