//! A session's stored events as one closed type, [`SessionEvent`], and the
//! one reducer that reads them, [`SessionView`].
//!
//! On the wire and on disk an event is `{"seq", "at", "kind", "data"}`
//! (docs/protocol.md, Events): serde's adjacent tagging writes exactly
//! that, so the session writes typed events and every reader (restoring a
//! session, the ACP front door, the command line, front ends) gets them
//! typed. What they make of a session's history (its settings, title,
//! state, the tools allowed "always", …) comes from folding the events in
//! one place, [`SessionView::fold`], so the readers cannot disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::{
    Approval, Decision, Image, LoginNeeded, PermissionMode, SessionData, SessionState,
    SettingsData, StateData,
};

/// One stored event of a session: what happened, numbered and dated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// From 0, one per event.
    pub seq: u64,
    /// Milliseconds since the epoch.
    pub at: u64,
    /// `kind` and `data` on the wire.
    #[serde(flatten)]
    pub event: SessionEvent,
}

/// What a session stores, one variant per `kind`; `data` is the payload.
///
/// A `kind` this version does not know (written by a newer one) reads as
/// [`SessionEvent::Unknown`]: a reader skips it, it never fails a page or
/// a transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// `remote = "Self"` derives the adjacently tagged (de)serializer as
// inherent functions; the trait impls below wrap them to read an unknown
// kind as `Unknown` rather than fail.
#[serde(
    remote = "Self",
    tag = "kind",
    content = "data",
    rename_all = "camelCase"
)]
pub enum SessionEvent {
    /// The first event: where and how the session started.
    Session(SessionData),
    /// The settings changed (by the front door, a plan approval or the CLI).
    Settings(SettingsData),
    /// A prompt of the user's.
    Prompt(PromptData),
    /// Why the user undid a change; Claude hears it with the next prompt.
    Note(NoteData),
    /// Something the session tells the user (a restart, untrusted settings).
    Notice(NoticeData),
    /// What the CLI answered our `initialize`: its commands and models.
    Capabilities(CapabilitiesData),
    /// The session's state changed.
    State(StateData),
    /// A question to the user.
    Approval(Approval),
    /// How a question ended, or what the policy decided without asking.
    Decision(DecisionData),
    /// A message of the CLI's stream-json output, kept whole as it came:
    /// the format is the CLI's own and changes with its versions, so it is
    /// not ours to type (readers look at the few fields they use).
    Cli(Value),
    /// A kind this version does not know (from a newer version); its data
    /// is not kept.
    #[serde(skip)]
    Unknown { kind: String },
}

impl SessionEvent {
    /// Every `kind` this version writes.
    pub const KINDS: [&'static str; 10] = [
        "session",
        "settings",
        "prompt",
        "note",
        "notice",
        "capabilities",
        "state",
        "approval",
        "decision",
        "cli",
    ];

    /// The `kind` on the wire.
    pub fn kind(&self) -> &str {
        match self {
            SessionEvent::Session(_) => "session",
            SessionEvent::Settings(_) => "settings",
            SessionEvent::Prompt(_) => "prompt",
            SessionEvent::Note(_) => "note",
            SessionEvent::Notice(_) => "notice",
            SessionEvent::Capabilities(_) => "capabilities",
            SessionEvent::State(_) => "state",
            SessionEvent::Approval(_) => "approval",
            SessionEvent::Decision(_) => "decision",
            SessionEvent::Cli(_) => "cli",
            SessionEvent::Unknown { kind } => kind,
        }
    }
}

impl Serialize for SessionEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SessionEvent::Unknown { kind } => {
                use serde::ser::SerializeStruct;
                let mut s = serializer.serialize_struct("SessionEvent", 1)?;
                s.serialize_field("kind", kind)?;
                s.end()
            }
            known => SessionEvent::serialize(known, serializer),
        }
    }
}

impl<'de> Deserialize<'de> for SessionEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Tagged {
            kind: String,
            #[serde(default)]
            data: Value,
        }
        let Tagged { kind, data } = Tagged::deserialize(deserializer)?;
        if !SessionEvent::KINDS.contains(&kind.as_str()) {
            return Ok(SessionEvent::Unknown { kind });
        }
        let tagged = Map::from_iter([
            ("kind".to_owned(), Value::String(kind)),
            ("data".to_owned(), data),
        ]);
        SessionEvent::deserialize(Value::Object(tagged)).map_err(serde::de::Error::custom)
    }
}

/// The `data` of a `prompt` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptData {
    pub text: String,
    /// Images for the model, before the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

/// The `data` of a `note` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteData {
    pub text: String,
}

/// The `data` of a `notice` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoticeData {
    pub message: String,
    /// It says the workspace's own Claude Code settings are not loaded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untrusted: bool,
}

/// The `data` of a `capabilities` event: the CLI's slash commands and
/// models, each entry as the CLI gave it (its format, which front ends
/// read whole; [`SessionView`] reads the fields we use).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CapabilitiesData {
    #[serde(default)]
    pub commands: Vec<Value>,
    #[serde(default)]
    pub models: Vec<Value>,
}

/// The `data` of a `decision` event: an approval that ended, or a tool the
/// policy refused without asking (which has no approval).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DecisionData {
    Answered(Decision),
    Policy(PolicyDecision),
}

/// A tool the policy refused without asking (plan mode is read only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyDecision {
    pub tool: String,
    pub title: String,
    pub allow: bool,
    pub always: bool,
    /// `policy`.
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl DecisionData {
    pub fn allow(&self) -> bool {
        match self {
            DecisionData::Answered(d) => d.allow,
            DecisionData::Policy(d) => d.allow,
        }
    }

    /// Who decided: `editor`, `api`, `timeout`, `withdrawn` or `policy`.
    pub fn by(&self) -> &str {
        match self {
            DecisionData::Answered(d) => &d.by,
            DecisionData::Policy(d) => &d.by,
        }
    }
}

/// A session's title: the start of its first prompt, on one line (at most
/// 80 characters).
pub fn title_of(prompt: &str) -> String {
    let line = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 80 {
        line.chars().take(79).collect::<String>() + "…"
    } else {
        line
    }
}

/// A tool call as a person reads it, as the CLI's own lines do: `Write
/// src/a.rs`, `Bash cargo test`, `Plan ready`; never the tool's input as
/// JSON. The argument that says the most, its first line, at most 120
/// characters.
pub fn tool_summary(tool: &str, input: &Value) -> String {
    match tool {
        "ExitPlanMode" => return "Plan ready".to_owned(),
        "EnterPlanMode" => return "Planning".to_owned(),
        "AskUserQuestion" => return "Question".to_owned(),
        "TodoWrite" => return "Update the to-do list".to_owned(),
        _ => {}
    }
    let name = match tool.strip_prefix("mcp__").and_then(|t| t.split_once("__")) {
        Some((server, tool)) => format!("{tool} ({server})"),
        None => tool.to_owned(),
    };
    let arg = [
        "file_path",
        "notebook_path",
        "path",
        "command",
        "pattern",
        "url",
        "query",
        "description",
    ]
    .iter()
    .find_map(|k| input[k].as_str())
    .unwrap_or_default();
    let arg: String = arg
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(120)
        .collect();
    if arg.is_empty() {
        name
    } else {
        format!("{name} {arg}")
    }
}

/// Who decided an approval ([`DecisionData::by`]), in a person's words:
/// `allowed in an editor`, `denied: no answer in time`.
pub fn decision_in_words(allow: bool, by: &str) -> String {
    let verdict = if allow { "allowed" } else { "denied" };
    match by {
        "editor" => format!("{verdict} in an editor"),
        "api" => format!("{verdict} from the page or the command line"),
        "timeout" => format!("{verdict}: no answer in time"),
        "withdrawn" => "withdrawn: answered elsewhere, or the turn ended".to_owned(),
        "policy" => format!("{verdict} by the permission mode or your rules"),
        other => format!("{verdict} ({other})"),
    }
}

/// A model the CLI offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelChoice {
    /// What `--model` takes.
    pub value: String,
    pub name: String,
    pub description: Option<String>,
}

/// A slash command the CLI offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlashCommand {
    pub name: String,
    pub description: String,
    /// What its argument is, when it takes one.
    pub hint: Option<String>,
}

/// What a session's events say of it, read one event at a time: the one
/// reducer of the event log, shared by restoring a session, the ACP front
/// door and the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionView {
    /// The first event's time, and the last one's.
    pub created: Option<u64>,
    pub updated: Option<u64>,
    /// Events folded.
    pub events: usize,
    pub workspace: Option<PathBuf>,
    /// The folder the CLI runs in, when it is not the workspace itself.
    pub cwd: Option<PathBuf>,
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    /// The first prompt, as a title.
    pub title: String,
    /// The last state stored, and why it failed (its `error`, `login`).
    pub state: SessionState,
    pub error: Option<String>,
    pub login: Option<LoginNeeded>,
    /// The CLI has the conversation (it said `system/init`), and its version.
    pub has_conversation: bool,
    pub cli_version: Option<String>,
    /// Tools the user allowed "always".
    pub always: BTreeSet<String>,
    /// Questions asked and not ended yet.
    pub pending: Vec<Approval>,
    /// Notes for Claude stored after the last prompt: the next one carries
    /// them.
    pub notes: Vec<String>,
    /// What the CLI offers: from its `capabilities`, else the names of its
    /// `init` (`None` until either).
    pub models: Vec<ModelChoice>,
    pub commands: Option<Vec<SlashCommand>>,
    /// Approval id → tool, for a decision that does not name its tool
    /// (written by earlier versions).
    tools: BTreeMap<String, String>,
}

impl SessionView {
    /// A session with these settings until its events say otherwise.
    pub fn new(permission_mode: PermissionMode, model: Option<String>) -> SessionView {
        SessionView {
            created: None,
            updated: None,
            events: 0,
            workspace: None,
            cwd: None,
            permission_mode,
            model,
            title: String::new(),
            state: SessionState::Idle,
            error: None,
            login: None,
            has_conversation: false,
            cli_version: None,
            always: BTreeSet::new(),
            pending: Vec::new(),
            notes: Vec::new(),
            models: Vec::new(),
            commands: None,
            tools: BTreeMap::new(),
        }
    }

    /// Takes one event in.
    pub fn fold(&mut self, event: &Event) {
        self.created.get_or_insert(event.at);
        self.updated = Some(event.at);
        self.events += 1;
        match &event.event {
            SessionEvent::Session(data) => {
                self.workspace = Some(data.workspace.clone());
                self.cwd = data.cwd.clone();
                self.permission_mode = data.permission_mode;
                self.model = data.model.clone();
            }
            SessionEvent::Settings(data) => {
                self.permission_mode = data.permission_mode;
                self.model = data.model.clone();
            }
            SessionEvent::Prompt(prompt) => {
                self.notes.clear();
                if self.title.is_empty() {
                    self.title = title_of(&prompt.text);
                }
            }
            SessionEvent::Note(note) => self.notes.push(note.text.clone()),
            SessionEvent::State(data) => {
                self.state = data.state;
                self.error = data.error.clone();
                self.login = data.login.clone();
            }
            SessionEvent::Approval(approval) => {
                self.tools
                    .insert(approval.approval.clone(), approval.tool.clone());
                self.pending.push(approval.clone());
            }
            SessionEvent::Decision(DecisionData::Answered(decision)) => {
                self.pending.retain(|a| a.approval != decision.approval);
                if decision.always && decision.allow {
                    let tool = Some(decision.tool.clone())
                        .filter(|t| !t.is_empty())
                        .or_else(|| self.tools.get(&decision.approval).cloned());
                    self.always.extend(tool);
                }
            }
            SessionEvent::Capabilities(data) => self.capabilities(data),
            SessionEvent::Cli(message) => self.cli(message),
            SessionEvent::Decision(DecisionData::Policy(_))
            | SessionEvent::Notice(_)
            | SessionEvent::Unknown { .. } => {}
        }
    }

    fn capabilities(&mut self, data: &CapabilitiesData) {
        let models: Vec<ModelChoice> = data
            .models
            .iter()
            .filter_map(|m| {
                let value = m["value"].as_str()?.to_owned();
                Some(ModelChoice {
                    name: m["displayName"].as_str().unwrap_or(&value).to_owned(),
                    description: m["description"].as_str().map(str::to_owned),
                    value,
                })
            })
            .collect();
        if !models.is_empty() {
            self.models = models;
        }
        let commands = data
            .commands
            .iter()
            .filter_map(|c| {
                Some(SlashCommand {
                    name: c["name"].as_str()?.to_owned(),
                    description: c["description"].as_str().unwrap_or_default().to_owned(),
                    hint: c["argumentHint"]
                        .as_str()
                        .filter(|h| !h.is_empty())
                        .map(str::to_owned),
                })
            })
            .collect();
        self.commands = Some(commands);
    }

    /// The CLI's `system/init`: it has the conversation; its commands by
    /// name when its `capabilities` did not come first.
    fn cli(&mut self, message: &Value) {
        if message["type"] != "system" || message["subtype"] != "init" {
            return;
        }
        self.has_conversation = true;
        self.cli_version = message["claude_code_version"].as_str().map(str::to_owned);
        if self.commands.is_none() {
            let names = message["slash_commands"].as_array().into_iter().flatten();
            let commands = names
                .filter_map(Value::as_str)
                .map(|name| SlashCommand {
                    name: name.to_owned(),
                    description: format!("/{name}"),
                    hint: None,
                })
                .collect();
            self.commands = Some(commands);
        }
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use serde_json::json;

    use super::*;

    /// Events in (as the wire has them), the view out; `round_trip`: each
    /// is written back as it was read (not so an unknown kind, which loses
    /// its data, nor a decision of an earlier version without its tool).
    fn check(events: &[Value], round_trip: bool, want: Expect) {
        let mut view = SessionView::new(PermissionMode::Plan, None);
        for (seq, e) in events.iter().enumerate() {
            let mut e = e.clone();
            e["seq"] = json!(seq);
            e["at"] = json!(100 + seq);
            let event: Event = serde_json::from_value(e.clone()).unwrap();
            assert_eq!(event.event.kind(), e["kind"]);
            if round_trip {
                assert_eq!(serde_json::to_value(&event).unwrap(), e);
            }
            view.fold(&event);
        }
        want.assert_debug_eq(&view);
    }

    #[test]
    fn a_turn_with_an_always_allowed_tool_and_a_note() {
        check(
            &[
                json!({"kind": "session", "data": {"workspace": "/w", "permissionMode": "default",
                       "model": null, "cwd": "/w/sub"}}),
                json!({"kind": "capabilities", "data": {
                       "commands": [{"name": "review", "description": "Review", "argumentHint": "<pr>"},
                                    {"name": "compact", "argumentHint": ""}, {"no": "name"}],
                       "models": [{"value": "sonnet", "displayName": "Sonnet", "description": "fast"},
                                  {"value": "opus"}]}}),
                json!({"kind": "prompt", "data": {"text": "Write   a.txt\nplease", "images": [
                       {"mediaType": "image/png", "data": "AA=="}]}}),
                json!({"kind": "state", "data": {"state": "running"}}),
                json!({"kind": "cli", "data": {"type": "system", "subtype": "init",
                       "claude_code_version": "2.1.3", "slash_commands": ["ignored"]}}),
                json!({"kind": "approval", "data": {"approval": "s/1", "session": "s", "kind": "tool",
                       "tool": "Write", "input": {}, "title": "Write a.txt", "destructive": false}}),
                json!({"kind": "approval", "data": {"approval": "s/2", "session": "s", "kind": "tool",
                       "tool": "Bash", "input": {}, "title": "Run ls", "destructive": false}}),
                json!({"kind": "decision", "data": {"approval": "s/1", "tool": "Write", "allow": true,
                       "always": true, "by": "editor"}}),
                json!({"kind": "settings", "data": {"permissionMode": "acceptEdits", "model": "opus",
                       "by": "claude"}}),
                json!({"kind": "note", "data": {"text": "keep the old name"}}),
                json!({"kind": "state", "data": {"state": "idle"}}),
            ],
            true,
            expect![[r#"
                SessionView {
                    created: Some(
                        100,
                    ),
                    updated: Some(
                        110,
                    ),
                    events: 11,
                    workspace: Some(
                        "/w",
                    ),
                    cwd: Some(
                        "/w/sub",
                    ),
                    permission_mode: AcceptEdits,
                    model: Some(
                        "opus",
                    ),
                    title: "Write a.txt please",
                    state: Idle,
                    error: None,
                    login: None,
                    has_conversation: true,
                    cli_version: Some(
                        "2.1.3",
                    ),
                    always: {
                        "Write",
                    },
                    pending: [
                        Approval {
                            approval: "s/2",
                            session: "s",
                            kind: Tool,
                            tool: "Bash",
                            input: Object {},
                            title: "Run ls",
                            destructive: false,
                        },
                    ],
                    notes: [
                        "keep the old name",
                    ],
                    models: [
                        ModelChoice {
                            value: "sonnet",
                            name: "Sonnet",
                            description: Some(
                                "fast",
                            ),
                        },
                        ModelChoice {
                            value: "opus",
                            name: "opus",
                            description: None,
                        },
                    ],
                    commands: Some(
                        [
                            SlashCommand {
                                name: "review",
                                description: "Review",
                                hint: Some(
                                    "<pr>",
                                ),
                            },
                            SlashCommand {
                                name: "compact",
                                description: "",
                                hint: None,
                            },
                        ],
                    ),
                    tools: {
                        "s/1": "Write",
                        "s/2": "Bash",
                    },
                }
            "#]],
        );
    }

    /// A policy refusal has no approval; a decision of an earlier version
    /// without its tool takes the approval's; a failed state keeps why; a
    /// prompt takes the notes; a kind of a newer version is only counted.
    #[test]
    fn failures_policy_refusals_old_decisions_and_unknown_kinds() {
        check(
            &[
                json!({"kind": "note", "data": {"text": "before the prompt"}}),
                json!({"kind": "prompt", "data": {"text": "go"}}),
                json!({"kind": "cli", "data": {"type": "system", "subtype": "init",
                       "slash_commands": ["review"]}}),
                json!({"kind": "decision", "data": {"tool": "Write", "title": "Write a.txt",
                       "allow": false, "always": false, "by": "policy", "message": "plan mode"}}),
                json!({"kind": "approval", "data": {"approval": "s/1", "session": "s", "kind": "tool",
                       "tool": "Edit", "input": {}, "title": "Edit a.txt", "destructive": false}}),
                json!({"kind": "decision", "data": {"approval": "s/1", "allow": true, "always": true,
                       "by": "api"}}),
                json!({"kind": "telepathy", "data": {"thought": "hi"}}),
                json!({"kind": "notice", "data": {"message": "untrusted", "untrusted": true}}),
                json!({"kind": "state", "data": {"state": "failed", "error": "not logged in",
                       "login": {"fix": "run `claude auth login` in a terminal"}}}),
            ],
            false,
            expect![[r#"
                SessionView {
                    created: Some(
                        100,
                    ),
                    updated: Some(
                        108,
                    ),
                    events: 9,
                    workspace: None,
                    cwd: None,
                    permission_mode: Plan,
                    model: None,
                    title: "go",
                    state: Failed,
                    error: Some(
                        "not logged in",
                    ),
                    login: Some(
                        LoginNeeded {
                            fix: "run `claude auth login` in a terminal",
                            refused: None,
                        },
                    ),
                    has_conversation: true,
                    cli_version: None,
                    always: {
                        "Edit",
                    },
                    pending: [],
                    notes: [],
                    models: [],
                    commands: Some(
                        [
                            SlashCommand {
                                name: "review",
                                description: "/review",
                                hint: None,
                            },
                        ],
                    ),
                    tools: {
                        "s/1": "Edit",
                    },
                }
            "#]],
        );
    }

    #[test]
    fn every_kind_is_listed_and_an_unknown_one_reads_without_its_data() {
        let unknown: Event =
            serde_json::from_value(json!({"seq": 3, "at": 4, "kind": "later", "data": [1]}))
                .unwrap();
        assert_eq!(unknown.event.kind(), "later");
        assert_eq!(
            serde_json::to_value(&unknown).unwrap(),
            json!({"seq": 3, "at": 4, "kind": "later"})
        );
        // A known kind whose data does not fit is an error, not `Unknown`.
        let bad = serde_json::from_value::<Event>(json!({"seq": 0, "at": 0, "kind": "note"}));
        assert!(bad.is_err());
        // Each listed kind is a variant's: data that fits none is refused
        // (but by `cli`, which keeps anything).
        for kind in SessionEvent::KINDS {
            let read = serde_json::from_value::<SessionEvent>(json!({"kind": kind, "data": 7}));
            match read {
                Ok(event) => assert_eq!((kind, event.kind()), ("cli", "cli")),
                Err(e) => assert_ne!(kind, "cli", "{e}"),
            }
        }
    }
}
