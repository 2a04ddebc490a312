//! One session as one ACP client follows it (pure): its view, the prompt
//! waiting for its turn to end, and the permission questions asked.

use std::collections::VecDeque;

use moonkale_protocol::agent::{
    AnswerParams, Approval, ApprovalKind, Event, LoginNeeded, SessionEvent, SessionState,
};
use moonkale_protocol::jsonrpc::RequestId;
use serde_json::{Map, Value, json};

use super::prompt;
use super::translate::AcpView;

/// A `session/prompt` whose reply waits for the end of its turn.
#[derive(Debug)]
pub struct PendingPrompt {
    /// The client's request id.
    pub id: RequestId,
    /// The `seq` of the stored `prompt` event.
    pub seq: u64,
    /// `session/cancel` came: the turn ends `cancelled`.
    pub cancelled: bool,
}

/// How a prompt's turn ended: ACP's stop reason, or the error to answer.
pub type TurnOutcome = Result<&'static str, String>;

#[derive(Debug)]
pub struct Attached {
    pub view: AcpView,
    pub prompt: Option<PendingPrompt>,
    /// The newest event seen: older ones (replayed already) are skipped.
    last_seq: Option<u64>,
    /// Prompts stored whose turn has not ended, oldest first: a `result`
    /// ends the oldest.
    open_turns: VecDeque<u64>,
    finished: Option<(RequestId, TurnOutcome)>,
}

impl Attached {
    pub fn new(view: AcpView) -> Attached {
        Attached {
            view,
            prompt: None,
            last_seq: None,
            open_turns: VecDeque::new(),
            finished: None,
        }
    }

    /// What logs in the session's CLI, when a turn failed for want of it.
    pub fn login_needed(&self, why: &str) -> Option<LoginNeeded> {
        let version = self.view.session.cli_version.as_deref();
        LoginNeeded::said_in(why).then(|| LoginNeeded::for_cli(version, why))
    }

    /// The first `seq` not seen yet.
    pub fn next_seq(&self) -> u64 {
        self.last_seq.map_or(0, |s| s + 1)
    }

    /// Whether the event was seen already (in a replay).
    pub fn seen(&self, seq: u64) -> bool {
        self.last_seq.is_some_and(|last| seq <= last)
    }

    pub fn text(&mut self, text: &str, thinking: bool, offset: u64) -> Vec<Value> {
        self.view.text(text, thinking, offset)
    }

    /// A stored event: the updates it shows, once; a turn it ends is
    /// taken by [`Attached::turn_finished`].
    pub fn event(&mut self, event: &Event) -> Vec<Value> {
        if self.seen(event.seq) {
            return Vec::new();
        }
        self.last_seq = Some(event.seq);
        match &event.event {
            SessionEvent::Prompt(_) => self.open_turns.push_back(event.seq),
            SessionEvent::Cli(message) if message["type"] == "result" => {
                let ended = self.open_turns.pop_front();
                if let Some(p) = &self.prompt
                    && ended.is_none_or(|seq| seq >= p.seq)
                {
                    let p = self.prompt.take().expect("checked");
                    let outcome = prompt::stop_reason(message, p.cancelled);
                    self.finished = Some((p.id, outcome));
                }
            }
            SessionEvent::State(state) if state.state == SessionState::Failed => {
                // The CLI ended without a `result` (it died, or never
                // started): every open turn is over.
                self.open_turns.clear();
                if let Some(p) = self.prompt.take() {
                    let why = state
                        .error
                        .as_deref()
                        .unwrap_or("the turn failed")
                        .to_owned();
                    self.finished = Some((
                        p.id,
                        if p.cancelled {
                            Ok("cancelled")
                        } else {
                            Err(why)
                        },
                    ));
                }
            }
            _ => {}
        }
        self.view.event(event)
    }

    /// The prompt whose turn the last event ended, with how it ended.
    pub fn turn_finished(&mut self) -> Option<(RequestId, TurnOutcome)> {
        self.finished.take()
    }
}

/// A `session/request_permission` sent for one approval; a question of
/// several is asked one question at a time. `AskUserQuestion` goes to a
/// client that takes forms as one `elicitation/create` instead.
#[derive(Debug)]
pub struct PermissionAsked {
    pub session: String,
    pub approval: Approval,
    tool_call: Value,
    /// Asked as a form (`elicitation/create`).
    form: bool,
    /// The question being asked (a question approval).
    question: usize,
    answers: Map<String, Value>,
}

/// What an answer to a permission request leads to.
pub enum Answered {
    /// The service's answer to the approval.
    Done(AnswerParams),
    /// The next question of the same approval.
    Next(PermissionAsked),
}

const ALLOW: &str = "allow";
const ALWAYS: &str = "always";
const REJECT: &str = "reject";

impl PermissionAsked {
    /// `forms`: the client takes `elicitation/create` forms.
    pub fn new(
        session: &str,
        approval: Approval,
        tool_call: Value,
        forms: bool,
    ) -> PermissionAsked {
        let form = forms && matches!(approval.kind, ApprovalKind::Question { .. });
        PermissionAsked {
            session: session.to_owned(),
            approval,
            tool_call,
            form,
            question: 0,
            answers: Map::new(),
        }
    }

    /// The client method that asks it.
    pub fn method(&self) -> &'static str {
        if self.form {
            "elicitation/create"
        } else {
            "session/request_permission"
        }
    }

    /// The options: allow once, always (never for a destructive command),
    /// reject; a plan's modes to go on in; a question's choices.
    fn options(&self) -> Vec<Value> {
        let option =
            |id: &str, name: &str, kind: &str| json!({"optionId": id, "name": name, "kind": kind});
        match &self.approval.kind {
            ApprovalKind::Tool => {
                let mut options = vec![option(ALLOW, "Allow", "allow_once")];
                if !self.approval.destructive {
                    let name = format!("Always allow {} in this session", self.approval.tool);
                    options.push(option(ALWAYS, &name, "allow_always"));
                }
                options.push(option(REJECT, "Reject", "reject_once"));
                options
            }
            ApprovalKind::Plan { choices, .. } => {
                let mut options: Vec<Value> = choices
                    .iter()
                    .map(|c| option(&format!("mode:{}", c.mode), &c.label, "allow_once"))
                    .collect();
                options.push(option(REJECT, "Keep planning", "reject_once"));
                options
            }
            ApprovalKind::Question { questions } => {
                let mut options: Vec<Value> = questions
                    .get(self.question)
                    .and_then(|q| q.options.as_ref())
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, o)| option(&format!("option:{i}"), &o.label, "allow_once"))
                    .collect();
                options.push(option(REJECT, "Decline to answer", "reject_once"));
                options
            }
        }
    }

    /// The request's params.
    pub fn params(&self) -> Value {
        if self.form {
            return self.form_params();
        }
        let mut tool_call = self.tool_call.clone();
        if let ApprovalKind::Question { questions } = &self.approval.kind
            && let Some(q) = questions.get(self.question)
        {
            tool_call["title"] = json!(q.question);
        }
        json!({"sessionId": self.session, "toolCall": tool_call, "options": self.options()})
    }

    /// A question approval as one form: a field per question, its
    /// options to pick from (several for a multi-select question).
    fn form_params(&self) -> Value {
        let ApprovalKind::Question { questions } = &self.approval.kind else {
            unreachable!("only questions are forms");
        };
        let mut properties = Map::new();
        let mut required = Vec::new();
        for (i, q) in questions.iter().enumerate() {
            let choices: Vec<Value> = q
                .options
                .iter()
                .flatten()
                .map(|o| {
                    let mut choice = json!({"const": o.label, "title": o.label});
                    if let Some(d) = &o.description {
                        choice["description"] = json!(d);
                    }
                    choice
                })
                .collect();
            let title = q.header.clone().unwrap_or_else(|| q.question.clone());
            let field = if q.multi_select == Some(true) {
                json!({"type": "array", "title": title, "description": q.question,
                       "items": {"anyOf": choices}})
            } else {
                json!({"type": "string", "title": title, "description": q.question, "oneOf": choices})
            };
            properties.insert(format!("q{i}"), field);
            required.push(json!(format!("q{i}")));
        }
        json!({
            "sessionId": self.session,
            "toolCallId": self.tool_call["toolCallId"],
            "mode": "form",
            "message": self.approval.title,
            "requestedSchema": {"type": "object", "properties": properties, "required": required},
        })
    }

    /// The client's answer: a permission's `{"outcome": {"outcome":
    /// "selected", "optionId"}}` (or `cancelled`), a form's `{"action":
    /// "accept", "content"}` (or `decline`, `cancel`); anything else counts
    /// as a rejection.
    pub fn answer(self, result: &Value) -> Answered {
        if self.form {
            return self.form_answer(result);
        }
        self.option_answer(&result["outcome"])
    }

    fn form_answer(self, result: &Value) -> Answered {
        let id = self.approval.approval.clone();
        let ApprovalKind::Question { questions } = &self.approval.kind else {
            unreachable!("only questions are forms");
        };
        let content = &result["content"];
        let mut answers = Map::new();
        for (i, q) in questions.iter().enumerate() {
            let answer = &content[format!("q{i}")];
            let ok = match answer {
                Value::String(s) => !s.is_empty(),
                Value::Array(items) => !items.is_empty() && items.iter().all(Value::is_string),
                _ => false,
            };
            if !ok {
                break;
            }
            answers.insert(q.question.clone(), answer.clone());
        }
        if result["action"] == "accept" && answers.len() == questions.len() {
            Answered::Done(AnswerParams::allow(id).with_answers(answers))
        } else {
            Answered::Done(AnswerParams::deny(id).with_message("The user declined to answer."))
        }
    }

    fn option_answer(mut self, outcome: &Value) -> Answered {
        let id = self.approval.approval.clone();
        let chosen = (outcome["outcome"] == "selected")
            .then(|| outcome["optionId"].as_str())
            .flatten();
        let deny = |why: &str| Answered::Done(AnswerParams::deny(id.clone()).with_message(why));
        let Some(chosen) = chosen else {
            return deny("The user cancelled the question.");
        };
        match &self.approval.kind {
            ApprovalKind::Tool => match chosen {
                ALLOW => Answered::Done(AnswerParams::allow(id)),
                ALWAYS if !self.approval.destructive => {
                    Answered::Done(AnswerParams::allow(id).always())
                }
                _ => deny("The user rejected this."),
            },
            ApprovalKind::Plan { choices, .. } => {
                let mode = chosen.strip_prefix("mode:");
                match choices.iter().find(|c| Some(c.mode.as_str()) == mode) {
                    Some(choice) => Answered::Done(AnswerParams::allow(id).with_mode(choice.mode)),
                    None => deny("The user wants to keep planning."),
                }
            }
            ApprovalKind::Question { questions } => {
                let question = &questions[self.question.min(questions.len().saturating_sub(1))];
                let label = chosen
                    .strip_prefix("option:")
                    .and_then(|i| i.parse::<usize>().ok())
                    .and_then(|i| question.options.as_ref()?.get(i))
                    .map(|o| o.label.clone());
                let Some(label) = label else {
                    return deny("The user declined to answer.");
                };
                self.answers
                    .insert(question.question.clone(), Value::String(label));
                self.question += 1;
                if self.question < questions.len() {
                    Answered::Next(self)
                } else {
                    Answered::Done(AnswerParams::allow(id).with_answers(self.answers))
                }
            }
        }
    }
}
