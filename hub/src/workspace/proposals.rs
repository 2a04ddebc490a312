//! Edits Claude Code proposes (`openDiff`) and how the user decides them in
//! their editors.
//!
//! A proposal is a real file: the IDE adapter writes the proposed contents
//! to `<runtime>/proposals/<id>/<name>`, outside the workspace
//! (`service/src/ide/proposals.rs`), and we ask every editor to show it
//! (`window/showDocument`). The user may edit it like any file.
//! They decide with code actions on it or on the target file (the only way
//! that works in Helix), with `moonkale.acceptProposal` /
//! `moonkale.rejectProposal` commands, or with the Accept/Reject buttons of
//! `window/showMessageRequest` where the editor has them. A hunk the user
//! does not want is reverted in the proposal document itself (a code action
//! on that hunk, computed with `similar`), so whatever the document holds
//! when they accept is the answer: `FILE_SAVED` and that text.
//!
//! The diff is shown by every editor: the hunks (kept up to date as the
//! user edits the proposal) become diagnostics (`review.rs`), are listed to
//! plugins (`moonkale/proposals`) for their own diff views, and each can be
//! kept or reverted. Once every hunk is kept the proposal is accepted; once
//! every hunk is reverted it is rejected, as `git add -p` ends when nothing
//! is left to decide.

use std::collections::HashMap;

use lsp_types::request::{ApplyWorkspaceEdit, Request};
use lsp_types::{
    ApplyWorkspaceEditParams, CodeAction, CodeActionKind, MessageType, Position, Range, TextEdit,
    Url, WorkspaceEdit,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Workspace, command_action, tool_result};
use crate::core::diff::{Hunk, hunks, merge};
use crate::core::position::{CharIdx, clamp_char_idx, to_wire};
use crate::{EditorId, IdeClientId, Responder};
use moonkale_protocol::Command;
use moonkale_protocol::changes::LineRange;
use moonkale_protocol::ide::{CallToolResult, OpenDiff};
use moonkale_protocol::jsonrpc::RequestId;
use moonkale_protocol::jsonrpc::{ResponseError, code};
use moonkale_protocol::proposal::{
    ProposalClosed, ProposalClosedParams, ProposalHunk, ProposalInfo,
};

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
    /// What Claude Code proposed, then what a revert made of it while no
    /// editor held the document.
    pub proposed_text: String,
    /// The pending `openDiff` reply.
    pub reply: Responder,
    /// The hunks between `old_text` and the document as it is now, and
    /// which buffer state they were computed from.
    pub hunks: Vec<Hunk>,
    hunks_of: Option<(EditorId, u64)>,
    /// Hunks the user kept, by their removed and added lines (so a keep
    /// survives edits elsewhere in the document).
    kept: Vec<(String, String)>,
    /// A revert was sent to an editor: when its edit arrives, a proposal
    /// with nothing left undecided is answered.
    revert_sent: bool,
}

impl Proposal {
    /// What it holds against the workspace's cap: both texts, its names,
    /// its hunks and bookkeeping.
    fn held_bytes(&self) -> usize {
        self.target.as_str().len()
            + self.document.as_str().len()
            + self.tab_name.len()
            + self.old_text.len()
            + self.proposed_text.len()
            + self.hunks.len() * std::mem::size_of::<Hunk>()
            + super::documents::DOCUMENT_OVERHEAD
    }

    fn lines(text: &str, range: std::ops::Range<usize>) -> String {
        text.split_inclusive('\n')
            .skip(range.start)
            .take(range.len())
            .collect()
    }

    fn hunk_texts(&self, h: &Hunk, current: &str) -> (String, String) {
        (
            Self::lines(&self.old_text, h.old.clone()),
            Self::lines(current, h.new.clone()),
        )
    }
}

/// A proposal's hunk the user has not kept yet.
pub(super) struct UndecidedHunk {
    pub document: Url,
    pub target: Url,
    /// Its index among the proposal's `total` hunks.
    pub index: usize,
    pub total: usize,
    pub hunk: Hunk,
    /// The original lines it replaces, and the lines it proposes.
    pub removed: String,
    pub added: String,
}

/// A hunk's lines as the wire shows them.
pub(super) fn line_range(r: &std::ops::Range<usize>) -> LineRange {
    LineRange {
        start: r.start as u32,
        end: r.end as u32,
    }
}

impl Workspace {
    /// `openDiff`: records the proposal and shows it in every editor; the
    /// reply waits for the user.
    pub(crate) fn open_diff(&mut self, client: IdeClientId, diff: OpenDiff, reply: Responder) {
        if self.proposals.len() >= MAX_PENDING_PROPOSALS {
            let why = format!("{MAX_PENDING_PROPOSALS} proposals already wait for the user");
            return reply.send(Ok(tool_result(CallToolResult::error(why))));
        }
        let OpenDiff {
            new_file_path,
            new_file_contents: proposed_text,
            tab_name,
            old_text,
            proposal_path,
            ..
        } = diff;
        let (Some(target), Some(document)) = (
            super::file_uri(&new_file_path),
            super::file_uri(&proposal_path),
        ) else {
            return reply.send(Err(ResponseError::invalid_params(
                "openDiff paths must be absolute",
            )));
        };
        let held = target.as_str().len()
            + document.as_str().len()
            + tab_name.len()
            + old_text.len()
            + proposed_text.len()
            + super::documents::DOCUMENT_OVERHEAD;
        if self.held() + held > self.limits.total_bytes {
            let why = format!(
                "the workspace cannot hold this proposal: it would hold more than its cap of {}",
                super::documents::size_named(self.limits.total_bytes)
            );
            return reply.send(Ok(tool_result(CallToolResult::error(why))));
        }
        self.clock += 1;
        let id = self.clock;
        let name = super::file_name(&target);
        let found = hunks(&old_text, &proposed_text);
        let changes = crate::printable::counted(found.len(), "change");
        for (editor, buttons) in self.editors_with_buttons() {
            // Sent to editors that did not advertise `showDocument` too:
            // many handle it anyway. Until one says it showed the proposal
            // (in time), it also gets the hunks on the target.
            let asked = self.show_document(editor, document.clone(), true, None);
            self.awaited_answers
                .insert((editor, asked.clone()), super::Awaited::ShowProposal(id));
            let deadline = self.now + self.limits.show_document_timeout;
            self.show_deadlines.push((deadline, editor, asked));
            self.register_review_hints(editor);
            if self.editors[&editor].info.reviews_proposals {
                // Its plugin shows the proposal as a diff and names the
                // ways to decide there; a question of ours would come
                // first, over a window that does not show the change.
                continue;
            }
            if buttons {
                let message = format!(
                    "Claude Code proposes {changes} to {name}. Edit the proposal if you like, then accept or reject it."
                );
                let buttons = ["Accept".to_owned(), "Reject".to_owned()];
                let awaited = super::Awaited::Proposal(id);
                self.ask(editor, awaited, MessageType::INFO, message, buttons);
            } else {
                // An editor without buttons decides with code actions only:
                // say where they are and what they are called.
                let tell = format!(
                    "Claude Code proposes {changes} to {name}, each marked on its lines. \
                     Decide with the code actions on {name}: \"{}\" or \"{}\", \
                     or per change \"Keep this change\" and \"Revert this change\".",
                    accept_title(&name),
                    reject_title(&name),
                );
                self.show_message(editor, MessageType::INFO, tell);
            }
        }
        tracing::info!(proposal = id, %tab_name, "Claude Code proposed an edit");
        let proposal = Proposal {
            id,
            tab_name,
            client,
            target,
            document,
            old_text,
            proposed_text,
            reply,
            hunks: found,
            hunks_of: None,
            kept: Vec::new(),
            revert_sent: false,
        };
        self.total_bytes += proposal.held_bytes();
        self.proposals.push(proposal);
        self.refresh_review_diagnostics();
    }

    /// The text the proposal document holds now: the latest editor buffer,
    /// else what Claude Code proposed.
    fn proposal_text(&self, p: &Proposal) -> String {
        match self.latest(&p.document) {
            Some((_, open)) => open.doc.text().to_string(),
            None => p.proposed_text.clone(),
        }
    }

    /// After text sync: recomputes the hunks of proposals whose document
    /// changed, answers one with nothing left to decide after a revert, and
    /// refreshes what editors show.
    pub(super) fn proposals_after_sync(&mut self) {
        let mut changed = false;
        let mut finished = Vec::new();
        for i in 0..self.proposals.len() {
            let p = &self.proposals[i];
            let state = self.latest(&p.document).map(|(e, d)| (e, d.touched));
            if state == p.hunks_of {
                continue;
            }
            let current = self.proposal_text(p);
            let found = hunks(&p.old_text, &current);
            let p = &mut self.proposals[i];
            let before = p.held_bytes();
            p.hunks = found;
            self.total_bytes = self.total_bytes - before + p.held_bytes();
            p.hunks_of = state;
            changed = true;
            if std::mem::take(&mut p.revert_sent) {
                finished.push(p.id);
            }
        }
        for id in finished {
            self.finish_if_decided(id);
        }
        if changed {
            self.refresh_review_diagnostics();
        }
    }

    /// Whether hunk `h` of `p` was kept.
    fn is_kept(&self, p: &Proposal, h: &Hunk, current: &str) -> bool {
        p.kept.contains(&p.hunk_texts(h, current))
    }

    /// Answers proposal `id` if nothing is left to decide: accepted when
    /// every remaining hunk was kept, rejected when none remains.
    fn finish_if_decided(&mut self, id: u64) {
        let Some(p) = self.proposals.iter().find(|p| p.id == id) else {
            return;
        };
        let current = self.proposal_text(p);
        if p.hunks.is_empty() {
            self.decide(id, false);
        } else if p.hunks.iter().all(|h| self.is_kept(p, h, &current)) {
            self.decide(id, true);
        }
    }

    /// `moonkale/proposals`.
    pub(super) fn proposal_list(&self) -> Vec<ProposalInfo> {
        self.proposals
            .iter()
            .map(|p| {
                let current = self.proposal_text(p);
                let hunks = p
                    .hunks
                    .iter()
                    .enumerate()
                    .map(|(index, h)| {
                        let (removed, added) = p.hunk_texts(h, &current);
                        let kept = p.kept.contains(&(removed.clone(), added.clone()));
                        ProposalHunk {
                            index,
                            original: line_range(&h.old),
                            proposed: line_range(&h.new),
                            removed,
                            added,
                            kept,
                        }
                    })
                    .collect();
                ProposalInfo {
                    tab_name: p.tab_name.clone(),
                    target: p.target.clone(),
                    document: p.document.clone(),
                    original: p.old_text.clone(),
                    hunks,
                }
            })
            .collect()
    }

    /// The hunks still to decide of every proposal, for the diagnostics
    /// and inlay hints.
    pub(super) fn undecided_proposal_hunks(&self) -> Vec<UndecidedHunk> {
        let mut out = Vec::new();
        for p in &self.proposals {
            let current = self.proposal_text(p);
            for (index, h) in p.hunks.iter().enumerate() {
                let (removed, added) = p.hunk_texts(h, &current);
                if !p.kept.contains(&(removed.clone(), added.clone())) {
                    out.push(UndecidedHunk {
                        document: p.document.clone(),
                        target: p.target.clone(),
                        index,
                        total: p.hunks.len(),
                        hunk: h.clone(),
                        removed,
                        added,
                    });
                }
            }
        }
        out
    }

    /// Accepts (`FILE_SAVED` + final text) or rejects (`DIFF_REJECTED` +
    /// tab name) the proposal `id`.
    pub(super) fn decide(&mut self, id: u64, accept: bool) -> bool {
        let Some(at) = self.proposals.iter().position(|p| p.id == id) else {
            return false;
        };
        let p = self.proposals.remove(at);
        self.total_bytes -= p.held_bytes();
        self.cancel_questions(&super::Awaited::Proposal(id));
        // A late answer to its showDocument no longer matters.
        self.awaited_answers
            .retain(|_, a| *a != super::Awaited::ShowProposal(id));
        let final_text = accept.then(|| self.proposal_text(&p));
        // The proposal's file goes away with the answer; plugins close the
        // view they opened for it (LSP has no way to close a document).
        for (editor, _) in self.editors_with_buttons() {
            let reloads = self.editors[&editor].info.reviews_proposals;
            let closed = ProposalClosedParams {
                uri: p.document.clone(),
                accepted: accept,
                target: p.target.clone(),
                text: final_text.clone().filter(|_| reloads),
            };
            self.notify::<ProposalClosed>(editor, closed);
        }
        let answer = if let Some(final_text) = final_text {
            self.sync_accepted(&p, &final_text);
            CallToolResult::texts(["FILE_SAVED".to_owned(), final_text])
        } else {
            CallToolResult::texts(["DIFF_REJECTED".to_owned(), p.tab_name])
        };
        tracing::info!(proposal = id, accept, "proposal decided");
        p.reply.send(Ok(tool_result(answer)));
        self.refresh_review_diagnostics();
        true
    }

    /// Editors that hold `target` unmodified get `text` (Claude Code wrote
    /// it, or an undo did) in an edit called `label`, so buffer and disk
    /// agree. A buffer with unsaved changes of the user's is left alone,
    /// with a warning that starts with `who`.
    pub(super) fn sync_buffers(&mut self, target: &Url, text: &str, label: &str, who: &str) {
        self.sync_buffers_except(&[], target, text, label, who);
    }

    /// [`Workspace::sync_buffers`] for the editors not in `except`.
    fn sync_buffers_except(
        &mut self,
        except: &[EditorId],
        target: &Url,
        text: &str,
        label: &str,
        who: &str,
    ) {
        let holders: Vec<(EditorId, bool)> = self
            .editors
            .iter()
            .filter(|(id, _)| !except.contains(id))
            .filter_map(|(id, ed)| {
                let open = ed.docs.get(target)?;
                // Equal text needs no edit (and an edit would mark it modified).
                (open.doc.text() != text).then(|| (*id, open.doc.is_dirty()))
            })
            .collect();
        for (editor, dirty) in holders {
            if dirty {
                let path = target.to_file_path().unwrap_or_default();
                let warn = format!(
                    "{who} {} on disk, but your buffer has unsaved changes.",
                    path.display()
                );
                self.show_message(editor, MessageType::WARNING, warn);
                continue;
            }
            self.replace_text(editor, target, text, label);
        }
    }

    /// After an accept, the editors that hold the target. One with a
    /// proposal view of its own gets no edit of a clean buffer: its plugin
    /// reloads it from disk once Claude Code wrote the file (an edit now
    /// would leave the buffer modified, and the editor would ask about the
    /// file Claude Code writes next). A buffer with unsaved changes of the
    /// user's gets the accepted change merged in, or a warning naming the
    /// lines where the two collide; the plugin keeps it as it is when the
    /// file changes. Other editors: [`Workspace::sync_buffers`].
    fn sync_accepted(&mut self, p: &Proposal, text: &str) {
        let name = super::file_name(&p.target);
        let plugins: Vec<(EditorId, Option<String>)> = self
            .editors
            .iter()
            .filter(|(_, ed)| ed.info.reviews_proposals)
            .filter_map(|(id, ed)| {
                let open = ed.docs.get(&p.target)?;
                let mine = open.doc.is_dirty().then(|| open.doc.text().to_string());
                // Nothing of the user's to keep: it reloads.
                Some((*id, mine.filter(|t| *t != p.old_text)))
            })
            .collect();
        for (editor, mine) in &plugins {
            let Some(mine) = mine else { continue };
            match merge(&p.old_text, mine, text) {
                Ok(merged) if merged != *mine => self.replace_text(
                    *editor,
                    &p.target,
                    &merged,
                    "Claude Code edit, merged with your unsaved changes",
                ),
                Ok(_) => {}
                Err(clashes) => {
                    let lines: Vec<String> = clashes
                        .iter()
                        .map(|r| super::review::lines_named(r.start, r.end))
                        .collect();
                    let warn = format!(
                        "You accepted Claude Code's edit to {name}, but it collides with your \
                         unsaved changes ({}): your buffer keeps them, and Claude Code writes \
                         its text to {name} on disk.",
                        lines.join(", ")
                    );
                    self.show_message(*editor, MessageType::WARNING, warn);
                }
            }
        }
        let plugins: Vec<EditorId> = plugins.into_iter().map(|(id, _)| id).collect();
        self.sync_buffers_except(
            &plugins,
            &p.target,
            text,
            "Claude Code edit",
            "Claude Code changed",
        );
    }

    /// `workspace/applyEdit` called `label` replacing the whole of
    /// `editor`'s buffer of `target` with `text`.
    fn replace_text(&mut self, editor: EditorId, target: &Url, text: &str, label: &str) {
        let Some((ed, open)) = self
            .editors
            .get(&editor)
            .and_then(|ed| Some((ed, ed.docs.get(target)?)))
        else {
            return;
        };
        let rope = open.doc.text();
        let end = to_wire(
            rope,
            clamp_char_idx(rope, rope.len_chars()),
            ed.info.encoding,
        );
        let edit = NamedTextEdit {
            uri: target.clone(),
            edit: TextEdit::new(Range::new(Position::new(0, 0), end.into()), text.into()),
        };
        let params = ApplyNamedEditsParams {
            label: label.into(),
            edit: NamedEdits {
                changes: HashMap::from([(target.clone(), vec![edit])]),
            },
        };
        self.send_request::<ApplyNamedEdits>(editor, params);
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

    /// An editor answered the `window/showDocument` of a proposal: one that
    /// did not show it sees the hunks on the target file from now on (and
    /// one that showed it after all, on the proposal only).
    pub(super) fn proposal_shown(&mut self, editor: EditorId, shown: bool) {
        if let Some(ed) = self.editors.get_mut(&editor)
            && ed.shows_documents != shown
        {
            ed.shows_documents = shown;
            self.refresh_review_diagnostics();
        }
    }

    /// The editor did not answer the `window/showDocument` `asked` in time:
    /// it counts as refused. Its answer is still awaited; a late success
    /// moves the hunks back to the proposal.
    pub(super) fn show_proposal_timed_out(&mut self, editor: EditorId, asked: RequestId) {
        if let Some(super::Awaited::ShowProposal(id)) = self.awaited_answers.get(&(editor, asked)) {
            tracing::info!(
                editor = editor.0,
                proposal = id,
                "the editor did not show the proposal in time; its hunks go on the target"
            );
            self.proposal_shown(editor, false);
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

    /// `moonkale.acceptProposal` / `rejectProposal` / `keepHunk` /
    /// `revertHunk`.
    pub(super) fn proposal_command(
        &mut self,
        editor: EditorId,
        command: Command,
        args: &[Value],
    ) -> Result<Value, ResponseError> {
        let Some(id) = self.find_proposal(args.first()) else {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                "no proposal from Claude Code is waiting",
            ));
        };
        match command {
            Command::AcceptProposal => {
                self.decide(id, true);
                Ok(json!({"accepted": true}))
            }
            Command::RejectProposal => {
                let reason = args.get(1).and_then(Value::as_str).map(str::to_owned);
                if let Some(reason) = reason {
                    self.mention_rejected(id, &reason);
                }
                self.decide(id, false);
                Ok(json!({"rejected": true}))
            }
            _ => {
                let index = args.get(1).and_then(Value::as_u64).ok_or_else(|| {
                    ResponseError::invalid_params(format!("{command} wants [proposal, hunk index]"))
                })?;
                if command == Command::KeepHunk {
                    self.keep_hunk(id, index as usize)
                } else {
                    self.revert_hunk(editor, id, index as usize)
                }
            }
        }
    }

    /// A rejection with a reason: Claude Code's link has no words for it,
    /// so its CLI gets an `at_mentioned` of the lines it wanted to change
    /// (the user's next prompt, where they say why, points at them).
    fn mention_rejected(&mut self, id: u64, reason: &str) {
        let Some(p) = self.proposals.iter().find(|p| p.id == id) else {
            return;
        };
        let (Some(first), Some(last)) = (p.hunks.first(), p.hunks.last()) else {
            return;
        };
        let Ok(path) = p.target.to_file_path() else {
            return;
        };
        let (start, end) = (first.old.start, last.old.end.max(first.old.start + 1) - 1);
        tracing::info!(
            proposal = id,
            reason_bytes = reason.len(),
            "proposal rejected with a reason"
        );
        self.mention_to(p.client, path, start as u32, end as u32);
    }

    /// `moonkale.keepHunk`: the hunk is decided; the proposal is accepted
    /// when it was the last one.
    fn keep_hunk(&mut self, id: u64, index: usize) -> Result<Value, ResponseError> {
        let p = self
            .proposals
            .iter()
            .find(|p| p.id == id)
            .expect("found by id");
        let current = self.proposal_text(p);
        let hunk = p
            .hunks
            .get(index)
            .ok_or_else(|| ResponseError::invalid_params("no such hunk"))?;
        let texts = p.hunk_texts(hunk, &current);
        let p = self
            .proposals
            .iter_mut()
            .find(|p| p.id == id)
            .expect("found by id");
        if !p.kept.contains(&texts) {
            p.kept.push(texts);
        }
        self.refresh_review_diagnostics();
        self.finish_if_decided(id);
        Ok(json!({"kept": index}))
    }

    /// Puts the original lines of one hunk back into the proposal: in the
    /// asking editor's buffer of it (else the latest editor's) with a
    /// `workspace/applyEdit` (its `didChange` then updates our copy), or in
    /// our own copy when no editor holds it.
    fn revert_hunk(
        &mut self,
        editor: EditorId,
        id: u64,
        index: usize,
    ) -> Result<Value, ResponseError> {
        let at = self
            .proposals
            .iter()
            .position(|p| p.id == id)
            .expect("found by id");
        let p = &self.proposals[at];
        let hunk = p
            .hunks
            .get(index)
            .cloned()
            .ok_or_else(|| ResponseError::invalid_params("no such hunk"))?;
        let original = Proposal::lines(&p.old_text, hunk.old.clone());
        let document = p.document.clone();
        let holder = if self.editors[&editor].docs.contains_key(&document) {
            Some(editor)
        } else {
            self.latest(&document).map(|(e, _)| e)
        };
        let Some(holder) = holder else {
            let p = &mut self.proposals[at];
            let before = p.held_bytes();
            let mut lines: Vec<&str> = p.proposed_text.split_inclusive('\n').collect();
            let end = hunk.new.end.min(lines.len());
            lines.splice(hunk.new.start.min(end)..end, [original.as_str()]);
            p.proposed_text = lines.concat();
            p.hunks = hunks(&p.old_text, &p.proposed_text);
            self.total_bytes = self.total_bytes - before + p.held_bytes();
            self.refresh_review_diagnostics();
            self.finish_if_decided(id);
            return Ok(json!({"reverted": index}));
        };
        let ed = &self.editors[&holder];
        let open = &ed.docs[&document];
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
        self.send_request::<ApplyWorkspaceEdit>(holder, params);
        self.proposals[at].revert_sent = true;
        Ok(json!({"reverted": index}))
    }

    /// Code actions for a document that is a proposal or the target of one:
    /// Accept and Reject, and per hunk under the cursor Keep and Revert.
    pub(super) fn proposal_actions(&self, uri: &Url, range: &Range) -> Vec<CodeAction> {
        let mut actions = Vec::new();
        for p in self
            .proposals
            .iter()
            .filter(|p| &p.document == uri || &p.target == uri)
        {
            let name = super::file_name(&p.target);
            let arg = json!(p.document);
            let action = |title: String, command: Command, arguments: Vec<Value>| {
                command_action(title, CodeActionKind::QUICKFIX, command, arguments)
            };
            actions.push(action(
                accept_title(&name),
                Command::AcceptProposal,
                vec![arg.clone()],
            ));
            actions.push(action(
                reject_title(&name),
                Command::RejectProposal,
                vec![arg.clone()],
            ));
            let on_proposal = &p.document == uri;
            let current = self.proposal_text(p);
            let (first, last) = (range.start.line as usize, range.end.line as usize);
            for (i, h) in p.hunks.iter().enumerate() {
                // On the proposal the hunk is its new lines, on the target
                // its old ones; an empty range sits at its start line.
                let lines = if on_proposal { &h.new } else { &h.old };
                let touches = lines.start <= last
                    && (first < lines.end || (lines.is_empty() && first == lines.start));
                if !touches {
                    continue;
                }
                let where_ = super::review::lines_named(h.new.start, h.new.end);
                if !self.is_kept(p, h, &current) {
                    actions.push(action(
                        format!("Keep this change ({where_} of the proposal)"),
                        Command::KeepHunk,
                        vec![arg.clone(), json!(i)],
                    ));
                }
                actions.push(action(
                    format!("Revert this change ({where_} of the proposal)"),
                    Command::RevertHunk,
                    vec![arg.clone(), json!(i)],
                ));
            }
        }
        actions
    }
}

/// The code action that accepts a proposal for `name`.
fn accept_title(name: &str) -> String {
    format!("Accept Claude Code's edit to {name}")
}

/// The code action that rejects a proposal for `name`.
fn reject_title(name: &str) -> String {
    format!("Reject Claude Code's edit to {name}")
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
