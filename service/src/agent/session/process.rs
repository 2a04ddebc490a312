//! The session's `claude` process over its life: started when a turn
//! needs it (`--session-id`, later `--resume`, with the settings the
//! user's trust decision allows, replaced between turns when that decision
//! changed), written to with a deadline, stopped when idle, and its end:
//! one retry in a fresh conversation (or a resumed one), else the turn
//! failed with the tail of its stderr. Its state is [`super::cli`]'s.

use std::time::Duration;

use moonkale_claude::control;
use moonkale_claude::launch::{Launch, SessionStart, SettingSource};
use moonkale_protocol::agent::{NoticeData, SessionEvent};
use tokio::time::Instant;

use super::cli::{CliState, Running};
use super::{CliSeen, MCP_SERVER, STDIN_TIMEOUT, Sent, Session, State};
use crate::hub::AgentProgress;
use crate::hub::ports::ChangesCommand;
use crate::lsp::message::{ResponseError, code};

impl Session {
    /// Whether the user trusts this workspace now (read at every start of
    /// the CLI, so a decision made anywhere takes effect at the next one).
    pub(super) fn trusted(&self) -> bool {
        self.config
            .trust
            .as_ref()
            .is_some_and(|t| t.is_trusted(&self.workspace))
    }

    pub(super) async fn ensure_cli(&mut self) -> Result<(), String> {
        // Between turns, a CLI started under another trust decision is
        // replaced, so the next turn runs with the settings the user chose.
        let trusted = self.trusted();
        if let Some(cli) = self.cli.running()
            && self.unanswered.is_empty()
            && cli.trusted != trusted
        {
            let cli = self.cli.take().expect("checked");
            let how = if cli.trusted {
                "with your own settings only"
            } else {
                "with the repository's own Claude Code settings"
            };
            cli.link.shutdown().await;
            self.notice(format!(
                "The workspace's trust changed: Claude Code restarts {how}."
            ));
        }
        if self.cli.is_running() {
            return Ok(());
        }
        let start = if self.has_conversation {
            SessionStart::Resume(self.id)
        } else {
            SessionStart::New(self.id)
        };
        self.launch(start, false).await
    }

    /// Starts the CLI; `retry`: the one retry after a lost (or already
    /// used) conversation.
    pub(super) async fn launch(&mut self, start: SessionStart, retry: bool) -> Result<(), String> {
        let trusted = self.trusted();
        if !trusted {
            self.note_untrusted_settings();
        }
        let resuming = matches!(start, SessionStart::Resume(_));
        let editor_tools = *self.editors.borrow_and_update() > 0;
        let launch = Launch {
            session: start,
            permission_mode: self.permission_mode,
            model: self.model.clone(),
            mcp_config: Some(self.mcp_config(editor_tools)),
            // Headless, the CLI asks no trust question of its own and would
            // run the repository's hooks and MCP servers: only the user's
            // own settings until the user trusts the workspace.
            setting_sources: (!trusted).then(|| vec![SettingSource::User]),
        };
        let args = launch.argv().map_err(|e| e.to_string())?;
        // The user's default sandbox now (a `sandbox set` or `clear` takes
        // effect at the next start of a CLI).
        let sandbox = self.config.sandbox(&self.workspace)?;
        let paths = sandbox
            .as_ref()
            .map(|sandbox| crate::core::path_map::PathMap::new(sandbox.paths.clone()))
            .unwrap_or_default();
        let link = self
            .launcher
            .start(
                &self.config,
                &self.workspace,
                self.cwd.as_ref().unwrap_or(&self.workspace),
                args,
                trusted,
                sandbox.as_ref(),
            )
            .await?;
        let jailed = sandbox.is_some();
        self.paths = paths;
        if self.summary_tx.borrow().jailed != jailed {
            self.summary_tx.send_modify(|s| s.jailed = jailed);
        }
        if let Some(sandbox) = &sandbox
            && !self.spare
        {
            self.notice(format!(
                "Claude Code runs in the workspace's sandbox: {}.",
                crate::sandbox_link::describe(sandbox)
            ));
        }
        tracing::info!(session = %self.id, pid = link.pid(), resume = resuming, trusted, jailed, spare = self.spare, "started claude");
        self.cli_tx
            .send_replace(CliSeen::Running { pid: link.pid() });
        self.cli = CliState::Running(Box::new(Running {
            link,
            trusted,
            resuming,
            retry,
            editor_tools,
        }));
        let id = self.request_id();
        self.initialize_request = Some(id.clone());
        let ours: &[&str] = if editor_tools { &[MCP_SERVER] } else { &[] };
        self.write(control::initialize(&id, ours)).await;
        Ok(())
    }

    /// When the CLI has had nothing to do long enough to be stopped: no
    /// turn, no question, no request of ours open (a spare waits to be
    /// adopted instead).
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        let idle = self.cli.is_running()
            && !self.spare
            && self.unanswered.is_empty()
            && self.waiters.is_empty()
            && self.approvals.is_empty();
        let after = if self.stop_cli {
            Duration::ZERO
        } else {
            self.config.cli_idle
        };
        idle.then(|| self.last_activity + after)
    }

    /// Stops a CLI with nothing to do; the conversation is the CLI's own
    /// (on disk), so the next prompt resumes it in a new process.
    pub(super) async fn stop_idle_cli(&mut self) {
        let Some(cli) = self.cli.take() else { return };
        if std::mem::take(&mut self.stop_cli) {
            tracing::info!(session = %self.id, "the turn failed: claude stopped");
        } else {
            tracing::info!(session = %self.id, "claude idle for {:?}: stopped", self.config.cli_idle);
        }
        cli.link.shutdown().await;
        self.cli_tx.send_replace(CliSeen::Ended);
    }

    /// Tells the user (once per session) that the repository ships Claude
    /// Code settings that are not loaded because it is not trusted.
    pub(super) fn note_untrusted_settings(&mut self) {
        let shipped: Vec<&str> = [
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".mcp.json",
        ]
        .into_iter()
        .filter(|rel| std::fs::symlink_metadata(self.workspace.join(rel)).is_ok())
        .collect();
        if shipped.is_empty() || std::mem::replace(&mut self.told_untrusted, true) {
            return;
        }
        let message = format!(
            "This workspace is not trusted, so its {} {} not loaded: {} would. Trust it with \
             `moonkale-service trust` (or the editor command \"Moonkale: trust this workspace\") \
             if you trust whoever wrote it.",
            shipped.join(", "),
            if shipped.len() == 1 { "is" } else { "are" },
            crate::user_state::TRUST_ENABLES,
        );
        self.record(SessionEvent::Notice(NoticeData {
            message,
            untrusted: true,
        }));
    }

    /// Writes one line to the CLI; a failure is left to the end of its
    /// output to report (a dead process closes stdout too).
    pub(super) async fn write(&mut self, line: Vec<u8>) {
        let Some(cli) = self.cli.running() else {
            return;
        };
        match tokio::time::timeout(STDIN_TIMEOUT, cli.link.send(&line)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(session = %self.id, "writing to claude failed: {e}"),
            Err(_) => {
                tracing::warn!(session = %self.id, "claude does not read its stdin; killing it");
                cli.link.kill(); // its end of output reports the failure
            }
        }
    }

    pub(super) fn request_id(&mut self) -> String {
        self.next_request += 1;
        format!("moonkale-{}", self.next_request)
    }

    /// A jailed CLI's `system/init` names the folder it runs in, as the
    /// sandbox sees it: not the session's folder mapped into the sandbox
    /// means the sandbox command started it elsewhere (its own HOME, as
    /// `docker exec` without `-w` or `bwrap` without `--chdir` do), where
    /// Claude would read and write the wrong files. What to do, then.
    pub(super) fn started_elsewhere(&self, init: &serde_json::Value) -> Option<String> {
        if !self.summary_tx.borrow().jailed {
            return None;
        }
        let reported = init["cwd"].as_str()?;
        let host = self.cwd.as_ref().unwrap_or(&self.workspace);
        let expected = self.paths.to_inside(&host.display().to_string()).ok()?;
        if std::path::Path::new(reported) == std::path::Path::new(&expected) {
            return None;
        }
        Some(format!(
            "the sandbox started Claude Code in {reported}, not in the workspace ({expected} \
             inside the sandbox): add the sandbox command's working-directory option (`docker \
             exec -w {expected}`, `bwrap --chdir {expected}`) with `moonkale-service sandbox set`"
        ))
    }

    pub(super) async fn cli_ended(&mut self) {
        let Some(cli) = self.cli.take() else { return };
        let (resuming, retried) = (cli.resuming, cli.retry);
        let (status, stderr) = cli.link.finish().await;
        tracing::info!(session = %self.id, %status, "claude ended");
        self.cli_tx.send_replace(CliSeen::Ended);
        let retry = if retried || self.started_elsewhere.is_some() {
            None
        } else if resuming && stderr.contains("No conversation found") {
            Some((
                SessionStart::New(self.id),
                "Claude Code no longer has this conversation; continuing in a fresh one",
            ))
        } else if !resuming && stderr.contains("already in use") {
            Some((
                SessionStart::Resume(self.id),
                "Claude Code already had this conversation; resuming it",
            ))
        } else {
            None
        };
        if let Some((start, why)) = retry
            && !self.unanswered.is_empty()
        {
            self.notice(why.to_owned());
            self.has_conversation = matches!(start, SessionStart::Resume(_));
            match self.launch(start, true).await {
                Ok(()) => {
                    let prompts: Vec<Vec<u8>> =
                        self.unanswered.iter().map(Sent::user_message).collect();
                    for prompt in prompts {
                        self.write(prompt).await;
                    }
                    return;
                }
                Err(e) => tracing::warn!(session = %self.id, "restart failed: {e}"),
            }
        }
        for (_, (reply, _)) in std::mem::take(&mut self.waiters) {
            reply.send(Err(ResponseError::new(
                code::REQUEST_FAILED,
                "claude exited before answering",
            )));
        }
        self.withdraw_all("claude exited");
        if self.unanswered.is_empty() && !self.interrupting {
            return; // between turns: the next prompt starts it again
        }
        for sent in std::mem::take(&mut self.unanswered) {
            self.send_changes(ChangesCommand::TurnEnded {
                source: self.change_source(),
                turn: sent.turn,
            });
        }
        self.interrupting = false;
        let tail: String = {
            let t = stderr.trim();
            let skip = t.chars().count().saturating_sub(2000);
            t.chars().skip(skip).collect()
        };
        let mut error = format!("the claude process exited during a turn ({status})");
        if !tail.is_empty() {
            error.push_str(": ");
            error.push_str(&tail);
        }
        if let Some(why) = self.started_elsewhere.take() {
            error = why;
        }
        self.error = Some(error);
        self.progress(AgentProgress::End("failed".into()));
        self.set_state(State::Failed);
    }
}
