//! End to end: the agent host (docs/protocol.md, "The agent"). The real
//! service runs the real `claude` CLI headless per session, pointed at the
//! fake Anthropic API (`moonkale_tests::fakeapi`) through the CLI's own
//! settings file; LSP clients drive it with `moonkale/agent/*` and answer
//! its questions. `cli_process` puts a scripted stand-in in the CLI's
//! place to break it on purpose.
//!
//! Needs `scripts/install-test-peers.sh` (or `MOONKALE_CLAUDE`) and the
//! workspace's binaries (`cargo build --workspace`).
//!
//! Every wait has a deadline (`STEP`); a turn is followed through the
//! events the service pushes to its subscribers, and failures show the
//! session's stored events, the service's log and the fake's requests.
//!
//! One test binary, one module per concern; this file holds the helpers
//! they share.

mod api_errors;
mod approvals;
mod cli_process;
mod command_line;
mod editor_tools;
mod fake_api;
mod sessions;
mod streaming;
mod warm_spare;

use std::path::{Path, PathBuf};

use moonkale_tests::world::World;
use moonkale_tests::{Client, STEP};
use serde_json::{Value, json};

/// The first of the three pieces the fake streams `text` in.
fn first_piece(text: &str) -> String {
    let n = text.chars().count();
    text.chars().take(n.div_ceil(3)).collect()
}

fn is_text_of(m: &Value, session: &str) -> bool {
    m["method"] == "moonkale/agent/text" && m["params"]["session"] == session
}

fn is_event_of(m: &Value, session: &str, pred: impl Fn(&Value) -> bool) -> bool {
    m["method"] == "moonkale/agent/event"
        && m["params"]["session"] == session
        && pred(&m["params"]["event"])
}

use moonkale_tests::agent::write_script;

/// The model, asked "write the file", writes `content` to the workspace's
/// `name` with the CLI's Write tool (then says `WRITE_DONE`), and a session
/// starts with that prompt in `default` mode, so the Write asks first.
/// Returns the file's path and the session.
async fn start_asking_write(w: &mut World, name: &str, content: &str) -> (PathBuf, String) {
    let path = w.path(name);
    w.fake
        .set_script(write_script("write the file", &path, content, "WRITE_DONE"));
    let session =
        w.ed.start_session(json!({"prompt": "write the file", "permissionMode": "default"}))
            .await;
    (path, session)
}

/// The approval id of a `moonkale/agent/approval` notification (its
/// `approval` is the approval object, or its id).
fn approval_id(note: &Value) -> String {
    let a = &note["params"]["approval"];
    a.as_str()
        .or_else(|| a["approval"].as_str())
        .unwrap_or_else(|| panic!("no approval id in {note}"))
        .to_owned()
}

/// Waits for the question for a pending approval of `session`: the
/// `moonkale/agent/approval` (pending) notification; returns it.
async fn pending_approval(ed: &mut Client, session: &str) -> Value {
    ed.take("a pending moonkale/agent/approval", STEP, |m| {
        m["method"] == "moonkale/agent/approval"
            && m["params"]["session"] == session
            && m["params"]["status"] == "pending"
    })
    .await
}

/// The titles of a `window/showMessageRequest`'s actions.
fn action_titles(ask: &Value) -> Vec<String> {
    ask["params"]["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["title"].as_str().map(str::to_owned))
        .collect()
}

/// The one stored `decision` event of `session` for `approval` (failing
/// unless there is exactly one).
async fn the_decision(ed: &mut Client, session: &str, approval: &str) -> Value {
    let (events, _) = ed.all_events(session, 1000).await;
    let mut ds: Vec<Value> = events
        .into_iter()
        .filter(|e| e["kind"] == "decision" && e["data"]["approval"] == approval)
        .collect();
    assert_eq!(ds.len(), 1, "one decision per approval: {ds:?}");
    ds.remove(0)
}

/// Reads `file` if it exists.
fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}
