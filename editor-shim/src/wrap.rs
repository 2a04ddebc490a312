//! `moonkale-shim -- <server> <args…>`: the shim wraps a real language
//! server, for editors that start only stdio servers (Helix). The editor sees
//! one server that has the real server's features plus Moonkale's.
//!
//! Three peers, one task (the loop in [`Router::run`]) that owns all routing
//! state; readers and writers are tasks of their own, so a slow peer never
//! blocks reading another (which could deadlock two pipes against each other).
//!
//! Editor → server: every message, unchanged (ids kept), except requests that
//! only the service can answer (`moonkale/*`, commands the service listed).
//! Editor → service: copies of text sync (`didOpen`, `didChange`, `didSave`,
//! `didClose`), `initialized` and `exit`, so the service holds the documents;
//! a copy of `textDocument/codeAction`, whose answer is appended to the
//! server's; `moonkale/*` and the service's commands. Editor requests reach
//! the service under the shim's own ids (`moonkale-shim-N`), so they cannot
//! collide with the shim's own requests; answers go back under the editor's.
//!
//! `initialize` goes to the server first: its answer says which position
//! encoding it chose, and the shim then initializes the service offering
//! exactly that one, so the positions the editor sends (copied to the service)
//! and the diagnostics the server publishes (copied as
//! `moonkale/publishDiagnostics`) count as the service expects. The editor
//! gets the server's capabilities with the service's commands and code
//! actions merged in.
//!
//! Server → editor: everything unchanged, including the server's own requests
//! (their ids are the server's). Service → editor: notifications and requests;
//! the ids of the service's requests are remembered, so the editor's answers
//! to them go to the service and all other answers go to the server.
//!
//! When the server cannot start or exits, the editor is told once
//! (`window/showMessage`, type 1) and the shim goes on as the plain shim:
//! everything to the service, so Moonkale keeps working; requests the server
//! still owed are answered with an error.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use moonkale_protocol::Notification;
use moonkale_protocol::document::PublishDiagnostics;
use moonkale_protocol::jsonrpc::{self as message, Message, RequestId, ResponseError, code};
use moonkale_wire::framing::{FrameReader, write_frame};
use moonkale_wire::stdio;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

/// How long a code action waits for the service's part before the editor
/// gets the server's alone: code actions are interactive, and the service
/// answers them from memory, so a late answer means something is wrong.
const CODE_ACTION_WAIT: Duration = Duration::from_secs(1);
/// How long the service may take to answer the shim's `initialize`, after
/// which the editor gets the server's capabilities alone.
const SERVICE_INIT_WAIT: Duration = Duration::from_secs(5);
/// How long a server gets to exit after `exit` before it is killed.
const SERVER_EXIT_WAIT: Duration = Duration::from_secs(2);

/// The text-sync notifications the service must see to hold the documents.
const COPIED_NOTIFICATIONS: &[&str] = &[
    "initialized",
    "exit",
    "textDocument/didOpen",
    "textDocument/didChange",
    "textDocument/didSave",
    "textDocument/didClose",
];

enum Event {
    /// A validated frame from the editor, or `None` at end of input.
    Editor(Option<Vec<u8>>),
    /// A frame from the server, or `None` when its stdout closed.
    Server(Option<Vec<u8>>),
    ServerExited(String),
    /// A frame from the service, or `None` when the socket closed.
    Service(Option<Vec<u8>>),
    CodeActionTimeout(RequestId),
    ServiceInitTimeout,
}

/// What the shim does with the service's answer to one of its requests.
enum Pending {
    /// The editor's request under the shim's id: relay under the editor's.
    Relay(RequestId),
    /// The shim's `initialize`; the editor's initialize id and the server's
    /// result (`None`: no server, relay the service's result as it is).
    Init(RequestId, Option<Value>),
    /// The service's half of the editor's code action request.
    CodeAction(RequestId),
    /// Answers nobody waits for (the shim's own `shutdown`).
    Ignore,
}

/// A code action request waiting for its two halves.
#[derive(Default)]
struct Merge {
    /// The server's answer; `Some(Ok(null))` once the server is gone.
    server: Option<Result<Value, ResponseError>>,
    /// The service's actions; `Some(vec![])` once it took too long.
    service: Option<Vec<Value>>,
}

/// Runs the wrapping shim after the editor's `initialize` (`init_body`, with
/// `params`) was read; `root` is the workspace. Returns the exit code.
pub(crate) async fn run(
    argv: Vec<String>,
    root: PathBuf,
    init_body: Vec<u8>,
    params: Value,
    stdin: FrameReader<stdio::BoxRead>,
    stdout: mpsc::Sender<Vec<u8>>,
) -> anyhow::Result<i32> {
    let (events, mut rx) = mpsc::unbounded_channel();
    let editor_events = events.clone();
    let editor_out = stdout.clone();
    tokio::spawn(async move {
        let mut stdin = stdin;
        loop {
            let frame = match crate::read_editor_frame(&mut stdin, &editor_out).await {
                Ok(frame) => frame,
                Err(e) => {
                    tracing::warn!("reading from the editor: {e:#}");
                    None
                }
            };
            let end = frame.is_none();
            if editor_events.send(Event::Editor(frame)).is_err() || end {
                return;
            }
        }
    });

    let program = argv[0].clone();
    let source = std::path::Path::new(&program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.clone());
    let mut router = Router {
        stdout,
        server: None,
        service: None,
        source,
        program: program.clone(),
        shutdown_seen: false,
        next_id: 0,
        service_pending: HashMap::new(),
        relayed: HashMap::new(),
        service_requests: HashSet::new(),
        server_pending: HashSet::new(),
        merges: HashMap::new(),
        service_commands: Vec::new(),
        editor_init: None,
        events: events.clone(),
        child: None,
    };

    // The server first: it works on `initialize` while the service is found
    // (or started, which takes longer).
    let mut cmd = Command::new(&program);
    cmd.args(&argv[1..])
        .current_dir(&root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    match cmd.spawn() {
        Ok(mut child) => {
            let stdin = child.stdin.take().expect("piped stdin");
            let stdout = child.stdout.take().expect("piped stdout");
            router.server = Some(spawn_writer(stdin));
            spawn_reader(stdout, events.clone(), Event::Server);
            router.child = Some(spawn_waiter(child, events.clone()));
            router.to_server(init_body.clone());
        }
        Err(e) => {
            router
                .server_lost(format!(
                    "moonkale: could not start the language server `{program}`: {e}"
                ))
                .await;
        }
    }

    match crate::connect_or_start(&root).await {
        Ok(socket) => {
            let (read, write) = socket.into_split();
            router.service = Some(spawn_writer(write));
            spawn_reader(read, events.clone(), Event::Service);
        }
        Err(e) => {
            // The real server still works; Moonkale's part is missing.
            let why = format!("moonkale: no moonkale-service: {e:#}");
            tracing::warn!("{why}");
            router.show_error(why).await;
        }
    }
    let Ok(Message::Request { id, .. }) = message::parse(&init_body) else {
        unreachable!("the caller parsed initialize as a request")
    };
    router.editor_init = Some((id.clone(), params));
    if router.server.is_none() {
        router.init_service(id, None).await;
    }
    let code = router.run(&mut rx).await;
    router.finish().await;
    Ok(code)
}

struct Router {
    stdout: mpsc::Sender<Vec<u8>>,
    /// Frames to the server's stdin; `None` once it is gone.
    server: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// Frames to the service's socket; `None` without a service.
    service: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// Stops the server's waiter task (which then ends the server).
    child: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    /// `source` of the diagnostics copied to the service: the program name.
    source: String,
    program: String,
    shutdown_seen: bool,
    next_id: u64,
    /// The shim's requests to the service, by the shim's id.
    service_pending: HashMap<RequestId, Pending>,
    /// Editor request id → the shim's id it went to the service under (for
    /// `$/cancelRequest`).
    relayed: HashMap<RequestId, RequestId>,
    /// Ids of the service's requests to the editor that are unanswered.
    service_requests: HashSet<RequestId>,
    /// Ids of the editor's requests the server has not answered yet.
    server_pending: HashSet<RequestId>,
    merges: HashMap<RequestId, Merge>,
    /// The commands the service executes (from its initialize result).
    service_commands: Vec<String>,
    /// The editor's initialize (id, params) until it is answered.
    editor_init: Option<(RequestId, Value)>,
    events: mpsc::UnboundedSender<Event>,
}

impl Router {
    async fn run(&mut self, rx: &mut mpsc::UnboundedReceiver<Event>) -> i32 {
        while let Some(event) = rx.recv().await {
            match event {
                Event::Editor(None) => return 0,
                Event::Editor(Some(body)) => {
                    if let Some(code) = self.on_editor(body).await {
                        return code;
                    }
                }
                Event::Server(Some(body)) => self.on_server(body).await,
                Event::Server(None) => {
                    // Its exit status comes with `ServerExited`; stdout
                    // closing first means nothing more will arrive anyway.
                }
                Event::ServerExited(status) => {
                    if self.server.is_some() {
                        let why = format!(
                            "moonkale: the language server `{}` exited ({status}); Moonkale goes on without it",
                            self.program
                        );
                        self.server_lost(why).await;
                    }
                }
                Event::Service(Some(body)) => self.on_service(body).await,
                Event::Service(None) => {
                    if self.service.take().is_some() {
                        self.service_lost().await;
                    }
                }
                Event::CodeActionTimeout(id) => {
                    if let Some(m) = self.merges.get_mut(&id) {
                        m.service.get_or_insert_with(Vec::new);
                        self.try_finish_merge(&id).await;
                    }
                }
                Event::ServiceInitTimeout => {
                    let init = self.service_pending.iter().find_map(|(k, p)| match p {
                        Pending::Init(..) => Some(k.clone()),
                        _ => None,
                    });
                    if let Some(Pending::Init(editor_id, Some(server))) =
                        init.and_then(|k| self.service_pending.remove(&k))
                    {
                        tracing::warn!("moonkale-service did not answer initialize");
                        self.send_editor(message::response(&editor_id, &Ok(server)))
                            .await;
                    }
                }
            }
        }
        0
    }

    /// Routes one editor message; `Some(code)` ends the shim.
    async fn on_editor(&mut self, body: Vec<u8>) -> Option<i32> {
        let msg = match message::parse(&body) {
            Ok(msg) => msg,
            Err(err) => {
                self.send_editor(err.to_response()).await;
                return None;
            }
        };
        match msg {
            Message::Request { id, method, params } => {
                self.shutdown_seen |= method == "shutdown";
                if self.server.is_none() {
                    // Plain shim: the service answers everything.
                    self.relay_to_service(id, &body);
                    return None;
                }
                if method.starts_with("moonkale/") || self.is_service_command(&method, &params) {
                    self.relay_to_service(id, &body);
                    return None;
                }
                if method == "textDocument/codeAction" && self.service.is_some() {
                    let ours = self.service_request("textDocument/codeAction", &params);
                    self.service_pending
                        .insert(ours, Pending::CodeAction(id.clone()));
                    self.merges.insert(id.clone(), Merge::default());
                    let events = self.events.clone();
                    let timer_id = id.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(CODE_ACTION_WAIT).await;
                        let _ = events.send(Event::CodeActionTimeout(timer_id));
                    });
                }
                if method == "shutdown" && self.service.is_some() {
                    let ours = self.service_request("shutdown", &message::no_params());
                    self.service_pending.insert(ours, Pending::Ignore);
                }
                self.server_pending.insert(id);
                self.to_server(body);
            }
            Message::Notification { method, params } => {
                let exit = method == "exit";
                if self.server.is_none() {
                    self.to_service(self.translate_cancel(&method, &params).unwrap_or(body));
                } else if method.starts_with("moonkale/") {
                    self.to_service(body);
                } else {
                    if method == "$/cancelRequest"
                        && let Some(cancel) = self.translate_cancel(&method, &params)
                    {
                        self.to_service(cancel);
                    }
                    if COPIED_NOTIFICATIONS.contains(&method.as_str()) {
                        self.to_service(body.clone());
                    }
                    self.to_server(body);
                }
                if exit {
                    return Some(if self.shutdown_seen { 0 } else { 1 });
                }
            }
            Message::Response { id, .. } => {
                // Answers to the service's requests go back to it; every
                // other answer is to one of the server's requests.
                match id {
                    Some(id) if self.service_requests.remove(&id) => self.to_service(body),
                    _ => self.to_server(body),
                }
            }
        }
        None
    }

    async fn on_server(&mut self, body: Vec<u8>) {
        let Ok(msg) = message::parse(&body) else {
            // Not ours to judge: the editor talks to its server.
            self.send_editor(body).await;
            return;
        };
        match msg {
            Message::Response {
                id: Some(id),
                result,
            } => {
                self.server_pending.remove(&id);
                if let Some(m) = self.merges.get_mut(&id) {
                    m.server = Some(result);
                    self.try_finish_merge(&id).await;
                    return;
                }
                if self
                    .editor_init
                    .as_ref()
                    .is_some_and(|(init, _)| *init == id)
                {
                    match result {
                        Ok(server) if self.service.is_some() => {
                            self.init_service(id, Some(server)).await;
                        }
                        // An error (the editor sees it) or no service.
                        result => {
                            self.editor_init = None;
                            self.send_editor(message::response(&id, &result)).await;
                        }
                    }
                    return;
                }
                self.send_editor(body).await;
            }
            Message::Notification { method, params }
                if method == "textDocument/publishDiagnostics" =>
            {
                let p: Value = serde_json::from_str(params.get()).unwrap_or_default();
                if let (Some(uri), Some(diagnostics)) = (p.get("uri"), p.get("diagnostics")) {
                    let copy =
                        json!({"uri": uri, "source": self.source, "diagnostics": diagnostics});
                    let method = <PublishDiagnostics as Notification>::METHOD;
                    self.to_service(message::notification(method, copy));
                }
                self.send_editor(body).await;
            }
            _ => self.send_editor(body).await,
        }
    }

    async fn on_service(&mut self, body: Vec<u8>) {
        let Ok(msg) = message::parse(&body) else {
            return;
        };
        match msg {
            Message::Response {
                id: Some(id),
                result,
            } => match self.service_pending.remove(&id) {
                Some(Pending::Relay(editor_id)) => {
                    self.relayed.remove(&editor_id);
                    self.send_editor(message::response(&editor_id, &result))
                        .await;
                }
                Some(Pending::Init(editor_id, server)) => {
                    self.service_initialized(editor_id, server, result).await;
                }
                Some(Pending::CodeAction(editor_id)) => {
                    if let Some(m) = self.merges.get_mut(&editor_id) {
                        let actions = match result {
                            Ok(Value::Array(actions)) => actions,
                            _ => Vec::new(),
                        };
                        m.service.get_or_insert(actions);
                        self.try_finish_merge(&editor_id).await;
                    }
                }
                Some(Pending::Ignore) | None => {}
            },
            Message::Request { id, .. } => {
                self.service_requests.insert(id);
                self.send_editor(body).await;
            }
            Message::Notification { .. } => self.send_editor(body).await,
            Message::Response { id: None, .. } => {}
        }
    }

    /// Sends the shim's `initialize` to the service: the editor's params,
    /// offering only the server's position encoding when there is a server.
    async fn init_service(&mut self, editor_id: RequestId, server: Option<Value>) {
        let Some((_, mut params)) = self.editor_init.take() else {
            return;
        };
        if self.service.is_none() {
            let result = server.map_or_else(
                || {
                    Err(ResponseError::new(
                        code::REQUEST_FAILED,
                        "no language server and no moonkale-service",
                    ))
                },
                Ok,
            );
            self.send_editor(message::response(&editor_id, &result))
                .await;
            return;
        }
        if let Some(server) = &server {
            let encoding = server
                .pointer("/capabilities/positionEncoding")
                .and_then(Value::as_str)
                .unwrap_or("utf-16");
            if !params.is_object() {
                params = json!({});
            }
            if !params["capabilities"].is_object() {
                params["capabilities"] = json!({});
            }
            if !params["capabilities"]["general"].is_object() {
                params["capabilities"]["general"] = json!({});
            }
            params["capabilities"]["general"]["positionEncodings"] = json!([encoding]);
            // The editor's options are the server's business.
            if let Some(p) = params.as_object_mut() {
                p.remove("initializationOptions");
            }
        }
        let ours = self.service_request("initialize", &message::params(&params));
        self.service_pending
            .insert(ours, Pending::Init(editor_id, server));
        let events = self.events.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SERVICE_INIT_WAIT).await;
            let _ = events.send(Event::ServiceInitTimeout);
        });
    }

    /// The service answered the shim's `initialize`: the editor gets the
    /// server's result with the service's commands and code actions merged.
    async fn service_initialized(
        &mut self,
        editor_id: RequestId,
        server: Option<Value>,
        result: Result<Value, ResponseError>,
    ) {
        if let Ok(service) = &result {
            self.service_commands = service
                .pointer("/capabilities/executeCommandProvider/commands")
                .and_then(Value::as_array)
                .map(|c| {
                    c.iter()
                        .filter_map(|c| c.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
        }
        let reply = match (server, result) {
            (None, result) => result,
            (Some(server), Err(e)) => {
                tracing::warn!("moonkale-service refused initialize: {}", e.message);
                Ok(server)
            }
            (Some(mut server), Ok(service)) => {
                merge_capabilities(&mut server, &service, &self.service_commands);
                Ok(server)
            }
        };
        self.send_editor(message::response(&editor_id, &reply))
            .await;
    }

    async fn try_finish_merge(&mut self, id: &RequestId) {
        let ready = self
            .merges
            .get(id)
            .is_some_and(|m| m.server.is_some() && m.service.is_some());
        if !ready {
            return;
        }
        let m = self.merges.remove(id).expect("checked above");
        let service = m.service.unwrap_or_default();
        let reply = match m.server.expect("checked above") {
            Ok(Value::Array(mut actions)) => {
                actions.extend(service);
                Ok(Value::Array(actions))
            }
            Ok(Value::Null) => Ok(Value::Array(service)),
            Err(e) if service.is_empty() => Err(e),
            // The server failed, but the service has something to offer.
            Ok(_) | Err(_) => Ok(Value::Array(service)),
        };
        self.send_editor(message::response(id, &reply)).await;
    }

    fn is_service_command(&self, method: &str, params: &message::Params) -> bool {
        if method != "workspace/executeCommand" {
            return false;
        }
        let p: Value = serde_json::from_str(params.get()).unwrap_or_default();
        p.get("command")
            .and_then(Value::as_str)
            .is_some_and(|c| self.service_commands.iter().any(|s| s == c))
    }

    /// The editor's request to the service under a fresh shim id.
    fn relay_to_service(&mut self, editor_id: RequestId, body: &[u8]) {
        if self.service.is_none() {
            let err = ResponseError::new(code::REQUEST_FAILED, "moonkale-service is not connected");
            let _ = self
                .stdout
                .try_send(message::response(&editor_id, &Err(err)));
            return;
        }
        let mut value: Value = serde_json::from_slice(body).unwrap_or_default();
        let ours = self.next_shim_id();
        value["id"] = ours.to_json();
        self.to_service(serde_json::to_vec(&value).expect("JSON"));
        self.relayed.insert(editor_id.clone(), ours.clone());
        self.service_pending.insert(ours, Pending::Relay(editor_id));
    }

    /// `$/cancelRequest` for a request relayed to the service, rewritten to
    /// the shim's id.
    fn translate_cancel(&self, method: &str, params: &message::Params) -> Option<Vec<u8>> {
        if method != "$/cancelRequest" {
            return None;
        }
        let p: Value = serde_json::from_str(params.get()).ok()?;
        let editor_id = match p.get("id")? {
            Value::Number(n) => RequestId::Number(n.as_i64()?),
            Value::String(s) => RequestId::String(s.clone()),
            _ => return None,
        };
        let ours = self.relayed.get(&editor_id)?;
        Some(message::notification(
            "$/cancelRequest",
            json!({"id": ours.to_json()}),
        ))
    }

    /// Sends one of the shim's own requests to the service; returns its id.
    fn service_request(&mut self, method: &str, params: &message::Params) -> RequestId {
        let id = self.next_shim_id();
        let params: Value = serde_json::from_str(params.get()).unwrap_or_default();
        self.to_service(message::request(&id, method, params));
        id
    }

    fn next_shim_id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId::String(format!("moonkale-shim-{}", self.next_id))
    }

    fn to_server(&self, body: Vec<u8>) {
        if let Some(server) = &self.server {
            let _ = server.send(body);
        }
    }

    fn to_service(&self, body: Vec<u8>) {
        if let Some(service) = &self.service {
            let _ = service.send(body);
        }
    }

    async fn send_editor(&self, body: Vec<u8>) {
        let _ = self.stdout.send(body).await;
    }

    async fn show_error(&self, why: String) {
        let note = message::notification("window/showMessage", json!({"type": 1, "message": why}));
        self.send_editor(note).await;
    }

    /// The server failed to start or exited: tell the editor (unless it
    /// asked for the exit), answer what the server owed, and go on with the
    /// service alone.
    async fn server_lost(&mut self, why: String) {
        self.server = None;
        if !self.shutdown_seen {
            tracing::warn!("{why}");
            self.show_error(why).await;
        }
        if let Some((id, _)) = self.editor_init.as_ref().cloned() {
            self.server_pending.remove(&id);
            if self.service.is_some() {
                // The service answers initialize as for the plain shim.
                self.init_service(id, None).await;
            }
        }
        let ids: Vec<RequestId> = self.merges.keys().cloned().collect();
        for id in ids {
            self.server_pending.remove(&id);
            if let Some(m) = self.merges.get_mut(&id) {
                m.server.get_or_insert(Ok(Value::Null));
            }
            self.try_finish_merge(&id).await;
        }
        let err = ResponseError::new(code::REQUEST_FAILED, "the language server exited");
        for id in std::mem::take(&mut self.server_pending) {
            self.send_editor(message::response(&id, &Err(err.clone())))
                .await;
        }
    }

    /// The service's socket closed: the server goes on; what the service
    /// owed is answered (code actions get the server's part).
    async fn service_lost(&mut self) {
        self.show_error("moonkale: lost the connection to moonkale-service".into())
            .await;
        let err = ResponseError::new(
            code::REQUEST_FAILED,
            "lost the connection to moonkale-service",
        );
        for (_, pending) in std::mem::take(&mut self.service_pending) {
            match pending {
                Pending::Relay(id) => {
                    self.send_editor(message::response(&id, &Err(err.clone())))
                        .await;
                }
                Pending::Init(id, server) => {
                    let result = server.ok_or_else(|| err.clone());
                    self.send_editor(message::response(&id, &result)).await;
                }
                Pending::CodeAction(id) => {
                    if let Some(m) = self.merges.get_mut(&id) {
                        m.service.get_or_insert_with(Vec::new);
                    }
                    self.try_finish_merge(&id).await;
                }
                Pending::Ignore => {}
            }
        }
        self.relayed.clear();
        self.service_requests.clear();
    }

    /// After `exit` or the end of the editor's input: close the pipes, give
    /// the server a moment to exit, and flush what the editor is owed.
    async fn finish(&mut self) {
        self.server = None;
        self.service = None;
        if let Some((stop, waiter)) = self.child.take() {
            let _ = stop.send(());
            let _ = waiter.await;
        }
        // Let the writers drain (the exit copy to the service, the last
        // replies to the editor).
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The service's commands and code actions merged into the server's
/// initialize result.
fn merge_capabilities(server: &mut Value, service: &Value, service_commands: &[String]) {
    if !server.is_object() {
        *server = json!({});
    }
    if !server["capabilities"].is_object() {
        server["capabilities"] = json!({});
    }
    let caps = &mut server["capabilities"];
    let mut commands: Vec<Value> = caps
        .pointer("/executeCommandProvider/commands")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in service_commands {
        if !commands.iter().any(|have| have == c) {
            commands.push(json!(c));
        }
    }
    if !caps["executeCommandProvider"].is_object() {
        caps["executeCommandProvider"] = json!({});
    }
    caps["executeCommandProvider"]["commands"] = Value::Array(commands);
    let server_has = match caps.get("codeActionProvider") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(_) => true,
    };
    let service_has = service
        .pointer("/capabilities/codeActionProvider")
        .is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false)));
    if !server_has && service_has {
        caps["codeActionProvider"] = json!(true);
    }
}

/// A task writing frames to `w` in order; dropping the sender closes `w`.
fn spawn_writer<W: AsyncWrite + Unpin + Send + 'static>(
    mut w: W,
) -> mpsc::UnboundedSender<Vec<u8>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(body) = rx.recv().await {
            if write_frame(&mut w, &body).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    });
    tx
}

/// A task reading frames from `r` into events; a framing error ends it like
/// the end of the stream (a server or service that garbles its output cannot
/// be followed).
fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(
    r: R,
    events: mpsc::UnboundedSender<Event>,
    wrap: fn(Option<Vec<u8>>) -> Event,
) {
    tokio::spawn(async move {
        let mut reader = FrameReader::new(r);
        loop {
            let frame = match reader.read_frame().await {
                Ok(frame) => frame,
                Err(e) => {
                    tracing::warn!("reading frames: {e}");
                    None
                }
            };
            let end = frame.is_none();
            if events.send(wrap(frame)).is_err() || end {
                return;
            }
        }
    });
}

/// A task that owns the server process: it reports the server's exit as an
/// event, or, once told to stop (the editor is done), gives the server
/// [`SERVER_EXIT_WAIT`] to exit on its own (its stdin is closed by then) and
/// kills it otherwise.
fn spawn_waiter(
    mut child: Child,
    events: mpsc::UnboundedSender<Event>,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        tokio::select! {
            status = child.wait() => {
                let _ = events.send(Event::ServerExited(describe(status)));
            }
            _ = stopped => {
                if tokio::time::timeout(SERVER_EXIT_WAIT, child.wait()).await.is_err() {
                    let _ = child.kill().await;
                }
            }
        }
    });
    (stop, task)
}

fn describe(status: std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("waiting for it failed: {e}"),
    }
}
