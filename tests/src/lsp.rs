//! The tests' LSP client, in two layers over one framed connection.
//!
//! - [`RawLsp`] sends exact bytes and reads a message only when the test
//!   asks: for hostile peers, byte-level protocol tests, and a client that
//!   deliberately stops reading its socket.
//! - [`Client`] takes a raw connection over and reads it on a task of its
//!   own: every message the service sends is kept in [`Client::log`] in
//!   arrival order, waits look for a message there with a deadline, and
//!   requests the service sends (`window/showMessageRequest`, …) stay
//!   unanswered until the test answers them (only
//!   `window/workDoneProgress/create` and `client/registerCapability` are
//!   answered at once). Failures show the service's log and the fake API's
//!   requests ([`Diag`]).
//!
//! Every read has a deadline; nothing sleeps and hopes.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use moonkale_service::lsp::framing::{FrameReader, MAX_BODY, encode_frame};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, mpsc};

use crate::fakeapi::FakeLog;
use crate::{Service, TIMEOUT, short};

type BoxRead = Pin<Box<dyn AsyncRead + Send>>;
type BoxWrite = Pin<Box<dyn AsyncWrite + Send>>;

/// A JSON-RPC request.
fn request_message(id: &Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A JSON-RPC notification.
fn notification_message(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// Whether `msg` is a response (to one of our requests), not a request or
/// a notification from the service.
fn is_response(msg: &Value) -> bool {
    msg.get("method").is_none() && msg.get("id").is_some()
}

/// The write half of a connection: frames JSON-RPC messages, or sends
/// bytes as they are.
struct LspWriter(BoxWrite);

impl LspWriter {
    /// Writes raw bytes (possibly not LSP at all). Errors are ignored: a
    /// hostile test may write to a connection the service already closed.
    async fn send_bytes(&mut self, bytes: &[u8]) {
        let _ = self.0.write_all(bytes).await;
        let _ = self.0.flush().await;
    }

    async fn send(&mut self, msg: &Value) {
        let body = serde_json::to_vec(msg).expect("json");
        self.send_bytes(&encode_frame(&body)).await;
    }
}

// ---------------------------------------------------------------------------
// The raw layer

/// An LSP peer that sends exact bytes and reads whole JSON replies, only
/// when asked.
pub struct RawLsp {
    reader: FrameReader<BoxRead>,
    writer: LspWriter,
    next_id: i64,
    /// Messages that arrived while waiting for a particular response.
    pub notifications: Vec<Value>,
}

impl RawLsp {
    /// A peer on an already connected `read`/`write` pair (a socket's
    /// halves, a shim's stdout and stdin).
    pub fn new(
        read: impl AsyncRead + Send + 'static,
        write: impl AsyncWrite + Send + 'static,
    ) -> RawLsp {
        RawLsp::with_max_body(read, write, MAX_BODY)
    }

    /// [`RawLsp::new`] refusing bodies over `max_body` bytes.
    fn with_max_body(
        read: impl AsyncRead + Send + 'static,
        write: impl AsyncWrite + Send + 'static,
        max_body: usize,
    ) -> RawLsp {
        RawLsp {
            reader: FrameReader::with_max_body(Box::pin(read), max_body),
            writer: LspWriter(Box::pin(write)),
            next_id: 1000,
            notifications: Vec::new(),
        }
    }

    /// Connects to a unix socket (the service's).
    pub async fn connect_unix(path: &Path) -> RawLsp {
        let s = tokio::net::UnixStream::connect(path)
            .await
            .expect("connect unix socket");
        let (r, w) = s.into_split();
        RawLsp::new(r, w)
    }

    /// Connects to a TCP address (`host:port`).
    pub async fn connect_tcp(addr: &str) -> RawLsp {
        let s = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect tcp");
        let (r, w) = s.into_split();
        RawLsp::new(r, w)
    }

    /// Writes raw bytes (possibly not LSP at all). Errors are ignored: a
    /// hostile test may write to a connection the service already closed.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.writer.send_bytes(bytes).await;
    }

    /// Sends one JSON-RPC message, framed.
    pub async fn send(&mut self, msg: Value) {
        self.writer.send(&msg).await;
    }

    /// Sends a notification.
    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(notification_message(method, params)).await;
    }

    /// The next message, as JSON; panics on timeout or end of stream.
    pub async fn recv(&mut self) -> Value {
        match self.try_recv().await {
            Some(v) => v,
            None => panic!("connection closed while a message was expected"),
        }
    }

    /// The next message, or `None` if the peer closed the connection.
    pub async fn try_recv(&mut self) -> Option<Value> {
        let frame = tokio::time::timeout(TIMEOUT, self.reader.read_frame())
            .await
            .expect("timed out waiting for a message");
        match frame {
            Ok(Some(body)) => Some(serde_json::from_slice(&body).expect("service sent JSON")),
            Ok(None) | Err(_) => None,
        }
    }

    /// Waits for the response with `id`, keeping other messages aside.
    pub async fn response(&mut self, id: &Value) -> Value {
        loop {
            let msg = self.recv().await;
            if msg.get("id") == Some(id) && msg.get("method").is_none() {
                return msg;
            }
            self.notifications.push(msg);
        }
    }

    /// The next message the service sends with `method` (already set aside,
    /// or the next to come), keeping the others aside.
    pub async fn server_request(&mut self, method: &str) -> Value {
        if let Some(i) = self
            .notifications
            .iter()
            .position(|m| m["method"] == method)
        {
            return self.notifications.remove(i);
        }
        loop {
            let msg = self.recv().await;
            if msg["method"] == method {
                return msg;
            }
            self.notifications.push(msg);
        }
    }

    /// Sends a request and returns the whole response message.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(request_message(&id, method, params)).await;
        self.response(&id).await
    }

    /// Sends a request and returns its `result`, failing on an error reply.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let resp = self.request(method, params).await;
        assert!(resp.get("error").is_none(), "{method} failed: {resp}");
        resp["result"].clone()
    }

    /// `initialize` + `initialized` with the given client name and offered
    /// position encodings; returns the initialize result.
    pub async fn initialize(&mut self, name: &str, encodings: &[&str], options: Value) -> Value {
        let result = self
            .call(
                "initialize",
                json!({
                    "processId": null,
                    "clientInfo": {"name": name, "version": "test"},
                    "rootUri": null,
                    "capabilities": {"general": {"positionEncodings": encodings}},
                    "initializationOptions": options,
                }),
            )
            .await;
        self.notify("initialized", json!({})).await;
        result
    }

    /// Opens `uri` (plain text) at `version` with `text`.
    pub async fn did_open(&mut self, uri: &str, version: i32, text: &str) {
        self.notify("textDocument/didOpen", did_open_params(uri, version, text))
            .await;
    }

    /// An incremental change replacing `[(l0,c0),(l1,c1))` with `text`.
    pub async fn did_change(&mut self, uri: &str, version: i32, range: [u32; 4], text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{
                "range": {"start": {"line": range[0], "character": range[1]}, "end": {"line": range[2], "character": range[3]}},
                "text": text}]}),
        )
        .await;
    }

    /// Returns once the service has handled everything this connection sent
    /// before (messages of one connection are handled in order).
    pub async fn barrier(&mut self) {
        self.call("moonkale/status", Value::Null).await;
    }

    /// The service's view of `uri` (from the editor that touched it last).
    pub async fn document(&mut self, uri: &str) -> Value {
        self.call("moonkale/document", json!({"uri": uri})).await
    }

    /// Waits until the service holds `uri` at `version` or newer.
    pub async fn wait_for_version(&mut self, uri: &str, version: i32) {
        self.call(
            "moonkale/waitForVersion",
            json!({"uri": uri, "version": version}),
        )
        .await;
    }

    /// True once the peer has closed the connection (it may first send a few
    /// messages, e.g. an error reply, which are skipped).
    pub async fn is_closed(&mut self) -> bool {
        for _ in 0..16 {
            match tokio::time::timeout(TIMEOUT, self.reader.read_frame()).await {
                Err(_) => return false,
                Ok(Ok(Some(body))) => self
                    .notifications
                    .push(serde_json::from_slice(&body).unwrap_or(Value::Null)),
                Ok(Ok(None)) | Ok(Err(_)) => return true,
            }
        }
        false
    }
}

/// `textDocument/didOpen`'s params for a plain-text document.
fn did_open_params(uri: &str, version: i32, text: &str) -> Value {
    json!({"textDocument": {"uri": uri, "languageId": "text", "version": version, "text": text}})
}

// ---------------------------------------------------------------------------
// The logging layer

/// What failure messages show: the service's log and the fake's requests.
#[derive(Clone)]
pub struct Diag {
    pub service_log: PathBuf,
    pub fake: Option<FakeLog>,
}

impl Diag {
    /// The service log's last 60 lines and the fake API's requests.
    pub fn context(&self) -> String {
        let text = std::fs::read_to_string(&self.service_log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = all[all.len().saturating_sub(60)..].join("\n");
        let fake = self.fake.as_ref().map(|f| f.summary()).unwrap_or_default();
        format!("--- service log (tail) ---\n{tail}\n--- fake API requests ---\n{fake}")
    }
}

/// Capabilities of an editor that shows `window/showMessageRequest` with
/// buttons.
pub fn buttons_caps() -> Value {
    json!({"general": {"positionEncodings": ["utf-16"]},
           "window": {"showMessage": {"messageActionItem": {"additionalPropertiesSupport": false}}}})
}

/// Capabilities of an editor without buttons.
pub fn plain_caps() -> Value {
    json!({"general": {"positionEncodings": ["utf-16"]}})
}

/// An LSP client that reads its connection on a task and logs what the
/// service sends.
pub struct Client {
    pub name: String,
    writer: Arc<Mutex<LspWriter>>,
    inbox: mpsc::UnboundedReceiver<Value>,
    /// Every message the service sent (responses to our requests aside), in
    /// arrival order.
    pub log: Vec<Value>,
    /// Which entries of `log` a [`Client::take`] already returned.
    taken: Vec<bool>,
    next_id: i64,
    reader: tokio::task::AbortHandle,
    /// Responses that arrived while waiting for something else.
    responses: Vec<Value>,
    closed: bool,
    pub diag: Diag,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Reads `reader` into `tx`, answering the requests no test waits for.
async fn read_loop(
    mut reader: FrameReader<BoxRead>,
    writer: Arc<Mutex<LspWriter>>,
    tx: mpsc::UnboundedSender<Value>,
) {
    while let Ok(Some(body)) = reader.read_frame().await {
        let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
            continue;
        };
        if msg.get("id").is_some()
            && matches!(
                msg["method"].as_str(),
                Some("window/workDoneProgress/create" | "client/registerCapability")
            )
        {
            let answer = json!({"jsonrpc": "2.0", "id": msg["id"], "result": null});
            writer.lock().await.send(&answer).await;
        }
        if tx.send(msg).is_err() {
            break;
        }
    }
}

impl Client {
    /// Connects to the service, initializes with `caps` and sends
    /// `initialized`.
    pub async fn connect(svc: &Service, name: &str, caps: Value, diag: Diag) -> Client {
        Client::connect_with(svc, name, caps, Value::Null, diag).await
    }

    /// [`Client::connect`] with `initializationOptions` (`{"moonkaleRole":
    /// "observer"}` for a client that is not an editor).
    pub async fn connect_with(
        svc: &Service,
        name: &str,
        caps: Value,
        options: Value,
        diag: Diag,
    ) -> Client {
        let (r, w) = tokio::net::UnixStream::connect(&svc.info.socket)
            .await
            .expect("connect to the service's socket")
            .into_split();
        // Larger than the service's own limit: nothing it sends is refused here.
        let RawLsp { reader, writer, .. } = RawLsp::with_max_body(r, w, 128 << 20);
        let writer = Arc::new(Mutex::new(writer));
        let (tx, inbox) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(reader, writer.clone(), tx)).abort_handle();
        let mut c = Client {
            name: name.to_owned(),
            writer,
            inbox,
            log: Vec::new(),
            taken: Vec::new(),
            next_id: 0,
            reader,
            responses: Vec::new(),
            closed: false,
            diag,
        };
        c.call(
            "initialize",
            json!({"processId": std::process::id(), "clientInfo": {"name": name, "version": "test"},
                   "rootUri": null, "capabilities": caps, "initializationOptions": options}),
        )
        .await;
        c.notify("initialized", json!({})).await;
        c
    }

    /// Sends one JSON-RPC message, framed.
    pub async fn send(&mut self, msg: Value) {
        self.writer.lock().await.send(&msg).await;
    }

    /// Sends a notification.
    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(notification_message(method, params)).await;
    }

    /// Answers a request the service sent.
    pub async fn respond(&mut self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// Files one message from the reader: a response to `responses`,
    /// anything else to `log`.
    fn file(&mut self, msg: Value) {
        if is_response(&msg) {
            self.responses.push(msg);
        } else {
            self.log.push(msg);
            self.taken.push(false);
        }
    }

    /// Takes the next message off the connection; false at the deadline or
    /// once the connection is closed.
    async fn pump(&mut self, deadline: tokio::time::Instant) -> bool {
        if self.closed {
            return false;
        }
        match tokio::time::timeout_at(deadline, self.inbox.recv()).await {
            Err(_) => false,
            Ok(None) => {
                self.closed = true;
                false
            }
            Ok(Some(msg)) => {
                self.file(msg);
                true
            }
        }
    }

    /// Moves what has already arrived into `log`, without waiting.
    pub fn drain(&mut self) {
        while let Ok(msg) = self.inbox.try_recv() {
            self.file(msg);
        }
    }

    /// Forgets everything received so far, as an editor that keeps
    /// diagnostics only for documents it has open drops those of a document
    /// it opens later: from now on [`Client::take`] sees only what comes
    /// next.
    pub fn ignore_received(&mut self) {
        self.drain();
        self.taken.iter_mut().for_each(|t| *t = true);
    }

    /// Sends a request and returns the whole response.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_within(method, params, crate::STEP).await
    }

    /// [`Client::request`] for a request whose answer the service itself
    /// bounds by more than a step: waits up to `within`.
    pub async fn request_within(&mut self, method: &str, params: Value, within: Duration) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(request_message(&id, method, params.clone()))
            .await;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(i) = self.responses.iter().position(|r| r["id"] == id) {
                return self.responses.remove(i);
            }
            if !self.pump(deadline).await {
                panic!(
                    "{}: no response to {method} {} ({})\n{}",
                    self.name,
                    short(&params.to_string(), 300),
                    if self.closed {
                        "connection closed"
                    } else {
                        "timed out"
                    },
                    self.diag.context()
                );
            }
        }
    }

    /// Sends a request and returns its `result`, failing on an error.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let resp = self.request(method, params.clone()).await;
        assert!(
            resp.get("error").is_none(),
            "{}: {method} {} failed: {resp}\n{}",
            self.name,
            short(&params.to_string(), 300),
            self.diag.context()
        );
        resp["result"].clone()
    }

    /// Returns once the service handled everything sent before (and sent
    /// us what it had to send by then).
    pub async fn barrier(&mut self) {
        self.call("moonkale/status", Value::Null).await;
    }

    /// Opens `uri` (plain text) at `version` with `text`.
    pub async fn did_open(&mut self, uri: &str, version: i32, text: &str) {
        self.notify("textDocument/didOpen", did_open_params(uri, version, text))
            .await;
    }

    /// The first message of `log` not taken yet that satisfies `pred`,
    /// waiting for it up to `timeout`; `None` after that.
    pub async fn try_take(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut from = 0;
        loop {
            if let Some(found) = self.take_first(from, &pred) {
                return Some(found);
            }
            from = self.log.len();
            if !self.pump(deadline).await {
                // One last look at what came with the end.
                self.drain();
                return self.take_first(from, &pred);
            }
        }
    }

    /// Marks the first entry of `log[from..]` not taken yet that satisfies
    /// `pred` as taken, and returns it.
    fn take_first(&mut self, from: usize, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        let i = (from..self.log.len()).find(|&i| !self.taken[i] && pred(&self.log[i]))?;
        self.taken[i] = true;
        Some(self.log[i].clone())
    }

    /// [`Client::try_take`], failing the test after `timeout`.
    pub async fn take(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(v) = self.try_take(timeout, pred).await {
            return v;
        }
        panic!(
            "{}: timed out after {timeout:?} waiting for {what}{}\n--- last messages ---\n{}\n{}",
            self.name,
            if self.closed {
                " (the connection is closed)"
            } else {
                ""
            },
            self.recent(25),
            self.diag.context()
        );
    }

    /// Whether the connection is known to be closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The last `n` messages received, one line each, for failure messages.
    pub fn recent(&self, n: usize) -> String {
        self.log[self.log.len().saturating_sub(n)..]
            .iter()
            .map(|m| format!("  {}", short(&m.to_string(), 400)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The next `publishDiagnostics` for `uri` that is not empty: its
    /// diagnostics.
    pub async fn take_diagnostics(&mut self, what: &str, uri: &str) -> Vec<Value> {
        let found = self
            .take(what, crate::TIMEOUT, |m| {
                m["method"] == "textDocument/publishDiagnostics"
                    && m["params"]["uri"] == uri
                    && m["params"]["diagnostics"]
                        .as_array()
                        .is_some_and(|d| !d.is_empty())
            })
            .await;
        found["params"]["diagnostics"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The next request the service sends us with `method`.
    pub async fn server_request(&mut self, method: &str, timeout: Duration) -> Value {
        self.take(&format!("a {method} request"), timeout, |m| {
            m["method"] == method && m.get("id").is_some()
        })
        .await
    }

    /// The code actions offered at the start of `uri`.
    async fn code_actions(&mut self, uri: &str) -> Vec<Value> {
        let actions = self
            .call(
                "textDocument/codeAction",
                json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}}),
            )
            .await;
        actions.as_array().cloned().unwrap_or_default()
    }

    /// Runs the code action at the start of `uri` whose title `pick`s.
    pub async fn run_code_action(&mut self, uri: &str, pick: impl Fn(&str) -> bool) {
        let actions = self.code_actions(uri).await;
        let action = actions
            .iter()
            .find(|a| a["title"].as_str().is_some_and(&pick))
            .unwrap_or_else(|| panic!("no such code action among {actions:?}"));
        self.call("workspace/executeCommand", action["command"].clone())
            .await;
    }

    /// Index in `log` of the first message satisfying `pred`.
    pub fn position(&self, pred: impl Fn(&Value) -> bool) -> Option<usize> {
        self.log.iter().position(pred)
    }

    /// Every message of `log` (taken or not) satisfying `pred`.
    pub fn all(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.log.iter().filter(|m| pred(m)).cloned().collect()
    }
}
