//! Claude Code's view of the workspace: the IDE tools answered from the hub's
//! state, the `selection_changed` payload, and `at_mentioned`.
//!
//! Shapes follow ide-protocol.md §4–§6: results are MCP `CallToolResult`s
//! whose text is a plain word or JSON; lines and characters are 0-based and
//! characters count UTF-16 code units, as VS Code's do. Paths arrive here
//! already confined to the workspace by the IDE adapter.

use std::path::{Path, PathBuf};

use lsp_types::{DiagnosticSeverity, Url};
use serde_json::{Value, json};

use super::{OpenDocument, Workspace};
use crate::IdeClientId;
use crate::core::PositionEncoding;
use crate::core::position::to_wire;
use moonkale_protocol::jsonrpc::{self as message, ResponseError, code};

/// The command (and code action) that sends the selection to Claude Code.
pub const SEND_TO_CLAUDE_COMMAND: &str = "moonkale.sendToClaude";
/// Mentions kept while no Claude Code is connected.
const MAX_QUEUED_MENTIONS: usize = 32;
/// Largest JSON text of a listing answer (`getDiagnostics`,
/// `getOpenEditors`): what is over it is left out, with a note, so an answer
/// stays far below the IDE connection's outgoing cap and never costs the
/// client its connection.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

pub fn text_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}

pub fn error_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}], "isError": true})
}

fn json_result(value: &Value) -> Value {
    text_result(serde_json::to_string_pretty(value).expect("JSON serializes"))
}

/// A listing as [`json_result`], with `note` (what was left out) as a second
/// text item when there is one: the CLI parses the first item only, the
/// model sees both.
fn listing_result(value: &Value, note: Option<String>) -> Value {
    let mut result = json_result(value);
    if let Some(note) = note {
        result["content"]
            .as_array_mut()
            .expect("content is an array")
            .push(json!({"type": "text", "text": note}));
    }
    result
}

/// What is left of [`MAX_ANSWER_BYTES`] while a listing is built.
struct Budget(usize);

impl Budget {
    /// Takes what `v` costs pretty-printed at nesting `depth` (each of its
    /// lines indented by two spaces a level, then `,` and a line break);
    /// `false`, taking nothing, if that is more than is left.
    fn take(&mut self, v: &Value, depth: usize) -> bool {
        let text = serde_json::to_string_pretty(v).expect("JSON serializes");
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
    /// Answers a `tools/call` for a tool whose answer is in the hub's state.
    pub(crate) fn ide_tool(
        &mut self,
        client: IdeClientId,
        tool: &str,
        args: &Value,
    ) -> Result<Value, ResponseError> {
        let path_arg = |name: &str| -> Result<PathBuf, ResponseError> {
            args.get(name)
                .and_then(Value::as_str)
                .map(PathBuf::from)
                .ok_or_else(|| {
                    ResponseError::invalid_params(format!("missing required parameter: {name}"))
                })
        };
        Ok(match tool {
            "getDiagnostics" => self.ide_diagnostics(args.get("uri").and_then(Value::as_str)),
            "getCurrentSelection" => {
                json_result(&self.current_selection().unwrap_or_else(
                    || json!({"success": false, "message": "No active editor found"}),
                ))
            }
            "getLatestSelection" => {
                json_result(&self.latest_selection_payload().unwrap_or_else(
                    || json!({"success": false, "message": "No selection available"}),
                ))
            }
            "getOpenEditors" => self.open_editors(),
            "getWorkspaceFolders" => {
                let root = self.root.display().to_string();
                let name = self
                    .root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                json_result(&json!({
                    "success": true,
                    "folders": [{"name": name, "uri": file_url(&self.root), "path": root, "index": 0}],
                    "rootPath": root,
                    "workspaceFile": null,
                }))
            }
            "checkDocumentDirty" => {
                let path = path_arg("filePath")?;
                match self.latest_by_path(&path) {
                    Some(open) => json_result(&json!({
                        "success": true, "filePath": path, "isDirty": open.doc.is_dirty(),
                        "isUntitled": false,
                    })),
                    None => json_result(
                        &json!({"success": false, "message": format!("Document not open: {}", path.display())}),
                    ),
                }
            }
            "saveDocument" => {
                let path = path_arg("filePath")?;
                // LSP gives a server no way to make an editor save, and
                // writing the buffer ourselves behind the editor's back would
                // leave it thinking the file is modified.
                match self.latest_by_path(&path) {
                    Some(open) => json_result(&json!({
                        "success": true, "filePath": path, "saved": false,
                        "message": if open.doc.is_dirty() { "Document is modified in the editor; save it there" } else { "Document was not dirty or save failed" },
                    })),
                    None => json_result(
                        &json!({"success": false, "message": format!("Document not open: {}", path.display())}),
                    ),
                }
            }
            "openFile" => self.open_file(&path_arg("filePath")?, args),
            "close_tab" => {
                let tab = args
                    .get("tab_name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.close_tab(client, tab);
                text_result("TAB_CLOSED")
            }
            "closeAllDiffTabs" => {
                text_result(format!("CLOSED_{}_DIFF_TABS", self.close_all_diffs(client)))
            }
            _ => {
                return Err(ResponseError::new(
                    code::METHOD_NOT_FOUND,
                    format!("Tool not found: {tool}"),
                ));
            }
        })
    }

    /// `openFile`: shows the file in the active editor (`window/showDocument`),
    /// selecting the text between `startText` and `endText` when given (empty
    /// strings count as absent, as old CLIs send them). The text searched is
    /// the editor's buffer, else the file's contents the adapter read.
    fn open_file(&mut self, path: &Path, args: &Value) -> Value {
        let Some(uri) = super::file_uri(path) else {
            return error_result("not a file path");
        };
        let non_empty = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let (start_text, end_text) = (non_empty("startText"), non_empty("endText"));
        let to_eol = args
            .get("selectToEndOfLine")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let frontmost = args
            .get("makeFrontmost")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let rope = match self.latest(&uri) {
            Some((_, open)) => open.doc.text().clone(),
            None => ropey::Rope::from_str(
                args.get("fileText")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
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
            let mut params = json!({"uri": uri, "takeFocus": frontmost});
            if let Some((from, to)) = range {
                let pos = |c: usize| {
                    let p = to_wire(
                        &rope,
                        crate::core::position::clamp_char_idx(&rope, c),
                        encoding,
                    );
                    json!({"line": p.line, "character": p.character})
                };
                params["selection"] = json!({"start": pos(from), "end": pos(to)});
            }
            self.request_editor(editor, "window/showDocument", params);
        }
        if !frontmost {
            let open = self.latest(&uri).map(|(_, o)| o);
            return json_result(&json!({
                "success": true,
                "filePath": path,
                "fileUrl": display_url(&uri),
                "message": message,
                "languageId": open.map(|o| o.doc.language_id()).unwrap_or(""),
                "lineCount": rope.len_lines(),
                "isDirty": open.is_some_and(|o| o.doc.is_dirty()),
                "isUntitled": false,
                "isClosed": open.is_none(),
            }));
        }
        text_result(message)
    }

    /// The buffer of `path` in the editor that touched it last.
    fn latest_by_path(&self, path: &Path) -> Option<&OpenDocument> {
        let uri = super::file_uri(path)?;
        self.latest(&uri).map(|(_, open)| open)
    }

    /// `getDiagnostics`: every document with diagnostics, or one `uri`
    /// (a known file with none gives an empty list, never an error), up to
    /// [`MAX_ANSWER_BYTES`].
    fn ide_diagnostics(&self, uri: Option<&str>) -> Value {
        let uris: Vec<Url> = match uri {
            Some(raw) => lenient_file_url(raw).into_iter().collect(),
            None => self.diagnostics.uris().cloned().collect(),
        };
        let total: usize = uris.iter().map(|u| self.diagnostics.count_for(u)).sum();
        let mut budget = Budget(MAX_ANSWER_BYTES);
        let mut files = Vec::new();
        let mut shown = 0;
        'files: for uri in &uris {
            let mut file = json!({"uri": display_url(uri), "diagnostics": []});
            if !budget.take(&file, 1) {
                break;
            }
            for source in self.diagnostics.for_uri(uri) {
                for d in &source.items {
                    let range =
                        self.convert_range(uri, d.range, source.encoding, PositionEncoding::Utf16);
                    let mut item = json!({
                        "message": d.message,
                        "severity": severity_name(d.severity),
                        "range": range,
                    });
                    if let Some(s) = &d.source {
                        item["source"] = json!(s);
                    }
                    if let Some(code) = &d.code {
                        item["code"] = match code {
                            lsp_types::NumberOrString::Number(n) => json!(n.to_string()),
                            lsp_types::NumberOrString::String(s) => json!(s),
                        };
                    }
                    if !budget.take(&item, 3) {
                        files.push(file);
                        break 'files;
                    }
                    file["diagnostics"]
                        .as_array_mut()
                        .expect("an array")
                        .push(item);
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
        listing_result(&Value::Array(files), note)
    }

    /// `getOpenEditors`: every open document once, up to
    /// [`MAX_ANSWER_BYTES`].
    fn open_editors(&self) -> Value {
        let active = self
            .active_editor()
            .and_then(|(_, ed)| ed.selection.as_ref())
            .map(|s| s.uri.clone());
        let mut uris: Vec<&Url> = self
            .editors
            .values()
            .flat_map(|ed| ed.docs.keys())
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
            let tab = json!({
                "uri": display_url(uri),
                "isActive": active.as_ref() == Some(*uri),
                "isPinned": false,
                "isPreview": false,
                "isDirty": open.doc.is_dirty(),
                "label": label.unwrap_or_else(|| uri.to_string()),
                "groupIndex": 0,
                "viewColumn": 1,
                "isGroupActive": true,
                "fileName": path.map(|p| p.display().to_string()).unwrap_or_default(),
                "languageId": open.doc.language_id(),
                "lineCount": open.doc.text().len_lines(),
                "isUntitled": uri.scheme() == "untitled",
            });
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
        listing_result(&json!({"tabs": tabs}), note)
    }

    /// `moonkale.sendToClaude [uri?, range?]`: an `at_mentioned` for the
    /// given range, else the editor's current selection; sent to every
    /// connected Claude Code, or queued until one connects.
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
        let mut params = json!({"filePath": path});
        if let Some((first, mut last, true, ends_at_line_start)) = lines {
            // A selection that ends at column 0 does not include that line.
            if ends_at_line_start && last > first {
                last -= 1;
            }
            params["lineStart"] = json!(first);
            params["lineEnd"] = json!(last);
        }
        let body = String::from_utf8(message::notification("at_mentioned", params))
            .expect("JSON is UTF-8");
        if self.ide_clients.is_empty() {
            if self.mention_queue.len() >= MAX_QUEUED_MENTIONS {
                self.mention_queue.remove(0);
            }
            self.mention_queue.push(body);
            return Ok(json!({"queued": true}));
        }
        for client in self.ide_clients.values() {
            let _ = client.outbox.try_send(body.clone());
        }
        Ok(json!({"sent": self.ide_clients.len()}))
    }

    pub(crate) fn ide_attach(
        &mut self,
        client: IdeClientId,
        outbox: tokio::sync::mpsc::Sender<String>,
    ) {
        for body in self.mention_queue.drain(..) {
            let _ = outbox.try_send(body);
        }
        self.ide_clients.insert(
            client,
            super::IdeClient {
                outbox,
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
    Url::parse(&form).ok()
}
