//! Where the user is: the five sources of an editor's selection (the
//! plugins' `moonkale/selectionChanged`, requests carrying a position, a
//! code action's range, the end of an edit, Helix's `moonkale.selection`
//! command), which editor is active, and the `selection_changed` payload
//! Claude Code follows.
//!
//! **Invariant:** a selection is kept in char columns, clamped into the text
//! the editor sees; only real editors (not observers) have one or become
//! active, and the active editor is the one with the latest sign of use.

use std::path::PathBuf;

use lsp_types::Url;
use serde_json::Value;

use super::{Editor, Workspace, file_uri};
use crate::core::position::{clamp_to_line_col, to_char_idx, to_wire};
use crate::core::{LineCol, PositionEncoding, WirePosition};
use crate::{EditorId, IdeScope, Role};
use lsp_types::notification::Notification as _;
use moonkale_protocol::Command;
use moonkale_protocol::document::{self, SelectionChangedParams};
use moonkale_protocol::ide::{SelectionChanged, SelectionRange};
use moonkale_protocol::jsonrpc::ResponseError;

/// Largest selection text put into a `selection_changed` notification.
pub const MAX_SELECTION_TEXT: usize = 1 << 20;

/// The latest cursor/selection of one editor, in char columns.
/// See [`Workspace::selection_inputs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SelectionInputs {
    editor: EditorId,
    uri: Url,
    anchor: LineCol,
    cursor: LineCol,
    holder: Option<(EditorId, u64)>,
}

pub(super) struct Selection {
    pub(super) uri: Url,
    pub(super) anchor: LineCol,
    pub(super) cursor: LineCol,
    pub(super) source: &'static str,
}

impl Workspace {
    /// `moonkale/selectionChanged` from a plugin: a range, the cursor, or both.
    pub(super) fn selection_changed(&mut self, editor: EditorId, p: SelectionChangedParams) {
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
                    format!(
                        "{} needs `selection` or `cursor`",
                        document::SelectionChanged::METHOD
                    ),
                );
            }
        };
        self.set_selection(
            editor,
            p.text_document.uri,
            anchor.into(),
            cursor.into(),
            document::SelectionChanged::METHOD,
        );
    }

    /// Requests that carry the editor's cursor: we have nothing to add to the
    /// answer, but the position tells us where the user is.
    pub(super) fn position_request(
        &mut self,
        editor: EditorId,
        p: lsp_types::TextDocumentPositionParams,
        source: &'static str,
    ) -> Result<Value, ResponseError> {
        let pos = p.position.into();
        self.set_selection(editor, p.text_document.uri, pos, pos, source);
        Ok(Value::Null)
    }

    pub(super) fn set_selection(
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
    pub(super) fn set_selection_in(
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

    pub(super) fn mark_active(&mut self, editor: EditorId) {
        self.clock += 1;
        if let Some(ed) = self
            .editors
            .get_mut(&editor)
            .filter(|ed| ed.info.role == Role::Editor)
        {
            ed.last_active = self.clock;
        }
    }

    /// The workspace's active editor: the one with the latest sign of use.
    /// What the `selection_changed` payload is computed from: the active
    /// editor, its selection, and which buffer of the document (and which
    /// state of it) holds the text. Equal inputs give an equal payload, so
    /// the payload (up to 1 MiB of text) is computed again only when these
    /// change, not after every event.
    pub(super) fn selection_inputs(&self) -> Option<SelectionInputs> {
        let (editor, ed) = self.active_editor()?;
        let sel = ed.selection.as_ref()?;
        Some(SelectionInputs {
            editor,
            uri: sel.uri.clone(),
            anchor: sel.anchor,
            cursor: sel.cursor,
            holder: self.latest(&sel.uri).map(|(e, open)| (e, open.touched)),
        })
    }

    pub(super) fn active_editor(&self) -> Option<(EditorId, &Editor)> {
        self.editors
            .iter()
            .filter(|(_, ed)| ed.info.role == Role::Editor)
            .max_by_key(|(_, ed)| ed.last_active)
            .map(|(id, ed)| (*id, ed))
    }

    /// `moonkale.selection`, the command Helix keymaps call: `[buffer_name,
    /// cursor_line, cursor_column, selection_line_start,
    /// selection_line_end]`, 1-based, buffer_name relative to the editor's
    /// cwd.
    pub(super) fn selection_command(
        &mut self,
        editor: EditorId,
        args: &[Value],
    ) -> Result<Value, ResponseError> {
        let bad = || {
            ResponseError::invalid_params(format!(
                "{} wants [path, line, column, first line, last line]",
                Command::Selection
            ))
        };
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

    /// The active editor's selection as `selection_changed` params.
    pub(super) fn latest_selection_payload(&self) -> Option<SelectionChanged> {
        let sel = self.active_editor()?.1.selection.as_ref()?;
        let path = sel.uri.to_file_path().ok()?;
        let open = self.latest(&sel.uri).map(|(_, open)| open);
        let (start, end) = if sel.anchor <= sel.cursor {
            (sel.anchor, sel.cursor)
        } else {
            (sel.cursor, sel.anchor)
        };
        let (text, start16, end16) = match open {
            Some(open) => {
                let rope = open.doc.text();
                let idx = |p: LineCol| {
                    to_char_idx(
                        rope,
                        WirePosition {
                            line: p.line,
                            character: p.col,
                        },
                        PositionEncoding::Utf32,
                    )
                };
                let (a, b) = (idx(start), idx(end));
                let len = b.get() - a.get();
                let text = if rope.slice(a.get()..b.get()).len_bytes() > MAX_SELECTION_TEXT {
                    String::new() // too big to send; Claude Code sees the range
                } else {
                    rope.slice(a.get()..a.get() + len).to_string()
                };
                (
                    text,
                    to_wire(rope, a, PositionEncoding::Utf16),
                    to_wire(rope, b, PositionEncoding::Utf16),
                )
            }
            None => (
                String::new(),
                WirePosition {
                    line: start.line,
                    character: start.col,
                },
                WirePosition {
                    line: end.line,
                    character: end.col,
                },
            ),
        };
        Some(SelectionChanged {
            text,
            file_path: path,
            file_url: sel.uri.as_str().to_owned(),
            selection: SelectionRange {
                start: start16.into(),
                end: end16.into(),
                is_empty: start == end,
            },
        })
    }

    /// The payload as a connection of `scope` sees it: a selection in a
    /// document it may not see is, for it, no selection.
    pub(super) fn selection_for(&self, scope: IdeScope) -> Option<SelectionChanged> {
        self.latest_selection_payload()
            .filter(|p| self.scope_sees(scope, &p.file_path))
    }
}
