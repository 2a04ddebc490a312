//! Listeners that wire editor connections to hubs: a private unix socket per
//! workspace, optionally one loopback TCP port, and stdio.
//!
//! **Invariant:** this module and `runtime` are the only places in the
//! library that touch the file system or the network for the LSP front door;
//! the hub and the core do no IO.

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, mpsc};

use crate::agent::AgentConfig;
use crate::change_sources::{ChangeSources, KnownSessions};
use crate::error::{Error, IoContext, Result};
use crate::hub::ports::{
    self, AgentCommand, AgentPort, ChangesCommand, ChangesPort, TerminalHostCommand, TerminalPort,
};
use crate::hub::{self, HubHandle, Transport};
use crate::ide::{IdeConfig, IdeServer};
use crate::lsp::connection::{ConnectionConfig, Ending, HubSelector, serve_connection};
use crate::lsp::stdio;
use crate::runtime::{self, RuntimeDir, ServiceInfo, WorkspaceFiles, WorkspaceLock};
use crate::terminal::host::TerminalConfig;

/// Connections one listener serves at once; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 256;

pub struct ServeConfig {
    /// Canonical workspace folders.
    pub workspaces: Vec<PathBuf>,
    pub lsp_tcp: Option<SocketAddr>,
    /// The remote front door (`--listen`).
    pub remote: Option<crate::remote::RemoteConfig>,
    /// Claude Code's IDE server and lock file; `None` turns them off.
    pub ide: Option<IdeConfig>,
    /// How agent sessions run `claude`; `None` turns the agent off.
    pub agent: Option<AgentConfig>,
    /// Exit after this long with nothing going on ([`crate::lifetime`]):
    /// a service started on the user's behalf.
    pub exit_when_idle: Option<std::time::Duration>,
}

/// A workspace's hub, its agent host (when enabled) and its terminals.
pub struct Workspace {
    pub hub: HubHandle,
    agent: Option<(AgentPort, tokio::task::JoinHandle<()>)>,
    terminals: (TerminalPort, Terminals),
    /// Where the sources of Claude's edits send them (the change-set host)
    /// and the CLI sessions the terminals started.
    pub sources: ChangeSources,
    /// The change-set host (always running) and its task until stopped.
    changes: (ChangesPort, Option<tokio::task::JoinHandle<()>>),
}

/// The pace of `selection_changed` towards Claude Code:
/// `MOONKALE_SELECTION_INTERVAL_MS` (0: every change), else the hub's
/// default.
fn selection_interval() -> std::time::Duration {
    std::env::var("MOONKALE_SELECTION_INTERVAL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(hub::SELECTION_INTERVAL, std::time::Duration::from_millis)
}

/// `MOONKALE_MAX_WORKSPACE_BYTES`: what the workspace may hold for its
/// editors (a test knob; 512 MiB by default).
fn max_workspace_bytes() -> usize {
    std::env::var("MOONKALE_MAX_WORKSPACE_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(hub::MAX_TOTAL_BYTES)
}

enum Terminals {
    /// Requests wait in the channel until the IDE port is known.
    Waiting(mpsc::Receiver<TerminalHostCommand>),
    Running(tokio::task::JoinHandle<()>),
    Stopped,
}

impl Workspace {
    pub fn start(root: PathBuf, agent: Option<&AgentConfig>) -> Workspace {
        let (terminal_tx, terminal_rx) = ports::terminal_channel();
        let (changes_tx, changes_rx) = ports::changes_channel();
        let agent_port = agent.map(|_| ports::agent_channel());
        let hub = hub::spawn(
            root,
            hub::Hosts {
                agent: agent_port.as_ref().map(|(tx, _)| tx.clone()),
                terminals: Some(terminal_tx.clone()),
                changes: Some(changes_tx.clone()),
            },
            hub::HubConfig {
                selection_interval: selection_interval(),
                max_bytes: max_workspace_bytes(),
            },
        );
        let sources = ChangeSources {
            changes: Some(changes_tx.clone()),
            sessions: KnownSessions::default(),
        };
        let changes_task = crate::changes::spawn(
            hub.clone(),
            changes_rx,
            agent_port.as_ref().map(|(tx, _)| tx.clone()),
        );
        let agent = agent.zip(agent_port).map(|(config, (tx, rx))| {
            let config = AgentConfig {
                sources: sources.clone(),
                ..config.clone()
            };
            let task = crate::agent::spawn(hub.clone(), rx, config);
            (tx, task)
        });
        Workspace {
            hub,
            agent,
            terminals: (terminal_tx, Terminals::Waiting(terminal_rx)),
            sources,
            changes: (changes_tx, Some(changes_task)),
        }
    }

    /// Starts the terminal host, once this workspace's IDE port is known
    /// ("Start Claude Code here" passes it on).
    pub fn start_terminals(&mut self, config: TerminalConfig) {
        let waiting = std::mem::replace(&mut self.terminals.1, Terminals::Stopped);
        self.terminals.1 = match waiting {
            Terminals::Waiting(rx) => {
                Terminals::Running(crate::terminal::host::spawn(self.hub.clone(), rx, config))
            }
            other => other,
        };
    }

    /// Ends the agent's sessions (each closes its process's stdin, waits,
    /// then ends its process group), the terminals (SIGHUP, then
    /// SIGKILL) and the change-set host. Bounded by twice the grace period
    /// each.
    pub async fn stop(&mut self, grace: std::time::Duration) {
        if let Some((tx, task)) = self.agent.take() {
            let _ = tx.send(AgentCommand::Shutdown).await;
            if tokio::time::timeout(grace * 2, task).await.is_err() {
                tracing::warn!("agent sessions did not stop in time");
            }
        }
        if let Terminals::Running(task) =
            std::mem::replace(&mut self.terminals.1, Terminals::Stopped)
        {
            let _ = self.terminals.0.send(TerminalHostCommand::Shutdown).await;
            if tokio::time::timeout(TERMINAL_GRACE * 2, task)
                .await
                .is_err()
            {
                tracing::warn!("terminals did not stop in time");
            }
        }
        // Last: an undo under way finishes its write before the service goes.
        if let Some(task) = self.changes.1.take() {
            let _ = self.changes.0.send(ChangesCommand::Shutdown).await;
            if tokio::time::timeout(grace * 2, task).await.is_err() {
                tracing::warn!("the change-set host did not stop in time");
            }
        }
    }
}

/// SIGHUP → SIGKILL for terminals (security.md case 48).
pub const TERMINAL_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// How a workspace's terminals start programs.
fn terminal_config(
    agent: Option<&AgentConfig>,
    ide_port: Option<u16>,
    links: Option<crate::ide::link::Links>,
    sessions: KnownSessions,
) -> TerminalConfig {
    TerminalConfig {
        sessions,
        env: std::env::vars_os().collect(),
        grace: TERMINAL_GRACE,
        idle: crate::terminal::host::idle_from_env(),
        claude_bin: agent.and_then(|a| a.claude_bin.clone()),
        ide_port,
        links,
        link_bin: std::env::current_exe().unwrap_or_else(|_| "moonkale-service".into()),
        sandboxes: crate::user_state::SandboxStore::from_env().ok(),
        hook_secrets: agent.map(|a| a.hook_secrets.clone()),
    }
}

/// One workspace being served: its hub and the files that say so. Dropping
/// it removes the socket, info and token files if they are still ours.
pub struct Served {
    pub workspace: Workspace,
    /// Claude Code's IDE server; dropping it removes its lock file.
    pub ide: Option<IdeServer>,
    published: Arc<std::sync::Mutex<Published>>,
    keeper: tokio::task::AbortHandle,
}

impl Served {
    /// What the info file says (the socket may change when it is rebound).
    pub fn info(&self) -> ServiceInfo {
        self.published.lock().expect("published lock").info.clone()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.keeper.abort();
        let mut p = self.published.lock().expect("published lock");
        p.stopped = true;
        if let Some(accept) = p.accept.take() {
            accept.abort();
        }
        if let Ok(meta) = std::fs::symlink_metadata(&p.info.socket)
            && Some((meta.dev(), meta.ino())) == p.socket_id
        {
            let _ = std::fs::remove_file(&p.info.socket);
        }
        if p.files.read_info().is_some_and(|i| i.pid == p.info.pid) {
            let _ = std::fs::remove_file(p.files.info_path());
            let _ = std::fs::remove_file(p.files.token_path());
        }
    }
}

/// A served workspace's files in the runtime directory (socket, token,
/// info, lock), put back by [`Published::repair`] whenever any of them is
/// missing: a tmp cleaner or logind may delete the whole directory under
/// a running service, and `status` and new shims find the service only
/// through these files.
struct Published {
    files: WorkspaceFiles,
    lock: WorkspaceLock,
    token: Arc<String>,
    info: ServiceInfo,
    /// The bound socket's (device, inode), once bound.
    socket_id: Option<(u64, u64)>,
    /// The accept loop of that socket.
    accept: Option<tokio::task::AbortHandle>,
    hub: HubHandle,
    /// Set when the workspace stops being served: nothing more is written.
    stopped: bool,
    /// Another service took the file names (it locked a new lock file
    /// while ours was gone): we publish nothing more.
    displaced: bool,
    /// The last repair failed (logged once, not every check).
    failing: bool,
}

impl Published {
    /// Puts back whatever is missing: the directory, the lock file (locked
    /// again), the socket (bound again, with a fresh accept loop), the token
    /// and info files. Cheap when everything is in place: a few `lstat`s and
    /// two small reads.
    fn repair(&mut self) -> Result<()> {
        if self.stopped || self.displaced {
            return Ok(());
        }
        RuntimeDir::at(self.files.dir().to_path_buf())?;
        if !self.lock.hold_file(&self.files)? {
            tracing::warn!(workspace = %self.info.workspace.display(), "another service took this workspace's runtime files; no longer publishing them");
            self.displaced = true;
            return Ok(());
        }
        let bound = std::fs::symlink_metadata(&self.info.socket)
            .is_ok_and(|m| Some((m.dev(), m.ino())) == self.socket_id);
        if !bound {
            if self.socket_id.is_some() {
                tracing::info!(socket = %self.info.socket.display(), "our socket is gone; binding it again");
            }
            let (listener, socket) = bind_private_socket(&self.files)?;
            let meta = std::fs::symlink_metadata(&socket)
                .context(|| format!("checking {}", socket.display()))?;
            if let Some(old) = self.accept.take() {
                old.abort();
            }
            self.accept =
                Some(tokio::spawn(accept_unix(listener, self.hub.clone())).abort_handle());
            self.socket_id = Some((meta.dev(), meta.ino()));
            self.info.socket = socket;
        }
        if self.files.read_token().ok().as_deref() != Some(self.token.as_str()) {
            runtime::write_private_atomic(&self.files.token_path(), self.token.as_bytes())?;
        }
        if self.files.read_info().as_ref() != Some(&self.info) {
            let json = serde_json::to_vec_pretty(&self.info).expect("info serializes");
            runtime::write_private_atomic(&self.files.info_path(), &json)?;
        }
        Ok(())
    }
}

/// Runs [`Published::repair`] every [`runtime::self_check_interval`].
async fn keep_published(published: Arc<std::sync::Mutex<Published>>) {
    let every = runtime::self_check_interval();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut p = published.lock().expect("published lock");
        if p.stopped {
            return;
        }
        match p.repair() {
            Err(e) if !p.failing => {
                tracing::warn!(workspace = %p.info.workspace.display(), "cannot restore the runtime files: {e}");
                p.failing = true;
            }
            Err(_) => {}
            Ok(()) => p.failing = false,
        }
    }
}

/// Runs `moonkale-service serve` until `shutdown` resolves.
pub async fn serve(
    cfg: ServeConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let runtime_dir = RuntimeDir::from_env()?;
    let token = Arc::new(runtime::new_token()?);
    let tcp = match cfg.lsp_tcp {
        Some(addr) if !addr.ip().is_loopback() => return Err(Error::NonLoopback(addr)),
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .context(|| format!("binding {addr}"))?,
        ),
        None => None,
    };
    let tcp_addr = match &tcp {
        Some(l) => Some(
            l.local_addr()
                .context(|| "reading the TCP address".into())?,
        ),
        None => None,
    };
    let remote = match cfg.remote {
        Some(remote) => {
            let (listener, addr) = crate::remote::bind(remote.listen).await?;
            Some((listener, addr, remote))
        }
        None => None,
    };
    let remote_addr = remote.as_ref().map(|(_, addr, _)| *addr);
    let mut served = Vec::new();
    for root in &cfg.workspaces {
        let Some(s) = start_workspace(
            &runtime_dir,
            root,
            Listeners {
                lsp_tcp: tcp_addr,
                remote: remote_addr,
            },
            &token,
            cfg.ide.as_ref(),
            cfg.agent.as_ref(),
        )
        .await?
        else {
            let info = runtime_dir.workspace(root).read_info();
            return Err(Error::AlreadyRunning {
                workspace: root.clone(),
                pid: info.map_or("unknown".into(), |i| i.pid.to_string()),
            });
        };
        tracing::info!(workspace = %root.display(), socket = %s.info().socket.display(), "serving");
        served.push(s);
    }
    let hubs = Arc::new(
        served
            .iter()
            .map(|s| s.workspace.hub.clone())
            .collect::<Vec<_>>(),
    );
    if let Some((listener, addr, config)) = remote {
        let tls = if config.tls.is_some() {
            "TLS"
        } else {
            "no TLS"
        };
        tracing::info!(%addr, root = %config.root.display(), "remote front door ({tls}, token required)");
        tokio::spawn(crate::remote::accept_loop(
            listener,
            config,
            HubSelector::ByRoot(hubs.clone()),
        ));
    }
    if let Some(listener) = tcp {
        tracing::info!(addr = %tcp_addr.expect("bound"), "LSP over TCP (token required)");
        tokio::spawn(accept_tcp(
            listener,
            HubSelector::ByRoot(hubs),
            token.clone(),
        ));
    }
    let activity = crate::lifetime::Activity::process();
    let idle = async {
        match cfg.exit_when_idle {
            Some(period) => activity.idle_for(period).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = shutdown => tracing::info!("shutting down"),
        () = activity.stop_requested() => tracing::info!("asked to stop: shutting down"),
        () = idle => tracing::info!("nothing has gone on for {:?}: shutting down", cfg.exit_when_idle.unwrap_or_default()),
    }
    let grace = cfg
        .agent
        .as_ref()
        .map_or(std::time::Duration::ZERO, |a| a.shutdown_grace);
    for s in &mut served {
        s.workspace.stop(grace).await;
    }
    drop(served);
    Ok(())
}

/// The shared listeners a workspace's info file names.
#[derive(Clone, Copy, Default)]
pub struct Listeners {
    pub lsp_tcp: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
}

/// Takes the lock of the workspace at `root`, binds its socket, starts its
/// hub and publishes its info file. `None` if another service holds it.
pub async fn start_workspace(
    runtime_dir: &RuntimeDir,
    root: &Path,
    listeners: Listeners,
    token: &Arc<String>,
    ide: Option<&IdeConfig>,
    agent: Option<&AgentConfig>,
) -> Result<Option<Served>> {
    // A folder inside a served workspace is that service's: serving it
    // too would put two lock files over it, and Claude Code would connect
    // to neither.
    if let Some(outer) = runtime_dir.enclosing_service(root) {
        return Err(Error::InsideServed {
            workspace: root.to_path_buf(),
            enclosing: outer.workspace,
            pid: outer.pid,
        });
    }
    if let Some((enclosing, pid)) = runtime_dir.enclosing_start(root) {
        return Err(Error::InsideStarting {
            workspace: root.to_path_buf(),
            enclosing,
            pid,
        });
    }
    let files = runtime_dir.workspace(root);
    let Some(lock) = files.try_lock()? else {
        return Ok(None);
    };
    let mut workspace = Workspace::start(root.to_path_buf(), agent);
    let hub = workspace.hub.clone();
    let ide = match ide {
        Some(cfg) => Some(crate::ide::start(hub.clone(), cfg, workspace.sources.clone()).await?),
        None => None,
    };
    workspace.start_terminals(terminal_config(
        agent,
        ide.as_ref().map(|i| i.port),
        ide.as_ref().map(|i| i.links.clone()),
        workspace.sources.sessions.clone(),
    ));
    let info = ServiceInfo {
        pid: std::process::id(),
        workspace: root.to_path_buf(),
        socket: PathBuf::new(), // bound by the first repair
        lsp_tcp: listeners.lsp_tcp.map(|a| a.to_string()),
        remote: listeners.remote.map(|a| a.to_string()),
        token_file: files.token_path(),
        ide_port: ide.as_ref().map(|i| i.port),
        version: env!("CARGO_PKG_VERSION").into(),
    };
    let mut published = Published {
        files,
        lock,
        token: token.clone(),
        info,
        socket_id: None,
        accept: None,
        hub,
        stopped: false,
        displaced: false,
        failing: false,
    };
    // Publishing for the first time is a repair of nothing.
    published.repair()?;
    let published = Arc::new(std::sync::Mutex::new(published));
    let keeper = tokio::spawn(keep_published(published.clone())).abort_handle();
    Ok(Some(Served {
        workspace,
        ide,
        published,
        keeper,
    }))
}

/// Binds the workspace's socket with mode 0600. Our own stale socket (we hold
/// the lock, so nobody serves it) is replaced; anything else found at a
/// candidate path (a planted file, a symlink, another user's socket) is left
/// alone and the next name is tried.
fn bind_private_socket(files: &WorkspaceFiles) -> Result<(UnixListener, PathBuf)> {
    for path in files.socket_candidates() {
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Ok(m) if m.file_type().is_socket() && m.uid() == runtime::uid() => {
                std::fs::remove_file(&path)
                    .context(|| format!("removing stale {}", path.display()))?;
            }
            Ok(_) => {
                tracing::warn!(path = %path.display(), "something that is not our socket is in the way; trying another name");
                continue;
            }
            Err(e) => return Err(Error::io(format!("checking {}", path.display()), e)),
        }
        let listener =
            UnixListener::bind(&path).context(|| format!("binding {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .context(|| format!("restricting {}", path.display()))?;
        let meta =
            std::fs::symlink_metadata(&path).context(|| format!("checking {}", path.display()))?;
        if !meta.file_type().is_socket() || meta.mode() & 0o177 != 0 {
            return Err(Error::Invalid(format!(
                "{} is not a private socket after bind",
                path.display()
            )));
        }
        return Ok((listener, path));
    }
    Err(Error::Invalid(
        "every socket name for this workspace is taken by something else".into(),
    ))
}

async fn accept_unix(listener: UnixListener, hub: HubHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("accept on unix socket failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("too many connections; closing a new one");
            continue;
        };
        let hub = hub.clone();
        tokio::spawn(async move {
            let peer = crate::peer::unix(&stream);
            let (read, write) = stream.into_split();
            let cfg = ConnectionConfig {
                transport: Transport::Unix,
                token: None,
                hubs: HubSelector::One(hub),
                confine: None,
                peer,
            };
            let ending = serve_connection(read, write, cfg).await;
            tracing::debug!(?ending, "unix connection ended");
            drop(slot);
        });
    }
}

async fn accept_tcp(listener: TcpListener, hubs: HubSelector, token: Arc<String>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accept on TCP failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "too many connections; closing a new one");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let cfg = ConnectionConfig {
            transport: Transport::Tcp,
            token: Some(token.clone()),
            hubs: hubs.clone(),
            confine: None,
            peer: Some(format!("tcp {peer}")),
        };
        tokio::spawn(async move {
            let (read, write) = stream.into_split();
            let ending = serve_connection(read, write, cfg).await;
            tracing::debug!(%peer, ?ending, "TCP connection ended");
            drop(slot);
        });
    }
}

/// Runs `moonkale-service lsp --stdio`: one editor on stdin/stdout. The
/// workspace's socket is served too when no other service holds it, so
/// `status` and other editors can reach the same state. Returns the process
/// exit code the LSP specification asks for.
pub async fn run_stdio(
    root: PathBuf,
    ide: Option<IdeConfig>,
    agent: Option<AgentConfig>,
) -> Result<i32> {
    let served = match RuntimeDir::from_env() {
        Ok(dir) => {
            let token = Arc::new(runtime::new_token()?);
            start_workspace(
                &dir,
                &root,
                Listeners::default(),
                &token,
                ide.as_ref(),
                agent.as_ref(),
            )
            .await
            .unwrap_or_else(|e| {
                tracing::warn!("not serving the workspace socket: {e}");
                None
            })
        }
        Err(e) => {
            tracing::warn!("no runtime directory, not serving a socket: {e}");
            None
        }
    };
    let (hub, mut own) = match &served {
        Some(s) => (s.workspace.hub.clone(), None),
        None => {
            let mut w = Workspace::start(root, agent.as_ref());
            let sessions = w.sources.sessions.clone();
            w.start_terminals(terminal_config(agent.as_ref(), None, None, sessions));
            (w.hub.clone(), Some(w))
        }
    };
    let cfg = ConnectionConfig {
        transport: Transport::Stdio,
        token: None,
        hubs: HubSelector::One(hub),
        confine: None,
        peer: Some(crate::peer::parent()),
    };
    let ending = serve_connection(stdio::stdin(), stdio::stdout(), cfg).await;
    let grace = agent
        .as_ref()
        .map_or(std::time::Duration::ZERO, |a| a.shutdown_grace);
    if let Some(w) = own.as_mut() {
        w.stop(grace).await;
    }
    let mut served = served;
    if let Some(s) = served.as_mut() {
        s.workspace.stop(grace).await;
    }
    drop(served);
    Ok(match ending {
        Ending::Exit {
            after_shutdown: true,
        }
        | Ending::Eof
        | Ending::StopAsked => 0,
        Ending::Exit {
            after_shutdown: false,
        }
        | Ending::Dropped(_) => 1,
    })
}
