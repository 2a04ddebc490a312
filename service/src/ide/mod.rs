//! Claude Code's IDE: the lock file that lets the CLI find us, and the
//! WebSocket MCP server it talks to (ide-protocol.md).
//!
//! One IDE server per served workspace, on its own loopback port with its own
//! token and lock file, so a `claude` started anywhere in a workspace finds
//! exactly that workspace's state. The server is an adapter like the LSP
//! connections: it confines paths and speaks the wire, and asks the hub for
//! everything else.

pub mod handshake;
pub mod link;
pub mod lockfile;
pub mod mapped;
pub mod mcp;
pub mod proposals;
pub mod transcripts;
mod ws;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use ws::IdeLimits;

use crate::error::{Error, IoContext, Result};
use crate::hub::HubHandle;
use lockfile::{LockContents, LockFile};

/// The variables that make every CLI generation connect at once to the
/// IDE on `port` (cli-matrix.md): the port, plus what older ones need.
pub fn cli_env(port: u16) -> Vec<(String, String)> {
    [
        ("CLAUDE_CODE_SSE_PORT", port.to_string()),
        ("ENABLE_IDE_INTEGRATION", "true".into()),
        ("CLAUDE_CODE_AUTO_CONNECT_IDE", "true".into()),
        ("FORCE_CODE_TERMINAL", "true".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

pub struct IdeConfig {
    /// Where lock files go (`lockfile::lock_dir()` by default).
    pub lock_dir: PathBuf,
    /// Where proposal documents are written (outside every workspace).
    pub proposals: Arc<proposals::ProposalDir>,
    pub limits: IdeLimits,
    /// The CLI's projects folder, whose transcripts are followed while a
    /// client is connected (`None`: the service has no HOME).
    pub claude_projects: Option<PathBuf>,
    /// How often those transcripts are read.
    pub transcript_poll: std::time::Duration,
}

impl IdeConfig {
    /// The lock directory from the environment, with limits overridable by
    /// `MOONKALE_IDE_HANDSHAKE_MS` and `MOONKALE_IDE_PING_MS` (used by tests
    /// and for tuning).
    pub fn from_env() -> Result<IdeConfig> {
        let mut limits = IdeLimits::default();
        let ms = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map(std::time::Duration::from_millis)
        };
        if let Some(d) = ms("MOONKALE_IDE_HANDSHAKE_MS") {
            limits.handshake_timeout = d;
        }
        if let Some(d) = ms("MOONKALE_IDE_PING_MS") {
            limits.ping_interval = d;
        }
        Ok(IdeConfig {
            lock_dir: lockfile::lock_dir()?,
            proposals: Arc::new(proposals::ProposalDir::from_env()),
            limits,
            claude_projects: transcripts::projects_dir_from_env(),
            transcript_poll: ms("MOONKALE_TRANSCRIPT_POLL_MS")
                .unwrap_or(std::time::Duration::from_millis(250)),
        })
    }
}

/// A running IDE server. Dropping it stops accepting and removes the lock
/// file (if it is still ours).
pub struct IdeServer {
    pub port: u16,
    /// Opens sandbox links to this workspace ([`link`]).
    pub links: link::Links,
    pub lock_path: PathBuf,
    /// `None` once stopped, so the keeper cannot put the file back after
    /// the drop removed it.
    lock: Arc<Mutex<Option<LockFile>>>,
    accept: tokio::task::AbortHandle,
    keeper: tokio::task::AbortHandle,
    transcripts: Option<tokio::task::AbortHandle>,
}

impl Drop for IdeServer {
    fn drop(&mut self) {
        self.accept.abort();
        self.keeper.abort();
        if let Some(t) = &self.transcripts {
            t.abort();
        }
        drop(self.lock.lock().expect("lock file lock").take());
    }
}

/// Every [`crate::runtime::self_check_interval`]: puts the lock file back
/// whenever it was deleted, and keeps it out while another IDE's lock
/// encloses the workspace (nested workspaces: the outer one serves).
async fn keep_lock_file(lock: Arc<Mutex<Option<LockFile>>>, dir: PathBuf, root: PathBuf) {
    let every = crate::runtime::self_check_interval();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last restore failed (logged once, not every check).
    let mut failing = false;
    loop {
        tick.tick().await;
        let guard = lock.lock().expect("lock file lock");
        let Some(file) = guard.as_ref() else { return };
        if let Some(outer) = lockfile::enclosing_lock(&dir, &root, file.path()) {
            if file.withdraw() {
                tracing::info!(outer = %outer.display(), "an enclosing workspace's IDE serves Claude Code here; withdrew our lock file");
            }
            continue;
        }
        match file.restore() {
            Ok(restored) => {
                if restored {
                    tracing::info!(lock = %file.path().display(), "put our Claude Code lock file (back) in place");
                }
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!("cannot restore the Claude Code lock file: {e}");
                }
                failing = true;
            }
        }
    }
}

/// Starts the IDE server for the workspace served by `hub`; while a
/// client is connected, the edits its transcripts record go to `sources`.
pub async fn start(
    hub: HubHandle,
    cfg: &IdeConfig,
    sources: crate::change_sources::ChangeSources,
) -> Result<IdeServer> {
    lockfile::remove_stale_own_locks(&cfg.lock_dir);
    let token = Arc::new(crate::runtime::new_token()?);
    let roots = vec![hub.root().to_path_buf()];
    // Held from now on: tool files are opened from it (`workspace_fs::Root`).
    let root = crate::workspace_fs::Root::open(hub.root())
        .context(|| format!("opening workspace {}", hub.root().display()))?;
    link::remove_stale(&root);
    cfg.proposals.remove_stale();
    // A name already taken in the lock directory is not ours to replace:
    // take another port.
    let mut last_err = None;
    for _ in 0..8 {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .context(|| "binding the IDE port".into())?;
        let port = listener
            .local_addr()
            .context(|| "reading the IDE port".into())?
            .port();
        let contents = LockContents::ours(roots.clone(), &token);
        let lock = LockFile::new(&cfg.lock_dir, port, &contents);
        let placed = match lockfile::enclosing_lock(&cfg.lock_dir, hub.root(), lock.path()) {
            Some(outer) => {
                tracing::info!(outer = %outer.display(), "an enclosing workspace's IDE serves Claude Code here; no lock file of ours while it runs");
                Ok(())
            }
            None => lock.place(),
        };
        if let Err(e) = placed {
            tracing::warn!("cannot place the Claude Code lock file for port {port}: {e}");
            last_err = Some(e);
            continue;
        }
        let lock_path = lock.path().to_owned();
        tracing::info!(port, lock = %lock_path.display(), "Claude Code IDE server listening");
        let (connected, watching) = tokio::sync::watch::channel(0usize);
        let (noted, baseline) = tokio::sync::watch::channel(0u64);
        let (transcripts, baseline) = match (&cfg.claude_projects, &sources.changes) {
            (Some(projects), Some(_)) => (
                Some(
                    tokio::spawn(transcripts::run(
                        hub.root().to_path_buf(),
                        projects.clone(),
                        cfg.transcript_poll,
                        sources.clone(),
                        watching,
                        noted,
                    ))
                    .abort_handle(),
                ),
                Some(baseline),
            ),
            _ => (None, None),
        };
        let links = link::Links::new(
            hub.clone(),
            root.try_clone()
                .context(|| format!("opening workspace {}", hub.root().display()))?,
            cfg.limits.clone(),
            cfg.proposals.clone(),
        );
        let accept = tokio::spawn(ws::accept_loop(ws::Listener {
            listener,
            port,
            token: token.clone(),
            hub: hub.clone(),
            root,
            limits: cfg.limits.clone(),
            proposals: cfg.proposals.clone(),
            connected,
            baseline,
        }));
        let lock = Arc::new(Mutex::new(Some(lock)));
        let keeper = tokio::spawn(keep_lock_file(
            lock.clone(),
            cfg.lock_dir.clone(),
            hub.root().to_path_buf(),
        ))
        .abort_handle();
        return Ok(IdeServer {
            port,
            links,
            lock_path,
            lock,
            accept: accept.abort_handle(),
            keeper,
            transcripts,
        });
    }
    Err(last_err.unwrap_or_else(|| Error::Invalid("no port for the IDE server".into())))
}
