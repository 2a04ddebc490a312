//! The API fails (401, 529, a broken stream): the turn fails with a clear
//! error, and the session can go on.

use std::time::{Duration, Instant};

use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::world::World;
use serde_json::json;

/// Every main request gets `reply`; the turn must end `failed` within
/// 20 s with an `error` naming one of `expect`. Returns the world and the
/// session.
async fn api_failure(reply: Reply, expect: &[&str]) -> (World, String) {
    let mut w = World::agent(Script::new().default_reply(reply)).await;
    let started = Instant::now();
    let session =
        w.ed.start_session(json!({"prompt": "this will fail"}))
            .await;
    let seq = w.ed.last_prompt_seq(&session).await;
    let end = w.ed.turn_end(&session, seq, Duration::from_secs(20)).await;
    if end["data"]["state"] != "failed" {
        return w
            .ed
            .fail_with_events(&session, &format!("the turn ended {}", end["data"]))
            .await;
    }
    let error = end["data"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        expect.iter().any(|e| error.contains(e)),
        "the error {error:?} names none of {expect:?}"
    );
    let page = w.ed.events_page(&session, 0, 1000).await;
    assert_eq!(page["state"], "failed");
    assert_eq!(page["error"], error.as_str(), "the events' error");
    eprintln!(
        "failed after {:?}: {error}\nrequests:\n{}",
        started.elapsed(),
        w.fake.summary()
    );
    (w, session)
}

/// 401 (authentication_error): `failed`, the error says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_401_fails_the_turn_with_a_clear_error() {
    api_failure(
        Reply::error(401, "authentication_error", "invalid x-api-key"),
        &["401", "Invalid API key", "authenticat"],
    )
    .await;
}

/// 529 (overloaded) on every retry: `failed`, the error says so; the
/// session may still be continued once the API is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_529_fails_the_turn_and_the_session_can_go_on() {
    let (mut w, session) = api_failure(
        Reply::error(529, "overloaded_error", "Overloaded"),
        &["529", "Overloaded", "overloaded"],
    )
    .await;
    w.fake
        .set_script(Script::new().default_reply(Reply::text("BACK_AGAIN")));
    let seq = w.ed.send_prompt(&session, "try again").await;
    w.ed.turn_idle(&session, seq).await;
    let page = w.ed.events_page(&session, 0, 1000).await;
    assert_eq!(page["state"], "idle");
    assert!(page.get("error").is_none_or(|e| e.is_null()), "{page}");
}

/// A stream cut mid-message, and the CLI's non-streaming fallback failing
/// with 500: `failed` with an error naming the 500, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_stream_fails_the_turn_with_a_clear_error() {
    let (w, _) = api_failure(
        Reply::broken_stream("CUT OFF IN THE MIDDLE OF THIS"),
        &["500"],
    )
    .await;
    // Both halves happened: a stream that broke, a fallback that failed.
    let main = w.fake.main_requests();
    assert!(
        main.iter().any(|r| r.body["stream"] == true && !r.answered)
            && main.iter().any(|r| r.body["stream"] != true),
        "the fake did not see a broken stream and a fallback:\n{}",
        w.fake.summary()
    );
}
