//! Change sets: the edits Claude Code made to workspace files **without**
//! asking first (auto mode, `acceptEdits`, `bypassPermissions`, an allow
//! rule), kept for review after the fact. One set per Claude turn (or per
//! burst of edits when turns cannot be seen); for each file the text before
//! and after, its hunks, and which Claude made it. The user keeps or undoes
//! a set, a file or a single hunk.
//!
//! Lines are 0-based and ranges end-exclusive, as in LSP; a hunk's `after`
//! range is where its lines are in the file as Claude left it with the
//! hunks undone so far put back (so it stays valid while other hunks of the
//! same file are undone).
//!
//! Their `workspace/executeCommand` commands are
//! [`Command::UndoChange`](crate::Command::UndoChange), `KeepChange` and
//! `OpenChanges`.

use lsp_types::Url;
use serde::{Deserialize, Serialize};

use crate::{Empty, notification, request};

/// What every method of this namespace starts with; the hub hands such
/// requests to the change-set host whole.
pub const NAMESPACE: &str = "moonkale/changes/";

/// Who made a change set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ChangeSource {
    /// A session the service hosts (`moonkale/agent/*`).
    Agent { session: String },
    /// A terminal the service started ("Start Claude Code here",
    /// `moonkale-service claude`); `session` is the CLI's session id.
    Terminal { terminal: u64, session: String },
    /// A `claude` the user started, connected over the IDE link (its
    /// session id, from its transcript).
    Ide { session: String },
    /// A file changed while a Claude Code client was connected and no
    /// better source saw it (the last resort).
    Watcher,
}

impl ChangeSource {
    /// How the source is named to the user.
    pub fn describe(&self) -> String {
        match self {
            ChangeSource::Agent { session } => format!("the hosted session {session}"),
            ChangeSource::Terminal { terminal, .. } => {
                format!("Claude Code in terminal {terminal}")
            }
            ChangeSource::Ide { session } => format!("Claude Code (session {session})"),
            ChangeSource::Watcher => "Claude Code (seen on disk)".to_owned(),
        }
    }
}

/// Where a hunk or a file stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReviewState {
    /// Not decided yet.
    Pending,
    /// The user kept it.
    Kept,
    /// The user undid it.
    Undone,
}

/// What Claude did to a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FileChangeKind {
    Created,
    Modified,
    Deleted,
}

/// A set in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeSetSummary {
    pub id: u64,
    pub source: ChangeSource,
    /// The prompt of the turn, shortened (empty when unknown).
    pub title: String,
    /// Milliseconds since the epoch of the first and the latest edit.
    pub started: u64,
    pub updated: u64,
    /// Pending while any hunk is; else kept or undone (undone if any hunk was).
    pub state: ReviewState,
    /// `true` while the turn may still add edits.
    pub open: bool,
    pub files: Vec<FileSummary>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileSummary {
    pub uri: Url,
    pub kind: FileChangeKind,
    pub hunks: usize,
    /// Hunks not decided yet.
    pub pending: usize,
}

/// One hunk of a changed file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeHunk {
    pub index: usize,
    /// Lines of the text before Claude's change.
    pub before: LineRange,
    /// Lines of the text after (see the module header).
    pub after: LineRange,
    /// The lines Claude replaced (each with its line break).
    pub removed: String,
    /// The lines Claude wrote instead.
    pub added: String,
    pub state: ReviewState,
}

/// Lines `start..end` (0-based, end-exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineRange {
    pub start: u32,
    pub end: u32,
}

/// A changed file in full, for a diff view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    pub uri: Url,
    pub kind: FileChangeKind,
    /// The text before Claude's change (`None`: Claude created the file).
    pub before: Option<String>,
    /// The text as Claude left it, with the undone hunks put back (`None`:
    /// Claude deleted the file, or its creation was undone).
    pub after: Option<String>,
    pub hunks: Vec<ChangeHunk>,
}

request!(
    /// The change sets, newest last: the pending ones, or every kept one
    /// too with `all`.
    List,
    "moonkale/changes/list",
    Option<ListParams> => ListResult
);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {
    #[serde(default)]
    pub all: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResult {
    pub sets: Vec<ChangeSetSummary>,
}

request!(
    /// One change set with every file's texts and hunks.
    Show,
    "moonkale/changes/show",
    ShowParams => ShowResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowParams {
    pub set: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowResult {
    pub set: ChangeSetSummary,
    pub files: Vec<FileChange>,
}

request!(
    /// Undoes a whole set, one file of it, or one hunk. The file is written
    /// atomically; editors holding it unmodified get the new text. A hunk
    /// whose lines changed since Claude wrote them, or a file an editor
    /// holds with unsaved changes, is refused (listed in `refused`); with
    /// `hunk` given, a refusal is an error instead.
    Undo,
    "moonkale/changes/undo",
    UndoParams => UndoResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoParams {
    pub set: u64,
    /// One file (else every file of the set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<Url>,
    /// One hunk of `uri` (else every pending hunk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hunk: Option<usize>,
    /// Why, for Claude: a hosted session is told with its next prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoResult {
    /// How many hunks were undone.
    pub undone: usize,
    pub refused: Vec<Refusal>,
}

/// A hunk or file that was not undone, and why (one sentence naming the
/// file and the lines).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub uri: Url,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hunk: Option<usize>,
    pub message: String,
}

request!(
    /// Keeps (dismisses) a whole set, one file of it, or one hunk.
    Keep,
    "moonkale/changes/keep",
    KeepParams => Empty
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepParams {
    pub set: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<Url>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hunk: Option<usize>,
}

notification!(
    /// The pending change sets changed (service → every editor): plugins
    /// refresh their lists. `announce` names a set that just ended its turn
    /// (the one to show the user now).
    Changed,
    "moonkale/changes/changed",
    ChangedParams
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedParams {
    pub sets: Vec<ChangeSetSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announce: Option<u64>,
}
