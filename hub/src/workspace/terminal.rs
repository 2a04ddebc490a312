//! The hub's side of the service's terminals: forwarding
//! `moonkale/terminal/*` requests to the terminal host, who watches which
//! terminal, "Start Claude Code here", and opening a terminal's file links
//! in the active editor.

use lsp_types::{Position, Range};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Workspace, parse_params};
use crate::ports::{Request, TerminalHostCommand, TerminalPort, forward};
use crate::{EditorId, Responder, Topic};
use lsp_types::request::Request as _;
use moonkale_protocol::jsonrpc::{self as message, Params, ResponseError, code};
use moonkale_protocol::terminal;

#[derive(Default)]
pub(crate) struct TerminalLink {
    sender: Option<TerminalPort>,
}

impl Workspace {
    pub(crate) fn set_terminals(&mut self, sender: Option<TerminalPort>) {
        self.terminals.sender = sender;
    }

    pub(super) fn terminal_detach(&mut self, editor: EditorId) {
        if let Some(sender) = &self.terminals.sender {
            let _ = sender.try_send(TerminalHostCommand::Detach { editor });
        }
    }

    /// A `moonkale/terminal/*` request: subscriptions and opening links are
    /// ours, the rest goes to the terminal host, which answers `reply`.
    pub(super) fn terminal_request(
        &mut self,
        editor: EditorId,
        method: &str,
        params: Params,
        reply: Responder,
    ) {
        let subscribe = method == terminal::Subscribe::METHOD;
        if subscribe || method == terminal::Unsubscribe::METHOD {
            let p: terminal::TerminalParams = match parse_params(&params) {
                Ok(p) => p,
                Err(e) => return reply.send(Err(e)),
            };
            let topic = Topic::Terminal(p.terminal);
            return reply.send(Ok(self.subscription(editor, subscribe, topic)));
        }
        if method == terminal::OpenLink::METHOD {
            return reply.send(self.open_link(params));
        }
        let request = Request::new(editor, method, params, reply);
        forward(self.terminals.sender.as_ref(), request, "terminals are");
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
        // Lexical only: the hub does no IO, and showing a file reads none.
        let raw = p.path.to_str().unwrap_or_default();
        let (path, _) =
            crate::core::confine::confine_lexically(std::slice::from_ref(&self.root), raw)
                .map_err(|refused| {
                    ResponseError::invalid_params(format!(
                        "path must be an absolute path inside the workspace ({})",
                        refused.0
                    ))
                })?;
        let uri = super::file_uri(&path)
            .ok_or_else(|| ResponseError::invalid_params("not a file path"))?;
        let Some((target, _)) = self.active_editor() else {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                "no editor is attached",
            ));
        };
        let at = Position::new(
            p.line.saturating_sub(1),
            p.column.unwrap_or(1).saturating_sub(1),
        );
        self.show_document(target, uri, true, Some(Range::new(at, at)));
        Ok(json!({}))
    }

    /// `moonkale.startClaude [args?, sandbox?]` (also a code action): Claude
    /// Code in a service terminal, connected to this workspace; inside a
    /// sandbox when `sandbox` is the command that runs `claude` there.
    pub(super) fn start_claude_command(
        &mut self,
        editor: EditorId,
        args: &[Value],
        reply: Responder,
    ) {
        let list = |i: usize| {
            args.get(i)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let params = json!({"args": list(0), "sandbox": list(1)});
        self.terminal_request(
            editor,
            terminal::StartClaude::METHOD,
            message::params(&params),
            reply,
        )
    }
}
