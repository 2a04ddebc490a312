//! moonkale-hub: the single owner of one workspace's state, over the pure
//! text model of the `moonkale-core` crate (re-exported as [`core`]).
//!
//! **Invariant:** documents, selections, attached editors, diagnostics,
//! proposals and the approvals shown to editors are owned by exactly one
//! task, the hub loop below. Everything else (LSP connections, Claude Code's
//! IDE WebSocket, the agent host, the terminal host, remote clients) is an
//! adapter that sends it an [`Event`] and gets answers back on a
//! [`Responder`] or an editor's outbox. Events from one connection are
//! handled in the order they were sent, so `didChange`s are never reordered.
//!
//! **Invariant:** this crate does no IO beyond its channels and depends on
//! no adapter: the hosts depend on its [`ports`], never the reverse
//! (`cargo tree -p moonkale-hub` shows neither the service nor a transport).
//!
//! Handling an event never awaits: requests that must wait for something
//! (`moonkale/waitForVersion`, `openDiff`) park their [`Responder`] in the
//! state and are answered by a later event, so no editor can stall the loop.

pub use moonkale_core as core;
mod diagnostics;
pub mod ports;
pub mod printable;
pub mod status;
mod subscriptions;
#[cfg(test)]
mod tests;
mod workspace;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::core::PositionEncoding;
use moonkale_protocol::ide::SelectionChanged;
use moonkale_protocol::jsonrpc::{Params, RequestId, ResponseError};

pub use ports::{
    AgentCommand, AgentPort, Answer, ChangeRecord, ChangesCommand, ChangesPort, OpenBuffer,
    Responder, TerminalHostCommand, TerminalPort, Topic,
};

pub use status::{
    DiagnosticsCount, DocumentStatus, EditorStatus, Report as StatusReport, SelectionStatus,
    Status, render as render_status,
};
pub use workspace::documents::DOCUMENT_OVERHEAD;
pub use workspace::{
    MAX_DOCUMENTS_PER_EDITOR, MAX_TOTAL_BYTES, error_result, lenient_file_url, text_result,
};

/// How many events may wait for the hub before senders are slowed down.
const EVENT_QUEUE: usize = 4096;

/// The default pace of `selection_changed` towards Claude Code: at most one
/// per 50 ms (20 a second) while the selection keeps moving, which is still
/// an update every tenth of a second at worst; a move after a quiet period
/// goes out at once.
pub const SELECTION_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// A Claude Code (IDE protocol) connection's id, unique within the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdeClientId(pub u64);

/// What a Claude Code connection may learn of the editors' documents.
/// Given by the adapter with every event of the connection, and applied in
/// one place, [`IdeScope::sees`], to everything the hub tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdeScope {
    /// A CLI on the host's IDE port: it runs as the user and can read any
    /// file the user can, so it sees every document an editor holds.
    Host,
    /// A CLI through a sandbox link, jailed: it sees only documents inside
    /// the workspace by the rules its tool arguments pass
    /// ([`core::confine`]: inside the root, not in `.git`). A document
    /// elsewhere (a `~/.aws/credentials` an editor of the workspace opened)
    /// does not exist for it: not in a selection, a listing, a diagnostic
    /// or a mention.
    Workspace,
}

impl IdeScope {
    /// Whether a connection of this scope may learn of the file `path` in
    /// the workspace at `root`.
    pub fn sees(self, root: &Path, path: &Path) -> bool {
        match self {
            IdeScope::Host => true,
            IdeScope::Workspace => path.to_str().is_some_and(|raw| {
                core::confine::confine_lexically(&[root.to_path_buf()], raw).is_ok()
            }),
        }
    }

    /// [`IdeScope::sees`] for a document's URI (only `file:` ones are
    /// inside a workspace).
    pub fn sees_uri(self, root: &Path, uri: &lsp_types::Url) -> bool {
        self == IdeScope::Host || uri.to_file_path().is_ok_and(|p| self.sees(root, &p))
    }
}

/// A connection's id, unique within the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct EditorId(pub u64);

pub use moonkale_protocol::status::Transport;

/// What a connection is for. Observers (the `status` command, tests) may use
/// every request but are not listed as editors and never become active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Editor,
    Observer,
}

/// What an editor told us about itself at `initialize`.
#[derive(Clone, Debug)]
pub struct EditorInfo {
    pub client_name: String,
    pub client_version: Option<String>,
    pub process_id: Option<u32>,
    pub transport: Transport,
    pub encoding: PositionEncoding,
    pub role: Role,
    /// The editor advertised `window.showMessage`, so it can show
    /// `window/showMessageRequest` buttons (Helix cannot).
    pub shows_message_buttons: bool,
    /// The editor advertised `window.workDoneProgress`: it takes
    /// `$/progress` for tokens we create.
    pub shows_progress: bool,
    /// A plugin that tells the user of finished change sets itself
    /// (`initializationOptions.moonkaleReview`).
    pub announces_changes: bool,
    /// A plugin with a proposal view of its own that asks there and reloads
    /// an accepted file from disk (`initializationOptions.moonkaleProposals`):
    /// it gets no Accept/Reject message and no edit of a clean target.
    pub reviews_proposals: bool,
    /// The editor advertised `window.showDocument.support`.
    pub shows_documents: bool,
    /// The editor registers `textDocument/inlayHint` dynamically.
    pub registers_inlay_hints: bool,
}

/// Serialized JSON-RPC bodies on their way to one editor. Bounded: the hub
/// uses `try_send`, so an editor that stops reading loses notifications
/// rather than stalling the workspace.
pub type Outbox = mpsc::Sender<Vec<u8>>;

/// Everything the hub reacts to. Closed on purpose: a new capability adds a
/// variant here, not a callback.
pub enum Event {
    Attach {
        editor: EditorId,
        info: EditorInfo,
        outbox: Outbox,
    },
    Detach {
        editor: EditorId,
    },
    Notification {
        editor: EditorId,
        method: String,
        params: Params,
    },
    /// `textDocument/didOpen`, as the LSP adapter sends it: with whether
    /// the file's path, inside the workspace by its letters, passes
    /// through a symlink on the disk (which may lead anywhere). A jailed
    /// CLI never learns of such a document ([`IdeScope::Workspace`]), as
    /// its tool arguments could not name it. (A didOpen that arrives as a
    /// plain [`Event::Notification`] counts as not through a symlink.)
    DidOpen {
        editor: EditorId,
        params: Params,
        through_symlink: bool,
    },
    Request {
        editor: EditorId,
        method: String,
        params: Params,
        reply: Responder,
    },
    /// An editor answered a request we sent it (`window/showMessageRequest`).
    EditorResponse {
        editor: EditorId,
        id: RequestId,
        result: Result<Value, ResponseError>,
    },
    /// A Claude Code CLI finished its MCP handshake; `outbox` takes whole
    /// JSON-RPC texts (notifications such as `at_mentioned`).
    IdeAttach {
        client: IdeClientId,
        scope: IdeScope,
        outbox: mpsc::Sender<String>,
    },
    IdeDetach {
        client: IdeClientId,
    },
    /// `ide_connected {pid}` from the CLI.
    IdeConnected {
        client: IdeClientId,
        pid: Option<u32>,
    },
    /// A `tools/call` answered from the hub's state, typed by the adapter.
    /// Its paths were already confined to the workspace by the adapter; the
    /// answer holds only what `scope` sees.
    IdeToolCall {
        client: IdeClientId,
        scope: IdeScope,
        call: moonkale_protocol::ide::IdeToolCall,
        reply: Responder,
    },
    /// From a host: tell the connections subscribed to `topic`.
    Publish {
        topic: Topic,
        method: &'static str,
        params: Value,
    },
    /// From a host: subscribe a connection to a topic it started (a
    /// session it sent a prompt, a terminal it opened).
    Subscribe {
        editor: EditorId,
        topic: Topic,
    },
    /// From a host: the topic is gone (a terminal closed); its
    /// subscriptions end.
    TopicEnded {
        topic: Topic,
    },
    /// From the agent: a permission question for every editor. `approval`
    /// is the approval object of docs/protocol.md.
    AgentApproval {
        approval: moonkale_protocol::agent::Approval,
    },
    /// From the agent: the question was decided or withdrawn.
    AgentApprovalClosed {
        session: String,
        approval: String,
    },
    /// From the agent: a turn began, moved on, or ended.
    AgentProgress {
        session: String,
        progress: AgentProgress,
    },
    /// From the agent host: whether the user trusts the workspace (at start
    /// and whenever it changes), and what to tell the editors about it.
    WorkspaceTrust {
        trusted: bool,
        message: Option<String>,
    },
    /// From the agent: its warm spare CLI now (for `status`).
    AgentSpare {
        spare: Option<moonkale_protocol::status::SpareStatus>,
    },
    /// From the agent: one of the editor tools it offers the CLI, its
    /// paths confined by the session.
    AgentToolCall {
        call: moonkale_protocol::ide::EditorToolCall,
        reply: Responder,
    },
    /// From the change-set host: the sets changed. `pending` holds every
    /// pending hunk by file (for diagnostics and code actions); `announce`
    /// names a set whose turn just ended.
    ChangesUpdated {
        sets: Vec<moonkale_protocol::changes::ChangeSetSummary>,
        pending: Vec<PendingFile>,
        announce: Option<u64>,
    },
    /// From the change-set host: an undo wrote `uri` (`None`: removed it);
    /// editors holding it unmodified get the new text.
    FileRewritten {
        uri: lsp_types::Url,
        text: Option<String>,
    },
}

pub use moonkale_core::PendingFile;

/// A turn's progress, shown in editors as `$/progress`.
#[derive(Clone, Debug)]
pub enum AgentProgress {
    Begin(String),
    Report(String),
    End(String),
}

impl std::fmt::Debug for Event {
    // Bodies (whole documents in didOpen/didChange) are left out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Attach { editor, info, .. } => {
                write!(f, "Attach({}, {})", editor.0, info.client_name)
            }
            Event::Detach { editor } => write!(f, "Detach({})", editor.0),
            Event::Notification { editor, method, .. } => {
                write!(f, "Notification({}, {method})", editor.0)
            }
            Event::DidOpen { editor, .. } => write!(f, "DidOpen({})", editor.0),
            Event::Request { editor, method, .. } => write!(f, "Request({}, {method})", editor.0),
            Event::EditorResponse { editor, id, .. } => {
                write!(f, "EditorResponse({}, {id:?})", editor.0)
            }
            Event::IdeAttach { client, .. } => write!(f, "IdeAttach({})", client.0),
            Event::IdeDetach { client } => write!(f, "IdeDetach({})", client.0),
            Event::IdeConnected { client, pid } => write!(f, "IdeConnected({}, {pid:?})", client.0),
            Event::IdeToolCall { client, call, .. } => {
                write!(f, "IdeToolCall({}, {})", client.0, call.tool())
            }
            Event::Publish { topic, method, .. } => write!(f, "Publish({topic:?}, {method})"),
            Event::Subscribe { editor, topic } => write!(f, "Subscribe({}, {topic:?})", editor.0),
            Event::TopicEnded { topic } => write!(f, "TopicEnded({topic:?})"),
            Event::AgentApproval { approval } => {
                write!(f, "AgentApproval({})", approval.approval)
            }
            Event::AgentApprovalClosed { approval, .. } => {
                write!(f, "AgentApprovalClosed({approval})")
            }
            Event::WorkspaceTrust { trusted, .. } => write!(f, "WorkspaceTrust({trusted})"),
            Event::AgentSpare { spare } => {
                write!(f, "AgentSpare({:?})", spare.as_ref().map(|s| s.pid))
            }
            Event::AgentProgress { session, progress } => {
                write!(f, "AgentProgress({session}, {progress:?})")
            }
            Event::AgentToolCall { call, .. } => write!(f, "AgentToolCall({})", call.tool()),
            Event::ChangesUpdated { sets, announce, .. } => {
                write!(f, "ChangesUpdated({} sets, {announce:?})", sets.len())
            }
            Event::FileRewritten { uri, .. } => write!(f, "FileRewritten({uri})"),
        }
    }
}

/// A cheap, cloneable way to reach one workspace's hub.
#[derive(Clone)]
pub struct HubHandle {
    tx: mpsc::Sender<Event>,
    root: Arc<PathBuf>,
    selection: watch::Receiver<Option<SelectionNotification>>,
}

/// The active editor's selection as Claude Code's `selection_changed`
/// notification, serialized once for every connection that sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectionNotification {
    pub params: SelectionChanged,
    /// The whole JSON-RPC notification.
    pub frame: Arc<str>,
    /// Its document lies inside the workspace
    /// ([`IdeScope::Workspace`] sees it).
    pub in_workspace: bool,
}

impl SelectionNotification {
    fn new(params: SelectionChanged, in_workspace: bool) -> SelectionNotification {
        let frame = moonkale_protocol::jsonrpc::notification(
            "selection_changed",
            serde_json::to_value(&params).expect("selection_changed serializes"),
        );
        SelectionNotification {
            in_workspace,
            params,
            frame: String::from_utf8(frame).expect("JSON is UTF-8").into(),
        }
    }

    /// Whether a connection of `scope` is sent it: a selection it may not
    /// see is, for it, no selection (nothing is sent; it keeps what it was
    /// sent last, as when an editor's focus leaves for a panel).
    pub fn visible_to(&self, scope: IdeScope) -> bool {
        scope == IdeScope::Host || self.in_workspace
    }
}

static NEXT_EDITOR_ID: AtomicU64 = AtomicU64::new(1);

impl HubHandle {
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn new_editor_id(&self) -> EditorId {
        EditorId(NEXT_EDITOR_ID.fetch_add(1, Ordering::Relaxed))
    }

    pub fn new_ide_client_id(&self) -> IdeClientId {
        IdeClientId(NEXT_EDITOR_ID.fetch_add(1, Ordering::Relaxed))
    }

    /// The active editor's selection as `selection_changed` params, updated
    /// whenever it changes (`None` while there is none).
    pub fn selection(&self) -> watch::Receiver<Option<SelectionNotification>> {
        self.selection.clone()
    }

    /// A handle with no hub behind it: its events arrive on the returned
    /// receiver. For a host's tests, which play the hub.
    pub fn detached(root: PathBuf) -> (HubHandle, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let (_, selection) = watch::channel(None);
        let handle = HubHandle {
            tx,
            root: Arc::new(root),
            selection,
        };
        (handle, rx)
    }

    /// Sends an event without waiting; `false` if the hub's queue is full
    /// or the hub is gone.
    pub fn try_send(&self, event: Event) -> bool {
        self.tx.try_send(event).is_ok()
    }

    /// Sends an event; `false` if the hub is gone (the service is stopping).
    pub async fn send(&self, event: Event) -> bool {
        self.tx.send(event).await.is_ok()
    }
}

/// The hosts beside the hub, by their ports: `agent` receives the
/// `moonkale/agent/*` requests, `terminals` the `moonkale/terminal/*` ones
/// and `changes` the `moonkale/changes/*` ones; without a host its
/// requests are refused.
#[derive(Default)]
pub struct Hosts {
    pub agent: Option<AgentPort>,
    pub terminals: Option<TerminalPort>,
    pub changes: Option<ChangesPort>,
}

/// What a hub is started with besides its hosts.
#[derive(Clone, Copy, Debug)]
pub struct HubConfig {
    /// Claude Code hears of selection changes at most once per this
    /// interval ([`core::pacing`]; zero: every change).
    pub selection_interval: std::time::Duration,
    /// Bytes the workspace may hold for its editors and Claude Code
    /// (buffers with their bookkeeping, diagnostics, proposals).
    pub max_bytes: usize,
}

impl Default for HubConfig {
    fn default() -> HubConfig {
        HubConfig {
            selection_interval: SELECTION_INTERVAL,
            max_bytes: MAX_TOTAL_BYTES,
        }
    }
}

/// Starts the hub task for the workspace at `root` (an absolute, canonical
/// path) and returns the handle adapters use to reach it.
pub fn spawn(root: PathBuf, hosts: Hosts, config: HubConfig) -> HubHandle {
    let (tx, mut rx) = mpsc::channel::<Event>(EVENT_QUEUE);
    let (selection_tx, selection) = watch::channel(None);
    let handle = HubHandle {
        tx,
        root: Arc::new(root.clone()),
        selection,
    };
    tokio::spawn(async move {
        let limits = workspace::Limits {
            selection_interval: config.selection_interval,
            total_bytes: config.max_bytes,
            ..workspace::Limits::default()
        };
        let mut ws = workspace::Workspace::new(root, limits, selection_tx);
        ws.set_agent(hosts.agent);
        ws.set_terminals(hosts.terminals);
        ws.set_changes(hosts.changes);
        loop {
            let due = ws.due();
            tokio::select! {
                // Events first: the selection that goes out when the timer
                // fires is then the newest.
                biased;
                event = rx.recv() => match event {
                    Some(event) => ws.handle(event, tokio::time::Instant::now()),
                    None => break,
                },
                () = async { tokio::time::sleep_until(due.expect("guarded")).await }, if due.is_some() => {
                    ws.timers_fired(tokio::time::Instant::now());
                }
            }
        }
    });
    handle
}
