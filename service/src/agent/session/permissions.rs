//! Control requests from the CLI and the permissions they ask for: a
//! tool use judged by the policy (allowed, denied in plan mode, or asked),
//! the user's answers, approvals that expire or are withdrawn, and each
//! decision recorded and taken away from the editors. The table of open
//! approvals is [`super::approvals`].

use moonkale_claude::control;
use moonkale_claude::launch::PermissionMode;
use moonkale_claude::stream::ControlRequest;
use moonkale_protocol::agent::{Decision, DecisionData, PolicyDecision, SessionEvent};
use serde_json::Value;
use tokio::time::Instant;

use super::approvals::Ended;
use super::{Session, State};
use crate::agent::{Answer, policy};
use crate::hub::Event;
use crate::lsp::message::ResponseError;

impl Session {
    pub(super) async fn control_request(&mut self, request_id: String, request: ControlRequest) {
        match request {
            ControlRequest::CanUseTool {
                tool_name, input, ..
            } => self.permission(request_id, tool_name, input).await,
            ControlRequest::McpMessage {
                server_name,
                message,
            } => self.mcp_message(request_id, &server_name, message).await,
            ControlRequest::Other { subtype, .. } => {
                let why = format!("moonkale does not serve {subtype}");
                self.write(control::error(&request_id, &why)).await;
            }
        }
    }

    pub(super) async fn permission(&mut self, request_id: String, tool: String, input: Value) {
        let plan = self.permission_mode == PermissionMode::Plan;
        match policy::judge(&tool, &input, plan, self.approvals.always()) {
            policy::Verdict::Allow => {
                self.write(control::allow(&request_id, &input, None)).await;
            }
            policy::Verdict::Deny => {
                let message = format!(
                    "{tool} is not allowed in plan mode, which is read-only. Present your plan instead; \
                     the user can switch the session to another permission mode."
                );
                self.write(control::deny(&request_id, &message, false))
                    .await;
                let title = policy::title(&tool, &input, &self.workspace);
                let decision = PolicyDecision {
                    tool,
                    title,
                    allow: false,
                    always: false,
                    by: "policy".into(),
                    message: Some(message),
                };
                self.record(SessionEvent::Decision(DecisionData::Policy(decision)));
            }
            policy::Verdict::Ask { destructive } => {
                let deadline = Instant::now() + self.config.approval_timeout;
                let approval = self
                    .approvals
                    .ask(request_id, tool, input, destructive, deadline);
                self.record(SessionEvent::Approval(approval.clone()));
                let _ = self.hub.send(Event::AgentApproval { approval }).await;
                self.set_state(State::WaitingForApproval);
            }
        }
    }

    /// The user's answer, checked by the approvals; the CLI is told and the
    /// decision kept.
    pub(super) async fn answer(
        &mut self,
        approval: &str,
        answer: Answer,
    ) -> Result<(), ResponseError> {
        let ended = self.approvals.answer(approval, answer)?;
        if let Some(mode) = ended.mode {
            self.permission_mode = mode;
            self.record_settings(Some("plan approval"));
        }
        self.ended(ended).await;
        Ok(())
    }

    pub(super) async fn expire_approvals(&mut self) {
        let minutes = self.config.approval_timeout.as_secs_f64() / 60.0;
        let message = format!("No answer within {minutes:.1} minutes; denied.");
        for ended in self.approvals.expire(Instant::now(), &message) {
            self.ended(ended).await;
        }
    }

    /// An approval ended: the CLI is told (unless it withdrew the
    /// question), then [`Session::decided`].
    pub(super) async fn ended(&mut self, ended: Ended) {
        if let Some(line) = ended.to_cli {
            self.write(line).await;
        }
        self.decided(ended.decision);
    }

    /// Records a decision and takes the question away from the editors.
    pub(super) fn decided(&mut self, decision: Decision) {
        let approval = decision.approval.clone();
        self.record(SessionEvent::Decision(DecisionData::Answered(decision)));
        let event = Event::AgentApprovalClosed {
            session: self.id_text.clone(),
            approval,
        };
        self.send_to_hub(event);
        if self.approvals.is_empty() && self.state == State::WaitingForApproval {
            self.set_state(State::Running);
        }
    }

    pub(super) fn withdraw_all(&mut self, why: &str) {
        for ended in self.approvals.withdraw_all(why) {
            self.decided(ended.decision);
        }
    }
}
