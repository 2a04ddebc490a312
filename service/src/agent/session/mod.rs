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

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use moonkale_claude::launch::{Launch, PermissionMode, SessionStart, SettingSource};
use moonkale_claude::stream::{CliMessage, ControlRequest, DecodeError, Delta, TurnResult};
use moonkale_claude::{control, edits};
use moonkale_protocol::agent::title_of;
use moonkale_protocol::agent::{
    self as wire, CapabilitiesData, Decision, DecisionData, EventsPage, LoginNeeded, NoteData,
    NoticeData, PolicyDecision, PromptData, SessionData, SessionEvent, SettingsData, StateData,
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
#[cfg(test)]
mod tests;

use self::approvals::{Approvals, Ended};
pub use self::cli::Launcher;
use self::cli::{CliState, Running};
use super::log::EventLog;
use super::transcript::Transcript;
use super::{AgentConfig, Answer, policy};
use crate::clock::now_ms;
use crate::hub::ports::{ChangeRecord, ChangeSource, ChangesCommand};
use crate::hub::{AgentProgress, Event, HubHandle, Responder, Topic};
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
}

/// Runs blocking file work (a transcript's fdatasync) without stalling the
/// other tasks of a multi-threaded runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Error text of a failed turn.
fn turn_error(r: &TurnResult) -> String {
    if let Some(text) = r.text.as_deref().filter(|t| !t.is_empty()) {
        return text.to_owned();
    }
    let errors: Vec<&str> = r.raw["errors"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if errors.is_empty() {
        format!("the turn ended with {}", r.subtype)
    } else {
        errors.join("; ")
    }
}

/// Whether a failed turn's result says the CLI has no login (the text of
/// an OAuth CLI without one, or an API key refused).
fn is_login_failure(r: &TurnResult) -> bool {
    r.api_error_status == Some(401) || LoginNeeded::said_in(r.text.as_deref().unwrap_or_default())
}

/// The tool a partial message starts using, if it does.
fn tool_use_start(event: &Value) -> Option<&str> {
    let block = event.pointer("/event/content_block")?;
    (block["type"] == "tool_use").then(|| block["name"].as_str())?
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

    // ----- the process ----------------------------------------------------

    /// Whether the user trusts this workspace now (read at every start of
    /// the CLI, so a decision made anywhere takes effect at the next one).
    fn trusted(&self) -> bool {
        self.config
            .trust
            .as_ref()
            .is_some_and(|t| t.is_trusted(&self.workspace))
    }

    async fn ensure_cli(&mut self) -> Result<(), String> {
        // Between turns, a CLI started under another trust decision is
        // replaced, so the next turn runs with the settings the user chose.
        let trusted = self.trusted();
        if let Some(cli) = self.cli.running()
            && self.unanswered.is_empty()
            && cli.trusted != trusted
        {
            let cli = self.cli.take().expect("checked");
            let how = if cli.trusted {
                "with your own settings only"
            } else {
                "with the repository's own Claude Code settings"
            };
            cli.link.shutdown().await;
            self.notice(format!(
                "The workspace's trust changed: Claude Code restarts {how}."
            ));
        }
        if self.cli.is_running() {
            return Ok(());
        }
        let start = if self.has_conversation {
            SessionStart::Resume(self.id)
        } else {
            SessionStart::New(self.id)
        };
        self.launch(start, false).await
    }

    /// Starts the CLI; `retry`: the one retry after a lost (or already
    /// used) conversation.
    async fn launch(&mut self, start: SessionStart, retry: bool) -> Result<(), String> {
        let trusted = self.trusted();
        if !trusted {
            self.note_untrusted_settings();
        }
        let resuming = matches!(start, SessionStart::Resume(_));
        let editor_tools = *self.editors.borrow_and_update() > 0;
        let launch = Launch {
            session: start,
            permission_mode: self.permission_mode,
            model: self.model.clone(),
            mcp_config: Some(self.mcp_config(editor_tools)),
            // Headless, the CLI asks no trust question of its own and would
            // run the repository's hooks and MCP servers: only the user's
            // own settings until the user trusts the workspace.
            setting_sources: (!trusted).then(|| vec![SettingSource::User]),
        };
        let args = launch.argv().map_err(|e| e.to_string())?;
        let link = self
            .launcher
            .start(
                &self.config,
                &self.workspace,
                self.cwd.as_ref().unwrap_or(&self.workspace),
                args,
                trusted,
            )
            .await?;
        tracing::info!(session = %self.id, pid = link.pid(), resume = resuming, trusted, spare = self.spare, "started claude");
        self.cli_tx
            .send_replace(CliSeen::Running { pid: link.pid() });
        self.cli = CliState::Running(Box::new(Running {
            link,
            trusted,
            resuming,
            retry,
            editor_tools,
        }));
        let id = self.request_id();
        self.initialize_request = Some(id.clone());
        let ours: &[&str] = if editor_tools { &[MCP_SERVER] } else { &[] };
        self.write(control::initialize(&id, ours)).await;
        Ok(())
    }

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

    /// When the CLI has had nothing to do long enough to be stopped: no
    /// turn, no question, no request of ours open (a spare waits to be
    /// adopted instead).
    fn idle_deadline(&self) -> Option<Instant> {
        let idle = self.cli.is_running()
            && !self.spare
            && self.unanswered.is_empty()
            && self.waiters.is_empty()
            && self.approvals.is_empty();
        let after = if self.stop_cli {
            Duration::ZERO
        } else {
            self.config.cli_idle
        };
        idle.then(|| self.last_activity + after)
    }

    /// Stops a CLI with nothing to do; the conversation is the CLI's own
    /// (on disk), so the next prompt resumes it in a new process.
    async fn stop_idle_cli(&mut self) {
        let Some(cli) = self.cli.take() else { return };
        if std::mem::take(&mut self.stop_cli) {
            tracing::info!(session = %self.id, "the turn failed: claude stopped");
        } else {
            tracing::info!(session = %self.id, "claude idle for {:?}: stopped", self.config.cli_idle);
        }
        cli.link.shutdown().await;
        self.cli_tx.send_replace(CliSeen::Ended);
    }

    /// Tells the user (once per session) that the repository ships Claude
    /// Code settings that are not loaded because it is not trusted.
    fn note_untrusted_settings(&mut self) {
        let shipped: Vec<&str> = [
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".mcp.json",
        ]
        .into_iter()
        .filter(|rel| std::fs::symlink_metadata(self.workspace.join(rel)).is_ok())
        .collect();
        if shipped.is_empty() || std::mem::replace(&mut self.told_untrusted, true) {
            return;
        }
        let message = format!(
            "This workspace is not trusted, so its {} {} not loaded: {} would. Trust it with \
             `moonkale-service trust` (or the editor command \"Moonkale: trust this workspace\") \
             if you trust whoever wrote it.",
            shipped.join(", "),
            if shipped.len() == 1 { "is" } else { "are" },
            crate::user_state::TRUST_ENABLES,
        );
        self.record(SessionEvent::Notice(NoticeData {
            message,
            untrusted: true,
        }));
    }

    /// Writes one line to the CLI; a failure is left to the end of its
    /// output to report (a dead process closes stdout too).
    async fn write(&mut self, line: Vec<u8>) {
        let Some(cli) = self.cli.running() else {
            return;
        };
        match tokio::time::timeout(STDIN_TIMEOUT, cli.link.send(&line)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(session = %self.id, "writing to claude failed: {e}"),
            Err(_) => {
                tracing::warn!(session = %self.id, "claude does not read its stdin; killing it");
                cli.link.kill(); // its end of output reports the failure
            }
        }
    }

    fn request_id(&mut self) -> String {
        self.next_request += 1;
        format!("moonkale-{}", self.next_request)
    }

    async fn cli_output(&mut self, message: Option<Result<CliMessage, DecodeError>>) {
        match message {
            None => self.cli_ended().await,
            Some(Err(e)) => {
                self.notice(format!("unreadable output from claude: {e}"));
            }
            Some(Ok(message)) => self.cli_message(message).await,
        }
    }

    async fn cli_message(&mut self, message: CliMessage) {
        match message {
            CliMessage::StreamEvent { .. } => {
                if let Some(delta) = message.delta() {
                    let (text, thinking, streamed) = match delta {
                        Delta::Text(text) => (text, false, &mut self.streaming.text),
                        Delta::Thinking(text) => (text, true, &mut self.streaming.thinking),
                    };
                    let offset = streamed.len() as u64;
                    streamed.push_str(&text);
                    let text = wire::TextParams {
                        session: self.id_text.clone(),
                        text,
                        thinking,
                        offset,
                    };
                    self.notify::<wire::TextNotification>(&text);
                } else if let CliMessage::StreamEvent { raw } = &message
                    && raw.get().contains("\"tool_use\"")
                    && let Some(tool) = tool_use_start(&message.to_value())
                {
                    // Parsed again only for the rare start of a tool use.
                    self.progress(AgentProgress::Report(format!("using {tool}")));
                }
            }
            CliMessage::ControlRequest {
                request_id,
                request,
            } => self.control_request(request_id, request).await,
            CliMessage::ControlResponse {
                request_id,
                outcome,
            } => {
                if self.initialize_request.as_deref() == Some(request_id.as_str()) {
                    self.initialize_request = None;
                    if let Ok(response) = &outcome {
                        self.capabilities(response);
                    }
                }
                if let Some((reply, result)) = self.waiters.remove(&request_id) {
                    reply.send(
                        outcome
                            .map(|_| result)
                            .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e)),
                    );
                } else if let Err(why) = outcome {
                    tracing::warn!(session = %self.id, "the CLI refused our request {request_id}: {why}");
                }
            }
            CliMessage::ControlCancel { request_id } => {
                for ended in self.approvals.cancel_request(&request_id) {
                    self.ended(ended).await;
                }
            }
            CliMessage::Result(result) => {
                self.streaming = wire::Streaming::default();
                self.record(SessionEvent::Cli(result.raw.clone()));
                self.turn_ended(&result);
            }
            CliMessage::System { ref subtype, .. } => {
                if subtype == "init" {
                    self.has_conversation = true;
                    self.cli_version = message.to_value()["claude_code_version"]
                        .as_str()
                        .map(str::to_owned);
                    if let Some(cli) = self.cli.running() {
                        cli.resuming = false;
                    }
                }
                let value = message.to_value();
                // `init` and `status` carry the mode the CLI is in: the
                // truth, whoever changed it.
                if let Some(mode) = value["permissionMode"]
                    .as_str()
                    .and_then(PermissionMode::parse)
                    && mode != self.permission_mode
                {
                    self.permission_mode = mode;
                    self.record_settings(Some("claude"));
                }
                self.record(SessionEvent::Cli(value));
            }
            other => {
                let value = other.to_value();
                if value["type"] == "assistant" {
                    self.auth_failed |= value["error"] == "authentication_failed";
                    self.approvals.remember_plan(&value);
                    // It holds what was streamed of it.
                    self.streaming = wire::Streaming::default();
                }
                if let Some(result) = value.get("tool_use_result") {
                    self.tool_result(result);
                }
                self.record(SessionEvent::Cli(value));
            }
        }
    }

    /// A tool's result: an Edit, MultiEdit or Write is a change Claude
    /// made, whatever the mode (asked or not), for the change-set host.
    fn tool_result(&mut self, result: &Value) {
        let Some(edit) = edits::edit_from_tool_result(result) else {
            return;
        };
        let edit = match edit {
            Ok(edit) => edit,
            Err(e) => return tracing::warn!(session = %self.id, "{e}; the edit is not reviewed"),
        };
        let Some(sent) = self.unanswered.front() else {
            return; // no turn of ours (a replay)
        };
        let record = ChangeRecord {
            source: self.change_source(),
            turn: sent.turn.clone(),
            title: Some(sent.title.clone()),
            path: edit.path,
            before: edit.before,
            after: Some(edit.after),
            at: now_ms(),
        };
        self.send_changes(ChangesCommand::Record(record));
    }

    fn change_source(&self) -> ChangeSource {
        ChangeSource::Agent {
            session: self.id_text.clone(),
        }
    }

    /// Hands the change-set host a command without waiting: a full queue
    /// loses that record (logged), never stalls the session.
    fn send_changes(&self, command: ChangesCommand) {
        if let Some(port) = &self.config.sources.changes
            && let Err(e) = port.try_send(command)
        {
            tracing::warn!(session = %self.id, "the change-set host did not take a record: {e}");
        }
    }

    fn turn_ended(&mut self, result: &TurnResult) {
        if self.cli.is_resuming() {
            return; // decided when the process ends (a lost conversation?)
        }
        if let Some(sent) = self.unanswered.pop_front() {
            self.send_changes(ChangesCommand::TurnEnded {
                source: self.change_source(),
                turn: sent.turn,
            });
        }
        let interrupted = std::mem::take(&mut self.interrupting);
        if result.is_error && !interrupted {
            if self.auth_failed || is_login_failure(result) {
                let said = result.text.as_deref().unwrap_or_default();
                let login = LoginNeeded::for_cli(self.cli_version.as_deref(), said);
                self.error = Some(login.sentence());
                self.login = Some(login);
            } else {
                self.error = Some(turn_error(result));
            }
        }
        if self.unanswered.is_empty() {
            let failed = result.is_error && !interrupted;
            self.stop_cli = failed;
            let end = if failed { "failed" } else { "done" };
            self.progress(AgentProgress::End(end.into()));
            self.set_state(if failed { State::Failed } else { State::Idle });
        }
    }

    async fn cli_ended(&mut self) {
        let Some(cli) = self.cli.take() else { return };
        let (resuming, retried) = (cli.resuming, cli.retry);
        let (status, stderr) = cli.link.finish().await;
        tracing::info!(session = %self.id, %status, "claude ended");
        self.cli_tx.send_replace(CliSeen::Ended);
        let retry = if retried {
            None
        } else if resuming && stderr.contains("No conversation found") {
            Some((
                SessionStart::New(self.id),
                "Claude Code no longer has this conversation; continuing in a fresh one",
            ))
        } else if !resuming && stderr.contains("already in use") {
            Some((
                SessionStart::Resume(self.id),
                "Claude Code already had this conversation; resuming it",
            ))
        } else {
            None
        };
        if let Some((start, why)) = retry
            && !self.unanswered.is_empty()
        {
            self.notice(why.to_owned());
            self.has_conversation = matches!(start, SessionStart::Resume(_));
            match self.launch(start, true).await {
                Ok(()) => {
                    let prompts: Vec<Vec<u8>> =
                        self.unanswered.iter().map(Sent::user_message).collect();
                    for prompt in prompts {
                        self.write(prompt).await;
                    }
                    return;
                }
                Err(e) => tracing::warn!(session = %self.id, "restart failed: {e}"),
            }
        }
        for (_, (reply, _)) in std::mem::take(&mut self.waiters) {
            reply.send(Err(ResponseError::new(
                code::REQUEST_FAILED,
                "claude exited before answering",
            )));
        }
        self.withdraw_all("claude exited");
        if self.unanswered.is_empty() && !self.interrupting {
            return; // between turns: the next prompt starts it again
        }
        for sent in std::mem::take(&mut self.unanswered) {
            self.send_changes(ChangesCommand::TurnEnded {
                source: self.change_source(),
                turn: sent.turn,
            });
        }
        self.interrupting = false;
        let tail: String = {
            let t = stderr.trim();
            let skip = t.chars().count().saturating_sub(2000);
            t.chars().skip(skip).collect()
        };
        let mut error = format!("the claude process exited during a turn ({status})");

        if !tail.is_empty() {
            error.push_str(": ");
            error.push_str(&tail);
        }
        self.error = Some(error);
        self.progress(AgentProgress::End("failed".into()));
        self.set_state(State::Failed);
    }

    // ----- control requests from the CLI ----------------------------------

    async fn control_request(&mut self, request_id: String, request: ControlRequest) {
        match request {
            ControlRequest::CanUseTool {
                tool_name, input, ..
            } => self.permission(request_id, tool_name, input).await,
            ControlRequest::McpMessage {
                server_name,
                message,
            } => self.mcp_message(request_id, &server_name, message).await,
            ControlRequest::Other { subtype, .. } => {
                let why = format!("moonkale does not serve {subtype}");
                self.write(control::error(&request_id, &why)).await;
            }
        }
    }

    async fn permission(&mut self, request_id: String, tool: String, input: Value) {
        let plan = self.permission_mode == PermissionMode::Plan;
        match policy::judge(&tool, &input, plan, self.approvals.always()) {
            policy::Verdict::Allow => {
                self.write(control::allow(&request_id, &input, None)).await;
            }
            policy::Verdict::Deny => {
                let message = format!(
                    "{tool} is not allowed in plan mode, which is read-only. Present your plan instead; \
                     the user can switch the session to another permission mode."
                );
                self.write(control::deny(&request_id, &message, false))
                    .await;
                let title = policy::title(&tool, &input, &self.workspace);
                let decision = PolicyDecision {
                    tool,
                    title,
                    allow: false,
                    always: false,
                    by: "policy".into(),
                    message: Some(message),
                };
                self.record(SessionEvent::Decision(DecisionData::Policy(decision)));
            }
            policy::Verdict::Ask { destructive } => {
                let deadline = Instant::now() + self.config.approval_timeout;
                let approval = self
                    .approvals
                    .ask(request_id, tool, input, destructive, deadline);
                self.record(SessionEvent::Approval(approval.clone()));
                let _ = self.hub.send(Event::AgentApproval { approval }).await;
                self.set_state(State::WaitingForApproval);
            }
        }
    }

    /// The user's answer, checked by the approvals; the CLI is told and the
    /// decision kept.
    async fn answer(&mut self, approval: &str, answer: Answer) -> Result<(), ResponseError> {
        let ended = self.approvals.answer(approval, answer)?;
        if let Some(mode) = ended.mode {
            self.permission_mode = mode;
            self.record_settings(Some("plan approval"));
        }
        self.ended(ended).await;
        Ok(())
    }

    async fn expire_approvals(&mut self) {
        let minutes = self.config.approval_timeout.as_secs_f64() / 60.0;
        let message = format!("No answer within {minutes:.1} minutes; denied.");
        for ended in self.approvals.expire(Instant::now(), &message) {
            self.ended(ended).await;
        }
    }

    /// An approval ended: the CLI is told (unless it withdrew the
    /// question), then [`Session::decided`].
    async fn ended(&mut self, ended: Ended) {
        if let Some(line) = ended.to_cli {
            self.write(line).await;
        }
        self.decided(ended.decision);
    }

    /// Records a decision and takes the question away from the editors.
    fn decided(&mut self, decision: Decision) {
        let approval = decision.approval.clone();
        self.record(SessionEvent::Decision(DecisionData::Answered(decision)));
        let event = Event::AgentApprovalClosed {
            session: self.id_text.clone(),
            approval,
        };
        self.send_to_hub(event);
        if self.approvals.is_empty() && self.state == State::WaitingForApproval {
            self.set_state(State::Running);
        }
    }

    fn withdraw_all(&mut self, why: &str) {
        for ended in self.approvals.withdraw_all(why) {
            self.decided(ended.decision);
        }
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
        // A `filePath` is confined first, whatever the tool, then the call
        // is typed (a tool we do not have is not found).
        let call = match arguments.get("filePath").and_then(Value::as_str) {
            Some(raw) => crate::workspace_fs::confine(std::slice::from_ref(&self.workspace), raw)
                .map(|path| arguments["filePath"] = json!(path))
                .map_err(|refused| Ok(crate::hub::error_result(refused.0))),
            None => Ok(()),
        }
        .and_then(|()| {
            editor_tool_call(name, &arguments)
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
        tokio::spawn(async move {
            let (responder, rx) = Responder::new();
            let asked = hub
                .send(Event::AgentToolCall {
                    call,
                    reply: responder,
                })
                .await;
            let answer = match tokio::time::timeout(TOOL_TIMEOUT, rx).await {
                Ok(Ok(Ok(result))) if asked => Ok(result),
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

    // ----- events, state, notifications -----------------------------------

    /// Stores an event and tells subscribers; its `seq`, or `None` if it
    /// could not be stored.
    fn record(&mut self, event: SessionEvent) -> Option<u64> {
        let seq = self.log.len() as u64;
        let prompt = matches!(event, SessionEvent::Prompt(_));
        if prompt && self.store_error.is_some() {
            return None; // never run a prompt we could not keep
        }
        let event = wire::Event {
            seq,
            at: now_ms(),
            event,
        };
        let store = self.store_error.is_none();
        if let Err(e) = blocking(|| self.log.append(to_json(&event), store)) {
            tracing::error!(session = %self.id, "storing an event failed: {e}");
            self.store_error = Some(e.to_string());
            if prompt {
                return None;
            }
            // Kept in memory, so those watching still see it.
            let _ = self.log.append(to_json(&event), false);
        }
        let event = wire::EventParams {
            session: self.id_text.clone(),
            event,
        };
        self.notify::<wire::EventNotification>(&event);
        self.publish_summary();
        Some(seq)
    }

    fn notice(&mut self, message: String) {
        let untrusted = false;
        self.record(SessionEvent::Notice(NoticeData { message, untrusted }));
    }

    fn set_state(&mut self, state: State) {
        if self.state == state {
            return;
        }
        self.state = state;
        self.turn_running =
            (state == State::Running).then(|| crate::lifetime::Activity::process().busy());
        let data = StateData {
            state,
            error: self.error.clone().filter(|_| state == State::Failed),
            login: self.login.clone().filter(|_| state == State::Failed),
        };
        self.record(SessionEvent::State(data));
    }

    fn publish_summary(&self) {
        self.summary_tx.send_modify(|s| {
            s.state = self.state;
            s.events = Some(self.log.len());
            s.updated = self.log.last_at().unwrap_or(s.updated);
            s.permission_mode = self.permission_mode;
            s.model = self.model.clone();
        });
    }

    fn notify<N: moonkale_protocol::Notification>(&self, params: &N::Params) {
        if self.spare {
            return; // nobody knows of it yet
        }
        self.send_to_hub(Event::Publish {
            topic: Topic::Session(self.id_text.clone()),
            method: N::METHOD,
            params: to_json(params),
        });
    }

    /// Records the session's settings as they are now; `by` who changed
    /// them when it was not the front door.
    fn record_settings(&mut self, by: Option<&str>) {
        let data = SettingsData {
            permission_mode: self.permission_mode,
            model: self.model.clone(),
            by: by.map(str::to_owned),
        };
        self.record(SessionEvent::Settings(data));
    }

    fn progress(&self, progress: AgentProgress) {
        self.send_to_hub(Event::AgentProgress {
            session: self.id_text.clone(),
            progress,
        });
    }

    /// Hub events from synchronous code: never waits (a hub that is that
    /// far behind loses a notification, which `events` can recover).
    fn send_to_hub(&self, event: Event) {
        self.hub.try_send(event);
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

/// A `tools/call` of our MCP server typed, its path already confined; `None`
/// for a tool it does not have.
fn editor_tool_call(name: &str, args: &Value) -> Option<EditorToolCall> {
    let path = || PathBuf::from(args["filePath"].as_str().unwrap_or_default());
    let line = |key: &str| args.get(key).and_then(Value::as_u64);
    Some(match EditorTool::parse(name)? {
        EditorTool::GetOpenEditors => EditorToolCall::GetOpenEditors,
        EditorTool::GetCurrentSelection => EditorToolCall::GetCurrentSelection,
        EditorTool::GetLatestSelection => EditorToolCall::GetLatestSelection,
        EditorTool::GetDiagnostics => EditorToolCall::GetDiagnostics {
            uri: args.get("uri").and_then(Value::as_str).map(str::to_owned),
        },
        EditorTool::GetWorkspaceFolders => EditorToolCall::GetWorkspaceFolders,
        EditorTool::ReadBuffer => EditorToolCall::ReadBuffer { file_path: path() },
        EditorTool::OpenFile => EditorToolCall::OpenFile {
            file_path: path(),
            start_line: line("startLine"),
            end_line: line("endLine"),
        },
    })
}
