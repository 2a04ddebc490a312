//! Claude's changes as any LSP editor can show them, with or without a
//! plugin: one diagnostic per hunk still to decide (the editor's own
//! diagnostic display is the diff), and inlay hints on proposal documents
//! where the editor can take them.
//!
//! - A proposal's hunks are diagnostics on its document (range: the
//!   proposed lines; message: the lines they replace). An editor that
//!   cannot show the proposal document (no `window.showDocument` support,
//!   or it refused ours) gets them on the target file instead (range: the
//!   original lines; message: the proposed ones).
//! - A pending change set's hunks are diagnostics on the changed file
//!   (range: the lines Claude wrote; message: the lines they replaced).
//!
//! **Invariant:** what each editor was last sent is kept per document, so a
//! refresh sends only what changed and clears what went away; every
//! document the hub ever sent review diagnostics for is cleared once
//! nothing is left to decide in it. An editor that opens a document is sent
//! its review diagnostics again: editors may drop diagnostics of documents
//! they do not have open.

use std::collections::{BTreeMap, HashMap};

use lsp_types::notification::PublishDiagnostics;
use lsp_types::request::{InlayHintRequest, RegisterCapability, Request as _};
use lsp_types::{
    Diagnostic, DiagnosticSeverity, InlayHint, InlayHintLabel, InlayHintTooltip, NumberOrString,
    Position, PublishDiagnosticsParams, Range, Registration, RegistrationParams, Url,
};
use serde_json::{Value, json};

use super::Workspace;
use crate::EditorId;
use crate::core::diff::Hunk;
use crate::core::position::{clamp_char_idx, to_wire};
use crate::workspace::Role;
use moonkale_protocol::changes::ChangeHunk;
use moonkale_protocol::jsonrpc::ResponseError;

/// The `source` of every diagnostic the hub makes of Claude's changes.
pub const SOURCE: &str = "claude";
/// Lines of a hunk a diagnostic message quotes before it says how many more.
const QUOTED_LINES: usize = 12;
/// Characters of one quoted line.
const QUOTED_LINE_CHARS: usize = 200;
/// Characters of the replaced line an inlay hint quotes.
const HINT_CHARS: usize = 16;

/// Review diagnostics one document gets at most; the rest are summed up
/// in one more that says how many there are and where to see them.
pub const MAX_PER_DOCUMENT: usize = 100;
/// Bytes of review diagnostic messages the hub computes for all documents
/// together; documents past it get only their summary. Each editor's copy
/// is bounded by it too.
pub const MAX_REVIEW_BYTES: usize = 4 << 20;

/// Per editor, per document: the review diagnostics last sent.
pub(super) type Published = HashMap<EditorId, BTreeMap<Url, Vec<Diagnostic>>>;

/// Lines `start..end` as an LSP range from column 0 to column 0 (which
/// needs no encoding); an empty hunk is a point at its line.
fn line_span(start: usize, end: usize) -> Range {
    Range::new(Position::new(start as u32, 0), Position::new(end as u32, 0))
}

/// `text`'s lines, each after `prefix`, at most [`QUOTED_LINES`] of them.
fn quote(text: &str, prefix: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines
        .iter()
        .take(QUOTED_LINES)
        .map(|l| {
            let mut line: String = l.chars().take(QUOTED_LINE_CHARS).collect();
            if l.chars().count() > QUOTED_LINE_CHARS {
                line.push('…');
            }
            format!("{prefix}{line}")
        })
        .collect();
    if lines.len() > QUOTED_LINES {
        out.push(format!("… and {} more lines", lines.len() - QUOTED_LINES));
    }
    out.join("\n")
}

/// "line 3" or "lines 3-5" (1-based) of `start..end`.
pub(super) fn lines_named(start: usize, end: usize) -> String {
    if end <= start + 1 {
        format!("line {}", start + 1)
    } else {
        format!("lines {}-{}", start + 1, end)
    }
}

fn count_lines(n: usize) -> String {
    crate::printable::counted(n, "line")
}

fn diagnostic(
    range: Range,
    severity: DiagnosticSeverity,
    code: &str,
    message: String,
    data: Value,
) -> Diagnostic {
    Diagnostic {
        range,
        severity: Some(severity),
        code: Some(NumberOrString::String(code.to_owned())),
        source: Some(SOURCE.to_owned()),
        message,
        data: Some(data),
        ..Diagnostic::default()
    }
}

/// A proposal's hunk on the proposal document.
fn on_proposal(document: &Url, index: usize, total: usize, h: &Hunk, removed: &str) -> Diagnostic {
    let head = format!("Claude Code's change {} of {total}", index + 1);
    let message = if h.old.is_empty() {
        format!("{head} adds {}.", count_lines(h.new.len()))
    } else {
        format!(
            "{head}, replacing {} of the file:\n{}",
            lines_named(h.old.start, h.old.end),
            quote(removed, "- ")
        )
    };
    let data = json!({"proposal": document, "hunk": index});
    diagnostic(
        line_span(h.new.start, h.new.end),
        DiagnosticSeverity::INFORMATION,
        "proposal",
        message,
        data,
    )
}

/// A proposal's hunk on the target file, for editors that cannot show the
/// proposal document.
fn on_target(document: &Url, index: usize, total: usize, h: &Hunk, added: &str) -> Diagnostic {
    let head = format!("Claude Code proposes (change {} of {total})", index + 1);
    let message = if h.new.is_empty() {
        format!("{head} to delete {}.", lines_named(h.old.start, h.old.end))
    } else if h.old.is_empty() {
        format!("{head} to add here:\n{}", quote(added, "+ "))
    } else {
        format!(
            "{head} for {}:\n{}",
            lines_named(h.old.start, h.old.end),
            quote(added, "+ ")
        )
    };
    let data = json!({"proposal": document, "hunk": index});
    diagnostic(
        line_span(h.old.start, h.old.end),
        DiagnosticSeverity::INFORMATION,
        "proposal",
        message,
        data,
    )
}

/// A pending hunk of a change set on the changed file.
fn on_changed_file(set: u64, uri: &Url, h: &ChangeHunk, total: usize) -> Diagnostic {
    let head = format!(
        "Claude changed this (change {} of {total}, set {set})",
        h.index + 1
    );
    let (before, after) = (h.before.start as usize, h.before.end as usize);
    let message = if h.removed.is_empty() {
        format!(
            "{head}: added {}.",
            count_lines((h.after.end - h.after.start) as usize)
        )
    } else if h.added.is_empty() {
        format!(
            "{head}: deleted {} here:\n{}",
            count_lines(after - before),
            quote(&h.removed, "- ")
        )
    } else {
        format!("{head}; it was:\n{}", quote(&h.removed, "- "))
    };
    let data = json!({"set": set, "uri": uri, "hunk": h.index});
    diagnostic(
        line_span(h.after.start as usize, h.after.end as usize),
        DiagnosticSeverity::HINT,
        "change",
        message,
        data,
    )
}

/// The diagnostics of one document within the caps: at most
/// [`MAX_PER_DOCUMENT`], or only the summary once `budget` (bytes of
/// messages) is spent; the budget is charged for what is kept.
fn bounded(mut list: Vec<Diagnostic>, budget: &mut usize) -> Vec<Diagnostic> {
    let bytes = |l: &[Diagnostic]| l.iter().map(|d| d.message.len()).sum::<usize>();
    let keep = if bytes(&list) > *budget {
        0
    } else if list.len() > MAX_PER_DOCUMENT {
        MAX_PER_DOCUMENT - 1
    } else {
        *budget -= bytes(&list);
        return list;
    };
    let rest = list.split_off(keep);
    *budget = budget.saturating_sub(bytes(&list));
    let first = &rest[0];
    let message = format!(
        "… and {} more of Claude's changes in this file, not shown one by one \
         (see them in the proposal's diff or with `moonkale-service changes show`).",
        rest.len()
    );
    list.push(Diagnostic {
        range: first.range,
        message,
        ..first.clone()
    });
    list
}

impl Workspace {
    /// Computes every editor's review diagnostics and sends what changed.
    pub(super) fn refresh_review_diagnostics(&mut self) {
        let proposal_hunks = self.undecided_proposal_hunks();
        let mut per_file: BTreeMap<Url, Vec<Diagnostic>> = BTreeMap::new();
        let mut on_targets: BTreeMap<Url, Vec<Diagnostic>> = BTreeMap::new();
        for u in &proposal_hunks {
            per_file
                .entry(u.document.clone())
                .or_default()
                .push(on_proposal(
                    &u.document,
                    u.index,
                    u.total,
                    &u.hunk,
                    &u.removed,
                ));
            on_targets
                .entry(u.target.clone())
                .or_default()
                .push(on_target(&u.document, u.index, u.total, &u.hunk, &u.added));
        }
        for file in &self.changes.pending {
            let total = file.hunks.len();
            for h in &file.hunks {
                per_file
                    .entry(file.uri.clone())
                    .or_default()
                    .push(on_changed_file(file.set, &file.uri, h, total));
            }
        }
        // Bounded before they are cloned for each editor.
        let mut budget = MAX_REVIEW_BYTES;
        let per_file: BTreeMap<Url, Vec<Diagnostic>> = per_file
            .into_iter()
            .map(|(uri, list)| (uri, bounded(list, &mut budget)))
            .collect();
        let on_targets: BTreeMap<Url, Vec<Diagnostic>> = on_targets
            .into_iter()
            .map(|(uri, list)| (uri, bounded(list, &mut budget)))
            .collect();
        let editors: Vec<(EditorId, bool)> = self
            .editors
            .iter()
            .filter(|(_, ed)| ed.info.role == Role::Editor)
            .map(|(id, ed)| (*id, ed.shows_documents))
            .collect();
        for (editor, shows_documents) in editors {
            let mut want = per_file.clone();
            if !shows_documents {
                for (uri, list) in &on_targets {
                    let on_file = want.entry(uri.clone()).or_default();
                    on_file.extend(list.iter().cloned());
                    // A file with a proposal and a change set: still capped.
                    if on_file.len() > MAX_PER_DOCUMENT {
                        let mut no_budget = usize::MAX;
                        *on_file = bounded(std::mem::take(on_file), &mut no_budget);
                    }
                }
            }
            let before = self.review_published.remove(&editor).unwrap_or_default();
            for (uri, list) in &want {
                if before.get(uri) != Some(list) {
                    self.send_review(editor, uri, list.clone());
                }
            }
            for uri in before.keys().filter(|u| !want.contains_key(*u)) {
                self.send_review(editor, uri, Vec::new());
            }
            self.review_published.insert(editor, want);
        }
        self.review_published
            .retain(|editor, _| self.editors.contains_key(editor));
    }

    /// Forgets what `editor` was sent for `uri`, so the next refresh sends
    /// it again (the editor opened the document and may have dropped what
    /// came before).
    pub(super) fn forget_review_sent(&mut self, editor: EditorId, uri: &Url) {
        if let Some(sent) = self.review_published.get_mut(&editor) {
            sent.remove(uri);
        }
    }

    fn send_review(&self, editor: EditorId, uri: &Url, diagnostics: Vec<Diagnostic>) {
        let params = PublishDiagnosticsParams {
            uri: uri.clone(),
            diagnostics,
            version: None,
        };
        self.notify::<PublishDiagnostics>(editor, params);
    }

    /// Asks an editor that registers capabilities dynamically for inlay
    /// hints on proposal documents only (a static `inlayHintProvider` would
    /// take hints over from the editor's real language servers in editors
    /// that use the first server offering them).
    pub(super) fn register_review_hints(&mut self, editor: EditorId) {
        let Some(ed) = self.editors.get_mut(&editor) else {
            return;
        };
        if !ed.info.registers_inlay_hints || ed.hints_registered {
            return;
        }
        ed.hints_registered = true;
        let params = RegistrationParams {
            registrations: vec![Registration {
                id: "moonkale-proposal-hints".into(),
                method: InlayHintRequest::METHOD.into(),
                register_options: Some(json!({
                    // Proposals live in the service's runtime directory
                    // (`…/moonkale/proposals/` or `/tmp/moonkale-<uid>/proposals/`).
                    "documentSelector": [{"scheme": "file", "pattern": "**/moonkale*/proposals/**"}],
                })),
            }],
        };
        self.send_request::<RegisterCapability>(editor, params);
    }

    /// `textDocument/inlayHint`: on a proposal document, a hint at the end
    /// of each undecided hunk's first line naming what it replaces.
    pub(super) fn inlay_hints(
        &self,
        editor: EditorId,
        p: lsp_types::InlayHintParams,
    ) -> Result<Value, ResponseError> {
        let uri = &p.text_document.uri;
        let ed = &self.editors[&editor];
        let Some(open) = ed.docs.get(uri) else {
            return Ok(json!([]));
        };
        let rope = open.doc.text();
        let mut hints = Vec::new();
        for u in self.undecided_proposal_hunks() {
            if &u.document != uri {
                continue;
            }
            let (h, removed, index, total) = (&u.hunk, &u.removed, u.index, u.total);
            let line = h.new.start.min(rope.len_lines().saturating_sub(1));
            if line < p.range.start.line as usize || line > p.range.end.line as usize {
                continue;
            }
            let line_text = rope.line(line).to_string();
            let trimmed = line_text.trim_end_matches(['\n', '\r']).chars().count();
            let at = if h.new.is_empty() {
                clamp_char_idx(rope, rope.line_to_char(line))
            } else {
                clamp_char_idx(rope, rope.line_to_char(line) + trimmed)
            };
            // Short: it follows the proposed line, and must not run off
            // a narrow window (VS Code's diff editor at 1280 px gives each
            // side 60 columns); the tooltip has the whole of it.
            let which = if total > 1 {
                format!(" ({} of {total})", index + 1)
            } else {
                String::new()
            };
            let label = if h.old.is_empty() {
                format!(" ← Claude Code adds this{which}")
            } else {
                let first = removed.lines().next().unwrap_or("").trim();
                let mut cut: String = first.chars().take(HINT_CHARS).collect();
                if first.chars().count() > HINT_CHARS {
                    cut.push('…');
                }
                format!(" ← was: {cut}{which}")
            };
            hints.push(InlayHint {
                position: to_wire(rope, at, ed.info.encoding).into(),
                label: InlayHintLabel::String(label),
                kind: None,
                text_edits: None,
                tooltip: (!removed.is_empty())
                    .then(|| InlayHintTooltip::String(quote(removed, "- "))),
                padding_left: Some(true),
                padding_right: None,
                data: None,
            });
        }
        Ok(serde_json::to_value(hints).expect("inlay hints serialize"))
    }
}
