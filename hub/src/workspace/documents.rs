//! Each editor's open documents: text sync (`didOpen`, `didChange`,
//! `didSave`, `didClose`), the caps on what they may hold,
//! `moonkale/document` and `moonkale/waitForVersion`.
//!
//! **Invariant:** `Workspace::total_bytes` is the sum of [`held_bytes`]
//! over every editor's open documents and of every pending proposal's
//! bytes; an open that would take the workspace over its cap is refused
//! and changes nothing (a change the editor already made is kept but marks
//! our copy out of sync). A document's bookkeeping counts too
//! ([`DOCUMENT_OVERHEAD`]), so a flood of empty documents reaches the cap
//! as surely as one large one.
//!
//! **Invariant:** a parked `waitForVersion` is answered as soon as the
//! latest buffer of its document reaches the version, and dropped once its
//! caller stops waiting.

use lsp_types::Url;
use serde_json::{Value, json};

use super::{Selection, Workspace};
use crate::core::{Document, SyncState, TextChange};
use crate::{EditorId, Responder};
use moonkale_protocol::document::{DocumentState, UriParams, VersionParams};
use moonkale_protocol::jsonrpc::{ResponseError, code};

pub(super) struct OpenDocument {
    pub(super) doc: Document,
    /// Clock value of the latest open/change/save from this editor.
    pub(super) touched: u64,
    /// Its path passes through a symlink ([`crate::Event::DidOpen`]).
    pub(super) through_symlink: bool,
}

pub(super) struct VersionWaiter {
    pub(super) uri: Url,
    pub(super) version: i32,
    pub(super) reply: Responder,
}

/// What an open document costs beyond its text, URI and language id: the
/// rope's nodes, the map entry, the parsed URI (1.3 KiB measured for an
/// empty one alone, 4 to 4.6 KiB each in a running service, with the
/// allocator's share), with room to spare: the caps are a promise about
/// the process's memory.
pub const DOCUMENT_OVERHEAD: usize = 6 << 10;
/// `waitForVersion` calls that may be parked at once; more are refused.
pub const MAX_PARKED_WAITS: usize = 1024;

/// What one open document holds against the caps: its text, URI, language
/// id and bookkeeping.
pub(super) fn held_bytes(uri: &Url, doc: &Document) -> usize {
    opened_bytes(uri, doc.language_id(), doc.len_bytes())
}

fn opened_bytes(uri: &Url, language_id: &str, text: usize) -> usize {
    uri.as_str().len() + language_id.len() + text + DOCUMENT_OVERHEAD
}

/// "512 MiB", "64 KiB", "1000 bytes": a cap as a person reads it.
pub(super) fn size_named(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

fn accepted_scheme(uri: &Url) -> bool {
    matches!(uri.scheme(), "file" | "untitled")
}

impl Workspace {
    /// `textDocument/didOpen`; the URI it opened, if it was taken.
    pub(super) fn did_open(
        &mut self,
        editor: EditorId,
        p: lsp_types::DidOpenTextDocumentParams,
        through_symlink: bool,
    ) -> Option<Url> {
        let item = p.text_document;
        if !accepted_scheme(&item.uri) {
            let why = format!(
                "didOpen of {} refused: only file: and untitled: URIs",
                item.uri
            );
            self.violation(editor, why);
            return None;
        }
        let ed = self.editors.get(&editor).expect("checked by caller");
        let old = ed.docs.get(&item.uri);
        let replaced = old.map_or(0, |d| held_bytes(&item.uri, &d.doc));
        let limits = self.limits;
        if old.is_none() && ed.docs.len() >= limits.documents_per_editor {
            let why = format!("over {} open documents", limits.documents_per_editor);
            self.violation(editor, format!("didOpen of {} refused: {why}", item.uri));
            return None;
        }
        let adds = opened_bytes(&item.uri, &item.language_id, item.text.len());
        if self.held() - replaced + adds > limits.total_bytes {
            let why = format!(
                "the workspace would hold more than its cap of {}",
                size_named(limits.total_bytes)
            );
            self.violation(editor, format!("didOpen of {} refused: {why}", item.uri));
            return None;
        }
        let doc = match Document::open(&item.text, item.version, &item.language_id) {
            Ok(doc) => doc,
            Err(err) => {
                self.violation(editor, format!("didOpen of {} refused: {err}", item.uri));
                return None;
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
                through_symlink,
            },
        );
        self.mark_active(editor);
        self.wake_version_waiters(&item.uri);
        Some(item.uri)
    }

    pub(super) fn did_change(
        &mut self,
        editor: EditorId,
        p: lsp_types::DidChangeTextDocumentParams,
    ) {
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

    pub(super) fn did_save(&mut self, editor: EditorId, p: lsp_types::DidSaveTextDocumentParams) {
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

    pub(super) fn did_close(&mut self, editor: EditorId, p: lsp_types::DidCloseTextDocumentParams) {
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

    pub(super) fn document(&self, p: UriParams) -> Result<Value, ResponseError> {
        let Some((editor, open)) = self.latest(&p.uri) else {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                format!("{} is not open in any editor", p.uri),
            ));
        };
        let state = DocumentState {
            uri: p.uri,
            editor: editor.0,
            version: open.doc.version(),
            dirty: open.doc.is_dirty(),
            in_sync: *open.doc.sync() == SyncState::InSync,
            text: open.doc.text().to_string(),
        };
        Ok(serde_json::to_value(state).expect("serializes"))
    }

    pub(super) fn wait_for_version(&mut self, p: VersionParams, reply: Responder) {
        if let Some((_, open)) = self
            .latest(&p.uri)
            .filter(|(_, o)| o.doc.version() >= p.version)
        {
            return reply.send(Ok(json!({"version": open.doc.version()})));
        }
        self.version_waiters.retain(|w| !w.reply.is_closed());
        if self.version_waiters.len() >= MAX_PARKED_WAITS {
            return reply.send(Err(ResponseError::new(
                code::REQUEST_FAILED,
                format!("{MAX_PARKED_WAITS} waitForVersion calls already wait; try again later"),
            )));
        }
        self.version_waiters.push(VersionWaiter {
            uri: p.uri,
            version: p.version,
            reply,
        });
    }

    pub(super) fn wake_version_waiters(&mut self, uri: &Url) {
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
    pub(super) fn latest(&self, uri: &Url) -> Option<(EditorId, &OpenDocument)> {
        self.editors
            .iter()
            .filter_map(|(id, ed)| ed.docs.get(uri).map(|d| (*id, d)))
            .max_by_key(|(_, d)| d.touched)
    }

    /// Bytes the workspace holds against [`Limits::total_bytes`].
    pub(super) fn held(&self) -> usize {
        self.total_bytes + self.diagnostics.bytes()
    }
}
