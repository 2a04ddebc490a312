//! Hostile input at the ACP front door: lines that are no messages, calls
//! out of order or with bad params, a client that stops reading, and a
//! stranger's repository opened in the panel.

use std::process::Stdio;

use moonkale_tests::STEP;
use moonkale_tests::acp::AcpAgent;
use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::world::World;
use serde_json::{Value, json};

use crate::acp_agent;

fn error_code(reply: &Result<Value, Value>) -> i64 {
    match reply {
        Err(e) => e["code"].as_i64().unwrap(),
        Ok(v) => panic!("expected an error, got {v}"),
    }
}

/// The answer to a raw line that has no id: the next message with a
/// `null` id.
async fn null_id_error(acp: &mut AcpAgent, what: &str) -> i64 {
    let m = acp
        .next_matching(what, |m| m["id"].is_null() && m.get("error").is_some())
        .await;
    m["error"]["code"].as_i64().unwrap()
}

/// Every bad line gets its JSON-RPC error (or, for a stray response,
/// nothing), in order, and the agent then runs a prompt as if nothing
/// happened; its stdout carried nothing but messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_get_errors_and_the_agent_goes_on() {
    let w = World::builder()
        .agent()
        .script(Script::new().on_prompt("still there", Reply::text("STILL_HERE")))
        .file("sub/keep.txt", "k\n")
        .start()
        .await;
    let mut cmd = w.command(&["acp", "--workspace"]);
    cmd.arg(&w.sb.workspace);
    let mut acp = AcpAgent::spawn(cmd, &w.sb.root.join("acp-hostile.log"));
    // Before initialize.
    let early = acp
        .call(
            "session/new",
            json!({"cwd": w.sb.workspace, "mcpServers": []}),
        )
        .await;
    assert_eq!(error_code(&early), -32600);
    acp.initialize().await;
    acp.send_line("this is not json").await;
    assert_eq!(null_id_error(&mut acp, "the parse error").await, -32700);
    acp.send_line("[1, 2, 3]").await;
    assert_eq!(null_id_error(&mut acp, "the batch's error").await, -32600);
    acp.send_line(r#"{"jsonrpc":"2.0","id":{"no":1},"method":"initialize"}"#)
        .await;
    assert_eq!(null_id_error(&mut acp, "the bad id's error").await, -32600);
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":99,"method":"session/prompt","params":{{"text":"{}"}}}}"#,
        "x".repeat(17 * 1024 * 1024)
    );
    acp.send_line(&huge).await;
    assert_eq!(
        null_id_error(&mut acp, "the overlong line's error").await,
        -32600
    );
    // A response to nothing it asked: ignored.
    acp.send_line(r#"{"jsonrpc":"2.0","id":12345,"result":{"outcome":{"outcome":"cancelled"}}}"#)
        .await;
    assert_eq!(
        error_code(&acp.call("no/such/method", json!({})).await),
        -32601
    );
    assert_eq!(
        error_code(&acp.call("authenticate", json!({"methodId": "x"})).await),
        -32600
    );
    let unknown = acp
        .call(
            "session/prompt",
            json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    assert_eq!(error_code(&unknown), -32602);
    let relative = acp
        .call("session/new", json!({"cwd": "sub", "mcpServers": []}))
        .await;
    assert_eq!(error_code(&relative), -32602);
    let outside = acp
        .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
        .await;
    assert_eq!(error_code(&outside), -32602);
    let message = outside.unwrap_err()["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("not a folder inside the workspace"),
        "{message}"
    );
    let ours = acp
        .call(
            "session/new",
            json!({"cwd": w.sb.workspace, "mcpServers": [{"name": "moonkale", "command": "/bin/true", "args": [], "env": []}]}),
        )
        .await;
    assert_eq!(error_code(&ours), -32602);
    let bad_mcp = acp
        .call(
            "session/new",
            json!({"cwd": w.sb.workspace, "mcpServers": "all of them"}),
        )
        .await;
    assert_eq!(error_code(&bad_mcp), -32602);

    let session = acp.new_session(&w.sb.workspace.join("sub")).await;
    let image = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "image", "data": "AA==", "mimeType": "image/tiff"}]}),
        )
        .await;
    assert_eq!(error_code(&image), -32602);
    let reply = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "still there"}]}),
        )
        .await
        .expect("a prompt after all that");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(acp.chunks(&session, "agent_message_chunk"), "STILL_HERE");
    assert!(acp.non_json().is_empty(), "not ACP on stdout");
    assert_eq!(acp.close().await, Some(0));
}

/// A client that stops reading its agent's stdout while a long answer
/// streams blocks neither the service nor another client: a second panel
/// runs a whole turn, and an editor's request is answered, while the
/// first sits on a full pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_blocks_nobody() {
    let long = "FLOOD ".repeat(400_000);
    let mut w = World::builder()
        .agent()
        .script(
            Script::new()
                .on_prompt("flood me", Reply::text(long.clone()))
                .on_prompt("quick one", Reply::text("QUICK_REPLY")),
        )
        .start()
        .await;
    let mut cmd = w.command(&["acp", "--workspace"]);
    cmd.arg(&w.sb.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut stuck = cmd.spawn().unwrap();
    let mut stuck_in = stuck.stdin.take().unwrap();
    // Kept, never read: once the pipe is full, its writes block.
    let stuck_out = stuck.stdout.take().unwrap();
    use tokio::io::AsyncWriteExt;
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": w.sb.workspace, "mcpServers": []}}),
    ];
    for line in lines {
        stuck_in
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    // Its session's id, from the service: the newest session.
    let session = moonkale_tests::poll_until(STEP, async || {
        let listed = w.ed.call("moonkale/agent/list", Value::Null).await;
        listed["sessions"][0]["session"].as_str().map(str::to_owned)
    })
    .await
    .expect("the stuck client's session");
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "flood me"}]}});
    w.ed.call("moonkale/agent/subscribe", json!({"session": session}))
        .await;
    stuck_in
        .write_all(format!("{prompt}\n").as_bytes())
        .await
        .unwrap();
    let stored =
        w.ed.agent_event(&session, "the flood's prompt", STEP, |e| {
            e["kind"] == "prompt"
        })
        .await;
    let seq = stored["seq"].as_u64().unwrap();
    w.ed.turn_idle(&session, seq).await;

    let mut other = acp_agent(&w, "other").await;
    let quick = other.new_session(&w.sb.workspace).await;
    let reply = other
        .call(
            "session/prompt",
            json!({"sessionId": quick, "prompt": [{"type": "text", "text": "quick one"}]}),
        )
        .await
        .expect("the other client's prompt");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(other.chunks(&quick, "agent_message_chunk"), "QUICK_REPLY");
    w.ed.call("moonkale/status", Value::Null).await;
    assert!(
        matches!(stuck.try_wait(), Ok(None)),
        "the stuck client's agent lives"
    );
    drop(stuck_out);
    stuck.kill().await.unwrap();
}

/// A user clones a stranger's repository and opens it in an ACP panel.
/// The repository's Claude Code settings allow every tool and ask for
/// bypassPermissions, its hooks and `.mcp.json` server touch marker files,
/// and it ships a symlink out of the workspace. The session comes up in
/// `default` mode, the model's Write is still asked in the panel, the
/// user rejects it, nothing of the repository ran, and a session cannot
/// be started through the symlink or in `.git`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_repository_opened_in_the_panel_runs_nothing() {
    let traps = moonkale_tests::agent::Traps::default();
    let dir = traps.markers.path();
    let w = World::builder()
        .agent()
        .file(".claude/settings.json", traps.settings().to_string())
        .file(".mcp.json", traps.mcp().to_string())
        .file(".git/config", "[core]\n")
        .file("README.md", "a stranger's project\n")
        .start()
        .await;
    std::os::unix::fs::symlink(dir, w.path("escape")).unwrap();
    let target = w.path("README.md");
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "tidy the readme",
                Reply::tool_use(
                    "Write",
                    json!({"file_path": target.display().to_string(), "content": "PWNED\n"}),
                ),
            )
            .after_tool("Write", Reply::text("README_LEFT_ALONE")),
    );
    let mut acp = acp_agent(&w, "stranger").await;
    for cwd in [w.path("escape"), w.path(".git")] {
        let refused = acp
            .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await;
        assert_eq!(error_code(&refused), -32602, "{cwd:?}");
    }
    let created = acp
        .call(
            "session/new",
            json!({"cwd": w.sb.workspace, "mcpServers": []}),
        )
        .await
        .expect("session/new");
    assert_eq!(created["modes"]["currentModeId"], "default");
    let session = created["sessionId"].as_str().unwrap().to_owned();
    let prompt = acp.prompt(&session, "tidy the readme").await;
    let ask = acp.permission("the Write's question").await;
    assert_eq!(ask["params"]["toolCall"]["title"], "Write README.md");
    acp.choose(&ask, "reject").await;
    let reply = acp
        .response(prompt, STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "a stranger's project\n"
    );
    let notices = acp.chunks(&session, "agent_message_chunk");
    assert!(
        notices.contains("not trusted"),
        "the user is told why: {notices}"
    );
    let planted = traps.sprung();
    assert!(planted.is_empty(), "the repository ran {planted:?}");
}
