//! `moonkale-service acp`: the Agent Client Protocol (v1) front door. An
//! ACP editor (Zed, JetBrains, CodeCompanion, agent-shell, Toad, acpx)
//! starts this process as its agent and speaks JSON-RPC to it, one message
//! per line on stdin/stdout. The process is a thin adapter: it connects to
//! the workspace's service (local socket, started when none runs, or a
//! remote `serve --listen`) as a front end, and turns ACP into
//! `moonkale/agent/*` and the service's notifications into `session/update`.
//!
//! So an ACP session is a hosted session of the service: it lives on when
//! the editor closes, several clients (ACP or not) follow one session, and
//! its approvals are the service's, answered by whichever front end
//! answers first (an ACP client's `session/request_permission`, an LSP
//! editor's button, `agent answer`); the others are withdrawn
//! (`$/cancel_request`).
//!
//! **Invariant:** stdout carries only ACP messages (logs go to stderr),
//! and nothing an ACP client sends can panic the process or block the
//! service: hostile lines get JSON-RPC errors, and a client that stops
//! reading stalls only this process, whose connection to the service
//! keeps reading and drops what it cannot pass on
//! ([`Notification::Lagged`], after which the events are read again from
//! the transcript).

mod prompt;
mod session;
mod translate;
mod wire;

use std::collections::HashMap;
use std::path::PathBuf;

use moonkale_client::{Client, Notification, Notifications};
use moonkale_protocol::agent::{
    AnswerParams, Approval, ApprovalStatus, Event, ModelChoice, PermissionMode, SessionEvent,
    StartParams,
};
use moonkale_protocol::jsonrpc::{self, Message, RequestId, ResponseError};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use self::session::{Attached, PermissionAsked};
use self::translate::{AcpView, DEFAULT_MODEL, MODEL_OPTION};
use self::wire::{Incoming, code};
use crate::error::Result;

/// The only ACP version there is (schema 1.x).
pub const PROTOCOL_VERSION: u64 = 1;
/// The mode an ACP session starts in: edits and commands ask, which is
/// what an editor's agent panel is for (the service's own default, plan,
/// would refuse every edit until the user switches).
pub const ACP_DEFAULT_MODE: PermissionMode = PermissionMode::Default;

/// The client's two ends: its messages, parsed, and the queue of lines to
/// it.
struct Pipes {
    incoming: mpsc::Receiver<Incoming>,
    out: mpsc::Sender<Vec<u8>>,
    writer: tokio::task::JoinHandle<()>,
}

impl Pipes {
    fn new<R, W>(input: R, output: W) -> Pipes
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let (incoming_tx, incoming) = mpsc::channel(wire::QUEUE);
        tokio::spawn(wire::read_lines(input, incoming_tx));
        let (out, out_rx) = mpsc::channel(wire::QUEUE);
        let writer = tokio::spawn(wire::write_lines(output, out_rx));
        Pipes {
            incoming,
            out,
            writer,
        }
    }

    /// Waits until every line queued reached the client.
    async fn finish(self) {
        drop(self.out);
        let _ = self.writer.await;
    }
}

/// What is sent once a request's reply is out: a new session's first
/// updates, a loaded session's questions (the client knows the session
/// from the reply).
enum AfterReply {
    Update(String, Value),
    Ask(String, Approval),
}

struct Bridge {
    client: Client,
    notes: Notifications,
    out: mpsc::Sender<Vec<u8>>,
    /// The service's workspace (sessions' `cwd` when listed).
    workspace: PathBuf,
    /// The service is remote: the client's paths are not its paths.
    remote: bool,
    initialized: bool,
    /// The client takes `elicitation/create` forms (`AskUserQuestion`).
    forms: bool,
    /// The sessions this client created or loaded.
    sessions: HashMap<String, Attached>,
    /// The models the CLI offered last, for a new session's reply before
    /// its own CLI says.
    models: Vec<ModelChoice>,
    /// What must follow the reply being sent.
    after_reply: Vec<AfterReply>,
    /// Our `session/request_permission` requests waiting for the client.
    asked: HashMap<i64, PermissionAsked>,
    next_id: i64,
}

impl Bridge {
    async fn new(client: Client, out: mpsc::Sender<Vec<u8>>, remote: bool) -> Result<Bridge> {
        let notes = client.notifications().expect("a new client's");
        let workspace = client.status().await?.workspace;
        // The panel's sessions start in its mode: a warm CLI for them.
        let prepare = moonkale_protocol::agent::PrepareParams {
            permission_mode: Some(ACP_DEFAULT_MODE),
            model: None,
        };
        if let Err(e) = client
            .request::<moonkale_protocol::agent::Prepare>(prepare)
            .await
        {
            tracing::info!("the service did not prepare a warm CLI: {e}");
        }
        Ok(Bridge {
            client,
            notes,
            out,
            workspace,
            remote,
            initialized: false,
            forms: false,
            sessions: HashMap::new(),
            models: Vec::new(),
            after_reply: Vec::new(),
            asked: HashMap::new(),
            next_id: 0,
        })
    }

    /// Serves the client: `init`, the `initialize` params it was already
    /// answered, and `first`, a message that came before the connection.
    async fn serve(mut self, pipes: &mut Pipes, started: Option<(Option<Value>, Incoming)>) {
        if let Some((init, first)) = started {
            if let Some(init) = init {
                self.initialize(&init);
            }
            self.incoming(first).await;
        }
        self.run(&mut pipes.incoming).await;
    }

    async fn run(&mut self, incoming: &mut mpsc::Receiver<Incoming>) {
        loop {
            tokio::select! {
                biased;
                message = incoming.recv() => match message {
                    Some(message) => self.incoming(message).await,
                    None => break, // the client closed stdin
                },
                note = self.notes.next() => match note {
                    Some(note) => self.notification(note).await,
                    None => {
                        self.service_gone().await;
                        break;
                    }
                },
            }
        }
    }

    /// Sends one message (`jsonrpc::response`, …); the writer ends its
    /// line.
    async fn send(&self, message: Vec<u8>) {
        let _ = self.out.send(message).await;
    }

    async fn update(&self, session: &str, update: Value) {
        self.send(jsonrpc::notification(
            "session/update",
            json!({"sessionId": session, "update": update}),
        ))
        .await;
    }

    async fn updates(&self, session: &str, updates: Vec<Value>) {
        for update in updates {
            self.update(session, update).await;
        }
    }

    // ----- from the client ------------------------------------------------

    async fn incoming(&mut self, message: Incoming) {
        match message {
            Ok(Message::Request { id, method, params }) => {
                let result = match wire::value(&params) {
                    Ok(params) => self.request(&method, params, id.clone()).await,
                    Err(error) => Err(error),
                };
                match result {
                    Ok(Some(result)) => self.send(jsonrpc::response(&id, &Ok(result))).await,
                    Ok(None) => {} // answered later (a prompt)
                    Err(error) => self.send(jsonrpc::error_response(Some(&id), &error)).await,
                }
                for next in std::mem::take(&mut self.after_reply) {
                    match next {
                        AfterReply::Update(session, update) => self.update(&session, update).await,
                        AfterReply::Ask(session, approval) => {
                            self.ask_permission(&session, approval).await;
                        }
                    }
                }
            }
            Ok(Message::Notification { method, params }) => {
                if method == "session/cancel"
                    && let Ok(params) = wire::value(&params)
                    && let Some(session) = params["sessionId"].as_str()
                {
                    self.cancel(session);
                }
            }
            Ok(Message::Response { id, result }) => self.permission_answered(id, result).await,
            Err(invalid) => self.send(invalid.to_response()).await,
        }
    }

    async fn request(
        &mut self,
        method: &str,
        params: Value,
        id: RequestId,
    ) -> Result<Option<Value>, ResponseError> {
        if method == "initialize" {
            return Ok(Some(self.initialize(&params)));
        }
        if !self.initialized {
            return Err(ResponseError::new(
                code::INVALID_REQUEST,
                "send initialize first",
            ));
        }
        let params = wire::Params(params);
        match method {
            // Claude Code logs in by itself, in a terminal: nothing an
            // ACP client can do for it.
            "authenticate" => Err(ResponseError::new(code::INVALID_REQUEST, LOGIN_METHOD_TEXT)),
            "session/new" => self.new_session(&params).await.map(Some),
            "session/load" => self.open_session(&params, true).await.map(Some),
            "session/resume" => self.open_session(&params, false).await.map(Some),
            "session/close" => {
                let session = self.attached_id(&params)?;
                self.close_session(&session).await;
                Ok(Some(json!({})))
            }
            "session/list" => self.list_sessions().await.map(Some),
            "session/prompt" => self.prompt(&params, id).await.map(|()| None),
            "session/set_mode" => {
                let session = self.attached_id(&params)?;
                let mode = params.string("modeId")?;
                let mode = PermissionMode::parse(&mode).ok_or_else(|| {
                    ResponseError::invalid_params(format!(
                        "unknown mode {mode:?} (default, acceptEdits, plan or bypassPermissions)"
                    ))
                })?;
                self.client
                    .agent_set_permission_mode(&session, mode)
                    .await
                    .map_err(wire::from_service)?;
                Ok(Some(json!({})))
            }
            "session/set_config_option" => {
                let session = self.attached_id(&params)?;
                let option = params.string("configId")?;
                if option != MODEL_OPTION {
                    return Err(ResponseError::invalid_params(format!(
                        "unknown config option {option:?} (model)"
                    )));
                }
                let model = params.string("value")?;
                self.set_model(&session, &model).await?;
                let options = self.sessions[&session].view.config_options();
                Ok(Some(json!({"configOptions": options})))
            }
            "session/set_model" => {
                let session = self.attached_id(&params)?;
                let model = params.string("modelId")?;
                self.set_model(&session, &model).await?;
                Ok(Some(json!({})))
            }
            _ => Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "{} is not an ACP method this agent serves",
                    crate::printable::one_line(method)
                ),
            )),
        }
    }

    fn initialize(&mut self, params: &Value) -> Value {
        self.initialized = true;
        let forms = params.pointer("/clientCapabilities/elicitation/form");
        self.forms = forms.is_some_and(Value::is_object);
        initialize_result(params)
    }

    /// The id of a session this client created or loaded.
    fn attached_id(&self, params: &wire::Params) -> Result<String, ResponseError> {
        let session = params.string("sessionId")?;
        if self.sessions.contains_key(&session) {
            Ok(session)
        } else {
            Err(ResponseError::invalid_params(format!(
                "session {:?} is not open here: create it with session/new or open it with session/load",
                crate::printable::one_line(&session)
            )))
        }
    }

    async fn set_model(&mut self, session: &str, model: &str) -> Result<(), ResponseError> {
        let model = (model != DEFAULT_MODEL).then(|| model.to_owned());
        let set = self
            .client
            .agent_set_model(session, model.as_deref())
            .await
            .map_err(wire::from_service)?;
        if let Some(attached) = self.sessions.get_mut(session) {
            attached.view.session.model = set;
        }
        Ok(())
    }

    async fn new_session(&mut self, params: &wire::Params) -> Result<Value, ResponseError> {
        let mut cwd = params.absolute_path("cwd")?;
        if self.remote && !cwd.starts_with(&self.workspace) {
            cwd = self.workspace.clone(); // a folder of the client's machine
        }
        let mcp_servers = wire::mcp_servers(&params.0["mcpServers"])?;
        let started = self
            .client
            .request::<moonkale_protocol::agent::Start>(StartParams {
                permission_mode: Some(ACP_DEFAULT_MODE),
                cwd: (cwd != self.workspace).then_some(cwd),
                mcp_servers,
                ..StartParams::default()
            })
            .await
            .map_err(wire::from_service)?;
        let session = started.session;
        let mut view = AcpView::new(&self.workspace, ACP_DEFAULT_MODE, None);
        view.session.models = self.models.clone();
        let mut attached = Attached::new(view);
        // A warm CLI already told its commands and models: read them now.
        let page = self
            .client
            .agent_events(&session, 0)
            .await
            .map_err(wire::from_service)?;
        let mut later = Vec::new();
        for event in &page.events {
            later.extend(attached.event(event));
        }
        let reply = json!({
            "sessionId": session,
            "modes": attached.view.modes(),
            "configOptions": attached.view.config_options(),
        });
        self.sessions.insert(session.clone(), attached);
        // After the reply, so the client knows the session.
        self.after_reply = later
            .into_iter()
            .map(|u| AfterReply::Update(session.clone(), u))
            .collect();
        Ok(reply)
    }

    /// `session/load` (`replay`: its history is shown first) or
    /// `session/resume` (the client has it: only what comes next), then
    /// the session live: subscribed first, so what is stored meanwhile is
    /// in the notification queue, where an event already seen is skipped
    /// by its `seq`.
    async fn open_session(
        &mut self,
        params: &wire::Params,
        replay: bool,
    ) -> Result<Value, ResponseError> {
        let session = params.string("sessionId")?;
        if self.sessions.contains_key(&session) {
            return Err(ResponseError::invalid_params(
                "this session is open here already",
            ));
        }
        self.client
            .agent_subscribe(Some(&session))
            .await
            .map_err(wire::from_service)?;
        let view = AcpView::new(&self.workspace, PermissionMode::Plan, None);
        let mut attached = Attached::new(view);
        let mut since = 0;
        let (pending, streaming) = loop {
            let page = self
                .client
                .agent_events(&session, since)
                .await
                .map_err(wire::from_service)?;
            let mut updates = Vec::new();
            for event in &page.events {
                updates.extend(attached.event(event));
            }
            if replay {
                self.updates(&session, updates).await;
            }
            if page.next >= page.total || page.events.is_empty() {
                break (page.pending_approvals, page.streaming);
            }
            since = page.next;
        };
        if let Some(streaming) = streaming {
            let updates = attached
                .view
                .streaming(&streaming.text, &streaming.thinking);
            if replay {
                self.updates(&session, updates).await;
            }
        }
        let reply = json!({
            "modes": attached.view.modes(),
            "configOptions": attached.view.config_options(),
        });
        self.sessions.insert(session.clone(), attached);
        self.catch_up(&session).await;
        self.after_reply = pending
            .into_iter()
            .map(|a| AfterReply::Ask(session.clone(), a))
            .collect();
        Ok(reply)
    }

    /// The client closes a session: it stops following it here (its
    /// questions are withdrawn, a prompt waiting is answered `cancelled`);
    /// the session itself lives on in the service.
    async fn close_session(&mut self, session: &str) {
        let Some(attached) = self.sessions.remove(session) else {
            return;
        };
        if let Err(e) = self.client.agent_unsubscribe(Some(session)).await {
            tracing::info!("unsubscribing from a closed session failed: {e}");
        }
        if let Some(prompt) = attached.prompt {
            let reply = jsonrpc::response(&prompt.id, &Ok(json!({"stopReason": "cancelled"})));
            self.send(reply).await;
        }
        let approvals: Vec<String> = self
            .asked
            .values()
            .filter(|a| a.session == session)
            .map(|a| a.approval.approval.clone())
            .collect();
        for approval in approvals {
            self.withdraw(&approval).await;
        }
    }

    /// After a replay: what the service sent meanwhile is already queued.
    /// Events replayed are skipped by their `seq`; streamed text that came
    /// before such an event is part of what the replay showed, so it is
    /// dropped too. The rest is shown as it comes.
    async fn catch_up(&mut self, session: &str) {
        let mut queued = Vec::new();
        while let Some(note) = self.notes.try_next() {
            queued.push(note);
        }
        let attached = &self.sessions[session];
        let replayed_until = queued.iter().rposition(|n| {
            matches!(n, Notification::AgentEvent { session: s, event } if s == session && attached.seen(event.seq))
        });
        for (i, note) in queued.into_iter().enumerate() {
            let old_text = matches!(&note, Notification::AgentText { session: s, .. } if s == session)
                && replayed_until.is_some_and(|last| i < last);
            if !old_text {
                Box::pin(self.notification(note)).await;
            }
        }
    }

    async fn list_sessions(&self) -> Result<Value, ResponseError> {
        let sessions = self.client.agent_list().await.map_err(wire::from_service)?;
        let listed: Vec<Value> = sessions
            .iter()
            .map(|s| {
                json!({
                    "sessionId": s.session,
                    "cwd": s.cwd.as_ref().unwrap_or(&self.workspace),
                    "title": if s.title.is_empty() { None } else { Some(&s.title) },
                    "updatedAt": wire::iso8601(s.updated),
                })
            })
            .collect();
        Ok(json!({"sessions": listed}))
    }

    async fn prompt(&mut self, params: &wire::Params, id: RequestId) -> Result<(), ResponseError> {
        let session = self.attached_id(params)?;
        if self.sessions[&session].prompt.is_some() {
            return Err(ResponseError::new(
                code::INVALID_REQUEST,
                "a prompt of this session is still running: wait for its reply or cancel it",
            ));
        }
        let (text, images) = prompt::text_of(&params.0["prompt"])?;
        let sent = self
            .client
            .agent_send_with_images(&session, &text, images)
            .await
            .map_err(wire::from_service)?;
        let attached = self.sessions.get_mut(&session).expect("checked");
        attached.view.sent_prompt(sent);
        attached.prompt = Some(session::PendingPrompt {
            id,
            seq: sent,
            cancelled: false,
        });
        Ok(())
    }

    fn cancel(&mut self, session: &str) {
        let Some(attached) = self.sessions.get_mut(session) else {
            return;
        };
        if let Some(prompt) = &mut attached.prompt {
            prompt.cancelled = true;
        }
        let interrupt = self.client.agent_interrupt(session);
        tokio::spawn(async move {
            if let Err(e) = interrupt.await {
                tracing::warn!("interrupting the turn failed: {e}");
            }
        });
    }

    // ----- from the service -----------------------------------------------

    async fn notification(&mut self, note: Notification) {
        match note {
            Notification::AgentText {
                session,
                text,
                thinking,
                offset,
            } => {
                let Some(attached) = self.sessions.get_mut(&session) else {
                    return;
                };
                let updates = attached.text(&text, thinking, offset);
                self.updates(&session, updates).await;
            }
            Notification::AgentEvent { session, event } => self.event(&session, &event).await,
            Notification::Approval {
                session,
                approval,
                status,
            } => match status {
                ApprovalStatus::Pending if self.sessions.contains_key(&session) => {
                    self.ask_permission(&session, *approval).await;
                }
                ApprovalStatus::Pending => {}
                ApprovalStatus::Closed => self.withdraw(&approval.approval).await,
            },
            Notification::Lagged { missed } => {
                tracing::warn!(
                    "{missed} notifications of the service were dropped; reading the events again"
                );
                let sessions: Vec<String> = self.sessions.keys().cloned().collect();
                for session in sessions {
                    self.reread(&session).await;
                }
            }
            _ => {}
        }
    }

    async fn event(&mut self, session: &str, event: &Event) {
        let Some(attached) = self.sessions.get_mut(session) else {
            return;
        };
        let updates = attached.event(event);
        if let SessionEvent::Capabilities(_) = event.event {
            self.models = attached.view.session.models.clone();
        }
        let finished = attached.turn_finished();
        let login = match &finished {
            Some((_, Err(why))) => attached.login_needed(why),
            _ => None,
        };
        self.updates(session, updates).await;
        if let Some((id, outcome)) = finished {
            let error = match (outcome, login) {
                (Ok(stop), _) => {
                    self.send(jsonrpc::response(&id, &Ok(json!({"stopReason": stop}))))
                        .await;
                    return;
                }
                // ACP's own "authentication required", so a client can
                // offer its login flow (`authMethods`).
                (Err(_), Some(login)) => ResponseError::new(AUTH_REQUIRED, login.sentence()),
                (Err(why), None) => ResponseError::new(code::INTERNAL_ERROR, why),
            };
            let error = error.with_data(json!({"session": session}));
            self.send(jsonrpc::error_response(Some(&id), &error)).await;
        }
    }

    /// The events since the last one seen, after the service dropped some
    /// notifications of this connection.
    async fn reread(&mut self, session: &str) {
        let Some(since) = self.sessions.get(session).map(Attached::next_seq) else {
            return;
        };
        let mut since = since;
        loop {
            let Ok(page) = self.client.agent_events(session, since).await else {
                return;
            };
            for event in &page.events {
                Box::pin(self.event(session, event)).await;
            }
            if page.next >= page.total || page.events.is_empty() {
                return;
            }
            since = page.next;
        }
    }

    async fn ask_permission(&mut self, session: &str, approval: Approval) {
        if self
            .asked
            .values()
            .any(|a| a.approval.approval == approval.approval)
        {
            return;
        }
        let Some(attached) = self.sessions.get(session) else {
            return;
        };
        let tool_call = attached.view.tool_call_for(&approval);
        let asked = PermissionAsked::new(session, approval, tool_call, self.forms);
        self.send_permission(asked).await;
    }

    async fn send_permission(&mut self, asked: PermissionAsked) {
        self.next_id += 1;
        let id = self.next_id;
        let (method, params) = (asked.method(), asked.params());
        self.asked.insert(id, asked);
        self.send(jsonrpc::request(&RequestId::Number(id), method, params))
            .await;
    }

    /// An approval was decided elsewhere (or withdrawn by the CLI): the
    /// client's question is cancelled.
    async fn withdraw(&mut self, approval: &str) {
        let ids: Vec<i64> = self
            .asked
            .iter()
            .filter(|(_, a)| a.approval.approval == approval)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.asked.remove(&id);
            self.send(jsonrpc::notification(
                "$/cancel_request",
                json!({"requestId": id}),
            ))
            .await;
        }
    }

    async fn permission_answered(
        &mut self,
        id: Option<RequestId>,
        result: Result<Value, ResponseError>,
    ) {
        let Some(RequestId::Number(id)) = id else {
            return; // not ours
        };
        let Some(asked) = self.asked.remove(&id) else {
            return; // withdrawn already, or not ours
        };
        let result = result.unwrap_or_else(|_| json!({"outcome": {"outcome": "cancelled"}}));
        match asked.answer(&result) {
            session::Answered::Done(answer) => self.answer(answer).await,
            session::Answered::Next(next) => self.send_permission(next).await,
        }
    }

    async fn answer(&self, answer: AnswerParams) {
        let approval = answer.approval.clone();
        if let Err(e) = self.client.agent_answer(answer).await {
            // Another front end was first, or the turn ended.
            tracing::info!(approval = %approval, "the answer was not taken: {e}");
        }
    }

    async fn service_gone(&mut self) {
        let pending: Vec<RequestId> = self
            .sessions
            .values_mut()
            .filter_map(|a| a.prompt.take().map(|p| p.id))
            .collect();
        for id in pending {
            let error = ResponseError::new(
                code::INTERNAL_ERROR,
                "the moonkale service closed the connection; the session goes on when it is back (session/load)",
            );
            self.send(jsonrpc::error_response(Some(&id), &error)).await;
        }
    }
}

/// The answer to `initialize`: version 1 whatever was asked (the client
/// decides whether it speaks it), no authentication (the CLI uses the
/// user's own login), sessions that load and list.
/// ACP's error code for "authentication required".
const AUTH_REQUIRED: i64 = -32000;
/// The one way to log in: Claude Code's own, in a terminal.
const LOGIN_METHOD: &str = "claude-login";
const LOGIN_METHOD_TEXT: &str = "Claude Code uses its own login: run `claude auth login` in a terminal \
     (or `claude`, then `/login`, on CLIs before 2.1), then try again.";

fn initialize_result(_params: &Value) -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
            "mcpCapabilities": {"http": true, "sse": true},
            "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
        },
        "authMethods": [{
            "id": LOGIN_METHOD,
            "name": "Log in to Claude Code",
            "description": LOGIN_METHOD_TEXT,
        }],
        "agentInfo": {
            "name": "moonkale-service",
            "title": "Claude Code (Moonkale)",
            "version": env!("CARGO_PKG_VERSION"),
        },
    })
}

/// Where an `acp` process finds its service.
pub enum Target {
    /// The service of `workspace` (or, when `None`, of the folder the
    /// client's first session is in), started when none runs.
    Local {
        workspace: Option<PathBuf>,
        service_bin: PathBuf,
    },
    /// A remote `serve --listen`.
    Remote(crate::remote::client::RemoteTarget),
}

/// The name this front end goes by in the service's editor list.
const NAME: &str = "ACP client";

/// Connects to the service and serves ACP on this process's stdin/stdout.
/// Without a workspace named, the service is the one of the first
/// session's `cwd` (an editor need not start its agent in the project):
/// `initialize` is answered before that.
pub async fn run(target: Target) -> Result<()> {
    let mut pipes = Pipes::new(tokio::io::stdin(), tokio::io::stdout());
    let remote = matches!(target, Target::Remote(_));
    let (client, started) = match target {
        Target::Local {
            workspace: None,
            service_bin,
        } => {
            let Some((init, first)) = before_a_session(&mut pipes).await else {
                pipes.finish().await;
                return Ok(());
            };
            let folder = match first_folder(&first) {
                Some(folder) => folder,
                None => std::env::current_dir().map_err(|e| {
                    crate::Error::Invalid(format!("reading the current directory: {e}"))
                })?,
            };
            let local = Target::Local {
                workspace: Some(folder),
                service_bin,
            };
            match connect(&local).await {
                Ok(client) => (client, Some((init, first))),
                Err(e) => {
                    if let Ok(Message::Request { id, .. }) = first {
                        let error = ResponseError::new(code::INTERNAL_ERROR, e.to_string());
                        let _ = pipes
                            .out
                            .send(jsonrpc::error_response(Some(&id), &error))
                            .await;
                    }
                    pipes.finish().await;
                    return Err(e);
                }
            }
        }
        target => (connect(&target).await?, None),
    };
    let bridge = Bridge::new(client, pipes.out.clone(), remote).await?;
    bridge.serve(&mut pipes, started).await;
    pipes.finish().await;
    Ok(())
}

/// Answers `initialize` until the first other message comes; that message
/// and the `initialize` params. `None`: the client went first.
async fn before_a_session(pipes: &mut Pipes) -> Option<(Option<Value>, Incoming)> {
    let mut init = None;
    loop {
        match pipes.incoming.recv().await? {
            Ok(Message::Request { id, method, params }) if method == "initialize" => {
                let answer = wire::value(&params).map(|params| {
                    let result = initialize_result(&params);
                    init = Some(params);
                    result
                });
                let _ = pipes.out.send(jsonrpc::response(&id, &answer)).await;
            }
            other => return Some((init, other)),
        }
    }
}

/// The folder a session request names (`session/new`, `session/load`,
/// `session/list`'s `cwd`), if absolute and there.
fn first_folder(message: &Incoming) -> Option<PathBuf> {
    let Ok(Message::Request { params, .. }) = message else {
        return None;
    };
    let params = wire::value(params).ok()?;
    let cwd = PathBuf::from(params["cwd"].as_str()?);
    (cwd.is_absolute() && cwd.is_dir())
        .then(|| crate::runtime::canonical_workspace(&cwd).ok())
        .flatten()
}

async fn connect(target: &Target) -> Result<Client> {
    connect_as(target, moonkale_client::Role::AgentPanel, NAME).await
}

/// Connects a front end (this one, or a page of `web`) to `target` as
/// `name` in `role`: the local service is started when none runs.
pub(crate) async fn connect_as(
    target: &Target,
    role: moonkale_client::Role,
    name: &str,
) -> Result<Client> {
    match target {
        Target::Local {
            workspace,
            service_bin,
        } => {
            let here;
            let workspace = match workspace {
                Some(w) => w,
                None => {
                    here = std::env::current_dir().map_err(|e| {
                        crate::Error::Invalid(format!("reading the current directory: {e}"))
                    })?;
                    &here
                }
            };
            let (stream, _) = crate::client::connect_or_start(workspace, service_bin).await?;
            let (read, write) = stream.into_split();
            Ok(Client::over(read, write, role, name).await?)
        }
        Target::Remote(remote) => {
            let (read, write) = crate::remote::client::connect(remote).await?;
            Ok(Client::over(read, write, role, name).await?)
        }
    }
}
