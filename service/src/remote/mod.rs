//! `serve --listen ADDR`: the front door for remote clients (the Moonkale
//! shell on another machine, a browser-hosted editor behind a proxy, the
//! `connect` command). The same LSP/JSON-RPC front door as local editors,
//! one JSON-RPC message per WebSocket text frame, behind a bearer token and
//! optionally TLS.
//!
//! A connection goes: TCP accept (at most [`RemoteLimits::max_pre_auth`] in
//! their handshake at once, each with a deadline), TLS when configured, the
//! request head decided by [`auth`] (failures slowed per address), the WebSocket
//! upgrade, and then a bridge to [`serve_connection`] over an in-memory pipe:
//! text frames in become LSP frames, LSP frames out become text frames.
//!
//! **Invariant:** a remote client names no file outside `MOONKALE_ROOT`: the
//! served workspaces lie inside it (checked at start) and every `file:` URI
//! a remote client sends is confined to it by the connection
//! ([`ConnectionConfig::confine`]). **Invariant:** a client that stops
//! reading never blocks anyone: a frame it does not take within
//! [`RemoteLimits::write_stall`] drops it (the hub only ever `try_send`s to
//! its outbox).

pub mod auth;
pub mod client;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::error::{Error, IoContext, Result};
use crate::http::{self, Prefixed};
use crate::hub::Transport;
use crate::lsp::connection::{ConnectionConfig, HubSelector, serve_connection};
use crate::lsp::framing::{FrameReader, write_frame};

/// The environment variable naming the folder remote clients are confined to.
pub const ROOT_ENV: &str = "MOONKALE_ROOT";
/// The environment variable holding the token (else `--token-file`).
pub const TOKEN_ENV: &str = "MOONKALE_TOKEN";
/// Shortest token accepted: guessing must be hopeless even unthrottled.
pub const MIN_TOKEN_LEN: usize = 32;

#[derive(Clone, Debug)]
pub struct RemoteLimits {
    /// The whole handshake (TLS, head, upgrade) must finish within this.
    pub handshake_timeout: Duration,
    /// Connections in their handshake at once; more are closed on accept.
    pub max_pre_auth: usize,
    /// Upgraded clients at once.
    pub max_clients: usize,
    /// A client that takes no frame for this long is dropped.
    pub write_stall: Duration,
    /// Largest message in either direction.
    pub max_message: usize,
}

impl Default for RemoteLimits {
    fn default() -> RemoteLimits {
        RemoteLimits {
            handshake_timeout: Duration::from_secs(10),
            max_pre_auth: 2048,
            max_clients: 64,
            write_stall: Duration::from_secs(10),
            max_message: 16 << 20,
        }
    }
}

impl RemoteLimits {
    /// The defaults, with `MOONKALE_HANDSHAKE_TIMEOUT_MS` and
    /// `MOONKALE_WRITE_STALL_MS` (for tests) applied.
    pub fn from_env() -> RemoteLimits {
        let ms = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis)
        };
        let mut limits = RemoteLimits::default();
        if let Some(d) = ms("MOONKALE_HANDSHAKE_TIMEOUT_MS") {
            limits.handshake_timeout = d;
        }
        if let Some(d) = ms("MOONKALE_WRITE_STALL_MS") {
            limits.write_stall = d;
        }
        limits
    }
}

/// How the remote front door runs.
pub struct RemoteConfig {
    pub listen: SocketAddr,
    pub token: Arc<String>,
    pub tls: Option<TlsAcceptor>,
    /// Canonical `MOONKALE_ROOT`.
    pub root: PathBuf,
    pub limits: RemoteLimits,
}

/// `MOONKALE_ROOT` as a canonical folder; it must be set and absolute.
pub fn root_from(raw: Option<std::ffi::OsString>) -> Result<PathBuf> {
    let raw = raw.ok_or_else(|| {
        Error::Invalid(format!(
            "{ROOT_ENV} must name the folder remote clients are confined to"
        ))
    })?;
    let path = PathBuf::from(&raw);
    if !path.is_absolute() {
        return Err(Error::Invalid(format!(
            "{ROOT_ENV} must be an absolute path, not {}",
            path.display()
        )));
    }
    let canonical =
        std::fs::canonicalize(&path).context(|| format!("{ROOT_ENV}={}", path.display()))?;
    if !canonical.is_dir() {
        return Err(Error::Invalid(format!(
            "{ROOT_ENV}={} is not a folder",
            path.display()
        )));
    }
    Ok(canonical)
}

/// Every workspace must lie inside the root (or be it).
pub fn check_workspaces(root: &Path, workspaces: &[PathBuf]) -> Result<()> {
    match workspaces.iter().find(|w| !w.starts_with(root)) {
        Some(w) => Err(Error::Invalid(format!(
            "the workspace {} is outside {ROOT_ENV}={}",
            w.display(),
            root.display()
        ))),
        None => Ok(()),
    }
}

/// A non-loopback address needs TLS, or the user's explicit `--insecure`.
pub fn check_listen(addr: SocketAddr, tls: bool, insecure: bool) -> Result<()> {
    if addr.ip().is_loopback() || tls || insecure {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "refusing to listen on {addr} without TLS: pass --tls-cert and --tls-key, or --insecure \
         if something else (a VPN, an SSH tunnel) protects the connection"
    )))
}

/// The token: `MOONKALE_TOKEN`, else the first line of `file`.
pub fn token_from(env: Option<String>, file: Option<&Path>) -> Result<String> {
    let token = match (env, file) {
        (Some(t), _) => t,
        (None, Some(path)) => {
            let bytes = crate::runtime::read_small_private(path)?;
            String::from_utf8(bytes)
                .map_err(|_| Error::Invalid(format!("{} is not UTF-8", path.display())))?
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        }
        (None, None) => {
            return Err(Error::Invalid(format!(
                "remote clients need a token: set {TOKEN_ENV} or pass --token-file"
            )));
        }
    };
    let token = token.trim().to_owned();
    if token.len() < MIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::Invalid(format!(
            "the token ({TOKEN_ENV}, else the first line of --token-file) must be at least \
             {MIN_TOKEN_LEN} printable characters without spaces"
        )));
    }
    Ok(token)
}

/// A TLS acceptor for the user's PEM certificate chain and private key.
pub fn tls_from(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    // A file that is not there is an OS error, said as such ("reading
    // cert.pem: No such file or directory"), not as "I/O error: …".
    let bad = |what: &Path, e: rustls::pki_types::pem::Error| match e {
        rustls::pki_types::pem::Error::Io(e) => Error::io(format!("reading {}", what.display()), e),
        e => Error::Invalid(format!("reading {}: {e}", what.display())),
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(cert, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(cert, e))?;
    if chain.is_empty() {
        return Err(Error::Invalid(format!(
            "no certificate in {}",
            cert.display()
        )));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Invalid(format!("TLS: {e}")))?
    .with_no_client_auth()
    .with_single_cert(chain, key_der)
    .map_err(|e| Error::Invalid(format!("TLS: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Binds the listener (so a taken port fails `serve` at once).
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr)
        .await
        .context(|| format!("binding {addr}"))?;
    let local = listener
        .local_addr()
        .context(|| "reading the remote address".into())?;
    Ok((listener, local))
}

struct Shared {
    token: Arc<String>,
    tls: Option<TlsAcceptor>,
    root: Arc<PathBuf>,
    hubs: HubSelector,
    limits: RemoteLimits,
    throttle: Mutex<auth::Throttle>,
}

/// Serves remote clients on `listener` until the task is dropped.
pub async fn accept_loop(listener: TcpListener, cfg: RemoteConfig, hubs: HubSelector) {
    let pre_auth = Arc::new(Semaphore::new(cfg.limits.max_pre_auth));
    let clients = Arc::new(Semaphore::new(cfg.limits.max_clients));
    let shared = Arc::new(Shared {
        token: cfg.token,
        tls: cfg.tls,
        root: Arc::new(cfg.root),
        hubs,
        limits: cfg.limits,
        throttle: Mutex::default(),
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("remote accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = pre_auth.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "too many remote handshakes in progress; closing a new one");
            continue;
        };
        let shared = shared.clone();
        let clients = clients.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let deadline = shared.limits.handshake_timeout;
            let upgraded = tokio::time::timeout(deadline, handshake(stream, peer, &shared)).await;
            drop(permit);
            let ws = match upgraded {
                Ok(Some(ws)) => ws,
                Ok(None) => return,
                Err(_) => {
                    tracing::info!(%peer, "remote handshake timed out");
                    return;
                }
            };
            let Ok(_slot) = clients.try_acquire_owned() else {
                tracing::warn!(%peer, "too many remote clients; closing a new one");
                return;
            };
            tracing::info!(%peer, "remote client connected");
            bridge(ws, peer, &shared).await;
            tracing::info!(%peer, "remote client gone");
        });
    }
}

fn lock(throttle: &Mutex<auth::Throttle>) -> std::sync::MutexGuard<'_, auth::Throttle> {
    // The throttle holds counts only: a panic elsewhere leaves them usable.
    throttle
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A slowed attempt that waits; dropping it ends the wait in the throttle.
struct Waiting<'a> {
    throttle: &'a Mutex<auth::Throttle>,
    ip: std::net::IpAddr,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(self.throttle).done_waiting(self.ip);
    }
}

/// TCP or TLS, behind one type.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Ws = tokio_tungstenite::WebSocketStream<Prefixed<Box<dyn Io>>>;

/// TLS (when configured), the request head's verdict, the upgrade. `None`
/// when the client was refused or went away.
async fn handshake(stream: TcpStream, peer: SocketAddr, shared: &Shared) -> Option<Ws> {
    let mut stream: Box<dyn Io> = match &shared.tls {
        Some(tls) => match tls.accept(stream).await {
            Ok(s) => Box::new(s),
            Err(e) => {
                tracing::info!(%peer, "TLS handshake failed: {e}");
                return None;
            }
        },
        None => Box::new(stream),
    };
    let (head, head_len) = match http::read_head(&mut stream).await? {
        Ok(read) => read,
        Err(refusal) => {
            http::refuse(&mut stream, refusal).await;
            return None;
        }
    };
    let verdict = http::parse_head(&head[..head_len]).and_then(|h| auth::decide(&h, &shared.token));
    if let Err(mut refusal) = verdict {
        if refusal.status == 401 {
            let now = std::time::Instant::now();
            let slowed = lock(&shared.throttle).failed(peer.ip(), now);
            match slowed {
                auth::Slowed::Throttled => refusal = auth::THROTTLED,
                auth::Slowed::After(delay) if delay.is_zero() => {}
                auth::Slowed::After(delay) => {
                    // Counted as waiting until answered, or until the
                    // handshake deadline drops this future.
                    let _waiting = Waiting {
                        throttle: &shared.throttle,
                        ip: peer.ip(),
                    };
                    let deadline = shared.limits.handshake_timeout / 2;
                    tokio::time::sleep(delay.min(deadline)).await;
                }
            }
        }
        // Neither the presented token nor ours is logged.
        tracing::warn!(%peer, status = refusal.status, "refused a remote client: {}", refusal.reason);
        http::refuse(&mut stream, refusal).await;
        return None;
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(shared.limits.max_message))
        .max_frame_size(Some(shared.limits.max_message))
        .max_write_buffer_size(2 * shared.limits.max_message);
    match tokio_tungstenite::accept_async_with_config(Prefixed::new(head, stream), Some(config))
        .await
    {
        Ok(ws) => Some(ws),
        Err(e) => {
            tracing::info!(%peer, "remote upgrade failed: {e}");
            None
        }
    }
}

/// Runs one remote client: its text frames feed [`serve_connection`] as LSP
/// frames over an in-memory pipe, whose output goes back as text frames.
async fn bridge(ws: Ws, peer: SocketAddr, shared: &Shared) {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (their_read, their_write) = tokio::io::split(theirs);
    let cfg = ConnectionConfig {
        transport: Transport::Remote,
        // The bearer token was checked at the upgrade.
        token: None,
        hubs: shared.hubs.clone(),
        confine: Some(shared.root.clone()),
        peer: Some(format!("remote {peer}")),
    };
    let connection = tokio::spawn(serve_connection(their_read, their_write, cfg));
    let (our_read, mut our_write) = tokio::io::split(ours);
    let (mut to_client, mut from_client) = ws.split();

    let inbound = async {
        while let Some(frame) = from_client.next().await {
            match frame {
                Ok(Message::Text(text)) => {
                    if write_frame(&mut our_write, text.as_bytes()).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Binary(_)) => {
                    tracing::info!("a remote client sent a binary frame; dropped");
                    break;
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = our_write.shutdown().await;
    };
    let outbound = async {
        let mut frames = FrameReader::new(our_read);
        while let Ok(Some(body)) = frames.read_frame().await {
            // serve_connection writes JSON it built: valid UTF-8.
            let text = String::from_utf8_lossy(&body).into_owned();
            match tokio::time::timeout(
                shared.limits.write_stall,
                to_client.send(Message::text(text)),
            )
            .await
            {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                Err(_) => {
                    tracing::warn!("a remote client stopped reading; dropped");
                    break;
                }
            }
        }
        let _ = to_client.close().await;
    };
    tokio::select! {
        () = inbound => {}
        () = outbound => {}
    }
    // Closing our end of the pipe is the connection's end of input: it
    // detaches the client and ends.
    drop(our_write);
    if tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .is_err()
    {
        tracing::warn!("a remote connection did not end with its client");
    }
}
