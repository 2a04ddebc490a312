//! How long a service lives, with the real binaries: one started on the
//! user's behalf (by the shim) exits once nothing has gone on for its idle
//! period, taking its socket, info file and Claude Code lock file with it;
//! `moonkale-service stop` ends any service cleanly; `serve` defaults to
//! the current directory.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use moonkale_tests::{RawLsp, Sandbox, wait_until};
use serde_json::Value;

fn ide_lock_files(sb: &Sandbox) -> Vec<PathBuf> {
    std::fs::read_dir(sb.home.join(".claude/ide"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "lock"))
        .collect()
}

fn alive(pid: u32) -> bool {
    moonkale_service::runtime::process_alive(pid)
}

/// Waits for the service `pid` to be gone, then checks it took its files.
async fn gone_with_its_files(sb: &Sandbox, workspace: &Path, pid: u32, socket: &Path) {
    wait_until("the service exits", || {
        let gone = !alive(pid);
        async move { gone.then_some(()) }
    })
    .await;
    assert!(!socket.exists(), "its socket is left behind");
    assert!(
        sb.files_for(workspace).read_info().is_none(),
        "its info file is left behind"
    );
    assert_eq!(
        ide_lock_files(sb),
        Vec::<PathBuf>::new(),
        "its IDE lock file"
    );
}

fn shim(sb: &Sandbox, env: &[(&str, &str)]) -> (tokio::process::Child, RawLsp) {
    let mut shim = sb.command("moonkale-shim");
    shim.arg("--workspace")
        .arg(&sb.workspace)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut child = shim.spawn().expect("spawn the shim");
    let lsp = RawLsp::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    (child, lsp)
}

/// An editor opens the workspace through the shim (which starts the
/// service) and leaves: the service stays while it is attached, and once
/// nothing has gone on for `MOONKALE_AUTOSTART_IDLE_MS` it exits, its
/// socket, info file and Claude Code lock file gone. A second editor
/// coming later starts a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_the_shim_started_exits_once_idle_and_leaves_nothing() {
    let sb = Sandbox::new();
    let idle = [("MOONKALE_AUTOSTART_IDLE_MS", "300")];
    let (mut child, mut ed) = shim(&sb, &idle);
    ed.initialize("editor", &["utf-8"], Value::Null).await;
    let info = sb.files_for(&sb.workspace).read_info().expect("a service");
    assert_eq!(ide_lock_files(&sb).len(), 1);
    // Attached well past the idle period (a round trip after each period
    // proves the service still answers).
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ed.request("moonkale/status", Value::Null).await;
    }
    assert!(
        alive(info.pid),
        "the service exited with an editor attached"
    );
    ed.request("shutdown", Value::Null).await;
    ed.notify("exit", Value::Null).await;
    child.wait().await.unwrap();
    gone_with_its_files(&sb, &sb.workspace, info.pid, &info.socket).await;

    let (_child, mut again) = shim(&sb, &idle);
    again.initialize("editor", &["utf-8"], Value::Null).await;
    let second = sb
        .files_for(&sb.workspace)
        .read_info()
        .expect("a new service");
    assert_ne!(second.pid, info.pid);
}

/// `moonkale-service stop` (from a folder of the workspace, no flag) stops
/// a service started with `serve` (which never exits when idle) cleanly:
/// exit 0, one line on stderr, nothing on stdout, the service's files
/// gone. With nothing running it says so in one sentence and exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_a_service_cleanly() {
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let sub = sb.workspace.join("src");
    std::fs::create_dir_all(&sub).unwrap();
    let out = sb
        .command("moonkale-service")
        .arg("stop")
        .current_dir(&sub)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr,
        format!(
            "moonkale-service: stopped the service for {}\n",
            sb.workspace.display()
        )
    );
    gone_with_its_files(&sb, &sb.workspace, service.info.pid, &service.info.socket).await;

    let out = sb
        .command("moonkale-service")
        .arg("stop")
        .current_dir(&sub)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no moonkale-service runs for"), "{stderr}");
}

/// `serve` with no `--workspace` serves the current directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_defaults_to_the_current_directory() {
    let sb = Sandbox::new();
    let mut serve = sb.command("moonkale-service");
    serve
        .arg("serve")
        .current_dir(&sb.workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let _serve = serve.spawn().unwrap();
    let files = sb.files_for(&sb.workspace);
    wait_until("the service of the current directory", || {
        let info = files.read_info();
        async move { info }
    })
    .await;
}

/// `moonkale-service terminal list`'s output for the workspace.
async fn terminal_list(sb: &Sandbox) -> String {
    let out = sb
        .command("moonkale-service")
        .args(["terminal", "list", "--workspace"])
        .arg(&sb.workspace)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A service the shim started, whose editor opened terminals kept alive
/// (as the page's are) and left: `terminal list` and `status` show them
/// (a job running, or the shell at its prompt), `terminal close` closes
/// one, and once the other's shell has been quiet at its prompt for
/// `MOONKALE_TERMINAL_IDLE_MS` the service exits, its shell with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminals_at_their_prompt_let_an_idle_service_exit() {
    let sb = Sandbox::new();
    let idle = [
        ("MOONKALE_AUTOSTART_IDLE_MS", "300"),
        ("MOONKALE_TERMINAL_IDLE_MS", "1500"),
    ];
    let (mut child, mut ed) = shim(&sb, &idle);
    ed.initialize("editor", &["utf-8"], Value::Null).await;
    let info = sb.files_for(&sb.workspace).read_info().expect("a service");
    let open = async |ed: &mut RawLsp| {
        let opened = ed
            .request(
                "moonkale/terminal/open",
                serde_json::json!({"argv": ["/bin/sh"], "keepAlive": true}),
            )
            .await;
        let result = &opened["result"];
        (
            result["terminal"]
                .as_u64()
                .unwrap_or_else(|| panic!("{opened}")),
            result["pid"].as_u64().expect("a pid") as u32,
        )
    };
    let (kept, shell) = open(&mut ed).await;
    let (closed, other) = open(&mut ed).await;
    ed.request(
        "moonkale/terminal/input",
        serde_json::json!({"terminal": kept, "text": "sleep 30\n"}),
    )
    .await;
    let mut listed = String::new();
    let busy = moonkale_tests::poll_until(moonkale_tests::TIMEOUT, async || {
        listed = terminal_list(&sb).await;
        listed
            .lines()
            .any(|l| {
                l.starts_with(&format!(
                    "#{kept} sh (sh, pid {shell}): a program runs in it"
                ))
            })
            .then_some(())
    })
    .await;
    assert!(busy.is_some(), "{listed}");
    assert!(
        listed.contains(&format!("#{closed} sh (sh, pid {other}): at its prompt")),
        "{listed}"
    );

    let out = sb
        .command("moonkale-service")
        .args(["terminal", "close"])
        .arg(closed.to_string())
        .arg("--workspace")
        .arg(&sb.workspace)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the closed terminal's shell to end", || {
        let gone = !alive(other);
        async move { gone.then_some(()) }
    })
    .await;
    ed.request(
        "moonkale/terminal/input",
        serde_json::json!({"terminal": kept, "keys": ["Ctrl+c"]}),
    )
    .await;

    // The editor leaves; the kept terminal's shell, quiet at its prompt,
    // holds the service no longer.
    ed.request("shutdown", Value::Null).await;
    ed.notify("exit", Value::Null).await;
    child.wait().await.unwrap();
    gone_with_its_files(&sb, &sb.workspace, info.pid, &info.socket).await;
    wait_until("the kept terminal's shell to end", || {
        let gone = !alive(shell);
        async move { gone.then_some(()) }
    })
    .await;
}
