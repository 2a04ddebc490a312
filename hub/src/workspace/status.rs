//! The snapshot `moonkale/status` answers (the types are in
//! [`crate::status`]).

use serde_json::Value;

use super::Workspace;
use crate::core::SyncState;
use crate::status::{
    ClaudeClientStatus, DocumentStatus, EditorStatus, ProposalStatus, SelectionStatus, Status,
};
use crate::{EditorId, Role, Topic};
use moonkale_protocol::status::{Changed, SpareStatus};

/// What `moonkale/status/changed` follows: who is in the workspace and
/// what waits for the user, not documents, selections or diagnostics.
#[derive(Debug, PartialEq)]
pub(crate) struct Roster {
    editors: Vec<(EditorId, String)>,
    claude_clients: Vec<(u64, Option<u32>)>,
    proposals: Vec<String>,
    trusted: Option<bool>,
    change_sets: usize,
    changed_files: usize,
    spare: Option<SpareStatus>,
}

impl Workspace {
    fn roster(&self) -> Roster {
        let mut editors: Vec<(EditorId, String)> = self
            .editors
            .iter()
            .filter(|(_, ed)| ed.info.role == Role::Editor)
            .map(|(id, ed)| (*id, ed.info.client_name.clone()))
            .collect();
        editors.sort();
        let mut claude_clients: Vec<(u64, Option<u32>)> = self
            .ide_clients
            .iter()
            .map(|(id, c)| (id.0, c.cli_pid))
            .collect();
        claude_clients.sort();
        Roster {
            editors,
            claude_clients,
            proposals: self
                .proposals
                .iter()
                .map(|p| p.document.to_string())
                .collect(),
            trusted: self.agent_trusted(),
            change_sets: self.changes.sets.len(),
            changed_files: self.changes.pending.len(),
            // Its memory is read every 2 s: not a move of the roster.
            spare: self.agent.spare.clone().map(|spare| SpareStatus {
                rss_bytes: None,
                ..spare
            }),
        }
    }

    /// `moonkale/status/subscribe`: the snapshot now; its changes from now
    /// on.
    pub(super) fn status_subscribe(&mut self, editor: EditorId) -> Value {
        self.subscriptions.subscribe(editor, Topic::Status);
        // Whoever listened already heard up to this event.
        self.roster_told = Some(self.roster());
        serde_json::to_value(self.status()).expect("status serializes")
    }

    /// After each event: subscribers hear the snapshot when the roster
    /// moved. Without subscribers nothing is computed.
    pub(super) fn tell_status_subscribers(&mut self) {
        let subscribers = self.subscriptions.subscribers(&Topic::Status);
        if subscribers.is_empty() {
            self.roster_told = None;
            return;
        }
        let roster = self.roster();
        if self.roster_told.as_ref() == Some(&roster) {
            return;
        }
        self.roster_told = Some(roster);
        let status = self.status();
        for editor in subscribers {
            self.notify::<Changed>(editor, status.clone());
        }
    }

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
