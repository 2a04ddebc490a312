//! What a user of an ACP panel does with the real CLI: a prompt whose
//! answer streams in, a write asked and allowed or rejected, a cancel, plan
//! mode then another mode, a second client joining a running turn, a
//! client killed mid-turn, and the same question answered from an editor.

use moonkale_tests::STEP;
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use moonkale_tests::world::World;
use serde_json::json;

use crate::acp_agent;

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
    let prompt = acp
        .request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "stream please"}]}),
        )
        .await;
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
    let mut garbage = Vec::new();
    while let Ok(line) = acp.garbage.try_recv() {
        garbage.push(line);
    }
    assert!(garbage.is_empty(), "not ACP on stdout: {garbage:?}");
    assert_eq!(acp.close().await, Some(0));
}
