//! The agent host's specification: requests in, answers and hub events
//! out, with sessions whose CLI is a script (the session's
//! [`Launcher::Script`](crate::agent::Launcher) seam) and the hub played by
//! a channel.

use std::time::Duration;

use expect_test::expect;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::spawn_in;
use crate::agent::session::cli::script::Launched;
use crate::agent::{AgentCommand, AgentConfig, Launcher, SpareConfig};
use crate::hub::ports::{Request, agent_channel};
use crate::hub::{EditorId, Event, HubHandle, Responder};
use crate::lsp::message;
use crate::user_state::TrustStore;

const DEADLINE: Duration = Duration::from_secs(60);

struct World {
    commands: mpsc::Sender<AgentCommand>,
    hub: mpsc::Receiver<Event>,
    launches: mpsc::UnboundedReceiver<Launched>,
    host: tokio::task::JoinHandle<()>,
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World::in_dir(tempfile::tempdir().unwrap())
    }

    /// A host over `dir`'s workspace and transcripts (what a restarted
    /// service finds).
    fn in_dir(dir: tempfile::TempDir) -> World {
        World::with_spare(dir, SpareConfig::OFF)
    }

    /// [`World::in_dir`] with a warm spare kept as `spare` says.
    fn with_spare(dir: tempfile::TempDir, spare: SpareConfig) -> World {
        let workspace = dir.path().join("w");
        let _ = std::fs::create_dir(&workspace);
        let trust = TrustStore::at(dir.path().join("trust.json"));
        trust.set(&workspace, true).unwrap();
        let (scripts, launches) = mpsc::unbounded_channel();
        let config = AgentConfig {
            claude_bin: None,
            approval_timeout: Duration::from_secs(600),
            env: Vec::new(),
            shutdown_grace: Duration::from_millis(100),
            trust: Some(trust),
            launcher: Launcher::Script(scripts),
            sources: Default::default(),
            spare,
            cli_idle: crate::agent::DEFAULT_CLI_IDLE,
            max_live_clis: crate::agent::DEFAULT_MAX_LIVE_CLIS,
            hook_secrets: Default::default(),
            sandboxes: None,
        };
        let (hub, events) = HubHandle::detached(workspace);
        let (commands, rx) = agent_channel();
        let chats = Ok(dir.path().join("chats"));
        std::fs::create_dir_all(dir.path().join("chats")).unwrap();
        let host = spawn_in(hub, rx, config, chats);
        World {
            commands,
            hub: events,
            launches,
            host,
            dir,
        }
    }

    /// A front-door request from editor 1; its answer, as a line.
    async fn ask(&mut self, method: &str, params: Value) -> String {
        match self.raw(method, params).await {
            Ok(v) => format!("Ok {}", self.scrub(&v.to_string())),
            Err(e) => format!("Err {} {}", e.code, self.scrub(&e.message)),
        }
    }

    async fn raw(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Value, crate::lsp::message::ResponseError> {
        let (reply, answered) = Responder::new();
        let request = Request::new(EditorId(1), method, message::params(&params), reply);
        self.commands
            .send(AgentCommand::Request(request))
            .await
            .unwrap();
        tokio::time::timeout(DEADLINE, answered)
            .await
            .expect("the host answers")
            .expect("a responder always answers")
    }

    /// Session ids and times vary: they are written `S`, `T`.
    fn scrub(&self, text: &str) -> String {
        let uuid = regex_free_uuid(text);
        let mut out = text.to_owned();
        if let Some(id) = uuid {
            out = out.replace(&id, "S");
        }
        out
    }

    async fn cli(&mut self) -> Launched {
        tokio::time::timeout(DEADLINE, self.launches.recv())
            .await
            .expect("a CLI is started")
            .unwrap()
    }

    /// Waits for the hub event whose rendering contains `needle`.
    async fn hub_sees(&mut self, needle: &str) -> String {
        loop {
            let event = tokio::time::timeout(DEADLINE, self.hub.recv())
                .await
                .unwrap_or_else(|_| panic!("no hub event with {needle:?}"))
                .expect("the host lives");
            let line = match &event {
                Event::Publish { method, params, .. } => format!("{method} {params}"),
                other => format!("{other:?}"),
            };
            if line.contains(needle) {
                return self.scrub(&line);
            }
        }
    }

    async fn stop(self) -> tempfile::TempDir {
        self.commands.send(AgentCommand::Shutdown).await.unwrap();
        tokio::time::timeout(DEADLINE, self.host)
            .await
            .expect("the host stops")
            .unwrap();
        self.dir
    }
}

mod spare;

/// The first UUID in `text`, found without a regex crate.
fn regex_free_uuid(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(35)).find_map(|i| {
        let candidate = text.get(i..i + 36)?;
        uuid::Uuid::parse_str(candidate)
            .ok()
            .map(|_| candidate.to_owned())
    })
}

#[tokio::test]
async fn sessions_start_run_list_and_come_back_after_a_restart() {
    let mut w = World::new();
    let started = w
        .ask(
            "moonkale/agent/start",
            json!({"prompt": "Say hi", "permissionMode": "default"}),
        )
        .await;
    expect![[r#"Ok {"seq":1,"session":"S","state":"running"}"#]].assert_eq(&started);
    let subscribed = w.hub_sees("Subscribe").await;
    expect!["Subscribe(1, Session(\"S\"))"].assert_eq(&subscribed);
    let cli = w.cli().await;
    cli.say(json!({"type": "system", "subtype": "init", "session_id": "x"}));
    cli.say(json!({"type": "result", "subtype": "success", "is_error": false, "result": "hi"}));
    w.hub_sees(r#""state":"idle""#).await;

    let listed = w.ask("moonkale/agent/list", json!({})).await;
    let listed: Value = serde_json::from_str(listed.strip_prefix("Ok ").unwrap()).unwrap();
    let first = &listed["sessions"][0];
    expect![[r#"S Say hi idle default"#]].assert_eq(&format!(
        "{} {} {} {}",
        first["session"].as_str().unwrap(),
        first["title"].as_str().unwrap(),
        first["state"].as_str().unwrap(),
        first["permissionMode"].as_str().unwrap()
    ));

    // Requests the host refuses, each with what is wrong.
    let refused = [
        w.ask("moonkale/agent/rewind", json!({})).await,
        w.ask(
            "moonkale/agent/send",
            json!({"session": "nope", "prompt": "x"}),
        )
        .await,
        w.ask(
            "moonkale/agent/send",
            json!({"session": "00000000-0000-0000-0000-000000000001", "prompt": "x"}),
        )
        .await,
        w.ask(
            "moonkale/agent/start",
            json!({"model": "--dangerously-skip-permissions"}),
        )
        .await,
        w.ask(
            "moonkale/agent/answer",
            json!({"approval": "nope", "allow": true}),
        )
        .await,
        w.ask("moonkale/agent/start", json!({"permissionMode": "yolo"}))
            .await,
    ];
    expect![[r#"
        Err -32601 unknown method moonkale/agent/rewind
        Err -32602 "nope" is not a session id
        Err -32602 no session S in this workspace
        Err -32602 "--dangerously-skip-permissions" is not a model name
        Err -32602 "nope" is not an approval id (session/number)
        Err -32602 invalid params: unknown permission mode "yolo" (plan, default, acceptEdits or bypassPermissions) at line 1 column 25"#]]
    .assert_eq(&refused.join("\n"));

    // A restarted service finds the session in its transcript, idle, and
    // its events page by page.
    let dir = w.stop().await;
    let mut w = World::in_dir(dir);
    let listed = w.raw("moonkale/agent/list", json!({})).await.unwrap();
    assert_eq!(listed["sessions"][0]["title"], "Say hi", "{listed}");
    let id = listed["sessions"][0]["session"].clone();
    let page = w
        .raw(
            "moonkale/agent/events",
            json!({"session": id, "since": 0, "limit": 2}),
        )
        .await
        .unwrap();
    let kinds: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    expect![[r#"["session", "prompt"] next 2 idle"#]].assert_eq(&format!(
        "{kinds:?} next {} {}",
        page["next"],
        page["state"].as_str().unwrap()
    ));
}
