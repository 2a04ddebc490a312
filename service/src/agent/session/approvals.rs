//! A session's approvals: the permission questions waiting for the user,
//! the tools allowed "always", and how an answer is checked and turned into
//! what the CLI is told and what the transcript keeps.
//!
//! **Invariant:** this is the one owner of pending approvals. The hub holds
//! a read-only copy of each approval's object (to show it in editors) and
//! routes answers here; only [`Approvals::answer`] decides whether an
//! answer fits the question. Pure: no IO, no clock but the deadlines it is
//! given.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use moonkale_claude::control;
use moonkale_claude::launch::PermissionMode;
use moonkale_protocol::agent::{Approval, ApprovalKind, Decision, PlanChoice};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::agent::{Answer, policy};
use crate::lsp::message::ResponseError;
use moonkale_protocol::ApprovalId;

/// The modes a plan approval may go on in: edits asked, or edits accepted
/// (Claude Code's own "Yes, manually approve edits" / "Yes, and
/// auto-accept edits").
const PLAN_CHOICES: [(PermissionMode, &str); 2] = [
    (
        PermissionMode::Default,
        "Approve the plan; ask before each edit",
    ),
    (
        PermissionMode::AcceptEdits,
        "Approve the plan; accept edits",
    ),
];

/// Bounds on an `AskUserQuestion` answer.
const MAX_ANSWER_BYTES: usize = 16 << 10;

/// What kind of question an approval is, from the tool that asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Tool,
    Plan,
    Question,
}

impl Kind {
    fn of(tool: &str) -> Kind {
        match tool {
            policy::EXIT_PLAN_TOOL => Kind::Plan,
            policy::ASK_USER_TOOL => Kind::Question,
            _ => Kind::Tool,
        }
    }
}

/// One question waiting for the user.
struct Pending {
    /// The CLI's `can_use_tool` request this answers.
    request_id: String,
    tool: String,
    input: Value,
    destructive: bool,
    deadline: Instant,
}

/// A `decision` of the user (or of a timeout, or a withdrawal).
fn decision(approval: &str, tool: &str, allow: bool, by: &str) -> Decision {
    Decision {
        approval: approval.to_owned(),
        tool: tool.to_owned(),
        allow,
        always: false,
        by: by.to_owned(),
        message: None,
        mode: None,
        answers: None,
    }
}

/// An approval that ended: the control response the CLI is owed (none when
/// the CLI itself withdrew the question), the decision to keep, and the
/// mode the session goes on in (a plan approved).
#[derive(Debug)]
pub(super) struct Ended {
    pub to_cli: Option<Vec<u8>>,
    pub decision: Decision,
    pub mode: Option<PermissionMode>,
}

pub(super) struct Approvals {
    session: String,
    workspace: PathBuf,
    pending: BTreeMap<String, Pending>,
    next: u64,
    always: HashSet<String>,
    /// The last plan the model gave `ExitPlanMode`.
    last_plan: Option<String>,
}

impl Approvals {
    pub fn new(session: String, workspace: PathBuf) -> Approvals {
        Approvals {
            session,
            workspace,
            pending: BTreeMap::new(),
            next: 0,
            always: HashSet::new(),
            last_plan: None,
        }
    }

    /// The tools the user allowed for the rest of the session.
    pub fn always(&self) -> &HashSet<String> {
        &self.always
    }

    pub fn restore_always(&mut self, always: HashSet<String>) {
        self.always = always;
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// When the oldest question times out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.deadline).min()
    }

    /// Keeps the plan the model hands `ExitPlanMode`: newer CLIs ask about
    /// the tool with its input emptied, but the assistant message has it.
    pub fn remember_plan(&mut self, assistant: &Value) {
        let blocks = assistant["message"]["content"]
            .as_array()
            .into_iter()
            .flatten();
        for block in blocks {
            if block["type"] == "tool_use"
                && block["name"] == policy::EXIT_PLAN_TOOL
                && let Some(plan) = block["input"]["plan"].as_str()
            {
                self.last_plan = Some(plan.to_owned());
            }
        }
    }

    /// A new question, as the editors are shown it.
    pub fn ask(
        &mut self,
        request_id: String,
        tool: String,
        input: Value,
        destructive: bool,
        deadline: Instant,
    ) -> Approval {
        self.next += 1;
        let approval = ApprovalId::new(&self.session, self.next).to_string();
        let pending = Pending {
            request_id,
            tool,
            input,
            destructive,
            deadline,
        };
        self.pending.insert(approval.clone(), pending);
        self.object(&approval).expect("just inserted")
    }

    /// Every waiting approval, oldest first.
    pub fn objects(&self) -> Vec<Approval> {
        self.pending
            .keys()
            .filter_map(|id| self.object(id))
            .collect()
    }

    /// The tool a waiting approval asks about, and its input.
    pub fn tool_input(&self, approval: &str) -> Option<(String, Value)> {
        let p = self.pending.get(approval)?;
        Some((p.tool.clone(), p.input.clone()))
    }

    fn object(&self, approval: &str) -> Option<Approval> {
        let p = self.pending.get(approval)?;
        let (kind, title) = match Kind::of(&p.tool) {
            Kind::Plan => {
                let plan = p.input["plan"]
                    .as_str()
                    .map(str::to_owned)
                    .or_else(|| self.last_plan.clone())
                    .unwrap_or_default();
                let choices = PLAN_CHOICES
                    .iter()
                    .map(|(mode, label)| PlanChoice {
                        mode: *mode,
                        label: (*label).to_owned(),
                    })
                    .collect();
                (
                    ApprovalKind::Plan { plan, choices },
                    "Claude's plan is ready".to_owned(),
                )
            }
            Kind::Question => {
                // As the CLI gave them; what is not a list of questions is none.
                let questions =
                    serde_json::from_value(p.input["questions"].clone()).unwrap_or_default();
                (
                    ApprovalKind::Question { questions },
                    "Claude asks you".to_owned(),
                )
            }
            Kind::Tool => (
                ApprovalKind::Tool,
                policy::title(&p.tool, &p.input, &self.workspace),
            ),
        };
        Some(Approval {
            approval: approval.to_owned(),
            session: self.session.clone(),
            kind,
            tool: p.tool.clone(),
            input: p.input.clone(),
            title,
            destructive: p.destructive,
        })
    }

    /// The user's answer: checked against the question, which ends only if
    /// the answer fits it.
    pub fn answer(&mut self, approval: &str, answer: Answer) -> Result<Ended, ResponseError> {
        let Some(p) = self.pending.get(approval) else {
            return Err(crate::hub::ports::not_waiting(approval));
        };
        let kind = Kind::of(&p.tool);
        if answer.allow && kind == Kind::Question {
            let Some(answers) = &answer.answers else {
                return Err(ResponseError::invalid_params(
                    "this is a question: answer it with answers {question: label(s) or your text}",
                ));
            };
            check_answers(&p.input, answers)?;
        }
        if let Some(mode) = answer.mode
            && (kind != Kind::Plan || !PLAN_CHOICES.iter().any(|(m, _)| *m == mode))
        {
            return Err(ResponseError::invalid_params(format!(
                "{} is not a way to go on from this approval",
                mode.as_str()
            )));
        }
        let p = self.pending.remove(approval).expect("checked above");
        let always = answer.always && answer.allow && !p.destructive && kind == Kind::Tool;
        let mut mode = None;
        let to_cli = match kind {
            _ if !answer.allow => {
                let message = answer
                    .message
                    .as_deref()
                    .unwrap_or("The user denied this tool use.");
                control::deny(&p.request_id, message, false)
            }
            Kind::Plan => {
                // Approving the plan leaves plan mode, in the CLI and here.
                let chosen = answer.mode.unwrap_or(PermissionMode::Default);
                mode = Some(chosen);
                let set_mode =
                    json!([{"type": "setMode", "mode": chosen.as_str(), "destination": "session"}]);
                control::allow(&p.request_id, &p.input, Some(&set_mode))
            }
            Kind::Question => {
                let mut input = p.input.clone();
                input["answers"] = Value::Object(answer.answers.clone().unwrap_or_default());
                control::allow(&p.request_id, &input, None)
            }
            Kind::Tool => {
                if always {
                    self.always.insert(p.tool.clone());
                }
                control::allow(&p.request_id, &p.input, None)
            }
        };
        let mut decision = decision(approval, &p.tool, answer.allow, answer.by);
        decision.always = always;
        decision.message = answer.message;
        decision.mode = answer.allow.then_some(answer.mode).flatten();
        decision.answers = answer.answers.filter(|_| answer.allow);
        Ok(Ended {
            to_cli: Some(to_cli),
            decision,
            mode,
        })
    }

    /// Every question whose deadline has passed, denied.
    pub fn expire(&mut self, now: Instant, message: &str) -> Vec<Ended> {
        let expired: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        expired
            .into_iter()
            .filter_map(|approval| {
                let p = self.pending.remove(&approval)?;
                let mut decision = decision(&approval, &p.tool, false, "timeout");
                decision.message = Some(message.to_owned());
                Some(Ended {
                    to_cli: Some(control::deny(&p.request_id, message, false)),
                    decision,
                    mode: None,
                })
            })
            .collect()
    }

    /// The CLI withdrew its request: the questions it asked with it end.
    pub fn cancel_request(&mut self, request_id: &str) -> Vec<Ended> {
        let withdrawn: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.request_id == request_id)
            .map(|(id, _)| id.clone())
            .collect();
        withdrawn
            .into_iter()
            .filter_map(|approval| {
                let p = self.pending.remove(&approval)?;
                Some(Ended {
                    to_cli: None,
                    decision: decision(&approval, &p.tool, false, "withdrawn"),
                    mode: None,
                })
            })
            .collect()
    }

    /// Every question ends (the CLI exited, the session closed).
    pub fn withdraw_all(&mut self, why: &str) -> Vec<Ended> {
        std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(approval, p)| {
                let mut decision = decision(&approval, &p.tool, false, "withdrawn");
                decision.message = Some(why.into());
                Ended {
                    to_cli: None,
                    decision,
                    mode: None,
                }
            })
            .collect()
    }
}

/// Checks the user's answers against the questions asked: every question
/// answered with a string, or (multi-select) a list of strings.
fn check_answers(
    input: &Value,
    answers: &serde_json::Map<String, Value>,
) -> Result<(), ResponseError> {
    let questions: Vec<&str> = input["questions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| q["question"].as_str())
        .collect();
    if let Some(extra) = answers.keys().find(|k| !questions.contains(&k.as_str())) {
        return Err(ResponseError::invalid_params(format!(
            "{extra:?} is not one of the questions asked"
        )));
    }
    if let Some(missing) = questions.iter().find(|q| !answers.contains_key(**q)) {
        return Err(ResponseError::invalid_params(format!(
            "the question {missing:?} has no answer"
        )));
    }
    for (question, answer) in answers {
        let ok = match answer {
            Value::String(text) => !text.trim().is_empty(),
            Value::Array(labels) => {
                !labels.is_empty()
                    && labels
                        .iter()
                        .all(|l| l.as_str().is_some_and(|t| !t.is_empty()))
            }
            _ => false,
        };
        if !ok {
            return Err(ResponseError::invalid_params(format!(
                "the answer to {question:?} must be a label, a list of labels or your own text"
            )));
        }
    }
    if serde_json::to_vec(answers).map_or(0, |b| b.len()) > MAX_ANSWER_BYTES {
        return Err(ResponseError::invalid_params(format!(
            "answers are limited to {MAX_ANSWER_BYTES} bytes"
        )));
    }
    Ok(())
}
