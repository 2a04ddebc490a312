//! The hub's side of the agent host: forwarding `moonkale/agent/*` requests,
//! who is subscribed to which session, permission questions shown in every
//! editor, `$/progress`, and the editor tools the agent offers the CLI.
//!
//! The sessions themselves live in the agent host (the service's `agent`); the hub
//! only knows the approvals still waiting, so it can show them as code
//! actions and route an editor's answer back.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;
use serde_json::{Value, json};

use super::ide::{error_result, text_result};
use super::{Awaited, Workspace, parse_params};
use crate::ports::{AgentCommand, AgentPort, Answer, Request, forward};
use crate::{AgentProgress, EditorId, IdeClientId, Responder, Role, Topic};
use moonkale_protocol::PermissionMode;
use moonkale_protocol::jsonrpc::{self as message, Params, ResponseError, code};

pub const ANSWER_APPROVAL_COMMAND: &str = "moonkale.answerApproval";
/// `moonkale.trustWorkspace [{"trusted": bool}?]`: the user's trust decision.
pub const TRUST_COMMAND: &str = "moonkale.trustWorkspace";

/// The hub's agent state.
#[derive(Default)]
pub(crate) struct AgentLink {
    sender: Option<AgentPort>,
    /// Approval objects waiting for the user, oldest first.
    approvals: Vec<Value>,
    /// Answers given so far to the questions of `AskUserQuestion`
    /// approvals asked one question at a time (buttons, code actions):
    /// approval → question index → the answer.
    partial_answers: HashMap<String, BTreeMap<usize, Value>>,
    /// `$/progress` tokens created in an editor and not ended yet.
    progress_tokens: HashSet<(EditorId, String)>,
    /// Whether the user trusts the workspace, as the agent host last said.
    trusted: Option<bool>,
}

fn approval_id(approval: &Value) -> &str {
    approval["approval"].as_str().unwrap_or_default()
}

fn approval_kind(approval: &Value) -> &str {
    approval["kind"].as_str().unwrap_or("tool")
}

/// The questions of an `AskUserQuestion` approval.
fn questions(approval: &Value) -> &[Value] {
    approval["questions"].as_array().map_or(&[], Vec::as_slice)
}

/// The option labels of one question.
fn option_labels(question: &Value) -> Vec<&str> {
    question["options"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["label"].as_str())
        .collect()
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
        if let "moonkale/agent/subscribe" | "moonkale/agent/unsubscribe" = method {
            #[derive(Deserialize)]
            struct P {
                session: Option<String>,
            }
            let p: P = match parse_params(&params) {
                Ok(p) => p,
                Err(e) => return reply.send(Err(e)),
            };
            let topic = p.session.map_or(Topic::AllSessions, Topic::Session);
            if method.ends_with("/subscribe") {
                self.subscriptions.subscribe(editor, topic);
            } else {
                self.subscriptions.unsubscribe(editor, &topic);
            }
            return reply.send(Ok(json!({})));
        }
        let request = Request {
            editor,
            method: method.to_owned(),
            params,
            reply,
        };
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
                self.notify_editor(
                    editor,
                    "window/showMessage",
                    json!({"type": 3, "message": message}),
                );
            }
        }
    }

    /// `moonkale.trustWorkspace`: the agent host keeps the decision (it
    /// does the file IO) and answers.
    pub(super) fn trust_command(&mut self, editor: EditorId, params: &Params, reply: Responder) {
        let args = parse_params::<lsp_types::ExecuteCommandParams>(params)
            .map(|p| p.arguments)
            .unwrap_or_default();
        let trusted = args
            .first()
            .and_then(|a| a.get("trusted"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let params = message::params(&json!({"trusted": trusted}));
        self.agent_request(editor, "moonkale/agent/trust", params, reply)
    }

    /// "Trust this workspace", offered while it is not trusted.
    pub(super) fn trust_action(&self) -> Option<Value> {
        if self.agent.trusted != Some(false) {
            return None;
        }
        let title = "Moonkale: trust this workspace (lets its .claude settings, hooks and .mcp.json servers run in Claude Code sessions)";
        Some(json!({
            "title": title,
            "kind": "source",
            "command": {"title": title, "command": TRUST_COMMAND, "arguments": [{"trusted": true}]},
        }))
    }

    /// Sends `method` to every connection subscribed to `session`.
    fn agent_notify(&self, session: &str, method: &str, params: Value) {
        self.publish(&Topic::Session(session.to_owned()), method, params);
    }

    /// A permission question: buttons where the editor has them, a message
    /// otherwise (the code actions and the command work everywhere), and
    /// the front door's notification.
    pub(super) fn agent_approval(&mut self, approval: Value) {
        match approval_kind(&approval) {
            "plan" => self.ask_plan(&approval),
            "question" => self.ask_questions(&approval),
            _ => self.ask_tool(&approval),
        }
        let session = approval["session"].as_str().unwrap_or_default().to_owned();
        self.agent_notify(
            &session,
            "moonkale/agent/approval",
            json!({"session": session, "approval": approval, "status": "pending"}),
        );
        self.agent.approvals.push(approval);
    }

    /// Shows a message with buttons in every editor that has them, else a
    /// plain message pointing at the code actions.
    fn ask_every_editor(&mut self, awaited: Awaited, ask: Value, tell: &str) {
        for (editor, buttons) in self.editors_with_buttons() {
            if buttons {
                let asked = self.request_editor(editor, "window/showMessageRequest", ask.clone());
                self.awaited_answers
                    .insert((editor, asked), awaited.clone());
            } else {
                self.notify_editor(
                    editor,
                    "window/showMessage",
                    json!({"type": 3, "message": tell}),
                );
            }
        }
    }

    /// The plan, and a choice of how to go on.
    fn ask_plan(&mut self, approval: &Value) {
        let id = approval_id(approval).to_owned();
        let plan = clip(approval["plan"].as_str().unwrap_or_default(), 1500);
        let actions: Vec<Value> = PLAN_BUTTONS
            .iter()
            .map(|(title, _)| json!({"title": title}))
            .collect();
        let ask = json!({
            "type": 3,
            "message": format!("Claude's plan is ready:\n\n{plan}"),
            "actions": actions,
        });
        let tell = format!(
            "Claude's plan is ready:\n\n{plan}\n\nUse the code actions (Claude: approve the plan …) to answer."
        );
        self.ask_every_editor(Awaited::Approval(id), ask, &tell);
    }

    /// Each question of an `AskUserQuestion`, with its options as buttons.
    fn ask_questions(&mut self, approval: &Value) {
        let id = approval_id(approval).to_owned();
        for (index, question) in questions(approval).iter().enumerate() {
            let text = clip(question["question"].as_str().unwrap_or_default(), 500);
            let mut actions: Vec<Value> = option_labels(question)
                .into_iter()
                .map(|label| json!({"title": label}))
                .collect();
            actions.push(json!({"title": DECLINE}));
            let many = if question["multiSelect"] == true {
                " (one choice here; several with `moonkale-service agent answer`)"
            } else {
                ""
            };
            let ask = json!({
                "type": 3,
                "message": format!("Claude asks: {text}{many}"),
                "actions": actions,
            });
            let tell =
                format!("Claude asks: {text} Use the code actions (Claude asks …) to answer.");
            self.ask_every_editor(Awaited::Question(id.clone(), index), ask, &tell);
        }
    }

    fn ask_tool(&mut self, approval: &Value) {
        let id = approval_id(approval).to_owned();
        let title = approval["title"].as_str().unwrap_or_default().to_owned();
        let tool = approval["tool"].as_str().unwrap_or_default().to_owned();
        let destructive = approval["destructive"] == true;
        for (editor, buttons) in self.editors_with_buttons() {
            if buttons {
                // "Always" does not apply to a destructive command: not offered.
                let mut actions = vec![json!({"title": "Allow"})];
                if !destructive {
                    actions.push(json!({"title": format!("Always allow {tool} in this session")}));
                }
                actions.push(json!({"title": "Deny"}));
                let ask = json!({
                    "type": if destructive { 2 } else { 3 },
                    "message": format!("Claude wants to run {title}"),
                    "actions": actions,
                });
                let asked = self.request_editor(editor, "window/showMessageRequest", ask);
                self.awaited_answers
                    .insert((editor, asked), Awaited::Approval(id.clone()));
            } else {
                let tell = format!(
                    "Claude wants to run {title}: use the code actions (Claude: allow / deny) to answer."
                );
                self.notify_editor(
                    editor,
                    "window/showMessage",
                    json!({"type": 3, "message": tell}),
                );
            }
        }
    }

    /// The question was decided (by anyone) or withdrawn: the buttons still
    /// open in other editors are cancelled.
    pub(super) fn agent_approval_closed(&mut self, session: &str, approval: &str) {
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
        self.agent_notify(
            session,
            "moonkale/agent/approval",
            json!({"session": session, "approval": closed, "status": "closed"}),
        );
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
            .any(|a| approval_id(a) == approval && approval_kind(a) == "plan");
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
        self.forward_answer(approval, answer);
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
            );
            return;
        }
        // The first answer to this question wins: the others are withdrawn.
        self.cancel_questions(&Awaited::Question(approval.clone(), index));
        let _ = self.answer_one_question(&approval, index, json!(title));
    }

    /// Keeps the answer to question `index` and forwards them all once
    /// every question has one.
    fn answer_one_question(
        &mut self,
        approval: &str,
        index: usize,
        answer: Value,
    ) -> Result<(), ResponseError> {
        let Some(asked) = self
            .agent
            .approvals
            .iter()
            .find(|a| approval_id(a) == approval)
        else {
            return Err(ResponseError::invalid_params(format!(
                "approval {approval} is not waiting (answered already?)"
            )));
        };
        let texts: Vec<String> = questions(asked)
            .iter()
            .map(|q| q["question"].as_str().unwrap_or_default().to_owned())
            .collect();
        if index >= texts.len() {
            return Err(ResponseError::invalid_params(format!(
                "approval {approval} has no question {index}"
            )));
        }
        let partial = self
            .agent
            .partial_answers
            .entry(approval.to_owned())
            .or_default();
        partial.insert(index, answer);
        if partial.len() < texts.len() {
            return Ok(());
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
        );
        Ok(())
    }

    fn forward_answer(&mut self, approval: String, mut answer: Answer) {
        answer.by = "editor";
        if let Some(sender) = &self.agent.sender
            && sender
                .try_send(AgentCommand::Answer { approval, answer })
                .is_err()
        {
            tracing::warn!("the agent did not take an answer (busy or stopping)");
        }
    }

    /// `moonkale.answerApproval [{"approval", "allow", "always"?, "message"?}]`.
    pub(super) fn answer_approval_command(
        &mut self,
        args: &[Value],
    ) -> Result<Value, ResponseError> {
        #[derive(Deserialize)]
        struct A {
            approval: String,
            #[serde(default)]
            allow: bool,
            #[serde(default)]
            always: bool,
            message: Option<String>,
            /// A plan approved: `default` or `acceptEdits`.
            mode: Option<String>,
            /// One question answered: its index and the chosen label.
            question: Option<usize>,
            choice: Option<String>,
            /// Every question answered at once.
            answers: Option<serde_json::Map<String, Value>>,
        }
        let a: A = args
            .first()
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| {
                ResponseError::invalid_params(format!(
                    "{ANSWER_APPROVAL_COMMAND} wants [{{\"approval\", \"allow\", \"always\"?, \"mode\"?, \"question\"?, \"choice\"?, \"answers\"?}}]"
                ))
            })?;
        if !self
            .agent
            .approvals
            .iter()
            .any(|p| approval_id(p) == a.approval)
        {
            return Err(ResponseError::invalid_params(format!(
                "approval {} is not waiting (answered already?)",
                a.approval
            )));
        }
        if let (Some(index), Some(choice)) = (a.question, a.choice) {
            self.cancel_questions(&Awaited::Question(a.approval.clone(), index));
            self.answer_one_question(&a.approval, index, json!(choice))?;
            return Ok(Value::Null);
        }
        let mode = match a.mode.as_deref() {
            None => None,
            Some(m) => Some(PermissionMode::parse(m).ok_or_else(|| {
                ResponseError::invalid_params(format!("{m:?} is not a permission mode"))
            })?),
        };
        self.forward_answer(
            a.approval,
            Answer {
                allow: a.allow,
                always: a.always,
                message: a.message,
                mode,
                answers: a.answers,
                ..Answer::default()
            },
        );
        Ok(Value::Null)
    }

    /// Code actions answering every waiting approval, offered on any file
    /// (Helix has no buttons).
    pub(super) fn approval_actions(&self) -> Vec<Value> {
        let mut actions = Vec::new();
        let mut action = |label: String, arguments: Value| {
            actions.push(json!({
                "title": label,
                "kind": "quickfix",
                "command": {
                    "title": label,
                    "command": ANSWER_APPROVAL_COMMAND,
                    "arguments": [arguments],
                },
            }));
        };
        for a in &self.agent.approvals {
            let id = approval_id(a);
            match approval_kind(a) {
                "plan" => {
                    for (label, mode) in PLAN_BUTTONS {
                        let label = format!("Claude: {} (the plan)", label.to_lowercase());
                        let arguments = match mode {
                            Some(m) => json!({"approval": id, "allow": true, "mode": m.as_str()}),
                            None => {
                                json!({"approval": id, "allow": false, "message": "The user wants to keep planning."})
                            }
                        };
                        action(label, arguments);
                    }
                    continue;
                }
                "question" => {
                    let answered = self.agent.partial_answers.get(id);
                    for (index, q) in questions(a).iter().enumerate() {
                        if answered.is_some_and(|p| p.contains_key(&index)) {
                            continue;
                        }
                        let header = q["header"]
                            .as_str()
                            .or(q["question"].as_str())
                            .map(|h| clip(h, 60))
                            .unwrap_or_default();
                        for label in option_labels(q) {
                            action(
                                format!("Claude asks {header}: {label}"),
                                json!({"approval": id, "question": index, "choice": label}),
                            );
                        }
                    }
                    action(
                        "Claude asks: decline to answer".into(),
                        json!({"approval": id, "allow": false, "message": "The user declined to answer."}),
                    );
                    continue;
                }
                _ => {}
            }
            let title = a["title"].as_str().unwrap_or_default();
            let tool = a["tool"].as_str().unwrap_or_default();
            // "Always" does not apply to a destructive command: not offered.
            let mut choices = vec![(format!("Claude: allow {title}"), true, false)];
            if a["destructive"] != true {
                choices.push((
                    format!("Claude: always allow {tool} in this session"),
                    true,
                    true,
                ));
            }
            choices.push((format!("Claude: deny {title}"), false, false));
            for (label, allow, always) in choices {
                action(
                    label,
                    json!({"approval": id, "allow": allow, "always": always}),
                );
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
            let value = match &progress {
                AgentProgress::Begin(message) => {
                    if !self.agent.progress_tokens.contains(&key) {
                        self.request_editor(
                            editor,
                            "window/workDoneProgress/create",
                            json!({"token": token}),
                        );
                        self.agent.progress_tokens.insert(key);
                    }
                    json!({"kind": "begin", "title": "Claude", "message": message, "cancellable": false})
                }
                AgentProgress::Report(message) => {
                    if !self.agent.progress_tokens.contains(&key) {
                        continue;
                    }
                    json!({"kind": "report", "message": message})
                }
                AgentProgress::End(message) => {
                    if !self.agent.progress_tokens.remove(&key) {
                        continue;
                    }
                    json!({"kind": "end", "message": message})
                }
            };
            self.notify_editor(
                editor,
                "$/progress",
                json!({"token": token, "value": value}),
            );
        }
    }

    /// The editor tools of the agent's MCP server. Paths were confined to
    /// the workspace by the agent.
    pub(super) fn agent_tool(&mut self, tool: &str, args: &Value) -> Result<Value, ResponseError> {
        match tool {
            "readBuffer" => {
                let path = args["filePath"].as_str().unwrap_or_default();
                let Some(uri) = super::file_uri(std::path::Path::new(path)) else {
                    return Ok(error_result("filePath must be an absolute path"));
                };
                Ok(match self.latest(&uri) {
                    Some((_, open)) => json!({"content": [{"type": "text", "text": json!({
                        "filePath": path,
                        "isDirty": open.doc.is_dirty(),
                        "version": open.doc.version(),
                        "text": open.doc.text().to_string(),
                    }).to_string()}]}),
                    None => error_result(format!(
                        "{path} is not open in any editor; read it from disk instead"
                    )),
                })
            }
            "openFile" => {
                let path = args["filePath"].as_str().unwrap_or_default();
                let Some(uri) = super::file_uri(std::path::Path::new(path)) else {
                    return Ok(error_result("filePath must be an absolute path"));
                };
                let line = |k: &str| {
                    args.get(k)
                        .and_then(Value::as_u64)
                        .map(|l| l.saturating_sub(1))
                };
                let mut params = json!({"uri": uri, "takeFocus": true});
                if let Some(start) = line("startLine") {
                    let end = line("endLine").unwrap_or(start).max(start) + 1;
                    params["selection"] = json!({
                        "start": {"line": start, "character": 0},
                        "end": {"line": end, "character": 0},
                    });
                }
                let Some((editor, _)) = self.active_editor() else {
                    return Ok(error_result("no editor is attached"));
                };
                self.request_editor(editor, "window/showDocument", params);
                Ok(text_result(format!("Opened {path}")))
            }
            "getOpenEditors"
            | "getCurrentSelection"
            | "getLatestSelection"
            | "getDiagnostics"
            | "getWorkspaceFolders" => self.ide_tool(IdeClientId(0), tool, args),
            _ => Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                format!("Tool not found: {tool}"),
            )),
        }
    }
}
