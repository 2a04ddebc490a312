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

pub mod hooks;
pub mod host;
mod log;
pub mod policy;
mod session;
pub mod transcript;
pub mod user_hook;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub use host::spawn;
pub use moonkale_protocol::agent::{SessionState, SessionSummary};
pub use session::Launcher;

pub use crate::hub::ports::{AgentCommand, Answer};

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
    /// Where sessions' CLIs come from (a script in the session's tests).
    pub launcher: Launcher,
    /// Where sessions report the files Claude changed (the change-set
    /// host; none keeps no change sets), and where they say their CLI's
    /// transcript is theirs, not an IDE client's.
    pub sources: crate::change_sources::ChangeSources,
    /// Whether a warm spare CLI is kept for the next new session, and how
    /// long without an editor.
    pub spare: SpareConfig,
    /// How long a session's CLI is kept with nothing to do: then it is
    /// stopped, and the next prompt resumes the conversation in a new one.
    pub cli_idle: Duration,
    /// The secrets of the CLIs the service started outside its hosted
    /// sessions (a terminal's `claude`), whose hooks ask it questions.
    pub hook_secrets: hooks::HookSecrets,
    /// How many sessions' CLIs may run at once in the workspace: before
    /// another starts, the least recently used idle ones are stopped.
    pub max_live_clis: usize,
    /// The user's default sandbox per workspace: hosted CLIs run in it
    /// (read at each start of a CLI).
    pub sandboxes: Option<crate::user_state::SandboxStore>,
}

impl AgentConfig {
    /// The sandbox a CLI of `workspace` starts in now, if the user set
    /// one; an unreadable store is an error (starting unjailed is not the
    /// user's choice).
    pub fn sandbox(
        &self,
        workspace: &std::path::Path,
    ) -> Result<Option<crate::user_state::DefaultSandbox>, String> {
        match &self.sandboxes {
            Some(store) => store.get(workspace).map_err(|e| e.to_string()),
            None => Ok(None),
        }
    }
}

/// The warm spare: one `claude` started ahead with the settings the next
/// `moonkale/agent/start` is predicted to use, kept while the workspace is
/// in use (an editor attached, or the agent used within `idle`).
#[derive(Clone, Copy, Debug)]
pub struct SpareConfig {
    pub enabled: bool,
    /// How long after the agent's last use a spare is kept with no editor
    /// attached.
    pub idle: Duration,
    /// Whether Claude Code has a login now ([`crate::doctor::login_found`];
    /// tests give their own).
    pub login_found: fn() -> bool,
}

impl SpareConfig {
    /// No spare: every session starts its CLI at its first prompt.
    pub const OFF: SpareConfig = SpareConfig {
        enabled: false,
        idle: Duration::ZERO,
        login_found: || false,
    };

    /// `MOONKALE_WARM_SPARE` (`0` turns it off) and
    /// `MOONKALE_SPARE_IDLE_MS` (default 10 minutes).
    pub fn from_env() -> SpareConfig {
        let enabled = std::env::var("MOONKALE_WARM_SPARE").map_or(true, |v| v != "0");
        let idle = std::env::var("MOONKALE_SPARE_IDLE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(600), Duration::from_millis);
        SpareConfig {
            enabled,
            idle,
            login_found: crate::doctor::login_found,
        }
    }
}

impl AgentConfig {
    /// From the service's environment: `MOONKALE_CLAUDE_BIN`,
    /// `MOONKALE_APPROVAL_TIMEOUT_MS`, `MOONKALE_SESSION_IDLE_MS`,
    /// `MOONKALE_MAX_LIVE_SESSIONS` and the spare's
    /// ([`SpareConfig::from_env`]).
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
        let cli_idle = std::env::var("MOONKALE_SESSION_IDLE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(DEFAULT_CLI_IDLE, Duration::from_millis);
        let max_live_clis = std::env::var("MOONKALE_MAX_LIVE_SESSIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_MAX_LIVE_CLIS);
        AgentConfig {
            claude_bin,
            approval_timeout,
            env: std::env::vars_os().collect(),
            shutdown_grace: Duration::from_secs(5),
            trust: crate::user_state::TrustStore::from_env()
                .inspect_err(|e| tracing::warn!("{e}; every workspace is untrusted"))
                .ok(),
            launcher: Launcher::Claude,
            sources: Default::default(),
            spare: SpareConfig::from_env(),
            cli_idle,
            hook_secrets: Default::default(),
            max_live_clis,
            sandboxes: crate::user_state::SandboxStore::from_env().ok(),
        }
    }
}

/// A session's CLI with nothing to do for this long is stopped (ten
/// minutes: a pause to read, not a session left behind; each CLI holds
/// 160–210 MB).
pub const DEFAULT_CLI_IDLE: Duration = Duration::from_secs(10 * 60);
/// Sessions' CLIs running at once in a workspace, by default.
pub const DEFAULT_MAX_LIVE_CLIS: usize = 4;

/// Claude Code's configuration folder for the CLIs the service starts and
/// the user's own: `CLAUDE_CONFIG_DIR`, else `~/.claude`, from `env`.
pub fn claude_config_dir(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let var = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| PathBuf::from(v))
            .filter(|p| p.is_absolute())
    };
    var("CLAUDE_CONFIG_DIR").or_else(|| var("HOME").map(|home| home.join(".claude")))
}
