//! The agent host: Claude Code sessions the service runs headless for its
//! workspace, so a turn goes on (and is kept) whether or not an editor
//! watches.
//!
//! - [`host`]: the one task per workspace that owns the sessions: it starts
//!   them, loads them from disk, routes front-door requests to them and
//!   lists them.
//! - [`session`] (private): one task per session, owning its `claude`
//!   process, its transcript and its pending approvals.
//! - [`policy`]: which permission questions are answered without the user.
//! - [`transcript`]: the crash-safe JSONL store of a session's events, in
//!   the user's state directory (never the workspace: `crate::user_state`).
//! - [`log`] (private): a session's events, on disk with an index in memory.
//!
//! **Invariant:** the hub never waits for the agent. It forwards
//! `moonkale/agent/*` requests and the user's answers with [`AgentCommand`]
//! (`try_send`), and the agent talks back only with hub events (what to show
//! editors, questions about editor state with a reply channel). The agent's
//! tasks are the only ones that start `claude` processes or write chats.

pub mod host;
mod log;
pub mod policy;
mod session;
pub mod transcript;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::hub::{EditorId, Reply};
use crate::lsp::message::Params;

pub use host::spawn;
pub use moonkale_protocol::agent::{SessionState, SessionSummary};

/// How many commands may wait for the agent host.
const COMMAND_QUEUE: usize = 1024;

pub type AgentSender = mpsc::Sender<AgentCommand>;
pub type AgentReceiver = mpsc::Receiver<AgentCommand>;

pub fn channel() -> (AgentSender, AgentReceiver) {
    mpsc::channel(COMMAND_QUEUE)
}

/// What the hub hands the agent host.
pub enum AgentCommand {
    /// A `moonkale/agent/*` request (all but `subscribe`/`unsubscribe`,
    /// which the hub keeps).
    Request {
        editor: EditorId,
        method: String,
        params: Params,
        reply: Reply,
    },
    /// The user decided an approval in an editor (a button, a command or a
    /// code action).
    Answer { approval: String, answer: Answer },
    /// The service is stopping: close every session.
    Shutdown,
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
    pub mode: Option<moonkale_claude::launch::PermissionMode>,
    /// `AskUserQuestion` answered: question text → the chosen label, the
    /// chosen labels (multi-select) or the user's own text.
    pub answers: Option<serde_json::Map<String, serde_json::Value>>,
}

/// How the agent runs `claude`.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// `serve --claude`/`MOONKALE_CLAUDE_BIN`; else `PATH` is searched.
    pub claude_bin: Option<PathBuf>,
    /// How long an approval waits for the user before it is a deny.
    pub approval_timeout: Duration,
    /// The environment the CLI inherits (scrubbed by `moonkale_claude`).
    pub env: Vec<(OsString, OsString)>,
    /// Each shutdown step's wait (close stdin, then SIGTERM, then SIGKILL).
    pub shutdown_grace: Duration,
    /// The user's workspace-trust decisions; `None` trusts nothing.
    pub trust: Option<crate::user_state::TrustStore>,
}

impl AgentConfig {
    /// From the service's environment: `MOONKALE_CLAUDE_BIN`,
    /// `MOONKALE_APPROVAL_TIMEOUT_MS`.
    pub fn from_env(claude_bin: Option<PathBuf>) -> AgentConfig {
        let claude_bin = claude_bin.or_else(|| {
            std::env::var_os("MOONKALE_CLAUDE_BIN")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let approval_timeout = std::env::var("MOONKALE_APPROVAL_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(600), Duration::from_millis);
        AgentConfig {
            claude_bin,
            approval_timeout,
            env: std::env::vars_os().collect(),
            shutdown_grace: Duration::from_secs(5),
            trust: crate::user_state::TrustStore::from_env()
                .inspect_err(|e| tracing::warn!("{e}; every workspace is untrusted"))
                .ok(),
        }
    }
}
