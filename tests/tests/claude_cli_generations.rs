//! Older generations of the real `claude` CLI against the service: 2.0.50
//! and 1.0.60 (JS bundles run with node, installed by
//! `scripts/install-test-peers.sh` into `.peers/claude-<version>`, or
//! `$MOONKALE_CLAUDE_2_0_50` / `$MOONKALE_CLAUDE_1_0_60`), interactive under a
//! pty, offline, with the same support code as tests/tests/claude_cli.rs
//! (2.1.332): the real service, a scripted LSP editor and the fake API.
//!
//! What these generations need (shared/docs/cli-matrix.md):
//! - To connect to the IDE without the user typing `/ide`: the port in
//!   `CLAUDE_CODE_SSE_PORT` **and** `CLAUDE_CODE_AUTO_CONNECT_IDE=true`
//!   (2.1.x needs only the port).
//! - Node CLIs may send their API traffic through `HTTPS_PROXY` even to
//!   127.0.0.1, ignoring `NO_PROXY`, as `CONNECT 127.0.0.1:<port>` (1.0.60
//!   does in the TTY; 2.0.50 did in `-p` in the matrix, and went direct
//!   here). The fake API refuses every CONNECT, so here the proxy is an
//!   [`EgressGuard`] that tunnels loopback connections and refuses (and
//!   records) everything else (their update checks: registry.npmjs.org,
//!   raw.githubusercontent.com).
//! - 1.0.60 dies at startup ("B.allowedTools is not iterable") unless the
//!   seeded project entry has `allowedTools: []` (the support code seeds it).
//! - Their command lines differ: no `--debug-file` (2.0.50 logs to the file
//!   named by `CLAUDE_CODE_DEBUG_LOGS_DIR`; 1.0.60 would print its debug log
//!   on the terminal, so it gets none). `--permission-mode default` is
//!   accepted (and is their default anyway: every Edit goes to `openDiff`).
//! - Their screens: the prompt is `>` (1.0.60 in a box, `│ >`), not `❯`;
//!   the edit question and the `⧉ N lines selected` hint read as in 2.1.332,
//!   and the Edit's tool result says "has been updated." (2.1.x: "…updated
//!   successfully.").
//!
//! Each test starts the CLI, waits for its prompt, then until the service
//! lists it as connected (`status --json` `claudeClients` with the CLI's
//! pid, from its `ide_connected`), then runs one Edit: the model proposes it, the CLI
//! sends `openDiff`, the editor gets the proposal, tweaks it and accepts it,
//! and the CLI writes the tweaked text to disk.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moonkale_tests::claude_cli::{Claude, ClaudeConfig, DebugLog, EDIT_QUESTION, edit_script};
use moonkale_tests::fakeapi::Script;
use moonkale_tests::world::World;
use moonkale_tests::{STEP, TIMEOUT};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Above the question while the IDE has the diff (`ideName` of the lock).
const OPENED_IN_IDE: &str = "Opened changes in Moonkale";

/// One older CLI generation: where it is and how it logs.
struct Generation {
    version: &'static str,
    /// Overrides the install location.
    env_var: &'static str,
    /// How the CLI writes its debug log (`None`: it cannot, under a pty).
    debug_log: Option<DebugLog>,
}

const CLAUDE_2_0_50: Generation = Generation {
    version: "2.0.50",
    env_var: "MOONKALE_CLAUDE_2_0_50",
    debug_log: Some(DebugLog::Env),
};

const CLAUDE_1_0_60: Generation = Generation {
    version: "1.0.60",
    env_var: "MOONKALE_CLAUDE_1_0_60",
    debug_log: None,
};

impl Generation {
    /// `$<env_var>`, else `<repo>/.peers/claude-<version>/node_modules/.bin/claude`.
    fn bin(&self) -> PathBuf {
        if let Some(p) = std::env::var_os(self.env_var).filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "{}={} is not a file",
                self.env_var,
                p.display()
            );
            return p;
        }
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repository root");
        let bin = repo.join(format!(
            ".peers/claude-{}/node_modules/.bin/claude",
            self.version
        ));
        assert!(
            bin.is_file(),
            "claude {} is not installed (looked for {}); run scripts/install-test-peers.sh \
             or set {} to its claude executable",
            self.version,
            bin.display(),
            self.env_var
        );
        bin
    }
}

/// An HTTP proxy for the node CLIs: `CONNECT` to a loopback address is
/// tunnelled (the fake API), anything else is refused with 403 and
/// recorded, so nothing leaves the machine.
struct EgressGuard {
    port: u16,
    refused: Arc<Mutex<Vec<String>>>,
    tunnelled: Arc<Mutex<Vec<String>>>,
    accept: tokio::task::AbortHandle,
}

impl Drop for EgressGuard {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl EgressGuard {
    async fn start() -> EgressGuard {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the egress guard");
        let port = listener.local_addr().expect("guard address").port();
        let refused = Arc::new(Mutex::new(Vec::new()));
        let tunnelled = Arc::new(Mutex::new(Vec::new()));
        let (r, t) = (refused.clone(), tunnelled.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (r, t) = (r.clone(), t.clone());
                tokio::spawn(async move {
                    let _ = guard_connection(stream, r, t).await;
                });
            }
        });
        EgressGuard {
            port,
            refused,
            tunnelled,
            accept: accept.abort_handle(),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Requests refused (`CONNECT host:port`, or the request line of a
    /// plain proxied request).
    fn refused(&self) -> Vec<String> {
        self.refused.lock().unwrap().clone()
    }

    /// Loopback targets tunnelled.
    fn tunnelled(&self) -> Vec<String> {
        self.tunnelled.lock().unwrap().clone()
    }
}

async fn guard_connection(
    mut client: TcpStream,
    refused: Arc<Mutex<Vec<String>>>,
    tunnelled: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let end = loop {
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > 64 << 10 {
            return Ok(());
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(STEP, client.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::other("idle"))??;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    };
    let line = String::from_utf8_lossy(&head[..end])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let loopback_port = target
        .rsplit_once(':')
        .filter(|(host, _)| matches!(*host, "127.0.0.1" | "localhost" | "[::1]"))
        .and_then(|(_, port)| port.parse::<u16>().ok());
    match (method, loopback_port) {
        ("CONNECT", Some(port)) => {
            tunnelled.lock().unwrap().push(target.to_owned());
            let mut upstream = TcpStream::connect(("127.0.0.1", port)).await?;
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await?;
            upstream.write_all(&head[end..]).await?;
            tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        }
        _ => {
            refused.lock().unwrap().push(if method == "CONNECT" {
                target.to_owned()
            } else {
                line.clone()
            });
            client
                .write_all(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await?;
        }
    }
    Ok(())
}

/// `generation`'s CLI in the workspace, as an IDE terminal would start it:
/// the IDE's port and auto-connect on, the guard as its proxy.
fn config(w: &World, guard: &EgressGuard, generation: &Generation) -> ClaudeConfig {
    let mut c = ClaudeConfig::new(&w.sb.home, &w.sb.workspace, w.fake.port)
        .sse_port(w.ide_port())
        .env("CLAUDE_CODE_AUTO_CONNECT_IDE", "true")
        .env("HTTPS_PROXY", &guard.url())
        .env("HTTP_PROXY", &guard.url());
    c.bin = Some(generation.bin());
    match generation.debug_log {
        Some(how) => c.debug_log = how,
        None => c.debug_file = None,
    }
    c
}

/// Waits until `status --json` lists a Claude client with the CLI's pid
/// (the service got its `ide_connected`); returns that entry. These CLIs
/// look for the IDE only once their UI is up: call it after the prompt
/// shows, so that its step is the connection, not the CLI's start too.
async fn wait_connected(w: &World, cli: &Claude) -> Value {
    let pid = cli.pid();
    let deadline = Instant::now() + STEP;
    loop {
        let st = w.sb.status().await;
        let clients = st["claudeClients"].as_array().cloned().unwrap_or_default();
        if let Some(c) = clients.iter().find(|c| c["pid"] == pid) {
            return c.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the service never listed the CLI (pid {pid}) as connected: claudeClients = {}\n--- screen ---\n{}\n--- service log (tail) ---\n{}",
            st["claudeClients"],
            cli.screen(),
            w.service_log_tail(30)
        );
        // status is a process of its own: no faster than this.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The prompt input is ready: its `>` line (1.0.60 draws it in a box,
/// `│ >`; 2.1.332 uses `❯`) and the `? for shortcuts` hint.
fn prompt_ready(screen: &str) -> bool {
    screen.contains("? for shortcuts")
        && screen
            .lines()
            .any(|l| l.trim_start_matches('│').trim_start().starts_with('>'))
}

/// The shared flow: connect `generation`'s CLI, run one Edit, tweak and
/// accept it in the editor.
async fn edit_accepted_in_the_editor_with_a_tweak(generation: &Generation) {
    let started = Instant::now();
    let mut w = World::start(
        &[("hello.txt", "hello world\nsecond line\n")],
        Script::new(),
    )
    .await;
    let guard = EgressGuard::start().await;
    let path = w.path("hello.txt");
    w.fake.set_script(edit_script(
        "edit hello",
        &path,
        "hello world",
        "hello EDITED",
        "EDIT_DONE",
    ));
    let uri = w.open("hello.txt").await;
    let mut cli = Claude::spawn(config(&w, &guard, generation));

    // The CLI is up (under load, node loading the bundle alone takes most
    // of a step), and only then looks for the IDE and connects: two steps.
    cli.wait_screen("the prompt", STEP, prompt_ready).await;
    // Connected: the service got `ide_connected` with the CLI's pid ...
    let client = wait_connected(&w, &cli).await;
    assert!(client["id"].is_u64(), "{client}");
    // ... and the CLI's UI has taken the connection in (it uses the IDE in
    // a turn only if so): the editor's selection shows in its prompt box.
    w.show_in_cli(&mut cli, &uri, (0, 0), (0, 5), "⧉ 1 line selected")
        .await;
    let connected = started.elapsed();
    cli.submit("edit hello", STEP).await;

    // openDiff: the proposal opens in the editor, and the CLI shows its own
    // question in parallel (same wording as 2.1.332).
    let show = w.ed.server_request("window/showDocument", TIMEOUT).await;
    cli.wait_for_text(EDIT_QUESTION, STEP).await;
    cli.wait_for_text(OPENED_IN_IDE, STEP).await;
    w.tweak_and_accept(&show).await;
    // 1.x/2.0 word it "has been updated." (2.1.x: "…updated successfully.").
    w.assert_tweak_landed(&mut cli, &path, "has been updated")
        .await;
    eprintln!(
        "claude {}: connected after {connected:?}, done after {:?}; proxy tunnelled {:?}, refused {:?}",
        generation.version,
        started.elapsed(),
        guard.tunnelled(),
        guard.refused()
    );
}

/// CLI 2.0.50 (node): connects with `CLAUDE_CODE_SSE_PORT` +
/// `CLAUDE_CODE_AUTO_CONNECT_IDE=true`; the Edit goes through `openDiff`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_2_0_50_edit_accepted_in_the_editor_with_a_tweak() {
    edit_accepted_in_the_editor_with_a_tweak(&CLAUDE_2_0_50).await;
}

/// CLI 1.0.60 (node): same as 2.0.50; its API traffic goes through the
/// proxy (tunnelled to the fake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_1_0_60_edit_accepted_in_the_editor_with_a_tweak() {
    edit_accepted_in_the_editor_with_a_tweak(&CLAUDE_1_0_60).await;
}
