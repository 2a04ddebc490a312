//! The service's own state under faults (issue 12): its runtime directory
//! removed, its Claude Code lock file deleted, its workspace folder moved or
//! deleted, nested workspaces, a long stop (SIGSTOP), and connections that
//! never initialize. Each test drives the real binaries and ends by showing
//! that the service still serves.

use std::path::Path;
use std::time::Duration;

use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::lsp::plain_caps;
use moonkale_tests::world::World;
use moonkale_tests::{IdeClient, RawLsp, STEP, Sandbox, TIMEOUT, ide_lock};
use serde_json::{Value, json};

/// A well-behaved editor can attach to `socket` and is answered.
async fn assert_editor_attaches(socket: &Path) {
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

/// The `openDiff` call the CLI makes for `path`, sent without waiting (it is
/// answered only once the user decides). Ids from 50 up: `IdeClient`'s own
/// requests count from 1.
async fn start_open_diff(c: &mut IdeClient, id: i64, path: &Path, contents: &str) {
    let args = json!({"old_file_path": path, "new_file_path": path,
                      "new_file_contents": contents, "tab_name": format!("tab-{id}")});
    c.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                  "params": {"name": "openDiff", "arguments": args}}))
        .await;
}

/// Sends SIGCONT to a stopped process when dropped, so a failing test does
/// not leave the service stopped.
struct Stopped(i32);

impl Stopped {
    fn stop(pid: i32) -> Stopped {
        // SAFETY: kill has no memory-safety preconditions.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// After a long stop (SIGSTOP for ten ping intervals, as a suspended laptop
/// would be) the ping timer no longer fires its missed ticks at once and
/// drops the live Claude Code client: it stays connected and answering,
/// and its pending proposal is still pending and can be accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stop_keeps_a_live_claude_client_and_its_proposal() {
    let sb = Sandbox::new();
    let target = sb.workspace.join("a.txt");
    std::fs::write(&target, "old\n").unwrap();
    let svc = sb
        .start_service_with_env(&[], &[("MOONKALE_IDE_PING_MS", "200")])
        .await;
    let (port, lock) = ide_lock(&sb, &svc);
    let mut ed = svc.connect().await;
    ed.initialize("editor", &["utf-8"], Value::Null).await;
    let mut c = IdeClient::connect(port, lock["authToken"].as_str().unwrap()).await;
    c.initialize("2025-11-25").await;
    start_open_diff(&mut c, 50, &target, "new\n").await;
    ed.server_request("window/showDocument").await;
    // The client reads (and so answers pings) right up to the stop.
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));

    let stopped = Stopped::stop(svc.pid());
    // The length of the stop is what this test is about.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    drop(stopped);

    // Five intervals of a client that reads and answers as Claude Code
    // does: always, from its event loop. It keeps reading (and so answering
    // the service's pings) while the test waits, runs `status` or asks the
    // editor: left unread for two intervals (400 ms here, which a `status`
    // process took under load) it would be dropped as silent, rightly.
    for _ in 0..10 {
        let pong = c.request("ping", Value::Null).await;
        assert_eq!(pong["result"], json!({}), "{pong}");
        c.answering_pings(tokio::time::sleep(Duration::from_millis(100)))
            .await;
    }
    let status = c.answering_pings(sb.status()).await;
    assert_eq!(
        status["pendingProposals"][0]["tabName"], "tab-50",
        "{status}"
    );
    c.answering_pings(ed.call(
        "workspace/executeCommand",
        json!({"command": "moonkale.acceptProposal", "arguments": []}),
    ))
    .await;
    let answer = c.response(50).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "FILE_SAVED",
        "{answer}"
    );
    assert_eq!(answer["result"]["content"][1]["text"], "new\n");
}

/// `moonkale-service status --json` for `workspace`, if it succeeds.
async fn try_status(sb: &Sandbox, workspace: &Path) -> Option<Value> {
    let out = sb
        .command("moonkale-service")
        .args(["status", "--json", "--workspace"])
        .arg(workspace)
        .output()
        .await
        .expect("run status");
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("status --json prints JSON"))
}

/// Runs a second `serve` of `workspace` and returns its exit code; fails the
/// test if it is still serving after a while (a second service started).
async fn second_serve_exit_code(sb: &Sandbox, workspace: &Path) -> Option<i32> {
    let mut second = sb.command("moonkale-service");
    second
        .args(["serve", "--no-agent", "--workspace"])
        .arg(workspace)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = second.spawn().expect("spawn a second serve");
    match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
        Ok(status) => status.expect("wait for the second serve").code(),
        Err(_) => {
            let _ = child.kill().await;
            panic!("a second service started for {}", workspace.display());
        }
    }
}

/// The runtime directory (`$XDG_RUNTIME_DIR/moonkale`) removed under a
/// running service, as logind or a tmp cleaner does: a second `serve` of
/// the same workspace still refuses (exit 3), because the service also
/// locks the workspace folder itself; and the service puts its socket,
/// token and info files back, so `status` and a new editor (straight on
/// the socket and through the shim) reach the same service again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_runtime_directory_keeps_one_service_that_can_be_found() {
    let sb = Sandbox::new();
    let svc = sb
        .start_service_with_env(&["--no-agent"], &[("MOONKALE_SELF_CHECK_MS", "100")])
        .await;
    let mut ed = svc.connect().await;
    ed.initialize("attached-before", &["utf-8"], Value::Null)
        .await;
    let runtime = sb.runtime.join("moonkale");
    let token_before = std::fs::read_to_string(&svc.info.token_file).unwrap();

    // Stopped, the service cannot repair anything: the second `serve` meets
    // an empty runtime directory.
    let stopped = Stopped::stop(svc.pid());
    std::fs::remove_dir_all(&runtime).unwrap();
    assert_eq!(second_serve_exit_code(&sb, &sb.workspace).await, Some(3));
    drop(stopped);

    let status = moonkale_tests::wait_until("status to work again", || {
        let sb = &sb;
        async move { try_status(sb, &sb.workspace).await }
    })
    .await;
    moonkale_tests::editor(&status, "attached-before");
    let info = sb.files().read_info().expect("the info file is back");
    assert_eq!(info.pid, svc.info.pid, "still the first service");
    assert_eq!(
        std::fs::read_to_string(&info.token_file).unwrap(),
        token_before,
        "the same token"
    );
    assert_editor_attaches(&info.socket).await;

    // The shim finds it too (and starts nothing new).
    let mut shim = sb.command("moonkale-shim");
    shim.arg("--workspace")
        .arg(&sb.workspace)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut shim = shim.spawn().expect("spawn the shim");
    let mut c = RawLsp::new(shim.stdout.take().unwrap(), shim.stdin.take().unwrap());
    c.initialize("through-the-shim", &["utf-8"], Value::Null)
        .await;
    let status = c.call("moonkale/status", Value::Null).await;
    moonkale_tests::editor(&status, "attached-before");
    // The editor attached before never noticed.
    assert!(ed.call("moonkale/status", Value::Null).await["editors"].is_array());
    assert_eq!(sb.files().read_info().unwrap().pid, svc.info.pid);
}

/// A deleted `~/.claude/ide/<port>.lock` (here with its whole directory) is
/// put back, with the same port and token, and a Claude Code client finds
/// the service with it and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_claude_lock_file_comes_back() {
    let sb = Sandbox::new();
    let svc = sb
        .start_service_with_env(&["--no-agent"], &[("MOONKALE_SELF_CHECK_MS", "100")])
        .await;
    let (port, before) = ide_lock(&sb, &svc);
    let dir = sb.home.join(".claude/ide");
    std::fs::remove_dir_all(&dir).unwrap();
    let path = dir.join(format!("{port}.lock"));
    let after: Value = moonkale_tests::wait_until("the lock file to come back", || {
        let bytes = std::fs::read(&path).ok();
        async move { serde_json::from_slice(&bytes?).ok() }
    })
    .await;
    assert_eq!(after, before);
    let mut c = IdeClient::connect(port, after["authToken"].as_str().unwrap()).await;
    c.initialize("2025-11-25").await;
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
}

/// The workspace folder moved away (and a new folder made at its old path,
/// as a fresh clone would be), then deleted, under a running service:
/// Claude Code's `openDiff` gets an error result each time; the service
/// neither writes its proposal into the folder that took the old name nor
/// re-creates the deleted one, and it goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_or_deleted_workspace_is_not_written_into_or_recreated() {
    let sb = Sandbox::new();
    std::fs::write(sb.workspace.join("a.txt"), "old\n").unwrap();
    let svc = sb.start_service(&["--no-agent"]).await;
    let (port, lock) = ide_lock(&sb, &svc);
    let mut c = IdeClient::connect(port, lock["authToken"].as_str().unwrap()).await;
    c.initialize("2025-11-25").await;
    let target = sb.workspace.join("a.txt");

    let moved = sb.root.join("ws-moved");
    std::fs::rename(&sb.workspace, &moved).unwrap();
    std::fs::create_dir(&sb.workspace).unwrap();
    start_open_diff(&mut c, 50, &target, "new\n").await;
    let answer = c.response(50).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let why = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(why.contains("moved or deleted"), "{why}");
    assert!(
        !sb.workspace.join(".moonkale").exists(),
        "a proposal was written into the folder that took the workspace's name"
    );
    assert!(!moved.join(".moonkale").exists());

    std::fs::remove_dir(&sb.workspace).unwrap();
    std::fs::remove_dir_all(&moved).unwrap();
    start_open_diff(&mut c, 51, &target, "new\n").await;
    let answer = c.response(51).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        !sb.workspace.exists(),
        "the deleted workspace was re-created"
    );
    // Still serving: Claude Code and editors are answered.
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
    assert_editor_attaches(&svc.info.socket).await;
}

/// The lock files in the sandbox's `~/.claude/ide`, as (path, JSON).
fn ide_locks(sb: &Sandbox) -> Vec<(std::path::PathBuf, Value)> {
    let dir = sb.home.join(".claude/ide");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "lock"))
        .filter_map(|p| {
            let json = serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
            Some((p, json))
        })
        .collect()
}

/// Waits until the only lock file is the one for `folder`.
async fn only_lock_for(sb: &Sandbox, folder: &Path) -> Value {
    moonkale_tests::wait_until("exactly one Claude Code lock file", || {
        let locks = ide_locks(sb);
        let only = (locks.len() == 1 && locks[0].1["workspaceFolders"] == json!([folder]))
            .then(|| locks[0].1.clone());
        async move { only }
    })
    .await
}

/// A plain `claude --ide` (2.1.332, no `CLAUDE_CODE_SSE_PORT`) started in
/// `w`'s `sub` folder finds the service by its lock file and connects: the
/// editor's selection in `sub/src/lib.rs` shows in the CLI and reaches the
/// model.
async fn claude_in_sub_connects(w: &mut World) {
    let rel = "sub/src/lib.rs";
    let uri = w.open(rel).await;
    w.select(&uri, (0, 4), (0, 20)).await; // "fn nested_worksp"
    let cwd = w.path("sub");
    let mut cli = w
        .claude(&cwd, |mut c| {
            c.sse_port = None;
            c.arg("--ide")
        })
        .await;
    w.show_in_cli(&mut cli, &uri, (0, 4), (0, 20), "⧉ 1 line selected")
        .await;
    cli.submit("which function", STEP).await;
    let req = w.fake.wait_prompt("which function", STEP).await;
    let path = w.path(rel).display().to_string();
    assert!(
        req.latest_turn_text()
            .contains(&format!("lines 1 to 1 from {path}:\nfn nested_worksp\n")),
        "the selection did not reach the model"
    );
    cli.wait_for_text("FOUND_IT", STEP).await;
}

const NESTED_FILES: &[(&str, &str)] = &[(
    "sub/src/lib.rs",
    "pub fn nested_workspaces() -> u8 {\n    7\n}\n",
)];

/// Nested workspaces, the outer one served: a folder inside a served
/// workspace is served by that service. `serve` of `ws/sub` refuses (exit
/// 3), the shim of an editor opened on `ws/sub` attaches to the service of
/// `ws` (no second service, no second lock file), and a real `claude --ide`
/// started in `ws/sub` matches exactly one lock and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_folder_is_served_by_the_enclosing_service_and_claude_connects() {
    let mut w = World::start(
        NESTED_FILES,
        Script::new().on_prompt("which function", Reply::text("FOUND_IT")),
    )
    .await;
    let sub = w.path("sub");
    assert_eq!(second_serve_exit_code(&w.sb, &sub).await, Some(3));

    let mut shim = w.sb.command("moonkale-shim");
    shim.arg("--workspace")
        .arg(&sub)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut shim = shim.spawn().expect("spawn the shim");
    let mut in_sub = RawLsp::new(shim.stdout.take().unwrap(), shim.stdin.take().unwrap());
    in_sub
        .initialize("editor-in-sub", &["utf-8"], Value::Null)
        .await;
    moonkale_tests::editor(&w.sb.status().await, "editor-in-sub");
    assert!(
        w.sb.files_for(&sub).read_info().is_none(),
        "no service of its own"
    );
    only_lock_for(&w.sb, &w.sb.workspace).await;
    claude_in_sub_connects(&mut w).await;
}

/// Two editors opened at once, one on `ws` and one on `ws/sub`, both
/// finding no service: the shim of `ws` claims its start and starts its
/// service (held at the gate of a wrapper here, so the moment lasts); the
/// shim of `ws/sub` starts one too, which yields (exit 3: "whose service
/// is being started"); once the outer service is up, both editors are on
/// it: no second service, one Claude Code lock file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editors_opened_at_once_on_a_workspace_and_a_folder_inside_share_one_service() {
    let sb = Sandbox::new();
    let sub = sb.workspace.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let gate = sb.home.join("gate");
    let held = sb.home.join("held-service");
    std::fs::write(
        &held,
        format!(
            "#!/bin/sh\nwhile [ ! -e '{}' ]; do sleep 0.01; done\nexec '{}' \"$@\"\n",
            gate.display(),
            moonkale_tests::bin("moonkale-service").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&held, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let shim = |root: &Path, service: &Path| {
        let mut shim = sb.command("moonkale-shim");
        shim.arg("--workspace")
            .arg(root)
            .env("MOONKALE_SERVICE_BIN", service)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = shim.spawn().expect("spawn the shim");
        let lsp = RawLsp::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
        (child, lsp)
    };
    let (_outer_shim, mut outer) = shim(&sb.workspace, &held);
    let (_inner_shim, mut inner) = shim(&sub, &moonkale_tests::bin("moonkale-service"));
    let outer_init = tokio::spawn(async move {
        outer
            .initialize("editor-in-ws", &["utf-8"], Value::Null)
            .await;
        outer
    });
    let claim = sb.files_for(&sb.workspace).start_claim_path();
    moonkale_tests::wait_until("the shim of ws claims its start", || {
        let claimed = claim.exists();
        async move { claimed.then_some(()) }
    })
    .await;
    let inner_init = tokio::spawn(async move {
        inner
            .initialize("editor-in-sub", &["utf-8"], Value::Null)
            .await;
        inner
    });
    let inner_log = sb.files_for(&sub).log_path();
    moonkale_tests::wait_until("the service of ws/sub yields", || {
        let log = std::fs::read_to_string(&inner_log).unwrap_or_default();
        async move { log.contains("whose service is being started").then_some(()) }
    })
    .await;
    std::fs::write(&gate, "").unwrap();
    let _outer = outer_init.await.unwrap();
    let _inner = inner_init.await.unwrap();
    let status = sb.status().await;
    moonkale_tests::editor(&status, "editor-in-ws");
    moonkale_tests::editor(&status, "editor-in-sub");
    assert!(
        sb.files_for(&sub).read_info().is_none(),
        "a second service started for ws/sub"
    );
    only_lock_for(&sb, &sb.workspace).await;
}

/// Nested workspaces, the inner one served first: once the outer one is
/// served too, the inner service withdraws its Claude Code lock file (the
/// CLI would connect to neither of two), so `claude --ide` in `ws/sub`
/// connects to the outer one; when the outer service stops, the inner lock
/// comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_workspace_served_first_yields_claude_to_the_outer_one() {
    let sb = Sandbox::new();
    for (rel, text) in NESTED_FILES {
        let path = sb.workspace.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let sub = sb.workspace.join("sub");
    let mut inner = sb.command("moonkale-service");
    inner
        .args(["serve", "--no-agent", "--workspace"])
        .arg(&sub)
        .env("MOONKALE_SELF_CHECK_MS", "100")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _inner = inner.spawn().expect("spawn the inner service");
    only_lock_for(&sb, &sub).await;

    let mut w = World::builder()
        .in_sandbox(sb)
        .script(Script::new().on_prompt("which function", Reply::text("FOUND_IT")))
        .editor("scripted-editor", plain_caps())
        .start()
        .await;
    only_lock_for(&w.sb, &w.sb.workspace).await;
    claude_in_sub_connects(&mut w).await;

    // Stopped (SIGTERM), the outer service removes its lock; the inner
    // one's comes back.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.svc().pid(), libc::SIGTERM) };
    tokio::time::timeout(TIMEOUT, w.svc_mut().child.wait())
        .await
        .expect("the outer service stops")
        .unwrap();
    only_lock_for(&w.sb, &sub).await;
}

/// The same with the real CLI: after its lock file (and `~/.claude/ide`)
/// was deleted and put back, a plain `claude --ide` started in the
/// workspace finds the service and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_ide_finds_the_service_after_its_lock_file_was_deleted() {
    let mut w = World::start(
        NESTED_FILES,
        Script::new().on_prompt("which function", Reply::text("FOUND_IT")),
    )
    .await;
    let (_, before) = ide_lock(&w.sb, w.svc());
    std::fs::remove_dir_all(w.sb.home.join(".claude/ide")).unwrap();
    assert_eq!(only_lock_for(&w.sb, &w.sb.workspace).await, before);
    claude_in_sub_connects(&mut w).await;
}
