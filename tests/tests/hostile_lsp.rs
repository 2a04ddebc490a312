//! Hostile cases 17–30 of the security notes (the LSP surface), against the
//! real binaries over real sockets and stdio. Cases 21, 22, 28 and 29 also
//! have in-process tests next to the code (framing and connection modules);
//! the 1 000 000-document cap of case 27 is tested in the hub with small
//! limits.
//!
//! Every test ends by checking that the service still serves a well-behaved
//! editor.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Stdio;

use moonkale_tests::{RawLsp, Sandbox, Service, editor};
use serde_json::{Value, json};

/// A well-behaved editor can still attach and be answered.
async fn assert_survives(service: &Service) {
    let mut c = service.connect().await;
    c.initialize("survivor", &[], json!({"moonkaleRole": "observer"}))
        .await;
    assert!(c.call("moonkale/status", Value::Null).await["editors"].is_array());
}

/// Sends `bytes` on a fresh socket connection and asserts it gets closed.
async fn assert_socket_closes(service: &Service, bytes: &[u8]) {
    let mut c = service.connect().await;
    c.send_bytes(bytes).await;
    assert!(
        c.is_closed().await,
        "connection stayed open after {:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
    );
}

/// `moonkale-service lsp --stdio` as a child with piped stdio.
fn stdio_service(sb: &Sandbox) -> (tokio::process::Child, RawLsp) {
    let mut cmd = sb.command("moonkale-service");
    cmd.args(["lsp", "--stdio", "--workspace"])
        .arg(&sb.workspace);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn lsp --stdio");
    let c = RawLsp::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    (child, c)
}

fn framing_violations() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "-1",
        "+5",
        "0x10",
        "1e3",
        &"9".repeat(400),
        &(64 * 1024 * 1024 + 1).to_string(),
    ]
    .iter()
    .map(|len| format!("Content-Length: {len}\r\n\r\n{{}}").into_bytes())
    .collect();
    v.push(b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}".to_vec());
    v.push(b"Content-Type: application/json\r\n\r\n{}".to_vec());
    v.push(b"Content-Length: 2\n\n{}".to_vec());
    v.push(b"Content-Length:2\r\n\r\n{}".to_vec());
    v
}

/// Case 17: header framing violations close a socket connection and get
/// -32700 on stdio, where the next valid message is still answered.
#[tokio::test]
async fn hostile_17_header_framing_violations() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    for bad in framing_violations() {
        assert_socket_closes(&service, &bad).await;
    }
    assert_survives(&service).await;

    let (mut child, mut c) = stdio_service(&sb);
    for bad in framing_violations() {
        c.send_bytes(&bad).await;
        let reply = c.request("moonkale/status", Value::Null).await;
        // The status request is answered "not initialized": the stream is in
        // step again after the -32700.
        assert_eq!(
            reply["error"]["code"],
            -32002,
            "after {:?}",
            String::from_utf8_lossy(&bad)
        );
        let parse_errors = c
            .notifications
            .drain(..)
            .filter(|m| m["error"]["code"] == -32700)
            .count();
        assert_eq!(
            parse_errors,
            1,
            "one -32700 for {:?}",
            String::from_utf8_lossy(&bad)
        );
    }
    c.initialize("after-garbage", &[], Value::Null).await;
    child.kill().await.unwrap();
}

/// Case 18: a 1 MiB header line and 10 000 headers are cut off at the caps
/// (8 KiB a line, 8 lines) without the service's memory growing by a MiB.
#[tokio::test]
async fn hostile_18_huge_header_line_and_many_headers() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    assert_survives(&service).await;
    let before = moonkale_tests::rss_kib(service.pid());
    let mut long = b"Content-Type: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 1 << 20));
    long.extend(b"\r\n\r\n");
    assert_socket_closes(&service, &long).await;
    assert_socket_closes(&service, "Content-Type: x\r\n".repeat(10_000).as_bytes()).await;
    let after = moonkale_tests::rss_kib(service.pid());
    assert!(
        after < before + 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    assert_survives(&service).await;
}

/// Case 19: an HTTP request smuggling an LSP frame into the unix socket or
/// the TCP port is closed at its first line, and the frame never runs.
#[tokio::test]
async fn hostile_19_cross_protocol_http_request() {
    let sb = Sandbox::new();
    let service = sb.start_service(&["--lsp-tcp", "127.0.0.1:0"]).await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"workspace/executeCommand","params":{"command":"moonkale.selection","arguments":["x",1,1,1,1]}}"#;
    let smuggled = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // On the unix socket, even after a proper initialize.
    let mut c = service.connect().await;
    c.initialize("victim", &[], Value::Null).await;
    c.send_bytes(smuggled.as_bytes()).await;
    assert!(c.is_closed().await);
    // On TCP, before any initialize.
    let mut t = RawLsp::connect_tcp(service.info.lsp_tcp.as_deref().unwrap()).await;
    t.send_bytes(smuggled.as_bytes()).await;
    assert!(t.is_closed().await);
    assert!(
        t.notifications.is_empty(),
        "nothing answered: {:?}",
        t.notifications
    );
    let st = sb.status().await;
    assert!(
        st["editors"].as_array().unwrap().is_empty(),
        "no selection was set: {st}"
    );
    assert_survives(&service).await;
}

/// Case 20: bodies that are not UTF-8 or not JSON, and wrong lengths: a
/// socket connection is closed; stdio answers -32700 and goes on; EOF in the
/// middle of a body ends the stdio service cleanly.
#[tokio::test]
async fn hostile_20_bad_bodies() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let bad_bodies: Vec<Vec<u8>> = vec![
        b"Content-Length: 4\r\n\r\n\xff\xfe{}".to_vec(),
        b"Content-Length: 5\r\n\r\nhello".to_vec(),
        // Shorter than the body: the rest is read as a header and fails.
        b"Content-Length: 3\r\n\r\n{\"jsonrpc\":\"2.0\"}".to_vec(),
    ];
    for bad in &bad_bodies {
        assert_socket_closes(&service, bad).await;
    }
    // Longer than the body, then the peer hangs up: closed too.
    let mut c = service.connect().await;
    c.send_bytes(b"Content-Length: 100\r\n\r\n{}").await;
    drop(c);
    assert_survives(&service).await;

    let (mut child, mut c) = stdio_service(&sb);
    for bad in &bad_bodies {
        c.send_bytes(bad).await;
        let reply = c.request("moonkale/status", Value::Null).await;
        assert_eq!(reply["error"]["code"], -32002);
        assert!(
            c.notifications
                .drain(..)
                .any(|m| m["error"]["code"] == -32700),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    c.send_bytes(b"Content-Length: 100\r\n\r\n{\"jsonrpc\"")
        .await;
    drop(c); // closes stdin mid-body
    let status = tokio::time::timeout(moonkale_tests::TIMEOUT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "EOF is a clean shutdown");
}

/// Case 22 over stdio: request before initialize, a second initialize,
/// requests after shutdown, and the exit codes of `exit`.
#[tokio::test]
async fn hostile_22_lifecycle_over_stdio() {
    let sb = Sandbox::new();
    let (mut child, mut c) = stdio_service(&sb);
    assert_eq!(
        c.request("textDocument/hover", json!({})).await["error"]["code"],
        -32002
    );
    c.initialize("lifecycle", &[], Value::Null).await;
    assert_eq!(
        c.request("initialize", json!({"capabilities": {}})).await["error"]["code"],
        -32600
    );
    assert_eq!(
        c.request("no/such/method", Value::Null).await["error"]["code"],
        -32601
    );
    c.call("shutdown", Value::Null).await;
    assert_eq!(
        c.request("moonkale/status", Value::Null).await["error"]["code"],
        -32600
    );
    c.notify("exit", Value::Null).await;
    assert_eq!(child.wait().await.unwrap().code(), Some(0));

    let (mut child, mut c) = stdio_service(&sb);
    c.initialize("lifecycle", &[], Value::Null).await;
    c.notify("exit", Value::Null).await;
    assert_eq!(child.wait().await.unwrap().code(), Some(1));
}

/// The `window/logMessage` texts the service sent on this connection.
fn log_messages(c: &mut RawLsp) -> Vec<String> {
    c.notifications
        .drain(..)
        .filter(|m| m["method"] == "window/logMessage")
        .map(|m| m["params"]["message"].as_str().unwrap().to_owned())
        .collect()
}

/// Case 23: didChange, didClose and didSave for a never-opened URI are
/// logged as protocol violations, reported to the editor, and change nothing.
#[tokio::test]
async fn hostile_23_events_for_unopened_documents() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut c = service.connect().await;
    c.initialize("ghost", &[], Value::Null).await;
    let open = sb.uri("open.txt");
    let ghost = sb.uri("never-opened.txt");
    c.did_open(&open, 1, "intact").await;
    c.did_change(&ghost, 2, [0, 0, 0, 0], "x").await;
    c.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": ghost}, "text": "x"}),
    )
    .await;
    c.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": ghost}}),
    )
    .await;
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": "not an object"}),
    )
    .await;
    c.barrier().await;
    let logs = log_messages(&mut c);
    assert_eq!(logs.len(), 4, "{logs:?}");
    assert!(logs[0].contains("didChange for") && logs[0].contains("not open"));
    assert!(logs[1].contains("didSave for"));
    assert!(logs[2].contains("didClose for"));
    assert!(logs[3].contains("invalid params"));
    let st = sb.status().await;
    let docs = editor(&st, "ghost")["documents"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(docs.len(), 1);
    assert_eq!(c.document(&open).await["text"], "intact");
    assert_survives(&service).await;
}

/// Case 24: a version that does not increase is refused and marks the
/// document desynced (reported with window/logMessage); gaps are fine; a
/// full-text change resyncs.
#[tokio::test]
async fn hostile_24_version_ordering() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut c = service.connect().await;
    c.initialize("versions", &[], Value::Null).await;
    let uri = sb.uri("v.txt");
    c.did_open(&uri, 5, "abc").await;
    c.did_change(&uri, 9, [0, 0, 0, 0], "1").await; // a gap: accepted
    c.did_change(&uri, 9, [0, 0, 0, 0], "2").await; // equal: refused
    c.did_change(&uri, 12, [0, 0, 0, 0], "3").await; // refused while desynced
    c.barrier().await;
    let logs = log_messages(&mut c);
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert!(
        logs[0].contains("version 9 is not newer than the current version 9"),
        "{logs:?}"
    );
    assert!(logs[1].contains("out of sync"), "{logs:?}");
    let doc = c.document(&uri).await;
    assert_eq!(
        (
            doc["text"].as_str().unwrap(),
            doc["version"].as_i64().unwrap(),
            doc["inSync"].as_bool().unwrap()
        ),
        ("1abc", 9, false)
    );
    let st = sb.status().await;
    assert_eq!(editor(&st, "versions")["documents"][0]["inSync"], false);

    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 3}, "contentChanges": [{"text": "fresh"}]}),
    )
    .await;
    c.did_change(&uri, 4, [0, 5, 0, 5], "!").await;
    let doc = c.document(&uri).await;
    assert_eq!(
        (
            doc["text"].as_str().unwrap(),
            doc["version"].as_i64().unwrap(),
            doc["inSync"].as_bool().unwrap()
        ),
        ("fresh!", 4, true)
    );
    c.did_change(&uri, 2, [0, 0, 0, 0], "old").await;
    c.barrier().await;
    assert_eq!(log_messages(&mut c).len(), 1);
    assert_survives(&service).await;
}

/// Case 25: out-of-range positions clamp as the LSP spec says; start > end
/// is -32602 for a request and a refused change; `[l,0]-[l,2^31-1]` replaces
/// exactly one line, never the rest of the file.
#[tokio::test]
async fn hostile_25_out_of_range_positions() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut c = service.connect().await;
    c.initialize("ranges", &["utf-16"], Value::Null).await;
    let uri = sb.uri("r.txt");
    c.did_open(&uri, 1, "one\ntwo\nthree\n").await;
    c.did_change(&uri, 2, [1, 0, 1, 2147483647], "TWO").await;
    c.did_change(&uri, 3, [0, 99, 0, 99], "!").await; // past the line end
    c.did_change(&uri, 4, [99, 0, 99, 5], "tail").await; // past EOF
    let doc = c.document(&uri).await;
    assert_eq!(doc["text"], "one!\nTWO\nthree\ntail");
    let reply = c
        .request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 2, "character": 0}, "end": {"line": 1, "character": 0}}, "context": {"diagnostics": []}}),
        )
        .await;
    assert_eq!(reply["error"]["code"], -32602);
    c.did_change(&uri, 5, [2, 0, 1, 0], "x").await;
    let doc = c.document(&uri).await;
    assert_eq!(
        (
            doc["text"].as_str().unwrap(),
            doc["inSync"].as_bool().unwrap()
        ),
        ("one!\nTWO\nthree\ntail", false)
    );
    assert_survives(&service).await;
}

/// Case 26: offsets inside a surrogate pair, a CRLF pair or a multi-byte
/// UTF-8 sequence clamp to a boundary in every encoding, with no panic.
#[tokio::test]
async fn hostile_26_offsets_inside_characters() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    // (encoding, column inside the emoji, expected text after inserting "|")
    let cases = [
        ("utf-16", 2, "a|😀b\r\nc€d"),
        ("utf-8", 3, "a|😀b\r\nc€d"),
        ("utf-32", 2, "a😀|b\r\nc€d"),
    ];
    for (i, (enc, col, want)) in cases.into_iter().enumerate() {
        let mut c = service.connect().await;
        c.initialize(&format!("enc-{enc}"), &[enc], Value::Null)
            .await;
        let uri = sb.uri(&format!("e{i}.txt"));
        c.did_open(&uri, 1, "a😀b\r\nc€d").await;
        c.did_change(&uri, 2, [0, col, 0, col], "|").await;
        assert_eq!(c.document(&uri).await["text"], want, "{enc}");
        // Past the end of line 0 lands before "\r\n", never between them.
        c.did_change(&uri, 3, [0, 1000, 0, 1000], "#").await;
        // Inside "€" (3 bytes in utf-8) on line 1.
        c.did_change(&uri, 4, [1, 2, 1, 2], "^").await;
        let text = c.document(&uri).await["text"].as_str().unwrap().to_owned();
        assert!(text.contains("b#\r\n"), "{enc}: {text:?}");
        let expected_line1 = if enc == "utf-8" { "c^€d" } else { "c€^d" };
        assert!(text.ends_with(expected_line1), "{enc}: {text:?}");
    }
    assert_survives(&service).await;
}

/// Case 27: a 100 MB didOpen exceeds the 64 MiB frame cap and closes that
/// connection; a document grown past 64 MiB by changes is refused and
/// desynced; URIs that are not file: or untitled: are refused.
#[tokio::test]
async fn hostile_27_oversized_documents_and_foreign_uris() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut big = service.connect().await;
    big.initialize("big", &[], Value::Null).await;
    big.did_open(&sb.uri("huge.txt"), 1, &"x".repeat(100_000_000))
        .await;
    assert!(big.is_closed().await);

    let mut c = service.connect().await;
    c.initialize("grower", &[], Value::Null).await;
    let uri = sb.uri("grow.txt");
    c.did_open(&uri, 1, &"a".repeat(40 << 20)).await;
    c.did_change(&uri, 2, [0, 0, 0, 0], &"b".repeat(30 << 20))
        .await;
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": "https://example.com/x.js", "languageId": "js", "version": 1, "text": "x"}}),
    )
    .await;
    c.barrier().await;
    let logs = log_messages(&mut c);
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert!(logs[0].contains("over the 67108864-byte cap"), "{logs:?}");
    assert!(
        logs[1].contains("only file: and untitled: URIs"),
        "{logs:?}"
    );
    let st = sb.status().await;
    let docs = editor(&st, "grower")["documents"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(docs.len(), 1);
    assert_eq!(
        (
            docs[0]["bytes"].as_u64().unwrap(),
            docs[0]["inSync"].as_bool().unwrap()
        ),
        (40 << 20, false)
    );
    assert_survives(&service).await;
}

/// Case 30: the socket is 0600 in a 0700 directory; another user cannot
/// connect; TCP without the token is refused (see also the protocol tests);
/// a planted file or symlink at the socket path is neither removed nor
/// followed, and another name is used.
#[tokio::test]
async fn hostile_30_socket_transport_auth() {
    let sb = Sandbox::new();
    let files = sb.files();
    let candidates: Vec<_> = files.socket_candidates().take(3).collect();
    let outside = sb.root.join("outside-secret");
    std::fs::write(&outside, "secret").unwrap();
    std::fs::write(&candidates[0], "planted").unwrap();
    std::os::unix::fs::symlink(&outside, &candidates[1]).unwrap();

    let service = sb.start_service(&["--lsp-tcp", "127.0.0.1:0"]).await;
    assert_eq!(service.info.socket, candidates[2]);
    assert_eq!(std::fs::read_to_string(&candidates[0]).unwrap(), "planted");
    assert_eq!(std::fs::read_link(&candidates[1]).unwrap(), outside);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");

    let sock = std::fs::symlink_metadata(&service.info.socket).unwrap();
    assert_eq!(sock.permissions().mode() & 0o777, 0o600);
    let dir = std::fs::symlink_metadata(service.info.socket.parent().unwrap()).unwrap();
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);
    assert_eq!(sock.uid(), unsafe { libc::getuid() });
    for f in [files.info_path(), files.token_path()] {
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600,
            "{}",
            f.display()
        );
    }

    if unsafe { libc::getuid() } == 0 {
        // As root, try as `nobody`: the kernel must refuse the connect.
        let out = std::process::Command::new("python3")
            .args(["-c", "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('connected')\nexcept OSError as e: print(e.errno)"])
            .arg(&service.info.socket)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "13",
            "EACCES: {out:?}"
        );
    }

    let mut t = RawLsp::connect_tcp(service.info.lsp_tcp.as_deref().unwrap()).await;
    let reply = t.request("initialize", json!({"capabilities": {}})).await;
    assert!(reply.get("error").is_some());
    assert!(t.is_closed().await);

    let log = std::fs::read_to_string(sb.root.join("service.log")).unwrap();
    let token = files.read_token().unwrap();
    assert!(!log.contains(&token), "the token is never logged");
    assert_survives(&service).await;
}

use std::os::unix::process::CommandExt as _;
