//! `moonkale/agent/*`: Claude Code sessions the service hosts, their stored
//! events, and the approvals they ask of the user.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::{Empty, NoParams, notification, request};

/// What every method of this namespace starts with; the hub hands such
/// requests to the agent host whole.
pub const NAMESPACE: &str = "moonkale/agent/";

mod event;

pub use self::event::{
    CapabilitiesData, DecisionData, Event, ModelChoice, NoteData, NoticeData, PolicyDecision,
    PromptData, SessionEvent, SessionView, SlashCommand, decision_in_words, title_of, tool_summary,
};

/// How much the CLI may do without asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PermissionMode {
    /// Ask for anything that is not a read.
    Default,
    /// Edits without asking; other tools ask.
    AcceptEdits,
    /// Read only: the service's default.
    Plan,
    /// Everything without asking: only on the user's explicit say-so.
    BypassPermissions,
}

impl PermissionMode {
    pub const ALL: [PermissionMode; 4] = [
        PermissionMode::Default,
        PermissionMode::AcceptEdits,
        PermissionMode::Plan,
        PermissionMode::BypassPermissions,
    ];

    /// The name on the wire and in the CLI's `--permission-mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::BypassPermissions => "bypassPermissions",
        }
    }

    pub fn parse(s: &str) -> Option<PermissionMode> {
        PermissionMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl std::fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for PermissionMode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for PermissionMode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// An unknown name is refused with the list of the known ones.
impl<'de> Deserialize<'de> for PermissionMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        PermissionMode::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown permission mode {name:?} (plan, default, acceptEdits or bypassPermissions)"
            ))
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SessionState {
    Idle,
    Running,
    WaitingForApproval,
    /// The last turn ended with an error; the session may be continued.
    Failed,
}

impl SessionState {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Idle => "idle",
            SessionState::Running => "running",
            SessionState::WaitingForApproval => "waitingForApproval",
            SessionState::Failed => "failed",
        }
    }

    /// The state as a person reads it (never the wire's camelCase).
    pub fn in_words(self) -> &'static str {
        match self {
            SessionState::Idle => "idle",
            SessionState::Running => "running",
            SessionState::WaitingForApproval => "waiting for you",
            SessionState::Failed => "failed",
        }
    }
}

/// What `list` shows of a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub session: String,
    pub state: SessionState,
    pub title: String,
    /// Milliseconds since the epoch.
    pub created: u64,
    pub updated: u64,
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    /// `None` when not known (a long transcript listed from its start).
    pub events: Option<usize>,
    /// The folder the CLI runs in, when it is not the workspace itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Its CLI runs in the workspace's default sandbox (`sandbox set`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub jailed: bool,
    /// Its `claude` process, while one runs (none: an idle session's CLI
    /// was stopped, and its next prompt starts one again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli: Option<LiveCli>,
    /// A session of Claude Code's own, started outside the service (in a
    /// terminal, before the service ran): read from the CLI's transcript;
    /// a prompt continues it as a hosted session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside: bool,
}

/// A session's running `claude`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveCli {
    pub pid: u32,
    /// Its resident memory, read from `/proc`.
    pub rss_bytes: Option<u64>,
}

/// The `data` of a `session` event (the first one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionData {
    pub workspace: PathBuf,
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    /// The folder the CLI runs in, when it is not the workspace itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
}

/// The `data` of a `settings` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsData {
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    /// `plan approval` or `claude` (what the CLI reports is the truth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// The `data` of a `state` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateData {
    pub state: SessionState,
    /// Why a turn failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// It failed because Claude Code is not logged in (`error` then says
    /// so in [`LoginNeeded::sentence`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<LoginNeeded>,
}

/// Claude Code has no login on the machine the service runs on, and what
/// logs it in with the CLI the service found: every front end says it in
/// the same sentence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginNeeded {
    /// What to do, e.g. "run `claude auth login` in a terminal".
    pub fix: String,
    /// The CLI's words when it has a login that was refused ("Invalid API
    /// key · …"), rather than none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl LoginNeeded {
    /// For the CLI of `version` (from its `init`): `claude auth login`
    /// since 2.1, `/login` inside `claude` before (and when not known).
    pub fn for_cli(version: Option<&str>, said: &str) -> LoginNeeded {
        let mut parts = version.unwrap_or_default().split('.');
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let fix = if (major, minor) >= (2, 1) {
            "run `claude auth login` in a terminal"
        } else {
            "run `claude` in a terminal and type `/login`"
        };
        let refused =
            (!said.to_lowercase().contains("not logged in")).then(|| said.trim().to_owned());
        LoginNeeded {
            fix: fix.into(),
            refused: refused.filter(|r| !r.is_empty()),
        }
    }

    /// Whether a failed turn's text says the CLI has no login (an OAuth
    /// CLI without one says "Not logged in · Please run /login"; an API
    /// key refused, "Invalid API key").
    pub fn said_in(text: &str) -> bool {
        let text = text.to_lowercase();
        text.contains("not logged in")
            || text.contains("/login")
            || text.contains("invalid api key")
    }

    /// The sentence for a person at the service's machine.
    pub fn sentence(&self) -> String {
        match &self.refused {
            None => format!(
                "Claude Code is not logged in: {}, then try again.",
                self.fix
            ),
            Some(why) => format!(
                "Claude Code's login was refused ({why}): {}, then try again.",
                self.fix
            ),
        }
    }

    /// The sentence for a person reaching the service from elsewhere
    /// (`connect`): the login is needed where the service runs.
    pub fn sentence_remote(&self) -> String {
        match &self.refused {
            None => format!(
                "Claude Code is not logged in on the server's machine: {} there, then try again.",
                self.fix
            ),
            Some(why) => format!(
                "Claude Code's login on the server's machine was refused ({why}): {} there, \
                 then try again.",
                self.fix
            ),
        }
    }
}

/// The `data` of a `decision` event: how an approval ended. `tool` and
/// `always` let a restarted service keep the user's "always allow".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub approval: String,
    /// Missing in decisions of earlier versions: the approval's tool.
    #[serde(default)]
    pub tool: String,
    pub allow: bool,
    pub always: bool,
    /// `editor`, `api`, `timeout` or `withdrawn`.
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A plan approved: the mode chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    /// A question answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<Map<String, Value>>,
}

/// A question to the user: `approval` is `<session>/<n>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub approval: String,
    pub session: String,
    #[serde(flatten)]
    pub kind: ApprovalKind,
    /// The tool the CLI asked about, and its input as the CLI gave it.
    pub tool: String,
    pub input: Value,
    pub title: String,
    /// "Always" does not apply to it and is not offered.
    pub destructive: bool,
}

/// What an approval asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ApprovalKind {
    /// May the tool run?
    Tool,
    /// The model called `ExitPlanMode`: approve `plan` and go on in one of
    /// `choices`, or keep planning.
    Plan {
        plan: String,
        choices: Vec<PlanChoice>,
    },
    /// The model called `AskUserQuestion`.
    Question { questions: Vec<Question> },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanChoice {
    pub mode: PermissionMode,
    pub label: String,
}

/// One question of `AskUserQuestion`, as the CLI gave it (what it gave
/// beyond these fields is kept in `other`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    #[serde(default)]
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<QuestionOption>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_select: Option<bool>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuestionOption {
    #[serde(default)]
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

request!(
    /// Starts a session; the asking connection is subscribed to it.
    Start,
    "moonkale/agent/start",
    StartParams => StartResult
);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `plan` when absent; `bypassPermissions` only when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The folder the CLI runs in: absolute, inside the workspace (the
    /// workspace itself when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// MCP servers of the user's front end for this session, as the CLI's
    /// `--mcp-config` names them (`{"name": {"type": "stdio", "command",
    /// …}}`); kept in memory only, never in the transcript.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub mcp_servers: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartResult {
    pub session: String,
    pub state: SessionState,
    /// The stored `prompt` event's, when a prompt was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

request!(
    /// A prompt for a session (queued by the CLI while a turn runs); the
    /// asking connection is subscribed.
    Send,
    "moonkale/agent/send",
    SendParams => SendResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendParams {
    pub session: String,
    pub prompt: String,
    /// Images for the model, before the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

/// An image of a prompt: base64 data of a PNG, JPEG, GIF or WebP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: String,
    pub data: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendResult {
    pub session: String,
    /// The stored `prompt` event's.
    pub seq: u64,
    pub state: SessionState,
}

request!(
    /// A page of stored events, read from disk.
    Events,
    "moonkale/agent/events",
    EventsParams => EventsPage
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsParams {
    pub session: String,
    /// The first `seq` wanted.
    #[serde(default)]
    pub since: u64,
    /// At most 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsPage {
    pub session: String,
    pub events: Vec<Event>,
    /// Ask again from here.
    pub next: u64,
    pub total: u64,
    pub state: SessionState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub pending_approvals: Vec<Approval>,
    /// What the CLI streamed of the message it is writing now (not stored
    /// yet): a front end that joins mid-turn shows it, then the
    /// `moonkale/agent/text` past its `offset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<Streaming>,
}

/// The text and thinking streamed of the message being written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Streaming {
    pub text: String,
    pub thinking: String,
}

request!(
    /// What a pending `Write`, `Edit` or `MultiEdit` would do to the file
    /// as it is on disk now: its changed lines with a little context. The
    /// service reads the file (confined to the workspace, size-capped);
    /// the input is the one the CLI asked with.
    Preview,
    "moonkale/agent/preview",
    PreviewParams => PreviewResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewParams {
    pub approval: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewResult {
    pub approval: String,
    /// The file the tool writes.
    pub path: String,
    /// The file does not exist yet.
    pub creates: bool,
    /// The changed lines and their context, in file order (at most
    /// [`MAX_PREVIEW_LINES`], then one `Gap` line saying how many more).
    pub lines: Vec<PreviewLine>,
    /// Why the preview is not the tool's effect (the text to replace is
    /// not in the file, the file is too large): the page then shows the
    /// tool's input as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The most lines a preview holds.
pub const MAX_PREVIEW_LINES: usize = 400;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewLine {
    pub sign: LineSign,
    /// The line's text, without its terminator.
    pub text: String,
    /// Its number in the file before (removed, context) or after (added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LineSign {
    Context,
    Added,
    Removed,
    /// Lines left out between two hunks (`text` says how many).
    Gap,
}

request!(
    /// Every session of the workspace, newest first.
    List,
    "moonkale/agent/list",
    NoParams => ListResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResult {
    pub sessions: Vec<SessionSummary>,
}

/// Params naming one session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionParams {
    pub session: String,
}

request!(
    /// Ends the session's `claude` (a turn running is stopped); its
    /// transcript stays, and a prompt continues it in a new CLI.
    Close,
    "moonkale/agent/close",
    SessionParams => Empty
);

request!(
    /// [`Close`], and removes the session from the user's state (its
    /// transcript).
    Delete,
    "moonkale/agent/delete",
    SessionParams => Empty
);

request!(
    /// Interrupts the running turn; answered once the CLI acknowledged.
    Interrupt,
    "moonkale/agent/interrupt",
    SessionParams => Empty
);

request!(
    SetPermissionMode,
    "moonkale/agent/setPermissionMode",
    SetPermissionModeParams => ModeResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetPermissionModeParams {
    pub session: String,
    pub mode: PermissionMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeResult {
    pub mode: PermissionMode,
}

request!(
    /// `model: null` is the CLI's default.
    SetModel,
    "moonkale/agent/setModel",
    SetModelParams => ModelResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetModelParams {
    pub session: String,
    pub model: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelResult {
    pub model: Option<String>,
}

request!(
    /// The user's answer to an approval; -32602 if it is not waiting or
    /// the answer does not fit it.
    Answer,
    "moonkale/agent/answer",
    AnswerParams => Empty
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerParams {
    pub approval: String,
    pub allow: bool,
    /// Allow this tool for the rest of the session (a tool only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always: bool,
    /// Told to the model with a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A plan approved: go on in this mode (`default` or `acceptEdits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    /// A question answered: question text → a label, a list of labels
    /// (multi-select) or the user's own words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<Map<String, Value>>,
}

impl AnswerParams {
    pub fn allow(approval: impl Into<String>) -> Self {
        AnswerParams {
            approval: approval.into(),
            allow: true,
            always: false,
            message: None,
            mode: None,
            answers: None,
        }
    }

    pub fn deny(approval: impl Into<String>) -> Self {
        AnswerParams {
            allow: false,
            ..AnswerParams::allow(approval)
        }
    }

    /// "Always allow" this tool in this session.
    pub fn always(mut self) -> Self {
        self.always = true;
        self
    }

    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    pub fn with_mode(mut self, mode: PermissionMode) -> Self {
        self.mode = Some(mode);
        self
    }

    pub fn with_answers(mut self, answers: Map<String, Value>) -> Self {
        self.answers = Some(answers);
        self
    }
}

request!(
    /// A front end says with which settings it will start sessions (an
    /// editor's agent panel opening): the warm spare is made ready for
    /// them now.
    Prepare,
    "moonkale/agent/prepare",
    PrepareParams => Empty
);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrepareParams {
    /// `plan` when absent, as for `start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

request!(
    /// The user's trust decision for the workspace.
    Trust,
    "moonkale/agent/trust",
    TrustParams => TrustResult
);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustParams {
    pub trusted: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustResult {
    /// Whether the workspace is trusted now (a trusted parent keeps it so).
    pub trusted: bool,
    pub changed: bool,
    /// What it means, for the user.
    pub message: String,
}

/// Params of subscribe/unsubscribe: one session, or (none) every session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

request!(
    /// Sends a session's (or every session's) events, text and approvals
    /// to the asking connection.
    Subscribe,
    "moonkale/agent/subscribe",
    SubscriptionParams => Empty
);

request!(
    Unsubscribe,
    "moonkale/agent/unsubscribe",
    SubscriptionParams => Empty
);

notification!(
    /// Each stored event as it is stored (service → subscribers).
    EventNotification,
    "moonkale/agent/event",
    EventParams
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventParams {
    pub session: String,
    pub event: Event,
}

notification!(
    /// The CLI's partial text as it streams; not stored (service →
    /// subscribers).
    TextNotification,
    "moonkale/agent/text",
    TextParams
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextParams {
    pub session: String,
    pub text: String,
    /// The model's thinking rather than its answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub thinking: bool,
    /// Where `text` starts, in bytes, in what was streamed of the message
    /// being written (its answer or its thinking, apart).
    #[serde(default)]
    pub offset: u64,
}

notification!(
    /// An approval was asked or decided (service → subscribers).
    ApprovalNotification,
    "moonkale/agent/approval",
    ApprovalParams
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalParams {
    pub session: String,
    pub approval: Approval,
    pub status: ApprovalStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalStatus {
    Pending,
    Closed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn approvals_round_trip_with_their_kind() {
        let question = json!({
            "approval": "s/2", "session": "s", "kind": "question", "tool": "AskUserQuestion",
            "input": {"questions": []}, "title": "Claude asks you", "destructive": false,
            "questions": [{"question": "Which?", "header": "Pick", "multiSelect": false,
                           "options": [{"label": "A", "description": "a", "extra": 1}], "new": true}],
        });
        let typed: Approval = serde_json::from_value(question.clone()).unwrap();
        let ApprovalKind::Question { questions } = &typed.kind else {
            panic!("{typed:?}");
        };
        assert_eq!(questions[0].options.as_ref().unwrap()[0].label, "A");
        assert_eq!(serde_json::to_value(&typed).unwrap(), question);
        let tool = json!({"approval": "s/1", "session": "s", "kind": "tool", "tool": "Write",
                          "input": {}, "title": "Write a.txt", "destructive": false});
        let typed: Approval = serde_json::from_value(tool.clone()).unwrap();
        assert_eq!(typed.kind, ApprovalKind::Tool);
        assert_eq!(serde_json::to_value(&typed).unwrap(), tool);
    }

    #[test]
    fn permission_modes_are_their_wire_names() {
        for mode in PermissionMode::ALL {
            let json = serde_json::to_value(mode).unwrap();
            assert_eq!(json, mode.as_str());
            assert_eq!(
                serde_json::from_value::<PermissionMode>(json).unwrap(),
                mode
            );
        }
        let refused = serde_json::from_value::<PermissionMode>(json!("yolo")).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("unknown permission mode \"yolo\"")
        );
    }

    #[test]
    fn states_are_their_wire_names() {
        for state in [
            SessionState::Idle,
            SessionState::Running,
            SessionState::WaitingForApproval,
            SessionState::Failed,
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }

    #[test]
    fn answers_leave_out_what_they_do_not_say() {
        let params = AnswerParams::allow("s/1");
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            json!({"approval": "s/1", "allow": true})
        );
        let params = AnswerParams::allow("s/1").with_mode(PermissionMode::AcceptEdits);
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            json!({"approval": "s/1", "allow": true, "mode": "acceptEdits"})
        );
    }
}

request!(
    /// From the `PermissionRequest` hook of a `claude` the service started
    /// (in a terminal, or `moonkale-service claude`), with that start's
    /// secret: its permission question, shown where hosted sessions'
    /// questions show. Answered once a person decides anywhere; the
    /// terminal's own dialog stays, and the first answer wins.
    HookPermission,
    "moonkale/agent/hookPermission",
    HookParams => HookDecision
);

request!(
    /// From the `PostToolUse` and `PermissionDenied` hooks of such a CLI:
    /// the tool ran or was denied, so a question of it still shown was
    /// answered in the terminal and is withdrawn everywhere.
    HookDone,
    "moonkale/agent/hookDone",
    HookParams => crate::Empty
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookParams {
    /// The secret the service gave that CLI's start.
    pub token: String,
    /// The hook's input as the CLI wrote it (`session_id`, `tool_name`,
    /// `tool_input`, …): untrusted.
    pub input: Value,
}

/// What the `PermissionRequest` hook prints; no behavior: the terminal's
/// dialog decides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookDecision {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HookBehavior>,
    /// A denial's reason, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookBehavior {
    Allow,
    Deny,
}

request!(
    /// A secret for the hooks of a `claude` about to start outside the
    /// service's terminals (`moonkale-service claude` in the user's own):
    /// its questions then reach every front end as a terminal's do.
    HookSecret,
    "moonkale/agent/hookSecret",
    crate::NoParams => HookSecretResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookSecretResult {
    pub token: String,
}
