//! Change sets, the model: the edits Claude made to workspace files without
//! asking, grouped into one set per turn (or per burst of edits when the
//! source shows no turns), each file's text before and after, its hunks and
//! what the user decided of each. Undo is computed here against the file's
//! text on disk, which the caller reads and writes. Pure: no IO, no clock
//! (times come in with the edits and the calls).
//!
//! A file's hunks are those between its `before` (the text before Claude's
//! first edit in the set) and its `after` (as Claude's latest edit left it);
//! an edit that puts a file back as it was leaves it with no hunks. Its
//! **effective** text is `after` with the undone hunks put back: what the
//! file holds if nobody else touched it since.
//!
//! An undo refuses a hunk whose lines someone changed since Claude wrote
//! them: the changes since are the diff of the effective text and the file
//! on disk, and a hunk that such a change overlaps or touches is left as it
//! is; the other hunks are undone in the current text, moved by the lines
//! added or removed above them.
//!
//! **Invariant:** undoing every hunk of a file, in any order and with no
//! change by anyone else, gives back its `before` exactly (a created file is
//! removed).
//!
//! **Invariant:** an undo is an [`UndoIntent`] (which hunks, and the hash of
//! the text it writes) stored before the write and applied after it; a
//! service killed in between finds the intent at start and settles it by
//! the file: the new text there means done, anything else means not done.

use std::ops::Range;

use lsp_types::Url;
use serde::{Deserialize, Serialize};

use super::diff::{Hunk, hunks, lines};
use moonkale_protocol::changes::{
    ChangeHunk, ChangeSetSummary, ChangeSource, FileChange, FileChangeKind, FileSummary,
    KeepParams, LineRange, Refusal, ReviewState, ShowResult,
};
use moonkale_protocol::jsonrpc::ResponseError;

/// A file of a pending change set with its pending hunks (what editors are
/// shown as review diagnostics and code actions).
#[derive(Clone, Debug)]
pub struct PendingFile {
    pub set: u64,
    pub uri: Url,
    pub hunks: Vec<ChangeHunk>,
}

/// Longest title kept, in characters.
const MAX_TITLE_CHARS: usize = 120;

/// One edit Claude made to one file, as the model takes it (the host has
/// confined the path and made it a URI).
#[derive(Clone, Debug)]
pub struct FileEdit {
    pub source: ChangeSource,
    pub turn: String,
    pub title: Option<String>,
    pub uri: Url,
    pub before: Option<String>,
    pub after: Option<String>,
    /// Milliseconds since the epoch.
    pub at: u64,
}

/// Where an edit went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub set: u64,
    /// Open sets of the same source that a new turn closed.
    pub closed: Vec<u64>,
}

/// Every change set of one workspace, oldest first.
#[derive(Clone, Debug, Default)]
pub struct ChangeBook {
    sets: Vec<ChangeSet>,
    next_id: u64,
}

/// One turn's (or burst's) changes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeSet {
    pub id: u64,
    pub source: ChangeSource,
    pub turn: String,
    pub title: String,
    pub started: u64,
    pub updated: u64,
    /// The turn may still add edits.
    pub open: bool,
    pub files: Vec<ChangedFile>,
    /// An undo under way: written down before the file, applied after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<UndoIntent>,
}

/// One file of a set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedFile {
    pub uri: Url,
    /// Before Claude's first edit in the set (`None`: it did not exist).
    pub before: Option<String>,
    /// After Claude's latest edit (`None`: Claude deleted it).
    pub after: Option<String>,
    /// One per hunk of `before` → `after`.
    pub states: Vec<ReviewState>,
    /// Those hunks (derived from the texts; computed again on load).
    #[serde(skip)]
    hunks: Vec<Hunk>,
}

/// An undo of some hunks of one file, between its record and its write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UndoIntent {
    pub uri: Url,
    pub hunks: Vec<usize>,
    /// What the file holds once written: `None` for a removed file.
    pub written: Option<TextStamp>,
}

/// A text's length and 64-bit FNV-1a hash: enough to tell the text an undo
/// wrote from the one before it (both are known; nobody is forging here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextStamp {
    pub len: u64,
    pub hash: u64,
}

impl TextStamp {
    pub fn of(bytes: &[u8]) -> TextStamp {
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        TextStamp {
            len: bytes.len() as u64,
            hash,
        }
    }
}

/// What an undo of one file does: the hunks it undoes, those it refuses,
/// and the file's new text (`None`: remove the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UndoPlan {
    pub set: u64,
    pub uri: Url,
    pub undone: Vec<usize>,
    pub refused: Vec<Refusal>,
    pub text: Option<String>,
}

impl UndoPlan {
    /// The intent to record before writing.
    pub fn intent(&self) -> UndoIntent {
        UndoIntent {
            uri: self.uri.clone(),
            hunks: self.undone.clone(),
            written: self.text.as_deref().map(|t| TextStamp::of(t.as_bytes())),
        }
    }

    /// The refusals when the file changed between this plan and its write
    /// (a save landed while the undo was under way, so the plan was made
    /// against a text the file no longer holds): the plan's own, and every
    /// hunk it meant to undo, none of which was.
    pub fn changed_meanwhile(self) -> Vec<Refusal> {
        let message = capitalized(format!(
            "{} changed while it was being undone; nothing was undone",
            display(&self.uri)
        ));
        let mut refused = self.refused;
        refused.extend(self.undone.into_iter().map(|i| Refusal {
            uri: self.uri.clone(),
            hunk: Some(i),
            message: message.clone(),
        }));
        refused.sort_by_key(|r| r.hunk);
        refused
    }
}

fn invalid(message: String) -> ResponseError {
    ResponseError::invalid_params(message)
}

/// How a file is named in messages: its path.
pub fn display(uri: &Url) -> String {
    uri.to_file_path()
        .map_or_else(|()| uri.to_string(), |p| p.display().to_string())
}

/// Lines `r` (0-based) as a person counts them.
fn describe_lines(r: &Range<usize>) -> String {
    match r.len() {
        0 => format!("the lines around line {}", r.start.max(1)),
        1 => format!("line {}", r.start + 1),
        _ => format!("lines {}–{}", r.start + 1, r.end),
    }
}

/// Whether a set of this source and turn ends with its turn; else it ends
/// when its burst of edits does.
pub fn shows_turns(source: &ChangeSource, turn: &str) -> bool {
    !matches!(source, ChangeSource::Watcher) && !turn.is_empty()
}

fn shorten(title: &str) -> String {
    let one_line = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= MAX_TITLE_CHARS {
        return one_line;
    }
    let mut short: String = one_line.chars().take(MAX_TITLE_CHARS - 1).collect();
    short.push('…');
    short
}

impl ChangedFile {
    fn new(uri: Url, before: Option<String>, after: Option<String>) -> ChangedFile {
        let mut file = ChangedFile {
            uri,
            before,
            after,
            states: Vec::new(),
            hunks: Vec::new(),
        };
        file.hunks = hunks(file.before_text(), file.after_text());
        file.states = vec![ReviewState::Pending; file.hunks.len()];
        file
    }

    fn before_text(&self) -> &str {
        self.before.as_deref().unwrap_or("")
    }

    fn after_text(&self) -> &str {
        self.after.as_deref().unwrap_or("")
    }

    pub fn kind(&self) -> FileChangeKind {
        match (&self.before, &self.after) {
            (None, _) => FileChangeKind::Created,
            (_, None) => FileChangeKind::Deleted,
            _ => FileChangeKind::Modified,
        }
    }

    pub fn pending(&self) -> usize {
        self.states
            .iter()
            .filter(|s| **s == ReviewState::Pending)
            .count()
    }

    /// Claude's latest edit of the file: `before` stays, the hunks follow
    /// the new text; a hunk the user kept stays kept if it is still there.
    fn edited(&mut self, after: Option<String>) {
        let after_lines = lines(self.after_text());
        let kept: Vec<(Range<usize>, String)> = self
            .hunks
            .iter()
            .zip(&self.states)
            .filter(|(_, s)| **s == ReviewState::Kept)
            .map(|(h, _)| (h.old.clone(), after_lines[h.new.clone()].concat()))
            .collect();
        self.after = after;
        self.hunks = hunks(self.before_text(), self.after_text());
        let after_lines = lines(self.after_text());
        self.states = self
            .hunks
            .iter()
            .map(|h| {
                let added = after_lines[h.new.clone()].concat();
                if kept.iter().any(|(old, a)| *old == h.old && *a == added) {
                    ReviewState::Kept
                } else {
                    ReviewState::Pending
                }
            })
            .collect();
    }

    /// Where each hunk's lines are in the effective text.
    fn effective_ranges(&self) -> Vec<Range<usize>> {
        let mut shift: isize = 0;
        self.hunks
            .iter()
            .zip(&self.states)
            .map(|(h, s)| {
                let start = (h.new.start as isize + shift) as usize;
                if *s == ReviewState::Undone {
                    shift += h.old.len() as isize - h.new.len() as isize;
                    start..start + h.old.len()
                } else {
                    start..start + h.new.len()
                }
            })
            .collect()
    }

    /// Whether the file exists as Claude left it with the undone hunks put
    /// back.
    fn effective_exists(&self) -> bool {
        let undone = self
            .states
            .iter()
            .filter(|s| **s == ReviewState::Undone)
            .count();
        if undone == 0 {
            self.after.is_some()
        } else if undone == self.states.len() {
            self.before.is_some()
        } else {
            true
        }
    }

    /// The effective text (`None`: the file should not exist).
    pub fn effective(&self) -> Option<String> {
        if !self.effective_exists() {
            return None;
        }
        let before = lines(self.before_text());
        let mut text = lines(self.after_text());
        for (h, s) in self.hunks.iter().zip(&self.states).rev() {
            if *s == ReviewState::Undone {
                text.splice(h.new.clone(), before[h.old.clone()].iter().copied());
            }
        }
        Some(text.concat())
    }

    fn view_hunks(&self) -> Vec<ChangeHunk> {
        let before = lines(self.before_text());
        let after = lines(self.after_text());
        let range = |r: &Range<usize>| LineRange {
            start: r.start as u32,
            end: r.end as u32,
        };
        self.hunks
            .iter()
            .zip(&self.states)
            .zip(self.effective_ranges())
            .enumerate()
            .map(|(index, ((h, s), at))| ChangeHunk {
                index,
                before: range(&h.old),
                after: range(&at),
                removed: before[h.old.clone()].concat(),
                added: after[h.new.clone()].concat(),
                state: *s,
            })
            .collect()
    }

    fn summary(&self) -> FileSummary {
        FileSummary {
            uri: self.uri.clone(),
            kind: self.kind(),
            hunks: self.hunks.len(),
            pending: self.pending(),
        }
    }

    /// Bytes of text kept for the file.
    pub fn bytes(&self) -> usize {
        self.before_text().len() + self.after_text().len()
    }
}

impl ChangeSet {
    pub fn state(&self) -> ReviewState {
        let states = || self.files.iter().flat_map(|f| &f.states);
        if states().any(|s| *s == ReviewState::Pending) {
            ReviewState::Pending
        } else if states().any(|s| *s == ReviewState::Undone) {
            ReviewState::Undone
        } else {
            ReviewState::Kept
        }
    }

    /// Closed and nothing left to decide: the set may go.
    pub fn is_settled(&self) -> bool {
        !self.open && self.state() != ReviewState::Pending
    }

    pub fn bytes(&self) -> usize {
        self.files.iter().map(ChangedFile::bytes).sum()
    }

    pub fn summary(&self) -> ChangeSetSummary {
        ChangeSetSummary {
            id: self.id,
            source: self.source.clone(),
            title: self.title.clone(),
            started: self.started,
            updated: self.updated,
            state: self.state(),
            open: self.open,
            files: self.files.iter().map(ChangedFile::summary).collect(),
        }
    }

    pub fn file(&self, uri: &Url) -> Option<&ChangedFile> {
        self.files.iter().find(|f| f.uri == *uri)
    }

    fn file_mut(&mut self, uri: &Url) -> Result<&mut ChangedFile, ResponseError> {
        let id = self.id;
        self.files
            .iter_mut()
            .find(|f| f.uri == *uri)
            .ok_or_else(|| invalid(format!("change set {id} has no file {}", display(uri))))
    }

    /// Computes the derived hunks of a set read back from disk; `Err` says
    /// why the stored set does not hold together.
    pub fn restore(&mut self) -> Result<(), String> {
        for file in &mut self.files {
            file.hunks = hunks(file.before_text(), file.after_text());
            if file.hunks.len() != file.states.len() {
                return Err(format!(
                    "{} has {} hunks but {} decisions",
                    display(&file.uri),
                    file.hunks.len(),
                    file.states.len()
                ));
            }
        }
        if let Some(intent) = &self.intent {
            let file = self
                .file(&intent.uri)
                .ok_or("its undo under way names a file it does not have")?;
            if intent.hunks.iter().any(|i| *i >= file.hunks.len()) {
                return Err("its undo under way names a hunk it does not have".into());
            }
        }
        Ok(())
    }
}

impl ChangeBook {
    pub fn new() -> ChangeBook {
        ChangeBook::default()
    }

    /// A book of sets read back from disk (each already [`ChangeSet::restore`]d),
    /// in any order.
    pub fn from_sets(mut sets: Vec<ChangeSet>) -> ChangeBook {
        sets.sort_by_key(|s| s.id);
        sets.dedup_by_key(|s| s.id);
        let next_id = sets.last().map_or(0, |s| s.id);
        ChangeBook { sets, next_id }
    }

    pub fn sets(&self) -> &[ChangeSet] {
        &self.sets
    }

    pub fn set(&self, id: u64) -> Option<&ChangeSet> {
        self.sets.iter().find(|s| s.id == id)
    }

    fn set_mut(&mut self, id: u64) -> Result<&mut ChangeSet, ResponseError> {
        self.sets
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or_else(|| invalid(format!("there is no change set {id}")))
    }

    /// The open set an edit of `source` in `turn` would go into.
    pub fn open_set_for(&self, source: &ChangeSource, turn: &str) -> Option<&ChangeSet> {
        let burst = !shows_turns(source, turn);
        self.sets
            .iter()
            .find(|s| s.open && s.source == *source && (burst || s.turn == turn))
    }

    /// Takes one of Claude's edits: into the open set of its source and
    /// turn, else into a new set (closing that source's other open sets).
    pub fn record(&mut self, edit: FileEdit) -> Recorded {
        let found = self.open_set_for(&edit.source, &edit.turn).map(|s| s.id);
        let mut closed = Vec::new();
        for set in self.sets.iter_mut() {
            if set.open && set.source == edit.source && Some(set.id) != found {
                set.open = false;
                closed.push(set.id);
            }
        }
        let id = match found {
            Some(id) => id,
            None => {
                self.next_id += 1;
                self.sets.push(ChangeSet {
                    id: self.next_id,
                    source: edit.source.clone(),
                    turn: edit.turn.clone(),
                    title: String::new(),
                    started: edit.at,
                    updated: edit.at,
                    open: true,
                    files: Vec::new(),
                    intent: None,
                });
                self.next_id
            }
        };
        let set = self.set_mut(id).expect("found or made above");
        set.updated = set.updated.max(edit.at);
        if set.title.is_empty()
            && let Some(title) = &edit.title
        {
            set.title = shorten(title);
        }
        match set.files.iter_mut().find(|f| f.uri == edit.uri) {
            Some(file) => file.edited(edit.after),
            None => set
                .files
                .push(ChangedFile::new(edit.uri, edit.before, edit.after)),
        }
        Recorded { set: id, closed }
    }

    /// The turn ended: its set takes no more edits. The set's id, if there
    /// was one open.
    pub fn end_turn(&mut self, source: &ChangeSource, turn: &str) -> Option<u64> {
        let set = self
            .sets
            .iter_mut()
            .find(|s| s.open && s.source == *source && s.turn == turn)?;
        set.open = false;
        Some(set.id)
    }

    /// Closes set `id` (a burst ended); whether it was open.
    pub fn close(&mut self, id: u64) -> bool {
        match self.sets.iter_mut().find(|s| s.id == id && s.open) {
            Some(set) => {
                set.open = false;
                true
            }
            None => false,
        }
    }

    /// The sets in a listing, newest last: pending or open ones, or all.
    pub fn list(&self, all: bool) -> Vec<ChangeSetSummary> {
        self.sets
            .iter()
            .filter(|s| all || !s.is_settled())
            .map(ChangeSet::summary)
            .collect()
    }

    pub fn show(&self, id: u64) -> Result<ShowResult, ResponseError> {
        let set = self
            .set(id)
            .ok_or_else(|| invalid(format!("there is no change set {id}")))?;
        let files = set
            .files
            .iter()
            .map(|f| FileChange {
                uri: f.uri.clone(),
                kind: f.kind(),
                before: f.before.clone(),
                after: f.effective(),
                hunks: f.view_hunks(),
            })
            .collect();
        Ok(ShowResult {
            set: set.summary(),
            files,
        })
    }

    /// Every file with pending hunks, by set, oldest set first.
    pub fn pending_files(&self) -> Vec<PendingFile> {
        self.sets
            .iter()
            .flat_map(|set| {
                set.files
                    .iter()
                    .filter(|f| f.pending() > 0)
                    .map(|f| PendingFile {
                        set: set.id,
                        uri: f.uri.clone(),
                        hunks: f
                            .view_hunks()
                            .into_iter()
                            .filter(|h| h.state == ReviewState::Pending)
                            .collect(),
                    })
            })
            .collect()
    }

    /// The files of set `id` an undo of `uri` (or of the whole set) touches.
    pub fn undo_targets(&self, id: u64, uri: Option<&Url>) -> Result<Vec<Url>, ResponseError> {
        let set = self
            .set(id)
            .ok_or_else(|| invalid(format!("there is no change set {id}")))?;
        match uri {
            Some(uri) => match set.file(uri) {
                Some(_) => Ok(vec![uri.clone()]),
                None => Err(invalid(format!(
                    "change set {id} has no file {}",
                    display(uri)
                ))),
            },
            None => Ok(set
                .files
                .iter()
                .filter(|f| f.pending() > 0)
                .map(|f| f.uri.clone())
                .collect()),
        }
    }

    /// What undoing `hunk` (else every pending hunk) of `uri` in set `id`
    /// does to `current`, the file as it is now (`None`: it does not
    /// exist). Changes nothing here: see [`ChangeBook::begin_undo`].
    pub fn plan_undo(
        &self,
        id: u64,
        uri: &Url,
        hunk: Option<usize>,
        current: Option<&str>,
    ) -> Result<UndoPlan, ResponseError> {
        let set = self
            .set(id)
            .ok_or_else(|| invalid(format!("there is no change set {id}")))?;
        let file = set
            .file(uri)
            .ok_or_else(|| invalid(format!("change set {id} has no file {}", display(uri))))?;
        let targets: Vec<usize> = match hunk {
            Some(i) => match file.states.get(i) {
                None => {
                    return Err(invalid(format!(
                        "{} has no hunk {i} in change set {id}",
                        display(uri)
                    )));
                }
                Some(ReviewState::Pending) => vec![i],
                Some(state) => {
                    return Err(invalid(format!(
                        "hunk {i} of {} is {} already",
                        display(uri),
                        if *state == ReviewState::Kept {
                            "kept"
                        } else {
                            "undone"
                        }
                    )));
                }
            },
            None => (0..file.states.len())
                .filter(|i| file.states[*i] == ReviewState::Pending)
                .collect(),
        };
        let effective = file.effective();
        let ranges = file.effective_ranges();
        let now = current.unwrap_or("");
        // What changed since Claude (and the undos so far) left the file.
        let since = hunks(effective.as_deref().unwrap_or(""), now);
        let gone = current.is_none() && effective.is_some();
        let mut undone = Vec::new();
        let mut refused = Vec::new();
        for i in targets {
            let r = &ranges[i];
            let touched = since
                .iter()
                .any(|d| d.old.start <= r.end && r.start <= d.old.end);
            if gone || touched {
                let message = if gone {
                    format!("{} no longer exists; nothing was undone", display(uri))
                } else {
                    format!(
                        "{} of {} changed after Claude Code's edit; not undone",
                        describe_lines(r),
                        display(uri)
                    )
                };
                refused.push(Refusal {
                    uri: uri.clone(),
                    hunk: Some(i),
                    message: capitalized(message),
                });
            } else {
                undone.push(i);
            }
        }
        let before = lines(file.before_text());
        let mut text = lines(now);
        // Last hunk first, so earlier positions hold.
        for i in undone.iter().rev() {
            let r = &ranges[*i];
            let shift: isize = since
                .iter()
                .filter(|d| d.old.end < r.start)
                .map(|d| d.new.len() as isize - d.old.len() as isize)
                .sum();
            let at = (r.start as isize + shift) as usize;
            let old = file.hunks[*i].old.clone();
            text.splice(at..at + r.len(), before[old].iter().copied());
        }
        let all_undone = file
            .states
            .iter()
            .enumerate()
            .all(|(i, s)| *s == ReviewState::Undone || undone.contains(&i));
        let text = if all_undone && file.before.is_none() && !undone.is_empty() {
            None
        } else if undone.is_empty() {
            current.map(str::to_owned)
        } else {
            Some(text.concat())
        };
        Ok(UndoPlan {
            set: id,
            uri: uri.clone(),
            undone,
            refused,
            text,
        })
    }

    /// Writes the intent of `plan` down (the caller stores the set, then
    /// writes the file, then calls [`ChangeBook::finish_undo`]).
    pub fn begin_undo(&mut self, plan: &UndoPlan) -> Result<(), ResponseError> {
        let set = self.set_mut(plan.set)?;
        set.intent = Some(plan.intent());
        Ok(())
    }

    /// The file was written: the intent's hunks are undone.
    pub fn finish_undo(&mut self, id: u64) {
        if let Ok(set) = self.set_mut(id)
            && let Some(intent) = set.intent.take()
            && let Ok(file) = set.file_mut(&intent.uri)
        {
            for i in intent.hunks {
                if let Some(s) = file.states.get_mut(i) {
                    *s = ReviewState::Undone;
                }
            }
        }
    }

    /// The write failed: nothing was undone.
    pub fn abandon_undo(&mut self, id: u64) {
        if let Ok(set) = self.set_mut(id) {
            set.intent = None;
        }
    }

    /// After a restart: settles set `id`'s intent by what its file holds
    /// now (`None`: the file does not exist). Whether the undo had happened.
    pub fn resolve_intent(&mut self, id: u64, current: Option<&[u8]>) -> bool {
        let Some(intent) = self.set(id).and_then(|s| s.intent.clone()) else {
            return false;
        };
        let done = match (intent.written, current) {
            (None, None) => true,
            (Some(stamp), Some(bytes)) => TextStamp::of(bytes) == stamp,
            _ => false,
        };
        if done {
            self.finish_undo(id);
        } else {
            self.abandon_undo(id);
        }
        done
    }

    /// Keeps a whole set, a file of it or one hunk; whether anything was
    /// pending.
    pub fn keep(&mut self, params: &KeepParams) -> Result<bool, ResponseError> {
        let set = self.set_mut(params.set)?;
        let mut changed = false;
        let mut keep = |file: &mut ChangedFile, hunk: Option<usize>| -> Result<(), ResponseError> {
            let indices: Vec<usize> = match hunk {
                Some(i) if i >= file.states.len() => {
                    return Err(invalid(format!(
                        "{} has no hunk {i} in change set {}",
                        display(&file.uri),
                        params.set
                    )));
                }
                Some(i) => vec![i],
                None => (0..file.states.len()).collect(),
            };
            for i in indices {
                if file.states[i] == ReviewState::Pending {
                    file.states[i] = ReviewState::Kept;
                    changed = true;
                }
            }
            Ok(())
        };
        match (&params.uri, params.hunk) {
            (Some(uri), hunk) => keep(set.file_mut(uri)?, hunk)?,
            (None, None) => {
                for file in &mut set.files {
                    keep(file, None)?;
                }
            }
            (None, Some(_)) => {
                return Err(invalid("a hunk is kept by its file: give `uri` too".into()));
            }
        }
        Ok(changed)
    }

    /// Removes set `id`.
    pub fn remove(&mut self, id: u64) -> Option<ChangeSet> {
        let at = self.sets.iter().position(|s| s.id == id)?;
        Some(self.sets.remove(at))
    }

    /// Forgets the sets last changed before `cutoff` (ms since the epoch)
    /// and the oldest beyond `max_sets`; their ids. (A settled set stays
    /// listed with `all` until then; its file goes at once: see the host.)
    pub fn prune(&mut self, cutoff: u64, max_sets: usize) -> Vec<u64> {
        let mut gone = Vec::new();
        self.sets.retain(|s| {
            let keep = s.updated >= cutoff;
            if !keep {
                gone.push(s.id);
            }
            keep
        });
        let excess = self.sets.len().saturating_sub(max_sets);
        gone.extend(self.sets.drain(..excess).map(|s| s.id));
        gone
    }
}

fn capitalized(message: String) -> String {
    let mut chars = message.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => message,
    }
}

#[cfg(test)]
mod tests;
