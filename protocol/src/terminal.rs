//! `moonkale/terminal/*`: terminals the service runs, their screens, input
//! and links.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::screen::{Row, Snapshot, Update};
use crate::{Empty, NoParams, notification, request};

/// What every method of this namespace starts with; the hub hands such
/// requests to the terminal host whole.
pub const NAMESPACE: &str = "moonkale/terminal/";

/// A terminal's id, unique within the service.
pub type TerminalId = u64;

/// What `list` shows of a terminal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalInfo {
    pub terminal: TerminalId,
    pub title: String,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub rows: u16,
    pub cols: u16,
    pub pid: Option<u32>,
    /// Set once the program has exited.
    pub exit_code: Option<u32>,
    pub exited: bool,
    /// Its program is a shell (the user's, or one `argv` names).
    #[serde(default)]
    pub shell: bool,
    /// A program other than the shell runs in its foreground (a job the
    /// shell started; for a terminal whose program is not a shell, that
    /// program while it runs).
    #[serde(default)]
    pub busy: bool,
    /// When its program last wrote output or was given input, in
    /// milliseconds since the epoch.
    #[serde(default)]
    pub active_at: u64,
}

request!(
    /// Opens a terminal; the opener is subscribed to it.
    Open,
    "moonkale/terminal/open",
    OpenParams => TerminalInfo
);

/// How to open a terminal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenParams {
    /// The program and its arguments; `$SHELL` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// Relative to the workspace (or absolute inside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Variables set on top of the service's (scrubbed) environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_rows")]
    pub rows: u16,
    #[serde(default = "default_cols")]
    pub cols: u16,
    /// Outlives the connection that opened it.
    #[serde(default)]
    pub keep_alive: bool,
}

pub fn default_rows() -> u16 {
    24
}

pub fn default_cols() -> u16 {
    80
}

impl Default for OpenParams {
    fn default() -> Self {
        OpenParams {
            argv: None,
            cwd: None,
            env: BTreeMap::new(),
            rows: default_rows(),
            cols: default_cols(),
            keep_alive: false,
        }
    }
}

request!(
    /// A kept-alive terminal running `claude` wired to this service.
    /// `null` params are the defaults.
    StartClaude,
    "moonkale/terminal/startClaude",
    Option<StartClaudeParams> => StartClaudeResult
);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartClaudeParams {
    #[serde(default)]
    pub args: Vec<String>,
    /// Run Claude Code inside a sandbox: the command that runs `claude`
    /// there (`["docker", "exec", "-it", "box", "claude"]`); the service
    /// splices its in-sandbox relay in front of the `claude` word and links
    /// it to the workspace through a sandbox link (closed with the
    /// terminal). `args` follow the command's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sandbox: Vec<String>,
    /// With `sandbox`: where the sandbox sees `moonkale-service` [default:
    /// the service's own path].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bin: Option<PathBuf>,
    /// With `sandbox`: `HOST=INSIDE` folders, where the sandbox mounts
    /// what (a devcontainer's `/workspaces/<name>`); empty: the same paths
    /// inside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sandbox_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartClaudeResult {
    #[serde(flatten)]
    pub info: TerminalInfo,
    /// How Claude Code runs there (its permission mode), for the user.
    pub message: String,
}

request!(
    /// A sandbox link for a Claude Code the caller runs in a sandbox itself
    /// (`moonkale-service claude --sandbox`): a unix socket in the
    /// workspace and its token. The link lives as long as the caller's
    /// connection (or until `closeSandboxLink`).
    SandboxLink,
    "moonkale/terminal/sandboxLink",
    Option<SandboxLinkParams> => SandboxLinkResult
);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxLinkParams {
    /// `HOST=INSIDE` folders, where the sandbox mounts what; empty: the
    /// same paths inside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxLinkResult {
    /// The socket, at the path the sandbox must see it at.
    pub socket: PathBuf,
    /// The link's own token, for `MOONKALE_LINK_TOKEN` in the sandbox.
    pub token: String,
}

request!(
    /// The workspace's terminals.
    List,
    "moonkale/terminal/list",
    NoParams => ListResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResult {
    pub terminals: Vec<TerminalInfo>,
}

request!(
    /// Input for the program: exactly one of `text`, `keys`, `paste`; at most
    /// 1 MiB.
    Input,
    "moonkale/terminal/input",
    InputParams => Empty
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputParams {
    pub terminal: TerminalId,
    /// Typed characters, as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Key names (`Enter`, `Ctrl+c`, `F5`, …) as xterm sends them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// Pasted text: bracketed when the program asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paste: Option<String>,
}

impl InputParams {
    pub fn text(terminal: TerminalId, text: impl Into<String>) -> Self {
        InputParams {
            terminal,
            text: Some(text.into()),
            keys: None,
            paste: None,
        }
    }

    pub fn keys(terminal: TerminalId, keys: impl IntoIterator<Item = impl Into<String>>) -> Self {
        InputParams {
            terminal,
            text: None,
            keys: Some(keys.into_iter().map(Into::into).collect()),
            paste: None,
        }
    }

    pub fn paste(terminal: TerminalId, text: impl Into<String>) -> Self {
        InputParams {
            terminal,
            text: None,
            keys: None,
            paste: Some(text.into()),
        }
    }
}

request!(
    /// 1–1000 rows and 1–4000 columns, else -32602 and nothing is resized.
    Resize,
    "moonkale/terminal/resize",
    ResizeParams => crate::screen::Size
);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeParams {
    pub terminal: TerminalId,
    pub rows: u16,
    pub cols: u16,
}

/// Params naming one terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalParams {
    pub terminal: TerminalId,
}

request!(
    /// The whole visible screen.
    Screen,
    "moonkale/terminal/screen",
    TerminalParams => ScreenResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenResult {
    pub terminal: TerminalId,
    #[serde(flatten)]
    pub snapshot: Snapshot,
    pub exited: bool,
}

request!(
    /// History above the screen, oldest first, ending `offset` lines above
    /// its top.
    Scrollback,
    "moonkale/terminal/scrollback",
    ScrollbackParams => LinesResult
);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrollbackParams {
    pub terminal: TerminalId,
    #[serde(default)]
    pub offset: usize,
    #[serde(default = "default_count")]
    pub count: usize,
}

fn default_count() -> usize {
    100
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinesResult {
    pub terminal: TerminalId,
    pub lines: Vec<Row>,
}

request!(
    /// `path:line[:col]` on the screen naming existing files inside the
    /// workspace.
    Links,
    "moonkale/terminal/links",
    TerminalParams => LinksResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinksResult {
    pub terminal: TerminalId,
    pub links: Vec<Link>,
}

/// A file link on the screen: `start`/`end` are char columns of row `row`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub row: u16,
    pub start: usize,
    pub end: usize,
    /// Absolute, inside the workspace.
    pub path: PathBuf,
    pub line: u32,
    pub column: Option<u32>,
}

request!(
    /// Shows a file (a link) in the active editor; 1-based line and column.
    OpenLink,
    "moonkale/terminal/openLink",
    OpenLinkParams => Empty
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenLinkParams {
    pub path: PathBuf,
    pub line: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

request!(
    /// Ends a terminal (SIGHUP, then SIGKILL).
    Close,
    "moonkale/terminal/close",
    TerminalParams => Empty
);

request!(
    /// Sends this terminal's updates to the asking connection.
    Subscribe,
    "moonkale/terminal/subscribe",
    TerminalParams => Empty
);

request!(
    /// Stops [`Subscribe`].
    Unsubscribe,
    "moonkale/terminal/unsubscribe",
    TerminalParams => Empty
);

notification!(
    /// What changed on a screen, at most every 16 ms (service → subscribers).
    UpdateNotification,
    "moonkale/terminal/update",
    UpdateParams
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateParams {
    pub terminal: TerminalId,
    #[serde(flatten)]
    pub update: Update,
}

notification!(
    /// The program exited (service → subscribers).
    ExitNotification,
    "moonkale/terminal/exit",
    ExitParams
);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitParams {
    pub terminal: TerminalId,
    pub exit_code: Option<u32>,
}

notification!(
    /// The terminal is gone (service → subscribers).
    ClosedNotification,
    "moonkale/terminal/closed",
    TerminalParams
);
