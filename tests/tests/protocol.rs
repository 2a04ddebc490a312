//! Protocol tests over real sockets and the real binaries: raw LSP JSON in,
//! replies and `status --json` asserted.

use std::process::Stdio;

use moonkale_tests::{RawLsp, Sandbox, editor, wait_until};
use serde_json::{Value, json};

/// A scripted editor on the unix socket: utf-8 is negotiated when offered,
/// incremental edits land, and `status --json` shows the editor, its
/// document's version and its cursor.
#[tokio::test]
async fn unix_socket_session_shows_in_status() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut ed = service.connect().await;
    let init = ed
        .initialize("scripted", &["utf-16", "utf-8"], Value::Null)
        .await;
    assert_eq!(init["capabilities"]["positionEncoding"], "utf-8");
    assert_eq!(init["capabilities"]["textDocumentSync"]["change"], 2);

    let uri = sb.uri("a.txt");
    ed.did_open(&uri, 1, "héllo 😀\nworld\n").await;
    // utf-8: "héllo " is 7 bytes, the emoji 4 more.
    ed.did_change(&uri, 2, [0, 11, 0, 11], "!").await;
    ed.did_change(&uri, 5, [1, 0, 1, 5], "wörld").await; // version gaps are fine
    ed.wait_for_version(&uri, 5).await;
    let doc = ed.document(&uri).await;
    assert_eq!(doc["text"], "héllo 😀!\nwörld\n");
    assert_eq!(doc["dirty"], true);

    let status = sb.status().await;
    let me = editor(&status, "scripted");
    assert_eq!(me["transport"], "unix");
    assert_eq!(me["positionEncoding"], "utf-8");
    assert_eq!(me["active"], true);
    assert_eq!(me["documents"][0]["uri"], uri.as_str());
    assert_eq!(me["documents"][0]["version"], 5);
    // The cursor is at the end of the last edit, in char columns.
    assert_eq!(
        me["selection"]["cursor"],
        json!({"line": 1, "character": 5})
    );
    assert_eq!(me["selection"]["source"], "edit");
    assert_eq!(status["workspace"], sb.workspace.to_str().unwrap());
    assert_eq!(status["pid"], service.info.pid);
}

/// Each editor gets its own encoding; the same edit expressed in utf-16 and
/// utf-32 columns lands in the same place.
#[tokio::test]
async fn encodings_are_negotiated_per_editor() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut vscode = service.connect().await;
    let mut other = service.connect().await;
    let a = vscode
        .initialize("vscode-like", &["utf-16"], Value::Null)
        .await;
    let b = other
        .initialize("utf32-editor", &["utf-32", "utf-16"], Value::Null)
        .await;
    assert_eq!(a["capabilities"]["positionEncoding"], "utf-16");
    assert_eq!(b["capabilities"]["positionEncoding"], "utf-32");
    let (ua, ub) = (sb.uri("a.txt"), sb.uri("b.txt"));
    vscode.did_open(&ua, 1, "a😀b").await;
    other.did_open(&ub, 1, "a😀b").await;
    vscode.did_change(&ua, 2, [0, 3, 0, 3], "X").await; // after the emoji: 1 + 2 code units
    other.did_change(&ub, 2, [0, 2, 0, 2], "X").await; // after the emoji: 2 chars
    vscode.wait_for_version(&ua, 2).await;
    other.wait_for_version(&ub, 2).await;
    assert_eq!(vscode.document(&ua).await["text"], "a😀Xb");
    assert_eq!(other.document(&ub).await["text"], "a😀Xb");
}

/// What plain editors already send reveals their cursor: code-action ranges,
/// request positions, edits, the Helix keymap command, and the custom
/// notification. The most recently active editor is the workspace's.
#[tokio::test]
async fn selection_is_inferred_from_plain_lsp_traffic() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut a = service.connect().await;
    let mut b = service.connect().await;
    a.initialize("editor-a", &["utf-16"], Value::Null).await;
    b.initialize("editor-b", &["utf-16"], Value::Null).await;
    let uri = sb.uri("s.txt");
    a.did_open(&uri, 1, "zero\none\ntwo\nthree\n").await;
    b.did_open(&uri, 1, "zero\none\ntwo\nthree\n").await;
    a.barrier().await;
    b.barrier().await;

    let sel = |status: &Value, who: &str| editor(status, who)["selection"].clone();
    let pos = |l: u32, c: u32| json!({"line": l, "character": c});

    let actions = a
        .call(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": {"start": pos(1, 0), "end": pos(3, 0)}, "context": {"diagnostics": []}}),
        )
        .await;
    assert_eq!(actions[0]["command"]["command"], "moonkale.sendToClaude");
    assert_eq!(
        actions[0]["command"]["arguments"][1],
        json!({"start": pos(1, 0), "end": pos(3, 0)})
    );
    let st = sb.status().await;
    assert_eq!(
        sel(&st, "editor-a"),
        json!({"uri": uri, "anchor": pos(1, 0), "cursor": pos(3, 0), "source": "codeAction"})
    );
    assert_eq!(st["activeEditor"], editor(&st, "editor-a")["id"]);

    let hover = b
        .call(
            "textDocument/hover",
            json!({"textDocument": {"uri": uri}, "position": pos(2, 99)}),
        )
        .await;
    assert_eq!(hover, Value::Null);
    let st = sb.status().await;
    // Column 99 clamps to the end of "two".
    assert_eq!(
        sel(&st, "editor-b"),
        json!({"uri": uri, "anchor": pos(2, 3), "cursor": pos(2, 3), "source": "hover"})
    );
    assert_eq!(st["activeEditor"], editor(&st, "editor-b")["id"]);

    a.notify(
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": uri}, "selection": {"start": pos(0, 1), "end": pos(0, 3)}, "cursor": pos(0, 1)}),
    )
    .await;
    a.call(
        "workspace/executeCommand",
        json!({"command": "moonkale.selection", "arguments": ["s.txt", 4, 2, 4, 4]}),
    )
    .await;
    let st = sb.status().await;
    // The Helix command is 1-based: line 4, column 2 -> (3, 1).
    assert_eq!(
        sel(&st, "editor-a"),
        json!({"uri": uri, "anchor": pos(3, 1), "cursor": pos(3, 1), "source": "executeCommand"})
    );
    assert_eq!(st["activeEditor"], editor(&st, "editor-a")["id"]);

    // The notification alone, then a code action with start > end (refused).
    a.notify(
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": uri}, "selection": {"start": pos(0, 1), "end": pos(0, 3)}, "cursor": pos(0, 1)}),
    )
    .await;
    let bad = a
        .request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": {"start": pos(2, 0), "end": pos(1, 0)}, "context": {"diagnostics": []}}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    let st = sb.status().await;
    assert_eq!(
        sel(&st, "editor-a"),
        json!({"uri": uri, "anchor": pos(0, 3), "cursor": pos(0, 1), "source": "moonkale/selectionChanged"})
    );
}

/// Diagnostics forwarded by one editor are stored per (document, source),
/// counted in status, served to other editors' pull requests (not echoed back
/// to the sender), and dropped when the sender detaches.
#[tokio::test]
async fn forwarded_diagnostics_are_stored_and_pulled() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut nvim = service.connect().await;
    let mut other = service.connect().await;
    nvim.initialize("forwarder", &["utf-8"], Value::Null).await;
    other.initialize("puller", &["utf-16"], Value::Null).await;
    let uri = sb.uri("d.py");
    nvim.did_open(&uri, 1, "é = 1\n").await;
    let diag = |sev: u32, c0: u32, c1: u32| json!({"range": {"start": {"line": 0, "character": c0}, "end": {"line": 0, "character": c1}}, "severity": sev, "message": "m"});
    nvim.notify(
        "moonkale/publishDiagnostics",
        json!({"uri": uri, "source": "ruff", "diagnostics": [diag(1, 0, 2), diag(2, 5, 6)]}),
    )
    .await;
    nvim.notify(
        "moonkale/publishDiagnostics",
        json!({"uri": uri, "source": "mypy", "diagnostics": [diag(4, 0, 1)]}),
    )
    .await;
    nvim.barrier().await;
    let pulled = other
        .call(
            "textDocument/diagnostic",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    assert_eq!(pulled["kind"], "full");
    let items = pulled["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    // utf-8 column 2 (after "é") is utf-16 column 1 for the puller.
    assert!(
        items
            .iter()
            .any(|d| d["range"]["end"]["character"] == 1 && d["severity"] == 1),
        "{pulled}"
    );
    let own = nvim
        .call(
            "textDocument/diagnostic",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    assert_eq!(own["items"], json!([]));

    let st = sb.status().await;
    let counts: Vec<(String, u64, u64, u64)> = st["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["source"].as_str().unwrap().to_owned(),
                c["errors"].as_u64().unwrap(),
                c["warnings"].as_u64().unwrap(),
                c["hints"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        vec![("mypy".into(), 0, 0, 1), ("ruff".into(), 1, 1, 0)]
    );

    nvim.notify(
        "moonkale/publishDiagnostics",
        json!({"uri": uri, "source": "mypy", "diagnostics": []}),
    )
    .await;
    nvim.barrier().await;
    let st = sb.status().await;
    assert_eq!(st["diagnostics"].as_array().unwrap().len(), 1);
    drop(nvim);
    let files = sb.files();
    let socket = files.read_info().unwrap().socket;
    wait_until("diagnostics of a detached editor to go", || {
        let socket = socket.clone();
        async move {
            let mut c = RawLsp::connect_unix(&socket).await;
            c.initialize("probe", &[], json!({"moonkaleRole": "observer"}))
                .await;
            let st = c.call("moonkale/status", Value::Null).await;
            st["diagnostics"]
                .as_array()
                .unwrap()
                .is_empty()
                .then_some(())
        }
    })
    .await;
}

/// Two editors hold one file: each buffer is tracked on its own, and the
/// file's content is answered from the editor that touched it last.
#[tokio::test]
async fn two_editors_keep_independent_buffers() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut a = service.connect().await;
    let mut b = service.connect().await;
    a.initialize("a", &[], Value::Null).await;
    b.initialize("b", &[], Value::Null).await;
    let uri = sb.uri("same.txt");
    a.did_open(&uri, 1, "from a").await;
    a.barrier().await;
    b.did_open(&uri, 7, "from b, longer").await;
    b.barrier().await;
    assert_eq!(a.document(&uri).await["text"], "from b, longer");
    a.did_change(&uri, 2, [0, 0, 0, 4], "FROM").await;
    a.wait_for_version(&uri, 2).await;
    assert_eq!(b.document(&uri).await["text"], "FROM a");
    let st = sb.status().await;
    assert_eq!(editor(&st, "a")["documents"][0]["version"], 2);
    assert_eq!(editor(&st, "b")["documents"][0]["version"], 7);
    assert_eq!(editor(&st, "b")["documents"][0]["bytes"], 14);
}

/// The human-readable status names editors, documents and diagnostics.
#[tokio::test]
async fn status_text_for_people() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut a = service.connect().await;
    a.initialize("Helix", &["utf-8"], Value::Null).await;
    a.did_open(&sb.uri("x.rs"), 3, "fn main() {}\n").await;
    a.wait_for_version(&sb.uri("x.rs"), 3).await;
    let out = sb
        .command("moonkale-service")
        .args(["status", "--workspace"])
        .arg(&sb.workspace)
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("1 editor attached"), "{text}");
    let port = service.info.ide_port.unwrap();
    assert!(
        text.contains(&format!("Claude Code IDE on 127.0.0.1:{port}")),
        "{text}"
    );
    assert!(
        text.contains("Helix test via unix, utf-8  [active]"),
        "{text}"
    );
    assert!(
        text.contains(&format!("v3     {}", sb.uri("x.rs"))),
        "{text}"
    );
}

/// `status` for a workspace with no service says so and fails.
#[tokio::test]
async fn status_without_a_service_fails_clearly() {
    let sb = Sandbox::new();
    let out = sb
        .command("moonkale-service")
        .args(["status", "--json", "--workspace"])
        .arg(&sb.workspace)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no moonkale-service runs for"));
}

/// TCP on loopback requires the service token in initializationOptions;
/// without it, or with a wrong one, the editor is refused and disconnected.
#[tokio::test]
async fn tcp_editors_must_present_the_token() {
    let sb = Sandbox::new();
    let service = sb.start_service(&["--lsp-tcp", "127.0.0.1:0"]).await;
    let addr = service.info.lsp_tcp.clone().expect("tcp address in info");
    let token = sb.files().read_token().unwrap();
    assert_eq!(token.len(), 64);

    for options in [Value::Null, json!({"moonkaleToken": "0".repeat(64)})] {
        let mut c = RawLsp::connect_tcp(&addr).await;
        let reply = c
            .request(
                "initialize",
                json!({"capabilities": {}, "initializationOptions": options}),
            )
            .await;
        assert_eq!(reply["error"]["code"], -32803, "{reply}");
        assert!(c.is_closed().await);
    }
    let mut c = RawLsp::connect_tcp(&addr).await;
    c.initialize("tcp-editor", &[], json!({"moonkaleToken": token}))
        .await;
    let st = sb.status().await;
    assert_eq!(editor(&st, "tcp-editor")["transport"], "tcp");
    assert_eq!(st["editors"].as_array().unwrap().len(), 1);
}

/// A TCP address that is not loopback is refused at start.
#[tokio::test]
async fn non_loopback_tcp_is_refused() {
    let sb = Sandbox::new();
    let out = sb
        .command("moonkale-service")
        .args(["serve", "--lsp-tcp", "0.0.0.0:0", "--workspace"])
        .arg(&sb.workspace)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));
    assert!(sb.files().read_info().is_none());
}

/// A second `serve` of the same workspace refuses to start.
#[tokio::test]
async fn one_service_per_workspace() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let out = sb
        .command("moonkale-service")
        .args(["serve", "--workspace"])
        .arg(&sb.workspace)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "already runs for {} (pid {})",
            sb.workspace.display(),
            service.info.pid
        )),
        "{err}"
    );
}

/// Several workspaces in one process: each has its own socket and state.
#[tokio::test]
async fn serve_several_workspaces() {
    let sb = Sandbox::new();
    let second = sb.root.join("ws2");
    std::fs::create_dir(&second).unwrap();
    let service = sb
        .start_service(&["--workspace", second.to_str().unwrap()])
        .await;
    let info2 = wait_until("second workspace info", || {
        let i = sb.files_for(&second).read_info();
        async move { i }
    })
    .await;
    assert_eq!(info2.pid, service.info.pid);
    assert_ne!(info2.socket, service.info.socket);
    let mut c = RawLsp::connect_unix(&info2.socket).await;
    c.initialize("in-ws2", &[], Value::Null).await;
    let st = sb.status().await;
    assert!(
        st["editors"].as_array().unwrap().is_empty(),
        "ws1 has no editors: {st}"
    );
}

fn spawn_shim(sb: &Sandbox) -> tokio::process::Child {
    let mut cmd = sb.command("moonkale-shim");
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd.spawn().expect("spawn moonkale-shim")
}

fn shim_client(child: &mut tokio::process::Child) -> RawLsp {
    RawLsp::new(child.stdout.take().unwrap(), child.stdin.take().unwrap())
}

async fn initialize_with_root(c: &mut RawLsp, sb: &Sandbox, name: &str) -> Value {
    let result = c
        .call(
            "initialize",
            json!({"processId": 42, "clientInfo": {"name": name}, "rootUri": format!("file://{}", sb.workspace.display()),
                   "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]}}}),
        )
        .await;
    c.notify("initialized", json!({})).await;
    result
}

fn kill_service_of(sb: &Sandbox) {
    if let Some(info) = sb.files().read_info() {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(info.pid as i32, libc::SIGTERM) };
    }
}

/// Processes running `serve` for this sandbox's workspace, from /proc.
fn services_for(sb: &Sandbox) -> usize {
    let needle = sb.workspace.to_str().unwrap().as_bytes().to_vec();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|cmd| {
            let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
            args.iter().any(|a| a.ends_with(b"moonkale-service"))
                && args.contains(&&b"serve"[..])
                && args.contains(&needle.as_slice())
        })
        .count()
}

/// The real `moonkale-shim` over stdio: it finds the workspace from the
/// editor's initialize, starts the service, and forwards both ways; `exit`
/// after `shutdown` ends it with 0, without `shutdown` with 1.
#[tokio::test]
async fn shim_starts_the_service_and_forwards() {
    let sb = Sandbox::new();
    let mut shim = spawn_shim(&sb);
    let mut c = shim_client(&mut shim);
    let init = initialize_with_root(&mut c, &sb, "through-shim").await;
    assert_eq!(init["capabilities"]["positionEncoding"], "utf-8");
    let uri = sb.uri("s.txt");
    c.did_open(&uri, 1, "abc").await;
    c.did_change(&uri, 2, [0, 3, 0, 3], "d").await;
    c.wait_for_version(&uri, 2).await;
    assert_eq!(c.document(&uri).await["text"], "abcd");
    let st = sb.status().await;
    assert_eq!(editor(&st, "through-shim")["transport"], "unix");
    assert_eq!(editor(&st, "through-shim")["processId"], 42);

    // Garbage from the editor is answered by the shim, which goes on.
    c.send_bytes(b"Content-Length: nope\r\n\r\n").await;
    let err = c.recv().await;
    assert_eq!(err["error"]["code"], -32700);
    assert_eq!(c.document(&uri).await["text"], "abcd");

    assert_eq!(c.call("shutdown", Value::Null).await, Value::Null);
    c.notify("exit", Value::Null).await;
    assert_eq!(shim.wait().await.unwrap().code(), Some(0));

    let mut shim2 = spawn_shim(&sb);
    let mut c2 = shim_client(&mut shim2);
    initialize_with_root(&mut c2, &sb, "second").await;
    c2.notify("exit", Value::Null).await;
    assert_eq!(shim2.wait().await.unwrap().code(), Some(1));
    kill_service_of(&sb);
}

/// The service going away under a plain shim: the editor is told with
/// `window/showMessage` and the shim exits 1 (once it panicked polling the
/// finished connection task again, exiting 101).
#[tokio::test]
async fn shim_reports_a_lost_service_and_exits_1() {
    let sb = Sandbox::new();
    let mut shim = spawn_shim(&sb);
    let mut c = shim_client(&mut shim);
    initialize_with_root(&mut c, &sb, "orphaned").await;
    kill_service_of(&sb);
    // What the service sent before it went (a registration, a log line)
    // may still be on its way: the shim's word is the showMessage.
    let msg = loop {
        let msg = c.recv().await;
        if msg["method"] == "window/showMessage" {
            break msg;
        }
    };
    assert_eq!(msg["params"]["type"], 1);
    assert!(
        msg["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("lost the connection")),
        "{msg}"
    );
    let status = tokio::time::timeout(moonkale_tests::TIMEOUT, shim.wait())
        .await
        .expect("the shim exits")
        .expect("wait");
    assert_eq!(status.code(), Some(1));
}

/// Two shims starting at the same moment end up with one service.
#[tokio::test]
async fn two_shims_at_once_start_one_service() {
    let sb = Sandbox::new();
    let mut s1 = spawn_shim(&sb);
    let mut s2 = spawn_shim(&sb);
    let mut c1 = shim_client(&mut s1);
    let mut c2 = shim_client(&mut s2);
    let (r1, r2) = tokio::join!(
        initialize_with_root(&mut c1, &sb, "shim-1"),
        initialize_with_root(&mut c2, &sb, "shim-2")
    );
    assert!(r1["capabilities"].is_object() && r2["capabilities"].is_object());
    let st = sb.status().await;
    assert_eq!(st["editors"].as_array().unwrap().len(), 2, "{st}");
    wait_until("the losing service to exit", || async {
        (services_for(&sb) == 1).then_some(())
    })
    .await;
    kill_service_of(&sb);
}

/// `moonkale-service lsp --stdio`: the same service for one editor on
/// stdin/stdout, exiting 0 after shutdown+exit and 1 on a bare exit.
#[tokio::test]
async fn lsp_stdio_mode() {
    let sb = Sandbox::new();
    for (shutdown_first, code) in [(true, 0), (false, 1)] {
        let mut cmd = sb.command("moonkale-service");
        cmd.args(["lsp", "--stdio", "--workspace"])
            .arg(&sb.workspace);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut c = shim_client(&mut child);
        c.initialize("stdio-editor", &["utf-32"], Value::Null).await;
        let uri = sb.uri("x");
        c.did_open(&uri, 1, "x").await;
        c.wait_for_version(&uri, 1).await;
        if shutdown_first {
            // The stdio service also serves the workspace socket.
            let st = sb.status().await;
            assert_eq!(editor(&st, "stdio-editor")["transport"], "stdio");
            c.call("shutdown", Value::Null).await;
        }
        c.notify("exit", Value::Null).await;
        assert_eq!(child.wait().await.unwrap().code(), Some(code));
    }
}
