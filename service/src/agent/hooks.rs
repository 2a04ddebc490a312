//! The permission questions of a `claude` the service does not host (in a
//! service terminal, "Start Claude Code here"; `moonkale-service claude`;
//! one the user starts by hand after [`super::user_hook`]), through Claude
//! Code's own hooks: its `PermissionRequest` hook asks the service
//! (`moonkale-service hook permission`, the request
//! `moonkale/agent/hookPermission`) while the terminal shows its dialog,
//! and the question shows where hosted sessions' questions show (the page,
//! the editors, the `agent` commands). The first answer wins: a person's
//! anywhere is the hook's output; the terminal's ends the tool's wait, and
//! its `PostToolUse`/`PermissionDenied` hook (`hook done`) withdraws the
//! question everywhere, as does its hook process ending unanswered.
//!
//! Only CLIs the service started, or the user's own hook, reach this path:
//! each start gets a secret of its own ([`HookSecrets`]), passed in its
//! environment (never in a file, never in the workspace); the user's hook
//! has the user's secret; a request with another is refused.
//! The hook's input is the CLI's, read as untrusted text.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};

use moonkale_protocol::agent::{Approval, ApprovalKind, HookBehavior, HookDecision};
use serde_json::Value;

use crate::hub::{Answer, Responder};
use crate::lsp::message::ResponseError;

/// The workspace whose service the hook asks, and its start's secret.
pub const WORKSPACE_VAR: &str = "MOONKALE_HOOK_WORKSPACE";
pub const TOKEN_VAR: &str = "MOONKALE_HOOK_TOKEN";
/// The first CLI generation whose `--settings` and `PermissionRequest`
/// hook the service's hooks rely on (measured with 2.1.332; 1.0.60 knows no
/// `--settings`).
pub const MIN_HOOK_CLI: moonkale_claude::binary::Version =
    moonkale_claude::binary::Version(2, 1, 0);

/// How long the CLI lets the permission hook wait for a person, in
/// seconds (its dialog stays usable all along).
const PERMISSION_HOOK_TIMEOUT: u64 = 600;

/// The secrets given to the CLIs the service started, one per start.
#[derive(Clone, Debug, Default)]
pub struct HookSecrets(Arc<Mutex<HashSet<String>>>);

impl HookSecrets {
    /// A new start's secret.
    pub fn issue(&self) -> crate::Result<String> {
        let token = crate::runtime::new_token()?;
        self.0.lock().expect("not poisoned").insert(token.clone());
        Ok(token)
    }

    pub fn knows(&self, token: &str) -> bool {
        self.0.lock().expect("not poisoned").contains(token)
    }
}

/// What a CLI start needs for its hooks to reach the service: the
/// settings (`--settings`) naming the hooks, and the variables they read.
pub fn wiring(
    program: &Path,
    workspace: &Path,
    token: &str,
) -> (Vec<String>, Vec<(OsString, OsString)>) {
    let command = |kind: &str| {
        format!(
            "{} hook {kind}",
            crate::sandbox_link::shell_word(&program.display().to_string())
        )
    };
    let hook = |kind: &str, timeout: Option<u64>| {
        let mut hook = serde_json::json!({"type": "command", "command": command(kind)});
        if let Some(timeout) = timeout {
            hook["timeout"] = timeout.into();
        }
        serde_json::json!([{"matcher": "*", "hooks": [hook]}])
    };
    let settings = serde_json::json!({"hooks": {
        "PermissionRequest": hook("permission", Some(PERMISSION_HOOK_TIMEOUT)),
        "PostToolUse": hook("done", None),
        "PermissionDenied": hook("done", None),
    }});
    let args = vec!["--settings".to_owned(), settings.to_string()];
    let env = vec![
        (WORKSPACE_VAR.into(), workspace.as_os_str().to_owned()),
        (TOKEN_VAR.into(), token.into()),
    ];
    (args, env)
}

/// The questions asked through hooks that wait for a person.
#[derive(Default)]
pub struct HookQuestions {
    asked: u64,
    waiting: Vec<Waiting>,
}

struct Waiting {
    approval: Approval,
    /// The hook's request, answered with the decision.
    reply: Responder,
}

impl HookQuestions {
    /// A `PermissionRequest` hook's input as a question of the CLI's
    /// session (its `session_id`); `reply` waits for the answer.
    pub fn ask(
        &mut self,
        input: &Value,
        workspace: &Path,
        reply: Responder,
    ) -> Result<Approval, (Responder, ResponseError)> {
        match question(input, workspace, self.asked + 1) {
            Ok(approval) => {
                self.asked += 1;
                self.waiting.push(Waiting {
                    approval: approval.clone(),
                    reply,
                });
                Ok(approval)
            }
            Err(e) => Err((reply, e)),
        }
    }

    /// Whether questions wait (the host then looks for hooks gone).
    pub fn any(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The questions whose hook is gone (the CLI ended it: answered in its
    /// terminal in a way no later hook reports, or the CLI quit): taken
    /// away, to be withdrawn everywhere.
    pub fn gone(&mut self) -> Vec<Approval> {
        let (gone, waiting): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| w.reply.is_closed());
        self.waiting = waiting;
        gone.into_iter().map(|w| w.approval).collect()
    }
}

/// A `PermissionRequest` hook's input as question number `n` of the CLI's
/// session (its `session_id`).
fn question(input: &Value, workspace: &Path, n: u64) -> Result<Approval, ResponseError> {
    let session = input["session_id"]
        .as_str()
        .filter(|s| uuid::Uuid::parse_str(s).is_ok())
        .ok_or_else(|| ResponseError::invalid_params("the hook's input has no session_id"))?;
    let tool = input["tool_name"]
        .as_str()
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .ok_or_else(|| ResponseError::invalid_params("the hook's input has no tool_name"))?;
    let tool_input = input["tool_input"].clone();
    Ok(Approval {
        approval: format!("{session}/{n}"),
        session: session.to_owned(),
        kind: ApprovalKind::Tool,
        tool: tool.to_owned(),
        title: super::policy::title(tool, &tool_input, workspace),
        input: tool_input,
        // "Always" is the terminal's to offer: every hook question is
        // answered once.
        destructive: true,
    })
}

impl HookQuestions {
    /// A person's answer to `approval`, if it is a hook's: the hook is
    /// told; its question is returned.
    pub fn answer(&mut self, approval: &str, answer: &Answer) -> Option<Approval> {
        let at = self
            .waiting
            .iter()
            .position(|w| w.approval.approval == approval)?;
        let waiting = self.waiting.remove(at);
        let decision = if answer.allow {
            HookDecision {
                behavior: Some(HookBehavior::Allow),
                message: None,
            }
        } else {
            HookDecision {
                behavior: Some(HookBehavior::Deny),
                message: Some(
                    answer
                        .message
                        .clone()
                        .unwrap_or_else(|| "The user denied this.".to_owned()),
                ),
            }
        };
        waiting
            .reply
            .send(Ok(moonkale_protocol::to_json(&decision)));
        Some(waiting.approval)
    }

    /// The tool of a `PostToolUse`/`PermissionDenied` hook's input ran or
    /// was denied: its question, answered in the terminal, is withdrawn
    /// (the hook, if it still waits, is told to leave it to the dialog).
    pub fn done(&mut self, input: &Value) -> Vec<Approval> {
        let session = input["session_id"].as_str().unwrap_or_default();
        let tool = input["tool_name"].as_str().unwrap_or_default();
        let (ended, waiting): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| {
                w.approval.session == session
                    && w.approval.tool == tool
                    && same_call(&w.approval.input, &input["tool_input"])
            });
        self.waiting = waiting;
        ended
            .into_iter()
            .map(|w| {
                w.reply
                    .send(Ok(moonkale_protocol::to_json(&HookDecision::default())));
                w.approval
            })
            .collect()
    }
}

/// Whether a later hook's tool input is the call asked about: every field
/// the question had, the same (the CLI adds defaults, such as a command's
/// timeout, once the tool runs).
fn same_call(asked: &Value, ran: &Value) -> bool {
    match (asked.as_object(), ran.as_object()) {
        (Some(asked), Some(ran)) => asked.iter().all(|(k, v)| ran.get(k) == Some(v)),
        _ => asked == ran,
    }
}
