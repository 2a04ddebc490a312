//! An ACP panel on a laptop driving a session on a server:
//! `moonkale-service acp --connect ws://…/ --token-file F` against a
//! service in server mode (`serve --listen`).

use moonkale_tests::Sandbox;
use moonkale_tests::acp::AcpAgent;
use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::remote::TOKEN;
use moonkale_tests::world::World;
use serde_json::json;

/// The laptop has no service of its own (another runtime directory and
/// home): the panel reaches the server's through the remote front door
/// with the token from a file. Its project folder is a laptop path, so
/// the session runs in the server's workspace; the answer streams and the
/// session is listed there, where an editor of the server sees it too. A
/// wrong token is one clear error and the agent exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panel_on_a_laptop_drives_a_session_on_the_server() {
    let mut w = World::builder()
        .agent()
        .script(Script::new().on_prompt("from the laptop", Reply::text("SERVER_REPLY")))
        .arg("--listen")
        .arg("127.0.0.1:0")
        .env("MOONKALE_ROOT", "/tmp")
        .env("MOONKALE_TOKEN", TOKEN)
        .start()
        .await;
    let addr = w.svc().info.remote.clone().expect("remote address");
    let laptop = Sandbox::new();
    let token_file = laptop.root.join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let panel = |token_file: &std::path::Path| {
        let mut cmd = laptop.command("moonkale-service");
        cmd.arg("acp")
            .arg("--connect")
            .arg(format!("ws://{addr}/"))
            .arg("--token-file")
            .arg(token_file);
        cmd
    };
    let mut acp = AcpAgent::spawn(panel(&token_file), &laptop.root.join("acp.log"));
    acp.initialize().await;
    let session = acp.new_session(&laptop.workspace).await;
    let reply = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "from the laptop"}]}),
        )
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(acp.chunks(&session, "agent_message_chunk"), "SERVER_REPLY");
    let listed =
        w.ed.call("moonkale/agent/list", serde_json::Value::Null)
            .await;
    assert_eq!(listed["sessions"][0]["session"], session.as_str());
    let page = w.ed.events_page(&session, 0, 1).await;
    assert_eq!(
        page["events"][0]["data"]["workspace"],
        json!(w.sb.workspace)
    );
    assert_eq!(acp.close().await, Some(0));

    let wrong = laptop.root.join("wrong-token");
    std::fs::write(&wrong, "not-the-token-0000000000000000000000000000").unwrap();
    let out = panel(&wrong).output().await.unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty(), "nothing but ACP on stdout");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("moonkale-service: "), "{stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "one sentence: {stderr}"
    );
}
