//! Claude Code's IDE protocol over a real WebSocket against the real service:
//! the conformance cases of ide-protocol.md §9 (L, H, M, T, N) and hostile
//! cases 1–16 of the security notes. Each test names its case.

use std::time::Duration;

use moonkale_tests::{IdeClient, RawLsp, Sandbox, Service, ide_lock, tool_json};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn service(sb: &Sandbox) -> (Service, u16, String) {
    service_with_env(sb, &[]).await
}

async fn service_with_env(sb: &Sandbox, env: &[(&str, &str)]) -> (Service, u16, String) {
    let svc = sb.start_service_with_env(&[], env).await;
    let (port, lock) = ide_lock(sb, &svc);
    let token = lock["authToken"].as_str().unwrap().to_owned();
    (svc, port, token)
}

/// Sends raw bytes as an HTTP client and returns the status code of the
/// answer (0 if the server closed without one).
async fn raw_status(port: u16, bytes: &[u8]) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _ = s.write_all(bytes).await;
    // Read the response head only: a 101 keeps the connection open.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(moonkale_tests::TIMEOUT, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&buf);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn upgrade(port: u16, extra: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: mcp\r\n{extra}\r\n"
    )
}

fn auth(token: &str) -> String {
    format!("X-Claude-Code-Ide-Authorization: {token}\r\n")
}

/// L1/L2: the lock file is 0600 in a 0700 directory with the fields the CLI
/// reads, the token is 64 hex digits and in no argv, and the file is removed
/// when the service stops.
#[tokio::test]
async fn l1_lock_file_and_l2_removal() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let (mut svc, port, token) = service(&sb).await;
    let (_, lock) = ide_lock(&sb, &svc);
    let dir = sb.home.join(".claude/ide");
    let path = dir.join(format!("{port}.lock"));
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(lock["pid"], svc.info.pid);
    assert_eq!(lock["workspaceFolders"], json!([sb.workspace]));
    assert_eq!(lock["ideName"], "Moonkale");
    assert_eq!(lock["transport"], "ws");
    assert_eq!(lock["runningInWindows"], false);
    assert!(token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()));
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", svc.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(&token));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(svc.pid(), libc::SIGTERM) };
    svc.child.wait().await.unwrap();
    assert!(!path.exists(), "lock removed on stop");
}

/// L2 at the earliest moment: a SIGTERM as soon as the info file appears
/// stops the service cleanly (exit 0, lock removed), every time. The
/// service used to install its handlers only after writing its lock and
/// info files; a signal in between killed it and left the lock behind
/// (how l1 failed under load).
#[tokio::test]
async fn l2_a_sigterm_right_after_the_start_removes_the_lock() {
    for round in 0..10 {
        let sb = Sandbox::new();
        let mut cmd = sb.command("moonkale-service");
        cmd.arg("serve")
            .arg("--workspace")
            .arg(&sb.workspace)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        let mut child = cmd.spawn().expect("spawn moonkale-service");
        let pid = child.id().expect("pid");
        let files = sb.files();
        let deadline = tokio::time::Instant::now() + moonkale_tests::TIMEOUT;
        let info = loop {
            if let Some(info) = files.read_info().filter(|i| i.pid == pid) {
                break info;
            }
            assert!(tokio::time::Instant::now() < deadline, "no info file");
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        let status = child.wait().await.unwrap();
        assert_eq!(status.code(), Some(0), "round {round}: {status}");
        let lock = sb
            .home
            .join(format!(".claude/ide/{}.lock", info.ide_port.unwrap()));
        assert!(!lock.exists(), "round {round}: lock left behind");
    }
}

/// CLAUDE_CONFIG_DIR moves the lock directory; our own stale lock (dead pid)
/// is cleaned at start, other IDEs' locks are left.
#[tokio::test]
async fn lock_dir_follows_claude_config_dir_and_stale_locks_go() {
    let sb = Sandbox::new();
    let config = sb.root.join("claude-config");
    let ide_dir = config.join("ide");
    std::fs::create_dir_all(&ide_dir).unwrap();
    let stale = json!({"pid": i32::MAX, "workspaceFolders": ["/x"], "ideName": "Moonkale", "transport": "ws", "runningInWindows": false, "authToken": "x"});
    let foreign = json!({"pid": i32::MAX, "workspaceFolders": ["/x"], "ideName": "Neovim", "transport": "ws", "authToken": "y"});
    std::fs::write(ide_dir.join("1.lock"), stale.to_string()).unwrap();
    std::fs::write(ide_dir.join("2.lock"), foreign.to_string()).unwrap();
    let svc = sb
        .start_service_with_env(&[], &[("CLAUDE_CONFIG_DIR", config.to_str().unwrap())])
        .await;
    let port = svc.info.ide_port.unwrap();
    assert!(ide_dir.join(format!("{port}.lock")).exists());
    assert!(!ide_dir.join("1.lock").exists());
    assert!(ide_dir.join("2.lock").exists());
    assert!(!sb.home.join(".claude/ide").exists());
}

/// H1, M1–M6: handshake with the token (header name in any case), `mcp`
/// echoed; initialize for every CLI generation; tools/list shapes; ping;
/// unknown methods; invalid JSON.
#[tokio::test]
async fn h1_and_m1_to_m6_handshake_and_mcp_session() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2099-01-01", "2024-11-05"),
    ] {
        let mut c = IdeClient::connect(port, &token).await;
        let init = c.initialize(asked).await;
        assert_eq!(init["protocolVersion"], answered);
        assert!(init["capabilities"]["tools"].is_object());
        assert!(init["serverInfo"]["name"].is_string());
    }
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let tools = c.request("tools/list", Value::Null).await["result"]["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for needed in [
        "openDiff",
        "close_tab",
        "closeAllDiffTabs",
        "getDiagnostics",
        "openFile",
    ] {
        assert!(names.contains(&needed), "{needed} in {names:?}");
    }
    for t in tools.as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object");
        assert!(t["inputSchema"]["properties"].is_object(), "{t}");
    }
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
    assert_eq!(
        c.request("resources/list", Value::Null).await["error"]["code"],
        -32601
    );
    c.send_text("{nope").await;
    let err = c.recv().await;
    assert_eq!(
        (err["error"]["code"].clone(), err["id"].clone()),
        (json!(-32700), Value::Null)
    );
    c.send_text(r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#)
        .await;
    assert_eq!(c.recv().await["error"]["code"], -32600);
    // M2: notifications get no answer; the next reply is the ping's.
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}))
        .await;
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
}

/// Security 1: missing, empty, ±1 character, upper-cased and random tokens
/// get 401 and no 101; neither token reaches the log.
#[tokio::test]
async fn hostile_01_bad_tokens_get_401() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    let random = "ab".repeat(32);
    let shorter = &token[..63];
    let longer = format!("{token}0");
    let upper = token.to_uppercase();
    for extra in [
        String::new(),
        auth(""),
        auth(shorter),
        auth(&longer),
        auth(&upper),
        auth(&random),
    ] {
        assert_eq!(
            raw_status(port, upgrade(port, &extra).as_bytes()).await,
            401,
            "{extra:?}"
        );
    }
    assert_eq!(
        raw_status(port, upgrade(port, &auth(&token)).as_bytes()).await,
        101
    );
    let log = std::fs::read_to_string(sb.root.join("service.log")).unwrap();
    assert!(log.contains("refused a Claude Code connection"));
    assert!(!log.contains(&token) && !log.contains(&random) && !log.contains(shorter));
}

/// Security 2–6: a duplicated auth header, any Origin, a foreign or missing
/// Host, CORS preflight and fetch, wrong methods, paths, versions, keys, TLS
/// bytes and binary junk are all refused before a 101, and the listener keeps
/// accepting.
#[tokio::test]
async fn hostile_02_to_06_refused_before_upgrade() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    let a = auth(&token);
    let cases: Vec<(String, u16)> = vec![
        (upgrade(port, &format!("{a}{a}")), 401),
        (
            upgrade(port, &format!("{a}Origin: https://evil.example\r\n")),
            403,
        ),
        (upgrade(port, &format!("{a}Origin: null\r\n")), 403),
        (
            upgrade(port, &format!("{a}Origin: http://localhost:1\r\n")),
            403,
        ),
        (
            upgrade(port, &a).replace(
                &format!("127.0.0.1:{port}"),
                &format!("evil.example:{port}"),
            ),
            403,
        ),
        (
            upgrade(port, &a).replace(&format!("Host: 127.0.0.1:{port}\r\n"), ""),
            400,
        ),
        (
            format!(
                "OPTIONS / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccess-Control-Request-Headers: x-claude-code-ide-authorization\r\n\r\n"
            ),
            405,
        ),
        (
            format!(
                "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{a}Content-Length: 2\r\n\r\n{{}}"
            ),
            405,
        ),
        (upgrade(port, &a).replace("GET / ", "GET /api "), 404),
        (
            format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{a}\r\n"),
            426,
        ),
        (upgrade(port, &a).replace("Version: 13", "Version: 8"), 426),
        (
            upgrade(port, &a).replace("dGhlIHNhbXBsZSBub25jZQ==", "bad"),
            400,
        ),
        (
            "\u{16}\u{3}\u{1}\u{2}\u{0}\u{1}\u{0}\u{1}\u{fc}\u{3}\u{3}\r\n\r\n".to_owned(),
            400,
        ),
    ];
    for (bytes, want) in &cases {
        assert_eq!(raw_status(port, bytes.as_bytes()).await, *want, "{bytes:?}");
    }
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&vec![0xffu8; 70_000]).await.unwrap_or(());
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(moonkale_tests::TIMEOUT, s.read_to_end(&mut buf)).await;
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 431"));
    let mut c = IdeClient::connect(port, &token).await;
    assert_eq!(
        c.initialize("2025-11-25").await["protocolVersion"],
        "2025-11-25"
    );
}

/// Security 7: 20 000 bytes without the end of the head, and a 20 MB header,
/// get 431 once 16 KiB have been read.
#[tokio::test]
async fn hostile_07_oversized_heads_get_431() {
    let sb = Sandbox::new();
    let (_svc, port, _token) = service(&sb).await;
    let mut head = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Pad: ");
    head.push_str(&"a".repeat(20_000));
    assert_eq!(raw_status(port, head.as_bytes()).await, 431);
    let mut huge = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Pad: ").into_bytes();
    huge.extend(std::iter::repeat_n(b'b', 20 << 20));
    assert_eq!(raw_status(port, &huge).await, 431);
}

/// Security 8: with the pre-auth slots full of slow clients, one more is
/// closed at once; the slow ones are dropped at the handshake deadline, after
/// which a real client connects.
#[tokio::test]
async fn hostile_08_handshake_slowloris() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service_with_env(&sb, &[("MOONKALE_IDE_HANDSHAKE_MS", "400")]).await;
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.write_all(b"G").await.unwrap();
        slow.push(s);
    }
    // Give the service a moment to take all eight into their handshake.
    let probe = upgrade(port, &auth(&token));
    let mut extra = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let started = std::time::Instant::now();
    let _ = extra.write_all(probe.as_bytes()).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(moonkale_tests::TIMEOUT, extra.read_to_end(&mut buf)).await;
    assert!(
        buf.is_empty() || started.elapsed() < Duration::from_millis(350),
        "the ninth was served: {buf:?}"
    );
    for s in &mut slow {
        let mut b = [0u8; 16];
        let n = tokio::time::timeout(moonkale_tests::TIMEOUT, s.read(&mut b))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0, "a slow client was closed at the deadline");
    }
    let mut c = IdeClient::connect(port, &token).await;
    assert!(c.initialize("2025-11-25").await["capabilities"].is_object());
}

/// Reads frames from a raw upgraded socket until the server's close frame
/// and returns its code.
async fn close_code_after(port: u16, token: &str, frames: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = upgrade(
        port,
        &format!(
            "{}Sec-WebSocket-Extensions: permessage-deflate\r\n",
            auth(token)
        ),
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut resp = Vec::new();
    while !resp.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        resp.push(b[0]);
    }
    let resp = String::from_utf8_lossy(&resp).to_ascii_lowercase();
    assert!(resp.starts_with("http/1.1 101"), "{resp}");
    assert!(
        !resp.contains("sec-websocket-extensions"),
        "no compression: {resp}"
    );
    let _ = s.write_all(frames).await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(moonkale_tests::TIMEOUT, s.read_to_end(&mut rest)).await;
    // A server close frame: 0x88, length, code (2 bytes, big endian), reason.
    let at = rest.iter().position(|&b| b == 0x88)?;
    Some(u16::from_be_bytes([rest[at + 2], rest[at + 3]]))
}

/// A masked client frame.
fn frame(fin: bool, rsv1: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![(if fin { 0x80 } else { 0 }) | (if rsv1 { 0x40 } else { 0 }) | opcode];
    let len = payload.len();
    if len < 126 {
        f.push(0x80 | len as u8);
    } else if len < 65536 {
        f.push(0x80 | 126);
        f.extend((len as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend((len as u64).to_be_bytes());
    }
    let mask = [1u8, 2, 3, 4];
    f.extend(mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// Security 9–11: no compression is negotiated and RSV1 gets 1002; an
/// oversized frame header gets 1009 without the payload being read; protocol
/// violations get 1002; invalid UTF-8 text gets 1007; binary gets 1003.
#[tokio::test]
async fn hostile_09_to_11_frame_violations() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    let text = |p: &[u8]| frame(true, false, 1, p);
    let mut huge_header = vec![0x81u8, 0x80 | 127];
    huge_header.extend((1u64 << 62).to_be_bytes());
    huge_header.extend([1, 2, 3, 4]);
    let mut unmasked = text(b"{}");
    unmasked[1] &= 0x7f;
    unmasked.drain(2..6);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("rsv1", frame(true, true, 1, b"{}"), 1002),
        ("2^62 length", huge_header, 1009),
        (
            "over 16 MiB",
            frame(true, false, 1, &vec![b' '; (16 << 20) + 1]),
            1009,
        ),
        ("unmasked", unmasked, 1002),
        ("control over 125", frame(true, false, 9, &[0u8; 126]), 1002),
        ("fragmented control", frame(false, false, 9, b"x"), 1002),
        ("opcode 3", frame(true, false, 3, b"x"), 1002),
        ("continuation first", frame(true, false, 0, b"x"), 1002),
        (
            "text inside fragments",
            [frame(false, false, 1, b"a"), frame(true, false, 1, b"b")].concat(),
            1002,
        ),
        ("close with 1 byte", frame(true, false, 8, b"x"), 1002),
        ("bad utf-8", text(b"\xff\xfe"), 1007),
        ("binary", frame(true, false, 2, b"{}"), 1003),
    ];
    for (name, bytes, want) in cases {
        assert_eq!(
            close_code_after(port, &token, &bytes).await,
            Some(want),
            "{name}"
        );
    }
    let mut c = IdeClient::connect(port, &token).await;
    assert!(c.initialize("2025-11-25").await["capabilities"].is_object());
}

/// Security 12: several CLIs at once (the CLI supports it since 2.0.60);
/// each is answered and a reconnect works.
#[tokio::test]
async fn hostile_12_several_clients() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    let mut a = IdeClient::connect(port, &token).await;
    let mut b = IdeClient::connect(port, &token).await;
    a.initialize("2025-11-25").await;
    b.initialize("2025-06-18").await;
    assert_eq!(a.request("ping", Value::Null).await["result"], json!({}));
    assert_eq!(b.request("ping", Value::Null).await["result"], json!({}));
    drop(a);
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    assert_eq!(b.request("ping", Value::Null).await["result"], json!({}));
}

/// Security 14: a client that never answers pings is dropped after one
/// silent interval; one that reads (and so pongs) stays.
#[tokio::test]
async fn hostile_14_silent_clients_are_dropped() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service_with_env(&sb, &[("MOONKALE_IDE_PING_MS", "200")]).await;
    let mut silent = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    silent
        .write_all(upgrade(port, &auth(&token)).as_bytes())
        .await
        .unwrap();
    let mut alive = IdeClient::connect(port, &token).await;
    alive.initialize("2025-11-25").await;
    // The silent one reads nothing of its own accord: drain until EOF.
    // The live client keeps reading (and so answers pings) the whole time,
    // as Claude Code's WebSocket does; the silent one never reads.
    // Dropped (its stream ends), whatever the load: how many intervals
    // that takes is the ping logic's unit tests' to say, since an interval
    // in which the service itself did not run on time never counts.
    let silent_dropped = async {
        let mut sink = Vec::new();
        let ended = tokio::time::timeout(moonkale_tests::TIMEOUT, silent.read_to_end(&mut sink))
            .await
            .is_ok();
        (ended, sink)
    };
    let keep_alive = async {
        for _ in 0..10 {
            assert_eq!(
                alive.request("ping", Value::Null).await["result"],
                json!({})
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let ((ended, sink), ()) = tokio::join!(silent_dropped, keep_alive);
    assert!(ended, "the silent client was not dropped");
    assert!(String::from_utf8_lossy(&sink).starts_with("HTTP/1.1 101"));
    assert_eq!(
        alive.request("ping", Value::Null).await["result"],
        json!({})
    );
}

/// Security 15: JSON-RPC junk gets errors and the connection stays up.
#[tokio::test]
async fn hostile_15_jsonrpc_junk() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{}1{}}}"#,
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let long_id = format!(
        r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#,
        "x".repeat(257)
    );
    let cases = [
        ("{nope".to_owned(), -32700),
        (deep, -32700),
        (r#"{"jsonrpc":"2.0","id":1,"method":"\ud800"}"#.to_owned(), -32700),
        (r#"{"jsonrpc":"2.0","id":1,"method":"no/such"}"#.to_owned(), -32601),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}"#.to_owned(), -32601),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"openDiff","arguments":{"old_file_path":1}}}"#.to_owned(), -32602),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"getDiagnostics","arguments":[1]}}"#.to_owned(), -32602),
        (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#.to_owned(), -32600),
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#.to_owned(), -32600),
        (r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}"#.to_owned(), -32600),
        (long_id, -32600),
        (r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#.to_owned(), -32600),
    ];
    for (text, code) in cases {
        c.send_text(&text).await;
        let reply = c.recv().await;
        assert_eq!(
            reply["error"]["code"],
            code,
            "{}",
            &text[..text.len().min(80)]
        );
    }
    let exec = c.tool("executeCode", json!({"code": "print(1)"})).await;
    assert_eq!(exec["isError"], true);
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
}

/// Security 16 and 31–37 through the tools: paths outside the workspace, via
/// `..`, symlinks, prefix collisions and `.git` are refused with `isError`,
/// and the secret never appears in a reply.
#[tokio::test]
async fn hostile_16_tool_paths_outside_the_workspace() {
    let sb = Sandbox::new();
    let outside = sb.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "TOP-SECRET").unwrap();
    std::fs::create_dir_all(sb.root.join("ws-secrets")).unwrap();
    std::fs::write(sb.root.join("ws-secrets/x"), "TOP-SECRET").unwrap();
    std::fs::create_dir_all(sb.workspace.join(".git")).unwrap();
    std::fs::write(sb.workspace.join(".git/config"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), sb.workspace.join("link.md")).unwrap();
    std::os::unix::fs::symlink(&outside, sb.workspace.join("outdir")).unwrap();
    let (_svc, port, token) = service(&sb).await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let ws = sb.workspace.display().to_string();
    let paths = [
        outside.join("secret").display().to_string(),
        format!("{ws}/../outside/secret"),
        format!("{}/ws-secrets/x", sb.root.display()),
        format!("{ws}/link.md"),
        format!("{ws}/outdir/secret"),
        format!("{ws}/.git/config"),
        format!("{ws}/.GIT/config"),
        "/etc/passwd".to_owned(),
        "relative.txt".to_owned(),
    ];
    for p in &paths {
        for (tool, args) in [
            (
                "openFile",
                json!({"filePath": p, "startText": "TOP", "makeFrontmost": false}),
            ),
            ("checkDocumentDirty", json!({"filePath": p})),
            (
                "openDiff",
                json!({"old_file_path": p, "new_file_path": p, "new_file_contents": "x", "tab_name": "t"}),
            ),
            ("getDiagnostics", json!({"uri": format!("file://{p}")})),
        ] {
            let reply = c
                .request("tools/call", json!({"name": tool, "arguments": args}))
                .await;
            let text = reply.to_string();
            assert!(!text.contains("TOP-SECRET"), "{tool} {p}: {text}");
            if tool != "openFile" || !p.starts_with("relative") {
                assert!(
                    reply["result"]["isError"] == true || reply.get("error").is_some(),
                    "{tool} {p}: {text}"
                );
            }
        }
    }
}

/// An editor attached over LSP, with one document open.
async fn editor(svc: &Service, sb: &Sandbox, name: &str, text: &str) -> (RawLsp, String) {
    let mut ed = svc.connect().await;
    ed.initialize(name, &["utf-16"], Value::Null).await;
    let uri = sb.uri("src/main.rs");
    ed.did_open(&uri, 1, text).await;
    ed.barrier().await;
    (ed, uri)
}

/// T9, T10: getDiagnostics for all files, for one (un-encoded path with a
/// space), and for a known file with none; 0-based ranges, severity names,
/// string codes. T12: unknown tools. close_tab, closeAllDiffTabs (T7, T8
/// with no diffs).
#[tokio::test]
async fn t9_t10_diagnostics_and_t7_t8_t12_simple_tools() {
    let sb = Sandbox::new();
    let (svc, port, token) = service(&sb).await;
    let mut ed = svc.connect().await;
    ed.initialize("forwarder", &["utf-16"], Value::Null).await;
    let spaced = format!("file://{}/a%20b.ts", sb.workspace.display());
    ed.did_open(&spaced, 1, "let x = 1;\n").await;
    ed.notify(
        "moonkale/publishDiagnostics",
        json!({"uri": spaced, "source": "ts", "diagnostics": [
            {"range": {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 5}}, "severity": 1, "message": "Cannot find name 'x'.", "source": "ts", "code": 2304},
            {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 3}}, "severity": 2, "message": "w"}]}),
    )
    .await;
    ed.did_open(&sb.uri("clean.ts"), 1, "").await;
    ed.barrier().await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let all = tool_json(&c.tool("getDiagnostics", json!({})).await);
    let plain = format!("file://{}/a b.ts", sb.workspace.display());
    assert_eq!(all.as_array().unwrap().len(), 1);
    assert_eq!(all[0]["uri"], plain.as_str());
    assert_eq!(
        all[0]["diagnostics"][0],
        json!({"message": "Cannot find name 'x'.", "severity": "Error", "source": "ts", "code": "2304",
               "range": {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 5}}})
    );
    assert_eq!(all[0]["diagnostics"][1]["severity"], "Warning");
    let one = tool_json(&c.tool("getDiagnostics", json!({"uri": plain})).await);
    assert_eq!(one[0]["diagnostics"].as_array().unwrap().len(), 2);
    let none = tool_json(
        &c.tool("getDiagnostics", json!({"uri": sb.uri("clean.ts")}))
            .await,
    );
    assert_eq!(
        none,
        json!([{"uri": sb.uri("clean.ts"), "diagnostics": []}])
    );

    let closed = c
        .tool("close_tab", json!({"tab_name": "no such tab"}))
        .await;
    assert_eq!(
        closed,
        json!({"content": [{"type": "text", "text": "TAB_CLOSED"}]})
    );
    let all_closed = c.tool("closeAllDiffTabs", json!({})).await;
    assert_eq!(all_closed["content"][0]["text"], "CLOSED_0_DIFF_TABS");
    let unknown = c.request("tools/call", json!({"name": "x"})).await;
    assert_eq!(
        unknown["error"],
        json!({"code": -32601, "message": "Tool not found: x"})
    );
    let missing = c.request("tools/call", json!({"name": "openDiff", "arguments": {"old_file_path": "/x", "new_file_path": "/x", "tab_name": "t"}})).await;
    assert_eq!(missing["error"]["code"], -32602, "T1");
}

/// T11 and the state tools: openFile as old CLIs call it (empty texts
/// ignored; JSON answer when not frontmost) shows the file in the editor with
/// the text-anchored selection; selection, open editors, folders and dirty
/// state come from the hub.
#[tokio::test]
async fn t11_open_file_and_state_tools() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.workspace.join("src")).unwrap();
    std::fs::write(
        sb.workspace.join("src/lib.rs"),
        "fn a() {}\nfn target() {\n    body();\n}\n",
    )
    .unwrap();
    let (svc, port, token) = service(&sb).await;
    let (mut ed, uri) = editor(&svc, &sb, "vscode-like", "fn main() {\n    hello();\n}\n").await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-06-18").await;
    let lib = sb.workspace.join("src/lib.rs").display().to_string();
    let old_style = c
        .tool("openFile", json!({"filePath": lib, "preview": false, "startText": "", "endText": "", "selectToEndOfLine": false, "makeFrontmost": false}))
        .await;
    let answer = tool_json(&old_style);
    assert_eq!(
        (
            answer["success"].clone(),
            answer["filePath"].clone(),
            answer["lineCount"].clone()
        ),
        (json!(true), json!(lib), json!(5))
    );
    let shown = c
        .tool(
            "openFile",
            json!({"filePath": "src/lib.rs", "startText": "fn target", "endText": "}"}),
        )
        .await;
    assert_eq!(
        shown["content"][0]["text"],
        "Opened file and selected text from \"fn target\" to \"}\""
    );
    let mut shows = Vec::new();
    while shows.len() < 2 {
        let msg = ed.recv().await;
        if msg["method"] == "window/showDocument" {
            shows.push(msg);
        }
    }
    assert_eq!(shows[0]["params"]["takeFocus"], false);
    assert!(shows[0]["params"].get("selection").is_none());
    let show = &shows[1];
    assert_eq!(show["params"]["uri"], format!("file://{lib}"));
    // The first "}" after the start is the one closing the function.
    assert_eq!(
        show["params"]["selection"],
        json!({"start": {"line": 1, "character": 0}, "end": {"line": 3, "character": 1}})
    );

    ed.notify(
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": uri}, "selection": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 9}}}),
    )
    .await;
    ed.barrier().await;
    let sel = tool_json(&c.tool("getCurrentSelection", json!({})).await);
    assert_eq!(sel["success"], true);
    assert_eq!(sel["text"], "hello");
    assert_eq!(
        sel["filePath"],
        sb.workspace.join("src/main.rs").display().to_string()
    );
    let latest = tool_json(&c.tool("getLatestSelection", json!({})).await);
    assert_eq!(
        latest["selection"]["start"],
        json!({"line": 1, "character": 4})
    );
    let editors = tool_json(&c.tool("getOpenEditors", json!({})).await);
    assert_eq!(editors["tabs"][0]["isActive"], true);
    assert_eq!(editors["tabs"][0]["label"], "main.rs");
    let folders = tool_json(&c.tool("getWorkspaceFolders", json!({})).await);
    assert_eq!(
        folders["folders"][0]["path"],
        sb.workspace.display().to_string()
    );
    let main = sb.workspace.join("src/main.rs").display().to_string();
    assert_eq!(
        tool_json(
            &c.tool("checkDocumentDirty", json!({"filePath": main}))
                .await
        )["isDirty"],
        false
    );
    ed.did_change(&uri, 2, [0, 0, 0, 0], "// x\n").await;
    ed.barrier().await;
    assert_eq!(
        tool_json(
            &c.tool("checkDocumentDirty", json!({"filePath": main}))
                .await
        )["isDirty"],
        true
    );
    let not_open = tool_json(&c.tool("checkDocumentDirty", json!({"filePath": lib})).await);
    assert_eq!(not_open["success"], false);
}

/// N1–N3, N5: selection_changed carries 0-based lines, the selected text,
/// the absolute path; a cursor move sends empty text with isEmpty; a
/// whole-line selection ends at column 0; the current selection arrives
/// shortly after connecting; notifications have no id.
#[tokio::test]
async fn n1_to_n5_selection_changed() {
    let sb = Sandbox::new();
    let (svc, port, token) =
        service_with_env(&sb, &[("MOONKALE_SELECTION_INTERVAL_MS", "20")]).await;
    let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    let (mut ed, uri) = editor(&svc, &sb, "selector", &text).await;
    let path = sb.workspace.join("src/main.rs").display().to_string();
    let select = |s: (u32, u32), e: (u32, u32)| json!({"textDocument": {"uri": uri}, "selection": {"start": {"line": s.0, "character": s.1}, "end": {"line": e.0, "character": e.1}}});
    ed.notify("moonkale/selectionChanged", select((9, 0), (14, 7)))
        .await;
    ed.barrier().await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    // N1 (and the current selection shortly after connecting).
    let n = c.notification("selection_changed").await;
    assert!(n.get("id").is_none(), "N5");
    assert_eq!(n["params"]["filePath"], path.as_str());
    assert_eq!(
        n["params"]["selection"],
        json!({"start": {"line": 9, "character": 0}, "end": {"line": 14, "character": 7}, "isEmpty": false})
    );
    assert_eq!(
        n["params"]["text"],
        "line 10\nline 11\nline 12\nline 13\nline 14\nline 15"
    );
    // N2: a cursor move.
    ed.notify(
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": uri}, "cursor": {"line": 3, "character": 2}}),
    )
    .await;
    let n = c.notification("selection_changed").await;
    assert_eq!(n["params"]["text"], "");
    assert_eq!(
        n["params"]["selection"],
        json!({"start": {"line": 3, "character": 2}, "end": {"line": 3, "character": 2}, "isEmpty": true})
    );
    // N3: whole lines, ending at column 0 of the next line.
    ed.notify("moonkale/selectionChanged", select((4, 0), (6, 0)))
        .await;
    let n = c.notification("selection_changed").await;
    assert_eq!(
        n["params"]["selection"]["end"],
        json!({"line": 6, "character": 0})
    );
    assert_eq!(n["params"]["text"], "line 5\nline 6\n");
    // Only when it changed: the same selection again sends nothing; the next
    // change does.
    ed.notify("moonkale/selectionChanged", select((4, 0), (6, 0)))
        .await;
    ed.notify("moonkale/selectionChanged", select((0, 0), (0, 4)))
        .await;
    let n = c.notification("selection_changed").await;
    assert_eq!(n["params"]["text"], "line");
}

/// The current selection is sent again shortly after `tools/list`, even
/// unchanged: Claude Code may not have been listening for the first push.
#[tokio::test]
async fn selection_is_sent_again_after_tools_list() {
    let sb = Sandbox::new();
    let (svc, port, token) =
        service_with_env(&sb, &[("MOONKALE_SELECTION_INTERVAL_MS", "10")]).await;
    let (mut ed, uri) = editor(&svc, &sb, "selector", "one\ntwo\n").await;
    ed.notify(
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": uri}, "cursor": {"line": 1, "character": 1}}),
    )
    .await;
    ed.barrier().await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let first = c.notification("selection_changed").await;
    c.request("tools/list", Value::Null).await;
    let again = c.notification("selection_changed").await;
    assert_eq!(first["params"], again["params"]);
}

/// N4: "Send selection to Claude Code" (code action command) sends
/// at_mentioned with 0-based inclusive lines, queued while no CLI is
/// connected.
#[tokio::test]
async fn n4_at_mentioned_is_queued_until_a_client_connects() {
    let sb = Sandbox::new();
    let (svc, port, token) = service(&sb).await;
    let (mut ed, uri) = editor(&svc, &sb, "sender", "a\nb\nc\nd\ne\nf\ng\n").await;
    let range = json!({"start": {"line": 4, "character": 0}, "end": {"line": 7, "character": 0}});
    let actions = ed
        .call(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": range, "context": {"diagnostics": []}}),
        )
        .await;
    let command = actions[0]["command"].clone();
    assert_eq!(command["title"], "Send selection to Claude Code");
    let queued = ed
        .call(
            "workspace/executeCommand",
            json!({"command": command["command"], "arguments": command["arguments"]}),
        )
        .await;
    assert_eq!(queued["queued"], true);
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let n = c.notification("at_mentioned").await;
    assert_eq!(
        n["params"],
        json!({"filePath": sb.workspace.join("src/main.rs"), "lineStart": 4, "lineEnd": 6})
    );
    let sent = ed
        .call(
            "workspace/executeCommand",
            json!({"command": "moonkale.sendToClaude", "arguments": [uri]}),
        )
        .await;
    assert_eq!(sent["sent"], 1);
    let n = c.notification("at_mentioned").await;
    assert_eq!(
        n["params"],
        json!({"filePath": sb.workspace.join("src/main.rs")})
    );
}

/// The CLI's openDiff call for `path`.
fn open_diff(path: &str, contents: &str, tab: &str) -> Value {
    json!({"old_file_path": path, "new_file_path": path, "new_file_contents": contents, "tab_name": tab})
}

/// Sends openDiff without waiting (it answers only when the user decides).
/// Use ids of 50 and up: `IdeClient::request` numbers its own from 1.
async fn start_open_diff(c: &mut IdeClient, id: i64, args: Value) {
    c.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "openDiff", "arguments": args}}))
        .await;
}

/// The proposal document the editor was asked to show, opened in the editor.
async fn open_proposal(ed: &mut RawLsp) -> (String, String) {
    let show = ed.server_request("window/showDocument").await;
    let uri = show["params"]["uri"].as_str().unwrap().to_owned();
    assert!(uri.contains(moonkale_tests::PROPOSALS), "{uri}");
    let path = uri.strip_prefix("file://").unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    ed.did_open(&uri, 1, &text).await;
    (uri, text)
}

fn texts(result: &Value) -> Vec<String> {
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_owned())
        .collect()
}

/// T2: openDiff waits for the user; the proposal opens in the editor, the
/// user tweaks it and accepts: FILE_SAVED with the tweaked text, trailing
/// newline kept; the editor's unmodified buffer of the target gets the same
/// text; the proposal file is cleaned up.
#[tokio::test]
async fn t2_open_diff_accept_with_a_tweak() {
    let sb = Sandbox::new();
    let target = sb.workspace.join("src/main.rs");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::write(&target, "fn main() {\n    old();\n}\n").unwrap();
    let (svc, port, token) = service(&sb).await;
    let (mut ed, target_uri) = editor(&svc, &sb, "acceptor", "fn main() {\n    old();\n}\n").await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let tab = "✻ [Claude Code] main.rs (abc123) ⧉";
    start_open_diff(
        &mut c,
        50,
        open_diff(
            target.to_str().unwrap(),
            "fn main() {\n    new();\n}\n",
            tab,
        ),
    )
    .await;
    let (uri, text) = open_proposal(&mut ed).await;
    assert_eq!(text, "fn main() {\n    new();\n}\n");
    let st = sb.status().await;
    assert_eq!(
        st["claudeClients"][0]["pid"],
        std::process::id(),
        "ide_connected recorded"
    );
    assert_eq!(st["pendingProposals"][0]["tabName"], tab);
    // Still pending: a ping is answered first.
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
    ed.did_change(&uri, 2, [1, 4, 1, 7], "newer").await;
    let actions = ed
        .call("textDocument/codeAction", json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}}, "context": {"diagnostics": []}}))
        .await;
    let accept = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["command"]["command"] == "moonkale.acceptProposal")
        .unwrap()
        .clone();
    assert_eq!(accept["title"], "Accept Claude Code's edit to main.rs");
    ed.call("workspace/executeCommand", json!({"command": accept["command"]["command"], "arguments": accept["command"]["arguments"]})).await;
    let answer = c.response(50).await;
    assert_eq!(
        texts(&answer["result"]),
        vec![
            "FILE_SAVED".to_owned(),
            "fn main() {\n    newer();\n}\n".to_owned()
        ]
    );
    let sync = ed.server_request("workspace/applyEdit").await;
    let edit = &sync["params"]["edit"]["changes"][&target_uri][0];
    assert_eq!(edit["newText"], "fn main() {\n    newer();\n}\n");
    assert_eq!(edit["range"]["end"], json!({"line": 3, "character": 0}));
    let dir = std::path::Path::new(uri.strip_prefix("file://").unwrap())
        .parent()
        .unwrap()
        .to_owned();
    moonkale_tests::wait_until("the proposal to be cleaned up", || {
        let gone = !dir.exists();
        async move { gone.then_some(()) }
    })
    .await;
    assert_eq!(
        c.tool("close_tab", json!({"tab_name": tab})).await["content"][0]["text"],
        "TAB_CLOSED"
    );
}

/// T3: reject from the command (no argument: the newest proposal):
/// DIFF_REJECTED with the tab name, and the file is untouched.
#[tokio::test]
async fn t3_open_diff_reject() {
    let sb = Sandbox::new();
    let target = sb.workspace.join("a.txt");
    std::fs::write(&target, "one\n").unwrap();
    let (svc, port, token) = service(&sb).await;
    let (mut ed, _) = editor(&svc, &sb, "rejector", "x").await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    start_open_diff(
        &mut c,
        7,
        open_diff(target.to_str().unwrap(), "two\n", "tab-r"),
    )
    .await;
    open_proposal(&mut ed).await;
    ed.call(
        "workspace/executeCommand",
        json!({"command": "moonkale.rejectProposal", "arguments": []}),
    )
    .await;
    let answer = c.response(7).await;
    assert_eq!(texts(&answer["result"]), vec!["DIFF_REJECTED", "tab-r"]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "one\n");
    let none = ed
        .request(
            "workspace/executeCommand",
            json!({"command": "moonkale.rejectProposal", "arguments": []}),
        )
        .await;
    assert!(none.get("error").is_some(), "nothing left to reject");
}

/// T4, T7: close_tab while pending answers that openDiff DIFF_REJECTED and
/// itself TAB_CLOSED; closeAllDiffTabs rejects every pending one and counts.
#[tokio::test]
async fn t4_t7_closing_pending_diffs() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let path = |n: &str| sb.workspace.join(n).display().to_string();
    start_open_diff(&mut c, 101, open_diff(&path("a"), "a\n", "tab-a")).await;
    assert_eq!(
        c.tool("close_tab", json!({"tab_name": "tab-a"})).await["content"][0]["text"],
        "TAB_CLOSED"
    );
    assert_eq!(
        texts(&c.response(101).await["result"]),
        vec!["DIFF_REJECTED", "tab-a"]
    );
    start_open_diff(&mut c, 102, open_diff(&path("b"), "b\n", "tab-b")).await;
    start_open_diff(&mut c, 103, open_diff(&path("c"), "c\n", "tab-c")).await;
    assert_eq!(
        c.tool("closeAllDiffTabs", json!({})).await["content"][0]["text"],
        "CLOSED_2_DIFF_TABS"
    );
    assert_eq!(texts(&c.response(102).await["result"])[0], "DIFF_REJECTED");
    assert_eq!(texts(&c.response(103).await["result"])[0], "DIFF_REJECTED");
    assert_eq!(
        c.tool("closeAllDiffTabs", json!({})).await["content"][0]["text"],
        "CLOSED_0_DIFF_TABS"
    );
}

/// T5: a CLI that disconnects while its diff is pending has the proposal
/// withdrawn (its document removed); the editor can no longer accept it.
#[tokio::test]
async fn t5_client_disconnect_withdraws_its_diffs() {
    let sb = Sandbox::new();
    let (svc, port, token) = service(&sb).await;
    let (mut ed, _) = editor(&svc, &sb, "watcher", "x").await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    start_open_diff(
        &mut c,
        9,
        open_diff(
            &sb.workspace.join("n.txt").display().to_string(),
            "n\n",
            "tab-n",
        ),
    )
    .await;
    let (uri, _) = open_proposal(&mut ed).await;
    drop(c);
    // The editor is told, so a plugin can close the proposal's view.
    let closed = loop {
        let msg = ed.recv().await;
        if msg["method"] == "moonkale/proposalClosed" {
            break msg;
        }
    };
    let target = format!("file://{}", sb.workspace.join("n.txt").display());
    assert_eq!(
        closed["params"],
        json!({"uri": uri, "accepted": false, "target": target})
    );
    let path = std::path::PathBuf::from(uri.strip_prefix("file://").unwrap());
    moonkale_tests::wait_until("the withdrawn proposal to be removed", || {
        let gone = !path.exists();
        async move { gone.then_some(()) }
    })
    .await;
    let late = ed
        .request(
            "workspace/executeCommand",
            json!({"command": "moonkale.acceptProposal", "arguments": [uri]}),
        )
        .await;
    assert!(late.get("error").is_some(), "{late}");
}

/// T6: a proposal for a file that does not exist yet diffs against nothing,
/// and accepting returns its contents; nothing is written by the service.
#[tokio::test]
async fn t6_new_file_proposal() {
    let sb = Sandbox::new();
    let (svc, port, token) = service(&sb).await;
    let (mut ed, _) = editor(&svc, &sb, "creator", "x").await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let target = sb.workspace.join("brand/new.rs");
    start_open_diff(
        &mut c,
        4,
        open_diff(target.to_str().unwrap(), "pub fn x() {}\n", "tab-new"),
    )
    .await;
    let (uri, _) = open_proposal(&mut ed).await;
    let actions = ed
        .call("textDocument/codeAction", json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}}))
        .await;
    assert!(
        actions
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["command"]["command"] == "moonkale.revertHunk"),
        "{actions}"
    );
    ed.call(
        "workspace/executeCommand",
        json!({"command": "moonkale.acceptProposal", "arguments": ["tab-new"]}),
    )
    .await;
    assert_eq!(
        texts(&c.response(4).await["result"]),
        vec!["FILE_SAVED", "pub fn x() {}\n"]
    );
    assert!(!target.exists(), "the CLI writes the file, not the service");
}

/// Hunks: of two changes, the user reverts one in the proposal (a code
/// action on it, applied by the editor) and accepts: the answer keeps the
/// other change only.
#[tokio::test]
async fn accepting_some_hunks_and_reverting_others() {
    let sb = Sandbox::new();
    let target = sb.workspace.join("h.txt");
    let old: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&target, &old).unwrap();
    let (svc, port, token) = service(&sb).await;
    let (mut ed, _) = editor(&svc, &sb, "hunker", "x").await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    let proposed = old
        .replace("line 2\n", "LINE TWO\n")
        .replace("line 9\n", "LINE NINE\n");
    start_open_diff(
        &mut c,
        5,
        open_diff(target.to_str().unwrap(), &proposed, "tab-h"),
    )
    .await;
    let (uri, _) = open_proposal(&mut ed).await;
    let at = |line: u32| json!({"start": {"line": line, "character": 0}, "end": {"line": line, "character": 0}});
    let actions = ed
        .call(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": at(1), "context": {"diagnostics": []}}),
        )
        .await;
    let revert = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["command"]["command"] == "moonkale.revertHunk")
        .unwrap()
        .clone();
    assert_eq!(revert["command"]["arguments"][1], 0);
    ed.call(
        "workspace/executeCommand",
        json!({"command": "moonkale.revertHunk", "arguments": revert["command"]["arguments"]}),
    )
    .await;
    let apply = ed.server_request("workspace/applyEdit").await;
    let edit = apply["params"]["edit"]["changes"][&uri][0].clone();
    assert_eq!(
        edit,
        json!({"range": {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}}, "newText": "line 2\n"})
    );
    // The editor applies it, says so, and reports the change.
    ed.send(json!({"jsonrpc": "2.0", "id": apply["id"], "result": {"applied": true}}))
        .await;
    ed.did_change(&uri, 2, [1, 0, 2, 0], "line 2\n").await;
    ed.call(
        "workspace/executeCommand",
        json!({"command": "moonkale.acceptProposal", "arguments": [uri]}),
    )
    .await;
    let want = old.replace("line 9\n", "LINE NINE\n");
    assert_eq!(
        texts(&c.response(5).await["result"]),
        vec!["FILE_SAVED".to_owned(), want]
    );
}

/// Editors with `window.showMessage` get Accept/Reject buttons; clicking
/// Accept answers the diff.
#[tokio::test]
async fn accept_button_of_show_message_request() {
    let sb = Sandbox::new();
    let (svc, port, token) = service(&sb).await;
    let mut ed = svc.connect().await;
    ed.call(
        "initialize",
        json!({"clientInfo": {"name": "Neovim"}, "capabilities": {"window": {"showMessage": {"messageActionItem": {"additionalPropertiesSupport": true}}, "showDocument": {"support": true}}}}),
    )
    .await;
    ed.notify("initialized", json!({})).await;
    ed.barrier().await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    start_open_diff(
        &mut c,
        6,
        open_diff(
            &sb.workspace.join("b.txt").display().to_string(),
            "b\n",
            "tab-b",
        ),
    )
    .await;
    let ask = ed.server_request("window/showMessageRequest").await;
    assert_eq!(
        ask["params"]["actions"],
        json!([{"title": "Accept"}, {"title": "Reject"}])
    );
    ed.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"title": "Accept"}}))
        .await;
    assert_eq!(
        texts(&c.response(6).await["result"]),
        vec!["FILE_SAVED", "b\n"]
    );
}

/// Security 13: a client that floods requests without reading makes the
/// service stop reading it (memory stays bounded, others are served); answers
/// piling up past the 32 MiB hard cap for a client that does not read get it
/// dropped.
#[tokio::test]
async fn hostile_13_clients_that_do_not_read() {
    let sb = Sandbox::new();
    let (svc, port, token) = service(&sb).await;
    let (mut ed, _) = editor(&svc, &sb, "decider", "x").await;
    let mut flooder = IdeClient::connect(port, &token).await;
    flooder.initialize("2025-11-25").await;
    let before = moonkale_tests::rss_kib(svc.pid());
    let flood = async {
        for i in 0..300_000 {
            flooder
                .send(json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "ping"}))
                .await;
        }
    };
    // Our writes stall once the service stops reading us.
    assert!(
        tokio::time::timeout(Duration::from_secs(3), flood)
            .await
            .is_err(),
        "the service kept reading"
    );
    let grown = moonkale_tests::rss_kib(svc.pid()).saturating_sub(before);
    assert!(grown < 16 * 1024, "RSS grew by {grown} KiB");
    let mut other = IdeClient::connect(port, &token).await;
    other.initialize("2025-11-25").await;
    assert_eq!(
        other.request("ping", Value::Null).await["result"],
        json!({})
    );
    drop(flooder);

    // `other` answers pings meanwhile, as the CLI would: under load this
    // takes most of a minute.
    let lazy_client = async {
        let mut lazy = IdeClient::connect(port, &token).await;
        lazy.initialize("2025-11-25").await;
        let big = "x".repeat(10 << 20);
        // All six are read while nothing is queued (past 1 MiB queued the
        // service would stop reading this client). Socket buffers absorb
        // about one answer; the rest pass the 32 MiB cap.
        const PROPOSALS: i64 = 6;
        for i in 0..PROPOSALS {
            let path = sb
                .workspace
                .join(format!("big{i}.txt"))
                .display()
                .to_string();
            start_open_diff(
                &mut lazy,
                200 + i,
                open_diff(&path, &big, &format!("big-{i}")),
            )
            .await;
            ed.server_request("window/showDocument").await;
        }
        for i in 0..PROPOSALS {
            let args =
                json!({"command": "moonkale.acceptProposal", "arguments": [format!("big-{i}")]});
            // Once the client is dropped its remaining proposals are
            // withdrawn, so a late accept may fail.
            ed.request("workspace/executeCommand", args).await;
        }
        // The lazy client now reads: it gets what was on the wire, then the
        // end.
        let mut answers = 0;
        while let Some(msg) = lazy.try_recv().await {
            answers += usize::from(msg["result"]["content"][0]["text"] == "FILE_SAVED");
        }
        // try_recv returned None: the service closed the connection.
        assert!(answers < PROPOSALS as usize, "{answers} answers arrived");
    };
    other.answering_pings(lazy_client).await;
    assert_eq!(
        other.request("ping", Value::Null).await["result"],
        json!({})
    );
}

/// Security 36: special files named by tools (a FIFO, a socket, a folder,
/// `/dev/zero` behind a symlink, a 10 GB sparse file, a binary file) are
/// refused or read only up to the cap; nothing blocks.
#[tokio::test]
async fn hostile_36_special_files() {
    let sb = Sandbox::new();
    let ws = sb.workspace.clone();
    let fifo = std::ffi::CString::new(ws.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let _socket = std::os::unix::net::UnixListener::bind(ws.join("sock")).unwrap();
    std::fs::create_dir(ws.join("folder")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", ws.join("zero")).unwrap();
    std::fs::File::create(ws.join("sparse"))
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
    std::fs::write(ws.join("binary"), [0u8, 159, 146, 150, 255, 0, 1]).unwrap();
    let (_svc, port, token) = service(&sb).await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    for name in ["fifo", "sock", "folder", "zero"] {
        let path = ws.join(name).display().to_string();
        for (tool, args) in [
            (
                "openFile",
                json!({"filePath": path, "startText": "x", "makeFrontmost": false}),
            ),
            ("openDiff", open_diff(&path, "new\n", "tab")),
        ] {
            let started = std::time::Instant::now();
            let reply = c
                .request("tools/call", json!({"name": tool, "arguments": args}))
                .await;
            assert_eq!(reply["result"]["isError"], true, "{tool} {name}: {reply}");
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{tool} {name} blocked"
            );
        }
    }
    let sparse = c
        .tool(
            "openFile",
            json!({"filePath": ws.join("sparse"), "makeFrontmost": false}),
        )
        .await;
    assert_eq!(
        tool_json(&sparse)["success"],
        true,
        "read only up to the cap"
    );
    let binary = c
        .tool(
            "openFile",
            json!({"filePath": ws.join("binary"), "makeFrontmost": false}),
        )
        .await;
    assert_eq!(tool_json(&binary)["success"], true);
}

/// F4: a frame that arrives in pieces is buffered, not refused.
#[tokio::test]
async fn f4_truncated_frame_is_buffered() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(upgrade(port, &auth(&token)).as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    let ping = frame(
        true,
        false,
        1,
        br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    );
    let (first, rest) = ping.split_at(7);
    s.write_all(first).await.unwrap();
    s.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await; // the server sees half a frame
    s.write_all(rest).await.unwrap();
    let mut reply = [0u8; 64];
    let n = tokio::time::timeout(moonkale_tests::TIMEOUT, s.read(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply[0], 0x81, "a text frame back");
    assert!(String::from_utf8_lossy(&reply[2..n]).contains(r#""result":{}"#));
}

/// Security 56(d): pending proposals are capped; past the cap an openDiff
/// is refused at once and the service stays responsive.
#[tokio::test]
async fn pending_proposals_are_capped() {
    let sb = Sandbox::new();
    let (_svc, port, token) = service(&sb).await;
    let mut c = IdeClient::connect(port, &token).await;
    c.initialize("2025-11-25").await;
    for i in 0..33 {
        let path = sb.workspace.join(format!("f{i}.txt")).display().to_string();
        start_open_diff(
            &mut c,
            300 + i,
            open_diff(&path, "x\n", &format!("tab-{i}")),
        )
        .await;
    }
    let refused = c.response(332).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
    assert_eq!(
        c.tool("closeAllDiffTabs", json!({})).await["content"][0]["text"],
        "CLOSED_32_DIFF_TABS"
    );
}
