//! Edits Claude Code proposes (`openDiff`) and how the user decides them in
//! their editors.
//!
//! A proposal is a real file: the IDE adapter writes the proposed contents
//! to `<workspace>/.moonkale/proposals/<id>/<name>` and we ask every editor
//! to show it (`window/showDocument`). The user may edit it like any file.
//! They decide with code actions on it or on the target file (the only way
//! that works in Helix), with `moonkale.acceptProposal` /
//! `moonkale.rejectProposal` commands, or with the Accept/Reject buttons of
//! `window/showMessageRequest` where the editor has them. A hunk the user
//! does not want is reverted in the proposal document itself (a code action
//! on that hunk, computed with `similar`), so whatever the document holds
//! when they accept is the answer: `FILE_SAVED` and that text.

use std::path::Path;

use std::collections::HashMap;

use lsp_types::notification::Notification;
use lsp_types::request::{ApplyWorkspaceEdit, Request};
use lsp_types::{
    ApplyWorkspaceEditParams, CodeAction, CodeActionKind, MessageType, Position, Range, TextEdit,
    Url, WorkspaceEdit,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Workspace, command_action, tool_result};
use crate::core::diff::hunks;
use crate::core::position::{CharIdx, clamp_char_idx, to_wire};
use crate::{EditorId, IdeClientId, Responder};
use moonkale_protocol::ide::CallToolResult;
use moonkale_protocol::jsonrpc::{ResponseError, code};

pub use moonkale_protocol::proposal::{ACCEPT_COMMAND, REJECT_COMMAND};
pub const REVERT_HUNK_COMMAND: &str = "moonkale.revertHunk";
/// Proposals that may wait for the user at once; more are refused at once
/// (each holds two copies of a file and a pending reply).
pub const MAX_PENDING_PROPOSALS: usize = 32;

pub(super) struct Proposal {
    pub id: u64,
    pub tab_name: String,
    pub client: IdeClientId,
    /// The file Claude Code wants to change.
    pub target: Url,
    /// The document holding the proposed (and user-edited) contents.
    pub document: Url,
    pub old_text: String,
    pub proposed_text: String,
    /// The pending `openDiff` reply.
    pub reply: Responder,
}

impl Workspace {
    /// `openDiff`: records the proposal and shows it in every editor; the
    /// reply waits for the user.
    pub(crate) fn open_diff(&mut self, client: IdeClientId, args: &Value, reply: Responder) {
        if self.proposals.len() >= MAX_PENDING_PROPOSALS {
            let why = format!("{MAX_PENDING_PROPOSALS} proposals already wait for the user");
            return reply.send(Ok(tool_result(CallToolResult::error(why))));
        }
        let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(target), Some(document), Some(tab_name), Some(proposed_text), Some(old_text)) = (
            text("new_file_path"),
            text("proposalPath"),
            text("tab_name"),
            text("new_file_contents"),
            text("oldText"),
        ) else {
            return reply.send(Err(ResponseError::invalid_params(
                "openDiff arguments are incomplete",
            )));
        };
        let (Some(target), Some(document)) = (
            super::file_uri(Path::new(&target)),
            super::file_uri(Path::new(&document)),
        ) else {
            return reply.send(Err(ResponseError::invalid_params(
                "openDiff paths must be absolute",
            )));
        };
        self.clock += 1;
        let id = self.clock;
        let name = super::file_name(&target);
        let count = hunks(&old_text, &proposed_text).len();
        for (editor, buttons) in self.editors_with_buttons() {
            self.show_document(editor, document.clone(), true, None);
            if buttons {
                let message = format!(
                    "Claude Code proposes {count} change(s) to {name}. Edit the proposal if you like, then:"
                );
                let buttons = ["Accept".to_owned(), "Reject".to_owned()];
                let awaited = super::Awaited::Proposal(id);
                self.ask(editor, awaited, MessageType::INFO, message, buttons);
            } else {
                let tell = format!(
                    "Claude Code proposes {count} change(s) to {name}: use the code actions to accept or reject."
                );
                self.show_message(editor, MessageType::INFO, tell);
            }
        }
        tracing::info!(proposal = id, %tab_name, "Claude Code proposed an edit");
        self.proposals.push(Proposal {
            id,
            tab_name,
            client,
            target,
            document,
            old_text,
            proposed_text,
            reply,
        });
    }

    /// The text the proposal document holds now: the latest editor buffer,
    /// else what Claude Code proposed.
    fn proposal_text(&self, p: &Proposal) -> String {
        match self.latest(&p.document) {
            Some((_, open)) => open.doc.text().to_string(),
            None => p.proposed_text.clone(),
        }
    }

    /// Accepts (`FILE_SAVED` + final text) or rejects (`DIFF_REJECTED` +
    /// tab name) the proposal `id`.
    pub(super) fn decide(&mut self, id: u64, accept: bool) -> bool {
        let Some(at) = self.proposals.iter().position(|p| p.id == id) else {
            return false;
        };
        let p = self.proposals.remove(at);
        self.cancel_questions(&super::Awaited::Proposal(id));
        // The proposal's file goes away with the answer; plugins close the
        // view they opened for it (LSP has no way to close a document).
        for (editor, _) in self.editors_with_buttons() {
            let closed = ProposalClosedParams {
                uri: p.document.clone(),
                accepted: accept,
            };
            self.notify::<ProposalClosed>(editor, closed);
        }
        let answer = if accept {
            let final_text = self.proposal_text(&p);
            self.sync_target_buffers(&p.target, &final_text);
            CallToolResult::texts(["FILE_SAVED".to_owned(), final_text])
        } else {
            CallToolResult::texts(["DIFF_REJECTED".to_owned(), p.tab_name])
        };
        tracing::info!(proposal = id, accept, "proposal decided");
        p.reply.send(Ok(tool_result(answer)));
        true
    }

    /// After an accept Claude Code writes the file; editors holding it
    /// unmodified get the same text now, so buffer and disk agree. A buffer
    /// with unsaved changes of the user's is left alone, with a warning.
    fn sync_target_buffers(&mut self, target: &Url, final_text: &str) {
        let holders: Vec<(EditorId, bool, Position)> = self
            .editors
            .iter()
            .filter_map(|(id, ed)| {
                let open = ed.docs.get(target)?;
                let rope = open.doc.text();
                let end = to_wire(
                    rope,
                    clamp_char_idx(rope, rope.len_chars()),
                    ed.info.encoding,
                );
                Some((*id, open.doc.is_dirty(), end.into()))
            })
            .collect();
        for (editor, dirty, end) in holders {
            if dirty {
                let path = target.to_file_path().unwrap_or_default();
                let warn = format!(
                    "Claude Code changed {} on disk, but your buffer has unsaved changes.",
                    path.display()
                );
                self.show_message(editor, MessageType::WARNING, warn);
                continue;
            }
            let edit = NamedTextEdit {
                uri: target.clone(),
                edit: TextEdit::new(Range::new(Position::new(0, 0), end), final_text.into()),
            };
            let params = ApplyNamedEditsParams {
                label: "Claude Code edit".into(),
                edit: NamedEdits {
                    changes: HashMap::from([(target.clone(), vec![edit])]),
                },
            };
            self.send_request::<ApplyNamedEdits>(editor, params);
        }
    }

    /// `close_tab`: a pending proposal with that tab name is rejected.
    pub(super) fn close_tab(&mut self, client: IdeClientId, tab: &str) {
        let ids: Vec<u64> = self
            .proposals
            .iter()
            .filter(|p| p.client == client && p.tab_name == tab)
            .map(|p| p.id)
            .collect();
        for id in ids {
            self.decide(id, false);
        }
    }

    /// `closeAllDiffTabs`: rejects this client's pending proposals.
    pub(super) fn close_all_diffs(&mut self, client: IdeClientId) -> usize {
        let ids: Vec<u64> = self
            .proposals
            .iter()
            .filter(|p| p.client == client)
            .map(|p| p.id)
            .collect();
        ids.iter().filter(|id| self.decide(**id, false)).count()
    }

    /// A disconnected CLI's proposals are withdrawn; nobody can receive the
    /// answer any more.
    pub(super) fn withdraw_proposals_of(&mut self, client: IdeClientId) {
        let gone: Vec<u64> = self
            .proposals
            .iter()
            .filter(|p| p.client == client)
            .map(|p| p.id)
            .collect();
        for id in gone {
            self.decide(id, false);
        }
    }

    /// An editor's answer to our Accept/Reject buttons.
    pub(super) fn proposal_button(&mut self, proposal: u64, title: Option<&str>) {
        match title {
            Some("Accept") => {
                self.decide(proposal, true);
            }
            Some("Reject") => {
                self.decide(proposal, false);
            }
            _ => {} // dismissed: the code actions still work
        }
    }

    /// The proposal a command or code action names: by proposal document or
    /// target URI, or by tab name; with no argument, the newest.
    fn find_proposal(&self, arg: Option<&Value>) -> Option<u64> {
        let Some(arg) = arg.and_then(Value::as_str) else {
            return self.proposals.last().map(|p| p.id);
        };
        self.proposals
            .iter()
            .rev()
            .find(|p| p.document.as_str() == arg || p.target.as_str() == arg || p.tab_name == arg)
            .map(|p| p.id)
    }

    /// `moonkale.acceptProposal` / `moonkale.rejectProposal` /
    /// `moonkale.revertHunk`.
    pub(super) fn proposal_command(
        &mut self,
        editor: EditorId,
        command: &str,
        args: &[Value],
    ) -> Result<Value, ResponseError> {
        let Some(id) = self.find_proposal(args.first()) else {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                "no proposal from Claude Code is waiting",
            ));
        };
        match command {
            ACCEPT_COMMAND => {
                self.decide(id, true);
                Ok(json!({"accepted": true}))
            }
            REJECT_COMMAND => {
                self.decide(id, false);
                Ok(json!({"rejected": true}))
            }
            _ => {
                let index = args.get(1).and_then(Value::as_u64).ok_or_else(|| {
                    ResponseError::invalid_params("revertHunk wants [proposal, hunk index]")
                })?;
                self.revert_hunk(editor, id, index as usize)
            }
        }
    }

    /// Puts the original lines of one hunk back into the proposal document
    /// in `editor` (a `workspace/applyEdit`; the editor's `didChange` then
    /// updates our copy).
    fn revert_hunk(
        &mut self,
        editor: EditorId,
        id: u64,
        index: usize,
    ) -> Result<Value, ResponseError> {
        let p = self
            .proposals
            .iter()
            .find(|p| p.id == id)
            .expect("found by id");
        let current = self.proposal_text(p);
        let hunk = hunks(&p.old_text, &current)
            .into_iter()
            .nth(index)
            .ok_or_else(|| ResponseError::invalid_params("no such hunk"))?;
        let original: String = p
            .old_text
            .split_inclusive('\n')
            .skip(hunk.old.start)
            .take(hunk.old.len())
            .collect();
        let document = p.document.clone();
        let ed = &self.editors[&editor];
        let Some(open) = ed.docs.get(&document) else {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                "open the proposal document first",
            ));
        };
        let rope = open.doc.text();
        let line_start = |line: usize| -> CharIdx {
            if line >= rope.len_lines() {
                clamp_char_idx(rope, rope.len_chars())
            } else {
                clamp_char_idx(rope, rope.line_to_char(line))
            }
        };
        let pos = |c: CharIdx| Position::from(to_wire(rope, c, ed.info.encoding));
        let range = Range::new(
            pos(line_start(hunk.new.start)),
            pos(line_start(hunk.new.end)),
        );
        let edit = WorkspaceEdit::new(HashMap::from([(
            document,
            vec![TextEdit::new(range, original)],
        )]));
        let params = ApplyWorkspaceEditParams {
            label: Some("Revert Claude Code's change".into()),
            edit,
        };
        self.send_request::<ApplyWorkspaceEdit>(editor, params);
        Ok(json!({"reverted": index}))
    }

    /// Code actions for a document that is a proposal or the target of one.
    pub(super) fn proposal_actions(&self, uri: &Url, range: &Range) -> Vec<CodeAction> {
        let mut actions = Vec::new();
        for p in self
            .proposals
            .iter()
            .filter(|p| &p.document == uri || &p.target == uri)
        {
            let name = super::file_name(&p.target);
            let arg = json!(p.document);
            let action = |title: String, command: &str, arguments: Vec<Value>| {
                command_action(title, CodeActionKind::QUICKFIX, command, arguments)
            };
            actions.push(action(
                format!("Accept Claude Code's edit to {name}"),
                ACCEPT_COMMAND,
                vec![arg.clone()],
            ));
            actions.push(action(
                format!("Reject Claude Code's edit to {name}"),
                REJECT_COMMAND,
                vec![arg.clone()],
            ));
            if &p.document == uri {
                let current = self.proposal_text(p);
                let (first, last) = (range.start.line as usize, range.end.line as usize);
                for (i, h) in hunks(&p.old_text, &current).iter().enumerate() {
                    // A hunk that only deletes has an empty range; it sits at its start line.
                    let touches = h.new.start <= last
                        && (first < h.new.end || (h.new.is_empty() && first == h.new.start));
                    if touches {
                        let title = format!(
                            "Revert this change (lines {}-{} of the proposal)",
                            h.new.start + 1,
                            h.new.end.max(h.new.start + 1)
                        );
                        let arguments = vec![arg.clone(), json!(i)];
                        actions.push(action(title, REVERT_HUNK_COMMAND, arguments));
                    }
                }
            }
        }
        actions
    }
}

/// `moonkale/proposalClosed`: the proposal document is gone; plugins close
/// the view they opened for it.
enum ProposalClosed {}

impl Notification for ProposalClosed {
    type Params = ProposalClosedParams;
    const METHOD: &'static str = "moonkale/proposalClosed";
}

#[derive(Debug, Serialize, Deserialize)]
struct ProposalClosedParams {
    uri: Url,
    accepted: bool,
}

/// `workspace/applyEdit` of the accepted text to the editors holding the
/// target. Its edits also name their document (`uri`), as they always
/// have; editors ignore the extra field.
enum ApplyNamedEdits {}

impl Request for ApplyNamedEdits {
    type Params = ApplyNamedEditsParams;
    type Result = Value;
    const METHOD: &'static str = ApplyWorkspaceEdit::METHOD;
}

#[derive(Debug, Serialize, Deserialize)]
struct ApplyNamedEditsParams {
    label: String,
    edit: NamedEdits,
}

#[derive(Debug, Serialize, Deserialize)]
struct NamedEdits {
    changes: HashMap<Url, Vec<NamedTextEdit>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct NamedTextEdit {
    uri: Url,
    #[serde(flatten)]
    edit: TextEdit,
}
