//! Claude Code's own sessions of the workspace, started outside the
//! service (in a terminal, before the service ran): listed with the hosted
//! ones from the CLI's transcripts (`<config>/projects/<slug>/<id>.jsonl`),
//! readable as events, and continued as a hosted session of the same id
//! (`--resume`), which the host does.
//!
//! A transcript is hostile input: it is read only if it is a regular file
//! (no symlink, no FIFO), from its end and at most
//! [`moonkale_claude::sessions::MAX_RENDER_BYTES`], and only if it says it
//! ran in this workspace; its text reaches people only through the front
//! ends' inert printing.

use std::path::Path;

use moonkale_claude::sessions::{self, SessionSummary as CliSession};
use moonkale_protocol::agent::{
    self, Event, EventsPage, PermissionMode, PromptData, SessionEvent, SessionState, SessionSummary,
};
use serde_json::{Value, json};

use crate::lsp::message::{ResponseError, code};

pub(super) use crate::agent::claude_config_dir as config_dir;

/// The CLI's sessions of `root`, but for those `hosted` claims and those
/// a hosted CLI wrote (a deleted hosted session's conversation stays in
/// Claude Code's own folder: it was never started outside).
pub(super) fn sessions(
    config_dir: &Path,
    root: &Path,
    hosted: impl Fn(&str) -> bool,
) -> Vec<CliSession> {
    sessions::list_sessions(config_dir, root)
        .into_iter()
        .filter(|s| !hosted(&s.id) && not_a_hosted_clis(s))
        .collect()
}

/// Not written by a CLI the service hosted (they say so as their
/// entrypoint).
fn not_a_hosted_clis(session: &CliSession) -> bool {
    session.entrypoint.as_deref() != Some(moonkale_claude::launch::ENTRYPOINT)
}

/// Session `id` of `root` started outside (not one a hosted CLI wrote).
pub(super) fn find(config_dir: &Path, root: &Path, id: &str) -> Option<CliSession> {
    sessions::find_session(config_dir, root, id).filter(not_a_hosted_clis)
}

/// How `agent/list` shows one.
pub(super) fn summary(session: &CliSession) -> SessionSummary {
    let updated = session
        .modified
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    SessionSummary {
        session: session.id.clone(),
        state: SessionState::Idle,
        title: agent::title_of(&session.title),
        created: updated,
        updated,
        permission_mode: PermissionMode::Default,
        model: None,
        events: None,
        cwd: None,
        jailed: false,
        cli: None,
        outside: true,
    }
}

/// A page of its conversation as events: each prompt, and each reply as
/// the CLI's assistant message (text only).
pub(super) fn events_page(
    session: &CliSession,
    since: usize,
    limit: usize,
) -> Result<Value, ResponseError> {
    let turns = sessions::render(&session.path).map_err(|e| {
        ResponseError::new(
            code::REQUEST_FAILED,
            format!(
                "Claude Code's transcript of session {} cannot be read: {e}",
                session.id
            ),
        )
    })?;
    let at = summary(session).updated;
    let all: Vec<Event> = turns
        .into_iter()
        .enumerate()
        .map(|(seq, turn)| Event {
            seq: seq as u64,
            at,
            event: match turn.role {
                "user" => SessionEvent::Prompt(PromptData {
                    text: turn.text,
                    images: Vec::new(),
                }),
                _ => SessionEvent::Cli(json!({
                    "type": "assistant",
                    "message": {"content": [{"type": "text", "text": turn.text}]},
                })),
            },
        })
        .collect();
    let total = all.len() as u64;
    let events: Vec<Event> = all.into_iter().skip(since).take(limit).collect();
    let next = events.last().map_or(since as u64, |e| e.seq + 1);
    Ok(moonkale_protocol::to_json(&EventsPage {
        session: session.id.clone(),
        events,
        next,
        total,
        state: SessionState::Idle,
        error: None,
        pending_approvals: Vec::new(),
        streaming: None,
    }))
}

/// The pid of a running `claude` that holds session `id` (two CLIs must
/// not write one conversation): one whose command line names it, or whose
/// `<config>/sessions/<pid>.json` says it is in it.
pub(super) fn holder(config_dir: &Path, id: &str) -> Option<u32> {
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    let by_argv = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|argv| argv.split(|b| *b == 0).any(|arg| names(arg, id)))
        });
    by_argv.or_else(|| {
        std::fs::read_dir(config_dir.join("sessions"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid = e
                    .file_name()
                    .to_str()?
                    .strip_suffix(".json")?
                    .parse()
                    .ok()?;
                let file = std::fs::read(e.path())
                    .ok()
                    .filter(|b| b.len() < 64 * 1024)?;
                let said: Value = serde_json::from_slice(&file).ok()?;
                (said["sessionId"] == id && alive(pid)).then_some(pid)
            })
            .next()
    })
}

/// Whether a command-line word names session `id` (`ID`, `--resume=ID`).
fn names(arg: &[u8], id: &str) -> bool {
    let id = id.as_bytes();
    arg == id
        || (arg.len() > id.len() && arg.ends_with(id) && arg[arg.len() - id.len() - 1] == b'=')
}
