//! The warm spare with the real CLI: while an editor is attached, one
//! `claude` runs started ahead (shown in `status`), the next new session
//! adopts it and streams its reply, another follows; a start in another
//! mode or a trust change replaces it and the next session runs with the
//! new settings; the service's death (SIGKILL) takes it along; and no
//! spare outlives the idle limit once the editor is gone; and a stranger's
//! repository runs nothing when an editor attaching starts the spare.
//!
//! The harness turns the spare off for every other test
//! (`MOONKALE_WARM_SPARE=0`); these turn it on.

use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::world::World;
use moonkale_tests::{Client, STEP, TIMEOUT, poll_until};
use serde_json::{Value, json};

use crate::{first_piece, is_text_of};

/// A world whose service keeps a warm spare (idle limit: `idle_ms`), in a
/// workspace whose agent the user has used (here: a front end prepared its sessions):
/// an editor alone starts no `claude`.
async fn spare_world(script: Script, idle_ms: u64) -> World {
    let mut w = World::builder()
        .agent()
        .script(script)
        .env("MOONKALE_WARM_SPARE", "1")
        .env("MOONKALE_SPARE_IDLE_MS", idle_ms.to_string())
        .start()
        .await;
    w.ed.call("moonkale/agent/prepare", json!({})).await;
    w
}

/// The spare `status` shows once it satisfies `pred` (and has a pid).
async fn spare_where(ed: &mut Client, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let found = poll_until(TIMEOUT, async || {
        last = ed.call("moonkale/status", Value::Null).await;
        let spare = &last["agentSpare"];
        (spare["pid"].as_u64().is_some_and(|p| p > 0) && pred(spare)).then(|| spare.clone())
    })
    .await;
    found.unwrap_or_else(|| panic!("no warm spare {what} in status: {last:#}"))
}

fn pid_of(spare: &Value) -> i32 {
    spare["pid"].as_i64().expect("a pid") as i32
}

/// The process's argv, one string.
fn cmdline(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .replace('\0', " ")
}

/// The session id a CLI was started with (`--session-id=`).
fn session_of(pid: i32) -> String {
    let argv = cmdline(pid);
    argv.split(' ')
        .find_map(|a| a.strip_prefix("--session-id="))
        .unwrap_or_else(|| panic!("no --session-id in {argv:?}"))
        .to_owned()
}

/// Process `pid` is gone (or a zombie nobody reaps: it runs no more).
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

async fn wait_gone(pid: i32, what: &str) {
    let gone = poll_until(TIMEOUT, async || is_gone(pid).then_some(())).await;
    assert!(gone.is_some(), "{what} (pid {pid}) still runs");
}

/// Starts a session with `prompt` (`extra` params), follows its first turn
/// to its end; returns the session, checking the streamed reply.
async fn first_turn(w: &mut World, prompt: &str, reply: &str, extra: Value) -> String {
    let mut params = json!({"prompt": prompt});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let session = w.ed.start_session(params).await;
    let first =
        w.ed.take("the first moonkale/agent/text", STEP, |m| {
            is_text_of(m, &session)
        })
        .await;
    assert_eq!(first["params"]["text"], first_piece(reply).as_str());
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(w.ed.streamed_text(&session), reply, "what the editor saw");
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_adopts_the_warm_spare_and_another_follows() {
    let reply = "WARM_SPARE_REPLY streamed from the spare";
    let mut w = spare_world(
        Script::new().on_prompt("hello spare", Reply::text(reply)),
        600_000,
    )
    .await;
    let spare = spare_where(&mut w.ed, "after the editor attached", |_| true).await;
    let pid = pid_of(&spare);
    assert_eq!(spare["permissionMode"], "plan", "agent/start's default");
    assert!(spare["rssBytes"].as_u64().is_some_and(|b| b > 0), "{spare}");
    let argv = cmdline(pid);
    assert!(argv.contains("--permission-mode=plan"), "{argv}");
    assert!(argv.contains("--setting-sources=user"), "untrusted: {argv}");
    let spare_session = session_of(pid);

    let session = first_turn(&mut w, "hello spare", reply, json!({})).await;
    assert_eq!(session, spare_session, "the session is the spare's");
    let req = w.fake.wait_prompt("hello spare", STEP).await;
    assert_eq!(
        req.header("x-claude-code-session-id"),
        Some(session.as_str())
    );
    let log = w.service_log();
    let starts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("started claude") && l.contains(&session))
        .collect();
    assert_eq!(starts.len(), 1, "one CLI for the session: {starts:#?}");
    assert!(starts[0].contains("spare=true"), "{}", starts[0]);
    let listed = w.ed.call("moonkale/agent/list", Value::Null).await;
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    // Another spare, a process of its own, for the next session.
    let next = spare_where(&mut w.ed, "after the adoption", |s| {
        s["pid"].as_i64() != Some(pid.into())
    })
    .await;
    assert_ne!(session_of(pid_of(&next)), session);
    assert!(!is_gone(pid), "the adopted CLI runs on as the session's");

    // What a person sees with a spare running (its status once panicked
    // on the absent `jailed` key): both CLIs, in words.
    let ws = w.sb.workspace.display().to_string();
    let out = w
        .command(&["status", "--workspace", &ws])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("warm spare claude: pid {}", pid_of(&next)))
            && said.contains(&format!("pid {pid}: session {session} (idle)"))
            && said.contains("(warm spare)"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_mode_or_a_trust_change_replaces_the_spare() {
    let mut w = spare_world(
        Script::new()
            .on_prompt(
                "cold in accept edits",
                Reply::text("COLD_ACCEPT_EDITS_REPLY"),
            )
            .on_prompt("warm and trusted", Reply::text("WARM_TRUSTED_REPLY")),
        600_000,
    )
    .await;
    let plan =
        pid_of(&spare_where(&mut w.ed, "in plan mode", |s| s["permissionMode"] == "plan").await);

    let plan_session = session_of(plan);

    // Another mode: that session starts cold; the spare follows its mode.
    let mode = json!({"permissionMode": "acceptEdits"});
    let cold = first_turn(
        &mut w,
        "cold in accept edits",
        "COLD_ACCEPT_EDITS_REPLY",
        mode.clone(),
    )
    .await;
    assert_ne!(cold, plan_session);
    wait_gone(plan, "the plan-mode spare").await;
    let accept = spare_where(&mut w.ed, "in acceptEdits", |s| {
        s["permissionMode"] == "acceptEdits"
    })
    .await;
    let accept = pid_of(&accept);
    assert!(cmdline(accept).contains("--permission-mode=acceptEdits"));

    // The user trusts the workspace: a spare with the repository's settings.
    let trusted =
        w.ed.call("moonkale/agent/trust", json!({"trusted": true}))
            .await;
    assert_eq!(trusted["trusted"], true, "{trusted}");
    wait_gone(accept, "the untrusted spare").await;
    let spare = spare_where(&mut w.ed, "trusted", |s| s["trusted"] == true).await;
    let pid = pid_of(&spare);
    let argv = cmdline(pid);
    assert!(!argv.contains("--setting-sources"), "trusted: {argv}");
    assert!(argv.contains("--permission-mode=acceptEdits"), "{argv}");

    // The next session runs in it, with those settings.
    let warm = first_turn(&mut w, "warm and trusted", "WARM_TRUSTED_REPLY", mode).await;
    assert_eq!(warm, session_of(pid));
    let req = w.fake.wait_prompt("warm and trusted", STEP).await;
    assert_eq!(req.header("x-claude-code-session-id"), Some(warm.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_service_kills_the_spare() {
    let mut w = spare_world(Script::new(), 600_000).await;
    let pid = pid_of(&spare_where(&mut w.ed, "before the kill", |_| true).await);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.svc().pid(), libc::SIGKILL) };
    let _ = w.svc_mut().child.wait().await;
    wait_gone(pid, "the spare after the service's SIGKILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spare_outlives_the_idle_limit_without_an_editor() {
    let mut w = spare_world(Script::new(), 1500).await;
    let pid = pid_of(&spare_where(&mut w.ed, "while the editor is attached", |_| true).await);
    // The editor quits; nothing uses the agent any more.
    w.ed.call("shutdown", Value::Null).await;
    w.ed.notify("exit", Value::Null).await;
    wait_gone(pid, "the spare past the idle limit").await;
    let status = w.sb.status().await;
    assert!(status.get("agentSpare").is_none(), "{status:#}");
    assert!(
        moonkale_tests::agent::processes_in(&w.sb.workspace).is_empty(),
        "a CLI still runs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_claude_there_is_no_spare_and_no_error() {
    let mut w = World::builder()
        .agent()
        .claude(missing_claude())
        .env("MOONKALE_WARM_SPARE", "1")
        .start()
        .await;
    w.ed.call("moonkale/agent/prepare", json!({})).await;
    // Each try is logged; after the last, none is made.
    let tries = poll_until(TIMEOUT, async || {
        let log = w.service_log();
        let n = log.matches("no warm spare claude").count();
        (n >= 3 && log.contains("ended on its own (3 of 3")).then_some(n)
    })
    .await;
    assert_eq!(tries, Some(3), "{}", w.service_log_tail(30));
    let status = w.ed.call("moonkale/status", Value::Null).await;
    assert!(status.get("agentSpare").is_none(), "{status:#}");
    w.ed.barrier().await;
    assert!(
        w.ed.all(|m| m["method"] == "window/showMessage").is_empty(),
        "an editor was told: {}",
        w.ed.recent(10)
    );
}

/// A `claude` that is not there.
fn missing_claude() -> std::path::PathBuf {
    std::path::PathBuf::from("/nonexistent/moonkale-test/claude")
}

/// A user clones a stranger's repository and opens it: the spare starts
/// because an editor attached (in a workspace whose agent was used), with
/// no decision of the user's, so nothing
/// the repository ships may run. Its `.claude/settings.json` hooks, its
/// `.mcp.json` server and a `core.fsmonitor` command in `.git/config`
/// (which a plain `git status` runs) all touch marker files outside the
/// workspace. The spare comes up under `--setting-sources=user`, the user
/// asks a question in a new session (which adopts it), the answer streams,
/// and no marker exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_repository_runs_nothing_when_the_spare_starts() {
    let traps = moonkale_tests::agent::Traps::default();
    let dir = traps.markers.path();
    let touch = |what: &str| traps.touch(what);
    let sb = moonkale_tests::Sandbox::new();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&sb.workspace)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    let monitor = dir.join("fsmonitor.sh");
    std::fs::write(
        &monitor,
        format!("#!/bin/sh\n{}\nexit 1\n", touch("fsmonitor")),
    )
    .unwrap();
    std::fs::set_permissions(
        &monitor,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    git(&["config", "core.fsmonitor", &monitor.display().to_string()]);

    let reply = "STRANGER_REPLY from a spare that ran nothing";
    let mut w = World::builder()
        .agent()
        .script(Script::new().on_prompt("what is this repository", Reply::text(reply)))
        .env("MOONKALE_WARM_SPARE", "1")
        .file(".claude/settings.json", traps.settings().to_string())
        .file(".mcp.json", traps.mcp().to_string())
        .in_sandbox(sb)
        .start()
        .await;
    // The user has used the agent here (the spare is started ahead of
    // their next session, still with no decision about this repository).
    w.ed.call("moonkale/agent/prepare", json!({})).await;
    let spare = spare_where(&mut w.ed, "in the stranger's repository", |_| true).await;
    let argv = cmdline(pid_of(&spare));
    assert!(argv.contains("--setting-sources=user"), "untrusted: {argv}");
    assert_eq!(spare["trusted"], false, "{spare}");

    first_turn(&mut w, "what is this repository", reply, json!({})).await;
    let planted = traps.sprung();
    assert!(planted.is_empty(), "the repository ran {planted:?}");
    // The trap is armed: a plain `git status` of the user's runs it.
    let _ = std::process::Command::new("git")
        .arg("status")
        .current_dir(&w.sb.workspace)
        .output();
    assert!(dir.join("marker.fsmonitor").exists(), "the fsmonitor trap");
}

/// Seen once in six runs (issue 25): `agent send --permission-mode
/// acceptEdits` returned within a second without the model's reply. It
/// ended on the first `state` event of the session, whatever came before
/// its prompt; now only the prompt's turn ends it. Two sends in a row, the
/// second adopting the spare the first one's mode predicted: each prints
/// its own reply and the model is asked each prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_send_in_accept_edits_waits_for_its_own_turn() {
    let mut w = spare_world(
        Script::new()
            .on_prompt("first send", Reply::text("FIRST_SEND_REPLY"))
            .on_prompt("second send", Reply::text("SECOND_SEND_REPLY")),
        600_000,
    )
    .await;
    spare_where(&mut w.ed, "after the editor attached", |_| true).await;
    for (prompt, reply) in [
        ("first send", "FIRST_SEND_REPLY"),
        ("second send", "SECOND_SEND_REPLY"),
    ] {
        let ws = w.sb.workspace.display().to_string();
        let out = w
            .command(&[
                "agent",
                "send",
                "--workspace",
                &ws,
                "--permission-mode",
                "acceptEdits",
                prompt,
            ])
            .output()
            .await
            .expect("run agent send");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(reply),
            "{prompt}: {:?}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        w.fake.wait_prompt(prompt, STEP).await;
        if prompt == "first send" {
            // The next start's settings are predicted: its spare is made.
            spare_where(&mut w.ed, "in acceptEdits", |s| {
                s["permissionMode"] == "acceptEdits"
            })
            .await;
        }
    }
}

/// Many sessions at once (issue 25): the next spare's CLI start (a core's
/// work for half a second) waits while a session's turn runs, so it does
/// not compete with the sessions' own CLIs; once the turn is over it comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_spare_waits_while_a_turn_runs() {
    let gate = moonkale_tests::fakeapi::Gate::new();
    let mut w = spare_world(
        Script::new().on_prompt("a long turn", Reply::text("LONG_TURN_DONE").gated(&gate, 1)),
        600_000,
    )
    .await;
    let spare = spare_where(&mut w.ed, "after the editor attached", |_| true).await;
    let session = w.ed.start_session(json!({"prompt": "a long turn"})).await;
    w.fake.wait_prompt("a long turn", STEP).await;
    // Well past the one second a spare waits after a start: none while the
    // turn runs.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(2_500);
    while tokio::time::Instant::now() < deadline {
        let status = w.ed.call("moonkale/status", Value::Null).await;
        assert!(
            status["agentSpare"].is_null(),
            "a spare started during the turn: {}",
            status["agentSpare"]
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    gate.open();
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    let next = spare_where(&mut w.ed, "after the turn", |s| {
        s["pid"].as_i64() != spare["pid"].as_i64()
    })
    .await;
    assert!(pid_of(&next) > 0);
}
