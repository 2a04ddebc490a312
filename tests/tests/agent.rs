//! End to end: the agent host (docs/protocol.md, "The agent"). The real
//! service runs the real `claude` CLI headless per session, pointed at the
//! fake Anthropic API (tests/tests/support/fakeapi.rs) through the CLI's
//! own settings file; LSP clients drive it with `moonkale/agent/*` and
//! answer its questions. The last tests put a scripted stand-in in the
//! CLI's place to break it on purpose.
//!
//! Needs `scripts/install-test-peers.sh` (or `MOONKALE_CLAUDE`) and the
//! workspace's binaries (`cargo build --workspace`).
//!
//! Every wait has a deadline ([`STEP`]); a turn is followed through the
//! events the service pushes to its subscribers, and failures show the
//! session's stored events, the service's log and the fake's requests.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use moonkale_tests::agent::{
    assistant_text, describe_events, is_cli, processes_in, stand_in, stand_in_runs,
    two_writes_script,
};
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use moonkale_tests::lsp::{buttons_caps, plain_caps};
use moonkale_tests::world::World;
use moonkale_tests::{Client, STEP, short};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

// ---------------------------------------------------------------------------
// Helpers

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

/// The model writes `content` to `path` with the CLI's Write tool, then
/// says `done`.
fn write_script(prompt: &str, path: &Path, content: &str, done: &str) -> Script {
    Script::new()
        .on_prompt(
            prompt,
            Reply::tool_use(
                "Write",
                json!({"file_path": path.display().to_string(), "content": content}),
            ),
        )
        .after_tool("Write", Reply::text(done))
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

/// The stored `decision` events of `session` for `approval`.
async fn decisions(ed: &mut Client, session: &str, approval: &str) -> Vec<Value> {
    let (events, _) = ed.all_events(session, 1000).await;
    events
        .into_iter()
        .filter(|e| e["kind"] == "decision" && e["data"]["approval"] == approval)
        .collect()
}

/// Reads `file` if it exists.
fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

// ---------------------------------------------------------------------------
// 1. Streaming

/// The CLI's partial text reaches the subscribed editor as it streams: the
/// fake sends the first piece of the reply and holds the rest; the editor
/// gets that piece as `moonkale/agent/text` while no `result` can exist
/// yet. Once the rest comes, the pieces add up to the scripted text, the
/// stored `assistant` event has it whole, and the session is `idle`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_text_streams_to_the_subscriber_before_the_turn_ends() {
    let gate = Gate::new();
    let text = "STREAM_ALPHA streamed STREAM_BETA in pieces STREAM_GAMMA";
    let mut w =
        World::agent(Script::new().on_prompt("stream please", Reply::text(text).gated(&gate, 1)))
            .await;
    let session = w.ed.start_session(json!({"prompt": "stream please"})).await;
    let req = w.fake.wait_prompt("stream please", STEP).await;

    let first =
        w.ed.take("the first moonkale/agent/text", STEP, |m| {
            is_text_of(m, &session)
        })
        .await;
    assert!(!gate.is_open());
    let piece = first["params"]["text"].as_str().unwrap_or_default();
    assert!(
        !piece.is_empty() && text.starts_with(piece),
        "the first text {piece:?} is not the start of {text:?}"
    );
    w.ed.drain();
    assert!(
        w.ed.position(|m| is_event_of(m, &session, |e| is_cli(e, "result")))
            .is_none(),
        "a result before the reply was complete"
    );

    gate.open();
    let prompt_seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, prompt_seq).await;
    let first_text = w.ed.position(|m| is_text_of(m, &session)).unwrap();
    let result =
        w.ed.position(|m| is_event_of(m, &session, |e| is_cli(e, "result")))
            .expect("the result was pushed to the subscriber");
    assert!(first_text < result);
    assert_eq!(w.ed.streamed_text(&session), text, "the streamed pieces");

    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "assistant") && assistant_text(e) == text),
        "no assistant event with the whole text:\n{}",
        describe_events(&page)
    );
    assert!(
        !events.iter().any(|e| is_cli(e, "stream_event")),
        "partial stream events are not stored"
    );
    assert_eq!(page["state"], "idle");
    // The session id is the CLI's.
    assert_eq!(
        req.header("x-claude-code-session-id"),
        Some(session.as_str())
    );
}

// ---------------------------------------------------------------------------
// 2. Approvals

/// A Write in `default` mode asks: the editor that shows buttons gets a
/// `window/showMessageRequest` (Allow / Always allow Write… / Deny), the
/// subscriber a pending `moonkale/agent/approval`, the session waits for
/// approval and nothing is written. "Allow" on the button writes the file
/// with the scripted content; the decision is stored as the editor's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_allowed_from_the_editors_question_lands_on_disk() {
    let content = "WRITTEN AFTER ALLOW\nline two\n";
    let mut w = World::agent(Script::new()).await;
    let path = w.path("allowed.txt");
    w.fake
        .set_script(write_script("write the file", &path, content, "WRITE_DONE"));
    let session =
        w.ed.start_session(json!({"prompt": "write the file", "permissionMode": "default"}))
            .await;

    let ask = w.ed.server_request("window/showMessageRequest", STEP).await;
    let titles = action_titles(&ask);
    assert!(
        titles.iter().any(|t| t == "Allow")
            && titles.iter().any(|t| t == "Deny")
            && titles
                .iter()
                .any(|t| t.starts_with("Always allow") && t.contains("Write")),
        "the question's buttons: {titles:?}"
    );
    let pending = pending_approval(&mut w.ed, &session).await;
    let approval = approval_id(&pending);
    assert!(
        approval.starts_with(&format!("{session}/")),
        "approval id {approval:?} is not <session>/<n>"
    );
    if pending["params"]["approval"].is_object() {
        let a = &pending["params"]["approval"];
        assert_eq!(a["tool"], "Write", "{a}");
        assert_eq!(a["destructive"], false, "{a}");
        assert_eq!(a["session"], session.as_str(), "{a}");
        assert_eq!(a["input"]["file_path"], path.display().to_string(), "{a}");
    }
    w.ed.agent_event(&session, "state waitingForApproval", STEP, |e| {
        e["kind"] == "state" && e["data"]["state"] == "waitingForApproval"
    })
    .await;
    let page = w.ed.events_page(&session, 0, 1000).await;
    assert_eq!(page["state"], "waitingForApproval");
    assert!(
        page["pendingApprovals"]
            .as_array()
            .is_some_and(|p| p.iter().any(|a| a["approval"] == approval.as_str())),
        "pendingApprovals: {}",
        page["pendingApprovals"]
    );
    assert!(!path.exists(), "written before the answer");

    w.ed.respond(&ask["id"], json!({"title": "Allow"})).await;
    let prompt_seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, prompt_seq).await;
    assert_eq!(read(&path).as_deref(), Some(content));
    let (_, result) = w.fake.wait_tool_result("Write", STEP).await;
    assert!(!result.is_error, "the Write failed: {}", result.text);

    let ds = decisions(&mut w.ed, &session, &approval).await;
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0]["data"]["allow"], true, "{}", ds[0]);
    assert_eq!(ds[0]["data"]["by"], "editor", "{}", ds[0]);
    w.ed.take("the approval closed", STEP, |m| {
        m["method"] == "moonkale/agent/approval"
            && m["params"]["status"] == "closed"
            && approval_id(m) == approval
    })
    .await;
}

/// `moonkale/agent/answer {allow: false, message}` denies the Write: the
/// file is not written, the model gets an error tool result with the
/// message, the decision says allow false, and the editor's open question
/// is withdrawn (`$/cancelRequest`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_denied_through_the_api_is_not_written_and_errors_for_the_model() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("denied.txt");
    w.fake.set_script(write_script(
        "write the file",
        &path,
        "MUST NOT BE WRITTEN\n",
        "WRITE_DONE",
    ));
    let session =
        w.ed.start_session(json!({"prompt": "write the file", "permissionMode": "default"}))
            .await;
    let ask = w.ed.server_request("window/showMessageRequest", STEP).await;
    let approval = approval_id(&pending_approval(&mut w.ed, &session).await);

    let r =
        w.ed.call(
            "moonkale/agent/answer",
            json!({"approval": approval, "allow": false, "message": "NOPE_FROM_THE_TEST"}),
        )
        .await;
    assert_eq!(r, json!({}));
    let prompt_seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, prompt_seq).await;
    assert!(!path.exists(), "the denied Write wrote the file");
    let (_, result) = w.fake.wait_tool_result("Write", STEP).await;
    assert!(
        result.is_error,
        "the model was not told of the deny: {}",
        result.text
    );
    assert!(
        result.text.contains("NOPE_FROM_THE_TEST"),
        "the deny message did not reach the model: {}",
        result.text
    );
    let ds = decisions(&mut w.ed, &session, &approval).await;
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0]["data"]["allow"], false, "{}", ds[0]);
    assert!(
        matches!(ds[0]["data"]["by"].as_str(), Some("api" | "editor")),
        "{}",
        ds[0]
    );
    // The button question nobody clicked is withdrawn.
    w.ed.take("$/cancelRequest for the question", STEP, |m| {
        m["method"] == "$/cancelRequest" && m["params"]["id"] == ask["id"]
    })
    .await;
}

/// Two editors with buttons are asked at once. The first answer (editor A:
/// Allow) wins and the file is written; B's question is cancelled; B's late
/// click changes nothing, and B's `moonkale/agent/answer` for the same
/// approval gets -32602.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_of_two_editors_to_answer_wins_and_a_second_answer_is_refused() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("race.txt");
    let content = "FIRST ANSWER WINS\n";
    w.fake
        .set_script(write_script("write the file", &path, content, "WRITE_DONE"));
    let mut b = w.client("editor-b", buttons_caps()).await;
    b.barrier().await;
    let session =
        w.ed.start_session(json!({"prompt": "write the file", "permissionMode": "default"}))
            .await;
    let ask_a = w.ed.server_request("window/showMessageRequest", STEP).await;
    let ask_b = b.server_request("window/showMessageRequest", STEP).await;
    let approval = approval_id(&pending_approval(&mut w.ed, &session).await);

    w.ed.respond(&ask_a["id"], json!({"title": "Allow"})).await;
    b.take("$/cancelRequest of B's question", STEP, |m| {
        m["method"] == "$/cancelRequest" && m["params"]["id"] == ask_b["id"]
    })
    .await;
    // B clicks Deny all the same: too late.
    b.respond(&ask_b["id"], json!({"title": "Deny"})).await;
    let late = b
        .request(
            "moonkale/agent/answer",
            json!({"approval": approval, "allow": false}),
        )
        .await;
    assert_eq!(
        late["error"]["code"], -32602,
        "a second answer must be refused: {late}"
    );

    let prompt_seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, prompt_seq).await;
    assert_eq!(read(&path).as_deref(), Some(content));
    let ds = decisions(&mut w.ed, &session, &approval).await;
    assert_eq!(ds.len(), 1, "one decision per approval: {ds:?}");
    assert_eq!(ds[0]["data"]["allow"], true);
}

/// "Always allow Write in this session" allows this Write and the next one
/// of the same session without a question.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_skips_the_question_for_the_next_write() {
    let mut w = World::agent(Script::new()).await;
    let (one, two) = (w.path("one.txt"), w.path("two.txt"));
    w.fake.set_script(two_writes_script(&one, &two));
    let session =
        w.ed.start_session(json!({"prompt": "write one", "permissionMode": "default"}))
            .await;
    let ask = w.ed.server_request("window/showMessageRequest", STEP).await;
    let always = action_titles(&ask)
        .into_iter()
        .find(|t| t.starts_with("Always allow"))
        .unwrap_or_else(|| panic!("no Always allow button: {ask}"));
    let approval = approval_id(&pending_approval(&mut w.ed, &session).await);
    w.ed.respond(&ask["id"], json!({"title": always})).await;
    let seq1 = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq1).await;
    assert_eq!(read(&one).as_deref(), Some("ONE\n"));
    let ds = decisions(&mut w.ed, &session, &approval).await;
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(
        (&ds[0]["data"]["allow"], &ds[0]["data"]["always"]),
        (&json!(true), &json!(true)),
        "{}",
        ds[0]
    );

    let questions_before =
        w.ed.all(|m| m["method"] == "window/showMessageRequest")
            .len();
    let seq2 = w.ed.send_prompt(&session, "write two").await;
    w.ed.turn_idle(&session, seq2).await;
    assert_eq!(read(&two).as_deref(), Some("TWO\n"));
    w.ed.barrier().await;
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        !events
            .iter()
            .any(|e| e["kind"] == "approval" && e["seq"].as_u64().is_some_and(|s| s > seq2)),
        "the second Write asked again:\n{}",
        describe_events(&page)
    );
    assert_eq!(
        w.ed.all(|m| m["method"] == "window/showMessageRequest")
            .len(),
        questions_before,
        "the editor was asked again"
    );
}

/// Nobody answers: after `MOONKALE_APPROVAL_TIMEOUT_MS` (1.5 s) the Write
/// is denied, the decision says `timeout`, the file is not written and the
/// turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_approval_times_out_as_a_deny() {
    let mut w = World::builder()
        .agent()
        .approval_timeout_ms(1500)
        .start()
        .await;
    let path = w.path("timeout.txt");
    w.fake.set_script(write_script(
        "write the file",
        &path,
        "MUST NOT BE WRITTEN\n",
        "WRITE_DONE",
    ));
    let session =
        w.ed.start_session(json!({"prompt": "write the file", "permissionMode": "default"}))
            .await;
    let pending = pending_approval(&mut w.ed, &session).await;
    let asked = Instant::now();
    let approval = approval_id(&pending);
    let decision =
        w.ed.agent_event(&session, "the decision", STEP, |e| {
            e["kind"] == "decision" && e["data"]["approval"] == approval.as_str()
        })
        .await;
    let waited = asked.elapsed();
    assert_eq!(decision["data"]["by"], "timeout", "{decision}");
    assert_eq!(decision["data"]["allow"], false, "{decision}");
    assert!(
        waited >= Duration::from_millis(1200),
        "denied after {waited:?}, before the 1.5 s timeout"
    );
    let prompt_seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_end(&session, prompt_seq, STEP).await;
    assert!(!path.exists(), "written without an answer");
    let (_, result) = w.fake.wait_tool_result("Write", STEP).await;
    assert!(result.is_error, "{}", result.text);
}

/// "Always allow Bash" does not cover destructive commands: after the
/// user always-allowed a harmless `touch`, an `rm` asks again (marked
/// destructive), and a deny keeps the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destructive_shell_command_asks_even_after_always_allow() {
    let mut w = World::builder()
        .agent()
        .files(vec![("victim.txt".into(), "PRECIOUS\n".into())])
        .start()
        .await;
    let victim = w.path("victim.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "touch a file",
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch made-by-bash.txt", "description": "Create a file"}),
                ),
            )
            .on_prompt(
                "remove the victim",
                Reply::tool_use(
                    "Bash",
                    json!({"command": "rm -f victim.txt", "description": "Remove a file"}),
                ),
            )
            .after_tool("Bash", Reply::text("BASH_DONE")),
    );
    let session =
        w.ed.start_session(json!({"prompt": "touch a file", "permissionMode": "default"}))
            .await;
    let ask = w.ed.server_request("window/showMessageRequest", STEP).await;
    let always = action_titles(&ask)
        .into_iter()
        .find(|t| t.starts_with("Always allow"))
        .unwrap_or_else(|| panic!("no Always allow button: {ask}"));
    w.ed.respond(&ask["id"], json!({"title": always})).await;
    let seq1 = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq1).await;
    assert!(
        w.path("made-by-bash.txt").exists(),
        "the allowed touch did not run"
    );

    let seq2 = w.ed.send_prompt(&session, "remove the victim").await;
    let first =
        w.ed.take("a question for the rm, or the end of the turn", STEP, |m| {
            (m["method"] == "window/showMessageRequest" && m.get("id").is_some())
                || is_event_of(m, &session, |e| {
                    e["kind"] == "state"
                        && e["seq"].as_u64() > Some(seq2)
                        && matches!(e["data"]["state"].as_str(), Some("idle" | "failed"))
                })
        })
        .await;
    if first["method"] != "window/showMessageRequest" {
        return w
            .ed
            .fail_with_events(
                &session,
                &format!(
                    "`rm` ran without a question after \"always allow Bash\" (victim.txt exists: {})",
                    victim.exists()
                ),
            )
            .await;
    }
    let pending =
        w.ed.take("the rm's approval", STEP, |m| {
            m["method"] == "moonkale/agent/approval"
                && m["params"]["status"] == "pending"
                && m["params"]["approval"]["input"]["command"] == "rm -f victim.txt"
        })
        .await;
    assert_eq!(
        pending["params"]["approval"]["destructive"], true,
        "{pending}"
    );
    w.ed.respond(&first["id"], json!({"title": "Deny"})).await;
    w.ed.turn_idle(&session, seq2).await;
    assert_eq!(read(&victim).as_deref(), Some("PRECIOUS\n"));
}

/// An interrupt while a question is open: the CLI withdraws the question,
/// the decision says `withdrawn`, the editors' questions are cancelled,
/// nothing is written and the session is idle again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_while_asking_withdraws_the_question() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("withdrawn.txt");
    w.fake.set_script(write_script(
        "write the file",
        &path,
        "MUST NOT BE WRITTEN\n",
        "WRITE_DONE",
    ));
    let session =
        w.ed.start_session(json!({"prompt": "write the file", "permissionMode": "default"}))
            .await;
    let ask = w.ed.server_request("window/showMessageRequest", STEP).await;
    let approval = approval_id(&pending_approval(&mut w.ed, &session).await);
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.call("moonkale/agent/interrupt", json!({"session": session}))
        .await;
    let decision =
        w.ed.agent_event(&session, "the decision", STEP, |e| {
            e["kind"] == "decision" && e["data"]["approval"] == approval.as_str()
        })
        .await;
    assert_eq!(decision["data"]["by"], "withdrawn", "{decision}");
    assert_eq!(decision["data"]["allow"], false, "{decision}");
    w.ed.take("$/cancelRequest for the question", STEP, |m| {
        m["method"] == "$/cancelRequest" && m["params"]["id"] == ask["id"]
    })
    .await;
    let end = w.ed.turn_end(&session, seq, STEP).await;
    assert_eq!(end["data"]["state"], "idle", "{}", end["data"]);
    assert!(!path.exists());
    let page = w.ed.events_page(&session, 0, 1).await;
    assert_eq!(page["pendingApprovals"], json!([]), "{page}");
    // A late answer to the withdrawn question is refused.
    let late =
        w.ed.request(
            "moonkale/agent/answer",
            json!({"approval": approval, "allow": true}),
        )
        .await;
    assert_eq!(late["error"]["code"], -32602, "{late}");
}

/// The default permission mode is `plan` (read-only): a Write is refused
/// without asking anyone, nothing is written, the session and the list say
/// `plan`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_is_the_default_mode_and_writes_nothing() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("plan.txt");
    w.fake.set_script(write_script(
        "write the file",
        &path,
        "MUST NOT BE WRITTEN\n",
        "PLAN_DONE",
    ));
    let session =
        w.ed.start_session(json!({"prompt": "write the file"}))
            .await;
    let seq = w.ed.last_prompt_seq(&session).await;
    // Either the turn ends, or somebody is asked (which must not happen).
    let first =
        w.ed.take("the end of the turn or a question", STEP, |m| {
            (m["method"] == "moonkale/agent/approval" && m["params"]["session"] == session)
                || is_event_of(m, &session, |e| {
                    e["kind"] == "state"
                        && e["seq"].as_u64() > Some(seq)
                        && matches!(e["data"]["state"].as_str(), Some("idle" | "failed"))
                })
        })
        .await;
    if first["method"] == "moonkale/agent/approval" {
        return w
            .ed
            .fail_with_events(
                &session,
                &format!(
                    "a plan-mode (read-only) session asked the user to allow a Write; \
                     answering Allow would write the file: {}",
                    short(&first.to_string(), 600)
                ),
            )
            .await;
    }
    assert_eq!(first["params"]["event"]["data"]["state"], "idle", "{first}");
    assert!(!path.exists(), "written in plan mode");
    let (_, result) = w.fake.wait_tool_result("Write", STEP).await;
    assert!(result.is_error, "{}", result.text);
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        !events.iter().any(|e| e["kind"] == "approval"),
        "plan mode asked:\n{}",
        describe_events(&page)
    );
    assert_eq!(events[0]["kind"], "session", "{}", describe_events(&page));
    assert_eq!(events[0]["data"]["permissionMode"], "plan");
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let entry = list["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["session"] == session.as_str()))
        .unwrap_or_else(|| panic!("{session} not listed: {list}"));
    assert_eq!(entry["permissionMode"], "plan", "{entry}");
}

/// Humans are slow: a Write approved 12 s after it was asked still runs,
/// in the same CLI process (the session waits for the answer all along).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_answered_after_twelve_seconds_still_writes() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("slow-human.txt");
    w.fake.set_script(write_script(
        "write the file",
        &path,
        "APPROVED LATE\n",
        "WRITE_DONE",
    ));
    let session =
        w.ed.start_session(json!({"prompt": "write the file", "permissionMode": "default"}))
            .await;
    let ask = w.ed.server_request("window/showMessageRequest", STEP).await;
    let seq = w.ed.last_prompt_seq(&session).await;
    let waiting =
        w.ed.agent_event(&session, "state waitingForApproval", STEP, |e| {
            e["kind"] == "state" && e["data"]["state"] == "waitingForApproval"
        })
        .await;
    let since = waiting["seq"].as_u64().unwrap();
    // Nothing may happen to the turn while the user thinks.
    let changed =
        w.ed.try_take(Duration::from_secs(12), |m| {
            is_event_of(m, &session, |e| {
                e["seq"].as_u64() > Some(since) && (e["kind"] == "decision" || e["kind"] == "state")
            })
        })
        .await;
    if let Some(m) = changed {
        return w
            .ed
            .fail_with_events(
                &session,
                &format!(
                    "while the approval waited: {}",
                    short(&m["params"]["event"].to_string(), 600)
                ),
            )
            .await;
    }
    w.ed.respond(&ask["id"], json!({"title": "Allow"})).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path).as_deref(), Some("APPROVED LATE\n"));
    let starts = w.service_log().matches("started claude").count();
    assert_eq!(starts, 1, "the CLI was started {starts} times");
}

/// An editor without buttons gets the question as `window/showMessage`,
/// and as code actions on its open document (`Claude: allow …`, `Claude:
/// deny …`); running the allow action's `moonkale.answerApproval` command
/// answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_answered_with_a_code_action_in_an_editor_without_buttons() {
    let mut w = World::builder()
        .agent()
        .without_buttons()
        .files(vec![("open.txt".into(), "an open document\n".into())])
        .start()
        .await;
    let path = w.path("by-code-action.txt");
    w.fake.set_script(write_script(
        "write the file",
        &path,
        "ALLOWED BY A CODE ACTION\n",
        "WRITE_DONE",
    ));
    let uri = w.sb.uri("open.txt");
    w.ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "text", "version": 1, "text": "an open document\n"}}),
    )
    .await;
    let session =
        w.ed.start_session(json!({"prompt": "write the file", "permissionMode": "default"}))
            .await;
    let approval = approval_id(&pending_approval(&mut w.ed, &session).await);
    w.ed.take("a window/showMessage", STEP, |m| {
        m["method"] == "window/showMessage" && m.get("id").is_none()
    })
    .await;
    assert!(
        w.ed.all(|m| m["method"] == "window/showMessageRequest")
            .is_empty(),
        "an editor without buttons got a showMessageRequest"
    );
    let actions = w
        .ed
        .call(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri},
                   "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                   "context": {"diagnostics": []}}),
        )
        .await;
    let list = actions.as_array().cloned().unwrap_or_default();
    let titles: Vec<&str> = list.iter().filter_map(|a| a["title"].as_str()).collect();
    assert!(
        titles.iter().any(|t| t.starts_with("Claude: deny")),
        "code actions: {titles:?}"
    );
    let allow = list
        .iter()
        .find(|a| {
            a["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("Claude: allow"))
        })
        .unwrap_or_else(|| panic!("no `Claude: allow` code action: {titles:?}"));
    // A Command, or a CodeAction that carries one.
    let command = if allow["command"].is_string() {
        allow.clone()
    } else {
        allow["command"].clone()
    };
    assert_eq!(command["command"], "moonkale.answerApproval", "{allow}");
    assert_eq!(
        command["arguments"][0]["approval"],
        approval.as_str(),
        "{allow}"
    );
    w.ed.call(
        "workspace/executeCommand",
        json!({"command": command["command"], "arguments": command["arguments"]}),
    )
    .await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path).as_deref(), Some("ALLOWED BY A CODE ACTION\n"));
    let ds = decisions(&mut w.ed, &session, &approval).await;
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0]["data"]["allow"], true);
}

/// `setPermissionMode` reaches the CLI: a session started in `plan` and
/// switched to `acceptEdits` writes without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_permission_mode_accept_edits_writes_without_asking() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("accepted.txt");
    w.fake.set_script(write_script(
        "write the file",
        &path,
        "WRITTEN IN ACCEPT EDITS\n",
        "WRITE_DONE",
    ));
    let session = w.ed.start_session(json!({})).await;
    let r =
        w.ed.call(
            "moonkale/agent/setPermissionMode",
            json!({"session": session, "mode": "acceptEdits"}),
        )
        .await;
    assert_eq!(r, json!({"mode": "acceptEdits"}));
    let seq = w.ed.send_prompt(&session, "write the file").await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path).as_deref(), Some("WRITTEN IN ACCEPT EDITS\n"));
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        !events.iter().any(|e| e["kind"] == "approval"),
        "acceptEdits asked:\n{}",
        describe_events(&page)
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "settings" && e["data"]["permissionMode"] == "acceptEdits"),
        "no settings event:\n{}",
        describe_events(&page)
    );
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    assert_eq!(
        list["sessions"][0]["permissionMode"], "acceptEdits",
        "{list}"
    );
}

/// Bad requests are refused with -32602: an unknown session (send,
/// events, interrupt), an unknown approval, a prompt over 4 MiB, an
/// unknown permission mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_agent_requests_are_refused() {
    let mut w = World::agent(Script::new()).await;
    let unknown = "00000000-0000-4000-8000-000000000000";
    let big = "x".repeat(4 * 1024 * 1024 + 1);
    for (method, params) in [
        (
            "moonkale/agent/send",
            json!({"session": unknown, "prompt": "hi"}),
        ),
        (
            "moonkale/agent/events",
            json!({"session": unknown, "since": 0}),
        ),
        ("moonkale/agent/interrupt", json!({"session": unknown})),
        (
            "moonkale/agent/answer",
            json!({"approval": format!("{unknown}/1"), "allow": true}),
        ),
        ("moonkale/agent/start", json!({"prompt": big})),
        (
            "moonkale/agent/start",
            json!({"prompt": "hi", "permissionMode": "yolo"}),
        ),
        ("moonkale/agent/send", json!({"prompt": "no session"})),
    ] {
        let r = w.ed.request(method, params.clone()).await;
        assert_eq!(
            r["error"]["code"],
            -32602,
            "{method} {}: {}",
            short(&params.to_string(), 200),
            short(&r.to_string(), 300)
        );
    }
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    assert_eq!(
        list["sessions"],
        json!([]),
        "a refused start left a session"
    );
}

/// Editors that advertise `window.workDoneProgress` see the turn as
/// `$/progress` on token `moonkale-agent-<session>` (created first):
/// `begin` titled "Claude", a `report` naming the tool in use, `end`.
/// Editors that do not advertise it get none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_shows_in_editors_that_take_it() {
    let mut w = World::builder()
        .agent()
        .files(vec![("read-me.txt".into(), "READ_ME_CONTENT\n".into())])
        .start()
        .await;
    let file = w.path("read-me.txt").display().to_string();
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "read the file",
                Reply::tool_use("Read", json!({"file_path": file})),
            )
            .after_tool("Read", Reply::text("READ_DONE")),
    );
    let mut progress = w
        .client(
            "progress-editor",
            json!({"general": {"positionEncodings": ["utf-16"]}, "window": {"workDoneProgress": true}}),
        )
        .await;
    progress.barrier().await;
    let (session, _) = w.ed.run_first_turn("read the file", json!({})).await;
    let token = format!("moonkale-agent-{session}");
    let is_progress = |m: &Value, kind: &str| {
        m["method"] == "$/progress"
            && m["params"]["token"] == token.as_str()
            && m["params"]["value"]["kind"] == kind
    };
    let create = progress
        .take("window/workDoneProgress/create", STEP, |m| {
            m["method"] == "window/workDoneProgress/create"
        })
        .await;
    assert_eq!(create["params"]["token"], token.as_str(), "{create}");
    let begin = progress
        .take("$/progress begin", STEP, |m| is_progress(m, "begin"))
        .await;
    assert_eq!(begin["params"]["value"]["title"], "Claude", "{begin}");
    progress
        .take("$/progress end", STEP, |m| is_progress(m, "end"))
        .await;
    let reports = progress.all(|m| is_progress(m, "report"));
    assert!(
        reports.iter().any(|r| r["params"]["value"]["message"]
            .as_str()
            .is_some_and(|t| t.contains("Read"))),
        "no report names the Read tool: {reports:?}"
    );
    let order: Vec<&str> = progress
        .log
        .iter()
        .filter(|m| m["method"] == "$/progress" && m["params"]["token"] == token.as_str())
        .filter_map(|m| m["params"]["value"]["kind"].as_str())
        .collect();
    assert_eq!(order.first(), Some(&"begin"), "{order:?}");
    assert_eq!(order.last(), Some(&"end"), "{order:?}");
    w.ed.barrier().await;
    assert!(
        w.ed.all(|m| m["method"] == "$/progress" || m["method"] == "window/workDoneProgress/create")
            .is_empty(),
        "an editor without workDoneProgress got progress"
    );
}

// ---------------------------------------------------------------------------
// 3. The editor goes away

/// The editor that started a turn disconnects while the fake still delays
/// its reply; the turn finishes all the same (the fake answered it), and a
/// new client reads every event in pages (`next`): the prompt, the
/// assistant message with the scripted text, the `result`; state `idle`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_finishes_after_the_editor_disconnects_and_a_new_client_reads_it() {
    let prompt = "slow turn, take your time";
    let mut w = World::agent(Script::new().on_prompt(
        "slow turn",
        Reply::text("SLOW_REPLY_FINISHED_UNWATCHED").with_delay(Duration::from_secs(3)),
    ))
    .await;
    let session = w.ed.start_session(json!({"prompt": prompt})).await;
    w.fake.wait_prompt("slow turn", STEP).await;
    // Gone mid-turn.
    let late = w.client("late-reader", plain_caps()).await;
    drop(std::mem::replace(&mut w.ed, late));

    w.fake
        .wait_for("the slow reply sent whole", STEP, |log| {
            log.iter()
                .find(|r| r.rule.contains("slow turn") && r.answered)
                .cloned()
        })
        .await;
    w.ed.call("moonkale/agent/subscribe", json!({"session": session}))
        .await;
    let (events, page) = w.ed.all_events(&session, 2).await;
    let prompt_seq = events
        .iter()
        .find(|e| e["kind"] == "prompt")
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or_else(|| panic!("no prompt event:\n{}", describe_events(&page)));
    if page["state"] != "idle" {
        w.ed.turn_end(&session, prompt_seq, STEP).await;
    }
    let (events, page) = w.ed.all_events(&session, 2).await;
    let all = describe_events(&json!({"events": events, "state": page["state"]}));
    assert_eq!(page["state"], "idle", "{all}");
    let prompt_event = &events[prompt_seq as usize];
    assert_eq!(prompt_event["data"]["text"], prompt, "{all}");
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "assistant") && assistant_text(e) == "SLOW_REPLY_FINISHED_UNWATCHED"),
        "{all}"
    );
    assert!(
        events.iter().any(|e| is_cli(e, "result")
            && e["data"]["is_error"] == false
            && e["data"]["result"] == "SLOW_REPLY_FINISHED_UNWATCHED"),
        "{all}"
    );
    for e in &events {
        assert!(e["at"].as_u64().is_some(), "an event without `at`: {e}");
    }
}

// ---------------------------------------------------------------------------
// 4. Interrupt

/// `moonkale/agent/interrupt` while the API hangs: answered `{}`, the turn
/// ends with a `result`, the session is `idle` again (not stuck `running`)
/// and takes the next prompt, which succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_ends_a_hanging_turn_and_the_session_goes_on() {
    let mut w = World::agent(
        Script::new()
            .rule(
                moonkale_tests::fakeapi::Rule::new(
                    "hang",
                    moonkale_tests::fakeapi::When::Prompt("hang please".into()),
                    Reply::text("NEVER_SEEN").hanging(Duration::from_secs(60)),
                )
                .once(),
            )
            .on_prompt("after the interrupt", Reply::text("AFTER_INTERRUPT_OK")),
    )
    .await;
    let session = w.ed.start_session(json!({"prompt": "hang please"})).await;
    w.fake.wait_prompt("hang please", STEP).await;
    let seq1 = w.ed.last_prompt_seq(&session).await;
    w.ed.agent_event(&session, "state running", STEP, |e| {
        e["kind"] == "state" && e["data"]["state"] == "running"
    })
    .await;

    let started = Instant::now();
    let r =
        w.ed.call("moonkale/agent/interrupt", json!({"session": session}))
            .await;
    assert_eq!(r, json!({}));
    w.ed.agent_event(&session, "the interrupted turn's result", STEP, |e| {
        is_cli(e, "result") && e["seq"].as_u64().is_some_and(|s| s > seq1)
    })
    .await;
    let end = w.ed.turn_end(&session, seq1, STEP).await;
    assert_eq!(
        end["data"]["state"], "idle",
        "after an interrupt: {}",
        end["data"]
    );
    assert!(started.elapsed() < STEP);
    let page = w.ed.events_page(&session, 0, 1).await;
    assert_eq!(page["state"], "idle");

    let seq2 = w.ed.send_prompt(&session, "after the interrupt").await;
    w.ed.turn_idle(&session, seq2).await;
    let (events, _) = w.ed.all_events(&session, 1000).await;
    assert!(events.iter().any(|e| e["seq"].as_u64() > Some(seq2)
        && is_cli(e, "assistant")
        && assistant_text(e) == "AFTER_INTERRUPT_OK"));
}

// ---------------------------------------------------------------------------
// 5. Resume

/// A session survives a service restart: turn 1 ("remember 42"), SIGTERM
/// (the service and its CLI exit), a new service lists the session, and a
/// prompt sent to it continues the CLI's own conversation (`--resume`):
/// the model gets turn 1 in its history; the events hold both turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_resumes_after_a_service_restart() {
    let mut w = World::agent(
        Script::new()
            .on_prompt("remember 42", Reply::text("REMEMBERED_FORTY_TWO"))
            .on_prompt("which number", Reply::text("IT_WAS_42")),
    )
    .await;
    let (session, _) =
        w.ed.run_first_turn("please remember 42 for later", json!({}))
            .await;
    w.stop_service().await;
    // The service took its CLI with it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut leftovers = processes_in(&w.sb.workspace);
    while !leftovers.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        leftovers = processes_in(&w.sb.workspace);
    }
    let leftover_cmds: Vec<String> = leftovers
        .iter()
        .map(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .unwrap_or_default()
                .replace('\0', " ")
        })
        .collect();
    for pid in &leftovers {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }

    w.restart_service().await;
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let entry = list["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["session"] == session.as_str()))
        .unwrap_or_else(|| panic!("{session} is not listed after the restart: {list}"));
    assert!(
        entry["events"].as_u64().unwrap_or(0) > 0,
        "listed without events: {entry}"
    );
    assert!(
        entry["created"].as_u64().is_some() && entry["updated"].as_u64().is_some(),
        "{entry}"
    );
    // `send` subscribes the sender.
    let seq2 =
        w.ed.send_prompt(&session, "which number did I ask you to remember?")
            .await;
    w.ed.turn_idle(&session, seq2).await;
    let req = w.fake.wait_prompt("which number", STEP).await;
    let history = req.all_message_text();
    let (events, page) = w.ed.all_events(&session, 1000).await;
    let all = describe_events(&json!({"events": events, "state": page["state"]}));
    assert!(
        history.contains("please remember 42 for later")
            && req.body_text().contains("REMEMBERED_FORTY_TWO"),
        "turn 1 is not in the resumed conversation (a fresh one was started?): {}\n{all}",
        short(&history, 3000)
    );
    let prompts: Vec<&Value> = events.iter().filter(|e| e["kind"] == "prompt").collect();
    assert_eq!(prompts.len(), 2, "{all}");
    assert_eq!(
        events.iter().filter(|e| is_cli(e, "result")).count(),
        2,
        "{all}"
    );
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "assistant") && assistant_text(e) == "IT_WAS_42"),
        "{all}"
    );
    assert!(
        !events.iter().any(|e| e["kind"] == "notice"),
        "a notice (fresh start?): {all}"
    );
    assert!(
        leftovers.is_empty(),
        "the service exited but left its CLI running: {leftover_cmds:?}"
    );
}

// ---------------------------------------------------------------------------
// 6. Byte-exact prompts

/// A prompt with newlines, quotes, backslashes, unicode and 100 KB of text
/// reaches the model byte for byte, and is stored byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_reaches_the_model_byte_exact() {
    let mut prompt = String::from(
        "BYTE_EXACT_START\nline two: \"double\" and 'single' quotes, a back\\slash, \\n (not a newline), \\\\ two, a\ttab\n\
         unicode: héllo wörld — ✓ 🌍 中文 עברית e\u{301} zero\u{200b}width 👩‍👩‍👧\n\
         {\"json\": [1, 2]} <tag attr=\"x\">&amp;</tag> $HOME `cmd` %s {} \n\n",
    );
    let unit = "0123456789 abcdefghijklmnopqrstuvwxyz \"q\" \\b é 🌍 ABCDEFGHIJKLMNOPQRSTUVWXYZ\n";
    while prompt.len() < 100 * 1024 {
        prompt += unit;
    }
    prompt += "BYTE_EXACT_END";
    let mut w =
        World::agent(Script::new().on_prompt("BYTE_EXACT_START", Reply::text("GOT_IT_EXACTLY")))
            .await;
    let (session, seq) = w.ed.run_first_turn(&prompt, json!({})).await;

    let page = w.ed.events_page(&session, seq, 1).await;
    assert!(
        page["events"][0]["data"]["text"] == prompt.as_str(),
        "the stored prompt differs from the one sent"
    );
    let req = w.fake.wait_prompt("BYTE_EXACT_START", STEP).await;
    let blocks: Vec<String> = req.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(bs) => bs
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect(),
            _ => vec![],
        })
        .collect();
    if blocks.contains(&prompt) {
        return;
    }
    let near = blocks
        .iter()
        .find(|b| b.contains("BYTE_EXACT_START"))
        .unwrap_or_else(|| panic!("the prompt is not in the request"));
    let at = near
        .bytes()
        .zip(prompt.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(near.len().min(prompt.len()));
    let ctx = |s: &str| {
        let from = at.saturating_sub(40);
        String::from_utf8_lossy(&s.as_bytes()[from..(at + 40).min(s.len())]).into_owned()
    };
    panic!(
        "the model got a different prompt ({} bytes, sent {}); first difference at byte {at}:\n sent: {:?}\n  got: {:?}",
        near.len(),
        prompt.len(),
        ctx(&prompt),
        ctx(near)
    );
}

// ---------------------------------------------------------------------------
// 7. API errors

/// Every main request gets `reply`; the turn must end `failed` within
/// 20 s with an `error` naming one of `expect`. Returns the world and the
/// session.
async fn api_failure(reply: Reply, expect: &[&str]) -> (World, String) {
    let mut w = World::agent(Script::new().default_reply(reply)).await;
    let started = Instant::now();
    let session =
        w.ed.start_session(json!({"prompt": "this will fail"}))
            .await;
    let seq = w.ed.last_prompt_seq(&session).await;
    let end = w.ed.turn_end(&session, seq, Duration::from_secs(20)).await;
    if end["data"]["state"] != "failed" {
        return w
            .ed
            .fail_with_events(&session, &format!("the turn ended {}", end["data"]))
            .await;
    }
    let error = end["data"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        expect.iter().any(|e| error.contains(e)),
        "the error {error:?} names none of {expect:?}"
    );
    let page = w.ed.events_page(&session, 0, 1000).await;
    assert_eq!(page["state"], "failed");
    assert_eq!(page["error"], error.as_str(), "the events' error");
    eprintln!(
        "failed after {:?}: {error}\nrequests:\n{}",
        started.elapsed(),
        w.fake.summary()
    );
    (w, session)
}

/// 401 (authentication_error): `failed`, the error says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_401_fails_the_turn_with_a_clear_error() {
    api_failure(
        Reply::error(401, "authentication_error", "invalid x-api-key"),
        &["401", "Invalid API key", "authenticat"],
    )
    .await;
}

/// 529 (overloaded) on every retry: `failed`, the error says so; the
/// session may still be continued once the API is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_529_fails_the_turn_and_the_session_can_go_on() {
    let (mut w, session) = api_failure(
        Reply::error(529, "overloaded_error", "Overloaded"),
        &["529", "Overloaded", "overloaded"],
    )
    .await;
    w.fake
        .set_script(Script::new().default_reply(Reply::text("BACK_AGAIN")));
    let seq = w.ed.send_prompt(&session, "try again").await;
    w.ed.turn_idle(&session, seq).await;
    let page = w.ed.events_page(&session, 0, 1000).await;
    assert_eq!(page["state"], "idle");
    assert!(page.get("error").is_none_or(|e| e.is_null()), "{page}");
}

/// A stream cut mid-message, and the CLI's non-streaming fallback failing
/// with 500: `failed` with an error naming the 500, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_stream_fails_the_turn_with_a_clear_error() {
    let (w, _) = api_failure(
        Reply::broken_stream("CUT OFF IN THE MIDDLE OF THIS"),
        &["500"],
    )
    .await;
    // Both halves happened: a stream that broke, a fallback that failed.
    let main = w.fake.main_requests();
    assert!(
        main.iter().any(|r| r.body["stream"] == true && !r.answered)
            && main.iter().any(|r| r.body["stream"] != true),
        "the fake did not see a broken stream and a fallback:\n{}",
        w.fake.summary()
    );
}

// ---------------------------------------------------------------------------
// 8. Editor tools

/// The model calls the service's editor tools through the CLI: `readBuffer`
/// returns the editor's unsaved text, `getDiagnostics` what the editor
/// published, `getCurrentSelection` its selection. Nothing is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_reads_an_unsaved_buffer_through_the_editor_tools() {
    let mut w = World::builder()
        .agent()
        .files(vec![("notes.txt".into(), "SAVED_ON_DISK\n".into())])
        .start()
        .await;
    let path = w.path("notes.txt");
    let uri = w.sb.uri("notes.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "read my buffer",
                Reply::tool_use(
                    "mcp__moonkale__readBuffer",
                    json!({"filePath": path.display().to_string()}),
                ),
            )
            .after_tool(
                "mcp__moonkale__readBuffer",
                Reply::tool_use("mcp__moonkale__getDiagnostics", json!({"uri": uri})),
            )
            .after_tool(
                "mcp__moonkale__getDiagnostics",
                Reply::tool_use("mcp__moonkale__getCurrentSelection", json!({})),
            )
            .after_tool(
                "mcp__moonkale__getCurrentSelection",
                Reply::text("TOOLS_DONE"),
            ),
    );
    w.ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "text", "version": 1, "text": "SAVED_ON_DISK\n"}}),
    )
    .await;
    w.ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2},
               "contentChanges": [{"text": "UNSAVED_EDIT_7f3a\nsecond line\n"}]}),
    )
    .await;
    w.ed.notify(
        "moonkale/publishDiagnostics",
        json!({"uri": uri, "source": "lint", "diagnostics": [
            {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 6}},
             "severity": 1, "message": "DIAG_FROM_THE_EDITOR", "source": "lint"}]}),
    )
    .await;
    w.ed.notify(
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": uri}, "selection": {
            "start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 12}}}),
    )
    .await;
    w.ed.barrier().await;

    let (session, _) = w.ed.run_first_turn("read my buffer", json!({})).await;
    let (_, buffer) = w
        .fake
        .wait_tool_result("mcp__moonkale__readBuffer", STEP)
        .await;
    assert!(!buffer.is_error, "readBuffer failed: {}", buffer.text);
    assert!(
        buffer.text.contains("UNSAVED_EDIT_7f3a") && !buffer.text.contains("SAVED_ON_DISK"),
        "readBuffer did not return the unsaved text: {}",
        buffer.text
    );
    let (_, diags) = w
        .fake
        .wait_tool_result("mcp__moonkale__getDiagnostics", STEP)
        .await;
    assert!(
        !diags.is_error && diags.text.contains("DIAG_FROM_THE_EDITOR"),
        "getDiagnostics: {}",
        diags.text
    );
    let (_, selection) = w
        .fake
        .wait_tool_result("mcp__moonkale__getCurrentSelection", STEP)
        .await;
    assert!(
        !selection.is_error && selection.text.contains("UNSAVED_EDIT"),
        "getCurrentSelection: {}",
        selection.text
    );
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        !events.iter().any(|e| e["kind"] == "approval"),
        "an editor tool asked:\n{}",
        describe_events(&page)
    );
}

// ---------------------------------------------------------------------------
// 9. The command line

/// Reads `stdout` until it contains `needle`; returns what was read.
async fn read_until(
    stdout: &mut tokio::process::ChildStdout,
    got: &mut Vec<u8>,
    needle: &str,
    timeout: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(got).contains(needle) {
        match tokio::time::timeout_at(deadline, stdout.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
    true
}

/// `moonkale-service agent send --workspace DIR "prompt"` prints the reply
/// as it streams and exits 0; `agent list` lists the session; `agent show
/// ID` prints the prompt and the reply; a failing turn exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_sends_lists_and_shows() {
    let gate = Gate::new();
    let text = "CLI_STREAM_ONE then CLI_STREAM_TWO and CLI_STREAM_THREE";
    let mut w = World::agent(
        Script::new()
            .on_prompt(
                "hello from the command line",
                Reply::text(text).gated(&gate, 1),
            )
            .on_prompt(
                "fail from the command line",
                Reply::error(401, "authentication_error", "invalid x-api-key"),
            ),
    )
    .await;
    let ws = w.sb.workspace.display().to_string();
    let mut child = w
        .command(&[
            "agent",
            "send",
            "--workspace",
            &ws,
            "hello from the command line",
        ])
        .current_dir(&w.sb.workspace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run agent send");
    let mut stdout = child.stdout.take().unwrap();
    let mut got = Vec::new();
    let first = first_piece(text);
    let streamed = read_until(&mut stdout, &mut got, &first, STEP).await;
    assert!(!gate.is_open());
    gate.open();
    if !streamed {
        let out = tokio::time::timeout(STEP, child.wait_with_output()).await;
        panic!(
            "agent send printed nothing of the reply while it streamed; stdout so far {:?}; then {out:?}\n{}",
            String::from_utf8_lossy(&got),
            w.diag().context()
        );
    }
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(STEP, stdout.read_to_end(&mut rest)).await;
    got.extend(rest);
    let status = tokio::time::timeout(STEP, child.wait())
        .await
        .expect("agent send exits")
        .unwrap();
    let mut stderr = Vec::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = tokio::time::timeout(STEP, e.read_to_end(&mut stderr)).await;
    }
    let stdout_text = String::from_utf8_lossy(&got).into_owned();
    assert!(
        status.success(),
        "agent send: {status}\nstdout: {stdout_text}\nstderr: {}",
        String::from_utf8_lossy(&stderr)
    );
    assert!(
        stdout_text.contains(text),
        "agent send printed {stdout_text:?}"
    );

    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let session = list["sessions"][0]["session"]
        .as_str()
        .unwrap_or_else(|| panic!("no session listed: {list}"))
        .to_owned();
    let out = w
        .command(&["agent", "list", "--workspace", &ws])
        .current_dir(&w.sb.workspace)
        .output()
        .await
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && listed.contains(&session),
        "agent list: {}\n{listed}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let out = w
        .command(&["agent", "show", "--workspace", &ws, &session])
        .current_dir(&w.sb.workspace)
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && shown.contains("hello from the command line")
            && shown.contains(text),
        "agent show: {}\n{shown}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    let out = tokio::time::timeout(
        Duration::from_secs(25),
        w.command(&[
            "agent",
            "send",
            "--workspace",
            &ws,
            "--session",
            &session,
            "fail from the command line",
        ])
        .current_dir(&w.sb.workspace)
        .output(),
    )
    .await
    .expect("a failing agent send exits")
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed turn: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    w.ed.barrier().await;
}

// ---------------------------------------------------------------------------
// 10. A broken CLI (a scripted stand-in)

async fn stand_in_world(mode: &str) -> (World, tempfile::TempDir) {
    let dir = tempfile::Builder::new()
        .prefix("mk-standin")
        .tempdir_in("/tmp")
        .unwrap();
    let bin = stand_in(dir.path(), mode);
    let w = World::builder().agent().claude(bin).start().await;
    (w, dir)
}

/// The CLI exits mid-turn (code 3, a last line on stderr): the turn is
/// `failed` with an error that names the exit and shows the stderr tail;
/// the next prompt starts a new process, which works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_exiting_mid_turn_fails_the_turn_and_the_next_prompt_restarts_it() {
    let (mut w, dir) = stand_in_world("crash").await;
    let session = w.ed.start_session(json!({"prompt": "crash please"})).await;
    let seq1 = w.ed.last_prompt_seq(&session).await;
    let end = w.ed.turn_end(&session, seq1, STEP).await;
    assert_eq!(end["data"]["state"], "failed", "{}", end["data"]);
    let error = end["data"]["error"].as_str().unwrap_or_default();
    assert!(
        error.to_lowercase().contains("exit") && error.contains("FAKE_CLI_STDERR_TAIL"),
        "the error does not name the exit and the stderr tail: {error:?}"
    );

    let seq2 = w.ed.send_prompt(&session, "again please").await;
    w.ed.turn_idle(&session, seq2).await;
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "assistant") && assistant_text(e) == "STAND_IN_REPLY_1_RUN_2"),
        "{}",
        describe_events(&page)
    );
    let runs = stand_in_runs(dir.path());
    assert_eq!(runs.len(), 2, "starts: {runs:?}");
    eprintln!("the restarted CLI's arguments: {:?}", runs[1]);
}

/// Garbage on the CLI's stdout (not JSON, a torn line, invalid UTF-8, a
/// JSON array, a blank CRLF line, an unknown message type) does not kill
/// the session: the turn ends with the reply that follows, the unknown
/// type is stored as it came, and the same process takes the next prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_clis_stdout_does_not_kill_the_session() {
    let (mut w, dir) = stand_in_world("garbage").await;
    let (session, _) = w.ed.run_first_turn("garbage please", json!({})).await;
    let seq2 = w.ed.send_prompt(&session, "and again").await;
    w.ed.turn_idle(&session, seq2).await;
    let (events, page) = w.ed.all_events(&session, 1000).await;
    let all = describe_events(&page);
    for n in [1, 2] {
        assert!(
            events
                .iter()
                .any(|e| is_cli(e, "assistant")
                    && assistant_text(e) == format!("SURVIVED_GARBAGE_{n}")),
            "reply {n} missing:\n{all}"
        );
    }
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "brand_new_type_from_a_future_cli")),
        "the unknown message type was not stored:\n{all}"
    );
    assert_eq!(stand_in_runs(dir.path()).len(), 1, "the CLI was restarted");
}

/// 4 MiB on the CLI's stderr in one turn does not block it: the turn ends
/// (twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_the_clis_stderr_does_not_hang_the_turn() {
    let (mut w, _dir) = stand_in_world("flood").await;
    let (session, _) = w.ed.run_first_turn("flood please", json!({})).await;
    let seq2 = w.ed.send_prompt(&session, "flood again").await;
    w.ed.turn_idle(&session, seq2).await;
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "assistant") && assistant_text(e) == "AFTER_THE_FLOOD_2"),
        "{}",
        describe_events(&page)
    );
}

// ---------------------------------------------------------------------------
// The fake's own pacing

/// The fake API's additions, without the CLI: a gated reply sends its first
/// delta and holds the rest until the gate opens (and is marked answered
/// only then); a broken stream stops after the first delta with no
/// `message_stop`, and its non-streaming fallback gets the 500.
#[tokio::test]
async fn fake_api_gates_and_breaks_streams() {
    use moonkale_tests::fakeapi::FakeApi;
    use tokio::io::AsyncWriteExt;
    let gate = Gate::new();
    let fake = FakeApi::start(
        Script::new()
            .on_prompt("gated", Reply::text("ONE TWO THREE").gated(&gate, 1))
            .on_prompt("broken", Reply::broken_stream("ONE TWO THREE")),
    )
    .await;
    let request = |prompt: &str, stream: bool| {
        let body = json!({"model": "m", "stream": stream, "tools": [{"name": "Read"}],
                          "messages": [{"role": "user", "content": prompt}]})
        .to_string();
        format!(
            "POST /v1/messages HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let connect = || tokio::net::TcpStream::connect(("127.0.0.1", fake.port));

    let mut s = connect().await.unwrap();
    s.write_all(request("gated", true).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\"text\":\"ONE T\"") {
        let n = tokio::time::timeout(STEP, s.read(&mut buf))
            .await
            .expect("the first delta comes before the gate opens")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let held = tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await;
    assert!(held.is_err(), "the rest came before the gate opened");
    assert!(!fake.requests()[0].answered);
    gate.open();
    tokio::time::timeout(STEP, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let sse = String::from_utf8_lossy(&got);
    assert!(
        sse.contains("\"WO TH\"") && sse.contains("event: message_stop"),
        "{sse}"
    );
    fake.wait_for("the gated reply marked answered", STEP, |log| {
        log.first().filter(|r| r.answered).cloned()
    })
    .await;

    let mut s = connect().await.unwrap();
    s.write_all(request("broken", true).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(STEP, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let sse = String::from_utf8_lossy(&got);
    assert!(sse.contains("\"text\":\"ONE T\""), "{sse}");
    assert!(
        !sse.contains("WO TH") && !sse.contains("message_stop"),
        "{sse}"
    );
    let mut s = connect().await.unwrap();
    s.write_all(request("broken", false).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(STEP, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&got);
    assert!(
        answer.starts_with("HTTP/1.1 500 ") && answer.contains("api_error"),
        "{answer}"
    );
    let log = fake.requests();
    assert!(!log[1].answered && log[2].answered);

    // A slow stream: 200 ms before each delta after the first.
    fake.set_script(
        Script::new().default_reply(
            Reply::text("ONE TWO THREE").with_delta_delay(Duration::from_millis(200)),
        ),
    );
    let started = Instant::now();
    let mut s = connect().await.unwrap();
    s.write_all(request("slow", true).as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(STEP, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(String::from_utf8_lossy(&got).contains("event: message_stop"));
}

// ---------------------------------------------------------------------------
// 11. More of the spec

/// A prompt sent while a turn runs is queued (the CLI's queue): `send`
/// answers at once with the prompt's `seq` and state `running`; the first
/// turn finishes, then the second runs with the first in its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_sent_during_a_turn_is_queued_and_runs_next() {
    let gate = Gate::new();
    let mut w = World::agent(
        Script::new()
            .on_prompt(
                "first of two",
                Reply::text("FIRST_OF_TWO_REPLY").gated(&gate, 1),
            )
            .on_prompt("second of two", Reply::text("SECOND_OF_TWO_REPLY")),
    )
    .await;
    let session = w.ed.start_session(json!({"prompt": "first of two"})).await;
    w.ed.take("the first turn's text", STEP, |m| is_text_of(m, &session))
        .await;
    let r =
        w.ed.call(
            "moonkale/agent/send",
            json!({"session": session, "prompt": "second of two"}),
        )
        .await;
    assert_eq!(r["state"], "running", "{r}");
    let seq2 = r["seq"].as_u64().expect("seq");
    gate.open();
    let reply2 =
        w.ed.agent_event(&session, "the second reply", STEP, |e| {
            is_cli(e, "assistant") && assistant_text(e) == "SECOND_OF_TWO_REPLY"
        })
        .await;
    w.ed.turn_idle(&session, reply2["seq"].as_u64().unwrap())
        .await;
    let req = w.fake.wait_prompt("second of two", STEP).await;
    assert!(
        req.body_text().contains("FIRST_OF_TWO_REPLY"),
        "the second turn lacks the first in its history"
    );
    let (events, page) = w.ed.all_events(&session, 1000).await;
    let all = describe_events(&page);
    assert_eq!(events[seq2 as usize]["kind"], "prompt", "{all}");
    assert_eq!(
        events.iter().filter(|e| is_cli(e, "result")).count(),
        2,
        "{all}"
    );
    assert_eq!(page["state"], "idle");
}

/// `agent send --session S` to a session whose turn is still running
/// prints and waits for its own turn, not the end of the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_send_to_a_busy_session_waits_for_its_own_turn() {
    let gate = Gate::new();
    let mut w = World::agent(
        Script::new()
            .on_prompt(
                "busy first",
                Reply::text("BUSY_FIRST_REPLY_TEXT").gated(&gate, 1),
            )
            .on_prompt("queued second", Reply::text("QUEUED_SECOND_REPLY")),
    )
    .await;
    let session = w.ed.start_session(json!({"prompt": "busy first"})).await;
    w.ed.take("the first turn's text", STEP, |m| is_text_of(m, &session))
        .await;
    let ws = w.sb.workspace.display().to_string();
    let child = w
        .command(&[
            "agent",
            "send",
            "--workspace",
            &ws,
            "--session",
            &session,
            "queued second",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run agent send");
    w.ed.agent_event(&session, "the queued prompt stored", STEP, |e| {
        e["kind"] == "prompt" && e["data"]["text"] == "queued second"
    })
    .await;
    gate.open();
    let out = tokio::time::timeout(STEP, child.wait_with_output())
        .await
        .expect("agent send exits")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("QUEUED_SECOND_REPLY"),
        "agent send to a busy session: {}\nstdout: {stdout:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `agent send --permission-mode default` shows an approval with the
/// command that answers it; `agent answer ID allow` allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_answers_an_approval() {
    let w = World::agent(Script::new()).await;
    let path = w.path("from-the-terminal.txt");
    w.fake.set_script(write_script(
        "write the file",
        &path,
        "ALLOWED IN THE TERMINAL\n",
        "WRITE_DONE",
    ));
    let ws = w.sb.workspace.display().to_string();
    let mut child = w
        .command(&[
            "agent",
            "send",
            "--workspace",
            &ws,
            "--permission-mode",
            "default",
            "write the file",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run agent send");
    let mut stderr = child.stderr.take().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + STEP;
    let approval = loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(id) = text
            .split("agent answer ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
        {
            break id.to_owned();
        }
        match tokio::time::timeout_at(deadline, stderr.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => panic!(
                "agent send did not show how to answer the approval: {text:?}\n{}",
                w.diag().context()
            ),
        }
    };
    assert!(approval.contains('/'), "{approval}");
    assert!(!path.exists());
    let out = w
        .command(&["agent", "answer", "--workspace", &ws, &approval, "allow"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "agent answer: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tokio::time::timeout(STEP, child.wait_with_output())
        .await
        .expect("agent send exits")
        .unwrap();
    assert!(
        out.status.success(),
        "agent send: {}\nstdout: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(read(&path).as_deref(), Some("ALLOWED IN THE TERMINAL\n"));
}

/// The CLI's own conversation is gone (its transcript deleted) when a
/// session is continued after a restart: a fresh conversation is started
/// in its place, a `notice` says so, and the turn works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_without_the_clis_conversation_starts_fresh_with_a_notice() {
    let mut w = World::agent(
        Script::new()
            .on_prompt("remember 7", Reply::text("REMEMBERED_SEVEN"))
            .on_prompt("after the loss", Reply::text("FRESH_START_OK")),
    )
    .await;
    let (session, _) = w.ed.run_first_turn("please remember 7", json!({})).await;
    assert!(
        w.sb.chats_dir().join(format!("{session}.jsonl")).is_file(),
        "no transcript in the user's state directory"
    );
    assert!(
        !w.sb.workspace.join(".moonkale/chats").exists(),
        "a transcript was written into the workspace"
    );
    w.stop_service().await;
    fn find(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                find(&p, name, out);
            } else if p.file_name().is_some_and(|n| n == name) {
                out.push(p);
            }
        }
    }
    let mut found = Vec::new();
    find(
        &w.sb.home.join(".claude/projects"),
        &format!("{session}.jsonl"),
        &mut found,
    );
    assert!(
        !found.is_empty(),
        "the CLI kept no transcript for {session}"
    );
    for f in found {
        std::fs::remove_file(f).unwrap();
    }

    w.restart_service().await;
    let seq = w.ed.send_prompt(&session, "after the loss").await;
    w.ed.turn_idle(&session, seq).await;
    let (events, page) = w.ed.all_events(&session, 1000).await;
    let all = describe_events(&page);
    assert!(
        events.iter().any(|e| e["kind"] == "notice"
            && e["data"]["message"].as_str().is_some_and(|m| !m.is_empty())),
        "no notice about the fresh start:\n{all}"
    );
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "assistant") && assistant_text(e) == "FRESH_START_OK"),
        "{all}"
    );
    let req = w.fake.wait_prompt("after the loss", STEP).await;
    assert!(
        !req.body_text().contains("REMEMBERED_SEVEN"),
        "the lost conversation came back?"
    );
}

/// `model` at start and `setModel` later reach the CLI: the API requests
/// name them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_model_and_set_model_reach_the_api() {
    let mut w = World::agent(
        Script::new()
            .on_prompt("first model", Reply::text("FIRST_MODEL_OK"))
            .on_prompt("second model", Reply::text("SECOND_MODEL_OK")),
    )
    .await;
    let (session, _) =
        w.ed.run_first_turn("first model", json!({"model": "claude-sonnet-4-5"}))
            .await;
    let req = w.fake.wait_prompt("first model", STEP).await;
    assert_eq!(req.body["model"], "claude-sonnet-4-5");
    let r =
        w.ed.call(
            "moonkale/agent/setModel",
            json!({"session": session, "model": "claude-haiku-4-5"}),
        )
        .await;
    assert_eq!(r, json!({"model": "claude-haiku-4-5"}));
    let seq = w.ed.send_prompt(&session, "second model").await;
    w.ed.turn_idle(&session, seq).await;
    let req = w.fake.wait_prompt("second model", STEP).await;
    assert_eq!(req.body["model"], "claude-haiku-4-5");
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    assert_eq!(list["sessions"][0]["model"], "claude-haiku-4-5", "{list}");
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "settings" && e["data"]["model"] == "claude-haiku-4-5"),
        "no settings event:\n{}",
        describe_events(&page)
    );
}

/// A `claude` that cannot be started: `start` fails with -32803 and says
/// why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_fails_with_32803_when_the_cli_cannot_be_started() {
    let mut w = World::builder()
        .agent()
        .claude(PathBuf::from("/nonexistent/moonkale-test/claude"))
        .start()
        .await;
    let r =
        w.ed.request("moonkale/agent/start", json!({"prompt": "hello"}))
            .await;
    assert_eq!(r["error"]["code"], -32803, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("/nonexistent/moonkale-test/claude") || message.contains("claude"),
        "{r}"
    );
}

/// The CLI runs with the user's environment minus ours: an
/// `ANTHROPIC_API_KEY`, `CLAUDECODE` and `MOONKALE_*` of the service do
/// not reach it (the fake sees the key of the user's own setup, the
/// `apiKeyHelper`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_with_a_scrubbed_environment() {
    let gate = Gate::new();
    let mut w = World::builder()
        .agent()
        .script(Script::new().on_prompt("check env", Reply::text("ENV_OK").gated(&gate, 1)))
        .env("ANTHROPIC_API_KEY", "sk-service-key-must-not-leak")
        .env("CLAUDECODE", "1")
        .env("MOONKALE_TEST_SECRET", "must-not-leak")
        .start()
        .await;
    let session = w.ed.start_session(json!({"prompt": "check env"})).await;
    w.ed.take("the first text", STEP, |m| is_text_of(m, &session))
        .await;
    let pids = w.cli_pids();
    assert_eq!(pids.len(), 1, "{pids:?}");
    let environ = std::fs::read(format!("/proc/{}/environ", pids[0])).unwrap_or_default();
    gate.open();
    let environ = String::from_utf8_lossy(&environ);
    let vars: Vec<&str> = environ.split('\0').filter(|v| !v.is_empty()).collect();
    assert!(!vars.is_empty(), "cannot read the CLI's environment");
    for v in &vars {
        assert!(
            !v.starts_with("ANTHROPIC_API_KEY=")
                && !v.starts_with("CLAUDECODE=")
                && !v.starts_with("MOONKALE"),
            "the CLI got {v}"
        );
    }
    assert!(
        vars.contains(&format!("HOME={}", w.sb.home.display()).as_str()),
        "HOME: {vars:?}"
    );
    let req = w.fake.wait_prompt("check env", STEP).await;
    assert_eq!(req.header("x-api-key"), Some("sk-test-dummy"));
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
}

/// `subscribe` without a session follows every session (events and text);
/// `unsubscribe` stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_to_every_session_and_unsubscribe() {
    let mut w = World::agent(
        Script::new()
            .on_prompt("watched turn", Reply::text("WATCHED_REPLY"))
            .on_prompt("unwatched turn", Reply::text("UNWATCHED_REPLY")),
    )
    .await;
    let mut watcher = w.client("watcher", plain_caps()).await;
    assert_eq!(
        watcher.call("moonkale/agent/subscribe", json!({})).await,
        json!({})
    );
    let (session, seq1) = w.ed.run_first_turn("watched turn", json!({})).await;
    watcher.turn_idle(&session, seq1).await;
    assert_eq!(watcher.streamed_text(&session), "WATCHED_REPLY");
    assert_eq!(
        watcher.call("moonkale/agent/unsubscribe", json!({})).await,
        json!({})
    );
    let seq2 = w.ed.send_prompt(&session, "unwatched turn").await;
    w.ed.turn_idle(&session, seq2).await;
    watcher.barrier().await;
    let late = watcher.all(|m| {
        (m["method"] == "moonkale/agent/event"
            && m["params"]["event"]["seq"]
                .as_u64()
                .is_some_and(|s| s >= seq2))
            || (m["method"] == "moonkale/agent/text"
                && m["params"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("UNWATCHED")))
    });
    assert!(late.is_empty(), "after unsubscribe: {late:?}");
}
