//! One editor connection: framing in, the LSP lifecycle, and forwarding to
//! the hub. A thin adapter: it owns no workspace state.
//!
//! Messages are read and forwarded one at a time, in arrival order, so the
//! hub sees a connection's `didChange`s in the order the editor sent them.
//! Replies are awaited in spawned tasks, so a request that waits (a version,
//! later an approval) never blocks reading the next message, and
//! `$/cancelRequest` can answer it with -32800 exactly once.
//!
//! This is also where names enter: every message read goes through
//! [`super::uri_rewrite`], which puts every `file:` URI in it into its
//! canonical form (`core::uri`) before the hub sees it, and for remote
//! clients confines it to `MOONKALE_ROOT`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::framing::{FrameError, FrameReader, write_frame};
use super::message::{self, Message, Params, RequestId, ResponseError, code};
use super::uri_rewrite::canonical_names;
use crate::core::PositionEncoding;
use crate::hub::{EditorId, EditorInfo, Event, HubHandle, Role, Transport};
use moonkale_protocol::Command;

/// Bodies that may queue for one editor before notifications are dropped.
const OUTBOX_CAPACITY: usize = 1024;

/// The `initializationOptions` key a TCP editor puts the service token in.
pub const TOKEN_OPTION: &str = "moonkaleToken";
/// The `initializationOptions` key that makes a connection an observer.
pub const ROLE_OPTION: &str = "moonkaleRole";
/// The `initializationOptions` key of a plugin that announces Claude's
/// change sets itself (the service then leaves out its `window/showMessage`).
pub const REVIEW_OPTION: &str = "moonkaleReview";
/// `initializationOptions` key: a plugin that shows and decides proposals
/// in a view of its own (see `EditorInfo::reviews_proposals`).
pub const PROPOSALS_OPTION: &str = "moonkaleProposals";

/// How long a socket connection may take to send `initialize` (10 s,
/// `MOONKALE_INIT_DEADLINE_MS`) before it is closed.
pub fn init_deadline() -> std::time::Duration {
    static DEADLINE: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *DEADLINE.get_or_init(|| {
        std::env::var("MOONKALE_INIT_DEADLINE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(
                std::time::Duration::from_secs(10),
                std::time::Duration::from_millis,
            )
    })
}

/// Which hub a connection talks to.
#[derive(Clone)]
pub enum HubSelector {
    /// A per-workspace socket: always this workspace.
    One(HubHandle),
    /// A shared listener (TCP): the workspace that contains the editor's
    /// root, else the first.
    ByRoot(Arc<Vec<HubHandle>>),
}

pub struct ConnectionConfig {
    pub transport: Transport,
    /// When set, `initialize` must carry this token in
    /// `initializationOptions.moonkaleToken` or the connection is dropped.
    pub token: Option<Arc<String>>,
    pub hubs: HubSelector,
    /// Remote clients: every `file:` URI they send, however it is spelled,
    /// must have a canonical form naming a path inside this folder
    /// (`MOONKALE_ROOT`), else the message is refused.
    pub confine: Option<Arc<PathBuf>>,
    /// What the service knows of the other end ([`crate::peer`]): the
    /// editor's name when its `initialize` has no `clientInfo`.
    pub peer: Option<String>,
}

/// How a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// The editor sent `exit`; per the LSP spec a stdio server exits 0 only
    /// if `shutdown` came first.
    Exit { after_shutdown: bool },
    /// The stream ended between frames.
    Eof,
    /// We closed it: bad framing on a socket, a bad token, a broken pipe.
    Dropped(String),
    /// The user asked the service to stop (`moonkale-service stop`); the
    /// stop is requested once the reply has been written, so the asker
    /// never sees the connection close before its answer.
    StopAsked,
}

enum Lifecycle {
    Uninitialized,
    Initialized { hub: HubHandle, editor: EditorId },
    ShutDown,
}

type Pending = Arc<Mutex<HashMap<RequestId, AbortHandle>>>;

pub async fn serve_connection<R, W>(read: R, write: W, cfg: ConnectionConfig) -> Ending
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let _busy = crate::lifetime::Activity::process().busy();
    let (outbox, outbox_rx) = mpsc::channel::<Vec<u8>>(OUTBOX_CAPACITY);
    let writer = tokio::spawn(write_loop(write, outbox_rx));
    let mut conn = Connection {
        cfg,
        outbox,
        lifecycle: Lifecycle::Uninitialized,
        pending: Pending::default(),
    };
    let mut reader = FrameReader::new(read);
    let ending = conn.read_loop(&mut reader).await;

    for (_, task) in conn.pending.lock().expect("pending lock").drain() {
        task.abort();
    }
    if let Lifecycle::Initialized { hub, editor } = &conn.lifecycle {
        hub.send(Event::Detach { editor: *editor }).await;
    }
    // Let queued replies (e.g. to `shutdown`) reach the editor before closing.
    drop(conn);
    let _ = writer.await;
    if matches!(ending, Ending::StopAsked) {
        crate::lifetime::Activity::process().request_stop();
    }
    ending
}

async fn write_loop<W: AsyncWrite + Unpin>(mut write: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(body) = rx.recv().await {
        if let Err(e) = write_frame(&mut write, &body).await {
            tracing::debug!("write to editor failed: {e}");
            return;
        }
    }
}

struct Connection {
    cfg: ConnectionConfig,
    outbox: mpsc::Sender<Vec<u8>>,
    lifecycle: Lifecycle,
    pending: Pending,
}

impl Connection {
    async fn read_loop<R: AsyncRead + Unpin>(&mut self, reader: &mut FrameReader<R>) -> Ending {
        let resync = self.cfg.transport == Transport::Stdio;
        // A socket peer that never initializes would hold one of the
        // listener's slots forever; the editor that started a stdio server
        // is the only one it serves, so it may take its time.
        let init_by = (self.cfg.transport != Transport::Stdio)
            .then(|| tokio::time::Instant::now() + init_deadline());
        loop {
            let frame = match init_by.filter(|_| matches!(self.lifecycle, Lifecycle::Uninitialized))
            {
                // Whatever the reader was in the middle of is dropped with
                // the connection, so cancelling it loses nothing.
                Some(at) => match tokio::time::timeout_at(at, reader.read_frame()).await {
                    Ok(frame) => frame,
                    Err(_) => {
                        tracing::info!(transport = ?self.cfg.transport, "no initialize before the deadline; closing");
                        return Ending::Dropped("no initialize before the deadline".into());
                    }
                },
                None => reader.read_frame().await,
            };
            let body = match frame {
                Ok(Some(body)) => body,
                Ok(None) | Err(FrameError::UnexpectedEof) => return Ending::Eof,
                Err(FrameError::BadHeader(why)) => {
                    tracing::warn!(transport = ?self.cfg.transport, "framing error: {why}");
                    if !resync {
                        return Ending::Dropped(format!("framing error: {why}"));
                    }
                    let err =
                        ResponseError::new(code::PARSE_ERROR, format!("framing error: {why}"));
                    self.send(message::error_response(None, &err)).await;
                    match reader.resync().await {
                        Ok(true) => continue,
                        Ok(false) => return Ending::Eof,
                        Err(e) => return Ending::Dropped(e.to_string()),
                    }
                }
                Err(e) => {
                    tracing::warn!(transport = ?self.cfg.transport, "connection lost: {e}");
                    return Ending::Dropped(e.to_string());
                }
            };
            let msg = match message::parse(&body) {
                Ok(msg) => msg,
                Err(err) => {
                    tracing::warn!(transport = ?self.cfg.transport, "bad message: {err:?}");
                    self.send(err.to_response()).await;
                    if !resync && matches!(err, message::ParseError::Parse(_)) {
                        return Ending::Dropped("body is not JSON".into());
                    }
                    continue;
                }
            };
            let msg = match canonical_names(msg, self.cfg.confine.as_deref().map(PathBuf::as_path))
            {
                Ok(msg) => msg,
                Err((msg, why)) => {
                    tracing::warn!(transport = ?self.cfg.transport, "refused: {why}");
                    self.refuse_outside(msg, why).await;
                    continue;
                }
            };
            if let Some(ending) = self.dispatch(msg).await {
                return ending;
            }
        }
    }

    /// Answers a request naming a path outside the root with -32602; a
    /// notification is dropped and the client told with `window/logMessage`.
    async fn refuse_outside(&mut self, msg: Message, why: String) {
        match msg {
            Message::Request { id, .. } => {
                self.reply(&id, Err(ResponseError::invalid_params(why)))
                    .await;
            }
            Message::Notification { method, .. } => {
                let note = json!({"type": 1, "message": format!("{method} refused: {why}")});
                self.send(message::notification("window/logMessage", note))
                    .await;
            }
            Message::Response { .. } => {}
        }
    }

    async fn dispatch(&mut self, msg: Message) -> Option<Ending> {
        match msg {
            Message::Request { id, method, params } => self.request(id, method, params).await,
            Message::Notification { method, params } => self.notification(method, params).await,
            Message::Response {
                id: Some(id),
                result,
            } => {
                if let Lifecycle::Initialized { hub, editor } = &self.lifecycle {
                    hub.send(Event::EditorResponse {
                        editor: *editor,
                        id,
                        result,
                    })
                    .await;
                }
                None
            }
            Message::Response { id: None, .. } => None,
        }
    }

    async fn request(&mut self, id: RequestId, method: String, params: Params) -> Option<Ending> {
        let (hub, editor) = match (&self.lifecycle, method.as_str()) {
            (Lifecycle::Uninitialized, "initialize") => return self.initialize(id, params).await,
            (Lifecycle::Uninitialized, _) => {
                self.reply(
                    &id,
                    Err(ResponseError::new(
                        code::SERVER_NOT_INITIALIZED,
                        "initialize first",
                    )),
                )
                .await;
                return None;
            }
            (Lifecycle::ShutDown, _) => {
                self.reply(
                    &id,
                    Err(ResponseError::new(
                        code::INVALID_REQUEST,
                        "the server is shut down",
                    )),
                )
                .await;
                return None;
            }
            (Lifecycle::Initialized { .. }, "initialize") => {
                self.reply(
                    &id,
                    Err(ResponseError::new(
                        code::INVALID_REQUEST,
                        "already initialized",
                    )),
                )
                .await;
                return None;
            }
            (Lifecycle::Initialized { hub, editor }, "shutdown") => {
                hub.send(Event::Detach { editor: *editor }).await;
                self.lifecycle = Lifecycle::ShutDown;
                self.reply(&id, Ok(Value::Null)).await;
                return None;
            }
            // `moonkale-service stop`: only from the workspace's own socket
            // (the user's), never from TCP or the remote front door.
            (Lifecycle::Initialized { .. }, "moonkale/stop")
                if self.cfg.transport == Transport::Unix =>
            {
                self.reply(&id, Ok(json!({}))).await;
                return Some(Ending::StopAsked);
            }
            (Lifecycle::Initialized { hub, editor }, _) => (hub.clone(), *editor),
        };
        if self.pending.lock().expect("pending lock").contains_key(&id) {
            self.reply(
                &id,
                Err(ResponseError::new(
                    code::INVALID_REQUEST,
                    "a request with this id is in flight",
                )),
            )
            .await;
            return None;
        }
        let (reply, answer) = crate::hub::Responder::new();
        if !hub
            .send(Event::Request {
                editor,
                method,
                params,
                reply,
            })
            .await
        {
            return Some(Ending::Dropped("the workspace is shutting down".into()));
        }
        let pending = self.pending.clone();
        let outbox = self.outbox.clone();
        // Holding the lock while spawning means the task cannot look for its
        // entry before it exists.
        let mut map = self.pending.lock().expect("pending lock");
        let task = tokio::spawn({
            let id = id.clone();
            async move {
                let result = answer.await.unwrap_or_else(|_| {
                    Err(ResponseError::new(
                        code::REQUEST_FAILED,
                        "the workspace dropped the request",
                    ))
                });
                // Whoever removes the entry answers: this task or a cancel.
                let still_pending = pending.lock().expect("pending lock").remove(&id).is_some();
                if still_pending {
                    let _ = outbox.send(message::response(&id, &result)).await;
                }
            }
        });
        map.insert(id, task.abort_handle());
        None
    }

    async fn notification(&mut self, method: String, params: Params) -> Option<Ending> {
        match (&self.lifecycle, method.as_str()) {
            (_, "exit") => {
                return Some(Ending::Exit {
                    after_shutdown: matches!(self.lifecycle, Lifecycle::ShutDown),
                });
            }
            (Lifecycle::Initialized { .. }, "$/cancelRequest") => self.cancel(&params).await,
            (Lifecycle::Initialized { .. }, "initialized") => {}
            (Lifecycle::Initialized { hub, editor }, "textDocument/didOpen") => {
                let event = Event::DidOpen {
                    editor: *editor,
                    through_symlink: opened_through_symlink(hub.root(), &params),
                    params,
                };
                if !hub.send(event).await {
                    return Some(Ending::Dropped("the workspace is shutting down".into()));
                }
            }
            (Lifecycle::Initialized { hub, editor }, _) => {
                let event = Event::Notification {
                    editor: *editor,
                    method,
                    params,
                };
                if !hub.send(event).await {
                    return Some(Ending::Dropped("the workspace is shutting down".into()));
                }
            }
            // Before initialize and after shutdown, notifications are dropped (LSP spec).
            _ => tracing::debug!(%method, "notification outside the initialized state dropped"),
        }
        None
    }

    async fn cancel(&mut self, params: &Params) {
        let params: Value = serde_json::from_str(params.get()).unwrap_or_default();
        let id = match params.get("id") {
            Some(Value::Number(n)) => n.as_i64().map(RequestId::Number),
            Some(Value::String(s)) => Some(RequestId::String(s.clone())),
            _ => None,
        };
        let Some(id) = id else { return };
        let task = self.pending.lock().expect("pending lock").remove(&id);
        if let Some(task) = task {
            task.abort();
            self.reply(
                &id,
                Err(ResponseError::new(
                    code::REQUEST_CANCELLED,
                    "request cancelled",
                )),
            )
            .await;
        }
    }

    async fn initialize(&mut self, id: RequestId, params: Params) -> Option<Ending> {
        let params: Value = serde_json::from_str(params.get()).unwrap_or_default();
        let options = params.get("initializationOptions");
        if let Some(expected) = &self.cfg.token {
            let given = options
                .and_then(|o| o.get(TOKEN_OPTION))
                .and_then(Value::as_str)
                .unwrap_or("");
            if !constant_time_eq::constant_time_eq(given.as_bytes(), expected.as_bytes()) {
                tracing::warn!(transport = ?self.cfg.transport, "initialize without the service token; dropping");
                let err = ResponseError::new(
                    code::REQUEST_FAILED,
                    "this transport needs the service token in initializationOptions.moonkaleToken",
                );
                self.reply(&id, Err(err)).await;
                return Some(Ending::Dropped("missing or wrong token".into()));
            }
        }
        let offered: Vec<&str> = params
            .pointer("/capabilities/general/positionEncodings")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let encoding = PositionEncoding::negotiate(offered);
        let role = match options
            .and_then(|o| o.get(ROLE_OPTION))
            .and_then(Value::as_str)
        {
            Some("observer") => Role::Observer,
            _ => Role::Editor,
        };
        let info = EditorInfo {
            client_name: params
                .pointer("/clientInfo/name")
                .and_then(Value::as_str)
                .or(self.cfg.peer.as_deref())
                .unwrap_or("unknown")
                .chars()
                .take(100)
                .collect(),
            client_version: params
                .pointer("/clientInfo/version")
                .and_then(Value::as_str)
                .map(|v| v.chars().take(100).collect()),
            process_id: params
                .get("processId")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok()),
            transport: self.cfg.transport,
            encoding,
            role,
            shows_message_buttons: params.pointer("/capabilities/window/showMessage").is_some(),
            shows_progress: params
                .pointer("/capabilities/window/workDoneProgress")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            announces_changes: options
                .and_then(|o| o.get(REVIEW_OPTION))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            reviews_proposals: options
                .and_then(|o| o.get(PROPOSALS_OPTION))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            shows_documents: params
                .pointer("/capabilities/window/showDocument/support")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            registers_inlay_hints: params
                .pointer("/capabilities/textDocument/inlayHint/dynamicRegistration")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        let hub = self.pick_hub(&params);
        let editor = hub.new_editor_id();
        if !hub
            .send(Event::Attach {
                editor,
                info,
                outbox: self.outbox.clone(),
            })
            .await
        {
            return Some(Ending::Dropped("the workspace is shutting down".into()));
        }
        self.lifecycle = Lifecycle::Initialized { hub, editor };
        self.reply(&id, Ok(initialize_result(encoding))).await;
        None
    }

    fn pick_hub(&self, params: &Value) -> HubHandle {
        let hubs = match &self.cfg.hubs {
            HubSelector::One(hub) => return hub.clone(),
            HubSelector::ByRoot(hubs) => hubs,
        };
        let root = editor_root(params);
        root.and_then(|root| {
            hubs.iter()
                .filter(|h| root.starts_with(h.root()))
                .max_by_key(|h| h.root().as_os_str().len())
        })
        .unwrap_or(&hubs[0])
        .clone()
    }

    async fn reply(&self, id: &RequestId, result: Result<Value, ResponseError>) {
        self.send(message::response(id, &result)).await;
    }

    async fn send(&self, body: Vec<u8>) {
        let _ = self.outbox.send(body).await;
    }
}

/// Whether a `didOpen` names a `file:` document inside `root` by its
/// path's letters that is reached through a symlink on the disk (or
/// cannot be checked): a jailed CLI must not learn of it
/// ([`Event::DidOpen`]), by the rule its own tool arguments pass
/// ([`crate::workspace_fs::confine`]).
fn opened_through_symlink(root: &Path, params: &Params) -> bool {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Opened {
        text_document: Named,
    }
    #[derive(serde::Deserialize)]
    struct Named {
        uri: lsp_types::Url,
    }
    let Ok(opened) = serde_json::from_str::<Opened>(params.get()) else {
        return false;
    };
    let Ok(path) = opened.text_document.uri.to_file_path() else {
        return false;
    };
    let Some(raw) = path.to_str() else {
        return false;
    };
    let roots = [root.to_path_buf()];
    crate::core::confine::confine_lexically(&roots, raw).is_ok()
        && crate::workspace_fs::confine(&roots, raw).is_err()
}

pub use moonkale_wire::runtime::editor_root;

/// The capabilities every editor gets. Deliberately small: the service must
/// not take over features (hover, goto) from the editor's real language
/// servers, which editors like Helix route to the first server that has them.
pub fn initialize_result(encoding: PositionEncoding) -> Value {
    json!({
        "capabilities": {
            "positionEncoding": encoding.as_lsp_str(),
            "textDocumentSync": {
                "openClose": true,
                "change": 2,
                "save": {"includeText": true},
            },
            "codeActionProvider": true,
            "executeCommandProvider": {"commands": Command::ALL.map(Command::name)},
            "diagnosticProvider": {"interFileDependencies": false, "workspaceDiagnostics": false},
        },
        "serverInfo": {"name": "moonkale-service", "version": env!("CARGO_PKG_VERSION")},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsp::framing::encode_frame;
    use tokio::io::{AsyncWriteExt, DuplexStream};

    struct Peer {
        write: tokio::io::WriteHalf<DuplexStream>,
        read: FrameReader<tokio::io::ReadHalf<DuplexStream>>,
        task: tokio::task::JoinHandle<Ending>,
    }

    impl Peer {
        /// A connection over an in-memory pipe to a fresh hub.
        fn start(transport: Transport) -> Peer {
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            let (their_read, their_write) = tokio::io::split(theirs);
            let hub =
                crate::hub::spawn(std::env::temp_dir(), Default::default(), Default::default());
            let cfg = ConnectionConfig {
                transport,
                token: None,
                hubs: HubSelector::One(hub),
                confine: None,
                peer: None,
            };
            let task = tokio::spawn(serve_connection(their_read, their_write, cfg));
            let (read, write) = tokio::io::split(ours);
            Peer {
                write,
                read: FrameReader::new(read),
                task,
            }
        }

        async fn send(&mut self, v: Value) {
            self.write
                .write_all(&encode_frame(&serde_json::to_vec(&v).unwrap()))
                .await
                .unwrap();
        }

        async fn recv(&mut self) -> Value {
            let body = self.read.read_frame().await.unwrap().expect("a message");
            serde_json::from_slice(&body).unwrap()
        }

        async fn initialize(&mut self) {
            self.send(
                json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}),
            )
            .await;
            assert_eq!(
                self.recv().await["result"]["capabilities"]["positionEncoding"],
                "utf-16"
            );
        }
    }

    /// Security case 28: cancelling an unknown id does nothing; cancelling a
    /// waiting request answers -32800 once, and its late result is never sent.
    #[tokio::test]
    async fn hostile_28_cancellation_answers_once() {
        let mut p = Peer::start(Transport::Unix);
        p.initialize().await;
        let uri = "file:///tmp/c.txt";
        p.send(json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":424242}}))
            .await;
        p.send(json!({"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":uri,"languageId":"t","version":1,"text":""}}})).await;
        p.send(json!({"jsonrpc":"2.0","id":"w","method":"moonkale/waitForVersion","params":{"uri":uri,"version":3}})).await;
        p.send(json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"w"}}))
            .await;
        let cancelled = p.recv().await;
        assert_eq!(cancelled["id"], "w");
        assert_eq!(cancelled["error"]["code"], code::REQUEST_CANCELLED);
        p.send(json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"w"}}))
            .await;
        p.send(json!({"jsonrpc":"2.0","method":"textDocument/didChange","params":{"textDocument":{"uri":uri,"version":3},"contentChanges":[{"text":"now"}]}})).await;
        p.send(
            json!({"jsonrpc":"2.0","id":"after","method":"moonkale/document","params":{"uri":uri}}),
        )
        .await;
        let next = p.recv().await;
        assert_eq!(
            next["id"], "after",
            "no late reply to the cancelled request: {next}"
        );
        assert_eq!(next["result"]["version"], 3);
    }

    /// Security case 22, in process: the LSP lifecycle rules.
    #[tokio::test]
    async fn hostile_22_lifecycle() {
        let mut p = Peer::start(Transport::Unix);
        p.send(json!({"jsonrpc":"2.0","id":1,"method":"moonkale/status"}))
            .await;
        assert_eq!(
            p.recv().await["error"]["code"],
            code::SERVER_NOT_INITIALIZED
        );
        p.initialize().await;
        p.send(json!({"jsonrpc":"2.0","id":2,"method":"initialize","params":{"capabilities":{}}}))
            .await;
        assert_eq!(p.recv().await["error"]["code"], code::INVALID_REQUEST);
        p.send(json!({"jsonrpc":"2.0","id":3,"method":"shutdown"}))
            .await;
        assert_eq!(p.recv().await["result"], Value::Null);
        p.send(json!({"jsonrpc":"2.0","id":4,"method":"moonkale/status"}))
            .await;
        assert_eq!(p.recv().await["error"]["code"], code::INVALID_REQUEST);
        p.send(json!({"jsonrpc":"2.0","method":"exit"})).await;
        assert_eq!(
            p.task.await.unwrap(),
            Ending::Exit {
                after_shutdown: true
            }
        );

        let mut q = Peer::start(Transport::Unix);
        q.initialize().await;
        q.send(json!({"jsonrpc":"2.0","method":"exit"})).await;
        assert_eq!(
            q.task.await.unwrap(),
            Ending::Exit {
                after_shutdown: false
            }
        );
    }

    /// On stdio a framing error is answered and the stream resynchronised;
    /// on a socket the connection is closed.
    #[tokio::test]
    async fn framing_errors_resync_on_stdio_and_close_sockets() {
        let mut p = Peer::start(Transport::Stdio);
        p.write
            .write_all(b"Content-Length: 1e3\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(p.recv().await["error"]["code"], code::PARSE_ERROR);
        p.initialize().await;

        let mut q = Peer::start(Transport::Unix);
        q.write
            .write_all(b"Content-Length: 1e3\r\n\r\n")
            .await
            .unwrap();
        assert!(matches!(q.task.await.unwrap(), Ending::Dropped(_)));
    }
}
