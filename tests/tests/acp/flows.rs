//! What a user of an ACP panel does with the real CLI: a prompt whose
//! answer streams in, a write asked and allowed or rejected, a cancel, plan
//! mode then another mode, a second client joining a running turn, a
//! client killed mid-turn, and the same question answered from an editor.

use moonkale_tests::STEP;
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use moonkale_tests::world::World;
use serde_json::json;

use crate::{acp_agent, model_writes};

/// The answer streams as `agent_message_chunk`s before the turn ends, and
/// the prompt's reply is `end_turn` once it has; the chunks add up to the
/// model's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_streams_its_answer_before_the_turn_ends() {
    let gate = Gate::new();
    let text = "ACP_ALPHA streamed ACP_BETA in pieces ACP_GAMMA";
    let w = World::builder()
        .agent()
        .script(Script::new().on_prompt("stream please", Reply::text(text).gated(&gate, 1)))
        .start()
        .await;
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "stream please").await;
    let first = acp
        .wait_for("the first agent_message_chunk", |m| {
            m["method"] == "session/update"
                && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await;
    let piece = first["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(text.starts_with(piece) && !piece.is_empty(), "{piece:?}");
    acp.drain();
    assert!(
        !acp.log.iter().any(|m| m["id"] == prompt),
        "the prompt was answered before the reply was complete"
    );
    gate.open();
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply, json!({"stopReason": "end_turn"}));
    assert_eq!(acp.chunks(&session, "agent_message_chunk"), text);
    assert_eq!(
        acp.chunks(&session, "user_message_chunk"),
        "",
        "its own prompt is not echoed"
    );
    let garbage = acp.non_json();
    assert!(garbage.is_empty(), "not ACP on stdout: {garbage:?}");
    assert_eq!(acp.close().await, Some(0));
}

fn text_prompt(session: &str, text: &str) -> serde_json::Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

fn option_ids(ask: &serde_json::Value) -> Vec<String> {
    ask["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                o["optionId"].as_str().unwrap(),
                o["kind"].as_str().unwrap()
            )
        })
        .collect()
}

/// A session starts in `default` mode: the model's Write is asked in the
/// panel (allow once, always, reject) with the file it writes as a diff;
/// allowed, the file is on disk, the tool call completes with the whole
/// file's diff, the prompt ends `end_turn`, and the change stays
/// reviewable in an LSP editor as the session's change set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_allowed_in_the_panel_is_written_and_shown_as_its_diff() {
    let mut w = World::builder().agent().start().await;
    let path = model_writes(
        &w,
        "write the notes",
        "notes.txt",
        "ACP NOTES\n",
        "NOTES_DONE",
    );
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "write the notes").await;
    let ask = acp.permission("the permission request").await;
    assert_eq!(
        option_ids(&ask),
        [
            "allow allow_once",
            "always allow_always",
            "reject reject_once"
        ]
    );
    let call = &ask["params"]["toolCall"];
    assert_eq!(call["kind"], "edit");
    assert_eq!(call["title"], "Write notes.txt");
    assert_eq!(call["content"][0]["type"], "diff");
    assert_eq!(call["content"][0]["newText"], "ACP NOTES\n");
    assert!(!path.exists(), "written before it was allowed");
    acp.choose(&ask, "allow").await;
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "ACP NOTES\n");
    let updates = acp.updates(&session);
    let done = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .unwrap_or_else(|| panic!("no completed tool call in {updates:?}"));
    assert_eq!(done["toolCallId"], call["toolCallId"]);
    assert_eq!(
        done["content"][0],
        json!({"type": "diff", "path": path, "oldText": null, "newText": "ACP NOTES\n"})
    );
    assert!(
        acp.chunks(&session, "agent_message_chunk")
            .contains("NOTES_DONE")
    );
    let sets = w.ed.call("moonkale/changes/list", json!({})).await;
    let set = &sets["sets"][0];
    assert_eq!(set["source"]["kind"], "agent", "{sets}");
    assert_eq!(set["source"]["session"], session.as_str(), "{sets}");
}

/// Rejected in the panel, the Write does not happen: the file is not
/// there, the tool call fails, and the turn still ends `end_turn` with the
/// model's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_rejected_in_the_panel_leaves_the_file_untouched() {
    let w = World::builder()
        .agent()
        .file("notes.txt", "MINE\n")
        .start()
        .await;
    let path = model_writes(&w, "write the notes", "notes.txt", "THEIRS\n", "NOTES_DONE");
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "write the notes").await;
    let ask = acp.permission("the permission request").await;
    acp.choose(&ask, "reject").await;
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "MINE\n");
    let updates = acp.updates(&session);
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed"),
        "{updates:?}"
    );
}

/// `session/cancel` while the answer streams: the turn is interrupted and
/// the prompt ends `cancelled`; the session takes the next prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_ends_the_prompt_cancelled() {
    let gate = Gate::new();
    let w = World::builder()
        .agent()
        .script(
            Script::new()
                .on_prompt(
                    "long answer",
                    Reply::text("CANCEL_ME slowly, in pieces, never whole").gated(&gate, 1),
                )
                .on_prompt("again", Reply::text("AGAIN_OK")),
        )
        .start()
        .await;
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "long answer").await;
    acp.wait_for("the first chunk", |m| {
        m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    })
    .await;
    acp.notify("session/cancel", json!({"sessionId": session}))
        .await;
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply, json!({"stopReason": "cancelled"}));
    gate.open();
    let again = acp
        .call("session/prompt", text_prompt(&session, "again"))
        .await;
    assert_eq!(again.expect("the next prompt")["stopReason"], "end_turn");
    assert!(
        acp.chunks(&session, "agent_message_chunk")
            .ends_with("AGAIN_OK")
    );
}

/// A permission question pending when the user cancels: the service
/// withdraws it from the panel (`$/cancel_request`) and the prompt ends
/// `cancelled`; nothing was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_withdraws_the_pending_permission_request() {
    let w = World::builder().agent().start().await;
    let path = model_writes(&w, "write the notes", "notes.txt", "NO\n", "NOTES_DONE");
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "write the notes").await;
    let ask = acp.permission("the permission request").await;
    acp.notify("session/cancel", json!({"sessionId": session}))
        .await;
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply, json!({"stopReason": "cancelled"}));
    let withdrawn = acp
        .wait_for("the withdrawn permission request", |m| {
            m["method"] == "$/cancel_request"
        })
        .await;
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    assert!(!path.exists());
}

/// A user plans, approves the plan in the panel choosing "ask before
/// edits", and the plan's write is then asked and written: the mode goes
/// plan → default (`current_mode_update`), as the CLI reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_approved_in_the_panel_then_its_write_asked_and_written() {
    let w = World::builder().agent().start().await;
    let path = w.path("plan.txt");
    w.fake
        .set_script(moonkale_tests::agent::plan_then_write_script(
            "plan it", &path,
        ));
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let set = acp
        .call(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "plan"}),
        )
        .await;
    assert_eq!(set, Ok(json!({})));
    acp.wait_for("the switch to plan mode", |m| {
        m["params"]["update"]["sessionUpdate"] == "current_mode_update"
            && m["params"]["update"]["currentModeId"] == "plan"
    })
    .await;
    let prompt = acp.prompt(&session, "plan it").await;
    let plan = acp.permission("the plan's question").await;
    assert_eq!(plan["params"]["toolCall"]["kind"], "switch_mode");
    assert_eq!(
        plan["params"]["toolCall"]["content"][0]["content"]["text"],
        "1. Write plan.txt saying DONE"
    );
    assert_eq!(
        option_ids(&plan),
        [
            "mode:default allow_once",
            "mode:acceptEdits allow_once",
            "reject reject_once"
        ]
    );
    acp.choose(&plan, "mode:default").await;
    acp.next_matching("the switch to default mode", |m| {
        m["params"]["update"]["sessionUpdate"] == "current_mode_update"
            && m["params"]["update"]["currentModeId"] == "default"
    })
    .await;
    let write = acp.permission("the write's question").await;
    assert_eq!(write["params"]["toolCall"]["title"], "Write plan.txt");
    assert!(!path.exists());
    acp.choose(&write, "allow").await;
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "DONE\n");
    assert!(
        acp.chunks(&session, "agent_message_chunk")
            .contains("PLAN_CARRIED_OUT")
    );
}

/// A second client opens the session (`session/load`) while its turn
/// streams: it is shown the conversation so far, then the rest of the
/// turn; both clients end with the model's whole answer exactly once, in
/// order, and the second sees the first's prompt as the user's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_client_loading_mid_turn_sees_the_rest_once() {
    let gate = Gate::new();
    let text = "LOAD_ALPHA the first piece LOAD_BETA the second LOAD_GAMMA the end";
    let w = World::builder()
        .agent()
        .script(Script::new().on_prompt("two watch", Reply::text(text).gated(&gate, 1)))
        .start()
        .await;
    let mut a = acp_agent(&w, "a").await;
    let session = a.new_session(&w.sb.workspace).await;
    let prompt = a.prompt(&session, "two watch").await;
    a.wait_for("the first chunk", |m| {
        m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    })
    .await;
    let mut b = acp_agent(&w, "b").await;
    let loaded = b
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": w.sb.workspace, "mcpServers": []}),
        )
        .await
        .expect("session/load");
    assert_eq!(loaded["modes"]["currentModeId"], "default");
    assert_eq!(b.chunks(&session, "user_message_chunk"), "two watch");
    gate.open();
    a.response(prompt, STEP).await.expect("the prompt's reply");
    b.wait_text(&session, "agent_message_chunk", "the whole answer", |t| {
        t.len() >= text.len()
    })
    .await;
    assert_eq!(a.chunks(&session, "agent_message_chunk"), text);
    assert_eq!(b.chunks(&session, "agent_message_chunk"), text);
}

/// The client is killed while its turn runs: the turn goes on in the
/// service and ends in the transcript; a new client loads it and is shown
/// the whole conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_turn_leaves_the_turn_to_finish() {
    let gate = Gate::new();
    let text = "KILLED_ALPHA still finishing KILLED_OMEGA";
    let mut w = World::builder()
        .agent()
        .script(Script::new().on_prompt("finish anyway", Reply::text(text).gated(&gate, 1)))
        .start()
        .await;
    let mut a = acp_agent(&w, "a").await;
    let session = a.new_session(&w.sb.workspace).await;
    a.prompt(&session, "finish anyway").await;
    a.wait_for("the first chunk", |m| {
        m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    })
    .await;
    a.child.kill().await.unwrap();
    // Subscribed before it looks, the editor cannot miss the turn's end.
    w.ed.call("moonkale/agent/subscribe", json!({"session": session}))
        .await;
    gate.open();
    let seq = w.ed.last_prompt_seq(&session).await;
    if w.ed.events_page(&session, 0, 1).await["state"] != "idle" {
        w.ed.turn_idle(&session, seq).await;
    }
    let mut b = acp_agent(&w, "b").await;
    b.call(
        "session/load",
        json!({"sessionId": session, "cwd": w.sb.workspace, "mcpServers": []}),
    )
    .await
    .expect("session/load");
    assert_eq!(b.chunks(&session, "user_message_chunk"), "finish anyway");
    assert_eq!(b.chunks(&session, "agent_message_chunk"), text);
    let listed = b
        .call("session/list", json!({}))
        .await
        .expect("session/list");
    assert_eq!(listed["sessions"][0]["sessionId"], session.as_str());
    assert_eq!(listed["sessions"][0]["title"], "finish anyway");
}

/// The same question shown in the panel and in an LSP editor: the editor
/// answers first, the write happens, and the panel's question is withdrawn
/// (`$/cancel_request`); the panel's late answer changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_answers_first_and_the_panels_question_is_withdrawn() {
    let mut w = World::builder().agent().start().await;
    let path = model_writes(
        &w,
        "write the notes",
        "notes.txt",
        "BY EDITOR\n",
        "NOTES_DONE",
    );
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "write the notes").await;
    let ask = acp.permission("the permission request").await;
    let button = w.ed.server_request("window/showMessageRequest", STEP).await;
    w.ed.respond(&button["id"], json!({"title": "Allow"})).await;
    let withdrawn = acp
        .wait_for("the withdrawn permission request", |m| {
            m["method"] == "$/cancel_request"
        })
        .await;
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    acp.choose(&ask, "reject").await;
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "BY EDITOR\n");
}

fn question_script() -> Script {
    let questions = json!([
        {"question": "Which database should the tests use?", "header": "Database", "multiSelect": false,
         "options": [{"label": "SQLite", "description": "in memory"}, {"label": "Postgres", "description": "a server"}]},
        {"question": "Which checks should run?", "header": "Checks", "multiSelect": true,
         "options": [{"label": "lint", "description": "style"}, {"label": "unit", "description": "fast"},
                     {"label": "e2e", "description": "slow"}]},
    ]);
    Script::new()
        .on_prompt(
            "ask me",
            Reply::tool_use("AskUserQuestion", json!({"questions": questions})),
        )
        .after_tool("AskUserQuestion", Reply::text("NOTED"))
}

/// The question's turn ends `end_turn`, and the model was told `labels`.
async fn the_model_got(
    acp: &mut moonkale_tests::acp::AcpAgent,
    w: &World,
    prompt: i64,
    labels: [&str; 2],
) {
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    let (_, result) = w.fake.wait_tool_result("AskUserQuestion", STEP).await;
    assert!(
        !result.is_error && labels.iter().all(|l| result.text.contains(l)),
        "{}",
        result.text
    );
}

/// Claude's `AskUserQuestion` in a panel without forms: one permission
/// request per question, its options to pick; the model gets the labels
/// picked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claudes_question_is_a_choice_of_its_options_in_the_panel() {
    let w = World::builder()
        .agent()
        .script(question_script())
        .start()
        .await;
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "ask me").await;
    let first = acp.permission("the first question").await;
    assert_eq!(
        first["params"]["toolCall"]["title"],
        "Which database should the tests use?"
    );
    assert_eq!(
        option_ids(&first),
        [
            "option:0 allow_once",
            "option:1 allow_once",
            "reject reject_once"
        ]
    );
    acp.choose(&first, "option:1").await;
    let second = acp.permission("the second question").await;
    assert_eq!(
        second["params"]["toolCall"]["title"],
        "Which checks should run?"
    );
    acp.choose(&second, "option:2").await;
    the_model_got(&mut acp, &w, prompt, ["Postgres", "e2e"]).await;
}

/// A panel that takes forms (`elicitation.form`) gets the question as one
/// `elicitation/create`, a field per question (a multi-select one takes
/// several labels); the model gets what the user filled in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claudes_question_is_a_form_in_a_panel_that_takes_forms() {
    let w = World::builder()
        .agent()
        .script(question_script())
        .start()
        .await;
    let mut cmd = w.command(&["acp", "--workspace"]);
    cmd.arg(&w.sb.workspace);
    let mut acp = moonkale_tests::acp::AcpAgent::spawn(cmd, &w.sb.root.join("acp-forms.log"));
    acp.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"elicitation": {"form": {}}}}),
    )
    .await
    .expect("initialize");
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "ask me").await;
    let form = acp
        .wait_for("the form", |m| m["method"] == "elicitation/create")
        .await;
    let schema = &form["params"]["requestedSchema"];
    assert_eq!(form["params"]["mode"], "form");
    assert_eq!(schema["properties"]["q0"]["oneOf"][1]["const"], "Postgres");
    assert_eq!(schema["properties"]["q1"]["type"], "array");
    acp.respond(
        &form["id"],
        json!({"action": "accept", "content": {"q0": "SQLite", "q1": ["lint", "unit"]}}),
    )
    .await;
    the_model_got(&mut acp, &w, prompt, ["SQLite", "unit"]).await;
}

/// An API error ends the prompt with a JSON-RPC error carrying the CLI's
/// message; a 401 is ACP's "authentication required" (-32000), saying in
/// the one sentence how to log in with this CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_is_a_json_rpc_error_with_the_clis_message() {
    let w = World::builder()
        .agent()
        .script(
            Script::new()
                .on_prompt(
                    "who am i",
                    Reply::error(401, "authentication_error", "invalid x-api-key"),
                )
                .on_prompt("busy", Reply::error(529, "overloaded_error", "Overloaded")),
        )
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .start()
        .await;
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let denied = acp
        .call("session/prompt", text_prompt(&session, "who am i"))
        .await;
    let error = denied.expect_err("a 401 is an error");
    assert_eq!(error["code"], -32000, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("Claude Code's login was refused (")
            && message.ends_with("): run `claude auth login` in a terminal, then try again."),
        "{error}"
    );
    // A new session: a CLI once refused its key does not ask again.
    let session = acp.new_session(&w.sb.workspace).await;
    let busy = acp
        .call("session/prompt", text_prompt(&session, "busy"))
        .await;
    let error = busy.expect_err("a 529 is an error");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("verloaded") || message.contains("529"),
        "{error}"
    );
}

/// An editor that starts its agent somewhere else than the project (no
/// `--workspace`): the service is the one of the first session's folder,
/// and `initialize` is answered before any service is reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_sessions_folder_names_the_workspace() {
    let mut w = World::builder()
        .agent()
        .script(Script::new().on_prompt("where am i", Reply::text("IN_THE_PROJECT")))
        .file("src/main.rs", "fn main() {}\n")
        .start()
        .await;
    let mut cmd = w.command(&["acp"]);
    cmd.current_dir(&w.sb.root);
    let mut acp = moonkale_tests::acp::AcpAgent::spawn(cmd, &w.sb.root.join("acp-nowhere.log"));
    acp.initialize().await;
    let session = acp.new_session(&w.path("src")).await;
    let reply = acp
        .call("session/prompt", text_prompt(&session, "where am i"))
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    let listed =
        w.ed.call("moonkale/agent/list", serde_json::Value::Null)
            .await;
    assert_eq!(
        listed["sessions"][0]["session"],
        session.as_str(),
        "the world's service"
    );
    let page = w.ed.events_page(&session, 0, 1).await;
    assert_eq!(page["events"][0]["data"]["cwd"], json!(w.path("src")));
    let listed = acp
        .call("session/list", json!({}))
        .await
        .expect("session/list");
    assert_eq!(listed["sessions"][0]["cwd"], json!(w.path("src")));
}

/// A screenshot pasted into the panel reaches the model as an image block
/// before the text, and a panel that opens the session later is shown it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_in_the_prompt_reaches_the_model() {
    // A 1×1 transparent PNG.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";
    let w = World::builder()
        .agent()
        .script(Script::new().on_prompt("what is in it", Reply::text("A_PIXEL")))
        .start()
        .await;
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let reply = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [
                {"type": "image", "mimeType": "image/png", "data": png},
                {"type": "text", "text": "what is in it"}]}),
        )
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    let request = w.fake.main_requests().last().cloned().expect("a request");
    let body = request.body_text();
    assert!(body.contains(png) && body.contains("\"image\""), "{body}");
    let mut b = acp_agent(&w, "b").await;
    b.call(
        "session/load",
        json!({"sessionId": session, "cwd": w.sb.workspace, "mcpServers": []}),
    )
    .await
    .expect("session/load");
    let shown = b.updates(&session);
    assert_eq!(
        shown[0],
        json!({"sessionUpdate": "user_message_chunk", "content": {"type": "image", "mimeType": "image/png", "data": png}})
    );
    assert_eq!(b.chunks(&session, "user_message_chunk"), "what is in it");
}

/// In plan mode the model's write is refused without a question; the user
/// switches the panel to "Accept edits" (`session/set_mode`) and the same
/// write is done without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_refuses_the_write_and_accept_edits_then_writes_it() {
    let w = World::builder().agent().start().await;
    let path = model_writes(
        &w,
        "write the notes",
        "notes.txt",
        "ACCEPTED\n",
        "NOTES_DONE",
    );
    let mut acp = acp_agent(&w, "a").await;
    let session = acp.new_session(&w.sb.workspace).await;
    let plan = acp
        .call(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "plan"}),
        )
        .await;
    assert_eq!(plan, Ok(json!({})));
    let id = acp.prompt(&session, "write the notes").await;
    let reply = acp.response(id, STEP).await.expect("the plan-mode turn");
    assert_eq!(reply["stopReason"], "end_turn");
    assert!(!path.exists(), "written in plan mode");
    let edits = acp
        .call(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "acceptEdits"}),
        )
        .await;
    assert_eq!(edits, Ok(json!({})));
    let id = acp.prompt(&session, "write the notes").await;
    let reply = acp.response(id, STEP).await.expect("the acceptEdits turn");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "ACCEPTED\n");
    acp.drain();
    assert!(
        !acp.log
            .iter()
            .any(moonkale_tests::acp::is_permission_request),
        "nothing was asked"
    );
    let modes: Vec<String> = acp
        .updates(&session)
        .iter()
        .filter(|u| u["sessionUpdate"] == "current_mode_update")
        .map(|u| u["currentModeId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(modes, ["plan", "acceptEdits"]);
}

/// A panel that has the conversation already resumes the session
/// (`session/resume`): nothing is replayed, its next prompt goes on in
/// the same conversation; closed (`session/close`), the session is no
/// longer open in that panel but lives on in the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumed_is_not_replayed_and_a_closed_one_lives_on() {
    let mut w = World::builder()
        .agent()
        .script(
            Script::new()
                .on_prompt("first", Reply::text("FIRST_ANSWER"))
                .on_prompt("second", Reply::text("SECOND_ANSWER")),
        )
        .start()
        .await;
    let mut a = acp_agent(&w, "a").await;
    let session = a.new_session(&w.sb.workspace).await;
    let id = a.prompt(&session, "first").await;
    a.response(id, STEP).await.expect("the first prompt");
    assert_eq!(a.close().await, Some(0));

    let mut b = acp_agent(&w, "b").await;
    let resumed = b
        .call(
            "session/resume",
            json!({"sessionId": session, "cwd": w.sb.workspace, "mcpServers": []}),
        )
        .await
        .expect("session/resume");
    assert_eq!(resumed["modes"]["currentModeId"], "default");
    assert!(b.updates(&session).is_empty(), "nothing replayed");
    let id = b.prompt(&session, "second").await;
    b.response(id, STEP).await.expect("the second prompt");
    assert_eq!(b.chunks(&session, "agent_message_chunk"), "SECOND_ANSWER");
    let history = w.fake.wait_prompt("second", STEP).await.body_text();
    assert!(history.contains("FIRST_ANSWER"), "{history}");
    let closed = b.call("session/close", json!({"sessionId": session})).await;
    assert_eq!(closed, Ok(json!({})));
    let after = b
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "third"}]}),
        )
        .await;
    assert_eq!(after.unwrap_err()["code"], -32602);
    let listed =
        w.ed.call("moonkale/agent/list", serde_json::Value::Null)
            .await;
    assert_eq!(listed["sessions"][0]["session"], session.as_str());
}

/// A second panel opens the session while Claude waits for an answer: it
/// is asked the same question once the session is open, answers it, the
/// file is written, and the first panel's question is withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panel_that_opens_a_waiting_session_is_asked_its_question() {
    let w = World::builder().agent().start().await;
    let path = model_writes(&w, "write the notes", "notes.txt", "BY B\n", "NOTES_DONE");
    let mut a = acp_agent(&w, "a").await;
    let session = a.new_session(&w.sb.workspace).await;
    let prompt = a.prompt(&session, "write the notes").await;
    let asked_a = a.permission("the first panel's question").await;
    let mut b = acp_agent(&w, "b").await;
    let load = b
        .request(
            "session/load",
            json!({"sessionId": session, "cwd": w.sb.workspace, "mcpServers": []}),
        )
        .await;
    let asked_b = b.permission("the second panel's question").await;
    let reply_at = b.log.iter().position(|m| m["id"] == load);
    let asked_at = b
        .log
        .iter()
        .position(|m| m["id"] == asked_b["id"] && m.get("method").is_some());
    assert!(
        reply_at.is_some() && reply_at < asked_at,
        "asked after the reply"
    );
    assert_eq!(
        asked_b["params"]["toolCall"]["toolCallId"],
        asked_a["params"]["toolCall"]["toolCallId"]
    );
    b.choose(&asked_b, "allow").await;
    let withdrawn = a
        .wait_for("the first panel's question withdrawn", |m| {
            m["method"] == "$/cancel_request"
        })
        .await;
    assert_eq!(withdrawn["params"]["requestId"], asked_a["id"]);
    a.response(prompt, STEP).await.expect("the prompt's reply");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "BY B\n");
}
