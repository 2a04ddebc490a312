//! The translation's specification: a session's events and streamed text
//! in, the `session/update`s a client is shown out, one line each.

use expect_test::{Expect, expect};
use moonkale_protocol::agent::{Approval, ApprovalKind, Event, PermissionMode};
use serde_json::{Value, json};

use super::AcpView;

/// What goes in: stored events and streamed text.
enum In {
    Event(&'static str, Value),
    Text(&'static str, u64),
    Thinking(&'static str, u64),
    /// The partial message a replay shows.
    Streaming(&'static str),
    /// This client sent the prompt with this seq.
    Sent(u64),
}

/// A stored event as the wire has it.
fn event(seq: u64, kind: &str, data: Value) -> Event {
    let event = json!({"seq": seq, "at": 0, "kind": kind, "data": data});
    serde_json::from_value(event).unwrap()
}

fn run(inputs: Vec<In>, want: Expect) {
    let mut view = AcpView::new(std::path::Path::new("/w"), PermissionMode::Default, None);
    let mut out = String::new();
    let mut seq = 0;
    for input in inputs {
        let updates = match input {
            In::Event(kind, data) => {
                let event = event(seq, kind, data);
                seq += 1;
                out += &format!("> {kind}\n");
                view.event(&event)
            }
            In::Text(text, offset) => {
                out += &format!("> text {text:?} @{offset}\n");
                view.text(text, false, offset)
            }
            In::Thinking(text, offset) => {
                out += &format!("> thinking {text:?} @{offset}\n");
                view.text(text, true, offset)
            }
            In::Streaming(text) => {
                out += &format!("> streaming {text:?}\n");
                view.streaming(text, "")
            }
            In::Sent(s) => {
                view.sent_prompt(s);
                continue;
            }
        };
        for update in updates {
            out += &format!("  {update}\n");
        }
    }
    want.assert_eq(&out);
}

fn assistant(blocks: Value) -> Value {
    json!({"type": "assistant", "message": {"content": blocks}})
}

#[test]
fn streamed_text_is_shown_once_and_the_stored_message_adds_only_the_rest() {
    run(
        vec![
            In::Sent(0),
            In::Event("prompt", json!({"text": "hi"})),
            In::Thinking("let me", 0),
            In::Thinking(" think", 6),
            In::Text("Hel", 0),
            In::Text("lo", 3),
            In::Event(
                "cli",
                assistant(json!([
                    {"type": "thinking", "thinking": "let me think"},
                    {"type": "text", "text": "Hello there"},
                ])),
            ),
            // A replayed message, nothing streamed: whole.
            In::Event("cli", assistant(json!([{"type": "text", "text": "Again"}]))),
        ],
        expect![[r#"
            > prompt
            > thinking "let me" @0
              {"content":{"text":"let me","type":"text"},"sessionUpdate":"agent_thought_chunk"}
            > thinking " think" @6
              {"content":{"text":" think","type":"text"},"sessionUpdate":"agent_thought_chunk"}
            > text "Hel" @0
              {"content":{"text":"Hel","type":"text"},"sessionUpdate":"agent_message_chunk"}
            > text "lo" @3
              {"content":{"text":"lo","type":"text"},"sessionUpdate":"agent_message_chunk"}
            > cli
              {"content":{"text":" there","type":"text"},"sessionUpdate":"agent_message_chunk"}
            > cli
              {"content":{"text":"Again","type":"text"},"sessionUpdate":"agent_message_chunk"}
        "#]],
    );
}

#[test]
fn a_client_joining_mid_message_sees_the_partial_then_only_what_is_new() {
    run(
        vec![
            In::Event("prompt", json!({"text": "someone else asked"})),
            In::Streaming("Hello"),
            // Already in the partial message: skipped, or cut.
            In::Text("Hel", 0),
            In::Text("lo w", 3),
            In::Text("orld", 7),
            In::Event(
                "cli",
                assistant(json!([{"type": "text", "text": "Hello world"}])),
            ),
        ],
        expect![[r#"
            > prompt
              {"content":{"text":"someone else asked","type":"text"},"sessionUpdate":"user_message_chunk"}
            > streaming "Hello"
              {"content":{"text":"Hello","type":"text"},"sessionUpdate":"agent_message_chunk"}
            > text "Hel" @0
            > text "lo w" @3
              {"content":{"text":" w","type":"text"},"sessionUpdate":"agent_message_chunk"}
            > text "orld" @7
              {"content":{"text":"orld","type":"text"},"sessionUpdate":"agent_message_chunk"}
            > cli
        "#]],
    );
}

#[test]
fn tools_become_tool_calls_with_diffs_plans_and_output() {
    run(
        vec![
            In::Event(
                "cli",
                assistant(json!([
                    {"type": "tool_use", "id": "t1", "name": "Edit", "input":
                        {"file_path": "/w/a.rs", "old_string": "a", "new_string": "b"}},
                    {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "t3", "name": "TodoWrite", "input": {"todos": [
                        {"content": "read", "status": "completed"},
                        {"content": "write", "status": "in_progress"}]}},
                ])),
            ),
            In::Event(
                "cli",
                json!({"type": "user", "message": {"content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "edited"}]},
                    "tool_use_result": {"filePath": "/w/a.rs", "originalFile": "a\n",
                        "structuredPatch": [{"oldStart": 1, "oldLines": 1, "newStart": 1, "newLines": 1,
                            "lines": ["-a", "+b"]}]}}),
            ),
            In::Event(
                "cli",
                json!({"type": "user", "message": {"content": [
                    {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
                     "content": [{"type": "text", "text": "no such dir"}]}]}}),
            ),
        ],
        expect![[r#"
            > cli
              {"content":[{"newText":"b","oldText":"a","path":"/w/a.rs","type":"diff"}],"kind":"edit","locations":[{"path":"/w/a.rs"}],"rawInput":{"file_path":"/w/a.rs","new_string":"b","old_string":"a"},"sessionUpdate":"tool_call","status":"pending","title":"Edit a.rs","toolCallId":"t1"}
              {"content":[{"content":{"text":"```sh\nls\n```","type":"text"},"type":"content"}],"kind":"execute","rawInput":{"command":"ls"},"sessionUpdate":"tool_call","status":"pending","title":"Bash ls","toolCallId":"t2"}
              {"kind":"think","rawInput":{"todos":[{"content":"read","status":"completed"},{"content":"write","status":"in_progress"}]},"sessionUpdate":"tool_call","status":"pending","title":"TodoWrite","toolCallId":"t3"}
              {"entries":[{"content":"read","priority":"medium","status":"completed"},{"content":"write","priority":"medium","status":"in_progress"}],"sessionUpdate":"plan"}
            > cli
              {"content":[{"newText":"b\n","oldText":"a\n","path":"/w/a.rs","type":"diff"}],"sessionUpdate":"tool_call_update","status":"completed","toolCallId":"t1"}
            > cli
              {"content":[{"content":{"text":"```\nno such dir\n```","type":"text"},"type":"content"}],"sessionUpdate":"tool_call_update","status":"failed","toolCallId":"t2"}
        "#]],
    );
}

#[test]
fn modes_models_and_commands_are_updated_when_they_change() {
    run(
        vec![
            In::Event(
                "session",
                json!({"workspace": "/w", "permissionMode": "plan", "model": null}),
            ),
            In::Event(
                "capabilities",
                json!({"commands": [{"name": "review", "description": "Review a PR", "argumentHint": "<pr>"}],
                       "models": [{"value": "default", "displayName": "Default"},
                                  {"value": "opus", "displayName": "Opus", "description": "Most capable"}]}),
            ),
            In::Event(
                "cli",
                json!({"type": "system", "subtype": "init", "slash_commands": ["ignored"]}),
            ),
            In::Event(
                "settings",
                json!({"permissionMode": "acceptEdits", "model": null}),
            ),
            In::Event(
                "settings",
                json!({"permissionMode": "acceptEdits", "model": "opus"}),
            ),
            In::Event("notice", json!({"message": "Claude Code restarts"})),
        ],
        expect![[r#"
            > session
            > capabilities
              {"configOptions":[{"category":"model","currentValue":"default","id":"model","name":"Model","options":[{"name":"Default model","value":"default"},{"description":"Most capable","name":"Opus","value":"opus"}],"type":"select"}],"sessionUpdate":"config_option_update"}
              {"availableCommands":[{"description":"Review a PR","input":{"hint":"<pr>"},"name":"review"}],"sessionUpdate":"available_commands_update"}
            > cli
            > settings
              {"currentModeId":"acceptEdits","sessionUpdate":"current_mode_update"}
            > settings
              {"configOptions":[{"category":"model","currentValue":"opus","id":"model","name":"Model","options":[{"name":"Default model","value":"default"},{"description":"Most capable","name":"Opus","value":"opus"}],"type":"select"}],"sessionUpdate":"config_option_update"}
            > notice
              {"content":{"text":"\n\n*Claude Code restarts*\n\n","type":"text"},"sessionUpdate":"agent_message_chunk"}
        "#]],
    );
}

#[test]
fn an_approval_finds_the_tool_call_it_asks_about() {
    let mut view = AcpView::new(std::path::Path::new("/w"), PermissionMode::Default, None);
    let input = json!({"file_path": "/w/n.txt", "content": "x"});
    view.event(&event(
        0,
        "cli",
        assistant(json!([{"type": "tool_use", "id": "toolu_9", "name": "Write", "input": input}])),
    ));
    let approval = |tool: &str, input: Value| Approval {
        approval: "s/1".into(),
        session: "s".into(),
        kind: ApprovalKind::Tool,
        tool: tool.into(),
        input,
        title: "Write n.txt".into(),
        destructive: false,
    };
    let call = view.tool_call_for(&approval("Write", input.clone()));
    assert_eq!(call["toolCallId"], "toolu_9");
    assert_eq!(call["content"][0]["newText"], "x");
    let other = view.tool_call_for(&approval("Bash", json!({"command": "ls"})));
    assert_eq!(other["toolCallId"], "approval-s/1");
    assert_eq!(other["kind"], "execute");
}

/// A transcript written by an earlier version (main at 7a99753) shows what
/// that version showed.
#[test]
fn a_transcript_of_an_earlier_version_replays_the_same() {
    let text = include_str!("../../../tests/data/transcript-7a99753.jsonl");
    let mut view = AcpView::new(std::path::Path::new("/w"), PermissionMode::Default, None);
    let mut out = String::new();
    for line in text.lines() {
        let event: Event = serde_json::from_str(line).unwrap();
        out += &format!("> {}\n", event.event.kind());
        for update in view.event(&event) {
            out += &format!("  {update}\n");
        }
    }
    out += &format!("modes {}\nconfig {}\n", view.modes(), view.config_options());
    expect![[r#"
        > session
        > notice
          {"content":{"text":"\n\n*This workspace is not trusted, so its .claude/settings.json is not loaded: Claude Code sessions the service runs for it load the repository's own Claude Code settings: .claude/settings.json and .claude/settings.local.json (hooks there run shell commands, permission rules there can allow tools without asking) and the MCP servers of .mcp.json (programs that start with the session) would. Trust it with `moonkale-service trust` (or the editor command \"Moonkale: trust this workspace\") if you trust whoever wrote it.*\n\n","type":"text"},"sessionUpdate":"agent_message_chunk"}
        > prompt
          {"content":{"text":"Write a.txt\nwith a greeting","type":"text"},"sessionUpdate":"user_message_chunk"}
        > state
        > capabilities
          {"configOptions":[{"category":"model","currentValue":"default","id":"model","name":"Model","options":[{"name":"Default model","value":"default"},{"name":"Sonnet","value":"sonnet"}],"type":"select"}],"sessionUpdate":"config_option_update"}
          {"availableCommands":[{"description":"Review a pull request","input":{"hint":"<pr>"},"name":"review"},{"description":"Compact the conversation","name":"compact"}],"sessionUpdate":"available_commands_update"}
        > cli
        > cli
          {"content":{"text":"I will write it.","type":"text"},"sessionUpdate":"agent_message_chunk"}
          {"content":[{"newText":"hi\n","oldText":null,"path":"/tmp/w/a.txt","type":"diff"}],"kind":"edit","locations":[{"path":"/tmp/w/a.txt"}],"rawInput":{"content":"hi\n","file_path":"/tmp/w/a.txt"},"sessionUpdate":"tool_call","status":"pending","title":"Write /tmp/w/a.txt","toolCallId":"t1"}
        > decision
        > settings
          {"currentModeId":"default","sessionUpdate":"current_mode_update"}
        > cli
        > approval
        > state
        > decision
        > state
        > cli
          {"content":[{"newText":"hi\n","oldText":null,"path":"/tmp/w/a.txt","type":"diff"}],"sessionUpdate":"tool_call_update","status":"completed","toolCallId":"t1"}
        > cli
          {"content":{"text":"Done.","type":"text"},"sessionUpdate":"agent_message_chunk"}
        > cli
        > state
        > note
          {"content":{"text":"(why a change was undone) I undid your change to a.txt: keep it empty.","type":"text"},"sessionUpdate":"user_message_chunk"}
        > prompt
          {"content":{"data":"iVBORw0KGgo=","mimeType":"image/png","type":"image"},"sessionUpdate":"user_message_chunk"}
          {"content":{"text":"Now look at this","type":"text"},"sessionUpdate":"user_message_chunk"}
        > state
        > cli
        > state
        modes {"availableModes":[{"description":"Ask before edits and commands","id":"default","name":"Default"},{"description":"Edit files without asking; commands still ask","id":"acceptEdits","name":"Accept edits"},{"description":"Read only: Claude plans, and asks before it leaves plan mode","id":"plan","name":"Plan"},{"description":"Everything without asking","id":"bypassPermissions","name":"Bypass permissions"}],"currentModeId":"default"}
        config [{"category":"model","currentValue":"default","id":"model","name":"Model","options":[{"name":"Default model","value":"default"},{"name":"Sonnet","value":"sonnet"}],"type":"select"}]
    "#]].assert_eq(&out);
}
