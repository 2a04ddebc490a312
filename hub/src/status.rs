//! What `moonkale-service status` shows: a snapshot of the hub
//! (`moonkale_protocol::status`), and its human-readable rendering.

use std::fmt::Write as _;

use crate::printable::counted;

/// The snapshot is a wire type of the front door.
pub use moonkale_protocol::status::{
    ClaudeClientStatus, DiagnosticsCount, DocumentStatus, EditorStatus, ProposalStatus,
    SelectionStatus, Status,
};

/// Renders a `moonkale/status` answer (as JSON) for people. Every string
/// in it came from an editor or the file system: each is printed on one
/// line without control sequences ([`crate::printable::one_line`]).
pub fn render(status: &serde_json::Value) -> String {
    let s = |v: &serde_json::Value| crate::printable::one_line(v.as_str().unwrap_or("?"));
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_default() as usize;
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
    if let Some(sandbox) = status["sandbox"].as_str() {
        let _ = writeln!(
            out,
            "sandbox: Claude Code runs in {} (`moonkale-service sandbox clear` to stop)",
            crate::printable::one_line(sandbox)
        );
    }
    if let Some(spare) = status["agentSpare"].as_object() {
        let rss = spare["rssBytes"]
            .as_u64()
            .map_or("unknown".to_owned(), |b| {
                format!("{:.1} MiB", b as f64 / 1048576.0)
            });
        let model = spare["model"]
            .as_str()
            .map(|m| format!(", model {}", crate::printable::one_line(m)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "warm spare claude: pid {}, {} mode{model}, {}{}; its own memory (apart from the service's): {rss}",
            spare["pid"],
            s(&spare["permissionMode"]),
            if spare["trusted"].as_bool() == Some(true) {
                "trusted"
            } else {
                "your settings only"
            },
            if spare["jailed"] == true {
                ", jailed"
            } else {
                ""
            }
        );
    }
    if let Some(clis) = status["claudes"].as_array() {
        let _ = writeln!(
            out,
            "{} run by the service",
            counted(clis.len(), "claude process")
        );
        for cli in clis {
            let rss = cli["rssBytes"].as_u64().unwrap_or_default() as f64 / 1048576.0;
            let _ = writeln!(
                out,
                "  pid {}: session {} ({}{}), {rss:.1} MiB",
                cli["pid"],
                s(&cli["session"]),
                s(&cli["state"]),
                if cli["jailed"] == true {
                    ", jailed"
                } else {
                    ""
                },
            );
        }
    }
    if let Some(sets @ 1..) = status["pendingChangeSets"].as_u64() {
        let _ = writeln!(
            out,
            "Claude's changes to review: {}, {} (`moonkale-service changes list`)",
            counted(sets as usize, "change set"),
            counted(
                status["pendingChangedFiles"].as_u64().unwrap_or_default() as usize,
                "file"
            )
        );
    }
    let editors = status["editors"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "{} attached", counted(editors.len(), "editor"));
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
        "diagnostics for {}",
        counted(diags.len(), "(document, source) pair")
    );
    for d in &diags {
        let _ = writeln!(
            out,
            "  {} [{}]: {}, {}, {} info, {}",
            s(&d["uri"]),
            s(&d["source"]),
            counted(n(&d["errors"]), "error"),
            counted(n(&d["warnings"]), "warning"),
            d["information"],
            counted(n(&d["hints"]), "hint")
        );
    }
    out
}
