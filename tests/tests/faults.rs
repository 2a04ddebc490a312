//! The service's own state under faults (issue 12): its runtime directory
//! removed, its Claude Code lock file deleted, its workspace folder moved or
//! deleted, nested workspaces, a long stop (SIGSTOP), and connections that
//! never initialize. Each test drives the real binaries and ends by showing
//! that the service still serves.

mod support;

use moonkale_tests::{RawLsp, Sandbox, TIMEOUT};
use serde_json::Value;

/// A well-behaved editor can attach to `socket` and is answered.
async fn assert_editor_attaches(socket: &std::path::Path) {
    let mut c = RawLsp::connect_unix(socket).await;
    c.initialize("survivor", &["utf-8"], Value::Null).await;
    assert!(c.call("moonkale/status", Value::Null).await["editors"].is_array());
}

/// More connections than the socket's cap (256) that never send
/// `initialize` no longer lock editors and `status` out: each is closed at
/// the deadline before `initialize` (`MOONKALE_INIT_DEADLINE_MS`), and then
/// `status` and a new editor work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_at_the_init_deadline() {
    let sb = Sandbox::new();
    let svc = sb
        .start_service_with_env(&[], &[("MOONKALE_INIT_DEADLINE_MS", "1500")])
        .await;
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(RawLsp::connect_unix(&svc.info.socket).await);
    }
    // Every one of them is closed by the service, with no byte sent.
    let all_closed = async {
        for c in &mut silent {
            assert!(
                c.is_closed().await,
                "a silent connection stayed open past the deadline"
            );
        }
    };
    tokio::time::timeout(TIMEOUT, all_closed)
        .await
        .expect("silent connections are closed within the test's deadline");
    let status = sb.status().await;
    assert!(status["editors"].is_array(), "{status}");
    assert_editor_attaches(&svc.info.socket).await;
}
