//! The remote front door (`serve --listen`) over real sockets: who gets in
//! (security.md 40), what a remote client may name (31–33, 35), and what a
//! flood of idle sockets or a client that never reads does to the others.

use std::time::Duration;

use moonkale_tests::remote::{
    RemoteClient, TOKEN, make_certificate, read_status, send_upgrade, upgrade_status,
};
use moonkale_tests::{Sandbox, Service, TIMEOUT, wait_until};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A service on the sandbox's workspace with the remote front door on a
/// free loopback port, confined to the workspace; its address.
async fn remote_service(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> (Service, String) {
    let root = sb.workspace.to_str().expect("UTF-8 path").to_owned();
    let mut all_env = vec![("MOONKALE_ROOT", root.as_str()), ("MOONKALE_TOKEN", TOKEN)];
    all_env.extend_from_slice(env);
    let mut all_args = vec!["--no-claude-ide", "--listen", "127.0.0.1:0"];
    all_args.extend_from_slice(args);
    let svc = sb.start_service_with_env(&all_args, &all_env).await;
    let addr = svc
        .info
        .remote
        .clone()
        .expect("the info file names the remote address");
    (svc, addr)
}

/// Case 40 over a real socket: the right token gets a working front door
/// (listed with transport `remote`); a missing, wrong, duplicated or
/// Basic-scheme token and a token in the URL get 401, a browser's `Origin`
/// 403; after five failures the right token still gets in at once while
/// each further failure is answered later; the log names neither token.
#[tokio::test]
async fn hostile_40_who_gets_in() {
    let sb = Sandbox::new();
    let (_svc, addr) = remote_service(&sb, &[], &[]).await;

    let mut c = RemoteClient::connect(&addr, TOKEN).await;
    c.initialize("remote-shell", &sb.workspace).await;
    let status = c.call("moonkale/status", Value::Null).await;
    let me = status["editors"]
        .as_array()
        .and_then(|eds| eds.iter().find(|e| e["client"] == "remote-shell"))
        .unwrap_or_else(|| panic!("not listed: {status}"));
    assert_eq!(me["transport"], "remote");

    let wrong = "wrong-token-that-is-long-enough-0123456789";
    let origin = format!("Authorization: Bearer {TOKEN}\r\nOrigin: https://evil.example\r\n");
    assert_eq!(upgrade_status(&addr, "/", &origin).await, 403);
    assert_eq!(upgrade_status(&addr, "/", "").await, 401);
    let bad = format!("Authorization: Bearer {wrong}\r\n");
    assert_eq!(upgrade_status(&addr, "/", &bad).await, 401);
    let twice = format!("Authorization: Bearer {TOKEN}\r\nAuthorization: Bearer {TOKEN}\r\n");
    assert_eq!(upgrade_status(&addr, "/", &twice).await, 401);
    assert_eq!(
        upgrade_status(&addr, &format!("/?token={TOKEN}"), "").await,
        401
    );
    assert_eq!(
        upgrade_status(&addr, "/", "Authorization: Basic dXNlcjpwYXNz\r\n").await,
        401
    );
    let good = format!("Authorization: Bearer {TOKEN}\r\n");
    assert_eq!(
        upgrade_status(&addr, "/", &good).await,
        101,
        "not locked out"
    );
    let slowed = std::time::Instant::now();
    assert_eq!(upgrade_status(&addr, "/", &bad).await, 401);
    assert!(
        slowed.elapsed() >= Duration::from_millis(100),
        "the sixth failure was answered at once"
    );

    // The connected client was not affected.
    c.call("moonkale/status", Value::Null).await;
    let log = std::fs::read_to_string(sb.root.join("service.log")).expect("log");
    assert!(log.contains("refused a remote client"), "{log}");
    assert!(
        !log.contains(TOKEN) && !log.contains(wrong),
        "a token was logged"
    );
}

/// Behind an SSH tunnel every client comes from 127.0.0.1: 20 wrong
/// attempts at once from there (slowed, some answered 429) must not keep
/// the right token out, nor slow it: sent after a wrong attempt that the
/// throttle now holds back, the right token is let in first.
#[tokio::test]
async fn wrong_tokens_do_not_lock_out_the_right_one() {
    let sb = Sandbox::new();
    let (_svc, addr) = remote_service(&sb, &[], &[]).await;
    let bad = "Authorization: Bearer wrong-token-that-is-long-enough-0123456789\r\n";
    let attempts: Vec<_> = (0..20)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move { upgrade_status(&addr, "/", bad).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for a in attempts {
        statuses.push(a.await.expect("attempt"));
    }
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    // Past the free failures each wrong attempt is answered later than the
    // one before: this one is held back ...
    let held = send_upgrade(&addr, "/", bad).await;
    // ... and the right token, sent after it, gets its 101 while it still
    // waits. Slowed as a failure, it would wait at least as long.
    let mut c = RemoteClient::connect(&addr, TOKEN).await;
    let mut byte = [0u8; 1];
    assert!(
        matches!(held.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a wrong attempt sent before the right token was answered first"
    );
    c.initialize("remote-after", &sb.workspace).await;
    c.call("moonkale/status", Value::Null).await;
    assert_eq!(read_status(held).await, 401);
}

/// `serve --listen` refuses to start without a usable root, token or
/// (off loopback) TLS, each with a message saying what is missing.
#[tokio::test]
async fn refuses_to_start_without_root_token_or_tls() {
    let sb = Sandbox::new();
    let ws = sb.workspace.to_str().unwrap().to_owned();
    let inner = sb.workspace.join("inner");
    std::fs::create_dir(&inner).unwrap();
    let inner = inner.to_str().unwrap().to_owned();
    // (--listen, environment, what stderr says)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            "127.0.0.1:0",
            &[("MOONKALE_TOKEN", TOKEN)],
            "MOONKALE_ROOT must name",
        ),
        (
            "127.0.0.1:0",
            &[("MOONKALE_TOKEN", TOKEN), ("MOONKALE_ROOT", "ws")],
            "must be an absolute path",
        ),
        (
            "127.0.0.1:0",
            &[("MOONKALE_TOKEN", TOKEN), ("MOONKALE_ROOT", &inner)],
            "is outside MOONKALE_ROOT",
        ),
        (
            "0.0.0.0:0",
            &[("MOONKALE_TOKEN", TOKEN), ("MOONKALE_ROOT", &ws)],
            "without TLS",
        ),
        ("127.0.0.1:0", &[("MOONKALE_ROOT", &ws)], "need a token"),
        (
            "127.0.0.1:0",
            &[("MOONKALE_TOKEN", "short"), ("MOONKALE_ROOT", &ws)],
            "at least 32",
        ),
    ];
    for (listen, env, says) in cases {
        let mut cmd = sb.command("moonkale-service");
        cmd.args([
            "serve",
            "--no-claude-ide",
            "--workspace",
            &ws,
            "--listen",
            listen,
        ])
        .env_remove("MOONKALE_ROOT")
        .env_remove("MOONKALE_TOKEN")
        .envs(env.iter().copied());
        let out = tokio::time::timeout(TIMEOUT, cmd.output())
            .await
            .expect("it exits")
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{listen} {env:?} started");
        assert!(stderr.contains(says), "{env:?}: {stderr}");
        assert!(!stderr.contains(TOKEN), "the token was printed");
    }
    // --insecure is the explicit way off loopback without TLS.
    let (svc, addr) = remote_service(&sb, &["--insecure"], &[]).await;
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    drop(svc);
}

/// Cases 31–33 and 35 for remote clients: every `file:` URI must name a path
/// inside the root by whole components without `..` or symlinks; the others
/// are refused (a request with -32602, a notification with a logMessage)
/// and nothing is opened. A hard link inside is a name inside: the service
/// holds the client's text and reads nothing through it.
#[tokio::test]
async fn remote_clients_are_confined_to_the_root() {
    let sb = Sandbox::new();
    let outside = sb.root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET\n").unwrap();
    let collision = sb.root.join("ws-secrets");
    std::fs::create_dir(&collision).unwrap();
    std::fs::write(collision.join("a.txt"), "SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, sb.workspace.join("dirlink")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("secret.txt"),
        sb.workspace.join("filelink.txt"),
    )
    .unwrap();
    std::fs::hard_link(outside.join("secret.txt"), sb.workspace.join("hard.txt")).unwrap();
    let (_svc, addr) = remote_service(&sb, &[], &[]).await;
    let mut c = RemoteClient::connect(&addr, TOKEN).await;
    c.initialize("remote-confined", &sb.workspace).await;

    let ws = sb.workspace.display().to_string();
    let refused = [
        "file:///etc/passwd".to_owned(),
        format!("file://{ws}/../outside/secret.txt"),
        format!("file://{ws}/%2e%2e/outside/secret.txt"),
        format!("file://{}/ws-secrets/a.txt", sb.root.display()),
        format!("file://{ws}/dirlink/secret.txt"),
        format!("file://{ws}/filelink.txt"),
        format!("file://remotehost{ws}/a.txt"),
        format!("file://{ws}/.git/config"),
    ];
    for uri in &refused {
        c.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "text", "version": 1, "text": "x"}}),
        )
        .await;
        let note = c.notification("window/logMessage").await;
        let message = note["params"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("didOpen refused"), "{uri}: {note}");
        let resp = c.request("moonkale/document", json!({"uri": uri})).await;
        assert_eq!(resp["error"]["code"], -32602, "{uri}: {resp}");
    }
    let status = c.call("moonkale/status", Value::Null).await;
    let docs = &status["editors"][0]["documents"];
    assert_eq!(docs, &json!([]), "nothing was opened: {status}");

    let inside = format!("file://{ws}/hard.txt");
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": inside, "languageId": "text", "version": 1, "text": "client text"}}),
    )
    .await;
    let doc = c.call("moonkale/document", json!({"uri": inside})).await;
    assert_eq!(doc["text"], "client text");
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "SECRET\n"
    );

    // A terminal's folder is confined to the workspace as well.
    for cwd in ["/etc", "../outside", "dirlink"] {
        let resp = c
            .request(
                "moonkale/terminal/open",
                json!({"argv": ["/bin/true"], "cwd": cwd}),
            )
            .await;
        assert!(resp.get("error").is_some(), "{cwd}: {resp}");
    }
}

/// Defect: confinement looked only at strings starting with the exact bytes
/// `file:`, so other spellings any URI parser reads as file URIs passed:
/// scheme case, leading spaces and tabs inside, `localhost`, percent-encoding,
/// a single slash. Each is refused now, in a name and in a command argument,
/// and nothing is opened; a name inside the root spelled oddly is the one
/// document its canonical spelling names.
#[tokio::test]
async fn remote_confinement_reads_uris_as_parsers_do() {
    let sb = Sandbox::new();
    let (_svc, addr) = remote_service(&sb, &[], &[]).await;
    let mut c = RemoteClient::connect(&addr, TOKEN).await;
    c.initialize("remote-spellings", &sb.workspace).await;

    let ws = sb.workspace.display().to_string();
    let refused = [
        "FILE:///etc/passwd".to_owned(),
        "File:///etc/passwd".to_owned(),
        " file:///etc/passwd".to_owned(),
        "\tfile:///etc/passwd".to_owned(),
        "fi\nle:///etc/passwd".to_owned(),
        "file://localhost/etc/passwd".to_owned(),
        "file://LOCALHOST/etc/passwd".to_owned(),
        "file:/etc/passwd".to_owned(),
        "file:///%65tc/passwd".to_owned(),
        "file:%2F%2F/etc/passwd".to_owned(),
        format!("FILE://{ws}/%2E%2E/outside"),
        format!("file://{ws}/a.txt?x"),
        format!("file:\\\\{ws}\\a.txt"),
        format!("file://{ws}/%2Egit/config"),
    ];
    for uri in &refused {
        c.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "text", "version": 1, "text": "x"}}),
        )
        .await;
        let note = c.notification("window/logMessage").await;
        let message = note["params"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("didOpen refused"), "{uri:?}: {note}");
        let resp = c.request("moonkale/document", json!({"uri": uri})).await;
        assert_eq!(resp["error"]["code"], -32602, "{uri:?}: {resp}");
        let resp = c
            .request(
                "workspace/executeCommand",
                json!({"command": "moonkale.sendToClaude", "arguments": [uri]}),
            )
            .await;
        assert_eq!(resp["error"]["code"], -32602, "{uri:?}: {resp}");
    }
    let status = c.call("moonkale/status", Value::Null).await;
    assert_eq!(
        status["editors"][0]["documents"],
        json!([]),
        "nothing was opened: {status}"
    );

    let odd = format!(" FILE://localhost{ws}/sub/%61%20b.txt");
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": odd, "languageId": "text", "version": 1, "text": "inside"}}),
    )
    .await;
    let doc = c
        .call(
            "moonkale/document",
            json!({"uri": format!("file://{ws}/sub/a b.txt")}),
        )
        .await;
    assert_eq!(doc["text"], "inside");
    assert_eq!(doc["uri"], format!("file://{ws}/sub/a%20b.txt"));
}

/// Case 56b and a client that never reads: 1 000 idle sockets that never
/// upgrade do not keep a real client out and are closed at the handshake
/// deadline; a client that stops reading its answers is dropped after the
/// write stall, while another client goes on.
#[tokio::test]
async fn idle_sockets_and_a_client_that_never_reads() {
    let sb = Sandbox::new();
    let (_svc, addr) = remote_service(
        &sb,
        &[],
        &[
            ("MOONKALE_HANDSHAKE_TIMEOUT_MS", "1000"),
            ("MOONKALE_WRITE_STALL_MS", "300"),
        ],
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(TcpStream::connect(&addr).await.expect("idle connect"));
    }
    let mut c = RemoteClient::connect(&addr, TOKEN).await;
    c.initialize("remote-reader", &sb.workspace).await;
    c.call("moonkale/status", Value::Null).await;
    for (i, mut s) in idle.into_iter().enumerate() {
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(TIMEOUT, s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("idle socket {i} still open"))
            .unwrap_or(0);
        assert_eq!(n, 0, "idle socket {i} got bytes");
    }

    // The non-reader asks and asks and never reads an answer.
    let mut stalled = RemoteClient::connect(&addr, TOKEN).await;
    stalled.initialize("remote-stalled", &sb.workspace).await;
    let flood = tokio::spawn(async move {
        let req = |i: u32| json!({"jsonrpc": "2.0", "id": i, "method": "moonkale/status"});
        for i in 0..20_000 {
            // Once dropped, sending fails or blocks: either ends the flood.
            let sent = tokio::time::timeout(Duration::from_secs(2), stalled.send_raw(req(i)));
            if !matches!(sent.await, Ok(true)) {
                return i;
            }
        }
        20_000
    });
    wait_until("the non-reading client to be dropped", || async {
        let status = sb.status().await;
        let names: Vec<Value> = status["editors"]
            .as_array()?
            .iter()
            .map(|e| e["client"].clone())
            .collect();
        (!names.contains(&json!("remote-stalled"))).then_some(())
    })
    .await;
    let status = c.call("moonkale/status", Value::Null).await;
    assert!(status["editors"].is_array());
    flood.abort();
    let _ = flood.await;
}

/// TLS with the user's certificate and key: a client trusting that
/// certificate gets the front door; plain WebSocket on the TLS port gets
/// nothing.
#[tokio::test]
async fn remote_over_tls() {
    let sb = Sandbox::new();
    let (ca, cert, key) = make_certificate(&sb.root).await;
    let (_svc, addr) = remote_service(
        &sb,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let mut c = RemoteClient::connect_tls(&addr, TOKEN, &ca, "localhost").await;
    let init = c.initialize("remote-tls", &sb.workspace).await;
    assert!(init["capabilities"].is_object(), "{init}");

    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {TOKEN}\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, tcp.read_to_end(&mut buf)).await;
    assert!(
        !String::from_utf8_lossy(&buf).contains("101"),
        "plain HTTP was upgraded on the TLS port"
    );
}
