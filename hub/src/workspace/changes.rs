//! The hub's side of change sets (the edits Claude made without asking,
//! kept for review): forwarding `moonkale/changes/*` to the change-set host,
//! which owns the sets, and showing them in every editor: the announcement
//! of a finished set, `moonkale/changes/changed` for plugins, one diagnostic
//! per pending hunk on the changed file (`review.rs`), code actions to undo
//! or keep a hunk or a file, and the editors' buffers kept in step after an
//! undo. What the hub holds here is a read-only view of the host's sets.
//!
//! **Invariant:** an undo reaches the host with every editor's buffer of
//! the set's files, so the host can refuse to overwrite unsaved work; the
//! hub itself never writes a file.

use lsp_types::{CodeAction, CodeActionKind, MessageType, Range, Url};
use serde_json::{Value, json};

use super::{Workspace, command_action};
use crate::ports::{ChangesCommand, ChangesPort, OpenBuffer, Request, forward};
use crate::printable::counted;
use crate::{EditorId, PendingFile, Responder};
use moonkale_protocol::Command;
use moonkale_protocol::changes::{
    ChangeSetSummary, Changed, ChangedParams, KeepParams, UndoParams,
};
use moonkale_protocol::dispatch::parse as parse_params;
use moonkale_protocol::jsonrpc::{Params, ResponseError, code};

#[derive(Default)]
pub(crate) struct ChangesLink {
    sender: Option<ChangesPort>,
    /// The pending sets, newest last.
    pub(super) sets: Vec<ChangeSetSummary>,
    /// Their pending hunks by file.
    pub(super) pending: Vec<PendingFile>,
}

impl Workspace {
    pub(crate) fn set_changes(&mut self, sender: Option<ChangesPort>) {
        self.changes.sender = sender;
    }

    /// A `moonkale/changes/*` request: `undo` carries the editors' buffers
    /// along; the rest goes to the host as it is.
    pub(super) fn changes_request(
        &mut self,
        editor: EditorId,
        method: &str,
        params: Params,
        reply: Responder,
    ) {
        if method == <moonkale_protocol::changes::Undo as lsp_types::request::Request>::METHOD {
            match parse_params::<UndoParams>(&params) {
                Ok(p) => self.undo_change(p, false, reply),
                Err(e) => reply.send(Err(e)),
            }
            return;
        }
        let request = Request::new(editor, method, params, reply);
        forward(self.changes.sender.as_ref(), request, "change sets are");
    }

    /// Hands an undo to the host with every editor's buffer of the files
    /// of that set.
    fn undo_change(&mut self, params: UndoParams, strict: bool, reply: Responder) {
        let Some(port) = &self.changes.sender else {
            return reply.send(Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                "change sets are not available in this service",
            )));
        };
        let uris: Vec<&Url> = self
            .changes
            .pending
            .iter()
            .filter(|f| f.set == params.set)
            .map(|f| &f.uri)
            .collect();
        let buffers = self
            .editors
            .values()
            .flat_map(|ed| ed.docs.iter())
            .filter(|(uri, _)| uris.contains(uri))
            .map(|(uri, open)| OpenBuffer {
                uri: uri.clone(),
                text: open.doc.text().to_string(),
                dirty: open.doc.is_dirty(),
            })
            .collect();
        let command = ChangesCommand::Undo {
            params,
            buffers,
            strict,
            reply,
        };
        if let Err(e) = port.try_send(command)
            && let ChangesCommand::Undo { reply, .. } = e.into_inner()
        {
            reply.send(Err(ResponseError::new(
                code::INTERNAL_ERROR,
                "change sets busy or stopping; try again",
            )));
        }
    }

    /// `moonkale.undoChange` / `keepChange` / `openChanges`.
    pub(super) fn changes_command(
        &mut self,
        editor: EditorId,
        command: Command,
        args: &[Value],
        reply: Responder,
    ) {
        let first = args.first().cloned().unwrap_or(Value::Null);
        match command {
            Command::UndoChange => match serde_json::from_value::<UndoParams>(first) {
                Ok(p) => self.undo_change(p, true, reply),
                Err(e) => reply.send(Err(ResponseError::invalid_params(format!(
                    "{command} wants [{{set, uri?, hunk?, reason?}}]: {e}"
                )))),
            },
            Command::KeepChange => match serde_json::from_value::<KeepParams>(first) {
                Ok(p) => {
                    let method =
                        <moonkale_protocol::changes::Keep as lsp_types::request::Request>::METHOD;
                    let params = serde_json::value::to_raw_value(&p).expect("params serialize");
                    let request = Request::new(editor, method, params, reply);
                    forward(self.changes.sender.as_ref(), request, "change sets are");
                }
                Err(e) => reply.send(Err(ResponseError::invalid_params(format!(
                    "{command} wants [{{set, uri?, hunk?}}]: {e}"
                )))),
            },
            // `OpenChanges`, the only other command handed here.
            _ => reply.send(self.open_changes(editor, first.as_u64())),
        }
    }

    /// `moonkale.openChanges [set?]`: shows each changed file of the set
    /// (the newest pending one by default), at its first pending hunk.
    fn open_changes(&mut self, editor: EditorId, set: Option<u64>) -> Result<Value, ResponseError> {
        let set = set
            .or_else(|| self.changes.sets.last().map(|s| s.id))
            .ok_or_else(|| {
                ResponseError::new(
                    code::REQUEST_FAILED,
                    "no change of Claude's waits for review",
                )
            })?;
        let files: Vec<(Url, Option<Range>)> = self
            .changes
            .pending
            .iter()
            .filter(|f| f.set == set)
            .map(|f| {
                let at = f.hunks.first().map(|h| {
                    let p = lsp_types::Position::new(h.after.start, 0);
                    Range::new(p, p)
                });
                (f.uri.clone(), at)
            })
            .collect();
        if files.is_empty() {
            return Err(ResponseError::invalid_params(format!(
                "change set {set} has nothing pending"
            )));
        }
        let count = files.len();
        // The first file last, so it is the one in front.
        for (i, (uri, at)) in files.into_iter().enumerate().rev() {
            self.show_document(editor, uri, i == 0, at);
        }
        Ok(json!({"opened": count}))
    }

    /// The host's sets changed: plugins and observers hear it, every editor's
    /// diagnostics follow, and a set whose turn ended is announced.
    pub(super) fn changes_updated(
        &mut self,
        sets: Vec<ChangeSetSummary>,
        pending: Vec<PendingFile>,
        announce: Option<u64>,
    ) {
        self.changes.sets = sets;
        self.changes.pending = pending;
        self.refresh_review_diagnostics();
        let announced = announce.and_then(|id| self.changes.sets.iter().find(|s| s.id == id));
        let message = announced.map(|set| {
            let files = set.files.len();
            let hunks: usize = set.files.iter().map(|f| f.pending).sum();
            let names: Vec<String> = set
                .files
                .iter()
                .take(3)
                .map(|f| super::file_name(&f.uri))
                .collect();
            let more = if files > 3 { ", …" } else { "" };
            let who = set.source.describe();
            let mut who = who.chars();
            let who: String = who.next().map(|c| c.to_ascii_uppercase()).into_iter().chain(who).collect();
            format!(
                "{who} changed {} ({}): {}{more}. Review them with the code actions on each file (undo or keep), or `moonkale-service changes show {}`.",
                counted(files, "file"),
                counted(hunks, "change"),
                names.join(", "),
                set.id
            )
        });
        let params = ChangedParams {
            sets: self.changes.sets.clone(),
            announce,
        };
        // Every client hears the sets (the web shell's pages are
        // observers); only editors show the announcement.
        let everyone: Vec<EditorId> = self.editors.keys().copied().collect();
        for editor in everyone {
            self.notify::<Changed>(editor, params.clone());
        }
        for (editor, _) in self.editors_with_buttons() {
            let own = self.editors[&editor].info.announces_changes;
            if let Some(message) = message.as_ref().filter(|_| !own) {
                self.show_message(editor, MessageType::INFO, message.clone());
            }
        }
    }

    /// An undo rewrote `uri` on disk: editors holding it unmodified get the
    /// new text; one holding a removed file is told.
    pub(super) fn file_rewritten(&mut self, uri: Url, text: Option<String>) {
        match text {
            Some(text) => self.sync_buffers(
                &uri,
                &text,
                "Undo of Claude's change",
                "Undoing Claude's change rewrote",
            ),
            None => {
                let holders: Vec<EditorId> = self
                    .editors
                    .iter()
                    .filter(|(_, ed)| ed.docs.contains_key(&uri))
                    .map(|(id, _)| *id)
                    .collect();
                let name = super::file_name(&uri);
                for editor in holders {
                    let tell = format!(
                        "Undoing Claude's change removed {name}, which Claude had created."
                    );
                    self.show_message(editor, MessageType::INFO, tell);
                }
            }
        }
    }

    /// Code actions on a file Claude changed: undo or keep the hunk under
    /// the cursor, or the whole file.
    pub(super) fn change_actions(&self, uri: &Url, range: &Range) -> Vec<CodeAction> {
        let mut actions = Vec::new();
        let (first, last) = (range.start.line, range.end.line);
        for file in self.changes.pending.iter().filter(|f| &f.uri == uri) {
            let name = super::file_name(uri);
            let set = file.set;
            let action = |title: String, command: Command, arg: Value| {
                command_action(title, CodeActionKind::QUICKFIX, command, vec![arg])
            };
            for h in &file.hunks {
                let lines = &h.after;
                let touches = lines.start <= last
                    && (first < lines.end || (lines.start == lines.end && first == lines.start));
                if !touches {
                    continue;
                }
                let at = if lines.end <= lines.start + 1 {
                    format!("line {}", lines.start + 1)
                } else {
                    format!("lines {}-{}", lines.start + 1, lines.end)
                };
                let one = json!({"set": set, "uri": uri, "hunk": h.index});
                actions.push(action(
                    format!("Undo Claude's change ({at})"),
                    Command::UndoChange,
                    one.clone(),
                ));
                actions.push(action(
                    format!("Keep Claude's change ({at})"),
                    Command::KeepChange,
                    one,
                ));
            }
            let whole = json!({"set": set, "uri": uri});
            actions.push(action(
                format!("Undo all of Claude's changes to {name}"),
                Command::UndoChange,
                whole.clone(),
            ));
            actions.push(action(
                format!("Keep Claude's changes to {name}"),
                Command::KeepChange,
                whole,
            ));
        }
        actions
    }
}
