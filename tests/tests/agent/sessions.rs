//! Sessions: bad requests, a turn nobody watches, interrupts, queued
//! prompts, byte-exact prompts, models, and resuming after a restart.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use moonkale_tests::agent::{assistant_text, describe_events, is_cli, processes_in};
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use moonkale_tests::lsp::plain_caps;
use moonkale_tests::world::World;
use moonkale_tests::{STEP, short};
use serde_json::{Value, json};

use crate::is_text_of;

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

/// The sessions listed with a running CLI (`cli` in `agent/list`).
async fn sessions_with_a_cli(w: &mut World) -> Vec<String> {
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let mut live: Vec<String> = list["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["cli"]["pid"].as_u64().is_some())
        .filter_map(|s| s["session"].as_str().map(str::to_owned))
        .collect();
    live.sort();
    live
}

/// Waits until exactly `expected` sessions hold a running CLI.
async fn wait_live_clis(w: &mut World, mut expected: Vec<String>, what: &str) {
    expected.sort();
    let mut seen = Vec::new();
    let matched = moonkale_tests::poll_until(moonkale_tests::TIMEOUT, async || {
        seen = sessions_with_a_cli(w).await;
        (seen == expected).then_some(())
    })
    .await;
    assert!(
        matched.is_some(),
        "{what}: running CLIs {seen:?}, wanted {expected:?}"
    );
}

/// With `MOONKALE_MAX_LIVE_SESSIONS=2`, a third session's prompt stops the
/// least recently used idle session's CLI; that session stays listed, and
/// its next prompt resumes its conversation in a new CLI (the model gets
/// its history), stopping the next least recently used one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surplus_clis_stop_least_recently_used_first_and_resume_with_history() {
    let mut w = World::builder()
        .agent()
        .script(
            Script::new()
                .on_prompt("letter A", Reply::text("KEPT_A"))
                .on_prompt("letter B", Reply::text("KEPT_B"))
                .on_prompt("letter C", Reply::text("KEPT_C"))
                .on_prompt("which letter", Reply::text("IT_WAS_A")),
        )
        .env("MOONKALE_MAX_LIVE_SESSIONS", "2")
        .start()
        .await;
    let (a, _) = w.ed.run_first_turn("remember letter A", json!({})).await;
    let (b, _) = w.ed.run_first_turn("remember letter B", json!({})).await;
    wait_live_clis(&mut w, vec![a.clone(), b.clone()], "two sessions").await;
    let (c, _) = w.ed.run_first_turn("remember letter C", json!({})).await;
    wait_live_clis(
        &mut w,
        vec![b.clone(), c.clone()],
        "A was used least recently",
    )
    .await;
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    assert!(
        list["sessions"].as_array().is_some_and(|s| s.len() == 3),
        "every session stays listed: {list}"
    );

    let seq = w.ed.send_prompt(&a, "which letter did I give you?").await;
    w.ed.turn_idle(&a, seq).await;
    let req = w.fake.wait_prompt("which letter", STEP).await;
    assert!(
        req.all_message_text().contains("remember letter A") && req.body_text().contains("KEPT_A"),
        "A's conversation was not resumed: {}",
        short(&req.all_message_text(), 2000)
    );
    wait_live_clis(&mut w, vec![a, c], "B was used least recently").await;
}

/// With `MOONKALE_SESSION_IDLE_MS`, a session's CLI with nothing to do
/// stops; `agent list` says so, and the next prompt resumes the
/// conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sessions_cli_stops_and_the_next_prompt_resumes_it() {
    let mut w = World::builder()
        .agent()
        .script(
            Script::new()
                .on_prompt("number 7", Reply::text("KEPT_SEVEN"))
                .on_prompt("which number", Reply::text("IT_WAS_7")),
        )
        .env("MOONKALE_SESSION_IDLE_MS", "300")
        .start()
        .await;
    let (session, _) = w.ed.run_first_turn("remember number 7", json!({})).await;
    wait_live_clis(&mut w, Vec::new(), "the idle CLI stopped").await;
    let out = w
        .command(&[
            "agent",
            "list",
            "--workspace",
            &w.sb.workspace.display().to_string(),
        ])
        .output()
        .await
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains(&session) && listed.contains("no claude running"),
        "{listed}"
    );
    let seq = w.ed.send_prompt(&session, "which number was it?").await;
    w.ed.turn_idle(&session, seq).await;
    let req = w.fake.wait_prompt("which number", STEP).await;
    assert!(
        req.all_message_text().contains("remember number 7"),
        "not resumed: {}",
        short(&req.all_message_text(), 2000)
    );
}

/// A session a person ran with a plain `claude -p` in the workspace
/// (Claude Code's own, not the service's) is listed with the hosted ones,
/// marked as started outside; its conversation reads as events; while a
/// running `claude --resume` holds it, a prompt is refused in one
/// sentence; once that CLI is gone, a prompt continues it here with its
/// history (the model gets the earlier turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_started_outside_is_listed_read_and_continued() {
    use moonkale_tests::claude_cli::{Claude, ClaudeConfig, claude_bin};
    let mut w = World::agent(
        Script::new()
            .on_prompt("remember 42", Reply::text("REMEMBERED_OUTSIDE"))
            .on_prompt("which number", Reply::text("IT_WAS_42_HERE")),
    )
    .await;
    let config = ClaudeConfig::new(&w.sb.home, &w.sb.workspace, w.fake.port);
    let out = tokio::process::Command::new(claude_bin())
        .args(["-p", "please remember 42 for me"])
        .current_dir(&w.sb.workspace)
        .env_clear()
        .envs(config.environment())
        .output()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("REMEMBERED_OUTSIDE"),
        "claude -p: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let outside = list["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["outside"] == true))
        .unwrap_or_else(|| panic!("no session started outside: {list}"))
        .clone();
    assert!(
        outside["title"]
            .as_str()
            .is_some_and(|t| t.contains("please remember 42")),
        "{outside}"
    );
    let session = outside["session"].as_str().unwrap().to_owned();
    let (events, page) = w.ed.all_events(&session, 1000).await;
    let all = describe_events(&json!({"events": events, "state": page["state"]}));
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "prompt" && e["data"]["text"] == "please remember 42 for me")
            && all.contains("REMEMBERED_OUTSIDE"),
        "{all}"
    );

    let mut holder = Claude::spawn(config.arg("--resume").arg(&session));
    holder.wait_ready(STEP).await;
    let r =
        w.ed.request(
            "moonkale/agent/send",
            json!({"session": session, "prompt": "which number was it?"}),
        )
        .await;
    let refused = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        refused.contains(&format!(
            "session {session} is open in a running Claude Code"
        )),
        "{r}"
    );
    holder.kill();
    let pid = holder.pid();
    moonkale_tests::wait_until("the holding claude to end", async || {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    })
    .await;

    let seq = w.ed.send_prompt(&session, "which number was it?").await;
    w.ed.turn_idle(&session, seq).await;
    let req = w.fake.wait_prompt("which number", STEP).await;
    assert!(
        req.all_message_text().contains("please remember 42 for me"),
        "the earlier turn is not in the continued conversation: {}",
        short(&req.all_message_text(), 2000)
    );
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let listed: Vec<&Value> = list["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["session"] == session.as_str())
        .collect();
    assert!(
        listed.len() == 1 && listed[0]["outside"].is_null(),
        "continued, it is a hosted session: {list}"
    );

    // A hosted session deleted is gone, though its CLI's own transcript
    // stays in Claude Code's folder: it was never started outside.
    let (hosted, _) = w.ed.run_first_turn("remember 42 again", json!({})).await;
    w.ed.call("moonkale/agent/delete", json!({"session": hosted}))
        .await;
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    assert!(
        list["sessions"]
            .as_array()
            .is_some_and(|s| s.iter().all(|s| s["session"] != hosted.as_str())),
        "{list}"
    );
}

/// A transcript planted in Claude Code's folder for this workspace is
/// hostile input: its escapes and bidi overrides are printed inert by
/// `agent show`; one that is a symlink (to a file elsewhere) or a FIFO is
/// neither listed nor read, and nothing blocks on the FIFO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_outside_transcripts_are_inert_or_refused() {
    let mut w = World::agent(Script::new()).await;
    let slug: String =
        w.sb.workspace
            .display()
            .to_string()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
    let dir = w.sb.home.join(".claude/projects").join(slug);
    std::fs::create_dir_all(&dir).unwrap();
    let ws = w.sb.workspace.display().to_string();
    let record = |uuid: &str, parent: Value, kind: &str, content: &str| {
        json!({"type": kind, "uuid": uuid, "parentUuid": parent, "cwd": ws, "sessionId": "x",
               "entrypoint": "cli", "timestamp": "2026-12-01T10:00:00Z",
               "message": {"role": kind, "content": content}})
        .to_string()
    };
    let planted = "11111111-2222-4333-8444-000000000001";
    let text = [
        record(
            "a",
            Value::Null,
            "user",
            "clipboard \u{1b}]52;c;ZXZpbA==\u{7} and \u{202e}txt.exe",
        ),
        record("b", json!("a"), "assistant", "reply \u{1b}[2J cleared?"),
    ]
    .join("\n");
    std::fs::write(dir.join(format!("{planted}.jsonl")), text + "\n").unwrap();
    let elsewhere = w.sb.root.join("elsewhere.jsonl");
    std::fs::write(
        &elsewhere,
        record("c", Value::Null, "user", "FROM_A_SYMLINK"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        &elsewhere,
        dir.join("11111111-2222-4333-8444-000000000002.jsonl"),
    )
    .unwrap();
    let fifo = dir.join("11111111-2222-4333-8444-000000000003.jsonl");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);

    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let listed: Vec<&str> = list["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["session"].as_str())
        .collect();
    assert_eq!(listed, [planted], "{list}");
    let out = w
        .command(&["agent", "show", planted, "--workspace", &ws])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{202e}'),
        "a control reached the terminal: {shown:?}"
    );
    assert!(
        shown.contains("^[]52;c;ZXZpbA==") && shown.contains("<U+202E>"),
        "{shown}"
    );
}
