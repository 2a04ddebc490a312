//! `moonkale-service changes …`: the change sets (Claude's edits made
//! without asking) for scripts and terminals, through the front door. A
//! thin printer over [`moonkale_client::Client`]; every string from the
//! service is made safe for a terminal.

use std::fmt::Write as _;
use std::path::Path;

use lsp_types::Url;
use moonkale_client::Client;
use moonkale_protocol::changes::{
    ChangeSetSummary, FileChangeKind, KeepParams, LineRange, ReviewState, ShowResult, UndoParams,
};

use crate::error::{Error, Result};
use crate::printable::{for_terminal, json_for_terminal, one_line};

const NAME: &str = "moonkale-changes-cli";

async fn connect(socket: &Path) -> Result<Client> {
    Ok(Client::observe_socket(socket, NAME).await?)
}

fn pretty(value: &impl serde::Serialize) -> String {
    json_for_terminal(&serde_json::to_string_pretty(value).expect("serializes")) + "\n"
}

/// A file's URI as a path under `root` when it is one.
fn shown(uri: &Url, root: &Path) -> String {
    let path = uri.to_file_path().unwrap_or_default();
    one_line(
        &path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string(),
    )
}

fn state(s: ReviewState) -> &'static str {
    match s {
        ReviewState::Pending => "pending",
        ReviewState::Kept => "kept",
        ReviewState::Undone => "undone",
    }
}

fn kind(k: FileChangeKind) -> &'static str {
    match k {
        FileChangeKind::Created => "created",
        FileChangeKind::Modified => "modified",
        FileChangeKind::Deleted => "deleted",
    }
}

fn summary_lines(out: &mut String, set: &ChangeSetSummary, root: &Path) {
    let title = if set.title.is_empty() {
        String::new()
    } else {
        format!("  \"{}\"", one_line(&set.title))
    };
    let open = if set.open { ", turn still running" } else { "" };
    let _ = writeln!(
        out,
        "set {}  {}{open}  by {}{title}",
        set.id,
        state(set.state),
        one_line(&set.source.describe())
    );
    for f in &set.files {
        let _ = writeln!(
            out,
            "  {:<8} {}  {} of {} pending",
            kind(f.kind),
            shown(&f.uri, root),
            f.pending,
            crate::printable::counted(f.hunks, "hunk")
        );
    }
}

/// `changes list`.
pub async fn list(socket: &Path, root: &Path, all: bool, as_json: bool) -> Result<String> {
    let sets = connect(socket).await?.changes(all).await?;
    if as_json {
        return Ok(pretty(&serde_json::json!({ "sets": sets })));
    }
    if sets.is_empty() {
        return Ok("no change sets to review\n".into());
    }
    let mut out = String::new();
    for set in &sets {
        summary_lines(&mut out, set, root);
    }
    Ok(out)
}

/// A hunk's lines as a person counts them.
fn lines(r: LineRange) -> String {
    match r.end.saturating_sub(r.start) {
        0 => format!("no lines, at line {}", r.start + 1),
        1 => format!("line {}", r.start + 1),
        _ => format!("lines {}–{}", r.start + 1, r.end),
    }
}

/// `changes show`: the set and each hunk as removed and added lines.
pub async fn show(socket: &Path, root: &Path, set: u64, as_json: bool) -> Result<String> {
    let shown_set: ShowResult = connect(socket).await?.change_set(set).await?;
    if as_json {
        return Ok(pretty(&shown_set));
    }
    let mut out = String::new();
    summary_lines(&mut out, &shown_set.set, root);
    for file in &shown_set.files {
        let _ = writeln!(out, "\n{} ({})", shown(&file.uri, root), kind(file.kind));
        for h in &file.hunks {
            let _ = writeln!(
                out,
                "  hunk {} [{}] {} (before: {})",
                h.index,
                state(h.state),
                lines(h.after),
                lines(h.before)
            );
            for (mark, text) in [("-", &h.removed), ("+", &h.added)] {
                for line in text.lines() {
                    let _ = writeln!(out, "  {mark} {}", for_terminal(line));
                }
            }
        }
    }
    Ok(out)
}

/// A file named on the command line (relative to the current folder) as
/// the service spells its URI.
fn file_uri(file: &Path) -> Result<Url> {
    let absolute = std::path::absolute(file)
        .map_err(|e| Error::Invalid(format!("{}: {e}", file.display())))?;
    moonkale_hub::core::uri::from_path(&absolute)
        .ok()
        .and_then(|u| u.to_url())
        .ok_or_else(|| Error::Invalid(format!("{} cannot be named as a file URI", file.display())))
}

/// `changes undo`: what was undone and refused, as lines.
pub async fn undo(
    socket: &Path,
    set: u64,
    file: Option<&Path>,
    hunk: Option<usize>,
    reason: Option<String>,
) -> Result<String> {
    let params = UndoParams {
        set,
        uri: file.map(file_uri).transpose()?,
        hunk,
        reason,
    };
    let result = connect(socket).await?.undo_change(params).await?;
    let mut out = format!(
        "undid {}\n",
        crate::printable::counted(result.undone, "hunk")
    );
    for r in &result.refused {
        let _ = writeln!(out, "not undone: {}", one_line(&r.message));
    }
    Ok(out)
}

/// The change set `given` names: its number, or a unique prefix of one
/// among every set the service holds.
pub async fn resolve_set(socket: &Path, given: &str) -> Result<u64> {
    let sets = connect(socket).await?.changes(true).await?;
    let ids: Vec<String> = sets.iter().map(|s| s.id.to_string()).collect();
    let id = crate::id_prefix::pick(
        given,
        ids.iter().map(String::as_str),
        "change set",
        "changes list --all",
    )?;
    id.parse()
        .map_err(|_| Error::Invalid(format!("{} is not a change set number", one_line(id))))
}

/// `changes keep`.
pub async fn keep(socket: &Path, set: u64, file: Option<&Path>) -> Result<()> {
    let params = KeepParams {
        set,
        uri: file.map(file_uri).transpose()?,
        hunk: None,
    };
    Ok(connect(socket).await?.keep_change(params).await?)
}
