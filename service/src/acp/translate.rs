//! What an ACP client is shown of one hosted session (pure): the session's
//! stored events and streamed text in, `session/update` payloads out.
//!
//! The same translation serves a live turn and a replay (`session/load`):
//! a stored `assistant` message carries the whole text the CLI streamed
//! before it, so the text already streamed to this client is left out of
//! it, and a replay (nothing streamed) shows it whole. A client that
//! joined in the middle of a message saw only its end streamed; the
//! stored message then adds nothing, so the client sees the rest of the
//! turn once, without repeats.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use moonkale_protocol::agent::{
    Approval, ApprovalKind, Event, PermissionMode, SessionEvent, SessionView,
};
use serde_json::{Value, json};

use crate::agent::policy;

/// The modes a session offers, in the order a client lists them.
pub const MODES: [(PermissionMode, &str, &str); 4] = [
    (
        PermissionMode::Default,
        "Default",
        "Ask before edits and commands",
    ),
    (
        PermissionMode::AcceptEdits,
        "Accept edits",
        "Edit files without asking; commands still ask",
    ),
    (
        PermissionMode::Plan,
        "Plan",
        "Read only: Claude plans, and asks before it leaves plan mode",
    ),
    (
        PermissionMode::BypassPermissions,
        "Bypass permissions",
        "Everything without asking",
    ),
];

/// The config option of the model.
pub const MODEL_OPTION: &str = "model";
/// The value that means the CLI's own default model.
pub const DEFAULT_MODEL: &str = "default";

/// One tool call as the CLI announced it.
#[derive(Clone, Debug)]
struct ToolUse {
    name: String,
    input: Value,
}

/// One session as one client follows it: the session as its events leave
/// it (the one reducer, [`SessionView`]) and what this client was shown.
#[derive(Debug)]
pub struct AcpView {
    workspace: PathBuf,
    /// Settings, models and commands, from the events (and the settings
    /// this client set).
    pub session: SessionView,
    /// Text and thinking streamed to this client and not yet matched by a
    /// stored message.
    streamed_text: String,
    streamed_thinking: String,
    tools: HashMap<String, ToolUse>,
    /// The order tool calls were announced, to find the one an approval
    /// asks about.
    tool_order: Vec<String>,
    /// The commands this client was shown last.
    commands: Option<Value>,
    /// `seq`s of prompts this client sent itself: they are not echoed.
    own_prompts: Vec<u64>,
}

impl AcpView {
    pub fn new(workspace: &Path, mode: PermissionMode, model: Option<String>) -> AcpView {
        AcpView {
            workspace: workspace.to_owned(),
            session: SessionView::new(mode, model),
            streamed_text: String::new(),
            streamed_thinking: String::new(),
            tools: HashMap::new(),
            tool_order: Vec::new(),
            commands: None,
            own_prompts: Vec::new(),
        }
    }

    /// A prompt this client sent: its stored event is not shown back.
    pub fn sent_prompt(&mut self, seq: u64) {
        self.own_prompts.push(seq);
    }

    /// Streamed text (not stored), `offset` bytes into the message: what
    /// this client was shown already (the partial message a replay showed)
    /// is left out.
    pub fn text(&mut self, text: &str, thinking: bool, offset: u64) -> Vec<Value> {
        let (buffer, kind) = if thinking {
            (&mut self.streamed_thinking, "agent_thought_chunk")
        } else {
            (&mut self.streamed_text, "agent_message_chunk")
        };
        let shown = (buffer.len() as u64).saturating_sub(offset);
        let new = usize::try_from(shown)
            .ok()
            .and_then(|skip| text.get(skip..))
            .unwrap_or_default();
        if new.is_empty() {
            return Vec::new();
        }
        buffer.push_str(new);
        vec![chunk(kind, new)]
    }

    /// What was streamed of the message being written when this client
    /// joined (from the events page).
    pub fn streaming(&mut self, text: &str, thinking: &str) -> Vec<Value> {
        let mut out = self.text(thinking, true, 0);
        out.extend(self.text(text, false, 0));
        out
    }

    /// A stored event: folded into the session's view, and shown as what
    /// it says or what it changed.
    pub fn event(&mut self, event: &Event) -> Vec<Value> {
        let session = &self.session;
        let before = (
            session.permission_mode,
            session.model.clone(),
            session.models.clone(),
        );
        self.session.fold(event);
        let mut out = Vec::new();
        match &event.event {
            SessionEvent::Prompt(prompt) => {
                if let Some(i) = self.own_prompts.iter().position(|s| *s == event.seq) {
                    self.own_prompts.swap_remove(i);
                    return Vec::new();
                }
                out.extend(prompt.images.iter().map(|image| {
                    json!({"sessionUpdate": "user_message_chunk", "content": {
                        "type": "image", "mimeType": image.media_type, "data": image.data}})
                }));
                if !prompt.text.is_empty() {
                    out.push(chunk("user_message_chunk", &prompt.text));
                }
            }
            SessionEvent::Note(note) => out.push(chunk(
                "user_message_chunk",
                &format!("(why a change was undone) {}", note.text),
            )),
            SessionEvent::Notice(notice) => out.push(chunk(
                "agent_message_chunk",
                &format!("\n\n*{}*\n\n", notice.message),
            )),
            // The settings it started with: the client is told them in
            // the reply.
            SessionEvent::Session(_) => {}
            SessionEvent::Settings(_) => {
                let mode = self.session.permission_mode;
                if mode != before.0 {
                    out.push(json!({"sessionUpdate": "current_mode_update", "currentModeId": mode.as_str()}));
                }
                if self.session.model != before.1 {
                    out.push(self.config_update());
                }
            }
            SessionEvent::Capabilities(_) => {
                if self.session.models != before.2 {
                    out.push(self.config_update());
                }
                out.extend(self.commands_update());
            }
            SessionEvent::Cli(message) => match message["type"].as_str() {
                Some("assistant") => out = self.assistant(message),
                Some("user") => out = self.tool_results(message),
                Some("system") => out.extend(self.commands_update()),
                _ => {}
            },
            SessionEvent::State(_)
            | SessionEvent::Approval(_)
            | SessionEvent::Decision(_)
            | SessionEvent::Unknown { .. } => {}
        }
        out
    }

    /// The commands the CLI offers, when they differ from what this client
    /// was shown.
    fn commands_update(&mut self) -> Option<Value> {
        let commands: Vec<Value> = self
            .session
            .commands
            .iter()
            .flatten()
            .map(|c| {
                let mut command = json!({"name": c.name, "description": c.description});
                if let Some(hint) = &c.hint {
                    command["input"] = json!({"hint": hint});
                }
                command
            })
            .collect();
        let commands = Value::Array(commands);
        if self.session.commands.is_none() || self.commands.as_ref() == Some(&commands) {
            return None;
        }
        self.commands = Some(commands.clone());
        Some(json!({"sessionUpdate": "available_commands_update", "availableCommands": commands}))
    }

    /// The session's config options: the model, with what the CLI offers.
    pub fn config_options(&self) -> Value {
        let current = self.session.model.as_deref().unwrap_or(DEFAULT_MODEL);
        let mut options = vec![json!({"value": DEFAULT_MODEL, "name": "Default model"})];
        for model in &self.session.models {
            if model.value != DEFAULT_MODEL {
                let mut option = json!({"value": model.value, "name": model.name});
                if let Some(d) = &model.description {
                    option["description"] = json!(d);
                }
                options.push(option);
            }
        }
        if !options.iter().any(|o| o["value"] == current) {
            options.push(json!({"value": current, "name": current}));
        }
        json!([{
            "id": MODEL_OPTION, "name": "Model", "category": "model", "type": "select",
            "currentValue": current, "options": options,
        }])
    }

    /// The session's modes, for `session/new` and `session/load`.
    pub fn modes(&self) -> Value {
        let available: Vec<Value> = MODES
            .iter()
            .map(|(mode, name, description)| {
                json!({"id": mode.as_str(), "name": name, "description": description})
            })
            .collect();
        json!({"currentModeId": self.session.permission_mode.as_str(), "availableModes": available})
    }

    fn config_update(&self) -> Value {
        json!({"sessionUpdate": "config_option_update", "configOptions": self.config_options()})
    }

    fn assistant(&mut self, message: &Value) -> Vec<Value> {
        let mut out = Vec::new();
        let blocks = message
            .pointer("/message/content")
            .and_then(Value::as_array);
        for block in blocks.into_iter().flatten() {
            match block["type"].as_str() {
                Some("text") => {
                    let text = block["text"].as_str().unwrap_or_default();
                    let rest = unstreamed(&mut self.streamed_text, text);
                    if !rest.is_empty() {
                        out.push(chunk("agent_message_chunk", &rest));
                    }
                }
                Some("thinking") => {
                    let text = block["thinking"].as_str().unwrap_or_default();
                    let rest = unstreamed(&mut self.streamed_thinking, text);
                    if !rest.is_empty() {
                        out.push(chunk("agent_thought_chunk", &rest));
                    }
                }
                Some("tool_use") => out.extend(self.tool_use(block)),
                _ => {}
            }
        }
        out
    }

    fn tool_use(&mut self, block: &Value) -> Vec<Value> {
        let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else {
            return Vec::new();
        };
        let input = block["input"].clone();
        let mut call = json!({
            "sessionUpdate": "tool_call",
            "toolCallId": id,
            "title": policy::title(name, &input, &self.workspace),
            "kind": tool_kind(name),
            "status": "pending",
            "rawInput": input,
        });
        let locations = locations(&input);
        if !locations.is_empty() {
            call["locations"] = Value::Array(locations);
        }
        let content = proposed_content(name, &input);
        if !content.is_empty() {
            call["content"] = Value::Array(content);
        }
        let mut out = vec![call];
        if name == "TodoWrite" {
            out.push(plan(&input));
        }
        self.tools.insert(
            id.to_owned(),
            ToolUse {
                name: name.to_owned(),
                input,
            },
        );
        self.tool_order.push(id.to_owned());
        out
    }

    fn tool_results(&mut self, message: &Value) -> Vec<Value> {
        let mut out = Vec::new();
        let blocks = message
            .pointer("/message/content")
            .and_then(Value::as_array);
        for block in blocks.into_iter().flatten() {
            if block["type"] != "tool_result" {
                continue;
            }
            let Some(id) = block["tool_use_id"].as_str() else {
                continue;
            };
            let failed = block["is_error"] == true;
            let mut update = json!({
                "sessionUpdate": "tool_call_update",
                "toolCallId": id,
                "status": if failed { "failed" } else { "completed" },
            });
            let report = &message["tool_use_result"];
            let content = self.result_content(id, block, report, failed);
            // An edit's report holds the whole file, which its diff shows.
            let diff = content.first().is_some_and(|c| c["type"] == "diff");
            if !report.is_null() && !diff {
                update["rawOutput"] = report.clone();
            }
            if !content.is_empty() {
                update["content"] = Value::Array(content);
            }
            self.tool_order.retain(|t| t != id);
            out.push(update);
        }
        out
    }

    /// What a finished tool shows: the whole file's diff for an edit (from
    /// the CLI's own report of the file before and the patch), else the
    /// tool's output as text.
    fn result_content(&self, id: &str, block: &Value, report: &Value, failed: bool) -> Vec<Value> {
        let edit = self.tools.get(id).is_some_and(|t| is_edit(&t.name));
        if edit
            && !failed
            && let Some(Ok(edit)) = moonkale_claude::edits::edit_from_tool_result(report)
        {
            return vec![json!({
                "type": "diff",
                "path": edit.path,
                "oldText": edit.before,
                "newText": edit.after,
            })];
        }
        let text = result_text(&block["content"]);
        if text.is_empty() {
            return Vec::new();
        }
        let text = if self.tools.get(id).is_some_and(|t| t.name == "Bash") {
            format!("```\n{text}\n```")
        } else {
            text
        };
        vec![json!({"type": "content", "content": {"type": "text", "text": text}})]
    }

    /// The tool call an approval asks about: the newest unfinished call of
    /// that tool with that input, else one made up from the approval.
    pub fn tool_call_for(&self, approval: &Approval) -> Value {
        let found = self.tool_order.iter().rev().find(|id| {
            self.tools
                .get(*id)
                .is_some_and(|t| t.name == approval.tool && t.input == approval.input)
        });
        let id = match found {
            Some(id) => id.clone(),
            None => format!("approval-{}", approval.approval),
        };
        let kind = match approval.kind {
            ApprovalKind::Plan { .. } => "switch_mode",
            ApprovalKind::Question { .. } => "think",
            ApprovalKind::Tool => tool_kind(&approval.tool),
        };
        let mut call = json!({
            "toolCallId": id,
            "title": approval.title,
            "kind": kind,
            "status": "pending",
            "rawInput": approval.input,
        });
        let content = match &approval.kind {
            ApprovalKind::Plan { plan, .. } => {
                vec![json!({"type": "content", "content": {"type": "text", "text": plan}})]
            }
            _ => proposed_content(&approval.tool, &approval.input),
        };
        if !content.is_empty() {
            call["content"] = Value::Array(content);
        }
        let locations = locations(&approval.input);
        if !locations.is_empty() {
            call["locations"] = Value::Array(locations);
        }
        call
    }
}

fn chunk(kind: &str, text: &str) -> Value {
    json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
}

/// What of `whole` was not streamed yet; forgets what was streamed. When
/// the streamed text is not its start (the client joined mid-message) the
/// client saw the end already: nothing is added.
fn unstreamed(streamed: &mut String, whole: &str) -> String {
    let seen = std::mem::take(streamed);
    if seen.is_empty() {
        whole.to_owned()
    } else if let Some(rest) = whole.strip_prefix(seen.as_str()) {
        rest.to_owned()
    } else {
        String::new()
    }
}

fn is_edit(tool: &str) -> bool {
    matches!(tool, "Edit" | "MultiEdit" | "Write" | "NotebookEdit")
}

/// ACP's category of a Claude Code tool.
pub fn tool_kind(tool: &str) -> &'static str {
    match tool {
        "Read" | "NotebookRead" | "LS" => "read",
        t if is_edit(t) => "edit",
        "Bash" | "BashOutput" | "KillShell" | "KillBash" => "execute",
        "Grep" | "Glob" => "search",
        "WebFetch" | "WebSearch" => "fetch",
        "Task" | "Agent" | "TodoWrite" => "think",
        "ExitPlanMode" | "EnterPlanMode" => "switch_mode",
        t if t.starts_with("mcp__moonkale__") => "read",
        _ => "other",
    }
}

fn locations(input: &Value) -> Vec<Value> {
    let path = input["file_path"]
        .as_str()
        .or(input["notebook_path"].as_str());
    match path {
        Some(path) => {
            let mut location = json!({"path": path});
            if let Some(line) = input["offset"].as_u64() {
                location["line"] = json!(line);
            }
            vec![location]
        }
        None => Vec::new(),
    }
}

/// What an edit proposes, before it runs: the replaced text and its
/// replacement, or a written file's new text.
fn proposed_content(tool: &str, input: &Value) -> Vec<Value> {
    let Some(path) = input["file_path"].as_str() else {
        return match input["command"].as_str() {
            Some(command) if tool == "Bash" => vec![json!({
                "type": "content", "content": {"type": "text", "text": format!("```sh\n{command}\n```")},
            })],
            _ => Vec::new(),
        };
    };
    let diff = |old: Option<&str>, new: &str| json!({"type": "diff", "path": path, "oldText": old, "newText": new});
    match tool {
        "Write" => vec![diff(None, input["content"].as_str().unwrap_or_default())],
        "Edit" => vec![diff(
            input["old_string"].as_str(),
            input["new_string"].as_str().unwrap_or_default(),
        )],
        "MultiEdit" => input["edits"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                diff(
                    e["old_string"].as_str(),
                    e["new_string"].as_str().unwrap_or_default(),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The CLI's todo list as an ACP plan.
fn plan(input: &Value) -> Value {
    let entries: Vec<Value> = input["todos"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|todo| {
            let status = match todo["status"].as_str() {
                Some("in_progress") => "in_progress",
                Some("completed") => "completed",
                _ => "pending",
            };
            let content = todo["content"].as_str().unwrap_or_default();
            json!({"content": content, "priority": "medium", "status": status})
        })
        .collect();
    json!({"sessionUpdate": "plan", "entries": entries})
}

/// A tool result's text: a string, or the text of its blocks.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;
