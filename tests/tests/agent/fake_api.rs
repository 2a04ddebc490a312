//! The fake API's own pacing, without the CLI.

use std::time::{Duration, Instant};

use moonkale_tests::STEP;
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use serde_json::json;
use tokio::io::AsyncReadExt;

/// The fake API's additions, without the CLI: a gated reply sends its first
/// delta and holds the rest until the gate opens (and is marked answered
/// only then); a broken stream stops after the first delta with no
/// `message_stop`, and its non-streaming fallback gets the 500.
#[tokio::test]
async fn fake_api_gates_and_breaks_streams() {
    use moonkale_tests::fakeapi::FakeApi;
    use tokio::io::AsyncWriteExt;
    let gate = Gate::new();
    let fake = FakeApi::start(
        Script::new()
            .on_prompt("gated", Reply::text("ONE TWO THREE").gated(&gate, 1))
            .on_prompt("broken", Reply::broken_stream("ONE TWO THREE")),
    )
    .await;
    let request = |prompt: &str, stream: bool| {
        let body = json!({"model": "m", "stream": stream, "tools": [{"name": "Read"}],
                          "messages": [{"role": "user", "content": prompt}]})
        .to_string();
        format!(
            "POST /v1/messages HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let connect = || tokio::net::TcpStream::connect(("127.0.0.1", fake.port));

    let mut s = connect().await.unwrap();
    s.write_all(request("gated", true).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\"text\":\"ONE T\"") {
        let n = tokio::time::timeout(STEP, s.read(&mut buf))
            .await
            .expect("the first delta comes before the gate opens")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let held = tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await;
    assert!(held.is_err(), "the rest came before the gate opened");
    assert!(!fake.requests()[0].answered);
    gate.open();
    tokio::time::timeout(STEP, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let sse = String::from_utf8_lossy(&got);
    assert!(
        sse.contains("\"WO TH\"") && sse.contains("event: message_stop"),
        "{sse}"
    );
    fake.wait_for("the gated reply marked answered", STEP, |log| {
        log.first().filter(|r| r.answered).cloned()
    })
    .await;

    let mut s = connect().await.unwrap();
    s.write_all(request("broken", true).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(STEP, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let sse = String::from_utf8_lossy(&got);
    assert!(sse.contains("\"text\":\"ONE T\""), "{sse}");
    assert!(
        !sse.contains("WO TH") && !sse.contains("message_stop"),
        "{sse}"
    );
    let mut s = connect().await.unwrap();
    s.write_all(request("broken", false).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(STEP, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&got);
    assert!(
        answer.starts_with("HTTP/1.1 500 ") && answer.contains("api_error"),
        "{answer}"
    );
    let log = fake.requests();
    assert!(!log[1].answered && log[2].answered);

    // A slow stream: 200 ms before each delta after the first.
    fake.set_script(
        Script::new().default_reply(
            Reply::text("ONE TWO THREE").with_delta_delay(Duration::from_millis(200)),
        ),
    );
    let started = Instant::now();
    let mut s = connect().await.unwrap();
    s.write_all(request("slow", true).as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(STEP, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(String::from_utf8_lossy(&got).contains("event: message_stop"));
}
