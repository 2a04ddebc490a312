//! The WebSocket listener for Claude Code, and one task pair per CLI.
//!
//! Accept: at most [`IdeLimits::max_pre_auth`] connections may be in their
//! handshake at once (more are closed at once); the whole handshake has a
//! deadline; the request head is read by us with a cap and decided by
//! [`handshake::decide`] before tungstenite sees a byte, so a refused client
//! never gets a 101.
//!
//! Per client: a reader (JSON-RPC in, in order) and a writer (responses,
//! hub notifications, `selection_changed` as the hub paces it, pings).
//! Outgoing bytes are counted: past the high-water mark the reader stops
//! reading; past the hard cap the client is dropped, so a CLI that stops
//! reading cannot grow our memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::handshake::{self, HostRule};
use super::mcp::{self, ToolCall};
use crate::core::path_map::PathMap;
use crate::http::{self, Prefixed, Refusal};
use crate::hub::{Event, HubHandle, IdeClientId, IdeScope, SelectionNotification};
use crate::lsp::message::{self, Message as RpcMessage, RequestId, ResponseError, code};
use crate::mcp::Method;

/// Tunables of the IDE server; tests shorten the times.
#[derive(Clone, Debug)]
pub struct IdeLimits {
    pub handshake_timeout: Duration,
    pub max_pre_auth: usize,
    pub max_clients: usize,
    pub ping_interval: Duration,
    pub max_message: usize,
    /// Queued outgoing bytes at which we stop reading the client.
    pub high_water: usize,
    /// Queued outgoing bytes at which the client is dropped.
    pub hard_cap: usize,
}

impl Default for IdeLimits {
    fn default() -> IdeLimits {
        IdeLimits {
            handshake_timeout: Duration::from_secs(10),
            max_pre_auth: 8,
            max_clients: 64,
            ping_interval: Duration::from_secs(30),
            max_message: 16 << 20,
            high_water: 1 << 20,
            hard_cap: 32 << 20,
        }
    }
}

pub(super) struct Listener {
    pub listener: TcpListener,
    pub port: u16,
    pub token: Arc<String>,
    pub hub: HubHandle,
    pub root: crate::workspace_fs::Root,
    pub limits: IdeLimits,
    pub proposals: Arc<super::proposals::ProposalDir>,
    /// How many clients are connected (the transcript reader follows it).
    pub connected: watch::Sender<usize>,
    /// Bumped by the transcript reader each time it has noted where the
    /// transcripts end (`None`: no reader).
    pub baseline: Option<watch::Receiver<u64>>,
}

/// Counts a connected client for as long as it lives.
struct Connected<'a>(&'a watch::Sender<usize>);

impl<'a> Connected<'a> {
    /// Counts the client. The first one waits (up to 2 s) until the
    /// transcript reader has noted where the transcripts end, so that
    /// whatever its CLI records once connected is read.
    async fn new(
        count: &'a watch::Sender<usize>,
        baseline: Option<&watch::Receiver<u64>>,
    ) -> Connected<'a> {
        let mut baseline = baseline.cloned();
        if let Some(b) = &mut baseline {
            b.borrow_and_update();
        }
        let mut first = false;
        count.send_modify(|n| {
            first = *n == 0;
            *n += 1;
        });
        if let (true, Some(mut b)) = (first, baseline) {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), b.changed()).await;
        }
        Connected(count)
    }
}

impl Drop for Connected<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

pub(super) async fn accept_loop(l: Listener) {
    let shared = Arc::new(Shared {
        host_rule: HostRule::Port(l.port),
        scope: IdeScope::Host,
        token: l.token,
        hub: l.hub,
        root: l.root,
        limits: l.limits,
        proposals: l.proposals,
        connected: l.connected,
        baseline: l.baseline,
        one_session: None,
        closed: None,
        paths: Arc::default(),
    });
    let gates = Gates::new(&shared.limits);
    loop {
        match l.listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                gates.spawn_client(stream, &shared);
            }
            Err(e) => {
                tracing::warn!("IDE accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A sandbox link's accept loop ([`super::link`]): the same handshake and
/// client as the loopback port's, on a unix socket, for one linked session
/// at a time.
pub(super) async fn accept_link_loop(listener: UnixListener, shared: Arc<Shared>) {
    let gates = Gates::new(&shared.limits);
    loop {
        match listener.accept().await {
            Ok((stream, _)) => gates.spawn_client(stream, &shared),
            Err(e) => {
                tracing::warn!("sandbox link accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The limits on connections of one listener: how many may be in their
/// handshake, how many may be served.
struct Gates {
    pre_auth: Arc<Semaphore>,
    clients: Arc<Semaphore>,
}

impl Gates {
    fn new(limits: &IdeLimits) -> Gates {
        Gates {
            pre_auth: Arc::new(Semaphore::new(limits.max_pre_auth)),
            clients: Arc::new(Semaphore::new(limits.max_clients)),
        }
    }

    fn spawn_client<S>(&self, stream: S, shared: &Arc<Shared>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Ok(permit) = self.pre_auth.clone().try_acquire_owned() else {
            tracing::warn!("too many Claude Code handshakes in progress; closing a new connection");
            return;
        };
        let shared = shared.clone();
        let clients = self.clients.clone();
        tokio::spawn(async move {
            let upgraded =
                tokio::time::timeout(shared.limits.handshake_timeout, handshake(stream, &shared))
                    .await;
            drop(permit);
            let (ws, _session) = match upgraded {
                Ok(Some(upgraded)) => upgraded,
                Ok(None) => return,
                Err(_) => {
                    tracing::info!("Claude Code handshake timed out");
                    return;
                }
            };
            let Ok(_slot) = clients.try_acquire_owned() else {
                tracing::warn!("too many Claude Code clients; closing a new one");
                return;
            };
            let _counted = Connected::new(&shared.connected, shared.baseline.as_ref()).await;
            serve_client(ws, &shared).await;
        });
    }
}

/// What every connection of one listener shares.
pub(super) struct Shared {
    pub host_rule: HostRule,
    /// What its clients may learn of the editors' documents: everything on
    /// the host's port, the workspace's only through a sandbox link.
    pub scope: IdeScope,
    pub token: Arc<String>,
    pub hub: HubHandle,
    pub root: crate::workspace_fs::Root,
    pub limits: IdeLimits,
    /// Where `openDiff` writes its proposal documents.
    pub proposals: Arc<super::proposals::ProposalDir>,
    pub connected: watch::Sender<usize>,
    pub baseline: Option<watch::Receiver<u64>>,
    /// A sandbox link's single session: held by the upgraded client, so a
    /// second one is refused (409) until the first has gone.
    pub one_session: Option<Arc<Semaphore>>,
    /// A sandbox link's life: its sender is dropped when the link closes,
    /// which ends every client on it.
    pub closed: Option<watch::Receiver<()>>,
    /// Where the sandbox mounts what (a link's; identity elsewhere): every
    /// path in and out is mapped ([`super::mapped`]).
    pub paths: Arc<PathMap>,
}

type Ws<S> = tokio_tungstenite::WebSocketStream<Prefixed<S>>;

/// Reads and decides the request head, then lets tungstenite finish the
/// upgrade, with the link's session slot if the listener has one. `None`
/// when the client was refused or went away.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    shared: &Shared,
) -> Option<(Ws<S>, Option<OwnedSemaphorePermit>)> {
    let (head, head_len) = match http::read_head(&mut stream).await? {
        Ok(read) => read,
        Err(refusal) => {
            http::refuse(&mut stream, refusal).await;
            return None;
        }
    };
    let parsed = http::parse_head(&head[..head_len]);
    let decision =
        parsed.and_then(|h| handshake::decide(&h, shared.host_rule, &shared.token).map(|()| h));
    let parsed = match decision {
        Ok(h) => h,
        Err(refusal) => {
            // Neither the presented token nor ours is logged.
            tracing::warn!(
                status = refusal.status,
                "refused a Claude Code connection: {}",
                refusal.reason
            );
            http::refuse(&mut stream, refusal).await;
            return None;
        }
    };
    let session = match &shared.one_session {
        None => None,
        Some(slot) => match slot.clone().try_acquire_owned() {
            Ok(held) => Some(held),
            Err(_) => {
                tracing::warn!("refused a second Claude Code on a sandbox link");
                let busy = Refusal::new(409, "a Claude Code is already linked here");
                http::refuse(&mut stream, busy).await;
                return None;
            }
        },
    };
    let offers_mcp = parsed.offers_mcp();
    let config = WebSocketConfig::default()
        .max_message_size(Some(shared.limits.max_message))
        .max_frame_size(Some(shared.limits.max_message))
        .max_write_buffer_size(shared.limits.hard_cap);
    // The error type is tungstenite's, not ours to shrink.
    #[allow(clippy::result_large_err)]
    let echo = move |_: &Request, mut resp: Response| {
        if offers_mcp {
            resp.headers_mut()
                .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("mcp"));
        }
        Ok(resp)
    };
    let prefixed = Prefixed::new(head, stream);
    match tokio_tungstenite::accept_hdr_async_with_config(prefixed, echo, Some(config)).await {
        Ok(ws) => Some((ws, session)),
        Err(e) => {
            tracing::info!("Claude Code upgrade failed: {e}");
            None
        }
    }
}

/// What the reader asks the writer to do.
enum Out {
    Text(String),
    /// The client finished `initialize`: send it the current selection soon.
    Initialized,
    /// The client listed the tools: its UI may only now listen for
    /// `selection_changed`, so the current selection is sent again shortly.
    ToolsListed,
    Close(CloseCode, &'static str),
}

/// Counts bytes queued for one client.
struct Backlog {
    bytes: AtomicUsize,
    drained: Notify,
    high_water: usize,
    hard_cap: usize,
    /// Set once the hard cap was passed: the client is dropped.
    overflowed: std::sync::atomic::AtomicBool,
    overflow: Notify,
}

impl Backlog {
    fn new(high_water: usize, hard_cap: usize) -> Backlog {
        Backlog {
            bytes: AtomicUsize::new(0),
            drained: Notify::new(),
            high_water,
            hard_cap,
            overflowed: std::sync::atomic::AtomicBool::new(false),
            overflow: Notify::new(),
        }
    }

    /// Accounts for `len` more bytes; `false` (and the client is to be
    /// dropped) if that passes the hard cap.
    fn add(&self, len: usize) -> bool {
        if self.bytes.fetch_add(len, Ordering::AcqRel) + len <= self.hard_cap {
            return true;
        }
        self.overflowed.store(true, Ordering::Release);
        self.overflow.notify_waiters();
        false
    }

    /// Resolves once the hard cap has been passed.
    async fn overflowed(&self) {
        loop {
            let overflow = self.overflow.notified();
            if self.overflowed.load(Ordering::Acquire) {
                return;
            }
            overflow.await;
        }
    }

    fn sent(&self, len: usize) {
        self.bytes.fetch_sub(len, Ordering::AcqRel);
        self.drained.notify_waiters();
    }

    async fn below_high_water(&self) {
        loop {
            let drained = self.drained.notified();
            if self.bytes.load(Ordering::Acquire) <= self.high_water {
                return;
            }
            drained.await;
        }
    }
}

async fn serve_client<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    ws: Ws<S>,
    shared: &Shared,
) {
    let _busy = crate::lifetime::Activity::process().busy();
    let client = shared.hub.new_ide_client_id();
    tracing::info!(client = client.0, "Claude Code connected");
    let (sink, mut stream) = ws.split();
    let (out_tx, out_rx) = mpsc::channel::<Out>(1024);
    let (hub_tx, hub_rx) = mpsc::channel::<String>(1024);
    let backlog = Arc::new(Backlog::new(
        shared.limits.high_water,
        shared.limits.hard_cap,
    ));
    let last_heard = Arc::new(std::sync::Mutex::new(Instant::now()));
    let mut writer = tokio::spawn(write_loop(WriterState {
        sink,
        out_rx,
        hub_rx,
        backlog: backlog.clone(),
        selection: shared.hub.selection(),
        scope: shared.scope,
        paths: shared.paths.clone(),
        ping_interval: shared.limits.ping_interval,
        last_heard: last_heard.clone(),
    }));
    let mut reader = Reader {
        client,
        shared,
        out: out_tx,
        backlog,
        hub_outbox: Some(hub_tx),
        attached: false,
    };
    let mut writer_done = false;
    let mut closed = shared.closed.clone();
    loop {
        let frame = tokio::select! {
            frame = stream.next() => frame,
            () = link_closed(&mut closed) => {
                reader.close(CloseCode::Away, "the sandbox link was closed").await;
                break;
            }
            // The writer gave up (a silent client, a failed write): so do we.
            _ = &mut writer => {
                writer_done = true;
                break;
            }
        };
        let Some(frame) = frame else { break };
        *last_heard.lock().expect("last_heard lock") = Instant::now();
        let keep_going = match frame {
            Ok(Message::Text(text)) => reader.text(text.as_bytes()).await,
            Ok(Message::Binary(_)) => {
                reader
                    .close(CloseCode::Unsupported, "binary frames are not used")
                    .await;
                false
            }
            Ok(Message::Close(_)) => false,
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => true,
            Err(e) => {
                let (close, why) = close_for(&e);
                tracing::info!(client = client.0, "Claude Code connection error: {e}");
                if let Some(close) = close {
                    reader.close(close, why).await;
                }
                false
            }
        };
        if !keep_going {
            break;
        }
        // Past the high-water mark we stop reading this client until its
        // backlog drains, or until the writer gives up on it.
        tokio::select! {
            () = reader.backlog.below_high_water() => {}
            _ = &mut writer => {
                writer_done = true;
                break;
            }
        }
    }
    if reader.attached {
        shared.hub.send(Event::IdeDetach { client }).await;
    }
    drop(reader);
    if !writer_done {
        let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    }
    tracing::info!(client = client.0, "Claude Code disconnected");
}

/// Resolves once a sandbox link's sender is gone; never without a link.
async fn link_closed(closed: &mut Option<watch::Receiver<()>>) {
    match closed {
        Some(rx) => while rx.changed().await.is_ok() {},
        None => std::future::pending().await,
    }
}

/// The close code RFC 6455 asks for after a read error, if one can be sent.
fn close_for(e: &WsError) -> (Option<CloseCode>, &'static str) {
    use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { .. }) => {
            (Some(CloseCode::Size), "message too big")
        }
        WsError::Capacity(_) => (Some(CloseCode::Size), "message too big"),
        WsError::Utf8(_) => (Some(CloseCode::Invalid), "text is not UTF-8"),
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => (None, ""),
        WsError::Protocol(_) => (Some(CloseCode::Protocol), "protocol error"),
        _ => (None, ""),
    }
}

struct Reader<'a> {
    client: IdeClientId,
    shared: &'a Shared,
    out: mpsc::Sender<Out>,
    backlog: Arc<Backlog>,
    /// Handed to the hub once the client has initialized.
    hub_outbox: Option<mpsc::Sender<String>>,
    attached: bool,
}

impl Reader<'_> {
    /// Handles one JSON-RPC text; `false` ends the connection.
    async fn text(&mut self, bytes: &[u8]) -> bool {
        let msg = match message::parse(bytes) {
            Ok(msg) => msg,
            Err(err) => return self.send(err.to_response()).await,
        };
        match msg {
            RpcMessage::Request { id, method, params } => {
                let params: Value = serde_json::from_str(params.get()).unwrap_or(Value::Null);
                self.request(id, &method, params).await
            }
            RpcMessage::Notification { method, params } => {
                match method.as_str() {
                    "ide_connected" => {
                        let pid = serde_json::from_str::<Value>(params.get())
                            .ok()
                            .and_then(|p| p.get("pid").and_then(Value::as_u64))
                            .and_then(|p| u32::try_from(p).ok());
                        tracing::info!(
                            client = self.client.0,
                            ?pid,
                            "Claude Code identified itself"
                        );
                        self.shared
                            .hub
                            .send(Event::IdeConnected {
                                client: self.client,
                                pid,
                            })
                            .await;
                    }
                    "notifications/initialized" => {}
                    _ => tracing::debug!(client = self.client.0, %method, "ignoring notification"),
                }
                true
            }
            RpcMessage::Response { .. } => true,
        }
    }

    async fn request(&mut self, id: RequestId, method: &str, params: Value) -> bool {
        let result = match Method::parse(method) {
            Method::Initialize => {
                let result = mcp::SERVER.initialize_result(&params);
                if let Some(outbox) = self.hub_outbox.take() {
                    self.shared
                        .hub
                        .send(Event::IdeAttach {
                            client: self.client,
                            scope: self.shared.scope,
                            outbox,
                        })
                        .await;
                    self.attached = true;
                    let _ = self.out.send(Out::Initialized).await;
                }
                Ok(result)
            }
            Method::ToolsList => {
                let _ = self.out.send(Out::ToolsListed).await;
                Ok(mcp::tools_list())
            }
            Method::Ping => Ok(json!({})),
            Method::ToolsCall => return self.tool_call(id, &params).await,
            Method::Unknown(method) => Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                format!("unknown method {method}"),
            )),
        };
        self.send(message::response(&id, &result)).await
    }

    async fn tool_call(&mut self, id: RequestId, params: &Value) -> bool {
        let params = match super::mapped::call_to_host(&self.shared.paths, params) {
            Ok(params) => params,
            Err(unmapped) => {
                let refused = Ok(crate::hub::error_result(unmapped.to_string()));
                return self.send(message::response(&id, &refused)).await;
            }
        };
        let (call, cleanup) =
            match mcp::prepare_call(&params, &self.shared.root, &self.shared.proposals) {
                ToolCall::Answer(result) => {
                    return self.send(message::response(&id, &Ok(result))).await;
                }
                ToolCall::Error(code, why) => {
                    return self
                        .send(message::response(&id, &Err(ResponseError::new(code, why))))
                        .await;
                }
                ToolCall::Hub { call, cleanup } => (*call, cleanup),
            };
        let (reply, answer) = crate::hub::Responder::new();
        let event = Event::IdeToolCall {
            client: self.client,
            scope: self.shared.scope,
            call,
            reply,
        };
        if !self.shared.hub.send(event).await {
            return false;
        }
        // Answered in its own task: a tool that waits for the user must not
        // stop this client's other requests.
        let out = self.out.clone();
        let backlog = self.backlog.clone();
        tokio::spawn(async move {
            let result = answer.await;
            if let Some(dir) = cleanup {
                let _ = tokio::fs::remove_dir_all(dir).await;
            }
            let result = result.unwrap_or_else(|_| {
                Err(ResponseError::new(
                    code::REQUEST_FAILED,
                    "the workspace is shutting down",
                ))
            });
            let body = String::from_utf8(message::response(&id, &result)).expect("JSON is UTF-8");
            if backlog.add(body.len()) {
                let _ = out.send(Out::Text(body)).await;
            } else {
                let _ = out
                    .send(Out::Close(CloseCode::Policy, "client does not read"))
                    .await;
            }
        });
        true
    }

    async fn send(&self, body: Vec<u8>) -> bool {
        let body = String::from_utf8(body).expect("JSON is UTF-8");
        if !self.backlog.add(body.len()) {
            tracing::warn!(
                client = self.client.0,
                "Claude Code client does not read; dropping it"
            );
            return false;
        }
        self.out.send(Out::Text(body)).await.is_ok()
    }

    async fn close(&self, code: CloseCode, why: &'static str) {
        let _ = self.out.send(Out::Close(code, why)).await;
    }
}

struct WriterState<S> {
    sink: futures_util::stream::SplitSink<Ws<S>, Message>,
    out_rx: mpsc::Receiver<Out>,
    hub_rx: mpsc::Receiver<String>,
    backlog: Arc<Backlog>,
    /// The active editor's selection, already paced by the hub: each
    /// change is sent at once.
    selection: tokio::sync::watch::Receiver<Option<SelectionNotification>>,
    /// Which selections this client is sent.
    scope: IdeScope,
    paths: Arc<PathMap>,
    ping_interval: Duration,
    last_heard: Arc<std::sync::Mutex<Instant>>,
}

async fn write_loop<S: AsyncRead + AsyncWrite + Unpin + Send>(mut w: WriterState<S>) {
    let mut initialized = false;
    // A send of the current selection even if it is what we sent last.
    let mut resend_due: Option<Instant> = None;
    let mut last_selection: Option<Arc<str>> = None;
    let mut ping = tokio::time::interval_at(Instant::now() + w.ping_interval, w.ping_interval);
    // After a stop, one late tick rather than a burst of the missed ones.
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut liveness = Liveness::new(w.ping_interval);
    loop {
        let resend = resend_due;
        tokio::select! {
            out = w.out_rx.recv() => match out {
                Some(Out::Text(text)) => {
                    let len = text.len();
                    let sent = send(&mut w, Message::text(text)).await;
                    w.backlog.sent(len);
                    if !sent {
                        return;
                    }
                }
                Some(Out::Initialized) => {
                    initialized = true;
                    if !send_selection(&mut w, &mut last_selection).await {
                        return;
                    }
                }
                Some(Out::ToolsListed) => resend_due = Some(Instant::now() + RESEND_AFTER_TOOLS_LIST),
                Some(Out::Close(code, reason)) => {
                    let _ = send(&mut w, Message::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
                    return;
                }
                None => {
                    let _ = w.sink.close().await;
                    return;
                }
            },
            Some(text) = w.hub_rx.recv() => {
                if !send(&mut w, Message::text(text)).await {
                    return;
                }
            }
            changed = w.selection.changed() => {
                if changed.is_err() {
                    return;
                }
                if initialized && !send_selection(&mut w, &mut last_selection).await {
                    return;
                }
            }
            () = async { tokio::time::sleep_until(resend.expect("guarded")).await }, if resend.is_some() => {
                resend_due = None;
                last_selection = None;
                if !send_selection(&mut w, &mut last_selection).await {
                    return;
                }
            }
            scheduled = ping.tick() => {
                let heard = *w.last_heard.lock().expect("last_heard lock");
                if liveness.tick(scheduled, Instant::now(), heard) == Tick::Drop {
                    tracing::info!("Claude Code client silent for a ping interval; dropping it");
                    return;
                }
                if !send(&mut w, Message::Ping(Vec::new().into())).await {
                    return;
                }
            }
        }
    }
}

/// Whether a client still answers, judged only over time in which we were
/// running to hear it: a tick that comes late (the service was stopped with
/// SIGSTOP, the machine suspended, the runtime starved) is no evidence that
/// the client went quiet, so it starts a fresh wait instead of counting.
struct Liveness {
    interval: Duration,
    /// When the unanswered ping went out, if one did.
    pinged_at: Option<Instant>,
}

#[derive(Debug, PartialEq, Eq)]
enum Tick {
    /// Send a ping (and wait an interval for any frame back).
    Ping,
    /// The client let a whole interval pass after a ping without a frame.
    Drop,
}

impl Liveness {
    fn new(interval: Duration) -> Liveness {
        Liveness {
            interval,
            pinged_at: None,
        }
    }

    /// The ping timer fired at `now` for the tick `scheduled`; `heard` is
    /// when the client's last frame arrived.
    fn tick(&mut self, scheduled: Instant, now: Instant, heard: Instant) -> Tick {
        let on_time = now.saturating_duration_since(scheduled) <= self.interval / 2;
        if on_time && self.pinged_at.is_some_and(|sent| heard < sent) {
            return Tick::Drop;
        }
        self.pinged_at = Some(now);
        Tick::Ping
    }
}

/// How long after `tools/list` the current selection is sent again. Claude
/// Code 2.1.332 starts listening for `selection_changed` only once its UI has
/// taken in the new connection, which under load is after the first send;
/// VS Code's extension waits about this long after a connect.
const RESEND_AFTER_TOOLS_LIST: Duration = Duration::from_millis(500);

/// Sends one frame; `false` if the connection is gone or the client passed
/// the backlog's hard cap (a write to a client that does not read would
/// otherwise wait forever).
async fn send<S: AsyncRead + AsyncWrite + Unpin>(w: &mut WriterState<S>, msg: Message) -> bool {
    // Through a link into a sandbox that mounts the workspace elsewhere,
    // every path is the sandbox's; a notification about a file it cannot
    // see is not sent.
    let msg = match msg {
        Message::Text(text) if !w.paths.is_identity() => {
            match super::mapped::frame_to_inside(&w.paths, text.as_str()) {
                Some(mapped) => Message::text(mapped),
                None => return true,
            }
        }
        msg => msg,
    };
    let backlog = w.backlog.clone();
    tokio::select! {
        sent = w.sink.send(msg) => sent.is_ok(),
        () = backlog.overflowed() => {
            tracing::warn!("Claude Code client does not read; dropping it");
            false
        }
    }
}

/// Sends the current selection if the client may see it and it differs
/// from the last one sent; `false` if the connection is gone.
async fn send_selection<S: AsyncRead + AsyncWrite + Unpin>(
    w: &mut WriterState<S>,
    last: &mut Option<Arc<str>>,
) -> bool {
    let scope = w.scope;
    let current = w
        .selection
        .borrow_and_update()
        .as_ref()
        .filter(|n| n.visible_to(scope))
        .map(|n| n.frame.clone());
    let Some(frame) = current.filter(|c| Some(c) != last.as_ref()) else {
        return true;
    };
    if !send(w, Message::text(&*frame)).await {
        return false;
    }
    *last = Some(frame);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ping timer as the writer runs it (interval, late-tick behaviour
    /// and [`Liveness`]), over paused time: a client that answers every
    /// ping survives a stop of many intervals, which fires one late tick;
    /// a client that stops answering is dropped one on-time interval after
    /// the next ping.
    #[tokio::test(start_paused = true)]
    async fn a_long_stop_does_not_drop_a_live_client() {
        let interval = Duration::from_secs(30);
        let mut ping = tokio::time::interval_at(Instant::now() + interval, interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut liveness = Liveness::new(interval);
        let mut heard = Instant::now();
        // A live client answers each ping at once.
        for _ in 0..3 {
            let scheduled = ping.tick().await;
            assert_eq!(liveness.tick(scheduled, Instant::now(), heard), Tick::Ping);
            heard = Instant::now();
        }
        // A ping goes out and the process is stopped before the pong is
        // read: ten intervals pass without us running.
        let scheduled = ping.tick().await;
        assert_eq!(liveness.tick(scheduled, Instant::now(), heard), Tick::Ping);
        tokio::time::advance(interval * 10).await;
        let resumed = Instant::now();
        // One late tick, not a burst: it pings afresh instead of judging.
        let scheduled = ping.tick().await;
        assert_eq!(liveness.tick(scheduled, Instant::now(), heard), Tick::Ping);
        heard = Instant::now(); // the pong, read once we run again
        let next = ping.tick().await;
        assert_eq!(next, resumed + interval, "no burst of missed ticks");
        assert_eq!(liveness.tick(next, Instant::now(), heard), Tick::Ping);
        // Now the client goes quiet for real: dropped at the next tick.
        let scheduled = ping.tick().await;
        assert_eq!(liveness.tick(scheduled, Instant::now(), heard), Tick::Drop);
    }
}
