//! The hub's side of the service's terminals: forwarding
//! `moonkale/terminal/*` requests to the terminal host, who watches which
//! terminal, "Start Claude Code here", and opening a terminal's file links
//! in the active editor.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Workspace, parse_params};
use crate::hub::{EditorId, Reply};
use crate::lsp::message::{self, Params, ResponseError, code};
use crate::terminal::host::{HostCommand, TerminalSender};

pub const START_CLAUDE_COMMAND: &str = "moonkale.startClaude";

#[derive(Default)]
pub(in crate::hub) struct TerminalLink {
    sender: Option<TerminalSender>,
    subscriptions: HashMap<EditorId, HashSet<u64>>,
}

impl Workspace {
    pub(in crate::hub) fn set_terminals(&mut self, sender: Option<TerminalSender>) {
        self.terminals.sender = sender;
    }

    pub(super) fn terminal_detach(&mut self, editor: EditorId) {
        self.terminals.subscriptions.remove(&editor);
        if let Some(sender) = &self.terminals.sender {
            let _ = sender.try_send(HostCommand::Detach { editor });
        }
    }

    pub(super) fn terminal_subscribe(&mut self, editor: EditorId, terminal: u64) {
        if self.editors.contains_key(&editor) {
            self.terminals
                .subscriptions
                .entry(editor)
                .or_default()
                .insert(terminal);
        }
    }

    /// Sends `method` to every connection watching `terminal`.
    pub(super) fn terminal_notify(&mut self, terminal: u64, method: &str, params: Value) {
        let body = message::notification(method, params);
        for (editor, terminals) in &mut self.terminals.subscriptions {
            if terminals.contains(&terminal)
                && let Some(ed) = self.editors.get(editor)
                && ed.outbox.try_send(body.clone()).is_err()
            {
                tracing::debug!(editor = editor.0, %method, "outbox full; terminal update dropped");
            }
            if method == "moonkale/terminal/closed" {
                terminals.remove(&terminal);
            }
        }
    }

    /// A `moonkale/terminal/*` request: subscriptions and opening links are
    /// ours, the rest goes to the terminal host, which answers `reply`.
    pub(super) fn terminal_request(
        &mut self,
        editor: EditorId,
        method: &str,
        params: Params,
        reply: &mut Option<Reply>,
    ) -> Option<Result<Value, ResponseError>> {
        #[derive(Deserialize)]
        struct Id {
            terminal: u64,
        }
        match method {
            "moonkale/terminal/subscribe" | "moonkale/terminal/unsubscribe" => {
                let p: Id = match parse_params(&params) {
                    Ok(p) => p,
                    Err(e) => return Some(Err(e)),
                };
                if method.ends_with("/subscribe") {
                    self.terminal_subscribe(editor, p.terminal);
                } else if let Some(set) = self.terminals.subscriptions.get_mut(&editor) {
                    set.remove(&p.terminal);
                }
                return Some(Ok(json!({})));
            }
            "moonkale/terminal/openLink" => return Some(self.open_link(params)),
            _ => {}
        }
        let Some(sender) = &self.terminals.sender else {
            return Some(Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                "terminals are not available in this service",
            )));
        };
        let command = HostCommand::Request {
            editor,
            method: method.to_owned(),
            params,
            reply: reply.take().expect("the reply is ours until answered"),
        };
        if let Err(e) = sender.try_send(command)
            && let HostCommand::Request { reply, .. } = e.into_inner()
        {
            let _ = reply.send(Err(ResponseError::new(
                code::INTERNAL_ERROR,
                "the terminals are busy or stopping; try again",
            )));
        }
        None
    }

    /// `moonkale/terminal/openLink {"path", "line", "column"?}` (a link from
    /// `moonkale/terminal/links`): shown in the active editor.
    fn open_link(&mut self, params: Params) -> Result<Value, ResponseError> {
        #[derive(Deserialize)]
        struct P {
            path: std::path::PathBuf,
            line: u32,
            column: Option<u32>,
        }
        let p: P = parse_params(&params)?;
        if !p.path.is_absolute() || !p.path.starts_with(&self.root) {
            return Err(ResponseError::invalid_params(
                "path must be an absolute path inside the workspace",
            ));
        }
        let uri = super::file_uri(&p.path)
            .ok_or_else(|| ResponseError::invalid_params("not a file path"))?;
        let Some((target, _)) = self.active_editor() else {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                "no editor is attached",
            ));
        };
        let at = json!({"line": p.line.saturating_sub(1), "character": p.column.unwrap_or(1).saturating_sub(1)});
        self.request_editor(
            target,
            "window/showDocument",
            json!({"uri": uri, "takeFocus": true, "selection": {"start": at, "end": at}}),
        );
        Ok(json!({}))
    }

    /// `moonkale.startClaude [args?]` (also a code action): Claude Code in a
    /// service terminal, connected to this workspace.
    pub(super) fn start_claude_command(
        &mut self,
        editor: EditorId,
        args: &[Value],
        reply: &mut Option<Reply>,
    ) -> Option<Result<Value, ResponseError>> {
        let params =
            json!({"args": args.first().and_then(Value::as_array).cloned().unwrap_or_default()});
        self.terminal_request(
            editor,
            "moonkale/terminal/startClaude",
            message::params(&params),
            reply,
        )
    }
}
