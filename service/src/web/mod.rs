//! `moonkale-service web`: the Moonkale shell (`moonkale-shell`'s
//! components) served to browsers with Dioxus liveview. A front door
//! beside LSP and ACP: each open page is its own connection to the
//! workspace's service (local, or remote through `serve --listen`), so the
//! service holds the truth and a page holds only what it shows.
//!
//! One request per TCP (or TLS) connection, parsed with the service's
//! bounded head reader ([`crate::http`]); [`gate`] decides it before any
//! workspace data is touched; the page's WebSocket is tungstenite's,
//! adapted to liveview's socket, paced and bounded ([`page`]).

mod assets;
pub mod gate;
pub mod notify;
mod page;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moonkale_client::Client;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::acp::Target;
use crate::http::{self, Prefixed};
use crate::remote::auth;
use gate::{Gate, Route};

/// Pages open at once (each holds a connection to the service and a
/// rendered tree).
pub const MAX_PAGES: usize = 32;
/// Largest message a page may send (its events are small; an input's
/// value is the largest).
const MAX_MESSAGE: usize = 1 << 20;
/// A request head must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What `web` was asked to serve.
pub struct WebConfig {
    pub target: Target,
    pub listen: SocketAddr,
    pub tls: Option<TlsAcceptor>,
    /// The user's command, run with a question's summary once it waited
    /// unanswered.
    pub notify: Option<notify::Notify>,
}

struct Shared {
    target: Target,
    tls: Option<TlsAcceptor>,
    gate: Mutex<Gate>,
    throttle: Mutex<auth::Throttle>,
    pool: dioxus_liveview::LiveViewPool,
    pages: Arc<Semaphore>,
}

/// Serves until Ctrl-C or SIGTERM. Prints the URL to open on stdout, one
/// line; the secret in it is never logged.
pub async fn run(
    cfg: WebConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> crate::Result<()> {
    // Reach the service first: a page that cannot is no use, and the
    // notifier follows the questions on this connection.
    let first = connect(&cfg.target).await?;
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| crate::Error::Invalid(format!("cannot listen on {}: {e}", cfg.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| crate::Error::Invalid(format!("cannot listen on {}: {e}", cfg.listen)))?;
    let secret = crate::runtime::new_token()?;
    let secure = cfg.tls.is_some();
    let mut gate = Gate::new(secret.clone(), addr, secure);
    // Listening on every address (0.0.0.0, ::), a phone names this machine
    // by one of its addresses or by its host name: each is a Host the page
    // answers to, and the URL names the machine by its host name.
    let mut shown = None;
    if addr.ip().is_unspecified() {
        for name in machine_names() {
            gate.allow_host(&name, addr.port());
        }
        shown = host_name();
    }
    let url = url_of(addr, shown.as_deref(), secure, &secret);
    crate::stdout::line(&url);
    if !addr.ip().is_loopback() {
        eprintln!("{}", notify::qr_text(&url));
    }
    let shared = Arc::new(Shared {
        target: cfg.target,
        tls: cfg.tls,
        gate: Mutex::new(gate),
        throttle: Mutex::default(),
        pool: dioxus_liveview::LiveViewPool::new(),
        pages: Arc::new(Semaphore::new(MAX_PAGES)),
    });
    let notifier = cfg
        .notify
        .map(|notify| tokio::spawn(notify::run(first.clone(), notify)));
    tokio::select! {
        () = accept_loop(listener, shared) => {}
        () = shutdown => {}
    }
    if let Some(n) = notifier {
        n.abort();
    }
    drop(first);
    Ok(())
}

fn url_of(addr: SocketAddr, name: Option<&str>, secure: bool, secret: &str) -> String {
    let scheme = if secure { "https" } else { "http" };
    let host = match (name, addr.ip()) {
        (Some(name), _) => name.to_owned(),
        (None, ip) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        (None, std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        (None, ip) => ip.to_string(),
    };
    format!("{scheme}://{host}:{}/?token={secret}", addr.port())
}

/// This machine's host name, if it has one.
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the name is read up to
    // its NUL (or the end, if the name was cut).
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..len]).into_owned();
    (ok && !name.is_empty()).then_some(name)
}

/// The names a browser elsewhere may use for this machine: its host name
/// and the address of each network interface (IPv6 in brackets).
fn machine_names() -> Vec<String> {
    let mut names: Vec<String> = host_name().into_iter().collect();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list we free below; each
    // entry's address is read only when present, by its family's size.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return names;
        }
        let mut at = list;
        while !at.is_null() {
            let addr = (*at).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*addr.cast::<libc::sockaddr_in>();
                        let ip = std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
                        names.push(ip.to_string());
                    }
                    libc::AF_INET6 => {
                        let v6 = &*addr.cast::<libc::sockaddr_in6>();
                        let ip = std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr);
                        names.push(format!("[{ip}]"));
                    }
                    _ => {}
                }
            }
            at = (*at).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    names.sort();
    names.dedup();
    names
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("web accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            serve_one(stream, peer, shared).await;
        });
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

async fn serve_one(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let mut stream: Box<dyn Io> = match &shared.tls {
        Some(tls) => match tokio::time::timeout(HEAD_TIMEOUT, tls.accept(stream)).await {
            Ok(Ok(s)) => Box::new(s),
            _ => return,
        },
        None => Box::new(stream),
    };
    let (bytes, head_len) =
        match tokio::time::timeout(HEAD_TIMEOUT, http::read_head(&mut stream)).await {
            Ok(Some(Ok(read))) => read,
            Ok(Some(Err(refusal))) => return http::refuse(&mut stream, refusal).await,
            _ => return,
        };
    // A login's cookie value, made before the gate is locked (and never
    // empty: an empty value would match an empty cookie).
    let Ok(fresh) = crate::runtime::new_token() else {
        return http::refuse(
            &mut stream,
            http::Refusal::new(500, "no randomness for a login"),
        )
        .await;
    };
    let mut wanted = assets::Wanted::default();
    let decided = http::parse_head(&bytes[..head_len]).and_then(|head| {
        wanted = assets::Wanted::of(&head);
        let mut gate = shared
            .gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        gate.route(&head, || fresh)
    });
    let route = match decided {
        Ok(route) => route,
        Err(refusal) => {
            if refusal.status == 401 {
                slow_down(&shared, peer).await;
            }
            tracing::info!(%peer, status = refusal.status, "web request refused: {}", refusal.reason);
            return http::refuse(&mut stream, refusal).await;
        }
    };
    match route {
        Route::Login { set_cookie } => {
            let extra = format!("Location: /\r\nSet-Cookie: {set_cookie}\r\n{NO_STORE}");
            respond(&mut stream, "303 See Other", &extra, "text/plain", b"").await;
        }
        Route::Index => {
            respond(
                &mut stream,
                "200 OK",
                NO_STORE,
                "text/html; charset=utf-8",
                INDEX.as_bytes(),
            )
            .await;
        }
        Route::Asset(path) => {
            let asset = assets::asset(path);
            let answer = asset.answer(&wanted);
            match answer.body {
                Some(body) => {
                    respond(&mut stream, "200 OK", &answer.headers, asset.kind, body).await;
                }
                None => {
                    // No body and no length: the browser keeps its copy's.
                    let head = format!(
                        "HTTP/1.1 304 Not Modified\r\n{}Connection: close\r\n\r\n",
                        answer.headers
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.shutdown().await;
                }
            }
        }
        Route::Socket => {
            let Ok(page) = shared.pages.clone().try_acquire_owned() else {
                return http::refuse(
                    &mut stream,
                    http::Refusal::new(429, "too many pages are open"),
                )
                .await;
            };
            let config = WebSocketConfig::default()
                .max_message_size(Some(MAX_MESSAGE))
                .max_frame_size(Some(MAX_MESSAGE));
            let Ok(ws) = tokio_tungstenite::accept_async_with_config(
                page::Deadline::new(Prefixed::new(bytes, stream)),
                Some(config),
            )
            .await
            else {
                return;
            };
            let client = match connect(&shared.target).await {
                Ok(client) => client,
                Err(e) => {
                    tracing::warn!("a page could not reach the service: {e}");
                    return;
                }
            };
            tracing::info!(%peer, "page opened");
            let _ = shared
                .pool
                .launch_virtualdom(page::socket(ws), move || {
                    dioxus::prelude::VirtualDom::new(moonkale_shell::App)
                        .with_root_context(moonkale_shell::Shell { client })
                })
                .await;
            drop(page);
            tracing::info!(%peer, "page closed");
            let _ = tokio::task::spawn_blocking(release_freed_memory).await;
        }
    }
}

/// Gives what a closed page freed (its rendered tree, its sockets'
/// buffers) back to the system: glibc's arenas would keep it for reuse,
/// and the process would stay at the size of its busiest moment.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A failed login waits longer the more an address failed (as the remote
/// front door's token does).
async fn slow_down(shared: &Shared, peer: SocketAddr) {
    let slowed = shared
        .throttle
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .failed(peer.ip(), std::time::Instant::now());
    if let auth::Slowed::After(delay) = slowed
        && !delay.is_zero()
    {
        tokio::time::sleep(delay.min(HEAD_TIMEOUT)).await;
        shared
            .throttle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .done_waiting(peer.ip());
    }
}

/// Answers one request and closes the connection.
async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: &str,
    extra: &str,
    kind: &str,
    body: &[u8],
) {
    let head = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: {kind}\r\nContent-Length: {}\r\n\
         Referrer-Policy: no-referrer\r\n\
         X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n\
         Content-Security-Policy: {CSP}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.shutdown().await;
}

/// Nothing but our own script and stylesheet, and the socket to our own
/// origin: no inline script, no eval, no external resource.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

const INDEX: &str = include_str!("index.html");

/// The page itself, its login and refusals are never kept by a browser.
const NO_STORE: &str = "Cache-Control: no-store\r\n";

/// Connects one page (or the notifier) to the workspace's service.
async fn connect(target: &Target) -> crate::Result<Client> {
    crate::acp::connect_as(target, moonkale_client::Role::AgentPanel, NAME).await
}

/// The name a page goes by in the service's editor list.
const NAME: &str = moonkale_shell::CLIENT_NAME;

#[cfg(test)]
mod tests {
    use super::*;

    /// Served on every address, the page answers to the machine's own
    /// names (loopback included) and names it by its host name.
    #[test]
    fn every_address_means_the_machines_names() {
        let names = machine_names();
        assert!(names.iter().any(|n| n == "127.0.0.1"), "{names:?}");
        let addr: SocketAddr = "0.0.0.0:8443".parse().unwrap();
        let url = url_of(addr, Some("devbox"), true, "k");
        assert_eq!(url, "https://devbox:8443/?token=k");
        assert_eq!(
            url_of("127.0.0.1:80".parse().unwrap(), None, false, "k"),
            "http://127.0.0.1:80/?token=k"
        );
    }
}
