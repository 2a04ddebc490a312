//! What a turn shows while it runs: partial text to the subscribers, `$/progress`
//! to the editors that take it, and subscriptions to every session.

use moonkale_tests::STEP;
use moonkale_tests::agent::{assistant_text, describe_events, is_cli};
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use moonkale_tests::lsp::plain_caps;
use moonkale_tests::world::World;
use serde_json::{Value, json};

use crate::{is_event_of, is_text_of};

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

/// Editors that advertise `window.workDoneProgress` see the turn as
/// `$/progress` on token `moonkale-agent-<session>` (created first):
/// `begin` titled "Claude", a `report` naming the tool in use, `end`.
/// Editors that do not advertise it get none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_shows_in_editors_that_take_it() {
    let mut w = World::builder()
        .agent()
        .file("read-me.txt", "READ_ME_CONTENT\n")
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
