//! The hub's side of the agent host: forwarding `moonkale/agent/*` requests,
//! who is subscribed to which session, permission questions shown in every
//! editor, `$/progress`, and the editor tools the agent offers the CLI.
//!
//! The sessions themselves live in the agent host (the service's `agent`); the hub
//! only knows the approvals still waiting, so it can show them as code
//! actions and route an editor's answer back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use lsp_types::notification::Progress;
use lsp_types::request::WorkDoneProgressCreate;
use lsp_types::{
    CodeAction, CodeActionKind, MessageType, NumberOrString, Position, ProgressParams,
    ProgressParamsValue, Range, WorkDoneProgress, WorkDoneProgressBegin,
    WorkDoneProgressCreateParams, WorkDoneProgressEnd, WorkDoneProgressReport,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Awaited, Workspace, command_action, parse_params, tool_result};
use crate::ports::{AgentCommand, AgentPort, Answer, Request, forward};
use crate::{AgentProgress, EditorId, IdeClientId, IdeScope, Responder, Role, Topic};
use lsp_types::notification::Notification as _;
use lsp_types::request::Request as _;
use moonkale_protocol::agent::{
    self, Approval, ApprovalKind, ApprovalParams, ApprovalStatus, Question as AskedQuestion,
};
use moonkale_protocol::ide::{Buffer, CallToolResult, EditorToolCall, IdeToolCall};
use moonkale_protocol::jsonrpc::{self as message, Params, ResponseError, code};
use moonkale_protocol::{Command, PermissionMode};

/// The hub's agent state.
#[derive(Default)]
pub(crate) struct AgentLink {
    sender: Option<AgentPort>,
    /// The approvals waiting for the user, oldest first: a read-only view
    /// of the sessions' (which own them and judge every answer), kept to
    /// show them.
    approvals: Vec<Approval>,
    /// Answers given so far to the questions of `AskUserQuestion`
    /// approvals asked one question at a time (buttons, code actions):
    /// approval → question index → the answer.
    partial_answers: HashMap<String, BTreeMap<usize, Value>>,
    /// `$/progress` tokens created in an editor and not ended yet.
    progress_tokens: HashSet<(EditorId, String)>,
    /// Whether the user trusts the workspace, as the agent host last said.
    trusted: Option<bool>,
    /// The agent's warm spare CLI, as the agent host last said.
    pub(super) spare: Option<moonkale_protocol::status::SpareStatus>,
}

fn approval_id(approval: &Approval) -> &str {
    &approval.approval
}

/// The questions of an `AskUserQuestion` approval.
fn questions(approval: &Approval) -> &[AskedQuestion] {
    match &approval.kind {
        ApprovalKind::Question { questions } => questions,
        _ => &[],
    }
}

/// The option labels of one question.
fn option_labels(question: &AskedQuestion) -> Vec<&str> {
    question
        .options
        .iter()
        .flatten()
        .map(|o| o.label.as_str())
        .collect()
}

fn is_plan(approval: &Approval) -> bool {
    matches!(approval.kind, ApprovalKind::Plan { .. })
}

/// Cuts a text shown in a message box to `max` characters.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        text.chars().take(max - 1).collect::<String>() + "…"
    } else {
        text.to_owned()
    }
}

/// The button (and code action) labels of a plan approval, with the mode
/// each goes on in; `None`: keep planning.
const PLAN_BUTTONS: [(&str, Option<PermissionMode>); 3] = [
    ("Approve; ask before edits", Some(PermissionMode::Default)),
    ("Approve; accept edits", Some(PermissionMode::AcceptEdits)),
    ("Keep planning", None),
];

/// The button that declines a question.
const DECLINE: &str = "Decline to answer";

impl Workspace {
    pub(crate) fn set_agent(&mut self, sender: Option<AgentPort>) {
        self.agent.sender = sender;
    }

    pub(super) fn agent_detach(&mut self, editor: EditorId) {
        self.agent.progress_tokens.retain(|(e, _)| *e != editor);
        self.agent_editors_changed();
    }

    /// Tells the agent host how many editors are attached (it keeps a warm
    /// spare CLI while any is). A full port loses the count; the next
    /// attach or detach brings it again.
    pub(super) fn agent_editors_changed(&mut self) {
        let attached = self
            .editors
            .values()
            .filter(|ed| ed.info.role == Role::Editor)
            .count();
        if let Some(port) = &self.agent.sender {
            let _ = port.try_send(AgentCommand::Editors { attached });
        }
    }

    /// A `moonkale/agent/*` request: subscriptions are ours, the rest goes
    /// to the agent host, which answers `reply` itself.
    pub(super) fn agent_request(
        &mut self,
        editor: EditorId,
        method: &str,
        params: Params,
        reply: Responder,
    ) {
        let subscribe = method == agent::Subscribe::METHOD;
        if subscribe || method == agent::Unsubscribe::METHOD {
            let p: agent::SubscriptionParams = match parse_params(&params) {
                Ok(p) => p,
                Err(e) => return reply.send(Err(e)),
            };
            let topic = p.session.map_or(Topic::AllSessions, Topic::Session);
            return reply.send(Ok(self.subscription(editor, subscribe, topic)));
        }
        let request = Request::new(editor, method, params, reply);
        forward(self.agent.sender.as_ref(), request, "the agent is");
    }

    pub(super) fn agent_trusted(&self) -> Option<bool> {
        self.agent.trusted
    }

    /// The agent host said whether the workspace is trusted; a message (the
    /// user changed it) goes to every editor.
    pub(super) fn workspace_trust(&mut self, trusted: bool, message: Option<String>) {
        self.agent.trusted = Some(trusted);
        if let Some(message) = message {
            let editors: Vec<EditorId> = self
                .editors_with_buttons()
                .into_iter()
                .map(|(e, _)| e)
                .collect();
            for editor in editors {
                self.show_message(editor, MessageType::INFO, message.clone());
            }
        }
    }

    /// `moonkale.trustWorkspace`: the agent host keeps the decision (it
    /// does the file IO) and answers.
    pub(super) fn trust_command(&mut self, editor: EditorId, args: &[Value], reply: Responder) {
        let trusted = args
            .first()
            .and_then(|a| a.get("trusted"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let params = message::params(&json!({"trusted": trusted}));
        self.agent_request(editor, agent::Trust::METHOD, params, reply)
    }

    /// "Trust this workspace", offered while it is not trusted.
    pub(super) fn trust_action(&self) -> Option<CodeAction> {
        if self.agent.trusted != Some(false) {
            return None;
        }
        let title = "Moonkale: trust this workspace (lets its .claude settings, hooks and .mcp.json servers run in Claude Code sessions)";
        Some(command_action(
            title.into(),
            CodeActionKind::SOURCE,
            Command::TrustWorkspace,
            vec![json!({"trusted": true})],
        ))
    }

    /// Sends `method` to every connection subscribed to `session`.
    fn agent_notify(&self, session: &str, method: &str, params: Value) {
        self.publish(&Topic::Session(session.to_owned()), method, params);
    }

    /// A permission question: buttons where the editor has them, a message
    /// otherwise (the code actions and the command work everywhere), and
    /// the front door's notification.
    pub(super) fn agent_approval(&mut self, approval: Approval) {
        match &approval.kind {
            ApprovalKind::Plan { plan, .. } => self.ask_plan(&approval.approval, plan),
            ApprovalKind::Question { .. } => self.ask_questions(&approval),
            ApprovalKind::Tool => self.ask_tool(&approval),
        }
        self.approval_notify(approval.clone(), ApprovalStatus::Pending);
        self.agent.approvals.push(approval);
    }

    /// `moonkale/agent/approval` to the session's subscribers.
    fn approval_notify(&self, approval: Approval, status: ApprovalStatus) {
        let session = approval.session.clone();
        let params = ApprovalParams {
            session: session.clone(),
            approval,
            status,
        };
        let params = serde_json::to_value(params).expect("approvals serialize");
        self.agent_notify(&session, agent::ApprovalNotification::METHOD, params);
    }

    /// Shows a message with buttons in every editor that has them, else a
    /// plain message pointing at the code actions.
    fn ask_every_editor(&mut self, awaited: Awaited, ask: Question, tell: &str) {
        for (editor, buttons) in self.editors_with_buttons() {
            if buttons {
                let Question {
                    typ,
                    message,
                    buttons,
                } = ask.clone();
                self.ask(editor, awaited.clone(), typ, message, buttons);
            } else {
                self.show_message(editor, MessageType::INFO, tell.to_owned());
            }
        }
    }

    /// The plan, and a choice of how to go on.
    fn ask_plan(&mut self, id: &str, plan: &str) {
        let id = id.to_owned();
        let plan = clip(plan, 1500);
        let ask = Question {
            typ: MessageType::INFO,
            message: format!("Claude's plan is ready:\n\n{plan}"),
            buttons: PLAN_BUTTONS.iter().map(|(t, _)| (*t).to_owned()).collect(),
        };
        let tell = format!(
            "Claude's plan is ready:\n\n{plan}\n\nUse the code actions (Claude: approve the plan …) to answer."
        );
        self.ask_every_editor(Awaited::Approval(id), ask, &tell);
    }

    /// Each question of an `AskUserQuestion`, with its options as buttons.
    fn ask_questions(&mut self, approval: &Approval) {
        let id = approval_id(approval).to_owned();
        for (index, question) in questions(approval).iter().enumerate() {
            let text = clip(&question.question, 500);
            let mut buttons: Vec<String> = option_labels(question)
                .into_iter()
                .map(str::to_owned)
                .collect();
            buttons.push(DECLINE.into());
            let many = if question.multi_select == Some(true) {
                " (one choice here; several with `moonkale-service agent answer`)"
            } else {
                ""
            };
            let ask = Question {
                typ: MessageType::INFO,
                message: format!("Claude asks: {text}{many}"),
                buttons,
            };
            let tell =
                format!("Claude asks: {text} Use the code actions (Claude asks …) to answer.");
            self.ask_every_editor(Awaited::Question(id.clone(), index), ask, &tell);
        }
    }

    fn ask_tool(&mut self, approval: &Approval) {
        let id = approval_id(approval).to_owned();
        let (title, tool) = (&approval.title, &approval.tool);
        let destructive = approval.destructive;
        // "Always" does not apply to a destructive command: not offered.
        let mut buttons = vec!["Allow".to_owned()];
        if !destructive {
            buttons.push(format!("Always allow {tool} in this session"));
        }
        buttons.push("Deny".into());
        let ask = Question {
            typ: if destructive {
                MessageType::WARNING
            } else {
                MessageType::INFO
            },
            message: format!("Claude wants to run {title}"),
            buttons,
        };
        let tell = format!(
            "Claude wants to run {title}: use the code actions (Claude: allow / deny) to answer."
        );
        self.ask_every_editor(Awaited::Approval(id), ask, &tell);
    }

    /// The question was decided (by anyone) or withdrawn: the buttons still
    /// open in other editors are cancelled.
    pub(super) fn agent_approval_closed(&mut self, approval: &str) {
        let Some(index) = self
            .agent
            .approvals
            .iter()
            .position(|a| approval_id(a) == approval)
        else {
            return;
        };
        let closed = self.agent.approvals.remove(index);
        self.cancel_questions(&Awaited::Approval(approval.to_owned()));
        for index in 0..questions(&closed).len() {
            self.cancel_questions(&Awaited::Question(approval.to_owned(), index));
        }
        self.agent.partial_answers.remove(approval);
        self.approval_notify(closed, ApprovalStatus::Closed);
    }

    /// An editor pressed one of our approval buttons.
    pub(super) fn approval_button(&mut self, approval: String, title: Option<&str>) {
        let Some(title) = title else {
            return; // dismissed: the code actions still work
        };
        let is_plan = self
            .agent
            .approvals
            .iter()
            .any(|a| approval_id(a) == approval && is_plan(a));
        let answer = if is_plan {
            match PLAN_BUTTONS.iter().find(|(t, _)| *t == title) {
                Some((_, mode)) => Answer {
                    allow: mode.is_some(),
                    mode: *mode,
                    message: mode
                        .is_none()
                        .then(|| "The user wants to keep planning.".to_owned()),
                    ..Answer::default()
                },
                None => return,
            }
        } else {
            match title {
                "Allow" => Answer {
                    allow: true,
                    ..Answer::default()
                },
                "Deny" => Answer::default(),
                t if t.starts_with("Always allow") => Answer {
                    allow: true,
                    always: true,
                    ..Answer::default()
                },
                _ => return,
            }
        };
        self.forward_answer(approval, answer, None);
    }

    /// An editor chose an option of one question (or declined).
    pub(super) fn question_button(&mut self, approval: String, index: usize, title: Option<&str>) {
        let Some(title) = title else { return };
        if title == DECLINE {
            self.forward_answer(
                approval,
                Answer {
                    message: Some("The user declined to answer.".into()),
                    ..Answer::default()
                },
                None,
            );
            return;
        }
        // The first answer to this question wins: the others are withdrawn.
        self.cancel_questions(&Awaited::Question(approval.clone(), index));
        self.answer_one_question(&approval, index, json!(title), None);
    }

    /// Keeps the answer to question `index` and forwards them all once
    /// every question has one; `reply` (a command's) gets an error, a
    /// `null` while questions are still open, or the session's verdict.
    fn answer_one_question(
        &mut self,
        approval: &str,
        index: usize,
        answer: Value,
        reply: Option<Responder>,
    ) {
        let refuse = |reply: Option<Responder>, why: String| {
            if let Some(reply) = reply {
                reply.send(Err(ResponseError::invalid_params(why)));
            }
        };
        let Some(asked) = self
            .agent
            .approvals
            .iter()
            .find(|a| approval_id(a) == approval)
        else {
            if let Some(reply) = reply {
                reply.send(Err(crate::ports::not_waiting(approval)));
            }
            return;
        };
        let texts: Vec<String> = questions(asked)
            .iter()
            .map(|q| q.question.clone())
            .collect();
        if index >= texts.len() {
            return refuse(
                reply,
                format!("approval {approval} has no question {index}"),
            );
        }
        let partial = self
            .agent
            .partial_answers
            .entry(approval.to_owned())
            .or_default();
        partial.insert(index, answer);
        if partial.len() < texts.len() {
            if let Some(reply) = reply {
                reply.send(Ok(Value::Null)); // kept; the others are still open
            }
            return;
        }
        let partial = self
            .agent
            .partial_answers
            .remove(approval)
            .unwrap_or_default();
        let answers = partial
            .into_iter()
            .filter_map(|(i, a)| Some((texts.get(i)?.clone(), a)))
            .collect();
        self.forward_answer(
            approval.to_owned(),
            Answer {
                allow: true,
                answers: Some(answers),
                ..Answer::default()
            },
            reply,
        );
    }

    /// Hands the user's answer to its session, which judges it; `reply`
    /// (an editor's command) gets the session's verdict.
    fn forward_answer(&mut self, approval: String, mut answer: Answer, reply: Option<Responder>) {
        answer.by = "editor";
        let command = AgentCommand::Answer {
            approval,
            answer,
            reply,
        };
        let refused = match &self.agent.sender {
            Some(sender) => sender.try_send(command).err().map(|e| e.into_inner()),
            None => Some(command),
        };
        if let Some(AgentCommand::Answer { reply, .. }) = refused {
            tracing::warn!("the agent did not take an answer (busy or stopping)");
            if let Some(reply) = reply {
                reply.send(Err(ResponseError::new(
                    code::INTERNAL_ERROR,
                    "the agent is busy or stopping; try again",
                )));
            }
        }
    }

    /// `moonkale.answerApproval [{"approval", "allow", "always"?, "message"?}]`.
    /// The session answers `reply` once it has judged the answer; the hub
    /// only collects one question at a time.
    pub(super) fn answer_approval_command(&mut self, args: &[Value], reply: Responder) {
        let a: AnswerArguments = match args
            .first()
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
        {
            Some(a) => a,
            None => {
                let command = Command::AnswerApproval;
                return reply.send(Err(ResponseError::invalid_params(format!(
                    "{command} wants [{{\"approval\", \"allow\", \"always\"?, \"mode\"?, \"question\"?, \"choice\"?, \"answers\"?}}]"
                ))));
            }
        };
        if let (Some(index), Some(choice)) = (a.question, a.choice) {
            self.cancel_questions(&Awaited::Question(a.approval.clone(), index));
            return self.answer_one_question(&a.approval, index, json!(choice), Some(reply));
        }
        let mode = match a.mode.as_deref() {
            None => None,
            Some(m) => match PermissionMode::parse(m) {
                Some(mode) => Some(mode),
                None => {
                    return reply.send(Err(ResponseError::invalid_params(format!(
                        "{m:?} is not a permission mode"
                    ))));
                }
            },
        };
        self.forward_answer(
            a.approval,
            Answer {
                allow: a.allow.unwrap_or(false),
                always: a.always.unwrap_or(false),
                message: a.message,
                mode,
                answers: a.answers,
                ..Answer::default()
            },
            Some(reply),
        );
    }

    /// Code actions answering every waiting approval, offered on any file
    /// (Helix has no buttons).
    pub(super) fn approval_actions(&self) -> Vec<CodeAction> {
        let mut actions = Vec::new();
        let mut action = |label: String, arguments: AnswerArguments| {
            let arguments = serde_json::to_value(arguments).expect("arguments serialize");
            actions.push(command_action(
                label,
                CodeActionKind::QUICKFIX,
                Command::AnswerApproval,
                vec![arguments],
            ));
        };
        for a in &self.agent.approvals {
            let answer = AnswerArguments::to(approval_id(a));
            match &a.kind {
                ApprovalKind::Plan { .. } => {
                    for (label, mode) in PLAN_BUTTONS {
                        let label = format!("Claude: {} (the plan)", label.to_lowercase());
                        let arguments = match mode {
                            Some(m) => AnswerArguments {
                                allow: Some(true),
                                mode: Some(m.as_str().into()),
                                ..answer.clone()
                            },
                            None => AnswerArguments {
                                allow: Some(false),
                                message: Some("The user wants to keep planning.".into()),
                                ..answer.clone()
                            },
                        };
                        action(label, arguments);
                    }
                    continue;
                }
                ApprovalKind::Question { .. } => {
                    let answered = self.agent.partial_answers.get(&answer.approval);
                    for (index, q) in questions(a).iter().enumerate() {
                        if answered.is_some_and(|p| p.contains_key(&index)) {
                            continue;
                        }
                        let header = clip(q.header.as_deref().unwrap_or(&q.question), 60);
                        for label in option_labels(q) {
                            let arguments = AnswerArguments {
                                question: Some(index),
                                choice: Some(label.into()),
                                ..answer.clone()
                            };
                            action(format!("Claude asks {header}: {label}"), arguments);
                        }
                    }
                    let decline = AnswerArguments {
                        allow: Some(false),
                        message: Some("The user declined to answer.".into()),
                        ..answer
                    };
                    action("Claude asks: decline to answer".into(), decline);
                    continue;
                }
                ApprovalKind::Tool => {}
            }
            let (title, tool) = (&a.title, &a.tool);
            // "Always" does not apply to a destructive command: not offered.
            let mut choices = vec![(format!("Claude: allow {title}"), true, false)];
            if !a.destructive {
                choices.push((
                    format!("Claude: always allow {tool} in this session"),
                    true,
                    true,
                ));
            }
            choices.push((format!("Claude: deny {title}"), false, false));
            for (label, allow, always) in choices {
                let arguments = AnswerArguments {
                    allow: Some(allow),
                    always: Some(always),
                    ..answer.clone()
                };
                action(label, arguments);
            }
        }
        actions
    }

    /// `$/progress` in editors that take it; the token is created first.
    pub(super) fn agent_progress(&mut self, session: &str, progress: AgentProgress) {
        let token = format!("moonkale-agent-{session}");
        let editors: Vec<EditorId> = self
            .editors
            .iter()
            .filter(|(_, ed)| ed.info.role == Role::Editor && ed.info.shows_progress)
            .map(|(id, _)| *id)
            .collect();
        for editor in editors {
            let key = (editor, token.clone());
            let token = NumberOrString::String(token.clone());
            let value = match &progress {
                AgentProgress::Begin(message) => {
                    if !self.agent.progress_tokens.contains(&key) {
                        let create = WorkDoneProgressCreateParams {
                            token: token.clone(),
                        };
                        self.send_request::<WorkDoneProgressCreate>(editor, create);
                        self.agent.progress_tokens.insert(key);
                    }
                    WorkDoneProgress::Begin(WorkDoneProgressBegin {
                        title: "Claude".into(),
                        cancellable: Some(false),
                        message: Some(message.clone()),
                        percentage: None,
                    })
                }
                AgentProgress::Report(message) => {
                    if !self.agent.progress_tokens.contains(&key) {
                        continue;
                    }
                    WorkDoneProgress::Report(WorkDoneProgressReport {
                        cancellable: None,
                        message: Some(message.clone()),
                        percentage: None,
                    })
                }
                AgentProgress::End(message) => {
                    if !self.agent.progress_tokens.remove(&key) {
                        continue;
                    }
                    WorkDoneProgress::End(WorkDoneProgressEnd {
                        message: Some(message.clone()),
                    })
                }
            };
            let value = ProgressParamsValue::WorkDone(value);
            self.notify::<Progress>(editor, ProgressParams { token, value });
        }
    }

    /// The editor tools of the agent's MCP server. Paths were confined to
    /// the workspace by the agent.
    pub(super) fn agent_tool(&mut self, call: EditorToolCall) -> Result<Value, ResponseError> {
        // The hosted CLI runs as the user, unjailed: what it shares with
        // the IDE tools it sees as a CLI on the host's IDE port does.
        let ide = match call {
            EditorToolCall::GetOpenEditors => IdeToolCall::GetOpenEditors,
            EditorToolCall::GetCurrentSelection => IdeToolCall::GetCurrentSelection,
            EditorToolCall::GetLatestSelection => IdeToolCall::GetLatestSelection,
            EditorToolCall::GetDiagnostics { uri } => IdeToolCall::GetDiagnostics { uri },
            EditorToolCall::GetWorkspaceFolders => IdeToolCall::GetWorkspaceFolders,
            EditorToolCall::ReadBuffer { file_path } => {
                return Ok(tool_result(self.read_buffer(&file_path)));
            }
            EditorToolCall::OpenFile {
                file_path,
                start_line,
                end_line,
            } => {
                return Ok(tool_result(
                    self.open_file_lines(&file_path, start_line, end_line),
                ));
            }
        };
        Ok(tool_result(self.ide_answer(
            IdeClientId(0),
            IdeScope::Host,
            ide,
        )))
    }

    /// `readBuffer`: the editors' latest buffer of `path`.
    fn read_buffer(&self, path: &Path) -> CallToolResult {
        let Some(uri) = super::file_uri(path) else {
            return CallToolResult::error("filePath must be an absolute path");
        };
        match self.latest(&uri) {
            Some((_, open)) => {
                let (text, cut) = answer_sized(open.doc.text());
                let buffer = Buffer {
                    file_path: path.display().to_string(),
                    is_dirty: open.doc.is_dirty(),
                    version: open.doc.version(),
                    text,
                };
                let buffer = serde_json::to_string(&buffer).expect("a buffer serializes");
                match cut {
                    None => CallToolResult::text(buffer),
                    Some(note) => CallToolResult::texts([buffer, note]),
                }
            }
            None => CallToolResult::error(format!(
                "{} is not open in any editor; read it from disk instead",
                path.display()
            )),
        }
    }

    /// The agent's `openFile`: shows `path` in the active editor, selecting
    /// lines `start..=end` (1-based on the wire; 0-based, and at most u32,
    /// in LSP).
    fn open_file_lines(
        &mut self,
        path: &Path,
        start: Option<u64>,
        end: Option<u64>,
    ) -> CallToolResult {
        let Some(uri) = super::file_uri(path) else {
            return CallToolResult::error("filePath must be an absolute path");
        };
        let line = |l: u64| u32::try_from(l.saturating_sub(1)).unwrap_or(u32::MAX);
        let selection = start.map(line).map(|start| {
            let end = end.map(line).unwrap_or(start).max(start);
            Range::new(
                Position::new(start, 0),
                Position::new(end.saturating_add(1), 0),
            )
        });
        let Some((editor, _)) = self.active_editor() else {
            return CallToolResult::error("no editor is attached");
        };
        self.show_document(editor, uri, true, selection);
        CallToolResult::text(format!("Opened {}", path.display()))
    }
}

/// A message box's text and buttons (`window/showMessageRequest`).
#[derive(Clone)]
struct Question {
    typ: MessageType,
    message: String,
    buttons: Vec<String>,
}

/// `moonkale.answerApproval`'s argument: the code actions write it, the
/// command reads it. Fields a code action does not set are left out.
#[derive(Clone, Serialize, Deserialize)]
struct AnswerArguments {
    approval: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    allow: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    always: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// A plan approved: `default` or `acceptEdits`.
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    /// One question answered: its index and the chosen label.
    #[serde(skip_serializing_if = "Option::is_none")]
    question: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    choice: Option<String>,
    /// Every question answered at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    answers: Option<serde_json::Map<String, Value>>,
}

impl AnswerArguments {
    /// An answer to `approval` that says nothing yet.
    fn to(approval: &str) -> AnswerArguments {
        AnswerArguments {
            approval: approval.to_owned(),
            allow: None,
            always: None,
            message: None,
            mode: None,
            question: None,
            choice: None,
            answers: None,
        }
    }
}

/// A buffer's text as a tool answer may carry it: whole, or its first lines
/// up to [`super::ide::MAX_ANSWER_BYTES`] with a note saying where it was
/// cut (a buffer can hold up to the workspace's cap; an answer that large
/// would cost the session its CLI's context, or its connection).
fn answer_sized(rope: &ropey::Rope) -> (String, Option<String>) {
    let cap = super::ide::MAX_ANSWER_BYTES;
    let total = rope.len_bytes();
    if total <= cap {
        return (rope.to_string(), None);
    }
    let lines = rope.len_lines();
    let line = rope.byte_to_line(cap);
    let shown = match rope.line_to_byte(line) {
        // One line longer than the cap: cut inside it, on a character.
        0 => rope.slice(..rope.byte_to_char(cap)).to_string(),
        end => rope.byte_slice(..end).to_string(),
    };
    let note = format!(
        "Cut: the buffer holds {total} bytes in {lines} lines, more than the {cap} bytes an answer carries; \
         this is its first {} bytes ({}). Read the rest of the file from disk (unsaved changes past that point are not shown).",
        shown.len(),
        match line {
            0 => "part of line 1".to_owned(),
            n => format!("lines 1 to {n}"),
        },
    );
    (shown, Some(note))
}

#[cfg(test)]
mod tests {
    use super::answer_sized;
    use crate::workspace::ide::MAX_ANSWER_BYTES;

    /// `readBuffer` of a buffer over the answer's cap: whole lines up to
    /// the cap and a note saying where it was cut; a single overlong line
    /// is cut on a character.
    #[test]
    fn a_large_buffer_is_cut_on_a_line_with_a_note() {
        let small = ropey::Rope::from_str("one\ntwo\n");
        assert_eq!(answer_sized(&small), ("one\ntwo\n".to_owned(), None));

        let line = format!("{}\n", "x".repeat(99));
        let big = ropey::Rope::from_str(&line.repeat(15_000));
        let (text, note) = answer_sized(&big);
        let shown = MAX_ANSWER_BYTES / 100;
        assert_eq!(text, line.repeat(shown));
        let note = note.expect("a note");
        assert!(
            note.contains("1500000 bytes in 15001 lines")
                && note.contains(&format!("lines 1 to {shown}")),
            "{note}"
        );

        let one_line = ropey::Rope::from_str(&"é".repeat(MAX_ANSWER_BYTES));
        let (text, note) = answer_sized(&one_line);
        assert_eq!(text.len(), MAX_ANSWER_BYTES);
        assert!(note.unwrap().contains("part of line 1"));
    }
}
