//! The state of one workspace and how each event changes it: the
//! [`Workspace`], its dispatch of events, notifications and requests, and
//! the code actions it offers. Each concept has its own module:
//! [`documents`] (each editor's buffers, their sync and caps),
//! [`selections`] (the sources, the active editor, Claude Code's payload),
//! [`outbox`] (what the hub sends editors and the answers it awaits),
//! [`diagnostics`] (forwarded and pulled), [`status`], and beside them the
//! links to Claude Code ([`ide`], [`proposals`]), the agent and terminals.
//!
//! Owned by the hub task alone (see the crate's header). Each editor's
//! buffers are kept separately, because two editors holding one file may
//! disagree until they save; questions about a file are answered from the
//! editor that touched it most recently.

use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use lsp_types::notification::DidOpenTextDocument;
use lsp_types::{CodeAction, CodeActionKind, CodeActionOrCommand, DidOpenTextDocumentParams, Url};
use serde_json::{Value, json};
use tokio::time::Instant;

mod agent;
mod changes;
mod diagnostics;
pub(crate) mod documents;
mod ide;
mod outbox;
mod proposals;
mod review;
mod selections;
mod status;
mod terminal;

pub use ide::{error_result, lenient_file_url, text_result};

use documents::{OpenDocument, VersionWaiter, held_bytes};
use outbox::Awaited;
use selections::Selection;

use super::core::pacing::Pacer;
use super::diagnostics::DiagnosticsStore;
use super::subscriptions::Subscriptions;
use super::{
    EditorId, EditorInfo, Event, IdeClientId, IdeScope, Outbox, Responder, Role,
    SelectionNotification,
};
use moonkale_protocol::Command;
use moonkale_protocol::dispatch::{Dispatch, parse as parse_params};
use moonkale_protocol::document::VersionParams;
use moonkale_protocol::editor::{EditorNotification, params_of};
use moonkale_protocol::ide::{CallToolResult, SelectionChanged};
use moonkale_protocol::jsonrpc::{self as message, Params, ResponseError, code};

/// Total bytes the workspace holds: every editor's buffers (text, URI,
/// language id) and the diagnostics.
pub const MAX_TOTAL_BYTES: usize = 512 << 20;
/// Open documents per editor.
pub const MAX_DOCUMENTS_PER_EDITOR: usize = 20_000;

/// How long an editor has to answer a proposal's `window/showDocument`.
const SHOW_DOCUMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Caps on what editors may make the workspace hold, and its timeouts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub total_bytes: usize,
    pub documents_per_editor: usize,
    /// Of `total_bytes`, what diagnostics may hold.
    pub diagnostics_bytes: usize,
    /// At most one `selection_changed` per this interval reaches Claude
    /// Code ([`crate::core::pacing`]).
    pub selection_interval: std::time::Duration,
    /// An editor that has not answered a proposal's `window/showDocument`
    /// by then is taken to have refused it.
    pub show_document_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            total_bytes: MAX_TOTAL_BYTES,
            documents_per_editor: MAX_DOCUMENTS_PER_EDITOR,
            diagnostics_bytes: super::diagnostics::MAX_DIAGNOSTICS_BYTES,
            selection_interval: super::SELECTION_INTERVAL,
            show_document_timeout: SHOW_DOCUMENT_TIMEOUT,
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
    /// `at_mentioned` notifications (with the file each names) waiting for
    /// a CLI that may see them to connect.
    mention_queue: Vec<(PathBuf, String)>,
    /// Edits Claude Code proposed (`openDiff`) that the user has not decided.
    proposals: Vec<proposals::Proposal>,
    /// Requests we sent editors whose answers decide something.
    awaited_answers: HashMap<(EditorId, message::RequestId), Awaited>,
    /// Agent sessions' subscribers, approvals and progress.
    agent: agent::AgentLink,
    /// Service terminals' subscribers.
    terminals: terminal::TerminalLink,
    /// The change-set host and its pending sets.
    changes: changes::ChangesLink,
    /// The review diagnostics each editor was last sent.
    review_published: review::Published,
    /// Who hears which session and terminal.
    subscriptions: Subscriptions,
    /// The active editor's selection as `selection_changed` params, as
    /// paced for Claude Code.
    selection_tx: tokio::sync::watch::Sender<Option<SelectionNotification>>,
    selection_pacer: Pacer<Option<SelectionChanged>, tokio::time::Instant>,
    /// What the payload last offered to the pacer was computed from.
    selection_offered: Option<Option<selections::SelectionInputs>>,
    /// What `moonkale/status/changed` last told (`None`: nobody listens).
    roster_told: Option<status::Roster>,
    /// How often the payload was computed for the pacer (tests count it).
    #[cfg(test)]
    pub(super) payloads_computed: u64,
    /// The hub loop's clock at the event being handled.
    now: Instant,
    /// When each proposal's `window/showDocument` counts as refused if it
    /// is still unanswered.
    show_deadlines: Vec<(Instant, EditorId, message::RequestId)>,
}

struct IdeClient {
    outbox: tokio::sync::mpsc::Sender<String>,
    /// What it may learn of the editors' documents.
    scope: IdeScope,
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
    /// It can show documents we name (`window/showDocument`): it said so at
    /// `initialize` and has not refused one of our proposals since.
    shows_documents: bool,
    /// Inlay hints on proposal documents were registered with it.
    hints_registered: bool,
}

impl Workspace {
    pub(super) fn new(
        root: PathBuf,
        limits: Limits,
        selection_tx: tokio::sync::watch::Sender<Option<SelectionNotification>>,
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
            changes: changes::ChangesLink::default(),
            review_published: review::Published::default(),
            subscriptions: Subscriptions::default(),
            selection_tx,
            selection_pacer: Pacer::new(limits.selection_interval, None),
            selection_offered: None,
            roster_told: None,
            #[cfg(test)]
            payloads_computed: 0,
            now: Instant::now(),
            show_deadlines: Vec::new(),
        }
    }

    /// Handles one event that arrived at `now` (the hub loop's clock: the
    /// workspace reads none).
    pub(super) fn handle(&mut self, event: Event, now: Instant) {
        tracing::trace!(?event, "hub event");
        self.now = now;
        self.handle_event(event);
        self.tell_status_subscribers();
        // Every event may move the active editor or its selection; the
        // watchers (Claude Code connections) only hear of real changes, as
        // paced, and without any watcher the payload is not even computed.
        if self.ide_clients.is_empty() {
            self.selection_offered = None;
            return;
        }
        let inputs = self.selection_inputs();
        if self.selection_offered.as_ref() == Some(&inputs) {
            // The same payload again: the pacer would keep what it has.
            return self.fire_selection(now);
        }
        let payload = self.latest_selection_payload();
        #[cfg(test)]
        {
            self.payloads_computed += 1;
        }
        self.selection_offered = Some(inputs);
        match self.selection_pacer.offer(now, payload) {
            Some(paced) => {
                let paced = paced.clone();
                let paced = paced.map(|p| self.selection_notification(p));
                self.selection_tx.send_replace(paced);
            }
            // A flood of events must not starve the pacer's timer.
            None => self.fire_selection(now),
        }
    }

    /// When the hub loop must call [`Workspace::timers_fired`]: a held-back
    /// selection is due, or an editor's time to show a proposal ran out.
    pub(super) fn due(&self) -> Option<Instant> {
        let shows = self.show_deadlines.iter().map(|(at, _, _)| *at);
        self.selection_pacer.due().into_iter().chain(shows).min()
    }

    /// The timer of [`Workspace::due`] fired: the newest selection goes
    /// out, and proposals not shown in time count as refused.
    pub(super) fn timers_fired(&mut self, now: Instant) {
        self.now = now;
        self.fire_selection(now);
        let (expired, waiting) = std::mem::take(&mut self.show_deadlines)
            .into_iter()
            .partition(|(at, _, _)| *at <= now);
        self.show_deadlines = waiting;
        for (_, editor, asked) in expired {
            self.show_proposal_timed_out(editor, asked);
        }
    }

    fn selection_notification(&self, params: SelectionChanged) -> SelectionNotification {
        let in_workspace = self.scope_sees(IdeScope::Workspace, &params.file_path);
        SelectionNotification::new(params, in_workspace)
    }

    /// Whether a connection of `scope` may learn of the file at `path`:
    /// [`IdeScope::sees`], and for a jailed one never a document an editor
    /// opened through a symlink ([`Event::DidOpen`]), which its tool
    /// arguments could not name either.
    pub(super) fn scope_sees(&self, scope: IdeScope, path: &std::path::Path) -> bool {
        scope == IdeScope::Host
            || (scope.sees(&self.root, path)
                && Url::from_file_path(path).is_ok_and(|uri| !self.through_symlink(&uri)))
    }

    /// [`Workspace::scope_sees`] for a document's URI.
    pub(super) fn scope_sees_uri(&self, scope: IdeScope, uri: &Url) -> bool {
        scope == IdeScope::Host || (scope.sees_uri(&self.root, uri) && !self.through_symlink(uri))
    }

    fn through_symlink(&self, uri: &Url) -> bool {
        self.editors
            .values()
            .any(|ed| ed.docs.get(uri).is_some_and(|d| d.through_symlink))
    }

    fn fire_selection(&mut self, now: Instant) {
        if let Some(paced) = self.selection_pacer.fire(now) {
            let paced = paced.clone();
            let paced = paced.map(|p| self.selection_notification(p));
            self.selection_tx.send_replace(paced);
        }
    }

    fn handle_event(&mut self, event: Event) {
        match event {
            Event::IdeAttach {
                client,
                scope,
                outbox,
            } => self.ide_attach(client, scope, outbox),
            Event::IdeDetach { client } => {
                self.ide_clients.remove(&client);
                self.withdraw_proposals_of(client);
            }
            Event::EditorResponse { editor, id, result } => {
                self.editor_response(editor, id, result)
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
            Event::AgentApprovalClosed { approval, .. } => self.agent_approval_closed(&approval),
            Event::AgentProgress { session, progress } => self.agent_progress(&session, progress),
            Event::WorkspaceTrust { trusted, message } => self.workspace_trust(trusted, message),
            Event::AgentSpare { spare } => self.agent.spare = spare,
            Event::AgentToolCall { call, reply } => {
                let tool = call.tool();
                let answer = catch_unwind(AssertUnwindSafe(|| self.agent_tool(call)))
                    .unwrap_or_else(|_| {
                        tracing::error!(%tool, "agent tool handler panicked");
                        Err(ResponseError::new(
                            code::INTERNAL_ERROR,
                            format!("internal error in {tool}"),
                        ))
                    });
                reply.send(answer);
            }
            Event::ChangesUpdated {
                sets,
                pending,
                announce,
            } => self.changes_updated(sets, pending, announce),
            Event::FileRewritten { uri, text } => self.file_rewritten(uri, text),
            Event::IdeConnected { client, pid } => {
                if let Some(c) = self.ide_clients.get_mut(&client) {
                    c.cli_pid = pid;
                }
            }
            Event::IdeToolCall {
                client,
                scope,
                call,
                reply,
            } => {
                let tool = call.tool();
                // A panic drops `reply`, which then answers an internal error.
                let result = catch_unwind(AssertUnwindSafe(|| {
                    self.ide_tool(client, scope, call, reply)
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
                let shows_documents = info.shows_documents;
                self.editors.insert(
                    editor,
                    Editor {
                        shows_documents,
                        hints_registered: false,
                        info,
                        outbox,
                        docs: HashMap::new(),
                        selection: None,
                        last_active,
                    },
                );
                self.agent_editors_changed();
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
                self.awaited_answers
                    .retain(|(asked, _), _| *asked != editor);
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
            Event::DidOpen {
                editor,
                params,
                through_symlink,
            } => {
                let result = catch_unwind(AssertUnwindSafe(|| {
                    match params_of::<DidOpenTextDocument>(&params) {
                        Ok(p) => self.opened(editor, p, through_symlink),
                        Err(invalid) => self.violation(editor, invalid.to_string()),
                    }
                }));
                if result.is_err() {
                    tracing::error!(editor = editor.0, "didOpen handler panicked");
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

    /// `textDocument/didOpen` ([`Event::DidOpen`]).
    fn opened(
        &mut self,
        editor: EditorId,
        params: DidOpenTextDocumentParams,
        through_symlink: bool,
    ) {
        if !self.editors.contains_key(&editor) {
            return;
        }
        let opened = self.did_open(editor, params, through_symlink);
        self.proposals_after_sync();
        // Editors may drop diagnostics of documents they do not have open,
        // so what concerns a document is sent again when an editor opens
        // (or re-opens) it.
        if let Some(uri) = opened {
            self.forget_review_sent(editor, &uri);
        }
        self.refresh_review_diagnostics();
    }

    /// An editor's notification, parsed here into its one type.
    fn notification(&mut self, editor: EditorId, method: &str, params: Params) {
        if !self.editors.contains_key(&editor) {
            return;
        }
        let notification = match EditorNotification::parse(method, &params) {
            Ok(notification) => notification,
            Err(invalid) => return self.violation(editor, invalid.to_string()),
        };
        match notification {
            EditorNotification::DidOpen(p) => self.opened(editor, p, false),
            EditorNotification::DidChange(p) => {
                self.did_change(editor, p);
                self.proposals_after_sync();
            }
            EditorNotification::DidSave(p) => self.did_save(editor, p),
            EditorNotification::DidClose(p) => {
                self.did_close(editor, p);
                self.proposals_after_sync();
            }
            EditorNotification::SelectionChanged(p) => self.selection_changed(editor, p),
            EditorNotification::PublishDiagnostics(p) => self.publish_diagnostics(editor, p),
            EditorNotification::Ignored => {}
            EditorNotification::Unknown(method) => {
                tracing::debug!(editor = editor.0, method, "ignoring unknown notification")
            }
        }
    }

    // ----- requests ------------------------------------------------------

    /// Answers a request now, or parks `reply` (or hands it to a host) to
    /// be answered later. Params are parsed once, here, into the method's
    /// own type; the handlers take typed values.
    fn request(&mut self, editor: EditorId, method: &str, params: Params, reply: Responder) {
        if !self.editors.contains_key(&editor) {
            return reply.send(Err(ResponseError::new(
                code::SERVER_NOT_INITIALIZED,
                "not initialized",
            )));
        }
        // The hosts' namespaces go to them whole; they dispatch typed.
        if method.starts_with(moonkale_protocol::agent::NAMESPACE) {
            return self.agent_request(editor, method, params, reply);
        }
        if method.starts_with(moonkale_protocol::terminal::NAMESPACE) {
            return self.terminal_request(editor, method, params, reply);
        }
        if method.starts_with(moonkale_protocol::changes::NAMESPACE) {
            return self.changes_request(editor, method, params, reply);
        }
        #[cfg(test)]
        if method == "moonkale/test/panic" {
            panic!("injected by a test");
        }
        use lsp_types::request as lsp;
        use moonkale_protocol::{document, proposal, status, to_json};
        let now = |answer: Result<Value, ResponseError>| answer.map(Routed::Now);
        let routed = Dispatch::new(method, &params)
            .on::<lsp::CodeActionRequest>(|p| now(self.code_action(editor, p)))
            .on::<CursorOf<lsp::HoverRequest>>(|p| now(self.position_request(editor, p, "hover")))
            .on::<CursorOf<lsp::Completion>>(|p| {
                now(self.position_request(editor, p, "completion"))
            })
            .on::<CursorOf<lsp::SignatureHelpRequest>>(|p| {
                now(self.position_request(editor, p, "signatureHelp"))
            })
            .on::<CursorOf<lsp::References>>(|p| {
                now(self.position_request(editor, p, "references"))
            })
            .on::<CursorOf<lsp::DocumentHighlightRequest>>(|p| {
                now(self.position_request(editor, p, "documentHighlight"))
            })
            .on::<CursorOf<lsp::GotoDefinition>>(|p| {
                now(self.position_request(editor, p, "definition"))
            })
            .on::<CursorOf<lsp::GotoDeclaration>>(|p| {
                now(self.position_request(editor, p, "definition"))
            })
            .on::<CursorOf<lsp::GotoTypeDefinition>>(|p| {
                now(self.position_request(editor, p, "definition"))
            })
            .on::<CursorOf<lsp::GotoImplementation>>(|p| {
                now(self.position_request(editor, p, "definition"))
            })
            .on::<lsp::DocumentDiagnosticRequest>(|p| now(self.pull_diagnostics(editor, p)))
            .on::<lsp::ExecuteCommand>(|p| Ok(Routed::Command(p)))
            .on::<status::StatusRequest>(|_| {
                now(Ok(
                    serde_json::to_value(self.status()).expect("status serializes")
                ))
            })
            .on::<status::Subscribe>(|_| now(Ok(self.status_subscribe(editor))))
            .on::<document::DocumentText>(|p| now(self.document(p)))
            .on::<lsp::InlayHintRequest>(|p| now(self.inlay_hints(editor, p)))
            .on::<proposal::List>(|_| {
                let proposals = self.proposal_list();
                now(Ok(to_json(&proposal::ListResult { proposals })))
            })
            .on::<document::WaitForVersion>(|p| Ok(Routed::WaitForVersion(p)))
            .finish();
        match routed {
            Ok(Routed::Now(value)) => reply.send(Ok(value)),
            Ok(Routed::Command(p)) => self.execute_command(editor, p, reply),
            Ok(Routed::WaitForVersion(p)) => self.wait_for_version(p, reply),
            Err(e) => reply.send(Err(e)),
        }
    }

    fn code_action(
        &mut self,
        editor: EditorId,
        p: lsp_types::CodeActionParams,
    ) -> Result<Value, ResponseError> {
        check_range(&p.range)?;
        let uri = p.text_document.uri;
        self.set_selection(
            editor,
            uri.clone(),
            p.range.start.into(),
            p.range.end.into(),
            "codeAction",
        );
        let mut actions = Vec::new();
        if uri.scheme() == "file" {
            actions = self.proposal_actions(&uri, &p.range);
            actions.extend(self.change_actions(&uri, &p.range));
            actions.extend(self.approval_actions());
            let title = "Send selection to Claude Code";
            let arguments = vec![json!(uri), json!(p.range)];
            actions.push(command_action(
                title.into(),
                CodeActionKind::SOURCE,
                Command::SendToClaude,
                arguments,
            ));
            let title = "Start Claude Code here";
            actions.push(command_action(
                title.into(),
                CodeActionKind::SOURCE,
                Command::StartClaude,
                Vec::new(),
            ));
            actions.extend(self.trust_action());
        }
        let actions: Vec<CodeActionOrCommand> = actions
            .into_iter()
            .map(CodeActionOrCommand::CodeAction)
            .collect();
        Ok(serde_json::to_value(actions).expect("code actions serialize"))
    }

    /// `workspace/executeCommand`, by command: the name is parsed into a
    /// [`Command`] here, once; some answer now, the others (the agent's and
    /// the terminals') are answered by their host.
    fn execute_command(
        &mut self,
        editor: EditorId,
        p: lsp_types::ExecuteCommandParams,
        reply: Responder,
    ) {
        let Some(command) = Command::parse(&p.command) else {
            let unknown = format!("unknown command {}", p.command);
            return reply.send(Err(ResponseError::invalid_params(unknown)));
        };
        let args = &p.arguments;
        let answer = match command {
            Command::StartClaude => return self.start_claude_command(editor, args, reply),
            Command::TrustWorkspace => return self.trust_command(editor, args, reply),
            Command::AnswerApproval => return self.answer_approval_command(args, reply),
            Command::UndoChange | Command::KeepChange | Command::OpenChanges => {
                return self.changes_command(editor, command, args, reply);
            }
            Command::SendToClaude => self.send_to_claude(editor, args),
            Command::AcceptProposal
            | Command::RejectProposal
            | Command::RevertHunk
            | Command::KeepHunk => self.proposal_command(editor, command, args),
            Command::Selection => self.selection_command(editor, args),
        };
        reply.send(answer);
    }
}

/// A code action that runs one of our commands; its command has the same
/// title, so editors that show either show the same words.
fn command_action(
    title: String,
    kind: CodeActionKind,
    command: Command,
    arguments: Vec<Value>,
) -> CodeAction {
    CodeAction {
        title: title.clone(),
        kind: Some(kind),
        command: Some(lsp_types::Command::new(
            title,
            command.name().into(),
            Some(arguments),
        )),
        ..CodeAction::default()
    }
}

/// A tool's answer as the JSON a [`Responder`] takes.
fn tool_result(result: CallToolResult) -> Value {
    serde_json::to_value(result).expect("a tool result serializes")
}

/// The `Url` of an absolute path in the canonical form (`core::uri`) that
/// the connections put every URI they receive into, so a document the service
/// names and the same document an editor names are one key.
pub(super) fn file_uri(path: &std::path::Path) -> Option<Url> {
    crate::core::uri::from_path(path).ok()?.to_url()
}

/// The last component of a file URI's path, decoded (for messages).
pub(super) fn file_name(uri: &Url) -> String {
    uri.to_file_path()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

fn check_range(r: &lsp_types::Range) -> Result<(), ResponseError> {
    if (r.start.line, r.start.character) > (r.end.line, r.end.character) {
        return Err(ResponseError::invalid_params(
            "range start is after its end",
        ));
    }
    Ok(())
}

/// A request, parsed, before it meets its reply.
enum Routed {
    Now(Value),
    Command(lsp_types::ExecuteCommandParams),
    WaitForVersion(VersionParams),
}

/// Request `R` read only for where the cursor is: the hub answers nothing
/// of its own to these, and takes them whatever else they carry.
struct CursorOf<R>(std::marker::PhantomData<R>);

impl<R: lsp_types::request::Request> lsp_types::request::Request for CursorOf<R> {
    type Params = lsp_types::TextDocumentPositionParams;
    type Result = Value;
    const METHOD: &'static str = R::METHOD;
}
