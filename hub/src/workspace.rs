//! The state of one workspace and how each event changes it.
//!
//! Owned by the hub task alone (see the module above). Each editor's buffers
//! are kept separately, because two editors holding one file may disagree
//! until they save; questions about a file are answered from the editor that
//! touched it most recently.

use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use lsp_types::Url;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

mod agent;
mod ide;
mod proposals;
mod terminal;

pub use agent::{ANSWER_APPROVAL_COMMAND, TRUST_COMMAND};
pub use ide::{SEND_TO_CLAUDE_COMMAND, error_result, lenient_file_url, text_result};
pub use proposals::{ACCEPT_COMMAND, REJECT_COMMAND, REVERT_HUNK_COMMAND};
pub use terminal::START_CLAUDE_COMMAND;

use super::diagnostics::{DiagnosticsStore, SourceDiagnostics};
use super::status::{DocumentStatus, EditorStatus, SelectionStatus, Status};
use super::subscriptions::Subscriptions;
use super::{EditorId, EditorInfo, Event, IdeClientId, Outbox, Responder, Role, Topic};
use crate::core::position::{clamp_to_line_col, to_char_idx, to_wire};
use crate::core::{Document, LineCol, PositionEncoding, SyncState, TextChange, WirePosition};
use moonkale_protocol::jsonrpc::{self as message, Params, ResponseError, code};

/// Total bytes the workspace holds: every editor's buffers (text, URI,
/// language id) and the diagnostics.
pub const MAX_TOTAL_BYTES: usize = 512 << 20;
/// Open documents per editor.
pub const MAX_DOCUMENTS_PER_EDITOR: usize = 20_000;

/// The command Helix keymaps call to push their selection (editors.md §3b).
pub const SELECTION_COMMAND: &str = "moonkale.selection";

/// Caps on what editors may make the workspace hold.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub total_bytes: usize,
    pub documents_per_editor: usize,
    /// Of `total_bytes`, what diagnostics may hold.
    pub diagnostics_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            total_bytes: MAX_TOTAL_BYTES,
            documents_per_editor: MAX_DOCUMENTS_PER_EDITOR,
            diagnostics_bytes: super::diagnostics::MAX_DIAGNOSTICS_BYTES,
        }
    }
}

pub(super) struct Workspace {
    root: PathBuf,
    limits: Limits,
    editors: BTreeMap<EditorId, Editor>,
    diagnostics: DiagnosticsStore,
    /// A logical clock: bumped on every event that shows an editor is in use.
    clock: u64,
    /// Bytes the editors' buffers hold ([`held_bytes`]); the diagnostics
    /// count their own.
    total_bytes: usize,
    version_waiters: Vec<VersionWaiter>,
    /// Connected Claude Code CLIs.
    ide_clients: BTreeMap<IdeClientId, IdeClient>,
    /// `at_mentioned` notifications waiting for a CLI to connect.
    mention_queue: Vec<String>,
    /// Edits Claude Code proposed (`openDiff`) that the user has not decided.
    proposals: Vec<proposals::Proposal>,
    /// Requests we sent editors whose answers decide something.
    awaited_answers: HashMap<(EditorId, message::RequestId), Awaited>,
    /// Agent sessions' subscribers, approvals and progress.
    agent: agent::AgentLink,
    /// Service terminals' subscribers.
    terminals: terminal::TerminalLink,
    /// Who hears which session and terminal.
    subscriptions: Subscriptions,
    /// The active editor's selection as `selection_changed` params.
    selection_tx: tokio::sync::watch::Sender<Option<Value>>,
}

/// What an editor's answer to one of our requests decides.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Awaited {
    Proposal(u64),
    Approval(String),
    /// One question (by index) of an `AskUserQuestion` approval.
    Question(String, usize),
}

struct IdeClient {
    outbox: tokio::sync::mpsc::Sender<String>,
    /// From `ide_connected`.
    cli_pid: Option<u32>,
}

struct Editor {
    info: EditorInfo,
    outbox: Outbox,
    docs: HashMap<Url, OpenDocument>,
    selection: Option<Selection>,
    /// Clock value of this editor's latest sign of use; the highest is the
    /// workspace's active editor.
    last_active: u64,
}

struct OpenDocument {
    doc: Document,
    /// Clock value of the latest open/change/save from this editor.
    touched: u64,
}

/// The latest cursor/selection of one editor, in char columns.
struct Selection {
    uri: Url,
    anchor: LineCol,
    cursor: LineCol,
    source: &'static str,
}

struct VersionWaiter {
    uri: Url,
    version: i32,
    reply: Responder,
}

impl Workspace {
    pub(super) fn new(
        root: PathBuf,
        limits: Limits,
        selection_tx: tokio::sync::watch::Sender<Option<Value>>,
    ) -> Workspace {
        Workspace {
            root,
            limits,
            editors: BTreeMap::new(),
            diagnostics: DiagnosticsStore::default(),
            clock: 0,
            total_bytes: 0,
            version_waiters: Vec::new(),
            ide_clients: BTreeMap::new(),
            mention_queue: Vec::new(),
            proposals: Vec::new(),
            awaited_answers: HashMap::new(),
            agent: agent::AgentLink::default(),
            terminals: terminal::TerminalLink::default(),
            subscriptions: Subscriptions::default(),
            selection_tx,
        }
    }

    pub(super) fn handle(&mut self, event: Event) {
        tracing::trace!(?event, "hub event");
        self.handle_event(event);
        // Every event may move the active editor or its selection; the
        // watchers (Claude Code connections) only hear of real changes, and
        // without any the payload is not even computed.
        if self.ide_clients.is_empty() {
            return;
        }
        let payload = self.latest_selection_payload();
        self.selection_tx.send_if_modified(|current| {
            let changed = *current != payload;
            if changed {
                *current = payload;
            }
            changed
        });
    }

    fn handle_event(&mut self, event: Event) {
        match event {
            Event::IdeAttach { client, outbox } => self.ide_attach(client, outbox),
            Event::IdeDetach { client } => {
                self.ide_clients.remove(&client);
                self.withdraw_proposals_of(client);
            }
            Event::EditorResponse { editor, id, result } => {
                match self.awaited_answers.remove(&(editor, id)) {
                    Some(Awaited::Proposal(proposal)) => self.proposal_button(proposal, result),
                    Some(Awaited::Approval(approval)) => {
                        let title = result.ok().and_then(|v| {
                            v.get("title").and_then(Value::as_str).map(str::to_owned)
                        });
                        self.approval_button(approval, title.as_deref());
                    }
                    Some(Awaited::Question(approval, index)) => {
                        let title = result.ok().and_then(|v| {
                            v.get("title").and_then(Value::as_str).map(str::to_owned)
                        });
                        self.question_button(approval, index, title.as_deref());
                    }
                    None => {} // an answer nothing waits for (progress creation, …)
                }
            }
            Event::Publish {
                topic,
                method,
                params,
            } => self.publish(&topic, method, params),
            Event::Subscribe { editor, topic } => {
                if self.editors.contains_key(&editor) {
                    self.subscriptions.subscribe(editor, topic);
                }
            }
            Event::TopicEnded { topic } => self.subscriptions.end(&topic),
            Event::AgentApproval { approval } => self.agent_approval(approval),
            Event::AgentApprovalClosed { session, approval } => {
                self.agent_approval_closed(&session, &approval)
            }
            Event::AgentProgress { session, progress } => self.agent_progress(&session, progress),
            Event::WorkspaceTrust { trusted, message } => self.workspace_trust(trusted, message),
            Event::AgentToolCall {
                tool,
                arguments,
                reply,
            } => {
                let answer = catch_unwind(AssertUnwindSafe(|| self.agent_tool(&tool, &arguments)))
                    .unwrap_or_else(|_| {
                        tracing::error!(%tool, "agent tool handler panicked");
                        Err(ResponseError::new(
                            code::INTERNAL_ERROR,
                            format!("internal error in {tool}"),
                        ))
                    });
                reply.send(answer);
            }
            Event::IdeConnected { client, pid } => {
                if let Some(c) = self.ide_clients.get_mut(&client) {
                    c.cli_pid = pid;
                }
            }
            Event::IdeToolCall {
                client,
                tool,
                arguments,
                reply,
            } => {
                // A panic drops `reply`, which then answers an internal error.
                let result = catch_unwind(AssertUnwindSafe(|| {
                    if tool == "openDiff" {
                        self.open_diff(client, &arguments, reply)
                    } else {
                        reply.send(self.ide_tool(client, &tool, &arguments))
                    }
                }));
                if result.is_err() {
                    tracing::error!(%tool, "IDE tool handler panicked");
                }
            }
            Event::Attach {
                editor,
                info,
                outbox,
            } => {
                tracing::info!(editor = editor.0, client = %info.client_name, transport = ?info.transport, "editor attached");
                self.clock += 1;
                let last_active = if info.role == Role::Editor {
                    self.clock
                } else {
                    0
                };
                self.editors.insert(
                    editor,
                    Editor {
                        info,
                        outbox,
                        docs: HashMap::new(),
                        selection: None,
                        last_active,
                    },
                );
            }
            Event::Detach { editor } => {
                if let Some(gone) = self.editors.remove(&editor) {
                    tracing::info!(editor = editor.0, client = %gone.info.client_name, "editor detached");
                    self.total_bytes -= gone
                        .docs
                        .iter()
                        .map(|(uri, d)| held_bytes(uri, &d.doc))
                        .sum::<usize>();
                }
                self.diagnostics.remove_editor(editor);
                self.subscriptions.detach(editor);
                self.agent_detach(editor);
                self.terminal_detach(editor);
            }
            Event::Notification {
                editor,
                method,
                params,
            } => {
                let result = catch_unwind(AssertUnwindSafe(|| {
                    self.notification(editor, &method, params)
                }));
                if result.is_err() {
                    tracing::error!(editor = editor.0, %method, "notification handler panicked");
                }
            }
            Event::Request {
                editor,
                method,
                params,
                reply,
            } => {
                // A panic drops `reply`, which then answers an internal error.
                let result = catch_unwind(AssertUnwindSafe(|| {
                    self.request(editor, &method, params, reply)
                }));
                if result.is_err() {
                    tracing::error!(editor = editor.0, %method, "request handler panicked");
                }
            }
        }
    }

    // ----- notifications -------------------------------------------------

    fn notification(&mut self, editor: EditorId, method: &str, params: Params) {
        if !self.editors.contains_key(&editor) {
            return;
        }
        match method {
            "textDocument/didOpen" => self.did_open(editor, params),
            "textDocument/didChange" => self.did_change(editor, params),
            "textDocument/didSave" => self.did_save(editor, params),
            "textDocument/didClose" => self.did_close(editor, params),
            "moonkale/selectionChanged" => self.selection_changed(editor, params),
            "moonkale/publishDiagnostics" => self.publish_diagnostics(editor, params),
            "textDocument/willSave"
            | "workspace/didChangeConfiguration"
            | "workspace/didChangeWorkspaceFolders"
            | "workspace/didChangeWatchedFiles" => {}
            _ if method.starts_with("$/") => {}
            _ => tracing::debug!(editor = editor.0, method, "ignoring unknown notification"),
        }
    }

    fn did_open(&mut self, editor: EditorId, params: Params) {
        let Some(p) =
            self.parse::<lsp_types::DidOpenTextDocumentParams>(editor, "didOpen", &params)
        else {
            return;
        };
        let item = p.text_document;
        if !accepted_scheme(&item.uri) {
            return self.violation(
                editor,
                format!(
                    "didOpen of {} refused: only file: and untitled: URIs",
                    item.uri
                ),
            );
        }
        let ed = self.editors.get(&editor).expect("checked by caller");
        let old = ed.docs.get(&item.uri);
        let replaced = old.map_or(0, |d| held_bytes(&item.uri, &d.doc));
        let limits = self.limits;
        if old.is_none() && ed.docs.len() >= limits.documents_per_editor {
            let why = format!("over {} open documents", limits.documents_per_editor);
            return self.violation(editor, format!("didOpen of {} refused: {why}", item.uri));
        }
        let adds = item.uri.as_str().len() + item.language_id.len() + item.text.len();
        if self.held() - replaced + adds > limits.total_bytes {
            let why = format!("the workspace would hold over {} bytes", limits.total_bytes);
            return self.violation(editor, format!("didOpen of {} refused: {why}", item.uri));
        }
        let doc = match Document::open(&item.text, item.version, &item.language_id) {
            Ok(doc) => doc,
            Err(err) => {
                return self.violation(editor, format!("didOpen of {} refused: {err}", item.uri));
            }
        };
        self.clock += 1;
        self.total_bytes = self.total_bytes - replaced + held_bytes(&item.uri, &doc);
        let ed = self.editors.get_mut(&editor).expect("checked by caller");
        ed.docs.insert(
            item.uri.clone(),
            OpenDocument {
                doc,
                touched: self.clock,
            },
        );
        self.mark_active(editor);
        self.wake_version_waiters(&item.uri);
    }

    fn did_change(&mut self, editor: EditorId, params: Params) {
        let Some(p) =
            self.parse::<lsp_types::DidChangeTextDocumentParams>(editor, "didChange", &params)
        else {
            return;
        };
        let uri = p.text_document.uri;
        let ed = self.editors.get_mut(&editor).expect("checked by caller");
        let encoding = ed.info.encoding;
        let Some(open) = ed.docs.get_mut(&uri) else {
            return self.violation(editor, format!("didChange for {uri}, which is not open"));
        };
        let changes: Vec<TextChange> = p
            .content_changes
            .into_iter()
            .map(|c| TextChange {
                range: c.range.map(|r| (r.start.into(), r.end.into())),
                text: c.text,
            })
            .collect();
        let before = open.doc.len_bytes();
        let mut outcome = open
            .doc
            .apply_changes(p.text_document.version, &changes, encoding);
        let after = open.doc.len_bytes();
        let limit = self.limits.total_bytes;
        let held = self.total_bytes + self.diagnostics.bytes();
        if outcome.is_ok() && held - before + after > limit {
            // Keep the change (the editor has it) but stop trusting our copy.
            let err = crate::core::ChangeError::TooLarge {
                bytes: held - before + after,
                limit,
            };
            open.doc.mark_desynced(&err);
            outcome = Err(err);
        }
        self.total_bytes = self.total_bytes - before + after;
        self.clock += 1;
        open.touched = self.clock;
        match outcome {
            Ok(Some(end)) => {
                ed.selection = Some(Selection {
                    uri: uri.clone(),
                    anchor: end,
                    cursor: end,
                    source: "edit",
                });
                self.mark_active(editor);
                self.wake_version_waiters(&uri);
            }
            Ok(None) => self.wake_version_waiters(&uri),
            Err(err) => self.violation(editor, format!("didChange for {uri} refused: {err}")),
        }
    }

    fn did_save(&mut self, editor: EditorId, params: Params) {
        let Some(p) =
            self.parse::<lsp_types::DidSaveTextDocumentParams>(editor, "didSave", &params)
        else {
            return;
        };
        let uri = p.text_document.uri;
        let ed = self.editors.get_mut(&editor).expect("checked by caller");
        let Some(open) = ed.docs.get_mut(&uri) else {
            return self.violation(editor, format!("didSave for {uri}, which is not open"));
        };
        let before = open.doc.len_bytes();
        let outcome = open.doc.saved(p.text.as_deref());
        self.total_bytes = self.total_bytes - before + open.doc.len_bytes();
        self.clock += 1;
        open.touched = self.clock;
        if let Err(err) = outcome {
            self.violation(editor, format!("didSave for {uri}: {err}"));
        }
    }

    fn did_close(&mut self, editor: EditorId, params: Params) {
        let Some(p) =
            self.parse::<lsp_types::DidCloseTextDocumentParams>(editor, "didClose", &params)
        else {
            return;
        };
        let uri = p.text_document.uri;
        let ed = self.editors.get_mut(&editor).expect("checked by caller");
        match ed.docs.remove(&uri) {
            Some(open) => {
                self.total_bytes -= held_bytes(&uri, &open.doc);
                if ed.selection.as_ref().is_some_and(|s| s.uri == uri) {
                    ed.selection = None;
                }
            }
            None => self.violation(editor, format!("didClose for {uri}, which is not open")),
        }
    }

    fn selection_changed(&mut self, editor: EditorId, params: Params) {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Params {
            text_document: lsp_types::TextDocumentIdentifier,
            selection: Option<lsp_types::Range>,
            cursor: Option<lsp_types::Position>,
        }
        let Some(p) = self.parse::<Params>(editor, "moonkale/selectionChanged", &params) else {
            return;
        };
        let (anchor, cursor) = match (p.selection, p.cursor) {
            (Some(r), Some(c)) => {
                // The anchor is whichever end of the selection the cursor is not at.
                let anchor = if c == r.start { r.end } else { r.start };
                (anchor, c)
            }
            (Some(r), None) => (r.start, r.end),
            (None, Some(c)) => (c, c),
            (None, None) => {
                return self.violation(
                    editor,
                    "moonkale/selectionChanged needs `selection` or `cursor`".into(),
                );
            }
        };
        self.set_selection(
            editor,
            p.text_document.uri,
            anchor.into(),
            cursor.into(),
            "moonkale/selectionChanged",
        );
    }

    fn publish_diagnostics(&mut self, editor: EditorId, params: Params) {
        #[derive(Deserialize)]
        struct Params {
            uri: Url,
            source: String,
            diagnostics: Vec<lsp_types::Diagnostic>,
        }
        let Some(p) = self.parse::<Params>(editor, "moonkale/publishDiagnostics", &params) else {
            return;
        };
        let encoding = self.editors[&editor].info.encoding;
        let entry = SourceDiagnostics::new(editor, encoding, p.diagnostics);
        let budget = (self.limits.total_bytes.saturating_sub(self.total_bytes))
            .min(self.limits.diagnostics_bytes);
        if let Err(why) = self.diagnostics.publish(p.uri, p.source, entry, budget) {
            self.violation(editor, why);
        }
    }

    // ----- requests ------------------------------------------------------

    /// Answers a request now, or parks `reply` (or hands it to a host) to
    /// be answered later.
    fn request(&mut self, editor: EditorId, method: &str, params: Params, reply: Responder) {
        if !self.editors.contains_key(&editor) {
            return reply.send(Err(ResponseError::new(
                code::SERVER_NOT_INITIALIZED,
                "not initialized",
            )));
        }
        let answer = match method {
            "textDocument/codeAction" => self.code_action(editor, params),
            "textDocument/hover" => self.position_request(editor, &params, "hover"),
            "textDocument/completion" => self.position_request(editor, &params, "completion"),
            "textDocument/signatureHelp" => self.position_request(editor, &params, "signatureHelp"),
            "textDocument/references" => self.position_request(editor, &params, "references"),
            "textDocument/documentHighlight" => {
                self.position_request(editor, &params, "documentHighlight")
            }
            "textDocument/definition"
            | "textDocument/declaration"
            | "textDocument/typeDefinition"
            | "textDocument/implementation" => self.position_request(editor, &params, "definition"),
            "textDocument/diagnostic" => self.pull_diagnostics(editor, params),
            "workspace/executeCommand" if command_name(&params) == Some(START_CLAUDE_COMMAND) => {
                let args = parse_params::<lsp_types::ExecuteCommandParams>(&params)
                    .map(|p| p.arguments)
                    .unwrap_or_default();
                return self.start_claude_command(editor, &args, reply);
            }
            "workspace/executeCommand" if command_name(&params) == Some(TRUST_COMMAND) => {
                return self.trust_command(editor, &params, reply);
            }
            "workspace/executeCommand" => self.execute_command(editor, params),
            "moonkale/status" => {
                Ok(serde_json::to_value(self.status()).expect("status serializes"))
            }
            "moonkale/document" => self.document(params),
            "moonkale/waitForVersion" => return self.wait_for_version(params, reply),
            m if m.starts_with("moonkale/agent/") => {
                return self.agent_request(editor, method, params, reply);
            }
            m if m.starts_with("moonkale/terminal/") => {
                return self.terminal_request(editor, method, params, reply);
            }
            #[cfg(test)]
            "moonkale/test/panic" => panic!("injected by a test"),
            _ => Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                format!("unknown method {method}"),
            )),
        };
        reply.send(answer);
    }

    fn code_action(&mut self, editor: EditorId, params: Params) -> Result<Value, ResponseError> {
        let p: lsp_types::CodeActionParams = parse_params(&params)?;
        check_range(&p.range)?;
        let uri = p.text_document.uri;
        self.set_selection(
            editor,
            uri.clone(),
            p.range.start.into(),
            p.range.end.into(),
            "codeAction",
        );
        if uri.scheme() != "file" {
            return Ok(json!([]));
        }
        let mut actions = self.proposal_actions(&uri, &p.range);
        actions.extend(self.approval_actions());
        actions.push(json!({
            "title": "Send selection to Claude Code",
            "kind": "source",
            "command": {
                "title": "Send selection to Claude Code",
                "command": SEND_TO_CLAUDE_COMMAND,
                "arguments": [uri, p.range],
            },
        }));
        actions.push(json!({
            "title": "Start Claude Code here",
            "kind": "source",
            "command": {"title": "Start Claude Code here", "command": START_CLAUDE_COMMAND, "arguments": []},
        }));
        actions.extend(self.trust_action());
        Ok(Value::Array(actions))
    }

    /// Requests that carry the editor's cursor: we have nothing to add to the
    /// answer, but the position tells us where the user is.
    fn position_request(
        &mut self,
        editor: EditorId,
        params: &RawValue,
        source: &'static str,
    ) -> Result<Value, ResponseError> {
        let p: lsp_types::TextDocumentPositionParams = parse_params(params)?;
        let pos = p.position.into();
        self.set_selection(editor, p.text_document.uri, pos, pos, source);
        Ok(Value::Null)
    }

    fn pull_diagnostics(
        &mut self,
        editor: EditorId,
        params: Params,
    ) -> Result<Value, ResponseError> {
        let p: lsp_types::DocumentDiagnosticParams = parse_params(&params)?;
        let uri = p.text_document.uri;
        let to = self.editors[&editor].info.encoding;
        // What this editor forwarded itself it already shows; echoing it back
        // would show every diagnostic twice.
        let mut items = Vec::new();
        for entry in self
            .diagnostics
            .for_uri(&uri)
            .filter(|e| e.editor != editor)
        {
            for d in &entry.items {
                let mut d = d.clone();
                d.range = self.convert_range(&uri, d.range, entry.encoding, to);
                items.push(d);
            }
        }
        Ok(json!({"kind": "full", "items": items}))
    }

    fn execute_command(
        &mut self,
        editor: EditorId,
        params: Params,
    ) -> Result<Value, ResponseError> {
        let p: lsp_types::ExecuteCommandParams = parse_params(&params)?;
        if p.command == ANSWER_APPROVAL_COMMAND {
            return self.answer_approval_command(&p.arguments);
        }
        if p.command == SEND_TO_CLAUDE_COMMAND {
            return self.send_to_claude(editor, &p.arguments);
        }
        if [ACCEPT_COMMAND, REJECT_COMMAND, REVERT_HUNK_COMMAND].contains(&p.command.as_str()) {
            return self.proposal_command(editor, &p.command, &p.arguments);
        }
        if p.command != SELECTION_COMMAND {
            return Err(ResponseError::invalid_params(format!(
                "unknown command {}",
                p.command
            )));
        }
        // Helix: [buffer_name, cursor_line, cursor_column, selection_line_start,
        // selection_line_end], 1-based, buffer_name relative to the editor's cwd.
        let bad = || {
            ResponseError::invalid_params(
                "moonkale.selection wants [path, line, column, first line, last line]",
            )
        };
        let args = &p.arguments;
        let path = args.first().and_then(Value::as_str).ok_or_else(bad)?;
        let num = |i: usize| -> Result<u32, ResponseError> {
            let n = args.get(i).and_then(Value::as_u64).ok_or_else(bad)?;
            Ok(u32::try_from(n).unwrap_or(u32::MAX).saturating_sub(1))
        };
        let (line, column, first, last) = (num(1)?, num(2)?, num(3)?, num(4)?);
        // Relative to the editor's cwd, which may be above a file (`../x`).
        let mut absolute = PathBuf::new();
        for c in self.root.join(path).components() {
            match c {
                std::path::Component::ParentDir => {
                    absolute.pop();
                }
                c => absolute.push(c),
            }
        }
        let uri =
            file_uri(&absolute).ok_or_else(|| ResponseError::invalid_params("not a file path"))?;
        let cursor = WirePosition {
            line,
            character: column,
        };
        let (anchor, cursor) = if first == last {
            (cursor, cursor)
        } else {
            (
                WirePosition {
                    line: first,
                    character: 0,
                },
                WirePosition {
                    line: last + 1,
                    character: 0,
                },
            )
        };
        // Helix counts columns in chars, whatever encoding it negotiated.
        self.set_selection_in(
            editor,
            uri,
            anchor,
            cursor,
            PositionEncoding::Utf32,
            "executeCommand",
        );
        Ok(Value::Null)
    }

    fn document(&self, params: Params) -> Result<Value, ResponseError> {
        #[derive(Deserialize)]
        struct Params {
            uri: Url,
        }
        let p: Params = parse_params(&params)?;
        let Some((editor, open)) = self.latest(&p.uri) else {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                format!("{} is not open in any editor", p.uri),
            ));
        };
        Ok(json!({
            "uri": p.uri,
            "editor": editor.0,
            "version": open.doc.version(),
            "dirty": open.doc.is_dirty(),
            "inSync": *open.doc.sync() == SyncState::InSync,
            "text": open.doc.text().to_string(),
        }))
    }

    fn wait_for_version(&mut self, params: Params, reply: Responder) {
        #[derive(Deserialize)]
        struct Params {
            uri: Url,
            version: i32,
        }
        let p: Params = match parse_params(&params) {
            Ok(p) => p,
            Err(e) => return reply.send(Err(e)),
        };
        if let Some((_, open)) = self
            .latest(&p.uri)
            .filter(|(_, o)| o.doc.version() >= p.version)
        {
            return reply.send(Ok(json!({"version": open.doc.version()})));
        }
        self.version_waiters.push(VersionWaiter {
            uri: p.uri,
            version: p.version,
            reply,
        });
    }

    // ----- shared helpers ------------------------------------------------

    /// Sends `method` to every connection subscribed to `topic`.
    fn publish(&self, topic: &Topic, method: &str, params: Value) {
        let body = message::notification(method, params);
        for editor in self.subscriptions.subscribers(topic) {
            if let Some(ed) = self.editors.get(&editor)
                && ed.outbox.try_send(body.clone()).is_err()
            {
                tracing::debug!(editor = editor.0, %method, "outbox full; notification dropped");
            }
        }
    }

    fn wake_version_waiters(&mut self, uri: &Url) {
        if self.version_waiters.is_empty() {
            return;
        }
        let Some(current) = self.latest(uri).map(|(_, o)| o.doc.version()) else {
            return;
        };
        let waiters = std::mem::take(&mut self.version_waiters);
        for w in waiters {
            if &w.uri == uri && current >= w.version {
                w.reply.send(Ok(json!({"version": current})));
            } else if !w.reply.is_closed() {
                self.version_waiters.push(w);
            }
        }
    }

    /// The buffer of `uri` in the editor that touched it most recently.
    fn latest(&self, uri: &Url) -> Option<(EditorId, &OpenDocument)> {
        self.editors
            .iter()
            .filter_map(|(id, ed)| ed.docs.get(uri).map(|d| (*id, d)))
            .max_by_key(|(_, d)| d.touched)
    }

    fn set_selection(
        &mut self,
        editor: EditorId,
        uri: Url,
        anchor: WirePosition,
        cursor: WirePosition,
        source: &'static str,
    ) {
        let encoding = self.editors[&editor].info.encoding;
        self.set_selection_in(editor, uri, anchor, cursor, encoding, source);
    }

    /// Records `editor`'s selection, clamped into the text it sees (its own
    /// buffer, else the latest buffer of that file anywhere).
    fn set_selection_in(
        &mut self,
        editor: EditorId,
        uri: Url,
        anchor: WirePosition,
        cursor: WirePosition,
        encoding: PositionEncoding,
        source: &'static str,
    ) {
        if self.editors[&editor].info.role != Role::Editor {
            return;
        }
        let text = match self.editors[&editor].docs.get(&uri) {
            Some(open) => Some(open.doc.text()),
            None => self.latest(&uri).map(|(_, open)| open.doc.text()),
        };
        let to_line_col = |p: WirePosition| match text {
            Some(text) => clamp_to_line_col(text, p, encoding),
            // No text to clamp against: keep the editor's numbers.
            None => LineCol {
                line: p.line,
                col: p.character,
            },
        };
        let selection = Selection {
            anchor: to_line_col(anchor),
            cursor: to_line_col(cursor),
            uri,
            source,
        };
        self.clock += 1;
        self.editors
            .get_mut(&editor)
            .expect("checked by caller")
            .selection = Some(selection);
        self.mark_active(editor);
    }

    fn mark_active(&mut self, editor: EditorId) {
        self.clock += 1;
        if let Some(ed) = self
            .editors
            .get_mut(&editor)
            .filter(|ed| ed.info.role == Role::Editor)
        {
            ed.last_active = self.clock;
        }
    }

    fn convert_range(
        &self,
        uri: &Url,
        range: lsp_types::Range,
        from: PositionEncoding,
        to: PositionEncoding,
    ) -> lsp_types::Range {
        let Some((_, open)) = self.latest(uri).filter(|_| from != to) else {
            return range;
        };
        let text = open.doc.text();
        let conv =
            |p: lsp_types::Position| to_wire(text, to_char_idx(text, p.into(), from), to).into();
        lsp_types::Range {
            start: conv(range.start),
            end: conv(range.end),
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &mut self,
        editor: EditorId,
        what: &str,
        params: &RawValue,
    ) -> Option<T> {
        match serde_json::from_str(params.get()) {
            Ok(p) => Some(p),
            Err(e) => {
                self.violation(editor, format!("{what} with invalid params: {e}"));
                None
            }
        }
    }

    /// Sends a request to an editor; its answer comes back as an
    /// `EditorResponse` event with the returned id.
    fn request_editor(
        &mut self,
        editor: EditorId,
        method: &str,
        params: Value,
    ) -> message::RequestId {
        self.clock += 1;
        let id = message::RequestId::String(format!("moonkale-{}", self.clock));
        if let Some(ed) = self.editors.get(&editor)
            && ed
                .outbox
                .try_send(message::request(&id, method, params))
                .is_err()
        {
            tracing::debug!(editor = editor.0, %method, "outbox full; request dropped");
        }
        id
    }

    /// Withdraws the questions (buttons) still open in editors about
    /// `decided`: it was decided elsewhere.
    fn cancel_questions(&mut self, decided: &Awaited) {
        let asked: Vec<(EditorId, message::RequestId)> = self
            .awaited_answers
            .iter()
            .filter(|(_, a)| *a == decided)
            .map(|(key, _)| key.clone())
            .collect();
        for (editor, id) in asked {
            self.awaited_answers.remove(&(editor, id.clone()));
            self.notify_editor(editor, "$/cancelRequest", json!({"id": id.to_json()}));
        }
    }

    /// The real editors (not observers), each with whether it shows
    /// `window/showMessageRequest` buttons.
    fn editors_with_buttons(&self) -> Vec<(EditorId, bool)> {
        self.editors
            .iter()
            .filter(|(_, ed)| ed.info.role == Role::Editor)
            .map(|(id, ed)| (*id, ed.info.shows_message_buttons))
            .collect()
    }

    /// Sends a notification to an editor (dropped if it does not read).
    fn notify_editor(&self, editor: EditorId, method: &str, params: Value) {
        if let Some(ed) = self.editors.get(&editor)
            && ed
                .outbox
                .try_send(message::notification(method, params))
                .is_err()
        {
            tracing::debug!(editor = editor.0, %method, "outbox full; notification dropped");
        }
    }

    /// Logs a protocol violation and tells the editor, which may not know
    /// that we stopped trusting its stream.
    fn violation(&mut self, editor: EditorId, what: String) {
        tracing::warn!(editor = editor.0, "protocol violation: {what}");
        if let Some(ed) = self.editors.get(&editor) {
            let body = message::notification(
                "window/logMessage",
                json!({"type": 2, "message": format!("moonkale: {what}")}),
            );
            if ed.outbox.try_send(body).is_err() {
                tracing::debug!(editor = editor.0, "outbox full; logMessage dropped");
            }
        }
    }

    /// Bytes the workspace holds against [`Limits::total_bytes`].
    fn held(&self) -> usize {
        self.total_bytes + self.diagnostics.bytes()
    }

    /// The workspace's active editor: the one with the latest sign of use.
    fn active_editor(&self) -> Option<(EditorId, &Editor)> {
        self.editors
            .iter()
            .filter(|(_, ed)| ed.info.role == Role::Editor)
            .max_by_key(|(_, ed)| ed.last_active)
            .map(|(id, ed)| (*id, ed))
    }

    pub(super) fn status(&self) -> Status {
        let active = self.active_editor().map(|(id, _)| id);
        let editors = self
            .editors
            .iter()
            .filter(|(_, ed)| ed.info.role == Role::Editor)
            .map(|(id, ed)| {
                let mut documents: Vec<DocumentStatus> = ed
                    .docs
                    .iter()
                    .map(|(uri, open)| DocumentStatus {
                        uri: uri.to_string(),
                        language_id: open.doc.language_id().to_owned(),
                        version: open.doc.version(),
                        dirty: open.doc.is_dirty(),
                        in_sync: *open.doc.sync() == SyncState::InSync,
                        bytes: open.doc.len_bytes(),
                        lines: open.doc.text().len_lines(),
                    })
                    .collect();
                documents.sort_by(|a, b| a.uri.cmp(&b.uri));
                EditorStatus {
                    id: *id,
                    client: ed.info.client_name.clone(),
                    client_version: ed.info.client_version.clone(),
                    process_id: ed.info.process_id,
                    transport: ed.info.transport,
                    position_encoding: ed.info.encoding.as_lsp_str(),
                    active: Some(*id) == active,
                    selection: ed.selection.as_ref().map(|s| SelectionStatus {
                        uri: s.uri.to_string(),
                        anchor: s.anchor,
                        cursor: s.cursor,
                        source: s.source,
                    }),
                    documents,
                }
            })
            .collect();
        Status {
            workspace: self.root.clone(),
            pid: std::process::id(),
            active_editor: active,
            editors,
            diagnostics: self.diagnostics.counts(),
            total_bytes: self.held(),
            claude_clients: self
                .ide_clients
                .iter()
                .map(|(id, c)| super::status::ClaudeClientStatus {
                    id: id.0,
                    pid: c.cli_pid,
                })
                .collect(),
            pending_proposals: self
                .proposals
                .iter()
                .map(|p| super::status::ProposalStatus {
                    tab_name: p.tab_name.clone(),
                    target: p.target.to_string(),
                    document: p.document.to_string(),
                })
                .collect(),
            trusted: self.agent_trusted(),
        }
    }
}

/// The `command` of `workspace/executeCommand` params, if they have one.
fn command_name(params: &RawValue) -> Option<&str> {
    #[derive(Deserialize)]
    struct P<'a> {
        #[serde(borrow)]
        command: &'a str,
    }
    serde_json::from_str::<P>(params.get())
        .ok()
        .map(|p| p.command)
}

/// What one open document holds against the caps: its text, URI and
/// language id.
fn held_bytes(uri: &Url, doc: &Document) -> usize {
    uri.as_str().len() + doc.language_id().len() + doc.len_bytes()
}

/// The `Url` of an absolute path in the canonical form (`core::uri`) that
/// the connections put every URI they receive into, so a document the service
/// names and the same document an editor names are one key.
pub(super) fn file_uri(path: &std::path::Path) -> Option<Url> {
    let form = crate::core::uri::from_path(path).ok()?;
    Url::parse(&form).ok()
}

/// The last component of a file URI's path, decoded (for messages).
pub(super) fn file_name(uri: &Url) -> String {
    uri.to_file_path()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

fn accepted_scheme(uri: &Url) -> bool {
    matches!(uri.scheme(), "file" | "untitled")
}

fn parse_params<T: serde::de::DeserializeOwned>(params: &RawValue) -> Result<T, ResponseError> {
    serde_json::from_str(params.get())
        .map_err(|e| ResponseError::invalid_params(format!("invalid params: {e}")))
}

fn check_range(r: &lsp_types::Range) -> Result<(), ResponseError> {
    if (r.start.line, r.start.character) > (r.end.line, r.end.character) {
        return Err(ResponseError::invalid_params(
            "range start is after its end",
        ));
    }
    Ok(())
}
