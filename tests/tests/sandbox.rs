//! Claude Code inside a sandbox keeps its IDE link: the real CLI 2.1.332 in
//! a real jail (its own network namespace, whose 127.0.0.1 is not the
//! host's, and its own HOME; the host's HOME and the service's runtime
//! directory hidden: `moonkale_tests::jail`), started with `moonkale-service
//! claude --sandbox -- <enter the jail> claude`, linked to the workspace's
//! service through a sandbox link (a unix socket in the workspace). And the
//! hostile side: what a process in the sandbox can do to the link's socket,
//! which is everything the sandbox can reach of the service.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use moonkale_tests::claude_cli::{ClaudeConfig, claude_bin, edit_result, seed_home};
use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::lsp::{Client, plain_caps};
use moonkale_tests::world::World;
use moonkale_tests::{
    IdeClient, LinkClient, STEP, Sandbox, TIMEOUT, next_selection_in, poll_until,
    selection_with_text, tool_json,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The link sockets in the workspace's root.
fn link_sockets(ws: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(ws)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(".moonkale-link-") && n.ends_with(".sock"))
        })
        .collect();
    found.sort();
    found
}

/// The lock files in a HOME's `~/.claude/ide`.
fn locks(home: &Path) -> Vec<Value> {
    std::fs::read_dir(home.join(".claude/ide"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect()
}

/// A sandbox link opened by a front end of its own (dropping it closes
/// the link): the socket and the token.
async fn open_link(w: &World, name: &str) -> (Client, PathBuf, String) {
    let mut opener = w.client(name, plain_caps()).await;
    let link = opener
        .call("moonkale/terminal/sandboxLink", Value::Null)
        .await;
    let socket = PathBuf::from(link["socket"].as_str().expect("a socket"));
    let token = link["token"].as_str().expect("a token").to_owned();
    (opener, socket, token)
}

/// (1) The whole flow, as a user who runs Claude Code jailed: the CLI in
/// the jail cannot reach the service's IDE port, yet once started through
/// `moonkale-service claude --sandbox` it is linked: the editor's
/// selection reaches the model, the model's Edit opens as a proposal in
/// the editor, the user's tweaked accept is written, `getDiagnostics`
/// returns what the editor published; the lock file is the jail's (none
/// is added on the host), and quitting Claude Code closes the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_in_a_sandbox_keeps_its_ide_link() {
    let mut w = World::builder()
        .jailed()
        .file("hello.txt", "hello world\nsecond line\n")
        .start()
        .await;
    let path = w.path("hello.txt");
    let file = path.display().to_string();
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "edit hello",
                Reply::tool_use("Read", json!({"file_path": file})),
            )
            .after_tool(
                "Read",
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": file, "old_string": "hello world",
                           "new_string": "hello EDITED", "replace_all": false}),
                ),
            )
            .after_tool(
                "Edit",
                Reply::tool_use("mcp__ide__getDiagnostics", json!({})),
            )
            .after_tool("mcp__ide__getDiagnostics", Reply::text("SANDBOX_DONE")),
    );
    // The jail's loopback is its own: the service's IDE port is not on it.
    let ide_port = w.ide_port();
    let probe = w.jail().run(&[
        "bash",
        "-c",
        &format!("exec 3<>/dev/tcp/127.0.0.1/{ide_port}"),
    ]);
    assert!(
        !probe.status.success(),
        "the service's IDE port is reachable from inside the jail"
    );
    let host_locks = locks(&w.sb.home);

    let uri = w.open("hello.txt").await;
    w.publish_diagnostic(&uri, 2, "DIAG_SEEN_IN_THE_SANDBOX")
        .await;
    let mut cli = w
        .jailed_claude(&w.sb.workspace, |c| {
            c.arg("--allowedTools").arg("mcp__ide__getDiagnostics")
        })
        .await;

    // The link: one 0600 socket in the workspace; the lock file the CLI
    // read is in the jail's HOME, naming the workspace, with the link's
    // own token; the host got no lock file of it.
    let sockets = link_sockets(&w.sb.workspace);
    assert_eq!(sockets.len(), 1, "{sockets:?}");
    let meta = std::fs::symlink_metadata(&sockets[0]).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let jail_locks = locks(w.jail().home());
    assert_eq!(jail_locks.len(), 1, "{jail_locks:?}");
    assert_eq!(jail_locks[0]["workspaceFolders"], json!([w.sb.workspace]));
    assert_ne!(jail_locks[0]["authToken"], json!(w.ide_token()));
    assert_eq!(locks(&w.sb.home), host_locks);

    selected_edit_tweaked_in_the_editor(&mut w, &mut cli, &uri, &file, &path).await;
    // The editor's diagnostics, read from inside the jail.
    let (_, diagnostics) = w
        .fake
        .wait_tool_result("mcp__ide__getDiagnostics", STEP)
        .await;
    assert!(!diagnostics.is_error, "{}", diagnostics.text);
    assert!(
        diagnostics.text.contains("DIAG_SEEN_IN_THE_SANDBOX"),
        "{}",
        diagnostics.text
    );
    cli.wait_for_text("SANDBOX_DONE", STEP).await;

    // Quitting Claude Code ends the relay and the host command: the link
    // socket and the jail's lock file go.
    cli.submit("/exit", STEP).await;
    let closed = poll_until(STEP, async || {
        (link_sockets(&w.sb.workspace).is_empty() && locks(w.jail().home()).is_empty())
            .then_some(())
    })
    .await;
    assert!(
        closed.is_some(),
        "the link outlived Claude Code: {:?} {:?}",
        link_sockets(&w.sb.workspace),
        locks(w.jail().home())
    );
}

/// (1b) The devcontainer case: the jail sees the workspace only at
/// `/workspaces/ws` (its own path there is empty), and the user says so
/// with `--sandbox-path`. The CLI runs there and is linked: the editor's
/// selection reaches the model with the jail's path, the model's Edit of
/// `/workspaces/ws/hello.txt` opens in the editor as the host's file and
/// the user's tweaked accept lands on the host, `getDiagnostics` by the
/// jail's URI finds the editor's; the jail's lock file names the jail's
/// folder; nothing is made at `/workspaces` on the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_in_a_devcontainer_path_keeps_its_ide_link() {
    const INSIDE: &str = "/workspaces/ws";
    let mut w = World::builder()
        .jailed_with_workspace_at(INSIDE)
        .file("hello.txt", "hello world\nsecond line\n")
        .start()
        .await;
    let path = w.path("hello.txt");
    let inside_file = format!("{INSIDE}/hello.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "edit hello",
                Reply::tool_use("Read", json!({"file_path": inside_file})),
            )
            .after_tool(
                "Read",
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": inside_file, "old_string": "hello world",
                           "new_string": "hello EDITED", "replace_all": false}),
                ),
            )
            .after_tool(
                "Edit",
                Reply::tool_use(
                    "mcp__ide__getDiagnostics",
                    json!({"uri": format!("file://{inside_file}")}),
                ),
            )
            .after_tool("mcp__ide__getDiagnostics", Reply::text("MAPPED_DONE")),
    );
    // Inside, the workspace is at /workspaces/ws only.
    let seen = w.jail().run(&[
        "sh",
        "-c",
        "pwd; cat hello.txt; ls -A \"$1\" | wc -l",
        "sh",
        &w.sb.workspace.display().to_string(),
    ]);
    let seen = String::from_utf8_lossy(&seen.stdout).into_owned();
    assert_eq!(
        seen,
        format!("{INSIDE}\nhello world\nsecond line\n0\n"),
        "the jail's view"
    );

    // Something in the jail planted a lock file for the same folder,
    // naming another port: the CLI links to its relay all the same.
    let forged = w.jail().home().join(".claude/ide/1.lock");
    std::fs::create_dir_all(forged.parent().unwrap()).unwrap();
    let forged_lock = json!({"workspaceFolders": [INSIDE], "pid": 1, "ideName": "Forged",
        "transport": "ws", "authToken": "forged", "runningInWindows": false});
    std::fs::write(&forged, forged_lock.to_string()).unwrap();
    let uri = w.open("hello.txt").await;
    w.publish_diagnostic(&uri, 2, "DIAG_SEEN_AT_THE_MAPPED_PATH")
        .await;
    let mut cli = w
        .jailed_claude(&w.sb.workspace, |c| {
            c.arg("--allowedTools").arg("mcp__ide__getDiagnostics")
        })
        .await;
    let jail_locks = locks(w.jail().home());
    let ours: Vec<&Value> = jail_locks
        .iter()
        .filter(|l| l["authToken"] != "forged")
        .collect();
    assert_eq!(ours.len(), 1, "{jail_locks:?}");
    assert_eq!(ours[0]["workspaceFolders"], json!([INSIDE]));
    assert_eq!(
        std::fs::read_to_string(&forged).unwrap(),
        forged_lock.to_string(),
        "the planted lock was touched"
    );

    selected_edit_tweaked_in_the_editor(&mut w, &mut cli, &uri, &inside_file, &path).await;
    let (_, diagnostics) = w
        .fake
        .wait_tool_result("mcp__ide__getDiagnostics", STEP)
        .await;
    assert!(!diagnostics.is_error, "{}", diagnostics.text);
    assert!(
        diagnostics.text.contains("DIAG_SEEN_AT_THE_MAPPED_PATH")
            && diagnostics.text.contains(&format!("file://{inside_file}"))
            && !diagnostics
                .text
                .contains(&w.sb.workspace.display().to_string()),
        "{}",
        diagnostics.text
    );
    cli.wait_for_text("MAPPED_DONE", STEP).await;
    assert!(
        !std::path::Path::new("/workspaces").exists(),
        "the jail made /workspaces on the host"
    );
}

/// (2b) Hostile, through a link whose sandbox mounts the workspace at
/// `/workspaces/ws`: the link answers only for paths under that folder,
/// mapped to the host's; a host path named directly, a path under no
/// mapping, `..` out of it, and a symlink out of the mount are refused;
/// what it tells the jail names the jail's folder, never the host's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_mapped_link_answers_only_for_its_folder() {
    let w = World::builder()
        .file("inside.txt", "inside the workspace\n")
        .start()
        .await;
    let host = w.sb.workspace.display().to_string();
    let (mut opener, link) = mapped_link_beside_a_symlink_out(&w, "/workspaces/ws").await;
    let socket = link["socket"].as_str().expect("a socket");
    assert!(
        socket.starts_with("/workspaces/ws/.moonkale-link-"),
        "{link}"
    );
    let name = Path::new(socket).file_name().unwrap();
    let token = link["token"].as_str().expect("a token");
    let mut link = link_client(&w.sb.workspace.join(name), token).await;
    link.initialize("2025-11-25").await;

    let opened = link
        .tool(
            "openFile",
            json!({"filePath": "/workspaces/ws/inside.txt", "makeFrontmost": false}),
        )
        .await;
    assert_ne!(opened["isError"], true, "{opened}");
    for path in [
        format!("{host}/inside.txt"),
        "/etc/passwd".to_owned(),
        "/workspaces/ws/../../etc/passwd".to_owned(),
        "/workspaces/wsx/inside.txt".to_owned(),
        "/workspaces/ws/out/passwd".to_owned(),
    ] {
        let refused = link
            .request(
                "tools/call",
                json!({"name": "openDiff", "arguments": {"old_file_path": path,
                       "new_file_path": path, "new_file_contents": "x", "tab_name": "t"}}),
            )
            .await;
        assert_eq!(refused["result"]["isError"], true, "{path}: {refused}");
    }
    let folders = tool_json(&link.tool("getWorkspaceFolders", json!({})).await);
    assert_eq!(folders["folders"][0]["path"], "/workspaces/ws", "{folders}");
    assert!(!folders.to_string().contains(&host), "{folders}");
    // A link for a sandbox that mounts some other folder is refused.
    let refused = opener
        .request(
            "moonkale/terminal/sandboxLink",
            json!({"paths": ["/somewhere/else=/workspaces/ws"]}),
        )
        .await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is under none of the sandbox's folders"),
        "{refused}"
    );
}

/// The linked flow of a jailed CLI asked to `edit hello`: the editor's
/// selection shows in the CLI and reaches the model as `file_seen` (the
/// path as the jail sees it); the model's Edit opens in the editor, which
/// tweaks and accepts it; the host's `path` has the tweak.
async fn selected_edit_tweaked_in_the_editor(
    w: &mut World,
    cli: &mut moonkale_tests::claude_cli::Claude,
    uri: &str,
    file_seen: &str,
    path: &Path,
) {
    w.show_in_cli(cli, uri, (0, 0), (0, 5), "⧉ 1 line selected")
        .await;
    cli.submit("edit hello", STEP).await;
    let turn = w
        .fake
        .wait_prompt("edit hello", STEP)
        .await
        .latest_turn_text();
    assert!(
        turn.contains(&format!("lines 1 to 1 from {file_seen}:\nhello")),
        "the selection did not reach the model as {file_seen}: {turn}"
    );
    let show = w.ed.server_request("window/showDocument", TIMEOUT).await;
    w.tweak_and_accept(&show).await;
    let edit = edit_result(&w.fake).await;
    assert!(
        edit.text
            .contains("The user modified your proposed changes"),
        "{}",
        edit.text
    );
    assert_eq!(
        std::fs::read_to_string(path).unwrap(),
        "hello TWEAKED\nsecond line\n"
    );
}

/// What a process inside the jail sends to `socket`, one connection each
/// (`python3` is the jail's, the bytes go out from inside): the first line
/// of each answer, or `closed`.
const PROBE: &str = r#"
import socket, sys
path, link, ide = sys.argv[1:4]
def head(token, port=39001):
    return ("GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "X-Claude-Code-Ide-Authorization: %s\r\n\r\n" % (port, token)).encode()
body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}'
cases = [
    ("lsp", b"Content-Length: %d\r\n\r\n" % len(body) + body),
    ("junk", b"\xff" * 70000),
    ("the IDE port's token", head(ide)),
    ("no token", head("")),
    ("the link's token", head(link)),
]
for name, data in cases:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    try:
        s.sendall(data)
        got = s.recv(200)
    except OSError:
        got = b""
    print("%s: %s" % (name, got.split(b"\r\n")[0].decode() if got else "closed"))
    s.close()
"#;

/// (2) Hostile, from inside the jail: the editors' socket and the host's
/// lock files are not there to see; on the link socket, LSP and junk are
/// refused before any upgrade, only the link's token upgrades; then the
/// jail swaps the live socket for a symlink to a file of the user's. When
/// the link closes (its opener goes away) the symlink and the file are
/// left as they were, the editors never noticed, and a new link works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_the_jail_reaches_only_its_link() {
    let mut w = World::builder().jailed().start().await;
    let (opener, socket, token) = open_link(&w, "opener").await;
    let jail = w.jail();
    let service_socket = w.svc().info.socket.display().to_string();
    let ide_lock = w.sb.home.join(format!(".claude/ide/{}.lock", w.ide_port()));
    assert!(ide_lock.exists());
    for hidden in [service_socket.as_str(), &ide_lock.display().to_string()] {
        let seen = jail.run(&["test", "-e", hidden]);
        assert!(!seen.status.success(), "{hidden} is visible in the jail");
    }
    let probe = jail.run(&[
        "python3",
        "-c",
        PROBE,
        &socket.display().to_string(),
        &token,
        &w.ide_token(),
    ]);
    let answers = String::from_utf8_lossy(&probe.stdout);
    expect_test::expect![[r#"
        lsp: HTTP/1.1 400 Bad Request
        junk: HTTP/1.1 431 Request Header Fields Too Large
        the IDE port's token: HTTP/1.1 401 Unauthorized
        no token: HTTP/1.1 401 Unauthorized
        the link's token: HTTP/1.1 101 Switching Protocols
    "#]]
    .assert_eq(&answers);

    // The jail plants a symlink to a file of the user's at the socket's name.
    let secret = w.sb.root.join("outside-secret");
    std::fs::write(&secret, "keep").unwrap();
    let planted = jail.run(&[
        "sh",
        "-c",
        r#"rm -f "$1" && ln -s "$2" "$1""#,
        "sh",
        &socket.display().to_string(),
        &secret.display().to_string(),
    ]);
    assert!(planted.status.success(), "{planted:?}");
    drop(opener);
    let closed = poll_until(STEP, async || {
        w.service_log()
            .contains("sandbox link closed")
            .then_some(())
    })
    .await;
    assert!(closed.is_some(), "{}", w.service_log_tail(30));
    assert!(std::fs::symlink_metadata(&socket).unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");

    // The editors and the service carry on; another link works.
    assert!(w.ed.call("moonkale/status", Value::Null).await["workspace"].is_string());
    let (_again, socket, token) = open_link(&w, "again").await;
    let mut c = LinkClient::connect_link(&socket, &token).await.unwrap();
    c.initialize("2025-11-25").await;
    let tools = c.request("tools/list", Value::Null).await;
    assert!(tools.to_string().contains("openDiff"), "{tools}");
}

/// Sends `bytes` on a new connection to the link socket and returns the
/// first line of the answer (`closed` if none).
async fn answer_to(socket: &Path, bytes: &[u8]) -> String {
    let mut s = tokio::net::UnixStream::connect(socket).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut got = vec![0u8; 256];
    let n = match tokio::time::timeout(TIMEOUT, s.read(&mut got)).await {
        Ok(Ok(n)) => n,
        _ => 0,
    };
    if n == 0 {
        return "closed".into();
    }
    String::from_utf8_lossy(&got[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn upgrade_head(token: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:39001\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         X-Claude-Code-Ide-Authorization: {token}\r\n\r\n"
    )
}

/// An upgraded raw connection on the link socket (the head read), once
/// the link's one session is free: a session just closed frees it when
/// the service has read the close, so a 409 is retried until [`STEP`].
async fn upgraded_raw(socket: &Path, token: &str) -> tokio::net::UnixStream {
    let upgraded = poll_until(STEP, async || {
        let mut s = tokio::net::UnixStream::connect(socket).await.ok()?;
        s.write_all(upgrade_head(token).as_bytes()).await.ok()?;
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.ok()?;
            head.push(b[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101") || head.starts_with(b"HTTP/1.1 409"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        head.starts_with(b"HTTP/1.1 101").then_some(s)
    })
    .await;
    upgraded.expect("the link's session stayed taken")
}

/// A symlink `out` → `/etc` planted in the workspace, then a link whose
/// sandbox mounts the workspace at `inside`, asked by an editor (which
/// keeps it open while it stays); the editor and the link's answer.
async fn mapped_link_beside_a_symlink_out(w: &World, inside: &str) -> (Client, Value) {
    std::os::unix::fs::symlink("/etc", w.path("out")).unwrap();
    let host = w.sb.workspace.display().to_string();
    let mut opener = w.client("opener", plain_caps()).await;
    let link = opener
        .call(
            "moonkale/terminal/sandboxLink",
            json!({"paths": [format!("{host}={inside}")]}),
        )
        .await;
    (opener, link)
}

/// A [`LinkClient`] once the link's one session is free (as
/// [`upgraded_raw`]).
async fn link_client(socket: &Path, token: &str) -> LinkClient {
    let client = poll_until(STEP, async || {
        match LinkClient::connect_link(socket, token).await {
            Ok(c) => Some(c),
            Err(409) => None,
            Err(status) => panic!("the link refused its own token: {status}"),
        }
    })
    .await;
    client.expect("the link's session stayed taken")
}

/// (3) Hostile, on the protocol: what the relay (or anything in the
/// sandbox) may send to the link socket. One linked session: a second
/// gets 409 and the first carries on; a session that goes silent is
/// dropped and frees the slot. The socket speaks nothing but the IDE's
/// tools: the front door's, the agent's and the terminals' methods are
/// unknown there, a tool path outside the workspace is refused, malformed
/// JSON gets an error and the session survives, an oversized frame closes
/// it with 1009. Heads that stall, trickle or overflow are cut off. The
/// link's token opens nothing else (the IDE port refuses it). Through all
/// of it the editors and the IDE port are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_the_link_socket_is_one_ide_session_and_nothing_more() {
    let mut w = World::builder()
        .env("MOONKALE_IDE_HANDSHAKE_MS", "1000")
        .env("MOONKALE_IDE_PING_MS", "500")
        .start()
        .await;
    let (_opener, socket, token) = open_link(&w, "opener").await;

    // One session at a time.
    let mut first = LinkClient::connect_link(&socket, &token).await.unwrap();
    first.initialize("2025-11-25").await;
    assert_eq!(
        LinkClient::connect_link(&socket, &token).await.err(),
        Some(409)
    );
    assert_eq!(
        first.request("ping", Value::Null).await["result"],
        json!({})
    );

    // Nothing but the IDE's tools.
    for method in [
        "moonkale/agent/start",
        "moonkale/terminal/open",
        "moonkale/terminal/sandboxLink",
        "moonkale/status",
        "workspace/executeCommand",
        "textDocument/hover",
    ] {
        let resp = first
            .request(method, json!({"prompt": "hi", "argv": ["sh"]}))
            .await;
        assert_eq!(resp["error"]["code"], -32601, "{method}: {resp}");
    }
    let outside = first
        .request(
            "tools/call",
            json!({"name": "openDiff", "arguments": {"old_file_path": "/etc/passwd",
                   "new_file_path": "/etc/passwd", "new_file_contents": "x", "tab_name": "t"}}),
        )
        .await;
    assert_eq!(outside["result"]["isError"], true, "{outside}");
    let code = first
        .request(
            "tools/call",
            json!({"name": "executeCode", "arguments": {"code": "1"}}),
        )
        .await;
    assert_eq!(code["result"]["isError"], true, "{code}");
    // Malformed JSON: an error each, and the session goes on.
    first.send_text("{nope").await;
    assert_eq!(first.recv().await["error"]["code"], -32700);
    first
        .send_text(&format!("{}{}", "[".repeat(200_000), "]".repeat(200_000)))
        .await;
    assert!(first.recv().await["error"].is_object());
    assert_eq!(
        first.request("ping", Value::Null).await["result"],
        json!({})
    );
    drop(first);

    // A session that stops answering pings is dropped; the slot is free.
    let silent = upgraded_raw(&socket, &token).await;
    let mut second = link_client(&socket, &token).await;
    drop(silent);
    second.initialize("2025-11-25").await;
    drop(second);

    // An oversized frame closes the session with 1009, unread.
    let mut big = upgraded_raw(&socket, &token).await;
    let mut header = vec![0x81u8, 0x80 | 127];
    header.extend((1u64 << 62).to_be_bytes());
    header.extend([1, 2, 3, 4]);
    big.write_all(&header).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, big.read_to_end(&mut rest)).await;
    let at = rest.iter().position(|&b| b == 0x88).expect("a close frame");
    assert_eq!(u16::from_be_bytes([rest[at + 2], rest[at + 3]]), 1009);

    // Heads: too big, stalled, trickled.
    let mut huge = upgrade_head(&token).replace("\r\n\r\n", "\r\n");
    huge.push_str(&format!("X-Pad: {}\r\n\r\n", "a".repeat(20_000)));
    assert_eq!(
        answer_to(&socket, huge.as_bytes()).await,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(tokio::net::UnixStream::connect(&socket).await.unwrap());
    }
    // A fifth while four are in their handshake: closed at once.
    assert_eq!(answer_to(&socket, b"GET").await, "closed");
    for mut s in stalled {
        let mut b = [0u8; 1];
        let ended = tokio::time::timeout(TIMEOUT, s.read(&mut b)).await;
        assert!(
            matches!(ended, Ok(Ok(0)) | Ok(Err(_))),
            "a stalled handshake was kept open"
        );
    }
    let mut trickle = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let dropped = tokio::time::timeout(TIMEOUT, async {
        for b in upgrade_head(&token).bytes().cycle() {
            if trickle.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(dropped.is_ok(), "a trickled head was kept open");

    // The link's token opens only the link: the IDE port refuses it.
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", w.ide_port()))
        .await
        .unwrap();
    tcp.write_all(
        upgrade_head(&token)
            .replace("39001", &w.ide_port().to_string())
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut got = vec![0u8; 64];
    let n = tokio::time::timeout(TIMEOUT, tcp.read(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(
        got[..n].starts_with(b"HTTP/1.1 401"),
        "{}",
        String::from_utf8_lossy(&got[..n])
    );

    // Unaffected: the editor, the IDE port, and the link itself.
    assert!(w.ed.call("moonkale/status", Value::Null).await["workspace"].is_string());
    let mut ide = IdeClient::connect(w.ide_port(), &w.ide_token()).await;
    ide.initialize("2025-11-25").await;
    let mut last = link_client(&socket, &token).await;
    last.initialize("2025-11-25").await;
}

/// (4) Command-line faults are one sentence: a sandbox command that does
/// not run `claude`, and the in-sandbox side without its token.
#[tokio::test]
async fn sandbox_command_faults_are_one_clear_line() {
    let w = World::builder().start().await;
    let fails_saying = async |args: &[&str], needle: &str| {
        let out = w
            .command(args)
            .env_remove("MOONKALE_LINK_TOKEN")
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
    };
    fails_saying(
        &["claude", "--sandbox", "--", "docker", "exec", "box", "sh"],
        "must run `claude` inside the sandbox",
    )
    .await;
    let socket = w.sb.workspace.join(".moonkale-link-0123456789abcdef.sock");
    let socket = socket.display().to_string();
    fails_saying(
        &["sandbox-link", "--socket", &socket, "--", "claude"],
        "MOONKALE_LINK_TOKEN is not set",
    )
    .await;
    // No link was left behind by the refused command.
    assert!(link_sockets(&w.sb.workspace).is_empty());
}

/// (5) A sandbox the service cannot start: `claude --sandbox --print`
/// prints the line to paste into it, for a workspace whose name is shell
/// syntax. Pasted into a shell inside the jail it runs the real CLI linked
/// (its answer comes from the model, which only the jail's loopback
/// reaches) and nothing of the name runs; stopping the printer closes the
/// link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_command_runs_claude_linked_and_nothing_else() {
    use tokio::io::AsyncBufReadExt;
    let name = "a'b $(touch PWNED1) `touch PWNED2` ;c,d:e\"f!x";
    let w = World::builder()
        .in_sandbox(Sandbox::with_workspace(name))
        .jailed()
        .script(Script::new().on_prompt("say the word", Reply::text("PRINTED_COMMAND_OK")))
        .start()
        .await;
    let mut printer = w.command(&["claude", "--sandbox", "--print", "--", "-p", "say the word"]);
    printer
        .current_dir(&w.sb.workspace)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut printer = printer.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(printer.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(STEP, lines.next_line())
        .await
        .expect("the printer printed nothing")
        .unwrap()
        .expect("a line");
    assert!(line.starts_with("MOONKALE_LINK_TOKEN="), "{line}");
    assert_eq!(link_sockets(&w.sb.workspace).len(), 1);

    // Pasted into a shell inside the jail, in the workspace.
    seed_home(w.jail().home(), &[&w.sb.workspace]);
    let config = ClaudeConfig::new(w.jail().home(), &w.sb.workspace, w.fake.port);
    let cli_dir = claude_bin().parent().unwrap().display().to_string();
    let mut inside = tokio::process::Command::from(w.jail().command("sh"));
    inside
        .arg("-c")
        .arg(&line)
        .current_dir(&w.sb.workspace)
        .env_clear()
        .envs(config.environment())
        .env("PATH", format!("{cli_dir}:/usr/bin:/bin"))
        .stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(STEP * 3, inside.output())
        .await
        .expect("the pasted command did not finish")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("PRINTED_COMMAND_OK"),
        "{out:?}"
    );
    for dir in [&w.sb.workspace, &w.sb.root] {
        for pwned in ["PWNED1", "PWNED2"] {
            assert!(!dir.join(pwned).exists(), "the workspace's name ran");
        }
    }
    assert!(locks(w.jail().home()).is_empty(), "the relay left its lock");

    // Stopping the printer closes the link.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(printer.id().unwrap() as i32, libc::SIGINT) };
    let status = tokio::time::timeout(STEP, printer.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    let ws = w.sb.workspace.clone();
    let closed = poll_until(STEP, async || link_sockets(&ws).is_empty().then_some(())).await;
    assert!(closed.is_some(), "the link outlived its printer");
}

/// (6) What a linked CLI learns of the editors stays inside the workspace.
/// The workspace's editor holds a file outside it (as Neovim attaches a
/// `~/.aws/credentials` opened from the workspace to the workspace's
/// client), with diagnostics, selects in it and sends it to Claude Code. A
/// Claude Code on the host's IDE port is shown all of it, as before; one on
/// the sandbox link is sent no `selection_changed` or `at_mentioned` for it
/// (a selection there is, for it, no selection: not even the previous one
/// in the workspace is answered), and `getOpenEditors` and
/// `getDiagnostics` leave it out. Files inside the workspace reach both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_cli_learns_nothing_of_files_outside_the_workspace() {
    a_linked_cli_learns_nothing_of(Secret::Outside).await;
}

/// (6) The same for a file the editor opened inside the workspace by its
/// path's letters, through a symlink the repository ships
/// (`aws -> ~/.aws`): the linked CLI's tool arguments could not name it
/// (no symlink on the way), so nothing of it reaches the CLI either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_cli_learns_nothing_of_files_reached_through_a_symlink() {
    a_linked_cli_learns_nothing_of(Secret::ThroughSymlink).await;
}

/// Where the editor holds the secret file.
enum Secret {
    Outside,
    ThroughSymlink,
}

async fn a_linked_cli_learns_nothing_of(held: Secret) {
    const KEY: &str = "aws_secret_access_key = wJalrXUtnFEMI";
    let mut w = World::builder()
        .file(
            "inside.txt",
            "inside the workspace
second line
",
        )
        .start()
        .await;
    let (_opener, socket, token) = open_link(&w, "opener").await;
    let mut link = link_client(&socket, &token).await;
    link.initialize("2025-11-25").await;
    let mut host = IdeClient::connect(w.ide_port(), &w.ide_token()).await;
    host.initialize("2025-11-25").await;

    let outside = w.sb.home.join(".aws/credentials");
    std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
    let text = format!("[default]\n{KEY}\n");
    std::fs::write(&outside, &text).unwrap();
    let secret = match held {
        Secret::Outside => outside,
        Secret::ThroughSymlink => {
            std::os::unix::fs::symlink(outside.parent().unwrap(), w.path("aws")).unwrap();
            w.path("aws/credentials")
        }
    };
    let secret_uri = format!("file://{}", secret.display());
    w.ed.did_open(&secret_uri, 1, &text).await;
    let inside = w.open("inside.txt").await;
    for uri in [&secret_uri, &inside] {
        w.publish_diagnostic(uri, 2, "LINT_SAYS").await;
    }

    // A selection inside reaches both; then the user selects the key.
    w.select(&inside, (0, 0), (0, 6)).await;
    selection_with_text(&mut link, "inside").await;
    w.select(&secret_uri, (1, 0), (1, KEY.len() as u32)).await;
    let (_, shown) = next_selection_in(&mut host, &secret).await;
    assert_eq!(shown["text"], KEY);
    let current = |c: Value| tool_json(&c)["text"].clone();
    assert_eq!(
        current(host.tool("getCurrentSelection", json!({})).await),
        KEY
    );
    let none = link.tool("getCurrentSelection", json!({})).await;
    assert_eq!(
        tool_json(&none),
        json!({"success": false, "message": "No active editor found"})
    );
    let none = link.tool("getLatestSelection", json!({})).await;
    assert_eq!(tool_json(&none)["success"], false, "{none}");

    // Listings: the host's CLI gets both files, the linked one the
    // workspace's only.
    let tabs = |r: Value| -> Vec<String> {
        let listed = tool_json(&r)["tabs"].as_array().unwrap().clone();
        listed
            .iter()
            .map(|t| t["fileName"].as_str().unwrap().to_owned())
            .collect()
    };
    let inside_path = w.path("inside.txt").display().to_string();
    let secret_path = secret.display().to_string();
    let mut both = vec![inside_path.clone(), secret_path.clone()];
    both.sort();
    let mut listed = tabs(host.tool("getOpenEditors", json!({})).await);
    listed.sort();
    assert_eq!(listed, both);
    assert_eq!(
        tabs(link.tool("getOpenEditors", json!({})).await),
        std::slice::from_ref(&inside_path)
    );
    let files = |r: Value| -> usize { tool_json(&r).as_array().unwrap().len() };
    assert_eq!(files(host.tool("getDiagnostics", json!({})).await), 2);
    let diagnostics = link.tool("getDiagnostics", json!({})).await;
    assert_eq!(files(diagnostics.clone()), 1, "{diagnostics}");
    assert!(
        diagnostics.to_string().contains("LINT_SAYS"),
        "{diagnostics}"
    );

    // Sent to Claude Code: the host's CLI gets the mention.
    let send = |uri: &str| json!({"command": "moonkale.sendToClaude", "arguments": [uri]});
    w.ed.call("workspace/executeCommand", send(&secret_uri))
        .await;
    let mention = host.notification("at_mentioned").await;
    assert_eq!(mention["params"]["filePath"], json!(secret));
    // The linked CLI's last message is a mention of the workspace's file;
    // nothing it was sent before named the other file or held its text.
    w.ed.call("workspace/executeCommand", send(&inside)).await;
    let mut seen = std::mem::take(&mut link.notifications);
    loop {
        let message = link.recv().await;
        let last = message["method"] == "at_mentioned";
        seen.push(message);
        if last {
            break;
        }
    }
    assert_eq!(
        seen.last().unwrap()["params"]["filePath"],
        json!(w.path("inside.txt"))
    );
    for message in &seen {
        let text = message.to_string();
        assert!(
            !text.contains("credentials") && !text.contains("wJalr"),
            "the linked CLI was told of the file outside: {text}"
        );
    }
}

/// (1c) Hosted sessions in the workspace's default sandbox: with `sandbox
/// set`, a session an editor starts runs its `claude` in the jail's network
/// namespace (only there does the model answer); its Write is asked in the
/// editor, allowed there and written; its next step calls an editor tool
/// (`getDiagnostics`, over the same pipes) and gets the editor's; the
/// session says it is jailed, and no route leaves the jail. After `sandbox
/// clear` the next session runs unjailed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_sessions_run_in_the_default_sandbox() {
    let mut w = World::builder()
        .jailed()
        .agent()
        .file("notes.txt", "notes\n")
        .start()
        .await;
    // The jail's HOME holds the user's Claude Code settings (the host's
    // HOME is hidden in it).
    let home = w.jail().home().to_owned();
    seed_home(&home, &[&w.sb.workspace]);
    moonkale_tests::agent::write_claude_settings(&home, w.fake.port);
    let path = w.path("jailed.txt");
    let uri = w.open("notes.txt").await;
    w.publish_diagnostic(&uri, 1, "DIAG_FOR_THE_JAILED_SESSION")
        .await;
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "write it",
                Reply::tool_use(
                    "Write",
                    json!({"file_path": path.display().to_string(), "content": "FROM THE JAIL\n"}),
                ),
            )
            .after_tool(
                "Write",
                Reply::tool_use("mcp__moonkale__getDiagnostics", json!({"uri": uri})),
            )
            .after_tool("mcp__moonkale__getDiagnostics", Reply::text("JAILED_DONE")),
    );
    let ws = w.sb.workspace.display().to_string();
    w.set_jail_as_default_sandbox(&[]).await;

    let session =
        w.ed.start_session(json!({"prompt": "write it", "permissionMode": "default"}))
            .await;
    let ask = w.ed.server_request("window/showMessageRequest", STEP).await;
    // The CLI asking is the jail's: its network namespace.
    let jail_net = std::fs::read_link(w.jail().netns_path()).unwrap();
    let clis: Vec<i32> = moonkale_tests::agent::processes_in(&w.sb.workspace)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("stream-json"))
        })
        .collect();
    assert!(!clis.is_empty(), "no hosted claude found");
    for pid in &clis {
        let net = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
        assert_eq!(net, jail_net, "claude {pid} runs outside the jail");
    }
    w.ed.respond(&ask["id"], json!({"title": "Allow"})).await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(
        std::fs::read_to_string(&path).ok().as_deref(),
        Some("FROM THE JAIL\n")
    );
    let (_, diagnostics) = w
        .fake
        .wait_tool_result("mcp__moonkale__getDiagnostics", STEP)
        .await;
    assert!(
        !diagnostics.is_error && diagnostics.text.contains("DIAG_FOR_THE_JAILED_SESSION"),
        "{}",
        diagnostics.text
    );
    let jailed_of = |list: &Value, id: &str| {
        list["sessions"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["session"] == id))
            .map(|s| s["jailed"] == true)
    };
    let list = w.ed.call("moonkale/agent/list", json!({})).await;
    assert_eq!(jailed_of(&list, &session), Some(true), "{list}");
    let out = w
        .command(&["status", "--workspace", &ws])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("sandbox: Claude Code runs in")
            && said.contains(&format!("session {session} (idle, jailed)")),
        "{said}"
    );
    // Nothing but the jail's own loopback: no route out.
    let out = w
        .jail()
        .run(&["sh", "-c", "ip route show; ip -o link show | wc -l"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1\n",
        "the jail has a way out"
    );

    let out = w
        .command(&["sandbox", "clear", "--workspace", &ws])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let unjailed = w.ed.start_session(json!({"prompt": "write it"})).await;
    let started = poll_until(STEP, async || {
        let list = w.ed.call("moonkale/agent/list", json!({})).await;
        let s = list["sessions"]
            .as_array()?
            .iter()
            .find(|s| s["session"] == unjailed.as_str())?
            .clone();
        // Its CLI started (unjailed: it cannot reach the jail's model).
        (s["state"] != "idle" || s["events"].as_u64() > Some(2)).then_some(s)
    })
    .await
    .expect("the second session started");
    assert_ne!(started["jailed"], true, "{started}");
}

/// (1d) A hosted session in a default sandbox that mounts the workspace at
/// `/workspaces/ws` (`sandbox set --sandbox-path`): its Write of
/// `/workspaces/ws/made.txt` lands in the host's workspace and its change
/// set names the host's file; `getDiagnostics` by the jail's URI finds the
/// editor's, and answers with the jail's URI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_session_in_a_devcontainer_path_maps_its_paths() {
    const INSIDE: &str = "/workspaces/ws";
    let mut w = World::builder()
        .jailed_with_workspace_at(INSIDE)
        .agent()
        .file("notes.txt", "notes\n")
        .start()
        .await;
    let home = w.jail().home().to_owned();
    seed_home(&home, &[Path::new(INSIDE)]);
    moonkale_tests::agent::write_claude_settings(&home, w.fake.port);
    let uri = w.open("notes.txt").await;
    w.publish_diagnostic(&uri, 1, "DIAG_AT_THE_HOST_PATH").await;
    let inside_uri = format!("file://{INSIDE}/notes.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "make it",
                Reply::tool_use(
                    "Write",
                    json!({"file_path": format!("{INSIDE}/made.txt"), "content": "MADE INSIDE\n"}),
                ),
            )
            .after_tool(
                "Write",
                Reply::tool_use("mcp__moonkale__getDiagnostics", json!({"uri": inside_uri})),
            )
            .after_tool(
                "mcp__moonkale__getDiagnostics",
                Reply::text("MAPPED_HOSTED_DONE"),
            ),
    );
    let ws = w.sb.workspace.display().to_string();
    let mapping = format!("{ws}={INSIDE}");
    w.set_jail_as_default_sandbox(&[&mapping]).await;

    let session =
        w.ed.start_session(json!({"prompt": "make it", "permissionMode": "acceptEdits"}))
            .await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(
        std::fs::read_to_string(w.path("made.txt")).ok().as_deref(),
        Some("MADE INSIDE\n")
    );
    let (_, diagnostics) = w
        .fake
        .wait_tool_result("mcp__moonkale__getDiagnostics", STEP)
        .await;
    assert!(
        !diagnostics.is_error
            && diagnostics.text.contains("DIAG_AT_THE_HOST_PATH")
            && diagnostics.text.contains(&inside_uri)
            && !diagnostics.text.contains(&ws),
        "{}",
        diagnostics.text
    );
    let sets = poll_until(STEP, async || {
        let list = w.ed.call("moonkale/changes/list", json!({})).await;
        let sets = list["sets"].as_array()?.clone();
        (!sets.is_empty()).then_some(sets)
    })
    .await
    .expect("a change set of the jailed session's Write");
    let file = sets[0]["files"][0]["uri"].as_str().unwrap_or_default();
    assert_eq!(file, w.sb.uri("made.txt"), "{sets:?}");
}

/// A client of a link socket inside the jail (`python3` is the jail's):
/// upgrades with the token, initializes, asks `openFile` for each path and
/// prints `<path>: opened|refused`.
const MAPPED_PROBE: &str = r#"
import json, os, socket, sys
path, token = sys.argv[1:3]
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(path)
s.sendall(("GET / HTTP/1.1\r\nHost: 127.0.0.1:39001\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           "X-Claude-Code-Ide-Authorization: %s\r\n\r\n" % token).encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
assert head.startswith(b"HTTP/1.1 101"), head
def exact(k):
    b = b""
    while len(b) < k:
        got = s.recv(k - len(b))
        if not got:
            raise SystemExit("closed")
        b += got
    return b
def send(obj):
    data = json.dumps(obj).encode()
    mask = os.urandom(4)
    n = len(data)
    hdr = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
def recv(want):
    while True:
        h = exact(2)
        n = h[1] & 0x7F
        if n == 126:
            n = int.from_bytes(exact(2), "big")
        elif n == 127:
            n = int.from_bytes(exact(8), "big")
        data = exact(n)
        if h[0] & 0x0F == 1:
            m = json.loads(data)
            if m.get("id") == want:
                return m
send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
      "params": {"protocolVersion": "2025-11-25", "capabilities": {}}})
recv(0)
for i, p in enumerate(sys.argv[3:], 1):
    send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
          "params": {"name": "openFile", "arguments": {"filePath": p, "makeFrontmost": False}}})
    m = recv(i)
    print("%s: %s" % (p, "refused" if m.get("result", {}).get("isError") else "opened"))
"#;

/// (2c) Hostile, from inside a jail that sees the workspace only at
/// `/workspaces/ws`, through a link mapped so: only paths under that
/// folder open; the host's own path of the file, a path under no mapping,
/// `..` out of the folder and a symlink out of it are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_from_a_devcontainer_path_only_its_folder_opens() {
    const INSIDE: &str = "/workspaces/ws";
    let w = World::builder()
        .jailed_with_workspace_at(INSIDE)
        .file("inside.txt", "inside the workspace\n")
        .start()
        .await;
    let host = w.sb.workspace.display().to_string();
    let (opener, link) = mapped_link_beside_a_symlink_out(&w, INSIDE).await;
    let socket = link["socket"].as_str().expect("a socket").to_owned();
    let token = link["token"].as_str().expect("a token").to_owned();
    let tried = [
        format!("{INSIDE}/inside.txt"),
        format!("{host}/inside.txt"),
        "/etc/passwd".to_owned(),
        format!("{INSIDE}/../../etc/passwd"),
        format!("{INSIDE}/out/passwd"),
    ];
    let mut argv = vec!["python3", "-c", MAPPED_PROBE, &socket, &token];
    argv.extend(tried.iter().map(String::as_str));
    let out = w.jail().run(&argv);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let expected: String = tried
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{p}: {}\n", if i == 0 { "opened" } else { "refused" }))
        .collect();
    assert_eq!(said, expected, "{}", String::from_utf8_lossy(&out.stderr));
    drop(opener);
}

/// A sandbox command that starts what it runs in a folder of its own (as
/// `docker exec` without `-w` or `bwrap` without `--chdir` do): a hosted
/// session's CLI is stopped as soon as it says where it runs (before any
/// tool of the model's could run), and the turn fails with the option to
/// add; a
/// linked CLI (`claude --sandbox`) is started in the workspace by the
/// relay all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_starts_claude_elsewhere_is_caught() {
    let mut w = World::builder()
        .agent()
        .script(Script::new().default_reply(Reply::text("NOT_IN_THE_WORKSPACE")))
        .start()
        .await;
    let elsewhere = w.sb.root.join("sandbox-home");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let script = w.sb.root.join("starts-elsewhere.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncd '{}' || exit 125\nexec \"$@\"\n",
            elsewhere.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = w.sb.workspace.display().to_string();
    let (script, claude) = (
        script.display().to_string(),
        claude_bin().display().to_string(),
    );
    let out = w
        .command(&["sandbox", "set", "--workspace", &ws, "--", &script, &claude])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let session =
        w.ed.start_session(json!({"prompt": "where are you", "permissionMode": "default"}))
            .await;
    let seq = w.ed.last_prompt_seq(&session).await;
    let end = w.ed.turn_end(&session, seq, STEP).await;
    let error = end["data"]["error"].as_str().unwrap_or_default();
    assert_eq!(end["data"]["state"], "failed", "{end}");
    assert!(
        error.contains(&format!("started Claude Code in {}", elsewhere.display()))
            && error.contains(&format!("not in the workspace ({ws}"))
            && error.contains("docker exec -w"),
        "{error}"
    );

    // The same sandbox runs a linked CLI: the relay starts it in the
    // workspace. The "CLI" here says where it runs.
    let bin = w.sb.root.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let says_where = bin.join("claude");
    std::fs::write(
        &says_where,
        "#!/bin/sh\necho \"CLAUDE_RUNS_IN $(pwd -P)\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&says_where, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = w
        .command(&[
            "claude",
            "--workspace",
            &ws,
            "--sandbox",
            "--",
            &script,
            &says_where.display().to_string(),
        ])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("CLAUDE_RUNS_IN {ws}")),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
