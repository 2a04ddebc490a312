//! The session's specification: a session task fed scripted CLI output
//! through the [`Launcher::Script`] seam, with the hub played by a channel.
//! Each test reads as what the user does, what the CLI is told, and what
//! the editors are shown.

use std::sync::Arc;
use std::time::Duration;

use expect_test::{Expect, expect};
use moonkale_claude::launch::PermissionMode;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::cli::script::{Launched, Output};
use super::{Launcher, SessionCommand, SessionHandle, Start};
use crate::agent::log::EventLog;
use crate::agent::transcript::Transcript;
use crate::agent::{AgentConfig, Answer, SpareConfig};
use crate::hub::ports::{ChangesCommand, changes_channel};
use crate::hub::{AgentProgress, Event, HubHandle, Responder};
use crate::lsp::message::ResponseError;
use crate::user_state::TrustStore;

/// How long a test waits for what it expects before it fails.
const DEADLINE: Duration = Duration::from_secs(60);

struct World {
    id: Uuid,
    /// The workspace folder, shown as `W`.
    root: String,
    handle: SessionHandle,
    hub: mpsc::Receiver<Event>,
    launches: mpsc::UnboundedReceiver<Launched>,
    cli: Option<Launched>,
    /// What the session told the change-set host.
    changes: mpsc::Receiver<ChangesCommand>,
    /// How many editors the host says are attached (none at first).
    editors: tokio::sync::watch::Sender<usize>,
    _dir: tempfile::TempDir,
}

struct Setup {
    mode: PermissionMode,
    trusted: bool,
    /// The CLI already has the conversation (a stored `system/init`).
    has_conversation: bool,
    approval_timeout: Duration,
    cli_idle: Duration,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            mode: PermissionMode::Default,
            trusted: true,
            has_conversation: false,
            approval_timeout: Duration::from_secs(600),
            cli_idle: crate::agent::DEFAULT_CLI_IDLE,
        }
    }
}

impl World {
    fn new(setup: Setup) -> World {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("w");
        std::fs::create_dir(&workspace).unwrap();
        let trust = TrustStore::at(dir.path().join("trust.json"));
        if setup.trusted {
            trust.set(&workspace, true).unwrap();
        }
        let (scripts, launches) = mpsc::unbounded_channel();
        let (changes_tx, changes) = changes_channel();
        let config = AgentConfig {
            claude_bin: None,
            approval_timeout: setup.approval_timeout,
            env: Vec::new(),
            shutdown_grace: Duration::from_millis(100),
            trust: Some(trust),
            launcher: Launcher::Script(scripts),
            sources: crate::change_sources::ChangeSources {
                changes: Some(changes_tx),
                sessions: Default::default(),
            },
            spare: SpareConfig::OFF,
            cli_idle: setup.cli_idle,
            max_live_clis: crate::agent::DEFAULT_MAX_LIVE_CLIS,
            hook_secrets: Default::default(),
            sandboxes: None,
        };
        let id = Uuid::from_u128(0x5e55);
        let transcript = Transcript::open(dir.path().join("chat.jsonl")).unwrap();
        let log = EventLog::load(transcript, |_| {}).unwrap();
        let restored = setup.has_conversation.then(|| {
            let mut restored = super::Restored::new(&id.to_string());
            restored.feed(&json!({"seq": 0, "at": 1, "kind": "cli", "data": {"type": "system", "subtype": "init"}}));
            restored
        });
        let (hub, events) = HubHandle::detached(workspace.clone());
        let editors = tokio::sync::watch::Sender::new(0);
        let handle = super::spawn(
            Start {
                id,
                workspace,
                log,
                restored,
                damaged: None,
                permission_mode: setup.mode,
                model: None,
                cwd: None,
                mcp_servers: Default::default(),
                spare: false,
                editors: editors.subscribe(),
            },
            hub,
            Arc::new(config),
        );
        World {
            id,
            root: dir.path().join("w").display().to_string(),
            handle,
            hub: events,
            launches,
            cli: None,
            changes,
            editors,
            _dir: dir,
        }
    }

    /// Sends a command; its answer, once the session gives it.
    async fn ask(
        &mut self,
        command: impl FnOnce(Responder) -> SessionCommand,
    ) -> Result<Value, ResponseError> {
        let (reply, answered) = Responder::new();
        self.handle.tx.send(command(reply)).await.unwrap();
        tokio::time::timeout(DEADLINE, answered)
            .await
            .expect("the session answers")
            .expect("a responder always answers")
    }

    async fn prompt(&mut self, text: &str) -> Result<Value, ResponseError> {
        let text = text.to_owned();
        self.ask(|reply| SessionCommand::Prompt {
            text,
            images: Vec::new(),
            reply,
        })
        .await
    }

    async fn answer(&mut self, approval: &str, answer: Answer) -> Result<Value, ResponseError> {
        let approval = approval.to_owned();
        self.ask(|reply| SessionCommand::Answer {
            approval,
            answer,
            reply: Some(reply),
        })
        .await
    }

    /// The flags that matter of the next CLI the session starts.
    async fn launched(&mut self) -> String {
        let launched = tokio::time::timeout(DEADLINE, self.launches.recv())
            .await
            .expect("a CLI is started")
            .expect("the session lives");
        let flags: Vec<String> = launched
            .args
            .iter()
            .filter(|a| {
                [
                    "--permission-mode",
                    "--session-id",
                    "--resume",
                    "--setting-sources",
                    "--strict",
                ]
                .iter()
                .any(|f| a.starts_with(f))
            })
            .map(|a| a.replace(&self.id.to_string(), "ID"))
            .collect();
        self.cli = Some(launched);
        flags.join(" ")
    }

    /// What the CLI was told, one line each, until (and with) a line of
    /// type `until` (`control_response`, `user`, …).
    async fn told(&mut self, until: &str) -> String {
        let cli = self.cli.as_mut().expect("a CLI runs");
        let mut lines = Vec::new();
        loop {
            let line = tokio::time::timeout(DEADLINE, cli.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("no {until} line; got {lines:#?}"))
                .expect("the session lives");
            let kind = line["type"].as_str().unwrap_or_default().to_owned();
            lines.push(render_cli_line(&line));
            if kind == until {
                return lines.join("\n");
            }
        }
    }

    /// The CLI says `line` (one stream-json message).
    fn cli_says(&self, line: Value) {
        self.cli.as_ref().expect("a CLI runs").say(line);
    }

    fn cli_exits(&mut self, stderr: &str) {
        let cli = self.cli.take().expect("a CLI runs");
        let _ = cli.output.send(Output::Exit {
            stderr: stderr.into(),
        });
    }

    /// What the editors were shown (hub events), one line each, until a
    /// line that contains `until`.
    async fn shown(&mut self, until: &str) -> String {
        let mut lines = Vec::new();
        loop {
            let event = tokio::time::timeout(DEADLINE, self.hub.recv())
                .await
                .unwrap_or_else(|_| panic!("nothing with {until:?}; got {lines:#?}"))
                .expect("the session lives");
            let line = render_hub_event(&event)
                .replace(&self.id.to_string(), "ID")
                .replace(&self.root, "W");
            let done = line.contains(until);
            lines.push(line);
            if done {
                return lines.join("\n");
            }
        }
    }
}

fn render_cli_line(line: &Value) -> String {
    let compact = |v: &Value| serde_json::to_string(v).unwrap();
    match line["type"].as_str() {
        Some("user") => format!("user {}", compact(&line["message"]["content"])),
        Some("control_request") => {
            let request = &line["request"];
            let servers = match request["subtype"].as_str() {
                Some("initialize") => format!(" sdkMcpServers={}", request["sdkMcpServers"]),
                Some("mcp_set_servers") => format!(" servers={}", compact(&request["servers"])),
                _ => String::new(),
            };
            format!("control_request {}{servers}", request["subtype"])
        }
        Some("control_response") => {
            format!(
                "control_response {}",
                compact(&line["response"]["response"])
            )
        }
        _ => compact(line),
    }
}

fn render_hub_event(event: &Event) -> String {
    match event {
        Event::Publish { method, params, .. } if *method == "moonkale/agent/event" => {
            let e = &params["event"];
            format!(
                "event {} {}",
                e["kind"].as_str().unwrap_or_default(),
                serde_json::to_string(&e["data"]).unwrap()
            )
        }
        Event::Publish { method, params, .. } => format!("{method} {params}"),
        Event::AgentApproval { approval } => {
            let object = serde_json::to_value(approval).unwrap();
            format!(
                "editors asked {} {} {:?}",
                approval.approval,
                object["kind"].as_str().unwrap_or_default(),
                approval.title
            )
        }
        Event::AgentApprovalClosed { approval, .. } => {
            format!("editors' question closed {approval}")
        }
        Event::AgentProgress { progress, .. } => match progress {
            AgentProgress::Begin(t) => format!("progress begin {t:?}"),
            AgentProgress::Report(t) => format!("progress report {t:?}"),
            AgentProgress::End(t) => format!("progress end {t:?}"),
        },
        other => format!("{other:?}"),
    }
}

fn check(actual: &str, expect: Expect) {
    expect.assert_eq(actual);
}

fn init() -> Value {
    json!({"type": "system", "subtype": "init", "session_id": "x", "permissionMode": "default"})
}

fn success(text: &str) -> Value {
    json!({"type": "result", "subtype": "success", "is_error": false, "result": text})
}

fn can_use_tool(request_id: &str, tool: &str, input: Value) -> Value {
    json!({"type": "control_request", "request_id": request_id,
           "request": {"subtype": "can_use_tool", "tool_name": tool, "input": input}})
}

#[tokio::test]
async fn a_prompt_starts_the_cli_and_the_turn_ends_idle() {
    let mut w = World::new(Setup::default());
    let reply = w.prompt("Say hello").await.unwrap();
    assert_eq!(reply["state"], "running");
    check(
        &w.launched().await,
        expect!["--permission-mode=default --session-id=ID"],
    );
    check(
        &w.told("user").await,
        expect![[r#"
            control_request "initialize" sdkMcpServers=[]
            user "Say hello""#]],
    );
    w.cli_says(init());
    w.cli_says(success("Hello!"));
    check(
        &w.shown("\"idle\"").await,
        expect![[r#"
            event session {"model":null,"permissionMode":"default","workspace":"W"}
            event prompt {"text":"Say hello"}
            progress begin "Say hello"
            event state {"state":"running"}
            event cli {"permissionMode":"default","session_id":"x","subtype":"init","type":"system"}
            event cli {"is_error":false,"result":"Hello!","subtype":"success","type":"result"}
            progress end "done"
            event state {"state":"idle"}"#]],
    );
}

/// The `mcpServers` of the CLI's `--mcp-config`.
fn mcp_config(launched: &Launched) -> String {
    let config = launched
        .args
        .iter()
        .find_map(|a| a.strip_prefix("--mcp-config="))
        .or_else(|| {
            let at = launched.args.iter().position(|a| a == "--mcp-config")?;
            launched.args.get(at + 1).map(String::as_str)
        })
        .expect("an --mcp-config");
    let config: Value = serde_json::from_str(config).unwrap();
    serde_json::to_string(&config["mcpServers"]).unwrap()
}

#[tokio::test]
async fn the_editor_tools_are_offered_once_an_editor_is_attached() {
    let mut w = World::new(Setup::default());
    w.prompt("hi").await.unwrap();
    w.launched().await;
    // No editor: nothing to show, so no MCP server for the CLI to start.
    check(&mcp_config(w.cli.as_ref().unwrap()), expect!["{}"]);
    check(
        &w.told("user").await,
        expect![[r#"
            control_request "initialize" sdkMcpServers=[]
            user "hi""#]],
    );
    // An editor attaches: the running CLI gets them.
    w.editors.send_replace(1);
    check(
        &w.told("control_request").await,
        expect![[
            r#"control_request "mcp_set_servers" servers={"moonkale":{"name":"moonkale","type":"sdk"}}"#
        ]],
    );
    w.cli_says(init());
    w.cli_says(success("ok"));
    w.shown("\"idle\"").await;
    // A CLI started with an editor attached has them from its start.
    w.cli_exits("");
    let mut cli = w.handle.cli.clone();
    tokio::time::timeout(DEADLINE, cli.wait_for(|c| *c == super::CliSeen::Ended))
        .await
        .expect("the session sees its CLI end")
        .unwrap();
    w.prompt("again").await.unwrap();
    w.launched().await;
    check(
        &mcp_config(w.cli.as_ref().unwrap()),
        expect![[r#"{"moonkale":{"name":"moonkale","type":"sdk"}}"#]],
    );
    check(
        &w.told("user").await,
        expect![[r#"
            control_request "initialize" sdkMcpServers=["moonkale"]
            user "again""#]],
    );
}

#[tokio::test]
async fn an_untrusted_workspace_starts_the_cli_with_the_users_settings_only() {
    let mut w = World::new(Setup {
        trusted: false,
        ..Setup::default()
    });
    w.prompt("hi").await.unwrap();
    check(
        &w.launched().await,
        expect![
            "--permission-mode=default --session-id=ID --setting-sources=user --strict-mcp-config"
        ],
    );
}

#[tokio::test]
async fn a_tool_approval_is_shown_checked_and_its_answer_told_to_the_cli() {
    let mut w = World::new(Setup::default());
    w.prompt("Write a.txt").await.unwrap();
    w.launched().await;
    w.told("user").await;
    w.cli_says(can_use_tool(
        "r1",
        "Write",
        json!({"file_path": "/tmp/w/a.txt", "content": "x"}),
    ));
    let shown = w.shown("editors asked").await;
    assert!(
        shown.ends_with(r#"editors asked ID/1 tool "Write /tmp/w/a.txt""#),
        "{shown}"
    );
    check(
        &w.shown("waitingForApproval").await,
        expect![[r#"event state {"state":"waitingForApproval"}"#]],
    );

    // An answer that does not fit the question is refused; it stays open.
    let wrong = Answer {
        allow: true,
        mode: Some(PermissionMode::AcceptEdits),
        by: "api",
        ..Answer::default()
    };
    let approval = format!("{}/1", w.id);
    let refused = w.answer(&approval, wrong).await;
    check(
        &refused.unwrap_err().message,
        expect!["acceptEdits is not a way to go on from this approval"],
    );
    let gone = w.answer("nope/9", Answer::default()).await;
    check(
        &gone.unwrap_err().message,
        expect!["approval nope/9 is not waiting (answered already?)"],
    );

    let allow = Answer {
        allow: true,
        always: true,
        by: "editor",
        ..Answer::default()
    };
    w.answer(&approval, allow).await.unwrap();
    check(
        &w.told("control_response").await,
        expect![[
            r#"control_response {"behavior":"allow","updatedInput":{"content":"x","file_path":"/tmp/w/a.txt"}}"#
        ]],
    );
    check(
        &w.shown("\"running\"").await,
        expect![[r#"
            event decision {"allow":true,"always":true,"approval":"ID/1","by":"editor","tool":"Write"}
            editors' question closed ID/1
            event state {"state":"running"}"#]],
    );

    // "Always" covers the next Write without asking.
    w.cli_says(can_use_tool(
        "r2",
        "Write",
        json!({"file_path": "/tmp/w/b.txt", "content": "y"}),
    ));
    check(
        &w.told("control_response").await,
        expect![[
            r#"control_response {"behavior":"allow","updatedInput":{"content":"y","file_path":"/tmp/w/b.txt"}}"#
        ]],
    );
}

#[tokio::test]
async fn approving_a_plan_leaves_plan_mode_in_the_cli_and_the_session() {
    let mut w = World::new(Setup {
        mode: PermissionMode::Plan,
        ..Setup::default()
    });
    w.prompt("Plan it").await.unwrap();
    check(
        &w.launched().await,
        expect!["--permission-mode=plan --session-id=ID"],
    );
    w.told("user").await;
    // 2.1.332 empties ExitPlanMode's input: the plan comes from the
    // assistant message.
    w.cli_says(json!({"type": "assistant", "message": {"content": [
        {"type": "tool_use", "name": "ExitPlanMode", "input": {"plan": "1. write a.txt"}}]}}));
    w.cli_says(can_use_tool("r1", "ExitPlanMode", json!({})));
    let shown = w.shown("editors asked").await;
    assert!(
        shown.ends_with(r#"plan "Claude's plan is ready""#),
        "{shown}"
    );
    let (reply, answered) = Responder::new();
    w.handle
        .tx
        .send(SessionCommand::Events {
            since: 0,
            limit: 100,
            reply,
        })
        .await
        .unwrap();
    let page = answered.await.unwrap().unwrap();
    check(
        &serde_json::to_string(&page["pendingApprovals"][0]["plan"]).unwrap(),
        expect![[r#""1. write a.txt""#]],
    );

    let approve = Answer {
        allow: true,
        mode: Some(PermissionMode::AcceptEdits),
        by: "editor",
        ..Answer::default()
    };
    w.answer(&format!("{}/1", w.id), approve).await.unwrap();
    check(
        &w.told("control_response").await,
        expect![[
            r#"control_response {"behavior":"allow","updatedInput":{},"updatedPermissions":[{"destination":"session","mode":"acceptEdits","type":"setMode"}]}"#
        ]],
    );
    check(
        &w.shown("question closed").await,
        expect![[r#"
            event state {"state":"waitingForApproval"}
            event settings {"by":"plan approval","model":null,"permissionMode":"acceptEdits"}
            event decision {"allow":true,"always":false,"approval":"ID/1","by":"editor","mode":"acceptEdits","tool":"ExitPlanMode"}
            editors' question closed ID/1"#]],
    );
}

#[tokio::test]
async fn a_question_is_answered_only_with_answers_to_its_questions() {
    let mut w = World::new(Setup::default());
    w.prompt("Ask me").await.unwrap();
    w.launched().await;
    w.told("user").await;
    let questions = json!({"questions": [{"question": "Which color?", "header": "Color",
        "multiSelect": false, "options": [{"label": "Red"}, {"label": "Blue"}]}]});
    w.cli_says(can_use_tool("r1", "AskUserQuestion", questions));
    let shown = w.shown("editors asked").await;
    assert!(shown.ends_with(r#"question "Claude asks you""#), "{shown}");
    let approval = format!("{}/1", w.id);
    let answers = |pairs: Value| Answer {
        allow: true,
        answers: pairs.as_object().cloned(),
        by: "api",
        ..Answer::default()
    };
    let bare = w
        .answer(
            &approval,
            Answer {
                allow: true,
                ..Answer::default()
            },
        )
        .await;
    check(
        &bare.unwrap_err().message,
        expect!["this is a question: answer it with answers {question: label(s) or your text}"],
    );
    let other = w
        .answer(&approval, answers(json!({"Which size?": "L"})))
        .await;
    check(
        &other.unwrap_err().message,
        expect![[r#""Which size?" is not one of the questions asked"#]],
    );
    w.answer(&approval, answers(json!({"Which color?": "Blue"})))
        .await
        .unwrap();
    check(
        &w.told("control_response").await,
        expect![[
            r#"control_response {"behavior":"allow","updatedInput":{"answers":{"Which color?":"Blue"},"questions":[{"header":"Color","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which color?"}]}}"#
        ]],
    );
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_approval_is_denied_at_its_deadline() {
    let mut w = World::new(Setup {
        approval_timeout: Duration::from_secs(30),
        ..Setup::default()
    });
    w.prompt("Run it").await.unwrap();
    w.launched().await;
    w.told("user").await;
    w.cli_says(can_use_tool("r1", "Bash", json!({"command": "make"})));
    w.shown("editors asked").await;
    // Paused time moves on to the approval's deadline (30 s), before the
    // test's own (60 s).
    check(
        &w.told("control_response").await,
        expect![[
            r#"control_response {"behavior":"deny","interrupt":false,"message":"No answer within 0.5 minutes; denied."}"#
        ]],
    );
    let shown = w.shown("question closed").await;
    assert!(shown.contains(r#""by":"timeout""#), "{shown}");
}

/// A CLI with nothing to do for `cli_idle` is stopped (its stdin closed),
/// and the next prompt resumes the conversation in a new one. A turn that
/// runs, however long, keeps it.
#[tokio::test(start_paused = true)]
async fn an_idle_cli_is_stopped_and_the_next_prompt_resumes_it() {
    let mut w = World::new(Setup {
        cli_idle: Duration::from_secs(30),
        ..Setup::default()
    });
    w.prompt("Think long").await.unwrap();
    w.launched().await;
    w.told("user").await;
    w.cli_says(init());
    // Longer than the idle limit, inside a turn: the CLI stays.
    tokio::time::sleep(Duration::from_secs(45)).await;
    w.cli_says(success("Done"));
    w.shown("\"idle\"").await;
    let cli = w.cli.as_mut().expect("a CLI runs");
    let closed = tokio::time::timeout(DEADLINE, async {
        while cli.lines.recv().await.is_some() {}
    })
    .await;
    assert!(closed.is_ok(), "the idle CLI was not stopped");
    w.cli = None;
    w.prompt("Go on").await.unwrap();
    check(
        &w.launched().await,
        expect!["--permission-mode=default --resume=ID"],
    );
    check(
        &w.told("user").await,
        expect![[r#"
            control_request "initialize" sdkMcpServers=[]
            user "Go on""#]],
    );
}

/// A turn that fails because the CLI has no login (as 2.1.332 says it: a
/// synthetic assistant message with `error: authentication_failed`, then a
/// failed result) ends with the one sentence naming the fix for that CLI,
/// and its CLI is stopped at once (not kept for the CLI's idle limit); the
/// next prompt starts one again, resuming the conversation.
#[tokio::test]
async fn a_turn_without_a_login_fails_with_the_fix_and_stops_its_cli() {
    let mut w = World::new(Setup::default());
    w.prompt("hello").await.unwrap();
    w.launched().await;
    w.told("user").await;
    w.cli_says(
        json!({"type": "system", "subtype": "init", "session_id": "x",
        "permissionMode": "default", "claude_code_version": "2.1.332", "apiKeySource": "none"}),
    );
    w.cli_says(
        json!({"type": "assistant", "error": "authentication_failed", "message": {
        "model": "<synthetic>", "role": "assistant",
        "content": [{"type": "text", "text": "Not logged in · Please run /login"}]}}),
    );
    w.cli_says(
        json!({"type": "result", "subtype": "success", "is_error": true,
        "result": "Not logged in · Please run /login"}),
    );
    check(
        &w.shown("\"login\"").await,
        expect![[r#"
            event session {"model":null,"permissionMode":"default","workspace":"W"}
            event prompt {"text":"hello"}
            progress begin "hello"
            event state {"state":"running"}
            event cli {"apiKeySource":"none","claude_code_version":"2.1.332","permissionMode":"default","session_id":"x","subtype":"init","type":"system"}
            event cli {"error":"authentication_failed","message":{"content":[{"text":"Not logged in · Please run /login","type":"text"}],"model":"<synthetic>","role":"assistant"},"type":"assistant"}
            event cli {"is_error":true,"result":"Not logged in · Please run /login","subtype":"success","type":"result"}
            progress end "failed"
            event state {"error":"Claude Code is not logged in: run `claude auth login` in a terminal, then try again.","login":{"fix":"run `claude auth login` in a terminal"},"state":"failed"}"#]],
    );
    let cli = w.cli.as_mut().expect("a CLI runs");
    let closed = tokio::time::timeout(DEADLINE, async {
        while cli.lines.recv().await.is_some() {}
    })
    .await;
    assert!(closed.is_ok(), "the CLI of a failed turn was kept");
    w.cli = None;
    w.prompt("hello again").await.unwrap();
    check(
        &w.launched().await,
        expect!["--permission-mode=default --resume=ID"],
    );
}

#[tokio::test]
async fn a_lost_conversation_continues_in_a_fresh_one_with_the_prompt_sent_again() {
    let mut w = World::new(Setup {
        has_conversation: true,
        ..Setup::default()
    });
    w.prompt("Go on").await.unwrap();
    check(
        &w.launched().await,
        expect!["--permission-mode=plan --resume=ID"],
    );
    w.told("user").await;
    w.cli_exits("No conversation found with session ID: x");
    check(
        &w.launched().await,
        expect!["--permission-mode=plan --session-id=ID"],
    );
    check(
        &w.told("user").await,
        expect![[r#"
            control_request "initialize" sdkMcpServers=[]
            user "Go on""#]],
    );
    let shown = w.shown("notice").await;
    assert!(shown.contains("no longer has this conversation"), "{shown}");
    w.cli_says(init());
    w.cli_says(success("ok"));
    w.shown("\"idle\"").await;
}

#[tokio::test]
async fn a_cli_that_exits_during_a_turn_fails_it_with_its_stderr_and_withdraws_approvals() {
    let mut w = World::new(Setup::default());
    w.prompt("Do it").await.unwrap();
    w.launched().await;
    w.told("user").await;
    w.cli_says(init());
    w.cli_says(can_use_tool("r1", "Bash", json!({"command": "ls"})));
    w.shown("editors asked").await;
    w.cli_exits("boom: out of memory");
    check(
        &w.shown(r#""state":"failed""#).await,
        expect![[r#"
            event state {"state":"waitingForApproval"}
            event decision {"allow":false,"always":false,"approval":"ID/1","by":"withdrawn","message":"claude exited","tool":"Bash"}
            editors' question closed ID/1
            event state {"state":"running"}
            progress end "failed"
            event state {"error":"the claude process exited during a turn (exit status: 1): boom: out of memory","state":"failed"}"#]],
    );
    // The next prompt starts a new CLI (resuming: the CLI had the
    // conversation).
    w.prompt("Again").await.unwrap();
    check(
        &w.launched().await,
        expect!["--permission-mode=default --resume=ID"],
    );
}

/// What the change-set host was told, one line each, until a turn ended.
async fn changes_told(w: &mut World) -> String {
    let mut lines = Vec::new();
    loop {
        let command = tokio::time::timeout(DEADLINE, w.changes.recv())
            .await
            .unwrap_or_else(|_| panic!("no turn end; got {lines:#?}"))
            .expect("the session lives");
        let line = crate::ide::transcripts::describe_change(&command);
        let done = line.starts_with("ended");
        lines.push(line.replace(&w.id.to_string(), "ID"));
        if done {
            return lines.join("\n");
        }
    }
}

#[tokio::test]
async fn edits_claude_reports_go_to_the_change_set_host_by_turn() {
    let mut w = World::new(Setup {
        mode: PermissionMode::AcceptEdits,
        ..Setup::default()
    });
    let sent = w.prompt("Fix   the\ngreeting").await.unwrap();
    w.launched().await;
    w.told("user").await;
    w.cli_says(init());
    // Two Edits of one file, a Write of a new one, a Read (not an edit)
    // and a record that does not add up (dropped, logged).
    let edit = |before: &str, lines: Value| {
        json!({"type": "user", "message": {"role": "user", "content": []},
               "tool_use_result": {"filePath": "/w/a.txt", "originalFile": before,
               "structuredPatch": [{"oldStart": 1, "oldLines": 1, "newStart": 1, "newLines": 1, "lines": lines}]}})
    };
    w.cli_says(edit("hello\n", json!(["-hello", "+hi"])));
    w.cli_says(json!({"type": "user", "tool_use_result": {"type": "text", "file": {"filePath": "/w/a.txt"}}}));
    w.cli_says(edit("nothing like it\n", json!(["-hello", "+hi"])));
    w.cli_says(
        json!({"type": "user", "tool_use_result": {"type": "create", "filePath": "/w/new.txt",
        "content": "new\n", "structuredPatch": [], "originalFile": null}}),
    );
    w.cli_says(success("Done"));
    let seq = sent["seq"].as_u64().unwrap();
    check(
        &changes_told(&mut w)
            .await
            .replace(&format!(":{seq}"), ":SEQ"),
        expect![[r#"
            record Agent { session: "ID" } ID:SEQ Some("Fix the greeting") /w/a.txt Some("hello\n") -> Some("hi\n")
            record Agent { session: "ID" } ID:SEQ Some("Fix the greeting") /w/new.txt None -> Some("new\n")
            ended Agent { session: "ID" } ID:SEQ"#]],
    );
}

#[tokio::test]
async fn a_note_for_claude_comes_before_the_next_prompt() {
    let mut w = World::new(Setup::default());
    w.prompt("first").await.unwrap();
    w.launched().await;
    w.told("user").await;
    w.cli_says(init());
    w.cli_says(success("ok"));
    w.handle
        .tx
        .send(SessionCommand::TellClaude {
            text: "I undid your change to a.txt: keep the old name.".into(),
        })
        .await
        .unwrap();
    w.prompt("second").await.unwrap();
    check(
        &w.told("user").await,
        expect![[
            r#"user "[Note from the user's editor, about your earlier changes: I undid your change to a.txt: keep the old name.]\n\nsecond""#
        ]],
    );
    // Told once: the prompt after has no note.
    w.cli_says(success("ok"));
    w.prompt("third").await.unwrap();
    check(&w.told("user").await, expect![[r#"user "third""#]]);
}

/// A transcript written by an earlier version (main at 7a99753, from this
/// file's scripted CLI: every kind of event) loads through the typed
/// events, and restores what that version restored.
#[test]
fn a_transcript_of_an_earlier_version_restores_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chat.jsonl");
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/transcript-7a99753.jsonl"
    );
    std::fs::copy(fixture, &path).unwrap();
    let mut restored = super::Restored::new("ID");
    let log = EventLog::load(Transcript::open(&path).unwrap(), |e| restored.feed(e)).unwrap();
    assert_eq!(log.len(), 23);
    let view = &restored.view;
    let out = format!(
        "{:#?}\nerror: {:?}\nhas_conversation: {}\nalways: {:?}\nnotes: {:?}\n",
        restored.summary(),
        view.error,
        view.has_conversation,
        view.always.iter().collect::<Vec<_>>(),
        view.notes
    );
    expect![[r#"
        SessionSummary {
            session: "ID",
            state: Failed,
            title: "Write a.txt with a greeting",
            created: 1796245479695,
            updated: 1796245479780,
            permission_mode: Default,
            model: None,
            events: Some(
                23,
            ),
            cwd: None,
            jailed: false,
            cli: None,
            outside: false,
        }
        error: Some("API Error: 529 overloaded")
        has_conversation: true
        always: ["Write"]
        notes: []
    "#]]
    .assert_eq(&out);
}

/// The editor tools are listed byte for byte as the hand-written list did,
/// from the one tool table; a tool the server does not have is none.
#[test]
fn editor_tools_are_the_recorded_list() {
    let tool = |name: &str, description: &str, properties: Value, required: &[&str]| {
        json!({
            "name": name,
            "description": description,
            "inputSchema": {"type": "object", "properties": properties, "required": required},
        })
    };
    let path = json!({"type": "string", "description": "Absolute path of a file in the workspace"});
    let expected = json!({"tools": [
        tool("getOpenEditors", "The files open in the user's editors, with their unsaved-changes flag.", json!({}), &[]),
        tool("getCurrentSelection", "The user's current selection (or cursor) in their active editor, with its text.", json!({}), &[]),
        tool("getDiagnostics", "Diagnostics (errors, warnings) the user's editors show, for one file URI or all.", json!({"uri": {"type": "string"}}), &[]),
        tool("getWorkspaceFolders", "The workspace folder.", json!({}), &[]),
        tool("readBuffer", "The text of a file as the user's editor holds it, including unsaved changes. Prefer this to reading the file from disk when the user is editing it.", json!({"filePath": path}), &["filePath"]),
        tool("openFile", "Shows a file in the user's editor, optionally selecting lines (1-based, inclusive).", json!({"filePath": path, "startLine": {"type": "integer"}, "endLine": {"type": "integer"}}), &["filePath"]),
    ]});
    assert_eq!(
        serde_json::to_string(&super::editor_tools()).unwrap(),
        serde_json::to_string(&expected).unwrap()
    );
    use moonkale_protocol::ide::EditorToolCall;
    assert_eq!(
        super::editor_tool_call("saveDocument", &json!({}), None),
        None
    );
    let confined = crate::workspace_fs::confine(&[std::path::PathBuf::from("/w")], "/w/a").ok();
    assert_eq!(
        super::editor_tool_call("openFile", &json!({"startLine": 3}), confined),
        Some(EditorToolCall::OpenFile {
            file_path: "/w/a".into(),
            start_line: Some(3),
            end_line: None
        })
    );
    assert_eq!(
        super::editor_tool_call("readBuffer", &json!({}), None),
        Some(EditorToolCall::ReadBuffer {
            file_path: "".into()
        })
    );
}
