//! The CLI's stream-json output, one message at a time: streamed text
//! and thinking passed on as they come, control requests and responses,
//! the CLI's messages stored as events, the edits its tools made handed to
//! the change-set host, and how a turn's `result` ends it.

use moonkale_claude::edits;
use moonkale_claude::launch::PermissionMode;
use moonkale_claude::stream::{CliMessage, DecodeError, Delta, TurnResult};
use moonkale_protocol::agent::{self as wire, LoginNeeded, SessionEvent};
use serde_json::Value;

use super::{Session, State};
use crate::clock::now_ms;
use crate::hub::AgentProgress;
use crate::hub::ports::{ChangeRecord, ChangeSource, ChangesCommand};
use crate::lsp::message::{ResponseError, code};

/// Error text of a failed turn.
fn turn_error(r: &TurnResult) -> String {
    if let Some(text) = r.text.as_deref().filter(|t| !t.is_empty()) {
        return text.to_owned();
    }
    let errors: Vec<&str> = r.raw["errors"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if errors.is_empty() {
        format!("the turn ended with {}", r.subtype)
    } else {
        errors.join("; ")
    }
}

/// Whether a failed turn's result says the CLI has no login (the text of
/// an OAuth CLI without one, or an API key refused).
fn is_login_failure(r: &TurnResult) -> bool {
    r.api_error_status == Some(401) || LoginNeeded::said_in(r.text.as_deref().unwrap_or_default())
}

/// The tool a partial message starts using, if it does.
fn tool_use_start(event: &Value) -> Option<&str> {
    let block = event.pointer("/event/content_block")?;
    (block["type"] == "tool_use").then(|| block["name"].as_str())?
}

impl Session {
    pub(super) async fn cli_output(&mut self, message: Option<Result<CliMessage, DecodeError>>) {
        match message {
            None => self.cli_ended().await,
            Some(Err(e)) => {
                self.notice(format!("unreadable output from claude: {e}"));
            }
            Some(Ok(message)) => self.cli_message(message).await,
        }
    }

    pub(super) async fn cli_message(&mut self, message: CliMessage) {
        match message {
            CliMessage::StreamEvent { .. } => {
                if let Some(delta) = message.delta() {
                    let (text, thinking, streamed) = match delta {
                        Delta::Text(text) => (text, false, &mut self.streaming.text),
                        Delta::Thinking(text) => (text, true, &mut self.streaming.thinking),
                    };
                    let offset = streamed.len() as u64;
                    streamed.push_str(&text);
                    let text = wire::TextParams {
                        session: self.id_text.clone(),
                        text,
                        thinking,
                        offset,
                    };
                    self.notify::<wire::TextNotification>(&text);
                } else if let CliMessage::StreamEvent { raw } = &message
                    && raw.get().contains("\"tool_use\"")
                    && let Some(tool) = tool_use_start(&message.to_value())
                {
                    // Parsed again only for the rare start of a tool use.
                    self.progress(AgentProgress::Report(format!("using {tool}")));
                }
            }
            CliMessage::ControlRequest {
                request_id,
                request,
            } => self.control_request(request_id, request).await,
            CliMessage::ControlResponse {
                request_id,
                outcome,
            } => {
                if self.initialize_request.as_deref() == Some(request_id.as_str()) {
                    self.initialize_request = None;
                    if let Ok(response) = &outcome {
                        self.capabilities(response);
                    }
                }
                if let Some((reply, result)) = self.waiters.remove(&request_id) {
                    reply.send(
                        outcome
                            .map(|_| result)
                            .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e)),
                    );
                } else if let Err(why) = outcome {
                    tracing::warn!(session = %self.id, "the CLI refused our request {request_id}: {why}");
                }
            }
            CliMessage::ControlCancel { request_id } => {
                for ended in self.approvals.cancel_request(&request_id) {
                    self.ended(ended).await;
                }
            }
            CliMessage::Result(result) => {
                self.streaming = wire::Streaming::default();
                self.record(SessionEvent::Cli(result.raw.clone()));
                self.turn_ended(&result);
            }
            CliMessage::System { ref subtype, .. } => {
                if subtype == "init"
                    && let Some(why) = self.started_elsewhere(&message.to_value())
                {
                    tracing::warn!(session = %self.id, "{why}");
                    self.started_elsewhere = Some(why);
                    if let Some(cli) = self.cli.running() {
                        cli.link.kill(); // before the model's first answer
                    }
                }
                if subtype == "init" {
                    self.has_conversation = true;
                    self.cli_version = message.to_value()["claude_code_version"]
                        .as_str()
                        .map(str::to_owned);
                    if let Some(cli) = self.cli.running() {
                        cli.resuming = false;
                    }
                }
                let value = message.to_value();
                // `init` and `status` carry the mode the CLI is in: the
                // truth, whoever changed it.
                if let Some(mode) = value["permissionMode"]
                    .as_str()
                    .and_then(PermissionMode::parse)
                    && mode != self.permission_mode
                {
                    self.permission_mode = mode;
                    self.record_settings(Some("claude"));
                }
                self.record(SessionEvent::Cli(value));
            }
            other => {
                let value = other.to_value();
                if value["type"] == "assistant" {
                    self.auth_failed |= value["error"] == "authentication_failed";
                    self.approvals.remember_plan(&value);
                    // It holds what was streamed of it.
                    self.streaming = wire::Streaming::default();
                }
                if let Some(result) = value.get("tool_use_result") {
                    self.tool_result(result);
                }
                self.record(SessionEvent::Cli(value));
            }
        }
    }

    /// A tool's result: an Edit, MultiEdit or Write is a change Claude
    /// made, whatever the mode (asked or not), for the change-set host.
    pub(super) fn tool_result(&mut self, result: &Value) {
        let Some(edit) = edits::edit_from_tool_result(result) else {
            return;
        };
        let edit = match edit {
            Ok(edit) => edit,
            Err(e) => return tracing::warn!(session = %self.id, "{e}; the edit is not reviewed"),
        };
        let Some(sent) = self.unanswered.front() else {
            return; // no turn of ours (a replay)
        };
        // A jailed CLI names the file as its sandbox mounts it.
        let path = match self.paths.to_host(&edit.path.to_string_lossy()) {
            Ok(path) => std::path::PathBuf::from(path),
            Err(e) => return tracing::warn!(session = %self.id, "{e}; the edit is not reviewed"),
        };
        let record = ChangeRecord {
            source: self.change_source(),
            turn: sent.turn.clone(),
            title: Some(sent.title.clone()),
            path,
            before: edit.before,
            after: Some(edit.after),
            at: now_ms(),
        };
        self.send_changes(ChangesCommand::Record(record));
    }

    pub(super) fn change_source(&self) -> ChangeSource {
        ChangeSource::Agent {
            session: self.id_text.clone(),
        }
    }

    /// Hands the change-set host a command without waiting: a full queue
    /// loses that record (logged), never stalls the session.
    pub(super) fn send_changes(&self, command: ChangesCommand) {
        if let Some(port) = &self.config.sources.changes
            && let Err(e) = port.try_send(command)
        {
            tracing::warn!(session = %self.id, "the change-set host did not take a record: {e}");
        }
    }

    pub(super) fn turn_ended(&mut self, result: &TurnResult) {
        if self.cli.is_resuming() {
            return; // decided when the process ends (a lost conversation?)
        }
        if let Some(sent) = self.unanswered.pop_front() {
            self.send_changes(ChangesCommand::TurnEnded {
                source: self.change_source(),
                turn: sent.turn,
            });
        }
        let interrupted = std::mem::take(&mut self.interrupting);
        if result.is_error && !interrupted {
            if self.auth_failed || is_login_failure(result) {
                let said = result.text.as_deref().unwrap_or_default();
                let login = LoginNeeded::for_cli(self.cli_version.as_deref(), said);
                self.error = Some(login.sentence());
                self.login = Some(login);
            } else {
                self.error = Some(turn_error(result));
            }
        }
        if self.unanswered.is_empty() {
            let failed = result.is_error && !interrupted;
            self.stop_cli = failed;
            let end = if failed { "failed" } else { "done" };
            self.progress(AgentProgress::End(end.into()));
            self.set_state(if failed { State::Failed } else { State::Idle });
        }
    }
}
