//! Claude Code's view of the workspace: the IDE tools answered from the hub's
//! state, and `at_mentioned` (the `selection_changed` payload is built in
//! `selections`).
//!
//! The shapes are [`moonkale_protocol::ide`]'s: results are MCP
//! `CallToolResult`s whose text is a plain word or JSON; lines and
//! characters are 0-based and characters count UTF-16 code units, as VS
//! Code's do. Paths arrive here already confined to the workspace by the
//! IDE adapter.
//!
//! **Invariant:** what a connection learns of the editors' documents (the
//! selection, the open documents, diagnostics, mentions) passes its
//! [`IdeScope`]: a CLI jailed behind a sandbox link never hears of a
//! document outside the workspace, which its tool arguments could not name
//! either.

use std::path::Path;

use lsp_types::{DiagnosticSeverity, NumberOrString, Position, Range, Url};
use serde::Serialize;
use serde_json::{Value, json};

use super::{OpenDocument, Workspace, tool_result};
use crate::Responder;
use crate::core::PositionEncoding;
use crate::core::position::to_wire;
use crate::{IdeClientId, IdeScope};
use moonkale_protocol::ide::{
    AtMentioned, CallToolResult, CurrentSelection, Diagnostic, DocumentDirty, DocumentSave,
    FileDiagnostics, IdeToolCall, OpenEditors, OpenFile, OpenedFile, Tab, ToolFailure,
    WorkspaceFolder, WorkspaceFolders,
};
use moonkale_protocol::jsonrpc::{self as message, ResponseError};

/// Mentions kept while no Claude Code is connected.
const MAX_QUEUED_MENTIONS: usize = 32;
/// Largest JSON text of a listing answer (`getDiagnostics`,
/// `getOpenEditors`): what is over it is left out, with a note, so an answer
/// stays far below the IDE connection's outgoing cap and never costs the
/// client its connection.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A tool's text answer, as the JSON a [`crate::Responder`] takes.
pub fn text_result(text: impl Into<String>) -> Value {
    tool_result(CallToolResult::text(text))
}

/// A tool's failure, as the JSON a [`crate::Responder`] takes.
pub fn error_result(text: impl Into<String>) -> Value {
    tool_result(CallToolResult::error(text))
}

fn pretty(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value).expect("JSON serializes")
}

/// An answer the CLI parses: `value` as pretty JSON text.
fn json_result(value: &impl Serialize) -> CallToolResult {
    CallToolResult::text(pretty(value))
}

/// A listing as [`json_result`], with `note` (what was left out) as a second
/// text item when there is one: the CLI parses the first item only, the
/// model sees both.
fn listing_result(value: &impl Serialize, note: Option<String>) -> CallToolResult {
    CallToolResult::texts([pretty(value)].into_iter().chain(note))
}

/// What is left of [`MAX_ANSWER_BYTES`] while a listing is built.
struct Budget(usize);

impl Budget {
    /// Takes what `v` costs pretty-printed at nesting `depth` (each of its
    /// lines indented by two spaces a level, then `,` and a line break);
    /// `false`, taking nothing, if that is more than is left.
    fn take(&mut self, v: &impl Serialize, depth: usize) -> bool {
        let text = pretty(v);
        let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
        let cost = text.len() + lines * 2 * depth + 2;
        match self.0.checked_sub(cost) {
            Some(left) => {
                self.0 = left;
                true
            }
            None => false,
        }
    }
}

impl Workspace {
    /// Answers a `tools/call`: at once from the hub's state, or, for
    /// `openDiff`, once the user decided (the reply parked in the state).
    pub(crate) fn ide_tool(
        &mut self,
        client: IdeClientId,
        scope: IdeScope,
        call: IdeToolCall,
        reply: Responder,
    ) {
        match call {
            IdeToolCall::OpenDiff(diff) => self.open_diff(client, diff, reply),
            call => reply.send(Ok(tool_result(self.ide_answer(client, scope, call)))),
        }
    }

    /// The answer of a tool whose answer is in the hub's state.
    pub(crate) fn ide_answer(
        &mut self,
        client: IdeClientId,
        scope: IdeScope,
        call: IdeToolCall,
    ) -> CallToolResult {
        let not_open = |path: &Path| {
            json_result(&ToolFailure::new(format!(
                "Document not open: {}",
                path.display()
            )))
        };
        match call {
            // Waits for the user: see `ide_tool`.
            IdeToolCall::OpenDiff(_) => CallToolResult::error("openDiff is answered by the user"),
            IdeToolCall::GetDiagnostics { uri } => self.ide_diagnostics(scope, uri.as_deref()),
            IdeToolCall::GetCurrentSelection => match self.selection_for(scope) {
                Some(selection) => json_result(&CurrentSelection {
                    success: true,
                    selection,
                }),
                None => json_result(&ToolFailure::new("No active editor found")),
            },
            IdeToolCall::GetLatestSelection => match self.selection_for(scope) {
                Some(latest) => json_result(&latest),
                None => json_result(&ToolFailure::new("No selection available")),
            },
            IdeToolCall::GetOpenEditors => self.open_editors(scope),
            IdeToolCall::GetWorkspaceFolders => {
                let root = self.root.display().to_string();
                let name = self
                    .root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                json_result(&WorkspaceFolders {
                    success: true,
                    folders: vec![WorkspaceFolder {
                        name,
                        uri: file_url(&self.root),
                        path: root.clone(),
                        index: 0,
                    }],
                    root_path: root,
                    workspace_file: None,
                })
            }
            IdeToolCall::CheckDocumentDirty { file_path: path } => {
                match self.latest_by_path(&path) {
                    Some(open) => json_result(&DocumentDirty {
                        success: true,
                        is_dirty: open.doc.is_dirty(),
                        file_path: path,
                        is_untitled: false,
                    }),
                    None => not_open(&path),
                }
            }
            IdeToolCall::SaveDocument { file_path: path } => {
                // LSP gives a server no way to make an editor save, and
                // writing the buffer ourselves behind the editor's back would
                // leave it thinking the file is modified.
                match self.latest_by_path(&path) {
                    Some(open) => json_result(&DocumentSave {
                        success: true,
                        saved: false,
                        message: if open.doc.is_dirty() {
                            "Document is modified in the editor; save it there"
                        } else {
                            "Document was not dirty or save failed"
                        }
                        .into(),
                        file_path: path,
                    }),
                    None => not_open(&path),
                }
            }
            IdeToolCall::OpenFile(open) => self.open_file(&open),
            IdeToolCall::CloseTab { tab_name } => {
                self.close_tab(client, &tab_name);
                CallToolResult::text("TAB_CLOSED")
            }
            IdeToolCall::CloseAllDiffTabs => {
                CallToolResult::text(format!("CLOSED_{}_DIFF_TABS", self.close_all_diffs(client)))
            }
        }
    }

    /// `openFile`: shows the file in the active editor (`window/showDocument`),
    /// selecting the text between `startText` and `endText` when given (empty
    /// strings count as absent, as old CLIs send them). The text searched is
    /// the editor's buffer, else the file's contents the adapter read.
    fn open_file(&mut self, open: &OpenFile) -> CallToolResult {
        let path = open.file_path.as_path();
        let Some(uri) = super::file_uri(path) else {
            return CallToolResult::error("not a file path");
        };
        let start_text = open.start_text.as_deref().filter(|s| !s.is_empty());
        let end_text = open.end_text.as_deref().filter(|s| !s.is_empty());
        let to_eol = open.select_to_end_of_line;
        let frontmost = open.make_frontmost;
        let rope = match self.latest(&uri) {
            Some((_, open)) => open.doc.text().clone(),
            None => ropey::Rope::from_str(&open.file_text),
        };
        let text = rope.to_string();
        let mut message = format!("Opened file: {}", path.display());
        let mut range = None;
        if let Some(start) = start_text {
            match text.find(start) {
                None => message = format!("Opened file, but text \"{start}\" not found"),
                Some(from) => {
                    let mut to = from + start.len();
                    message = format!("Opened file and selected text \"{start}\"");
                    if let Some(end) = end_text {
                        match text[to..].find(end) {
                            Some(at) => {
                                to += at + end.len();
                                message = format!(
                                    "Opened file and selected text from \"{start}\" to \"{end}\""
                                );
                            }
                            None => {
                                message = format!(
                                    "Opened file and positioned at \"{start}\" (end text \"{end}\" not found)"
                                )
                            }
                        }
                    }
                    if to_eol {
                        to += text[to..].find(['\n', '\r']).unwrap_or(text.len() - to);
                    }
                    range = Some((rope.byte_to_char(from), rope.byte_to_char(to)));
                }
            }
        }
        let target = self.active_editor().map(|(id, ed)| (id, ed.info.encoding));
        if let Some((editor, encoding)) = target {
            let selection = range.map(|(from, to)| {
                let pos = |c: usize| {
                    let at = crate::core::position::clamp_char_idx(&rope, c);
                    Position::from(to_wire(&rope, at, encoding))
                };
                Range::new(pos(from), pos(to))
            });
            self.show_document(editor, uri.clone(), frontmost, selection);
        }
        if !frontmost {
            let open = self.latest(&uri).map(|(_, o)| o);
            return json_result(&OpenedFile {
                success: true,
                file_path: path.to_owned(),
                file_url: display_url(&uri),
                message,
                language_id: open.map(|o| o.doc.language_id()).unwrap_or("").into(),
                line_count: rope.len_lines(),
                is_dirty: open.is_some_and(|o| o.doc.is_dirty()),
                is_untitled: false,
                is_closed: open.is_none(),
            });
        }
        CallToolResult::text(message)
    }

    /// The buffer of `path` in the editor that touched it last.
    fn latest_by_path(&self, path: &Path) -> Option<&OpenDocument> {
        let uri = super::file_uri(path)?;
        self.latest(&uri).map(|(_, open)| open)
    }

    /// `getDiagnostics`: every document with diagnostics, or one `uri`
    /// (a known file with none gives an empty list, never an error), up to
    /// [`MAX_ANSWER_BYTES`]; only documents `scope` sees.
    fn ide_diagnostics(&self, scope: IdeScope, uri: Option<&str>) -> CallToolResult {
        let uris: Vec<Url> = match uri {
            Some(raw) => lenient_file_url(raw).into_iter().collect(),
            None => self.diagnostics.uris().cloned().collect(),
        };
        let uris: Vec<Url> = uris
            .into_iter()
            .filter(|u| self.scope_sees_uri(scope, u))
            .collect();
        let total: usize = uris.iter().map(|u| self.diagnostics.count_for(u)).sum();
        let mut budget = Budget(MAX_ANSWER_BYTES);
        let mut files = Vec::new();
        let mut shown = 0;
        'files: for uri in &uris {
            let mut file = FileDiagnostics {
                uri: display_url(uri),
                diagnostics: Vec::new(),
            };
            if !budget.take(&file, 1) {
                break;
            }
            for source in self.diagnostics.for_uri(uri) {
                for d in &source.items {
                    let range =
                        self.convert_range(uri, d.range, source.encoding, PositionEncoding::Utf16);
                    let item = Diagnostic {
                        message: d.message.clone(),
                        severity: severity_name(d.severity).into(),
                        range,
                        source: d.source.clone(),
                        code: d.code.as_ref().map(|code| match code {
                            NumberOrString::Number(n) => n.to_string(),
                            NumberOrString::String(s) => s.clone(),
                        }),
                    };
                    if !budget.take(&item, 3) {
                        files.push(file);
                        break 'files;
                    }
                    file.diagnostics.push(item);
                    shown += 1;
                }
            }
            files.push(file);
        }
        let note = (shown < total).then(|| {
            format!(
                "Truncated: {shown} of {total} diagnostics shown, from {} of {} files; \
                 answers are capped at {MAX_ANSWER_BYTES} bytes. Ask for one file with `uri`.",
                files.len(),
                uris.len()
            )
        });
        listing_result(&files, note)
    }

    /// `getOpenEditors`: every open document `scope` sees once, up to
    /// [`MAX_ANSWER_BYTES`].
    fn open_editors(&self, scope: IdeScope) -> CallToolResult {
        let active = self
            .active_editor()
            .and_then(|(_, ed)| ed.selection.as_ref())
            .map(|s| s.uri.clone());
        let mut uris: Vec<&Url> = self
            .editors
            .values()
            .flat_map(|ed| ed.docs.keys())
            .filter(|u| self.scope_sees_uri(scope, u))
            .collect();
        uris.sort();
        uris.dedup();
        let mut budget = Budget(MAX_ANSWER_BYTES);
        let mut tabs = Vec::new();
        for uri in &uris {
            let Some((_, open)) = self.latest(uri) else {
                continue;
            };
            let path = uri.to_file_path().ok();
            let label = path
                .as_ref()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned());
            let tab = Tab {
                uri: display_url(uri),
                is_active: active.as_ref() == Some(*uri),
                is_pinned: false,
                is_preview: false,
                is_dirty: open.doc.is_dirty(),
                label: label.unwrap_or_else(|| uri.to_string()),
                group_index: 0,
                view_column: 1,
                is_group_active: true,
                file_name: path.map(|p| p.display().to_string()).unwrap_or_default(),
                language_id: open.doc.language_id().into(),
                line_count: open.doc.text().len_lines(),
                is_untitled: uri.scheme() == "untitled",
            };
            if !budget.take(&tab, 2) {
                break;
            }
            tabs.push(tab);
        }
        let note = (tabs.len() < uris.len()).then(|| {
            format!(
                "Truncated: {} of {} open documents listed; answers are capped at {MAX_ANSWER_BYTES} bytes.",
                tabs.len(),
                uris.len()
            )
        });
        listing_result(&OpenEditors { tabs }, note)
    }

    /// `moonkale.sendToClaude [uri?, range?]`: an `at_mentioned` for the
    /// given range, else the editor's current selection; sent to every
    /// connected Claude Code that may see the file, or queued until one
    /// connects.
    pub(crate) fn send_to_claude(
        &mut self,
        editor: crate::EditorId,
        args: &[Value],
    ) -> Result<Value, ResponseError> {
        let (uri, lines) = match args.first().and_then(Value::as_str) {
            Some(uri) => {
                let uri =
                    Url::parse(uri).map_err(|_| ResponseError::invalid_params("not a URI"))?;
                let range = args
                    .get(1)
                    .and_then(|r| serde_json::from_value::<lsp_types::Range>(r.clone()).ok());
                (
                    uri,
                    range.map(|r| {
                        (
                            r.start.line,
                            r.end.line,
                            r.start != r.end,
                            r.end.character == 0,
                        )
                    }),
                )
            }
            None => {
                let sel = self.editors[&editor]
                    .selection
                    .as_ref()
                    .ok_or_else(|| ResponseError::invalid_params("no selection to send"))?;
                let (a, b) = if sel.anchor <= sel.cursor {
                    (sel.anchor, sel.cursor)
                } else {
                    (sel.cursor, sel.anchor)
                };
                (sel.uri.clone(), Some((a.line, b.line, a != b, b.col == 0)))
            }
        };
        let path = uri
            .to_file_path()
            .map_err(|_| ResponseError::invalid_params("only file: URIs can be sent"))?;
        let mut params = AtMentioned {
            file_path: path,
            line_start: None,
            line_end: None,
        };
        if let Some((first, mut last, true, ends_at_line_start)) = lines {
            // A selection that ends at column 0 does not include that line.
            if ends_at_line_start && last > first {
                last -= 1;
            }
            (params.line_start, params.line_end) = (Some(first), Some(last));
        }
        let sent = self.mention(None, params);
        if sent == 0 {
            return Ok(json!({"queued": true}));
        }
        Ok(json!({"sent": sent}))
    }

    /// An `at_mentioned` of lines `start..=end` (0-based) of `path` to one
    /// Claude Code connection.
    pub(super) fn mention_to(
        &mut self,
        client: IdeClientId,
        path: std::path::PathBuf,
        start: u32,
        end: u32,
    ) {
        let params = AtMentioned {
            file_path: path,
            line_start: Some(start),
            line_end: Some(end),
        };
        self.mention(Some(client), params);
    }

    /// Sends `params` as `at_mentioned` to `only` (else to every
    /// connection) if it may see the file; what no connection took, with
    /// no `only`, is queued for the next that may. How many took it.
    fn mention(&mut self, only: Option<IdeClientId>, params: AtMentioned) -> usize {
        let path = params.file_path.clone();
        let params = serde_json::to_value(params).expect("at_mentioned serializes");
        let body = String::from_utf8(message::notification("at_mentioned", params))
            .expect("JSON is UTF-8");
        let mut sent = 0;
        for (id, client) in &self.ide_clients {
            if only.is_none_or(|only| only == *id) && self.scope_sees(client.scope, &path) {
                let _ = client.outbox.try_send(body.clone());
                sent += 1;
            }
        }
        if sent == 0 && only.is_none() {
            if self.mention_queue.len() >= MAX_QUEUED_MENTIONS {
                self.mention_queue.remove(0);
            }
            self.mention_queue.push((path, body));
        }
        sent
    }

    /// A connection finished its handshake: it takes the queued mentions
    /// it may see (the others wait for one that may).
    pub(crate) fn ide_attach(
        &mut self,
        client: IdeClientId,
        scope: IdeScope,
        outbox: tokio::sync::mpsc::Sender<String>,
    ) {
        let mut queue = std::mem::take(&mut self.mention_queue);
        queue.retain(|(path, body)| {
            if !self.scope_sees(scope, path) {
                return true;
            }
            let _ = outbox.try_send(body.clone());
            false
        });
        self.mention_queue = queue;
        self.ide_clients.insert(
            client,
            super::IdeClient {
                outbox,
                scope,
                cli_pid: None,
            },
        );
    }
}

fn severity_name(s: Option<DiagnosticSeverity>) -> &'static str {
    match s {
        Some(DiagnosticSeverity::WARNING) => "Warning",
        Some(DiagnosticSeverity::INFORMATION) => "Information",
        Some(DiagnosticSeverity::HINT) => "Hint",
        _ => "Error",
    }
}

/// `file://` + the plain path, as VS Code's `uri.toString(true)` and the CLI
/// write it (not percent-encoded).
fn display_url(uri: &Url) -> String {
    match uri.to_file_path() {
        Ok(p) => format!("file://{}", p.display()),
        Err(()) => uri.to_string(),
    }
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// A file URI from Claude Code in the canonical form. The CLI builds
/// `file://` + path by concatenation, so `file:///a b/c.ts` (unencoded) must
/// work as well as a proper URI, and a path with `%`, `?` or `#` in it, which
/// is no proper URI, is taken as the plain path it is.
pub fn lenient_file_url(raw: &str) -> Option<Url> {
    let form = match crate::core::uri::canonical(raw)? {
        Ok(form) => form,
        Err(_) => crate::core::uri::from_path(Path::new(raw.strip_prefix("file://")?)).ok()?,
    };
    form.to_url()
}
