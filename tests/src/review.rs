//! The review-after-the-fact flow the editors' tests share: in a turn
//! Claude runs without asking (auto mode, `acceptEdits`), the model edits
//! two separate places of one file and writes a new file; then what the
//! change-set host and Claude's own transcript say of it.
//!
//! Use: put [`FILE`] with [`BEFORE`] in the workspace, answer with
//! [`script`], run the turn (a CLI in a terminal, "Start Claude Code here",
//! the hosted agent) with [`PROMPT`] until [`DONE`], then
//! [`finished_set`] over any LSP connection.

use std::path::Path;

use moonkale_claude::edits::{TranscriptEntry, parse_transcript_line};
use serde_json::{Value, json};

use crate::fakeapi::{Reply, Rule, Script, When};
use crate::lsp::Client;

/// The file Claude edits in two places.
pub const FILE: &str = "review.txt";
pub const BEFORE: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n";
pub const AFTER: &str = "ONE\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nTEN\n";
/// The file Claude creates.
pub const NEW_FILE: &str = "added.txt";
pub const NEW_TEXT: &str = "written by Claude\n";
pub const PROMPT: &str = "tidy the review file";
/// What the model says when the turn is over.
pub const DONE: &str = "REVIEW_DONE";

/// The model's side: Read [`FILE`] (the CLI edits only files read in the
/// session), Edit its first line, Edit its last line, Write [`NEW_FILE`],
/// then say [`DONE`].
pub fn script(root: &Path) -> Script {
    let file = root.join(FILE).display().to_string();
    let new = root.join(NEW_FILE).display().to_string();
    let edit = |old: &str, new: &str| json!({"file_path": file, "old_string": old, "new_string": new, "replace_all": false});
    Script::new()
        .on_prompt(PROMPT, Reply::tool_use("Read", json!({"file_path": file})))
        .after_tool("Read", Reply::tool_use("Edit", edit("one\n", "ONE\n")))
        .rule(
            Rule::new(
                "the second Edit",
                When::ToolResult("Edit".into()),
                Reply::tool_use("Edit", edit("ten\n", "TEN\n")),
            )
            .once(),
        )
        .after_tool(
            "Edit",
            Reply::tool_use("Write", json!({"file_path": new, "content": NEW_TEXT})),
        )
        .after_tool("Write", Reply::text(DONE))
}

/// The files are as the model left them.
pub fn assert_applied(root: &Path) {
    assert_eq!(std::fs::read_to_string(root.join(FILE)).unwrap(), AFTER);
    assert_eq!(
        std::fs::read_to_string(root.join(NEW_FILE)).unwrap(),
        NEW_TEXT
    );
}

/// What Claude's own transcripts under `home` say of the edits, as the
/// service reads them: one line per edit and prompt (paths relative to
/// `root`), so a test sees the CLI still writes what the transcript source
/// relies on.
pub fn transcript_edits(home: &Path, root: &Path) -> String {
    let projects = home.join(".claude/projects");
    let mut out = Vec::new();
    let dirs =
        std::fs::read_dir(&projects).unwrap_or_else(|e| panic!("{}: {e}", projects.display()));
    for dir in dirs.flatten() {
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if file.path().extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(file.path()).unwrap();
            for line in text.lines() {
                match parse_transcript_line(line) {
                    TranscriptEntry::Prompt { text, .. } => out.push(format!("prompt {text:?}")),
                    TranscriptEntry::Edit { edit, .. } => out.push(format!(
                        "edit {} {:?} -> {:?}",
                        edit.path.strip_prefix(root).unwrap_or(&edit.path).display(),
                        edit.before,
                        edit.after
                    )),
                    TranscriptEntry::BadEdit { why, .. } => out.push(format!("bad edit: {why}")),
                    TranscriptEntry::TurnEnded { .. } => out.push("turn ended".into()),
                    TranscriptEntry::Other => {}
                }
            }
        }
    }
    out.join("\n")
}

/// Waits for the change set whose turn just ended (the service's
/// `moonkale/changes/changed` naming it in `announce`); its id, and the set
/// as `moonkale/changes/show` gives it, rendered ([`render_set`]).
pub async fn finished_set(ed: &mut Client, root: &Path) -> (u64, String) {
    let changed = ed
        .take("a change set announced", crate::STEP, |m| {
            m["method"] == "moonkale/changes/changed" && m["params"]["announce"].is_u64()
        })
        .await;
    let set = changed["params"]["announce"].as_u64().unwrap();
    let shown = ed.call("moonkale/changes/show", json!({"set": set})).await;
    (set, render_set(&shown, root))
}

/// The source's kind, the title and the state, then per file its kind and
/// hunks (`before..end -> after..end: removed -> added`), paths relative
/// to `root`.
pub fn render_set(shown: &Value, root: &Path) -> String {
    let root = format!("file://{}/", root.display());
    let set = &shown["set"];
    let mut out = vec![format!(
        "{} {:?} {}",
        set["source"]["kind"].as_str().unwrap_or_default(),
        set["title"].as_str().unwrap_or_default(),
        set["state"].as_str().unwrap_or_default()
    )];
    for file in shown["files"].as_array().into_iter().flatten() {
        let uri = file["uri"].as_str().unwrap_or_default();
        out.push(format!(
            "{} {}",
            uri.strip_prefix(&root).unwrap_or(uri),
            file["kind"].as_str().unwrap_or_default()
        ));
        for hunk in file["hunks"].as_array().into_iter().flatten() {
            out.push(format!(
                "  {}..{} -> {}..{}: {:?} -> {:?}",
                hunk["before"]["start"],
                hunk["before"]["end"],
                hunk["after"]["start"],
                hunk["after"]["end"],
                hunk["removed"].as_str().unwrap_or_default(),
                hunk["added"].as_str().unwrap_or_default()
            ));
        }
    }
    out.join("\n")
}

/// The world of an editor's review test: the hosted agent (the real CLI)
/// with [`FILE`] in the workspace and the fake answering with [`script`];
/// start the editor on it, then [`hosted_turn`].
pub async fn hosted_world() -> crate::world::World {
    let w = crate::world::World::builder()
        .agent()
        .file(FILE, BEFORE)
        .start()
        .await;
    w.fake.set_script(script(&w.sb.workspace));
    w
}

/// Runs [`PROMPT`] in a new hosted session in `acceptEdits` (Claude edits
/// without asking) until the turn is over and its edits are on disk.
pub async fn hosted_turn(w: &mut crate::world::World) {
    let session =
        w.ed.start_session(json!({"permissionMode": "acceptEdits"}))
            .await;
    let seq = w.ed.send_prompt(&session, PROMPT).await;
    w.ed.turn_idle(&session, seq).await;
    assert_applied(&w.sb.workspace);
}
