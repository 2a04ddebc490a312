//! One agent session: its `claude` process, its transcript, its state and
//! its pending approvals, owned by one task.
//!
//! **Invariant:** only this task writes the session's transcript and talks
//! to its process. Everything reaches it as a [`SessionCommand`] or as the
//! process's output; it answers through reply channels and hub events, so
//! a turn goes on whether or not anyone is attached.
//!
//! The process is started lazily by the first prompt and kept between
//! turns (one long-lived CLI per session). It is started with
//! `--session-id=<id>` the first time and `--resume=<id>` once the CLI has
//! seen the conversation; if the CLI no longer has it ("No conversation
//! found") the prompts still unanswered are sent again to a fresh one.
//!
//! A warm spare ([`Start::spare`]) is a new session whose CLI starts at
//! once, before any prompt: it serves the CLI's start-up (the `initialize`
//! exchange, our MCP server's handshake) but announces nothing and keeps
//! its events in memory until the host adopts it for a
//! `moonkale/agent/start` ([`SessionCommand::Adopt`]). A spare whose CLI
//! ends stays an empty session; the host replaces it.
//!
//! Here: the task, its loop and its commands, and the in-process MCP
//! server (the editor tools). The rest of `Session` by concern: `process`
//! (the CLI's life: start, writes, idle stop, its end and the one retry),
//! `stream` (the CLI's stream-json output and a turn's end), `permissions`
//! (control requests, the policy, answers and decisions), `events` (the
//! event log: record, state, settings, notifications); `approvals` (the
//! pending approvals, pure) and `cli` (the CLI's state, the launcher seam).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use moonkale_claude::control;
use moonkale_claude::launch::PermissionMode;
pub(crate) use moonkale_protocol::agent::title_of;
use moonkale_protocol::agent::{
    self as wire, CapabilitiesData, EventsPage, NoteData, PromptData, SessionData, SessionEvent,
};
use moonkale_protocol::ide::{EditorTool, EditorToolCall};
use moonkale_protocol::to_json;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use uuid::Uuid;

mod approvals;
pub(in crate::agent) mod cli;
mod events;
mod permissions;
mod process;
mod stream;
#[cfg(test)]
mod tests;

use self::approvals::Approvals;
use self::cli::CliState;
pub use self::cli::Launcher;
use super::log::EventLog;
use super::transcript::Transcript;
use super::{AgentConfig, Answer};
use crate::clock::now_ms;
use crate::hub::{AgentProgress, Event, HubHandle, Responder};
use crate::lsp::message::{ResponseError, code};
use crate::mcp::{self, Method};

/// The name of our in-process MCP server (tools `mcp__moonkale__*`).
pub const MCP_SERVER: &str = "moonkale";
/// What it answers `initialize` with: the CLI's own version, as the SDKs'
/// in-process servers do.
const EDITOR_TOOLS_SERVER: mcp::ServerInfo = mcp::ServerInfo {
    name: MCP_SERVER,
    versions: mcp::Versions::Echo("2025-06-18"),
    tools_list_changed: false,
};
/// Most events one `events` request returns.
pub const MAX_EVENTS_PER_PAGE: usize = 1000;
/// Longest a write to the CLI's stdin may take before the process counts
/// as stuck.
const STDIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest an editor tool may take to answer (the hub answers at once; this
/// only guards against a stopping service).
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);
const COMMAND_QUEUE: usize = 256;
/// Most slash commands and models the `capabilities` event keeps.
const MAX_CAPABILITIES: usize = 500;

pub use moonkale_protocol::agent::{SessionState as State, SessionSummary as Summary};

/// What a session's stored events say of it, through the one reducer
/// ([`wire::SessionView`]): its settings, title and state, why its last
/// turn failed, whether the CLI has its conversation, the tools the user
/// allowed "always" and the notes for its next prompt. A turn that was
/// running when the service stopped did not finish: such a session is
/// idle. Only the service writes transcripts, in the user's state
/// directory, so what they say of settings is the user's choice.
pub(super) struct Restored {
    id: String,
    /// When it was read: the times of a session with no event.
    now: u64,
    pub view: wire::SessionView,
}

impl Restored {
    pub fn new(id: &str) -> Restored {
        Restored {
            id: id.to_owned(),
            now: now_ms(),
            view: wire::SessionView::new(PermissionMode::Plan, None),
        }
    }

    /// One stored event as it is on disk. One this version cannot read
    /// (damaged, or of a kind a newer version changed) still counts and
    /// dates the session, and says nothing else.
    pub fn feed(&mut self, event: &Value) {
        let event = wire::Event::deserialize(event).unwrap_or_else(|e| {
            tracing::warn!(session = %self.id, "an unreadable stored event is skipped: {e}");
            wire::Event {
                seq: event["seq"].as_u64().unwrap_or_default(),
                at: event["at"].as_u64().unwrap_or(self.now),
                event: SessionEvent::Unknown {
                    kind: event["kind"].as_str().unwrap_or_default().to_owned(),
                },
            }
        });
        self.view.fold(&event);
    }

    /// What `list` shows of it.
    pub fn summary(&self) -> Summary {
        let view = &self.view;
        Summary {
            session: self.id.clone(),
            state: match view.state {
                State::Failed => State::Failed,
                _ => State::Idle,
            },
            title: view.title.clone(),
            created: view.created.unwrap_or(self.now),
            updated: view.updated.unwrap_or(self.now),
            permission_mode: view.permission_mode,
            model: view.model.clone(),
            events: Some(view.events),
            cwd: view.cwd.clone(),
            jailed: false,
            cli: None,
            outside: false,
        }
    }
}

pub enum SessionCommand {
    Prompt {
        text: String,
        images: Vec<wire::Image>,
        reply: Responder,
    },
    Events {
        since: usize,
        limit: usize,
        reply: Responder,
    },
    /// What a pending editing tool would do to its file
    /// (`moonkale/agent/preview`).
    Preview {
        approval: String,
        reply: Responder,
    },
    Interrupt {
        reply: Responder,
    },
    SetPermissionMode {
        mode: PermissionMode,
        reply: Responder,
    },
    SetModel {
        model: Option<String>,
        reply: Responder,
    },
    Answer {
        approval: String,
        answer: Answer,
        reply: Option<Responder>,
    },
    /// The user undid or rejected one of Claude's changes and said why:
    /// Claude hears it with the next prompt.
    TellClaude {
        text: String,
    },
    /// A spare becomes a session of its own: listed, its events stored in
    /// `transcript` (new) from now on.
    Adopt {
        transcript: Transcript,
    },
}

/// The session's CLI as the host sees it (the spare's, for `status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CliSeen {
    NotStarted,
    Running {
        pid: i32,
    },
    /// It ended, or could not be started.
    Ended,
}

/// The host's way to reach a session task. Dropping it ends the task, which
/// shuts the process down.
pub struct SessionHandle {
    pub tx: mpsc::Sender<SessionCommand>,
    pub summary: watch::Receiver<Summary>,
    pub cli: watch::Receiver<CliSeen>,
    pub task: tokio::task::JoinHandle<()>,
}

/// How a session starts: new (with its first settings) or loaded from its
/// transcript.
pub struct Start {
    pub id: Uuid,
    pub workspace: PathBuf,
    /// The session's events so far (none for a new session).
    pub log: EventLog,
    /// What those events said, for a loaded session.
    pub restored: Option<Restored>,
    /// Why the stored transcript cannot take new events, if it cannot.
    pub damaged: Option<String>,
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    /// Where the CLI runs, when not in `workspace` (inside it, checked by
    /// the host).
    pub cwd: Option<PathBuf>,
    /// The front end's MCP servers for the CLI (`--mcp-config` entries).
    pub mcp_servers: Map<String, Value>,
    /// A warm spare: its CLI starts now, and nothing is announced or
    /// stored until [`SessionCommand::Adopt`] (its `log` is in memory).
    pub spare: bool,
    /// How many editors are attached: the editor tools are offered to the
    /// CLI only while one is.
    pub editors: watch::Receiver<usize>,
}

pub fn spawn(start: Start, hub: HubHandle, config: Arc<AgentConfig>) -> SessionHandle {
    let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
    let (internal_tx, internal_rx) = mpsc::channel(COMMAND_QUEUE);
    let launcher = config.launcher.clone();
    let mut session = Session::new(start, hub, config, launcher, internal_tx);
    let summary = session.summary_tx.subscribe();
    let cli = session.cli_tx.subscribe();
    if session.log.is_empty() {
        let data = SessionData {
            workspace: session.workspace.clone(),
            permission_mode: session.permission_mode,
            model: session.model.clone(),
            cwd: session.cwd.clone(),
        };
        session.record(SessionEvent::Session(data));
    }
    let task = tokio::spawn(session.run(rx, internal_rx));
    SessionHandle {
        tx,
        summary,
        cli,
        task,
    }
}

/// A prompt sent to the CLI whose turn has not ended.
struct Sent {
    /// What the CLI was sent (the prompt, after any notes for Claude).
    text: String,
    images: Vec<wire::Image>,
    /// The change-set turn key: the session and the prompt's `seq`.
    turn: String,
    /// The prompt, shortened.
    title: String,
}

impl Sent {
    /// The user turn for the CLI.
    fn user_message(&self) -> Vec<u8> {
        let images: Vec<(&str, &str)> = self
            .images
            .iter()
            .map(|i| (i.media_type.as_str(), i.data.as_str()))
            .collect();
        control::user_message_with_images(&self.text, &images)
    }
}

/// Answers from work the session handed to other tasks.
enum Internal {
    McpReply { request_id: String, reply: Value },
}

struct Session {
    id: Uuid,
    id_text: String,
    workspace: PathBuf,
    /// Where the CLI runs when not in `workspace`.
    cwd: Option<PathBuf>,
    mcp_servers: Map<String, Value>,
    /// Editors attached (the host's count).
    editors: watch::Receiver<usize>,
    /// What the CLI streamed of the message it is writing.
    streaming: wire::Streaming,
    /// Our `initialize` request to the CLI: its answer (commands, models)
    /// is stored as the `capabilities` event.
    initialize_request: Option<String>,
    hub: HubHandle,
    config: Arc<AgentConfig>,
    /// Every event of the session, `seq` = index.
    log: EventLog,
    /// Set when events can no longer be stored; shown to clients.
    store_error: Option<String>,
    state: State,
    error: Option<String>,
    permission_mode: PermissionMode,
    model: Option<String>,
    cli: CliState,
    launcher: Launcher,
    /// The user was told the repository's settings are not loaded.
    told_untrusted: bool,
    /// The CLI has this conversation (a `system/init` was seen in this
    /// session's history): start it with `--resume`.
    has_conversation: bool,
    /// Prompts sent whose turn has not ended, oldest first.
    unanswered: VecDeque<Sent>,
    /// Notes for Claude waiting for the next prompt.
    notes: Vec<String>,
    /// An interrupt was asked for; the next `result` ends the turn cleanly.
    interrupting: bool,
    approvals: Approvals,
    /// Our control requests waiting for the CLI: the reply and what it gets
    /// on success.
    waiters: BTreeMap<String, (Responder, Value)>,
    next_request: u64,
    internal_tx: mpsc::Sender<Internal>,
    summary_tx: watch::Sender<Summary>,
    cli_tx: watch::Sender<CliSeen>,
    /// A spare not adopted yet: it announces nothing.
    spare: bool,
    /// The last command or CLI output (the idle CLI is stopped after
    /// `cli_idle` without either).
    last_activity: Instant,
    /// Held while a turn runs: a running turn keeps a service started on
    /// the user's behalf up ([`crate::lifetime`]).
    turn_running: Option<crate::lifetime::Busy>,
    /// The CLI's version, from its `init`.
    cli_version: Option<String>,
    /// The CLI said, in this turn, that it has no login
    /// (`assistant.error: authentication_failed`).
    auth_failed: bool,
    /// The last turn failed for want of a login.
    login: Option<moonkale_protocol::agent::LoginNeeded>,
    /// The last turn failed: its CLI is stopped at once, not kept for a
    /// next prompt (which starts one again, resuming the conversation).
    stop_cli: bool,
    /// Why its CLI was stopped as soon as it said where it runs (a
    /// sandbox that started it outside the workspace); the turn's error.
    started_elsewhere: Option<String>,
    /// Where the sandbox its CLI runs in mounts what (identity unjailed):
    /// the paths the CLI names are mapped to the host's before they are
    /// confined.
    paths: crate::core::path_map::PathMap,
}

/// Runs blocking file work (a transcript's fdatasync) without stalling the
/// other tasks of a multi-threaded runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl Session {
    fn new(
        start: Start,
        hub: HubHandle,
        config: Arc<AgentConfig>,
        launcher: Launcher,
        internal_tx: mpsc::Sender<Internal>,
    ) -> Session {
        let id_text = start.id.to_string();
        config.sources.sessions.insert_hosted(id_text.clone());
        let approvals = Approvals::new(id_text.clone(), start.workspace.clone());
        let mut summary = Restored::new(&id_text).summary();
        summary.permission_mode = start.permission_mode;
        summary.model = start.model.clone();
        summary.cwd = start.cwd.clone();
        let mut session = Session {
            id: start.id,
            id_text,
            workspace: start.workspace,
            cwd: start.cwd,
            mcp_servers: start.mcp_servers,
            editors: start.editors,
            initialize_request: None,
            streaming: wire::Streaming::default(),
            hub,
            config,
            log: start.log,
            store_error: start.damaged,
            state: State::Idle,
            error: None,
            permission_mode: start.permission_mode,
            model: start.model,
            cli: CliState::Stopped,
            launcher,
            told_untrusted: false,
            has_conversation: false,
            unanswered: VecDeque::new(),
            notes: Vec::new(),
            interrupting: false,
            approvals,
            waiters: BTreeMap::new(),
            next_request: 0,
            internal_tx,
            summary_tx: watch::channel(summary).0,
            cli_tx: watch::channel(CliSeen::NotStarted).0,
            spare: start.spare,
            last_activity: Instant::now(),
            turn_running: None,
            cli_version: None,
            auth_failed: false,
            login: None,
            stop_cli: false,
            started_elsewhere: None,
            paths: Default::default(),
        };
        if let Some(restored) = start.restored {
            session.restore(restored);
        }
        session
    }

    /// State and settings as the stored events leave them.
    fn restore(&mut self, restored: Restored) {
        let summary = restored.summary();
        let view = restored.view;
        self.permission_mode = summary.permission_mode;
        self.model = summary.model.clone();
        self.state = summary.state;
        self.error = view.error;
        self.has_conversation = view.has_conversation;
        if summary.cwd.is_some() {
            self.cwd = summary.cwd.clone();
        }
        self.approvals
            .restore_always(view.always.into_iter().collect());
        self.notes = view.notes;
        self.summary_tx.send_replace(summary);
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<SessionCommand>,
        mut internal: mpsc::Receiver<Internal>,
    ) {
        if self.spare
            && let Err(why) = self.ensure_cli().await
        {
            tracing::info!(session = %self.id, "no warm spare claude: {why}");
            self.cli_tx.send_replace(CliSeen::Ended);
        }
        loop {
            let deadline = self.approvals.next_deadline();
            let idle = self.idle_deadline();
            tokio::select! {
                command = rx.recv() => match command {
                    Some(command) => {
                        self.last_activity = Instant::now();
                        self.command(command).await;
                    }
                    None => break,
                },
                message = self.cli.next() => {
                    self.last_activity = Instant::now();
                    self.cli_output(message).await;
                }
                () = sleep_until(idle) => self.stop_idle_cli().await,
                Ok(()) = self.editors.changed() => self.offer_editor_tools().await,
                Some(done) = internal.recv() => match done {
                    Internal::McpReply { request_id, reply } => {
                        self.write(control::mcp_response(&request_id, Some(reply))).await;
                    }
                },
                () = sleep_until(deadline) => self.expire_approvals().await,
            }
        }
        self.withdraw_all("the session was closed");
        if let Some(cli) = self.cli.take() {
            cli.link.shutdown().await;
        }
    }

    // ----- commands -------------------------------------------------------

    async fn command(&mut self, command: SessionCommand) {
        match command {
            SessionCommand::Prompt {
                text,
                images,
                reply,
            } => self.prompt(text, images, reply).await,
            SessionCommand::Events {
                since,
                limit,
                reply,
            } => {
                reply.send(self.events_page(since, limit));
            }
            SessionCommand::Preview { approval, reply } => {
                match self.approvals.tool_input(&approval) {
                    Some((tool, input)) => {
                        let workspace = self.workspace.clone();
                        let paths = self.paths.clone();
                        tokio::task::spawn_blocking(move || {
                            reply.send(preview(&workspace, &paths, &approval, &tool, &input));
                        });
                    }
                    None => reply.send(Err(crate::hub::ports::not_waiting(&approval))),
                }
            }
            SessionCommand::Interrupt { reply } => {
                if !self.cli.is_running() || self.unanswered.is_empty() {
                    reply.send(Ok(to_json(&moonkale_protocol::Empty {})));
                    return;
                }
                self.interrupting = true;
                let id = self.request_id();
                self.waiters
                    .insert(id.clone(), (reply, to_json(&moonkale_protocol::Empty {})));
                self.write(control::interrupt(&id)).await;
            }
            SessionCommand::SetPermissionMode { mode, reply } => {
                self.permission_mode = mode;
                self.record_settings(None);
                self.publish_summary();
                let result = to_json(&wire::ModeResult { mode });
                if self.cli.is_running() {
                    let id = self.request_id();
                    self.waiters.insert(id.clone(), (reply, result));
                    self.write(control::set_permission_mode(&id, mode)).await;
                } else {
                    reply.send(Ok(result)); // used at the next start
                }
            }
            SessionCommand::SetModel { model, reply } => {
                self.model = model.clone();
                self.record_settings(None);
                self.publish_summary();
                let result = to_json(&wire::ModelResult { model });
                if self.cli.is_running() {
                    let id = self.request_id();
                    self.waiters.insert(id.clone(), (reply, result));
                    let model = self.model.clone();
                    self.write(control::set_model(&id, model.as_deref())).await;
                } else {
                    reply.send(Ok(result));
                }
            }
            SessionCommand::TellClaude { text } => {
                self.record(SessionEvent::Note(NoteData { text: text.clone() }));
                self.notes.push(text);
            }
            SessionCommand::Adopt { transcript } => self.adopt(transcript),
            SessionCommand::Answer {
                approval,
                answer,
                reply,
            } => {
                let result = self.answer(&approval, answer).await;
                if let Some(reply) = reply {
                    reply.send(result.map(|()| to_json(&moonkale_protocol::Empty {})));
                }
            }
        }
    }

    /// The spare becomes this session: what it held is stored, and it is
    /// dated now.
    fn adopt(&mut self, transcript: Transcript) {
        self.spare = false;
        let now = now_ms();
        if let Err(e) = blocking(|| self.log.keep_in(transcript, now)) {
            tracing::error!(session = %self.id, "storing the adopted spare's events failed: {e}");
            self.store_error = Some(e.to_string());
        }
        self.summary_tx.send_modify(|s| {
            s.created = now;
            s.updated = now;
        });
    }

    async fn prompt(&mut self, text: String, images: Vec<wire::Image>, reply: Responder) {
        if self.store_error.is_some() {
            let why = self.store_error.clone().unwrap_or_default();
            reply.send(Err(ResponseError::new(
                code::REQUEST_FAILED,
                format!("this session's transcript cannot take new events: {why}"),
            )));
            return;
        }
        if let Err(why) = self.ensure_cli().await {
            self.error = Some(why.clone());
            self.set_state(State::Failed);
            reply.send(Err(ResponseError::new(code::REQUEST_FAILED, why)));
            return;
        }
        let stored = PromptData {
            text: text.clone(),
            images: images.clone(),
        };
        let Some(seq) = self.record(SessionEvent::Prompt(stored)) else {
            let why = self.store_error.clone().unwrap_or_default();
            reply.send(Err(ResponseError::new(code::REQUEST_FAILED, why)));
            return;
        };
        let title = title_of(&text);
        if self.summary_tx.borrow().title.is_empty() {
            self.summary_tx.send_modify(|s| s.title = title.clone());
        }
        let first_turn = self.unanswered.is_empty();
        let text = with_notes(std::mem::take(&mut self.notes), text);
        let sent = Sent {
            text,
            images,
            turn: format!("{}:{seq}", self.id_text),
            title,
        };
        self.write(sent.user_message()).await;
        self.unanswered.push_back(sent);
        self.auth_failed = false;
        self.stop_cli = false;
        if first_turn {
            self.error = None;
            self.login = None;
            let begin = self.unanswered[0].title.clone();
            self.progress(AgentProgress::Begin(begin));
        }
        if self.state != State::WaitingForApproval {
            self.set_state(State::Running);
        }
        let sent = wire::SendResult {
            session: self.id_text.clone(),
            seq,
            state: self.state,
        };
        reply.send(Ok(to_json(&sent)));
    }

    fn events_page(&self, since: usize, limit: usize) -> Result<Value, ResponseError> {
        let limit = limit.clamp(1, MAX_EVENTS_PER_PAGE);
        let from = since.min(self.log.len());
        let events = blocking(|| self.log.page(from, from.saturating_add(limit)))
            .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string()))?;
        let page = EventsPage {
            session: self.id_text.clone(),
            next: (from + events.len()) as u64,
            events: Vec::new(), // below: stored as JSON, sent as they are
            total: self.log.len() as u64,
            state: self.state,
            error: self.error.clone().or_else(|| self.store_error.clone()),
            pending_approvals: self.approvals.objects(),
            streaming: (self.streaming != wire::Streaming::default())
                .then(|| self.streaming.clone()),
        };
        let mut page = to_json(&page);
        page["events"] = Value::Array(events);
        Ok(page)
    }

    // ----- the CLI's MCP servers and capabilities ------------------------

    /// The CLI's MCP servers: the front end's, and ours (in-process, over
    /// the control protocol) when `editor_tools`.
    fn mcp_servers(&self, editor_tools: bool) -> Map<String, Value> {
        let mut servers = self.mcp_servers.clone();
        if editor_tools {
            servers.insert(
                MCP_SERVER.into(),
                json!({"type": "sdk", "name": MCP_SERVER}),
            );
        }
        servers
    }

    fn mcp_config(&self, editor_tools: bool) -> String {
        json!({"mcpServers": self.mcp_servers(editor_tools)}).to_string()
    }

    /// An editor attached while the CLI runs without the editor tools: they
    /// are added now (`mcp_set_servers` replaces the whole set, so the front
    /// end's go with them). Without an editor they would only cost each CLI
    /// CPU for tools that have nothing to show, and ten CLIs at once on two
    /// cores pay that together. They stay once offered.
    async fn offer_editor_tools(&mut self) {
        let attached = *self.editors.borrow_and_update() > 0;
        let Some(running) = self.cli.running() else {
            return;
        };
        if !attached || running.editor_tools {
            return;
        }
        running.editor_tools = true;
        let id = self.request_id();
        let servers = self.mcp_servers(true);
        self.write(control::set_mcp_servers(&id, &servers)).await;
    }

    /// The CLI's answer to `initialize`, kept for front ends: its slash
    /// commands and the models it offers, as it gave them.
    fn capabilities(&mut self, response: &Value) {
        let pick = |key: &str| match &response[key] {
            Value::Array(items) => items.iter().take(MAX_CAPABILITIES).cloned().collect(),
            _ => Vec::new(),
        };
        let data = CapabilitiesData {
            commands: pick("commands"),
            models: pick("models"),
        };
        self.record(SessionEvent::Capabilities(data));
    }

    // ----- the editor tools (in-process MCP server) ------------------------

    async fn mcp_message(&mut self, request_id: String, server: &str, message: Value) {
        let id = message.get("id").cloned();
        let is_notification = id.is_none();
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let reply = move |result: Result<Value, (i64, String)>| match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        };
        if is_notification {
            // A notification (`notifications/initialized`, …).
            self.write(control::mcp_response(&request_id, None)).await;
            return;
        }
        let answer = if server != MCP_SERVER {
            Err((-32601, format!("no MCP server named {server}")))
        } else {
            match Method::parse(&method) {
                Method::Initialize => Ok(EDITOR_TOOLS_SERVER.initialize_result(&message["params"])),
                Method::Ping => Ok(json!({})),
                Method::ToolsList => Ok(editor_tools()),
                Method::ToolsCall => {
                    return self
                        .tool_call(request_id, message["params"].clone(), reply)
                        .await;
                }
                Method::Unknown(method) => Err((-32601, format!("method not found: {method}"))),
            }
        };
        self.write(control::mcp_response(&request_id, Some(reply(answer))))
            .await;
    }

    /// Asks the hub in a task of its own, so the session goes on reading
    /// the CLI meanwhile; the answer comes back as [`Internal::McpReply`].
    async fn tool_call(
        &mut self,
        request_id: String,
        params: Value,
        reply: impl FnOnce(Result<Value, (i64, String)>) -> Value + Send + 'static,
    ) {
        let name = params["name"].as_str().unwrap_or_default();
        let mut arguments = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        // A jailed CLI names a file by URI as its sandbox mounts it.
        if let Some(Value::String(uri)) = arguments.get_mut("uri") {
            match self
                .paths
                .map_uri(uri, crate::core::path_map::PathMap::to_host)
            {
                Ok(host) => *uri = host,
                Err(unmapped) => {
                    let done = Internal::McpReply {
                        request_id,
                        reply: reply(Ok(crate::hub::error_result(unmapped.to_string()))),
                    };
                    let _ = self.internal_tx.send(done).await;
                    return;
                }
            }
        }
        // A `filePath` is confined first, whatever the tool, then the call
        // is typed (a tool we do not have is not found).
        let call = match arguments.get("filePath").and_then(Value::as_str) {
            Some(raw) => self
                .paths
                .to_host(raw)
                .map_err(|unmapped| unmapped.to_string())
                .and_then(|host| {
                    crate::workspace_fs::confine(std::slice::from_ref(&self.workspace), &host)
                        .map_err(|refused| refused.0)
                })
                .map(Some)
                .map_err(|why| Ok(crate::hub::error_result(why))),
            None => Ok(None),
        }
        .and_then(|path| {
            editor_tool_call(name, &arguments, path)
                .ok_or_else(|| Err((code::METHOD_NOT_FOUND, format!("Tool not found: {name}"))))
        });
        let call = match call {
            Ok(call) => call,
            Err(answer) => {
                let done = Internal::McpReply {
                    request_id,
                    reply: reply(answer),
                };
                let _ = self.internal_tx.send(done).await;
                return;
            }
        };
        let hub = self.hub.clone();
        let internal = self.internal_tx.clone();
        let paths = self.paths.clone();
        tokio::spawn(async move {
            let (responder, rx) = Responder::new();
            let asked = hub
                .send(Event::AgentToolCall {
                    call,
                    reply: responder,
                })
                .await;
            let answer = match tokio::time::timeout(TOOL_TIMEOUT, rx).await {
                Ok(Ok(Ok(mut result))) if asked => {
                    crate::ide::mapped::result_to_inside(&paths, &mut result);
                    Ok(result)
                }
                Ok(Ok(Err(e))) => Err((e.code, e.message)),
                _ => Err((-32603, "the editor state is not available".to_owned())),
            };
            let _ = internal
                .send(Internal::McpReply {
                    request_id,
                    reply: reply(answer),
                })
                .await;
        });
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The prompt the CLI is sent: the notes for Claude first, each a clearly
/// marked paragraph, then the user's prompt.
fn with_notes(notes: Vec<String>, prompt: String) -> String {
    if notes.is_empty() {
        return prompt;
    }
    let mut text = String::new();
    for note in notes {
        text.push_str("[Note from the user's editor, about your earlier changes: ");
        text.push_str(note.trim());
        text.push_str("]\n\n");
    }
    text.push_str(&prompt);
    text
}

/// The tools of our MCP server, for `tools/list`.
fn editor_tools() -> Value {
    mcp::tools_list(EditorTool::LISTED.map(EditorTool::spec))
}

/// A `tools/call` of our MCP server typed, with its `filePath` as
/// confined (empty if it named none); `None` for a tool it does not have.
fn editor_tool_call(
    name: &str,
    args: &Value,
    path: Option<crate::workspace_fs::ConfinedPath>,
) -> Option<EditorToolCall> {
    let file_path = path.map(PathBuf::from).unwrap_or_default();
    let line = |key: &str| args.get(key).and_then(Value::as_u64);
    Some(match EditorTool::parse(name)? {
        EditorTool::GetOpenEditors => EditorToolCall::GetOpenEditors,
        EditorTool::GetCurrentSelection => EditorToolCall::GetCurrentSelection,
        EditorTool::GetLatestSelection => EditorToolCall::GetLatestSelection,
        EditorTool::GetDiagnostics => EditorToolCall::GetDiagnostics {
            uri: args.get("uri").and_then(Value::as_str).map(str::to_owned),
        },
        EditorTool::GetWorkspaceFolders => EditorToolCall::GetWorkspaceFolders,
        EditorTool::ReadBuffer => EditorToolCall::ReadBuffer { file_path },
        EditorTool::OpenFile => EditorToolCall::OpenFile {
            file_path,
            start_line: line("startLine"),
            end_line: line("endLine"),
        },
    })
}

/// The largest file a preview reads; a larger one is previewed as the
/// tool's input alone.
const MAX_PREVIEW_READ: u64 = 4 << 20;

/// `moonkale/agent/preview`: the editing tool applied to its file as it is
/// on disk (confined to the workspace, read without following a symlink
/// or blocking on a FIFO).
fn preview(
    workspace: &std::path::Path,
    paths: &crate::core::path_map::PathMap,
    approval: &str,
    tool: &str,
    input: &Value,
) -> Result<Value, ResponseError> {
    use crate::core::preview::{self, FileEdit};
    use moonkale_protocol::agent::PreviewResult;
    let Some(edit) = FileEdit::parse(tool, input) else {
        return Err(ResponseError::invalid_params(format!(
            "{approval} asks for {tool}, which edits no file"
        )));
    };
    let raw = input["file_path"].as_str().unwrap_or_default();
    let host = paths
        .to_host(raw)
        .map_err(|unmapped| ResponseError::invalid_params(unmapped.to_string()))?;
    let path = crate::workspace_fs::confine(&[workspace.to_path_buf()], &host)
        .map_err(|refused| ResponseError::invalid_params(refused.0))?;
    let answer = |creates, lines, problem| {
        to_json(&PreviewResult {
            approval: approval.to_owned(),
            path: path.display().to_string(),
            creates,
            lines,
            problem,
        })
    };
    let current = match read_for_preview(workspace, &path) {
        Ok(text) => text,
        Err(problem) => return Ok(answer(false, Vec::new(), Some(problem))),
    };
    Ok(match preview::apply(&edit, current.as_deref()) {
        Ok(after) => answer(
            current.is_none(),
            preview::lines(current.as_deref().unwrap_or_default(), &after),
            None,
        ),
        Err(problem) => answer(current.is_none(), Vec::new(), Some(problem)),
    })
}

/// The file's text (`None`: it does not exist), or why it is not shown.
fn read_for_preview(
    workspace: &std::path::Path,
    path: &crate::workspace_fs::ConfinedPath,
) -> Result<Option<String>, String> {
    use std::io::Read;
    let file =
        match crate::workspace_fs::open_beneath(workspace, path, crate::workspace_fs::Open::Read) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read the file: {e}")),
        };
    let mut bytes = Vec::new();
    file.take(MAX_PREVIEW_READ + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the file: {e}"))?;
    if bytes.len() as u64 > MAX_PREVIEW_READ {
        return Err(format!(
            "the file is larger than {} MiB",
            MAX_PREVIEW_READ >> 20
        ));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "the file is not UTF-8 text".to_owned())
}

#[cfg(test)]
mod preview_tests {
    use serde_json::{Value, json};

    fn preview(
        ws: &std::path::Path,
        approval: &str,
        tool: &str,
        input: &Value,
    ) -> Result<Value, crate::lsp::message::ResponseError> {
        super::preview(ws, &Default::default(), approval, tool, input)
    }

    /// A preview of the workspace's own file, in context; one a repository
    /// aims elsewhere (a symlink out, `.git`, a FIFO, a huge file) is
    /// refused or described, never read past the workspace or waited on.
    #[test]
    fn previews_read_only_the_workspace_and_never_hang() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let outside = tmp.path().join("secret.txt");
        std::fs::write(&outside, "SECRET\n").unwrap();
        std::fs::write(ws.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link.txt")).unwrap();
        std::fs::create_dir(ws.join(".git")).unwrap();
        let fifo = std::ffi::CString::new(ws.join("pipe").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::write(
            ws.join("big.txt"),
            vec![b'x'; (super::MAX_PREVIEW_READ + 1) as usize],
        )
        .unwrap();
        let at = |name: &str| ws.join(name).display().to_string();
        let edit =
            |name: &str| json!({"file_path": at(name), "old_string": "two", "new_string": "TWO"});

        let ok = preview(&ws, "s/1", "Edit", &edit("a.txt")).unwrap();
        assert_eq!(ok["creates"], false);
        let signs: Vec<(&str, &str)> = ok["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["sign"].as_str().unwrap(), l["text"].as_str().unwrap()))
            .collect();
        assert_eq!(
            signs,
            [
                ("context", "one"),
                ("removed", "two"),
                ("added", "TWO"),
                ("context", "three")
            ]
        );
        let new = preview(
            &ws,
            "s/1",
            "Write",
            &json!({"file_path": at("new.txt"), "content": "hi\n"}),
        )
        .unwrap();
        assert_eq!(new["creates"], true);

        let refused = |name: &str| {
            preview(&ws, "s/1", "Edit", &edit(name))
                .unwrap_err()
                .message
        };
        assert!(
            refused("link.txt").contains("symlink"),
            "{}",
            refused("link.txt")
        );
        assert!(
            refused(".git/config").contains(".git"),
            "{}",
            refused(".git/config")
        );
        let out = preview(
            &ws,
            "s/1",
            "Edit",
            &json!({"file_path": outside, "old_string": "S", "new_string": "T"}),
        );
        assert!(out.is_err());
        let problem = |name: &str| -> Value {
            preview(&ws, "s/1", "Edit", &edit(name)).unwrap()["problem"].clone()
        };
        assert!(
            problem("pipe").as_str().unwrap().starts_with("cannot read"),
            "{}",
            problem("pipe")
        );
        assert_eq!(problem("big.txt"), "the file is larger than 4 MiB");
        assert_eq!(problem("missing.txt"), "the file does not exist");
        assert!(preview(&ws, "s/1", "Bash", &json!({"command": "ls"})).is_err());
    }
}
