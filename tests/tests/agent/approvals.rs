//! Approvals: the questions a Write or a shell command asks, who answers
//! them (a button, the API, a code action, nobody), and the permission modes.

use std::time::{Duration, Instant};

use moonkale_tests::agent::{describe_events, two_writes_script};
use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::lsp::buttons_caps;
use moonkale_tests::world::World;
use moonkale_tests::{STEP, short};
use serde_json::{Value, json};

use crate::{
    action_titles, approval_id, is_event_of, pending_approval, read, start_asking_write,
    the_decision, write_script,
};

/// A Write in `default` mode asks: the editor that shows buttons gets a
/// `window/showMessageRequest` (Allow / Always allow Write… / Deny), the
/// subscriber a pending `moonkale/agent/approval`, the session waits for
/// approval and nothing is written. "Allow" on the button writes the file
/// with the scripted content; the decision is stored as the editor's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_allowed_from_the_editors_question_lands_on_disk() {
    let content = "WRITTEN AFTER ALLOW\nline two\n";
    let mut w = World::agent(Script::new()).await;
    let (path, session) = start_asking_write(&mut w, "allowed.txt", content).await;

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

    let d = the_decision(&mut w.ed, &session, &approval).await;
    assert_eq!(d["data"]["allow"], true, "{}", d);
    assert_eq!(d["data"]["by"], "editor", "{}", d);
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
    let (path, session) = start_asking_write(&mut w, "denied.txt", "MUST NOT BE WRITTEN\n").await;
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
    let d = the_decision(&mut w.ed, &session, &approval).await;
    assert_eq!(d["data"]["allow"], false, "{}", d);
    assert!(
        matches!(d["data"]["by"].as_str(), Some("api" | "editor")),
        "{}",
        d
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
    let content = "FIRST ANSWER WINS\n";
    let mut b = w.client("editor-b", buttons_caps()).await;
    b.barrier().await;
    let (path, session) = start_asking_write(&mut w, "race.txt", content).await;
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
    let d = the_decision(&mut w.ed, &session, &approval).await;
    assert_eq!(d["data"]["allow"], true);
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
    let d = the_decision(&mut w.ed, &session, &approval).await;
    assert_eq!(
        (&d["data"]["allow"], &d["data"]["always"]),
        (&json!(true), &json!(true)),
        "{}",
        d
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
    let (path, session) = start_asking_write(&mut w, "timeout.txt", "MUST NOT BE WRITTEN\n").await;
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
        .file("victim.txt", "PRECIOUS\n")
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
    let (path, session) =
        start_asking_write(&mut w, "withdrawn.txt", "MUST NOT BE WRITTEN\n").await;
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
    let (path, session) = start_asking_write(&mut w, "slow-human.txt", "APPROVED LATE\n").await;
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
        .file("open.txt", "an open document\n")
        .start()
        .await;
    let uri = w.open("open.txt").await;
    let (path, session) =
        start_asking_write(&mut w, "by-code-action.txt", "ALLOWED BY A CODE ACTION\n").await;
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
    let d = the_decision(&mut w.ed, &session, &approval).await;
    assert_eq!(d["data"]["allow"], true);
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
