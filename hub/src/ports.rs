//! The hub's ports: what it hands the hosts beside it (the agent host and
//! the terminal host), how anyone answers a request, and the topics front
//! ends subscribe to.
//!
//! **Invariant:** the hosts depend on these types and the hub knows nothing
//! of theirs; the hub only `try_send`s on a port, so a busy host is an
//! error now, never a stall of the workspace.

use std::path::PathBuf;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::EditorId;
use moonkale_protocol::PermissionMode;
use moonkale_protocol::jsonrpc::{Params, ResponseError, code};

/// How many commands may wait for a host.
const COMMAND_QUEUE: usize = 1024;

/// The answer to one request, sent once. Dropped unanswered (a handler that
/// panicked, a host that stopped, a command that never reached its task),
/// it answers an internal error, so no caller waits forever.
#[derive(Debug)]
pub struct Responder {
    tx: Option<oneshot::Sender<Result<Value, ResponseError>>>,
}

/// Where a [`Responder`]'s answer arrives.
pub type Answered = oneshot::Receiver<Result<Value, ResponseError>>;

impl Responder {
    pub fn new() -> (Responder, Answered) {
        let (tx, rx) = oneshot::channel();
        (Responder { tx: Some(tx) }, rx)
    }

    /// Answers; a caller that stopped waiting is not an error.
    pub fn send(mut self, answer: Result<Value, ResponseError>) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(answer);
        }
    }

    /// The caller stopped waiting (its connection closed).
    pub fn is_closed(&self) -> bool {
        self.tx.as_ref().is_none_or(oneshot::Sender::is_closed)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Err(ResponseError::new(
                code::INTERNAL_ERROR,
                "the service dropped this request unanswered",
            )));
        }
    }
}

/// A front-door request handed to a host, which answers it with `reply`.
#[derive(Debug)]
pub struct Request {
    pub editor: EditorId,
    pub method: String,
    pub params: Params,
    pub reply: Responder,
}

impl Request {
    pub fn new(editor: EditorId, method: &str, params: Params, reply: Responder) -> Request {
        Request {
            editor,
            method: method.to_owned(),
            params,
            reply,
        }
    }
}

/// The one wording of an answer to an approval that is no longer waiting.
pub fn not_waiting(approval: &str) -> ResponseError {
    ResponseError::invalid_params(format!(
        "approval {approval} is not waiting (answered already?)"
    ))
}

/// What the hub hands the agent host.
#[derive(Debug)]
pub enum AgentCommand {
    /// A `moonkale/agent/*` request (all but `subscribe`/`unsubscribe`,
    /// which the hub keeps).
    Request(Request),
    /// The user decided an approval in an editor (a button, a command or a
    /// code action); `reply`, a command's, gets the session's verdict.
    Answer {
        approval: String,
        answer: Answer,
        reply: Option<Responder>,
    },
    /// The user undid or rejected one of the session's changes and said
    /// why: the session tells Claude with its next prompt.
    TellClaude { session: String, text: String },
    /// The number of editors attached changed (observers such as `status`
    /// are not counted): the agent keeps its warm spare CLI while any is.
    Editors { attached: usize },
    /// The service is stopping: close every session.
    Shutdown,
}

/// What the hub hands the terminal host.
#[derive(Debug)]
pub enum TerminalHostCommand {
    /// A `moonkale/terminal/*` request (all but `subscribe`,
    /// `unsubscribe` and `openLink`, which the hub keeps).
    Request(Request),
    /// A connection went away: its terminals (those not kept alive) close.
    Detach { editor: EditorId },
    /// The service is stopping: every terminal closes.
    Shutdown,
}

/// What the change-set host takes: edits Claude made (from the sources:
/// hosted sessions, transcripts, the watcher) and the front door's
/// `moonkale/changes/*` requests (from the hub).
#[derive(Debug)]
pub enum ChangesCommand {
    /// `moonkale/changes/list`, `show` and `keep`.
    Request(Request),
    /// `moonkale/changes/undo` (the request or the `moonkale.undoChange`
    /// command). `buffers` are the editors' buffers of the files the set
    /// names, so that unsaved work is never overwritten.
    Undo {
        params: moonkale_protocol::changes::UndoParams,
        buffers: Vec<OpenBuffer>,
        /// Any refusal is an error (a command from a code action, whose
        /// editor shows errors but not results), not only a hunk's.
        strict: bool,
        reply: Responder,
    },
    /// Claude changed a file.
    Record(ChangeRecord),
    /// A turn ended: its set takes no more edits and is announced.
    TurnEnded { source: ChangeSource, turn: String },
    /// The service is stopping.
    Shutdown,
}

pub use moonkale_protocol::changes::ChangeSource;

/// One editor's buffer of a file, as the hub holds it.
#[derive(Clone, Debug)]
pub struct OpenBuffer {
    pub uri: lsp_types::Url,
    pub text: String,
    /// Changed since it was opened or saved.
    pub dirty: bool,
}

/// One edit Claude made to one file, as a source saw it.
#[derive(Clone, Debug)]
pub struct ChangeRecord {
    pub source: ChangeSource,
    /// Edits of one source with the same turn key form one set.
    pub turn: String,
    /// The turn's prompt, if the source knows it.
    pub title: Option<String>,
    /// Absolute; the host confines it to the workspace (else drops it).
    pub path: PathBuf,
    /// The file before the edit (`None`: it did not exist).
    pub before: Option<String>,
    /// The file after the edit (`None`: it was deleted).
    pub after: Option<String>,
    /// Milliseconds since the epoch.
    pub at: u64,
}

/// A host's command type, so the hub has one forwarding path for both.
pub trait HostCommand: Send + 'static {
    fn request(request: Request) -> Self;
    /// The request back out of a command the host did not take.
    fn into_request(self) -> Option<Request>;
}

impl HostCommand for AgentCommand {
    fn request(request: Request) -> Self {
        AgentCommand::Request(request)
    }
    fn into_request(self) -> Option<Request> {
        match self {
            AgentCommand::Request(r) => Some(r),
            _ => None,
        }
    }
}

impl HostCommand for ChangesCommand {
    fn request(request: Request) -> Self {
        ChangesCommand::Request(request)
    }
    fn into_request(self) -> Option<Request> {
        match self {
            ChangesCommand::Request(r) => Some(r),
            _ => None,
        }
    }
}

impl HostCommand for TerminalHostCommand {
    fn request(request: Request) -> Self {
        TerminalHostCommand::Request(request)
    }
    fn into_request(self) -> Option<Request> {
        match self {
            TerminalHostCommand::Request(r) => Some(r),
            _ => None,
        }
    }
}

/// Hands `request` to a host without waiting. No host (`what` is not
/// available in this service) or a full queue (busy: try again) is
/// answered now.
pub(crate) fn forward<C: HostCommand>(
    port: Option<&mpsc::Sender<C>>,
    request: Request,
    what: &str,
) {
    let Some(port) = port else {
        return request.reply.send(Err(ResponseError::new(
            code::METHOD_NOT_FOUND,
            format!("{what} not available in this service"),
        )));
    };
    if let Err(e) = port.try_send(C::request(request))
        && let Some(request) = e.into_inner().into_request()
    {
        request.reply.send(Err(ResponseError::new(
            code::INTERNAL_ERROR,
            format!("{what} busy or stopping; try again"),
        )));
    }
}

pub type AgentPort = mpsc::Sender<AgentCommand>;
pub type TerminalPort = mpsc::Sender<TerminalHostCommand>;
pub type ChangesPort = mpsc::Sender<ChangesCommand>;

pub fn changes_channel() -> (ChangesPort, mpsc::Receiver<ChangesCommand>) {
    mpsc::channel(COMMAND_QUEUE)
}

pub fn agent_channel() -> (AgentPort, mpsc::Receiver<AgentCommand>) {
    mpsc::channel(COMMAND_QUEUE)
}

pub fn terminal_channel() -> (TerminalPort, mpsc::Receiver<TerminalHostCommand>) {
    mpsc::channel(COMMAND_QUEUE)
}

/// The user's decision on an approval.
#[derive(Clone, Debug, Default)]
pub struct Answer {
    pub allow: bool,
    /// Allow this tool for the rest of the session.
    pub always: bool,
    pub message: Option<String>,
    /// `editor` or `api`: who answered, for the transcript.
    pub by: &'static str,
    /// A plan approved (`ExitPlanMode` allowed): the mode the session goes
    /// on in, `default` (edits asked) unless the user chose `acceptEdits`.
    pub mode: Option<PermissionMode>,
    /// `AskUserQuestion` answered: question text → the chosen label, the
    /// chosen labels (multi-select) or the user's own text.
    pub answers: Option<serde_json::Map<String, Value>>,
}

/// What a front end subscribes to: notifications published on a topic go
/// to every connection subscribed to it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topic {
    /// One agent session, by id.
    Session(String),
    /// Every agent session, present and future.
    AllSessions,
    /// One terminal, by id.
    Terminal(u64),
    /// Who is in the workspace and what waits (`moonkale/status/changed`).
    Status,
}

impl Topic {
    /// Whether a subscription to `self` hears what is published on `to`.
    pub fn hears(&self, to: &Topic) -> bool {
        self == to || (*self == Topic::AllSessions && matches!(to, Topic::Session(_)))
    }
}
