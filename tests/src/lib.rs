//! Test harness for the end-to-end tests, compiled once for every test
//! binary: a private sandbox (runtime directory, home, workspace) per test,
//! the real binaries, the LSP test client ([`lsp`]), the world of a test
//! ([`world`]: the service, its first editor and the fake Anthropic API
//! ([`fakeapi`])), the real `claude` CLI under a pty ([`claude_cli`]), a
//! real sandbox with its own loopback and hidden folders ([`jail`]), and
//! the agent's helpers ([`agent`]).
//!
//! Every wait has a deadline; nothing sleeps and hopes.

pub mod acp;
pub mod agent;
pub mod claude_cli;
pub mod fakeapi;
pub mod jail;
pub mod load;
pub mod lsp;
pub mod nvim;
pub mod pty;
pub mod remote;
pub mod review;
pub mod vscode;
pub mod web;
pub mod world;
pub mod ws_rpc;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use moonkale_service::runtime::{RuntimeDir, ServiceInfo, WorkspaceFiles};
use serde_json::{Value, json};

pub use lsp::{Client, Diag, RawLsp};

/// The longest a single read of a reply may take.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The longest one step of a test with the real CLI may take: a CLI start
/// plus a turn is normally a second or two (each test stays well under
/// 30 s).
pub const STEP: Duration = Duration::from_secs(15);

/// The first `n` chars of `s`, for failure messages.
pub fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// Path of a binary built from this workspace: next to the running
/// executable (a bench binary in `target/<profile>/`) or one level up (a test
/// in `target/<profile>/deps/`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("executable path");
    let dir = exe.parent().expect("executable directory");
    let candidates = [
        dir.join(name),
        dir.parent().map(|p| p.join(name)).unwrap_or_default(),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not built next to {}; run `cargo build --workspace` first",
                exe.display()
            )
        })
}

/// What a hostile repository can ship at `.moonkale` to get in the way of
/// the service's own files.
#[derive(Clone, Copy, Debug)]
pub enum PlantedMoonkale {
    /// A regular file.
    File,
    /// A FIFO: opening it for writing would block.
    Fifo,
    /// A folder (with a `proposals` folder) nobody may write into.
    ReadOnlyFolder,
    /// A symlink to a folder outside the workspace.
    SymlinkOutside,
    /// A symlink to a file nobody can write (`/proc/version`).
    SymlinkUnwritable,
}

impl PlantedMoonkale {
    pub const ALL: [PlantedMoonkale; 5] = [
        PlantedMoonkale::File,
        PlantedMoonkale::Fifo,
        PlantedMoonkale::ReadOnlyFolder,
        PlantedMoonkale::SymlinkOutside,
        PlantedMoonkale::SymlinkUnwritable,
    ];

    /// Plants it in `workspace`; `outside` is the folder a symlink points
    /// at (it must stay empty).
    pub fn plant(self, workspace: &Path, outside: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let at = workspace.join(".moonkale");
        match self {
            PlantedMoonkale::File => std::fs::write(&at, "not a folder\n").unwrap(),
            PlantedMoonkale::Fifo => {
                let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
            }
            PlantedMoonkale::ReadOnlyFolder => {
                std::fs::create_dir_all(at.join("proposals")).unwrap();
                for dir in [at.join("proposals"), at.clone()] {
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
                }
            }
            PlantedMoonkale::SymlinkOutside => std::os::unix::fs::symlink(outside, &at).unwrap(),
            PlantedMoonkale::SymlinkUnwritable => {
                std::os::unix::fs::symlink("/proc/version", &at).unwrap()
            }
        }
    }
}

/// What every proposal document's path holds: they are written in the
/// service's runtime directory, never in the workspace.
pub const PROPOSALS: &str = "/moonkale/proposals/";

/// A private world for one test: its own runtime directory (so it never meets
/// a real service), home and workspace folder.
pub struct Sandbox {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub runtime: PathBuf,
    pub home: PathBuf,
    pub workspace: PathBuf,
}

/// A service that a shim started in this sandbox (as an editor's shim
/// does) is not the test's child and would outlive it: stop every service
/// whose info file is in the sandbox's runtime directory.
impl Drop for Sandbox {
    fn drop(&mut self) {
        let dir = self.runtime.join("moonkale");
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Ok(bytes) = std::fs::read(&path)
                && let Ok(info) = serde_json::from_slice::<ServiceInfo>(&bytes)
                // A killed service leaves its info file: its pid may be
                // someone else's by now.
                && std::fs::read(format!("/proc/{}/cmdline", info.pid)).is_ok_and(|cmd| {
                    let ws = info.workspace.as_os_str().as_encoded_bytes();
                    cmd.windows(ws.len()).any(|w| w == ws)
                })
            {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(info.pid as i32, libc::SIGTERM) };
            }
        }
    }
}

impl Default for Sandbox {
    fn default() -> Sandbox {
        Sandbox::new()
    }
}

impl Sandbox {
    /// A fresh sandbox under /tmp (kept with `MOONKALE_KEEP_SANDBOX`).
    pub fn new() -> Sandbox {
        let mut dir = tempfile::Builder::new()
            .prefix("mk")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
        if std::env::var_os("MOONKALE_KEEP_SANDBOX").is_some() {
            // For a post-mortem: the logs and files stay where they are.
            eprintln!("sandbox kept: {}", root.display());
            dir.disable_cleanup(true);
        }
        let runtime = root.join("run");
        let home = root.join("home");
        let workspace = root.join("ws");
        for d in [&runtime, &home, &workspace] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        Sandbox {
            _dir: dir,
            root,
            runtime,
            home,
            workspace,
        }
    }

    /// [`Sandbox::new`] with the workspace folder named `name` (an odd name
    /// for a hostile test).
    pub fn with_workspace(name: &str) -> Sandbox {
        let mut sb = Sandbox::new();
        sb.workspace = sb.root.join(name);
        std::fs::create_dir_all(&sb.workspace).expect("mkdir");
        sb
    }

    /// A command for one of our binaries, pointed at this sandbox.
    pub fn command(&self, name: &str) -> tokio::process::Command {
        self.command_of(&bin(name))
    }

    /// [`Self::command`] for the binary at `program` (a bench runs a
    /// service built from another commit beside this one).
    pub fn command_of(&self, program: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.env("XDG_RUNTIME_DIR", &self.runtime)
            .env("HOME", &self.home)
            // The user state and trust decisions live in the sandbox's home.
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env("MOONKALE_SERVICE_BIN", bin("moonkale-service"))
            .env("MOONKALE_LOG", "warn")
            // No warm spare CLI unless a test is about it (`.env(...,
            // "1")`): the others count the CLIs they start.
            .env("MOONKALE_WARM_SPARE", "0")
            .kill_on_drop(true);
        cmd
    }

    /// Where the service keeps `workspace`'s session transcripts: the
    /// user's state directory in the sandbox's home, never the workspace.
    fn chats_dir_for(&self, workspace: &Path) -> PathBuf {
        let root = std::fs::canonicalize(workspace).expect("canonical workspace");
        let name = root.file_name().unwrap().to_string_lossy().into_owned();
        self.home
            .join(".local/state/moonkale/workspaces")
            .join(format!(
                "{name}-{:016x}",
                moonkale_service::runtime::path_hash(&root)
            ))
            .join("chats")
    }

    /// Where the service keeps the sandbox's workspace's session transcripts.
    pub fn chats_dir(&self) -> PathBuf {
        self.chats_dir_for(&self.workspace)
    }

    /// The user's trust store in the sandbox's home.
    fn trust_store(&self) -> moonkale_service::user_state::TrustStore {
        moonkale_service::user_state::TrustStore::at(
            self.home.join(".config/moonkale/trusted-workspaces.json"),
        )
    }

    /// The user trusts the sandbox's workspace (as `moonkale-service trust`
    /// would record it).
    pub fn trust_workspace(&self) {
        let root = std::fs::canonicalize(&self.workspace).expect("canonical workspace");
        self.trust_store().set(&root, true).expect("trust");
    }

    /// The service's runtime files for the sandbox's workspace.
    pub fn files(&self) -> WorkspaceFiles {
        self.files_for(&self.workspace)
    }

    /// The service's runtime files for `workspace`.
    pub fn files_for(&self, workspace: &Path) -> WorkspaceFiles {
        RuntimeDir::at(self.runtime.join("moonkale"))
            .expect("runtime dir")
            .workspace(workspace)
    }

    /// The `file://` URI of `relative` in the workspace.
    pub fn uri(&self, relative: &str) -> String {
        format!("file://{}/{relative}", self.workspace.display())
    }

    /// Starts `moonkale-service serve` on the workspace and waits until it
    /// has published its info file.
    pub async fn start_service(&self, extra: &[&str]) -> Service {
        self.start_service_with_env(extra, &[]).await
    }

    /// [`Self::start_service`] with extra environment variables.
    pub async fn start_service_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Service {
        self.start_service_of(&bin("moonkale-service"), extra, env)
            .await
    }

    /// [`Self::start_service_with_env`] with the service binary at
    /// `program`.
    pub async fn start_service_of(
        &self,
        program: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Service {
        let mut cmd = self.command_of(program);
        cmd.arg("serve")
            .arg("--workspace")
            .arg(&self.workspace)
            .args(extra);
        cmd.envs(env.iter().copied());
        // The service's log stays in the sandbox (and would show a leaked token).
        let log = std::fs::File::create(self.root.join("service.log")).expect("service log");
        cmd.env("MOONKALE_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = cmd.spawn().expect("spawn moonkale-service");
        let pid = child.id().expect("pid");
        let files = self.files();
        let info = wait_until("service info file", || {
            let info = files.read_info().filter(|i| i.pid == pid);
            async move { info }
        })
        .await;
        Service { child, info }
    }

    /// Runs `moonkale-service status --json` and parses its output.
    pub async fn status(&self) -> Value {
        let out = self
            .command("moonkale-service")
            .args(["status", "--json", "--workspace"])
            .arg(&self.workspace)
            .output()
            .await
            .expect("run status");
        assert!(
            out.status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
    }
}

/// A running service; stopped with SIGTERM when dropped.
pub struct Service {
    pub child: tokio::process::Child,
    pub info: ServiceInfo,
}

impl Service {
    /// The service's process id.
    pub fn pid(&self) -> i32 {
        self.info.pid as i32
    }

    /// A raw LSP connection to the service's socket.
    pub async fn connect(&self) -> RawLsp {
        RawLsp::connect_unix(&self.info.socket).await
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
    }
}

/// Polls `probe` every 25 ms until it yields a value; `None` once `timeout`
/// has passed. Only for state held by another process that has no push
/// channel to us (its files, its `/proc` entries, its status).
pub async fn poll_until<T>(
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// [`poll_until`] with [`TIMEOUT`], failing the test after that.
pub async fn wait_until<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
    poll_until(TIMEOUT, probe)
        .await
        .unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// A `status --json` editor entry by client name.
pub fn editor<'a>(status: &'a Value, client: &str) -> &'a Value {
    status["editors"]
        .as_array()
        .and_then(|eds| eds.iter().find(|e| e["client"] == client))
        .unwrap_or_else(|| panic!("no editor {client} in {status:#}"))
}

/// The lock file a service wrote for Claude Code, and its JSON.
pub fn ide_lock(sb: &Sandbox, service: &Service) -> (u16, Value) {
    let port = service
        .info
        .ide_port
        .expect("the service runs an IDE server");
    let path = sb
        .home
        .join(".claude")
        .join("ide")
        .join(format!("{port}.lock"));
    let json =
        serde_json::from_slice(&std::fs::read(&path).expect("lock file")).expect("lock JSON");
    (port, json)
}

/// A Claude Code stand-in on the IDE WebSocket: sends JSON-RPC, reads
/// replies and notifications, answers pings (by reading).
pub type IdeClient = ws_rpc::WsRpc<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl IdeClient {
    /// Connects with the token and the `mcp` subprotocol, as the CLI does.
    pub async fn connect(port: u16, token: &str) -> IdeClient {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://127.0.0.1:{port}")
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("X-Claude-Code-Ide-Authorization", token.parse().unwrap());
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", "mcp".parse().unwrap());
        let (ws, resp) = tokio_tungstenite::connect_async(req)
            .await
            .expect("IDE handshake");
        assert_eq!(
            resp.headers()
                .get("sec-websocket-protocol")
                .map(|v| v.to_str().unwrap()),
            Some("mcp")
        );
        ws_rpc::WsRpc::new(ws)
    }

    /// The CLI's opening: initialize, initialized, ide_connected.
    pub async fn initialize(&mut self, version: &str) -> Value {
        claude_opening(self, version).await
    }
}

/// The CLI's opening on the IDE WebSocket: initialize, initialized,
/// ide_connected; the `initialize` result.
async fn claude_opening<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    c: &mut ws_rpc::WsRpc<S>,
    version: &str,
) -> Value {
    let resp = c
        .request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {"roots": {"listChanged": true}},
                   "clientInfo": {"name": "claude-code", "version": "2.1.332"}}),
        )
        .await;
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    c.send(
        json!({"jsonrpc": "2.0", "method": "ide_connected", "params": {"pid": std::process::id()}}),
    )
    .await;
    resp["result"].clone()
}

/// A Claude Code stand-in on a sandbox link's unix socket (what the relay
/// inside a sandbox connects to).
pub type LinkClient = ws_rpc::WsRpc<tokio::net::UnixStream>;

impl LinkClient {
    /// Connects with `token` as the relay would forward the CLI's
    /// handshake (`Host` is the sandbox's loopback port); the refusal's
    /// HTTP status if there is one.
    pub async fn connect_link(socket: &Path, token: &str) -> Result<LinkClient, u16> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .expect("connect to the link socket");
        let mut req = "ws://127.0.0.1:39001".into_client_request().unwrap();
        req.headers_mut()
            .insert("X-Claude-Code-Ide-Authorization", token.parse().unwrap());
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", "mcp".parse().unwrap());
        match tokio_tungstenite::client_async(req, stream).await {
            Ok((ws, _)) => Ok(ws_rpc::WsRpc::new(ws)),
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
            Err(e) => panic!("link handshake: {e}"),
        }
    }

    /// The CLI's opening: initialize, initialized, ide_connected.
    pub async fn initialize(&mut self, version: &str) -> Value {
        claude_opening(self, version).await
    }
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> ws_rpc::WsRpc<S> {
    /// `tools/call` and its `result` (failing on a JSON-RPC error).
    pub async fn tool(&mut self, name: &str, arguments: Value) -> Value {
        let resp = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        assert!(resp.get("error").is_none(), "{name} failed: {resp}");
        resp["result"].clone()
    }
}

/// The service environment of the editor tests: a short selection pacing
/// interval (10 ms).
pub const SHORT_SELECTION_INTERVAL: (&str, &str) = ("MOONKALE_SELECTION_INTERVAL_MS", "10");

/// A service with [`SHORT_SELECTION_INTERVAL`], and a connected,
/// initialized Claude Code stand-in (the editor tests).
pub async fn service_and_claude(sb: &Sandbox) -> (Service, IdeClient) {
    service_with_env_and_claude(sb, &[SHORT_SELECTION_INTERVAL]).await
}

/// [`service_and_claude`] with the service's environment `env` (empty: its
/// defaults).
pub async fn service_with_env_and_claude(
    sb: &Sandbox,
    env: &[(&str, &str)],
) -> (Service, IdeClient) {
    let svc = sb.start_service_with_env(&[], env).await;
    let c = claude_stand_in(sb, &svc).await;
    (svc, c)
}

/// A Claude Code stand-in connected to `svc`'s IDE server, past the CLI's
/// opening. Unlike the CLI it answers the service's pings only while the
/// test reads it: a test that leaves it unread for two ping intervals
/// (60 s) finds it dropped.
pub async fn claude_stand_in(sb: &Sandbox, svc: &Service) -> IdeClient {
    let (port, lock) = ide_lock(sb, svc);
    let mut c = IdeClient::connect(port, lock["authToken"].as_str().expect("token")).await;
    c.initialize("2025-11-25").await;
    c
}

/// Reads `selection_changed` until one has `text` (each read has a deadline).
pub async fn selection_with_text<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    c: &mut ws_rpc::WsRpc<S>,
    text: &str,
) -> Value {
    loop {
        let n = c.notification("selection_changed").await;
        if n["params"]["text"] == text {
            return n["params"].clone();
        }
    }
}

/// The next `selection_changed` in the file `path` (others are passed
/// over): the line of its cursor (or of its selection's start), and its
/// params.
pub async fn next_selection_in<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    c: &mut ws_rpc::WsRpc<S>,
    path: &Path,
) -> (u64, Value) {
    loop {
        let n = c.notification("selection_changed").await;
        if n["params"]["filePath"] == json!(path) {
            let line = n["params"]["selection"]["start"]["line"]
                .as_u64()
                .expect("selection line");
            return (line, n["params"].clone());
        }
    }
}

/// The text of a `CallToolResult`'s first item, parsed as JSON.
pub fn tool_json(result: &Value) -> Value {
    serde_json::from_str(result["content"][0]["text"].as_str().expect("text item"))
        .expect("JSON text")
}

/// xorshift64*: reproducible random choices from a printed seed (the
/// crash tests).
pub struct Rng(pub u64);

impl Rng {
    /// A seed that differs from run to run (never 0, which xorshift keeps).
    pub fn seed_from_clock() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    }

    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A SIGKILL loop's rounds (`MOONKALE_CRASH_ROUNDS`, else `default`) and
/// its kill points' generator (`MOONKALE_CRASH_SEED`, else the clock; the
/// seed is printed so a failure can be replayed).
pub fn crash_rounds(default: usize) -> (usize, Rng) {
    let rounds = std::env::var("MOONKALE_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default);
    let seed = std::env::var("MOONKALE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(Rng::seed_from_clock);
    eprintln!("seed {seed} (set MOONKALE_CRASH_SEED to replay the kill points)");
    (rounds, Rng(seed | 1))
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: i32) -> u64 {
    try_rss_kib(pid).expect("VmRSS of a running process")
}

/// [`rss_kib`], `None` once the process is gone.
pub fn try_rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_owned()
}

/// A pinned test peer: `$env` when set, else `.peers/<under_peers>` as
/// `scripts/install-test-peers.sh` installs it. Missing, the test fails with
/// how to install it (it is never skipped).
pub fn peer_bin(env: &str, under_peers: &str) -> PathBuf {
    let path = match std::env::var_os(env).filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => repo_root().join(".peers").join(under_peers),
    };
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-test-peers.sh (or set {env})",
        path.display()
    );
    path
}

/// The pinned python-lsp-server peer, or `$MOONKALE_PYLSP`.
pub fn pylsp_bin() -> PathBuf {
    peer_bin("MOONKALE_PYLSP", "pylsp-venv/bin/pylsp")
}
