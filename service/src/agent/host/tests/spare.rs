//! The warm spare's specification: when it is started, with which argv,
//! who adopts it, what replaces it and when it stops. Time is paused, so
//! the idle limit and the delay before a follow-up spare pass at once.

use std::time::Duration;

use expect_test::expect;
use serde_json::json;
use tokio::sync::mpsc::error::TryRecvError;

use super::{DEADLINE, World};
use crate::agent::session::cli::script::{Launched, Output};
use crate::agent::{AgentCommand, SpareConfig};

const IDLE: Duration = Duration::from_secs(600);

fn spare_world() -> World {
    World::with_spare(
        tempfile::tempdir().unwrap(),
        SpareConfig {
            enabled: true,
            idle: IDLE,
            login_found: || true,
        },
    )
}

impl World {
    /// The user asks the agent something (here: a front end prepares its sessions): the
    /// workspace's agent is in use.
    async fn agent_was_used(&mut self) {
        self.raw("moonkale/agent/prepare", json!({})).await.unwrap();
    }

    async fn editors(&mut self, attached: usize) {
        let command = AgentCommand::Editors { attached };
        self.commands.send(command).await.unwrap();
    }

    /// The next CLI started, and its session id.
    async fn launched(&mut self) -> (Launched, String) {
        let cli = self.cli().await;
        let id = cli
            .args
            .iter()
            .find_map(|a| a.strip_prefix("--session-id="))
            .expect("a new session's CLI")
            .to_owned();
        (cli, id)
    }

    /// Nothing else was started, however long one waits.
    async fn launches_nothing(&mut self) {
        tokio::time::sleep(IDLE * 3).await;
        assert!(matches!(self.launches.try_recv(), Err(TryRecvError::Empty)));
    }
}

/// The flags that say what a CLI was started with, its id written `ID`.
fn flags(cli: &Launched, id: &str) -> String {
    cli.args
        .iter()
        .filter(|a| {
            ["--permission-mode", "--session-id", "--model", "--setting"]
                .iter()
                .any(|f| a.starts_with(f))
        })
        .map(|a| a.replace(id, "ID"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The next line the session wrote to the CLI, shortly.
async fn told(cli: &mut Launched) -> String {
    let line = tokio::time::timeout(DEADLINE, cli.lines.recv())
        .await
        .expect("a line for the CLI")
        .expect("the CLI runs");
    match line["type"].as_str() {
        Some("control_request") => format!("control_request {}", line["request"]["subtype"]),
        Some("user") => format!("user {}", line["message"]["content"]),
        _ => line.to_string(),
    }
}

/// The session stopped this CLI (its stdin closed), within the idle limit.
async fn stopped(cli: &mut Launched) {
    loop {
        let line = tokio::time::timeout(IDLE * 2, cli.lines.recv())
            .await
            .expect("the CLI is stopped");
        if line.is_none() {
            return;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_attached_editor_gets_a_spare_that_the_next_start_adopts() {
    let mut w = spare_world();
    w.agent_was_used().await;
    let (mut spare, id) = w.launched().await;
    expect!["--permission-mode=plan --session-id=ID"].assert_eq(&flags(&spare, &id));
    expect![[r#"control_request "initialize""#]].assert_eq(&told(&mut spare).await);
    // The spare started when the agent was used, before the editor came:
    // the editor brings the spare's CLI the editor tools.
    w.editors(1).await;
    expect![[r#"control_request "mcp_set_servers""#]].assert_eq(&told(&mut spare).await);
    let shown = w.hub_sees("AgentSpare(Some").await;
    expect!["AgentSpare(Some(0))"].assert_eq(&shown);
    // Not listed, nothing on disk, until adopted.
    let listed = w.raw("moonkale/agent/list", json!({})).await.unwrap();
    expect![[r#"{"sessions":[]}"#]].assert_eq(&listed.to_string());

    let started = w
        .raw("moonkale/agent/start", json!({"prompt": "Say hi"}))
        .await
        .unwrap();
    assert_eq!(started["session"], id.as_str(), "the spare is the session");
    // The prompt goes to the spare's CLI: no start of its own.
    expect![[r#"user "Say hi""#]].assert_eq(&told(&mut spare).await);
    spare.say(json!({"type": "system", "subtype": "init", "session_id": id}));
    spare.say(json!({"type": "result", "subtype": "success", "is_error": false, "result": "hi"}));
    w.hub_sees(r#""state":"idle""#).await;
    let listed = w.raw("moonkale/agent/list", json!({})).await.unwrap();
    assert_eq!(listed["sessions"][0]["session"], id.as_str(), "{listed}");
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
    let page = w
        .raw("moonkale/agent/events", json!({"session": id, "since": 0}))
        .await
        .unwrap();
    let kinds: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    expect![[r#"["session", "prompt", "state", "cli", "cli", "state"]"#]]
        .assert_eq(&format!("{kinds:?}"));
    let stored = w.dir.path().join("chats").join(format!("{id}.jsonl"));
    assert!(stored.exists(), "the adopted spare keeps a transcript");

    // A new spare follows, with a session id of its own.
    let (next, next_id) = w.launched().await;
    assert_ne!(next_id, id);
    expect!["--permission-mode=plan --session-id=ID"].assert_eq(&flags(&next, &next_id));
    w.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_start_with_other_settings_starts_cold_and_the_spare_follows_them() {
    let mut w = spare_world();
    w.agent_was_used().await;
    w.editors(1).await;
    let (mut old, _) = w.launched().await;
    let started = w
        .raw(
            "moonkale/agent/start",
            json!({"prompt": "Edit it", "permissionMode": "acceptEdits", "model": "sonnet"}),
        )
        .await
        .unwrap();
    let session = started["session"].as_str().unwrap().to_owned();
    stopped(&mut old).await;
    // Two starts: the session's own CLI (cold) and a spare of its settings.
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (cli, id) = w.launched().await;
        let who = if id == session { "session" } else { "spare" };
        seen.push(format!("{who}: {}", flags(&cli, &id)));
    }
    seen.sort();
    expect![[r#"
        session: --permission-mode=acceptEdits --session-id=ID --model=sonnet
        spare: --permission-mode=acceptEdits --session-id=ID --model=sonnet"#]]
    .assert_eq(&seen.join("\n"));
    w.stop().await;
}

/// An agent panel opening says its sessions start in `default` mode: the
/// plan-mode spare is replaced by a `default` one at once, which the
/// panel's first session adopts.
#[tokio::test(start_paused = true)]
async fn a_front_end_that_prepares_gets_a_spare_of_its_settings() {
    let mut w = spare_world();
    w.agent_was_used().await;
    w.editors(1).await;
    let (mut plan, plan_id) = w.launched().await;
    expect!["--permission-mode=plan --session-id=ID"].assert_eq(&flags(&plan, &plan_id));
    let prepared = w
        .raw(
            "moonkale/agent/prepare",
            json!({"permissionMode": "default"}),
        )
        .await
        .unwrap();
    assert_eq!(prepared, json!({}));
    stopped(&mut plan).await;
    let (mut ready, id) = w.launched().await;
    expect!["--permission-mode=default --session-id=ID"].assert_eq(&flags(&ready, &id));
    expect![[r#"control_request "initialize""#]].assert_eq(&told(&mut ready).await);
    let started = w
        .raw("moonkale/agent/start", json!({"permissionMode": "default"}))
        .await
        .unwrap();
    assert_eq!(
        started["session"],
        id.as_str(),
        "the prepared spare is taken"
    );
    let refused = w
        .raw("moonkale/agent/prepare", json!({"model": "--evil"}))
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32602);
    w.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_trust_change_replaces_the_spare() {
    let mut w = spare_world();
    w.agent_was_used().await;
    w.editors(1).await;
    let (mut trusted, id) = w.launched().await;
    expect!["--permission-mode=plan --session-id=ID"].assert_eq(&flags(&trusted, &id));
    let answer = w
        .raw("moonkale/agent/trust", json!({"trusted": false}))
        .await
        .unwrap();
    assert_eq!(answer["trusted"], false);
    stopped(&mut trusted).await;
    let (untrusted, id) = w.launched().await;
    expect!["--permission-mode=plan --session-id=ID --setting-sources=user"]
        .assert_eq(&flags(&untrusted, &id));
    w.stop().await;
}

#[tokio::test(start_paused = true)]
async fn no_spare_outlives_the_idle_limit_without_an_editor() {
    let mut w = spare_world();
    // The agent used from the command line, no editor: a spare for a while.
    w.raw("moonkale/agent/prepare", json!({})).await.unwrap();
    let (mut spare, _) = w.launched().await;
    let started = tokio::time::Instant::now();
    stopped(&mut spare).await;
    assert!(started.elapsed() >= IDLE - Duration::from_secs(1));
    w.hub_sees("AgentSpare(None)").await;

    // An attached editor keeps one however long it stays; its leaving
    // counts as a use.
    w.editors(1).await;
    let (mut spare, _) = w.launched().await;
    told(&mut spare).await; // initialize
    tokio::time::sleep(IDLE * 3).await;
    assert!(matches!(spare.lines.try_recv(), Err(TryRecvError::Empty)));
    w.editors(0).await;
    let left = tokio::time::Instant::now();
    stopped(&mut spare).await;
    assert!(left.elapsed() >= IDLE - Duration::from_secs(1));
    w.launches_nothing().await;
    w.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_spare_that_keeps_dying_is_replaced_a_bounded_number_of_times() {
    let mut w = spare_world();
    w.agent_was_used().await;
    w.editors(1).await;
    for _ in 0..super::super::spare::MAX_SPARE_FAILURES {
        let (cli, _) = w.launched().await;
        let _ = cli.output.send(Output::Exit {
            stderr: "crashed".into(),
        });
    }
    w.launches_nothing().await;
    // A start still works, cold.
    let started = w
        .raw("moonkale/agent/start", json!({"prompt": "hi"}))
        .await
        .unwrap();
    let (_, id) = w.launched().await;
    assert_eq!(started["session"], id.as_str());
    w.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_spare_is_off_with_its_setting() {
    let mut w = World::new();
    w.editors(1).await;
    w.raw("moonkale/agent/prepare", json!({})).await.unwrap();
    w.launches_nothing().await;
    // A start launches its own CLI at its prompt, and nothing after it (a
    // host that kept waking up would keep paused time from passing here).
    w.raw("moonkale/agent/start", json!({"prompt": "hi"}))
        .await
        .unwrap();
    w.launched().await;
    w.launches_nothing().await;
    w.stop().await;
}

/// Opening a file in an editor starts no `claude` in a workspace whose
/// agent was never used; the first use of the agent does, and so does a
/// workspace with sessions from before (in the user's state).
#[tokio::test(start_paused = true)]
async fn an_editor_alone_starts_no_spare_until_the_agent_is_used() {
    let mut w = spare_world();
    w.editors(1).await;
    w.launches_nothing().await;
    w.agent_was_used().await;
    let (spare, id) = w.launched().await;
    expect!["--permission-mode=plan --session-id=ID"].assert_eq(&flags(&spare, &id));
    w.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let chats = dir.path().join("chats");
    std::fs::create_dir_all(&chats).unwrap();
    std::fs::write(chats.join(format!("{}.jsonl", uuid::Uuid::new_v4())), "").unwrap();
    let mut w = World::with_spare(
        dir,
        SpareConfig {
            enabled: true,
            idle: IDLE,
            login_found: || true,
        },
    );
    w.editors(1).await;
    w.launched().await;
    w.stop().await;
}

/// Without a Claude Code login, no spare starts, however much the agent
/// is used: its CLI would only write its files and fail.
#[tokio::test(start_paused = true)]
async fn no_login_no_spare() {
    let mut w = World::with_spare(
        tempfile::tempdir().unwrap(),
        SpareConfig {
            enabled: true,
            idle: IDLE,
            login_found: || false,
        },
    );
    w.agent_was_used().await;
    w.editors(1).await;
    w.launches_nothing().await;
    w.stop().await;
}
