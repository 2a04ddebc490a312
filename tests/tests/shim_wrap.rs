//! `moonkale-shim -- <server> <args…>`: the shim wrapping a real language
//! server (python-lsp-server, installed by scripts/install-test-peers.sh into
//! .peers/pylsp-venv, or $MOONKALE_PYLSP). The test is the editor, speaking
//! raw LSP frames on the shim's stdio; Claude Code's view is checked on the
//! IDE WebSocket.

use std::path::PathBuf;
use std::process::Stdio;

use moonkale_service::runtime::{ServiceInfo, write_new_private};
use moonkale_tests::{IdeClient, RawLsp, Sandbox, Service, TIMEOUT, editor, ide_lock, tool_json};
use serde_json::{Value, json};

fn pylsp() -> PathBuf {
    moonkale_tests::pylsp_bin()
}

struct Wrapped {
    shim: tokio::process::Child,
    ed: RawLsp,
}

/// Starts `moonkale-shim -- <argv>` as the editor would.
fn spawn_wrapped(sb: &Sandbox, argv: &[&str]) -> Wrapped {
    let mut cmd = sb.command("moonkale-shim");
    cmd.arg("--")
        .args(argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut shim = cmd.spawn().expect("spawn moonkale-shim");
    let ed = RawLsp::new(shim.stdout.take().unwrap(), shim.stdin.take().unwrap());
    Wrapped { shim, ed }
}

/// The editor's initialize (Helix-like capabilities, with progress support so
/// pylsp sends `window/workDoneProgress/create`); returns the result.
async fn initialize(ed: &mut RawLsp, sb: &Sandbox, name: &str) -> Value {
    let result = ed
        .call(
            "initialize",
            json!({"processId": std::process::id(), "clientInfo": {"name": name, "version": "test"},
                   "rootUri": format!("file://{}", sb.workspace.display()),
                   "workspaceFolders": [{"uri": format!("file://{}", sb.workspace.display()), "name": "ws"}],
                   "capabilities": {
                       "general": {"positionEncodings": ["utf-8", "utf-32", "utf-16"]},
                       "window": {"workDoneProgress": true},
                       "workspace": {"configuration": true},
                       "textDocument": {"hover": {"contentFormat": ["markdown", "plaintext"]},
                                        "publishDiagnostics": {}}}}),
        )
        .await;
    ed.notify("initialized", json!({})).await;
    result
}

async fn open_python(ed: &mut RawLsp, sb: &Sandbox, name: &str, text: &str) -> String {
    std::fs::write(sb.workspace.join(name), text).unwrap();
    let uri = sb.uri(name);
    ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}),
    )
    .await;
    uri
}

/// Reads messages until `pick` returns something, answering the server's
/// requests on the way (`null`, as an editor would); what is skipped is kept
/// in `ed.notifications`.
async fn until<T>(ed: &mut RawLsp, mut pick: impl FnMut(&Value) -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out; got {:#?}",
            ed.notifications
        );
        let msg = ed.recv().await;
        if let Some(v) = pick(&msg) {
            return v;
        }
        if msg.get("method").is_some() && msg.get("id").is_some() {
            ed.send(json!({"jsonrpc": "2.0", "id": msg["id"], "result": null}))
                .await;
        }
        ed.notifications.push(msg);
    }
}

/// The diagnostics pylsp publishes for `uri` once pyflakes found `needle`.
async fn diagnostics_with(ed: &mut RawLsp, uri: &str, needle: &str) -> Value {
    until(ed, |m| {
        (m["method"] == "textDocument/publishDiagnostics"
            && m["params"]["uri"] == uri
            && m["params"]["diagnostics"]
                .as_array()?
                .iter()
                .any(|d| d["message"].as_str().is_some_and(|s| s.contains(needle))))
        .then(|| m["params"]["diagnostics"].clone())
    })
    .await
}

async fn ide(sb: &Sandbox, svc: &Service) -> IdeClient {
    let (port, lock) = ide_lock(sb, svc);
    let mut c = IdeClient::connect(port, lock["authToken"].as_str().unwrap()).await;
    c.initialize("2025-11-25").await;
    c
}

async fn shutdown(mut w: Wrapped) {
    let resp = w.ed.request("shutdown", Value::Null).await;
    assert!(resp.get("error").is_none(), "{resp}");
    w.ed.notify("exit", Value::Null).await;
    let status = tokio::time::timeout(TIMEOUT, w.shim.wait())
        .await
        .expect("the shim exits after exit")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// 1. pyflakes' diagnostic reaches the editor, and the service got its copy
/// (`moonkale/publishDiagnostics`, source `pylsp`): Claude Code's
/// `getDiagnostics` returns it. The service negotiated the server's encoding.
#[tokio::test]
async fn server_diagnostics_reach_the_editor_and_claude_code() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let pylsp = pylsp();
    let mut w = spawn_wrapped(&sb, &[pylsp.to_str().unwrap()]);
    let init = initialize(&mut w.ed, &sb, "helix-wrapped").await;
    assert_eq!(init["serverInfo"]["name"], "pylsp", "{init}");
    let uri = open_python(&mut w.ed, &sb, "a.py", "import os\nprint(undefined_name)\n").await;
    let diags = diagnostics_with(&mut w.ed, &uri, "undefined name 'undefined_name'").await;
    assert!(
        diags
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["source"] == "pyflakes"),
        "{diags}"
    );

    let mut c = ide(&sb, &svc).await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let got = loop {
        let got = tool_json(&c.tool("getDiagnostics", json!({"uri": uri})).await);
        let found = got[0]["diagnostics"].as_array().is_some_and(|ds| {
            ds.iter().any(|d| {
                d["message"] == "undefined name 'undefined_name'" && d["severity"] == "Error"
            })
        });
        if found {
            break got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "service never got it: {got}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    };
    let d = got[0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["message"] == "undefined name 'undefined_name'")
        .unwrap();
    assert_eq!(
        d["range"]["start"],
        json!({"line": 1, "character": 6}),
        "{d}"
    );

    // The service speaks the encoding pylsp chose (it announces none: utf-16).
    let st = w.ed.call("moonkale/status", Value::Null).await;
    let me = editor(&st, "helix-wrapped");
    let server_encoding = init["capabilities"]["positionEncoding"]
        .as_str()
        .unwrap_or("utf-16");
    assert_eq!(me["positionEncoding"], server_encoding, "{st}");
    assert_eq!(me["documents"][0]["uri"], uri.as_str());
    assert_eq!(st["diagnostics"][0]["source"], "pylsp", "{st}");
    shutdown(w).await;
}

/// 2. Hover comes from the real server, through the shim.
#[tokio::test]
async fn hover_from_the_real_server() {
    let sb = Sandbox::new();
    let _svc = sb.start_service(&[]).await;
    let pylsp = pylsp();
    let mut w = spawn_wrapped(&sb, &[pylsp.to_str().unwrap()]);
    initialize(&mut w.ed, &sb, "helix-hover").await;
    let uri = open_python(
        &mut w.ed,
        &sb,
        "h.py",
        "def greet(name):\n    \"\"\"Says hello to NAME.\"\"\"\n    return name\n\ngreet('x')\n",
    )
    .await;
    let hover =
        w.ed.call(
            "textDocument/hover",
            json!({"textDocument": {"uri": uri}, "position": {"line": 4, "character": 1}}),
        )
        .await;
    let text = hover["contents"].to_string();
    assert!(text.contains("Says hello to NAME."), "{hover}");
    shutdown(w).await;
}

/// 3. The server's own request (`window/workDoneProgress/create`, sent by
/// pylsp before linting) reaches the editor with its id; the editor's answer
/// goes back to the server: pylsp, which waits up to 1 s for it and logs a
/// warning otherwise, logs none, and goes on (progress, diagnostics).
#[tokio::test]
async fn server_requests_reach_the_editor_and_answers_go_back() {
    let sb = Sandbox::new();
    let _svc = sb.start_service(&[]).await;
    let pylsp = pylsp();
    let log = sb.root.join("pylsp.log");
    let mut w = spawn_wrapped(
        &sb,
        &[pylsp.to_str().unwrap(), "--log-file", log.to_str().unwrap()],
    );
    initialize(&mut w.ed, &sb, "helix-progress").await;
    let uri = open_python(&mut w.ed, &sb, "p.py", "print(nope)\n").await;
    let create = until(&mut w.ed, |m| {
        (m["method"] == "window/workDoneProgress/create").then(|| m.clone())
    })
    .await;
    let token = create["params"]["token"].clone();
    assert!(
        create["id"].is_string() || create["id"].is_number(),
        "{create}"
    );
    w.ed.send(json!({"jsonrpc": "2.0", "id": create["id"], "result": null}))
        .await;
    let begin = until(&mut w.ed, |m| {
        (m["method"] == "$/progress" && m["params"]["token"] == token).then(|| m.clone())
    })
    .await;
    assert_eq!(begin["params"]["value"]["kind"], "begin", "{begin}");
    diagnostics_with(&mut w.ed, &uri, "undefined name 'nope'").await;
    shutdown(w).await;
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log.contains("error while trying to initialize progress"),
        "pylsp did not get the editor's answer:\n{log}"
    );
}

/// 4. Code actions merge the server's and the service's; initialize lists
/// the service's commands; a service command goes to the service and its
/// answer comes back under the editor's id.
#[tokio::test]
async fn code_actions_and_commands_merge() {
    let sb = Sandbox::new();
    let _svc = sb.start_service(&[]).await;
    let pylsp = pylsp();
    let mut w = spawn_wrapped(&sb, &[pylsp.to_str().unwrap()]);
    let init = initialize(&mut w.ed, &sb, "helix-actions").await;
    let commands = init["capabilities"]["executeCommandProvider"]["commands"]
        .as_array()
        .unwrap_or_else(|| panic!("no commands: {init}"));
    for c in ["moonkale.selection", "moonkale.sendToClaude"] {
        assert!(commands.iter().any(|have| have == c), "{c} missing: {init}");
    }
    assert!(
        !matches!(
            init["capabilities"]["codeActionProvider"],
            Value::Null | Value::Bool(false)
        ),
        "{init}"
    );
    let uri = open_python(&mut w.ed, &sb, "c.py", "x = 1\ny = 2\n").await;
    let range = json!({"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}});
    let actions =
        w.ed.call(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": range, "context": {"diagnostics": []}}),
        )
        .await;
    let titles: Vec<&str> = actions
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {actions}"))
        .iter()
        .filter_map(|a| a["title"].as_str())
        .collect();
    assert!(
        titles.contains(&"Send selection to Claude Code"),
        "{actions}"
    );

    // `moonkale.selection` is the service's: answered under the editor's id,
    // and the service now holds the selection.
    let resp =
        w.ed.request(
            "workspace/executeCommand",
            json!({"command": "moonkale.selection", "arguments": ["c.py", 2, 1, 2, 2]}),
        )
        .await;
    assert!(resp.get("error").is_none(), "{resp}");
    let st = w.ed.call("moonkale/status", Value::Null).await;
    let sel = &editor(&st, "helix-actions")["selection"];
    assert_eq!(sel["uri"], uri.as_str(), "{st}");
    assert_eq!(sel["source"], "executeCommand", "{st}");
    shutdown(w).await;
}

/// 5. A server that cannot start: the editor is told (`window/showMessage`
/// type 1) and the shim goes on as the plain shim.
#[tokio::test]
async fn a_server_that_cannot_start_leaves_the_plain_shim() {
    let sb = Sandbox::new();
    let _svc = sb.start_service(&[]).await;
    let missing = sb.root.join("no-such-language-server");
    let mut w = spawn_wrapped(&sb, &[missing.to_str().unwrap(), "--stdio"]);
    let init = initialize(&mut w.ed, &sb, "helix-alone").await;
    assert_eq!(init["serverInfo"]["name"], "moonkale-service", "{init}");
    let shown =
        w.ed.notifications
            .iter()
            .find(|m| m["method"] == "window/showMessage")
            .cloned()
            .unwrap_or_else(|| panic!("no showMessage: {:#?}", w.ed.notifications));
    assert_eq!(shown["params"]["type"], 1);
    assert!(
        shown["params"]["message"]
            .as_str()
            .unwrap()
            .contains("no-such-language-server"),
        "{shown}"
    );
    let uri = open_python(&mut w.ed, &sb, "z.py", "z = 1\n").await;
    let st = w.ed.call("moonkale/status", Value::Null).await;
    let me = editor(&st, "helix-alone");
    assert_eq!(me["documents"][0]["uri"], uri.as_str(), "{st}");
    shutdown(w).await;
}

/// A language server that answers `initialize` and dies at the first
/// `textDocument/hover` (exit 7): a stand-in, since a real one cannot be made
/// to crash on cue.
const DYING_SERVER: &str = r#"
import json, sys
def read():
    headers = {}
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    return json.loads(sys.stdin.buffer.read(int(headers["content-length"])))
def write(msg):
    body = json.dumps(msg).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()
while True:
    msg = read()
    if msg.get("method") == "initialize":
        write({"jsonrpc": "2.0", "id": msg["id"], "result": {"capabilities": {"hoverProvider": True}, "serverInfo": {"name": "dying"}}})
    elif msg.get("method") == "textDocument/hover":
        sys.exit(7)
"#;

/// 6. The server dies mid-session: the request it owed is answered with an
/// error, the editor is told once (`showMessage` type 1 with the exit), and
/// the shim goes on as the plain shim, so the service keeps its documents.
#[tokio::test]
async fn a_server_that_dies_mid_session_leaves_the_plain_shim() {
    let sb = Sandbox::new();
    let _svc = sb.start_service(&[]).await;
    let script = sb.root.join("dying-server.py");
    std::fs::write(&script, DYING_SERVER).unwrap();
    let mut w = spawn_wrapped(&sb, &["python3", script.to_str().unwrap()]);
    let init = initialize(&mut w.ed, &sb, "helix-crash").await;
    assert_eq!(init["serverInfo"]["name"], "dying", "{init}");
    let uri = open_python(&mut w.ed, &sb, "d.py", "d = 1\n").await;
    let hover =
        w.ed.request(
            "textDocument/hover",
            json!({"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}}),
        )
        .await;
    assert!(
        hover.get("error").is_some(),
        "the dead server's hover: {hover}"
    );
    let shown = match w
        .ed
        .notifications
        .iter()
        .find(|m| m["method"] == "window/showMessage")
        .cloned()
    {
        Some(m) => m,
        None => {
            until(&mut w.ed, |m| {
                (m["method"] == "window/showMessage").then(|| m.clone())
            })
            .await
        }
    };
    assert_eq!(shown["params"]["type"], 1, "{shown}");
    assert!(
        shown["params"]["message"].as_str().unwrap().contains('7'),
        "the exit status is named: {shown}"
    );
    // The service still has the editor and its documents; new ones too.
    let later = open_python(&mut w.ed, &sb, "e.py", "e = 2\n").await;
    w.ed.wait_for_version(&later, 1).await;
    let st = w.ed.call("moonkale/status", Value::Null).await;
    let me = editor(&st, "helix-crash");
    let uris: Vec<&str> = me["documents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["uri"].as_str())
        .collect();
    assert!(
        uris.contains(&uri.as_str()) && uris.contains(&later.as_str()),
        "{st}"
    );
    shutdown(w).await;
}

/// 7. The service's half is bounded and its loss survivable. A stand-in
/// service (its info file and socket where the real one's would be) answers
/// `initialize` and nothing else: the editor's code action still gets the
/// server's answer, after the shim's 1 s wait, although the service was asked.
/// Then the stand-in goes away: the editor is told, the server's features go
/// on (hover), and a request for the service gets an error, not silence.
#[tokio::test]
async fn a_stalled_then_lost_service_leaves_the_server_working() {
    let sb = Sandbox::new();
    let files = sb.files();
    let socket = sb.runtime.join("stand-in.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    let info = ServiceInfo {
        pid: std::process::id(),
        workspace: sb.workspace.clone(),
        socket: socket.clone(),
        lsp_tcp: None,
        remote: None,
        token_file: files.token_path(),
        ide_port: None,
        version: "stand-in".into(),
    };
    write_new_private(&files.info_path(), &serde_json::to_vec(&info).unwrap()).expect("info file");

    let pylsp = pylsp();
    let mut w = spawn_wrapped(&sb, &[pylsp.to_str().unwrap()]);
    // The shim connects once the editor's initialize named the workspace.
    let stand_in = async {
        let (stream, _) = tokio::time::timeout(TIMEOUT, listener.accept())
            .await
            .expect("the shim connects")
            .expect("accept");
        let (read, write) = stream.into_split();
        let mut service = RawLsp::new(read, write);
        let init = service.recv().await;
        assert_eq!(init["method"], "initialize", "{init}");
        service
            .send(
                json!({"jsonrpc": "2.0", "id": init["id"], "result": {"capabilities": {
                "codeActionProvider": true,
                "executeCommandProvider": {"commands": ["moonkale.sendToClaude"]}}}}),
            )
            .await;
        service
    };
    let (init, mut service) = tokio::join!(initialize(&mut w.ed, &sb, "helix-stalled"), stand_in);
    assert_eq!(init["serverInfo"]["name"], "pylsp", "{init}");

    let uri = open_python(&mut w.ed, &sb, "s.py", "import os\n").await;
    let range = json!({"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}});
    w.ed.send(json!({"jsonrpc": "2.0", "id": 900, "method": "textDocument/codeAction",
                     "params": {"textDocument": {"uri": uri}, "range": range, "context": {"diagnostics": []}}}))
        .await;
    let actions = until(&mut w.ed, |m| (m["id"] == 900).then(|| m.clone())).await;
    assert!(actions["result"].is_array(), "{actions}");
    let asked = loop {
        let msg = service.recv().await;
        if msg["method"] == "textDocument/codeAction" {
            break msg;
        }
    };
    assert_eq!(asked["params"]["textDocument"]["uri"], uri.as_str());

    drop(service);
    drop(listener);
    let lost = until(&mut w.ed, |m| {
        (m["method"] == "window/showMessage").then(|| m["params"]["message"].clone())
    })
    .await;
    assert!(
        lost.as_str()
            .is_some_and(|m| m.contains("lost the connection")),
        "{lost}"
    );
    w.ed.send(json!({"jsonrpc": "2.0", "id": 901, "method": "textDocument/hover",
                     "params": {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 8}}}))
        .await;
    let hover = until(&mut w.ed, |m| (m["id"] == 901).then(|| m.clone())).await;
    assert!(hover.get("error").is_none(), "{hover}");
    w.ed.send(json!({"jsonrpc": "2.0", "id": 902, "method": "moonkale/status"}))
        .await;
    let refused = until(&mut w.ed, |m| (m["id"] == 902).then(|| m.clone())).await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not connected")),
        "{refused}"
    );
    shutdown(w).await;
}
