//! The snapshot `moonkale/status` answers (the types are in
//! [`crate::status`]).

use super::Workspace;
use crate::Role;
use crate::core::SyncState;
use crate::status::{
    ClaudeClientStatus, DocumentStatus, EditorStatus, ProposalStatus, SelectionStatus, Status,
};

impl Workspace {
    pub(crate) fn status(&self) -> Status {
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
                    id: id.0,
                    client: ed.info.client_name.clone(),
                    client_version: ed.info.client_version.clone(),
                    process_id: ed.info.process_id,
                    transport: ed.info.transport,
                    position_encoding: ed.info.encoding.as_lsp_str().to_owned(),
                    active: Some(*id) == active,
                    selection: ed.selection.as_ref().map(|s| SelectionStatus {
                        uri: s.uri.to_string(),
                        anchor: lsp_types::Position::new(s.anchor.line, s.anchor.col),
                        cursor: lsp_types::Position::new(s.cursor.line, s.cursor.col),
                        source: s.source.to_owned(),
                    }),
                    documents,
                }
            })
            .collect();
        Status {
            workspace: self.root.clone(),
            pid: std::process::id(),
            active_editor: active.map(|a| a.0),
            editors,
            diagnostics: self.diagnostics.counts(),
            total_bytes: self.held(),
            claude_clients: self
                .ide_clients
                .iter()
                .map(|(id, c)| ClaudeClientStatus {
                    id: id.0,
                    pid: c.cli_pid,
                })
                .collect(),
            pending_proposals: self
                .proposals
                .iter()
                .map(|p| ProposalStatus {
                    tab_name: p.tab_name.clone(),
                    target: p.target.to_string(),
                    document: p.document.to_string(),
                })
                .collect(),
            trusted: self.agent_trusted(),
            pending_change_sets: self.changes.sets.len(),
            pending_changed_files: self.changes.pending.len(),
            agent_spare: self.agent.spare.clone(),
        }
    }
}
