//! What `moonkale-service status` shows: a snapshot of the hub
//! (`moonkale_protocol::status`), and its human-readable rendering.
//!
//! The rendering reads the typed [`Report`], never raw JSON: a field that
//! is absent in some state (the spare's `jailed`, a process's memory) is an
//! `Option` or a default there, not a missing key to index.

use std::fmt::Write as _;

use crate::printable::{counted, one_line};

/// The snapshot is a wire type of the front door.
pub use moonkale_protocol::status::{
    ClaudeClientStatus, ClaudeProcess, DiagnosticsCount, DocumentStatus, EditorStatus,
    ProposalStatus, Report, SelectionStatus, SpareStatus, Status,
};
use moonkale_protocol::terminal::TerminalInfo;

/// Renders a status report for people. Every string in it came from an
/// editor, a process or the file system: each is printed on one line
/// without control sequences ([`one_line`]).
pub fn render(report: &Report) -> String {
    let status = &report.status;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "workspace {} (pid {})",
        one_line(&status.workspace.display().to_string()),
        status.pid
    );
    if let Some(port) = report.ide_port {
        let _ = writeln!(
            out,
            "Claude Code IDE on 127.0.0.1:{port} (CLAUDE_CODE_SSE_PORT={port})"
        );
    }
    match status.trusted {
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
    if let Some(sandbox) = &report.sandbox {
        let _ = writeln!(
            out,
            "sandbox: Claude Code runs in {} (`moonkale-service sandbox clear` to stop)",
            one_line(sandbox)
        );
    }
    if let Some(spare) = &status.agent_spare {
        render_spare(spare, &mut out);
    }
    render_claudes(&report.claudes, &mut out);
    render_waiting(status, &mut out);
    render_terminals(&report.terminals, &mut out);
    let _ = writeln!(out, "{} attached", counted(status.editors.len(), "editor"));
    for editor in &status.editors {
        render_editor(editor, &mut out);
    }
    let _ = writeln!(
        out,
        "diagnostics for {}",
        counted(status.diagnostics.len(), "(document, source) pair")
    );
    for d in &status.diagnostics {
        let _ = writeln!(
            out,
            "  {} [{}]: {}, {}, {} info, {}",
            one_line(&d.uri),
            one_line(&d.source),
            counted(d.errors, "error"),
            counted(d.warnings, "warning"),
            d.information,
            counted(d.hints, "hint")
        );
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

fn render_spare(spare: &SpareStatus, out: &mut String) {
    let model = spare
        .model
        .as_deref()
        .map(|m| format!(", model {}", one_line(m)))
        .unwrap_or_default();
    let settings = if spare.trusted {
        "trusted"
    } else {
        "your settings only"
    };
    let jailed = if spare.jailed { ", jailed" } else { "" };
    if spare.pid == 0 {
        let _ = writeln!(
            out,
            "warm spare claude: starting, {} mode{model}, {settings}{jailed}",
            spare.permission_mode
        );
        return;
    }
    let rss = spare.rss_bytes.map_or("unknown".to_owned(), mib);
    let _ = writeln!(
        out,
        "warm spare claude: pid {}, {} mode{model}, {settings}{jailed}; its own memory (apart from the service's): {rss}",
        spare.pid, spare.permission_mode
    );
}

fn render_claudes(claudes: &[ClaudeProcess], out: &mut String) {
    let _ = writeln!(
        out,
        "{} run by the service",
        counted(claudes.len(), "claude process")
    );
    for cli in claudes {
        let _ = writeln!(
            out,
            "  pid {}: session {} ({}{}), {}",
            cli.pid,
            one_line(&cli.session),
            match (cli.spare, cli.state) {
                (true, _) => "warm spare",
                (false, Some(state)) => state.in_words(),
                (false, None) => "not listed",
            },
            if cli.jailed { ", jailed" } else { "" },
            mib(cli.rss_bytes)
        );
    }
}

/// What waits for the person: Claude Code clients' proposed edits and
/// change sets to review; and which Claude Code clients are connected.
fn render_waiting(status: &Status, out: &mut String) {
    if !status.claude_clients.is_empty() {
        let pids: Vec<String> = status
            .claude_clients
            .iter()
            .map(|c| {
                c.pid
                    .map_or("pid unknown".to_owned(), |p| format!("pid {p}"))
            })
            .collect();
        let _ = writeln!(
            out,
            "Claude Code clients: {} ({})",
            status.claude_clients.len(),
            pids.join(", ")
        );
    }
    if !status.pending_proposals.is_empty() {
        let _ = writeln!(
            out,
            "{} waiting for a decision in an editor",
            counted(status.pending_proposals.len(), "proposed edit")
        );
        for p in &status.pending_proposals {
            let _ = writeln!(out, "  {}", one_line(&p.target));
        }
    }
    if status.pending_change_sets > 0 {
        let _ = writeln!(
            out,
            "Claude's changes to review: {}, {} (`moonkale-service changes list`)",
            counted(status.pending_change_sets, "change set"),
            counted(status.pending_changed_files, "file")
        );
    }
}

fn render_terminals(terminals: &[TerminalInfo], out: &mut String) {
    if terminals.is_empty() {
        return;
    }
    let _ = writeln!(out, "{} open", counted(terminals.len(), "terminal"));
    for t in terminals {
        let _ = writeln!(out, "  {}", terminal_line(t));
    }
}

/// One terminal for people: `#3 build (bash, pid 300): a program runs`,
/// `… : at its prompt, quiet for 12 min`.
pub fn terminal_line(t: &TerminalInfo) -> String {
    let program = t
        .argv
        .first()
        .map(|p| one_line(p.rsplit('/').next().unwrap_or(p)))
        .unwrap_or_default();
    let process = match t.pid {
        Some(pid) => format!("{program}, pid {pid}"),
        None => program,
    };
    let state = if t.exited {
        "its program exited".to_owned()
    } else if t.busy && t.shell {
        "a program runs in it".to_owned()
    } else if t.busy {
        "running".to_owned()
    } else {
        let quiet = (now_ms().saturating_sub(t.active_at) / 60_000).max(1);
        format!("at its prompt, quiet for {quiet} min")
    };
    format!(
        "#{} {} ({process}): {state}",
        t.terminal,
        one_line(&t.title)
    )
}

/// Milliseconds since the epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn render_editor(editor: &EditorStatus, out: &mut String) {
    let version = editor
        .client_version
        .as_deref()
        .map(|v| format!(" {}", one_line(v)))
        .unwrap_or_default();
    let transport = serde_json::to_value(editor.transport)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  #{} {}{} via {}, {}{}",
        editor.id,
        one_line(&editor.client),
        version,
        transport,
        one_line(&editor.position_encoding),
        if editor.active { "  [active]" } else { "" }
    );
    if let Some(sel) = &editor.selection {
        let _ = writeln!(
            out,
            "    selection {} {}:{} -> {}:{} (from {})",
            one_line(&sel.uri),
            sel.anchor.line,
            sel.anchor.character,
            sel.cursor.line,
            sel.cursor.character,
            one_line(&sel.source)
        );
    }
    for doc in &editor.documents {
        let _ = writeln!(
            out,
            "    v{:<5} {}{}{}",
            doc.version,
            one_line(&doc.uri),
            if doc.dirty { " modified" } else { "" },
            if doc.in_sync { "" } else { " OUT OF SYNC" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;
    use moonkale_protocol::agent::PermissionMode;
    use moonkale_protocol::agent::SessionState;
    use moonkale_protocol::status::Transport;

    fn report() -> Report {
        Report {
            status: Status {
                workspace: "/home/u/ws".into(),
                pid: 7,
                active_editor: None,
                editors: Vec::new(),
                diagnostics: Vec::new(),
                total_bytes: 0,
                claude_clients: Vec::new(),
                pending_proposals: Vec::new(),
                trusted: Some(false),
                pending_change_sets: 0,
                pending_changed_files: 0,
                agent_spare: None,
            },
            ide_port: Some(4100),
            claudes: Vec::new(),
            sandbox: None,
            terminals: Vec::new(),
        }
    }

    fn spare(pid: u32, jailed: bool, rss_bytes: Option<u64>) -> SpareStatus {
        SpareStatus {
            pid,
            permission_mode: PermissionMode::Default,
            model: None,
            trusted: false,
            jailed,
            rss_bytes,
        }
    }

    fn spare_line(spare: Option<SpareStatus>) -> String {
        let mut r = report();
        r.status.agent_spare = spare;
        render(&r)
            .lines()
            .filter(|l| l.starts_with("warm spare"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every state of the warm spare renders (the spare's `jailed` is left
    /// out of its JSON when false: indexing it once panicked).
    #[test]
    fn the_spare_in_every_state() {
        expect![[""]].assert_eq(&spare_line(None));
        expect![["warm spare claude: starting, default mode, your settings only"]]
            .assert_eq(&spare_line(Some(spare(0, false, None))));
        expect![["warm spare claude: pid 42, default mode, your settings only; its own memory (apart from the service's): unknown"]]
            .assert_eq(&spare_line(Some(spare(42, false, None))));
        expect![["warm spare claude: pid 42, default mode, your settings only, jailed; its own memory (apart from the service's): 160.0 MiB"]]
            .assert_eq(&spare_line(Some(spare(42, true, Some(160 << 20)))));
    }

    /// The JSON the service sends for a running, unjailed spare (no
    /// `jailed` key) renders, parsed through the typed report.
    #[test]
    fn a_report_without_optional_keys_parses_and_renders() {
        let json = serde_json::json!({
            "workspace": "/w", "pid": 1, "activeEditor": null, "editors": [], "diagnostics": [],
            "totalBytes": 0, "claudeClients": [], "pendingProposals": [], "trusted": null,
            "agentSpare": {"pid": 9, "permissionMode": "plan", "model": "m", "trusted": true, "rssBytes": null},
            "idePort": null,
        });
        let report: Report = serde_json::from_value(json).expect("parses");
        expect![[r#"
            workspace /w (pid 1)
            warm spare claude: pid 9, plan mode, model m, trusted; its own memory (apart from the service's): unknown
            0 claude processes run by the service
            0 editors attached
            diagnostics for 0 (document, source) pairs
        "#]]
        .assert_eq(&render(&report));
    }

    /// Processes, what waits, terminals and editors (a remote one too),
    /// with hostile text made inert.
    #[test]
    fn everything_at_once() {
        let mut r = report();
        r.sandbox = Some("bwrap … claude".into());
        r.claudes = vec![
            ClaudeProcess {
                pid: 11,
                session: "s1".into(),
                state: Some(SessionState::WaitingForApproval),
                spare: false,
                rss_bytes: 100 << 20,
                jailed: true,
            },
            ClaudeProcess {
                pid: 12,
                session: "s2".into(),
                state: None,
                spare: true,
                rss_bytes: 0,
                jailed: false,
            },
        ];
        r.status.claude_clients = vec![ClaudeClientStatus {
            id: 1,
            pid: Some(99),
        }];
        r.status.pending_proposals = vec![ProposalStatus {
            tab_name: "✻ [Claude Code] a.rs".into(),
            target: "/home/u/ws/a.rs".into(),
            document: "file:///home/u/ws/a.rs".into(),
        }];
        r.status.pending_change_sets = 2;
        r.status.pending_changed_files = 3;
        r.terminals = vec![moonkale_protocol::terminal::TerminalInfo {
            terminal: 3,
            title: "build\u{1b}]52;c;x\u{7}".into(),
            argv: vec!["/bin/bash".into()],
            cwd: "/home/u/ws".into(),
            rows: 24,
            cols: 80,
            pid: Some(300),
            exit_code: None,
            exited: false,
            shell: true,
            busy: true,
            active_at: 0,
        }];
        r.status.editors = vec![EditorStatus {
            id: 2,
            client: "Neovim".into(),
            client_version: Some("0.11.4".into()),
            process_id: None,
            transport: Transport::Remote,
            position_encoding: "utf-16".into(),
            active: true,
            selection: None,
            documents: vec![DocumentStatus {
                uri: "file:///home/u/ws/a.rs".into(),
                language_id: "rust".into(),
                version: 3,
                dirty: true,
                in_sync: true,
                bytes: 10,
                lines: 1,
            }],
        }];
        expect![[r#"
            workspace /home/u/ws (pid 7)
            Claude Code IDE on 127.0.0.1:4100 (CLAUDE_CODE_SSE_PORT=4100)
            not trusted: Claude Code sessions load only your own settings (`moonkale-service trust` to change)
            sandbox: Claude Code runs in bwrap … claude (`moonkale-service sandbox clear` to stop)
            2 claude processes run by the service
              pid 11: session s1 (waiting for you, jailed), 100.0 MiB
              pid 12: session s2 (warm spare), 0.0 MiB
            Claude Code clients: 1 (pid 99)
            1 proposed edit waiting for a decision in an editor
              /home/u/ws/a.rs
            Claude's changes to review: 2 change sets, 3 files (`moonkale-service changes list`)
            1 terminal open
              #3 build^[]52;c;x^G (bash, pid 300): a program runs in it
            1 editor attached
              #2 Neovim 0.11.4 via remote, utf-16  [active]
                v3     file:///home/u/ws/a.rs modified
            diagnostics for 0 (document, source) pairs
        "#]]
        .assert_eq(&render(&r));
    }
}
