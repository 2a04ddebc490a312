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

/// The code action of `ed` on line `line` of `uri` whose title starts with
/// `title`.
async fn code_action(ed: &mut Client, uri: &str, line: u32, title: &str) -> Value {
    let at = json!({"line": line, "character": 0});
    let actions = ed
        .call(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "context": {"diagnostics": []},
                   "range": {"start": at, "end": at}}),
        )
        .await;
    actions
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["title"].as_str().is_some_and(|t| t.starts_with(title)))
        .cloned()
        .unwrap_or_else(|| panic!("no code action {title:?} on line {line} of {uri}: {actions}"))
}

/// Runs a code action's command, as an editor does when it is picked; the
/// whole response (an error is the user's message).
async fn run(ed: &mut Client, action: &Value) -> Value {
    ed.request(
        "workspace/executeCommand",
        json!({"command": action["command"]["command"], "arguments": action["command"]["arguments"]}),
    )
    .await
}

/// The review as a user of an editor with no plugin (Helix) does it, with
/// the diagnostics and code actions alone, after [`script`]'s turn:
/// [`FILE`], opened only now, shows one hint per change, naming what was
/// there (sent when it opens the file: Helix drops diagnostics of files it
/// does not have open); the user
/// changes Claude's last line and saves; "Undo Claude's change" on the
/// first line restores exactly it (the other change and the user's text
/// stay, the editor gets the new text); on the last line it is refused
/// naming the conflict, and the user's text survives; "Undo all of
/// Claude's changes" to [`NEW_FILE`] removes it.
pub async fn walk_in_a_plain_editor(ed: &mut Client, root: &Path) {
    let uri = format!("file://{}/{FILE}", root.display());
    let new_uri = format!("file://{}/{NEW_FILE}", root.display());
    let path = root.join(FILE);
    // The editor keeps diagnostics only for documents it has open: what
    // was sent before it opens the file does not count.
    ed.ignore_received();
    ed.did_open(&uri, 1, AFTER).await;
    let hints = ed
        .take("the change hints on the file", crate::STEP, |m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri.as_str()
                && m["params"]["diagnostics"]
                    .as_array()
                    .is_some_and(|d| d.len() == 2)
        })
        .await;
    let hints = &hints["params"]["diagnostics"];
    assert_eq!(hints[0]["source"], "claude", "{hints}");
    assert_eq!(hints[0]["range"]["start"]["line"], 0, "{hints}");
    assert!(
        hints[0]["message"].as_str().unwrap().contains("- one"),
        "{hints}"
    );
    assert_eq!(hints[1]["range"]["start"]["line"], 9, "{hints}");
    assert!(
        hints[1]["message"].as_str().unwrap().contains("- ten"),
        "{hints}"
    );

    // The user changes Claude's last line and saves.
    let mine = AFTER.replace("TEN", "TEN, said I");
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": mine}]}),
    )
    .await;
    std::fs::write(&path, &mine).unwrap();
    ed.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": uri}, "text": mine}),
    )
    .await;

    let undo = code_action(ed, &uri, 0, "Undo Claude's change").await;
    let done = run(ed, &undo).await;
    assert!(done.get("error").is_none(), "{done}");
    let restored = mine.replace("ONE", "one");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), restored);
    // The editor's buffer (unmodified since the save) gets the same text.
    let edit = ed
        .take("the undo's edit of the buffer", crate::STEP, |m| {
            m["method"] == "workspace/applyEdit"
                && m["params"]["edit"]["changes"][uri.as_str()].is_array()
        })
        .await;
    assert_eq!(
        edit["params"]["edit"]["changes"][uri.as_str()][0]["newText"],
        restored.as_str()
    );

    let undo = code_action(ed, &uri, 9, "Undo Claude's change").await;
    let refused = run(ed, &undo).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(FILE) && message.contains("changed after Claude"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), restored);

    ed.did_open(&new_uri, 1, NEW_TEXT).await;
    let undo = code_action(ed, &new_uri, 0, "Undo all of Claude's changes").await;
    let done = run(ed, &undo).await;
    assert!(done.get("error").is_none(), "{done}");
    assert!(!root.join(NEW_FILE).exists(), "{NEW_FILE} is still there");
}

/// Which Claude makes the turn's edits, as a user runs it.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// A plain `claude --ide` the user starts in a terminal of their own
    /// in the workspace, in its default auto mode (seen in its transcript).
    UserCli,
    /// "Start Claude Code here" (`moonkale.startClaude`) with the CLI's
    /// auto mode (a terminal of the service's; seen in its transcript).
    Terminal,
    /// The hosted agent in `acceptEdits` (seen in its tool results).
    Hosted,
}

/// What keeps a turn's Claude alive until the test ends.
pub struct Running {
    _cli: Option<crate::claude_cli::Claude>,
}

/// The world of a review test: [`FILE`] in the workspace, the fake
/// answering with [`script`], what `source` needs (the agent, terminals
/// that run the CLI), and a first plain LSP editor; start the editor under
/// test on it, then [`turn`].
pub async fn world(source: Source) -> crate::world::World {
    let builder = crate::world::World::builder()
        .file(FILE, BEFORE)
        .editor("plain-editor", crate::lsp::plain_caps());
    let builder = match source {
        Source::UserCli => builder,
        Source::Terminal => builder.claude_in_terminals(),
        Source::Hosted => builder.agent(),
    };
    let w = builder.start().await;
    w.fake.set_script(script(&w.sb.workspace));
    w
}

/// Runs [`PROMPT`] with `source` until the model said [`DONE`] and its
/// edits are on disk.
pub async fn turn(w: &mut crate::world::World, source: Source) -> Running {
    let root = w.sb.workspace.clone();
    let cli = match source {
        Source::UserCli => {
            let uri = w.open(FILE).await;
            let mut cli = w
                .claude(&root, |c| {
                    let mut c = c.auto_mode();
                    c.sse_port = None;
                    c.arg("--ide")
                })
                .await;
            w.show_in_cli(&mut cli, &uri, (0, 0), (0, 0), "⧉ In review.txt")
                .await;
            cli.submit(PROMPT, crate::STEP).await;
            cli.wait_for_text(DONE, crate::STEP).await;
            Some(cli)
        }
        Source::Terminal => {
            terminal_turn(&mut w.ed).await;
            None
        }
        Source::Hosted => {
            let session =
                w.ed.start_session(json!({"permissionMode": "acceptEdits"}))
                    .await;
            let seq = w.ed.send_prompt(&session, PROMPT).await;
            w.ed.turn_idle(&session, seq).await;
            None
        }
    };
    assert_applied(&root);
    Running { _cli: cli }
}

/// "Start Claude Code here" in auto mode, the prompt typed into the
/// terminal, until the model's last word shows; the terminal's id and the
/// CLI's arguments.
pub async fn terminal_turn(c: &mut Client) -> (u64, Vec<String>) {
    let info = c
        .call(
            "workspace/executeCommand",
            json!({"command": "moonkale.startClaude", "arguments": [["--permission-mode", "auto"]]}),
        )
        .await;
    let id = info["terminal"]
        .as_u64()
        .unwrap_or_else(|| panic!("startClaude answered {info}"));
    let argv: Vec<String> = serde_json::from_value(info["argv"].clone()).unwrap();
    wait_terminal(c, id, "the CLI's prompt in auto mode", |s| {
        s.contains("auto mode on") && s.contains('❯')
    })
    .await;
    // Connected to the service before the prompt, as the user sees it.
    crate::wait_until("the CLI connected over the IDE link", async || {
        let st = c.call("moonkale/status", Value::Null).await;
        (st["claudeClients"]
            .as_array()
            .is_some_and(|a| !a.is_empty()))
        .then_some(())
    })
    .await;
    c.call(
        "moonkale/terminal/input",
        json!({"terminal": id, "text": PROMPT}),
    )
    .await;
    wait_terminal(c, id, "the typed prompt", |s| s.contains(PROMPT)).await;
    c.call(
        "moonkale/terminal/input",
        json!({"terminal": id, "keys": ["Enter"]}),
    )
    .await;
    wait_terminal(c, id, "the model's last word", |s| s.contains(DONE)).await;
    (id, argv)
}

/// A terminal's screen as text.
async fn screen_text(c: &mut Client, id: u64) -> String {
    let s = c
        .call("moonkale/terminal/screen", json!({"terminal": id}))
        .await;
    let rows = s["lines"].as_array().cloned().unwrap_or_default();
    rows.iter()
        .map(|r| {
            let spans = r["spans"].as_array().cloned().unwrap_or_default();
            spans
                .iter()
                .map(|s| s["text"].as_str().unwrap_or("").to_owned())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until terminal `id` shows what `pred` wants, up to the STEP.
async fn wait_terminal(c: &mut Client, id: u64, what: &str, pred: impl Fn(&str) -> bool) {
    let shown = crate::poll_until(crate::STEP, async || {
        let text = screen_text(c, id).await;
        pred(&text).then_some(())
    })
    .await;
    if shown.is_none() {
        panic!("terminal {id}: no {what}:\n{}", screen_text(c, id).await);
    }
}
