//! The CLI's process: one that cannot start, exits mid-turn, writes garbage
//! or floods its stderr (a scripted stand-in), and the environment it runs
//! with.

use std::path::PathBuf;

use moonkale_tests::STEP;
use moonkale_tests::agent::{assistant_text, describe_events, is_cli, stand_in, stand_in_runs};
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use moonkale_tests::world::World;
use serde_json::json;

use crate::is_text_of;

async fn stand_in_world(mode: &str) -> (World, tempfile::TempDir) {
    let dir = tempfile::Builder::new()
        .prefix("mk-standin")
        .tempdir_in("/tmp")
        .unwrap();
    let bin = stand_in(dir.path(), mode);
    let w = World::builder().agent().claude(bin).start().await;
    (w, dir)
}

/// The CLI exits mid-turn (code 3, a last line on stderr): the turn is
/// `failed` with an error that names the exit and shows the stderr tail;
/// the next prompt starts a new process, which works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_exiting_mid_turn_fails_the_turn_and_the_next_prompt_restarts_it() {
    let (mut w, dir) = stand_in_world("crash").await;
    let session = w.ed.start_session(json!({"prompt": "crash please"})).await;
    let seq1 = w.ed.last_prompt_seq(&session).await;
    let end = w.ed.turn_end(&session, seq1, STEP).await;
    assert_eq!(end["data"]["state"], "failed", "{}", end["data"]);
    let error = end["data"]["error"].as_str().unwrap_or_default();
    assert!(
        error.to_lowercase().contains("exit") && error.contains("FAKE_CLI_STDERR_TAIL"),
        "the error does not name the exit and the stderr tail: {error:?}"
    );

    let seq2 = w.ed.send_prompt(&session, "again please").await;
    w.ed.turn_idle(&session, seq2).await;
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "assistant") && assistant_text(e) == "STAND_IN_REPLY_1_RUN_2"),
        "{}",
        describe_events(&page)
    );
    let runs = stand_in_runs(dir.path());
    assert_eq!(runs.len(), 2, "starts: {runs:?}");
    eprintln!("the restarted CLI's arguments: {:?}", runs[1]);
}

/// Garbage on the CLI's stdout (not JSON, a torn line, invalid UTF-8, a
/// JSON array, a blank CRLF line, an unknown message type) does not kill
/// the session: the turn ends with the reply that follows, the unknown
/// type is stored as it came, and the same process takes the next prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_clis_stdout_does_not_kill_the_session() {
    let (mut w, dir) = stand_in_world("garbage").await;
    let (session, _) = w.ed.run_first_turn("garbage please", json!({})).await;
    let seq2 = w.ed.send_prompt(&session, "and again").await;
    w.ed.turn_idle(&session, seq2).await;
    let (events, page) = w.ed.all_events(&session, 1000).await;
    let all = describe_events(&page);
    for n in [1, 2] {
        assert!(
            events
                .iter()
                .any(|e| is_cli(e, "assistant")
                    && assistant_text(e) == format!("SURVIVED_GARBAGE_{n}")),
            "reply {n} missing:\n{all}"
        );
    }
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "brand_new_type_from_a_future_cli")),
        "the unknown message type was not stored:\n{all}"
    );
    assert_eq!(stand_in_runs(dir.path()).len(), 1, "the CLI was restarted");
}

/// 4 MiB on the CLI's stderr in one turn does not block it: the turn ends
/// (twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_the_clis_stderr_does_not_hang_the_turn() {
    let (mut w, _dir) = stand_in_world("flood").await;
    let (session, _) = w.ed.run_first_turn("flood please", json!({})).await;
    let seq2 = w.ed.send_prompt(&session, "flood again").await;
    w.ed.turn_idle(&session, seq2).await;
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        events
            .iter()
            .any(|e| is_cli(e, "assistant") && assistant_text(e) == "AFTER_THE_FLOOD_2"),
        "{}",
        describe_events(&page)
    );
}

/// A `claude` that cannot be started: `start` fails with -32803 and says
/// why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_fails_with_32803_when_the_cli_cannot_be_started() {
    let mut w = World::builder()
        .agent()
        .claude(PathBuf::from("/nonexistent/moonkale-test/claude"))
        .start()
        .await;
    let r =
        w.ed.request("moonkale/agent/start", json!({"prompt": "hello"}))
            .await;
    assert_eq!(r["error"]["code"], -32803, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("/nonexistent/moonkale-test/claude") || message.contains("claude"),
        "{r}"
    );
}

/// The CLI runs with the user's environment minus ours: `CLAUDECODE` and
/// `MOONKALE_*` of the service do not reach it; the user's
/// `ANTHROPIC_API_KEY` does, as `claude -p` honours it (the fake sees that
/// key: the CLI prefers it to the `apiKeyHelper`, as it does in print
/// mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_with_a_scrubbed_environment() {
    let gate = Gate::new();
    let mut w = World::builder()
        .agent()
        .script(Script::new().on_prompt("check env", Reply::text("ENV_OK").gated(&gate, 1)))
        .env("ANTHROPIC_API_KEY", "sk-the-users-own-key")
        .env("CLAUDECODE", "1")
        .env("MOONKALE_TEST_SECRET", "must-not-leak")
        .start()
        .await;
    let session = w.ed.start_session(json!({"prompt": "check env"})).await;
    w.ed.take("the first text", STEP, |m| is_text_of(m, &session))
        .await;
    let pids = w.cli_pids();
    assert_eq!(pids.len(), 1, "{pids:?}");
    let environ = std::fs::read(format!("/proc/{}/environ", pids[0])).unwrap_or_default();
    gate.open();
    let environ = String::from_utf8_lossy(&environ);
    let vars: Vec<&str> = environ.split('\0').filter(|v| !v.is_empty()).collect();
    assert!(!vars.is_empty(), "cannot read the CLI's environment");
    for v in &vars {
        assert!(
            !v.starts_with("CLAUDECODE=") && !v.starts_with("MOONKALE"),
            "the CLI got {v}"
        );
    }
    assert!(
        vars.contains(&"ANTHROPIC_API_KEY=sk-the-users-own-key"),
        "the user's key, a login `claude -p` honours: {vars:?}"
    );
    assert!(
        vars.contains(&format!("HOME={}", w.sb.home.display()).as_str()),
        "HOME: {vars:?}"
    );
    let req = w.fake.wait_prompt("check env", STEP).await;
    assert_eq!(req.header("x-api-key"), Some("sk-the-users-own-key"));
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
}
