//! One editor's buffer of one file: the rope, its version, and whether our
//! copy still agrees with the editor's.
//!
//! Pure: no IO, no clock. The hub decides what to do with a refused change
//! (log it, tell the editor); this module only decides whether a change can
//! be applied and applies it atomically.

use ropey::Rope;

use super::position::{
    CharIdx, LineCol, PositionEncoding, WirePosition, clamp_char_idx, to_char_idx, to_line_col,
};

/// Largest text one document may hold, in UTF-8 bytes.
pub const MAX_DOCUMENT_BYTES: usize = 64 << 20;

/// One entry of `didChange.contentChanges`: a range edit or a full replacement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextChange {
    /// `None` replaces the whole text.
    pub range: Option<(WirePosition, WirePosition)>,
    pub text: String,
}

/// Whether our copy of the buffer is known to equal the editor's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncState {
    InSync,
    /// A change was refused, so our text no longer matches the editor's.
    /// Only a full-text change or a new `didOpen` brings it back.
    Desynced {
        reason: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("version {got} is not newer than the current version {current}")]
    StaleVersion { current: i32, got: i32 },
    #[error("document is out of sync ({reason}); waiting for a full-text change or didOpen")]
    Desynced { reason: String },
    #[error("range start {start:?} is after its end {end:?}")]
    InvertedRange {
        start: WirePosition,
        end: WirePosition,
    },
    #[error("document would hold {bytes} bytes, over the {limit}-byte cap")]
    TooLarge { bytes: usize, limit: usize },
}

#[derive(Clone, Debug)]
pub struct Document {
    text: Rope,
    version: i32,
    language_id: String,
    /// Changed since it was opened or last saved.
    dirty: bool,
    sync: SyncState,
}

impl Document {
    pub fn open(text: &str, version: i32, language_id: &str) -> Result<Document, ChangeError> {
        check_size(text.len())?;
        Ok(Document {
            text: Rope::from_str(text),
            version,
            language_id: language_id.to_owned(),
            dirty: false,
            sync: SyncState::InSync,
        })
    }

    pub fn text(&self) -> &Rope {
        &self.text
    }
    pub fn version(&self) -> i32 {
        self.version
    }
    pub fn language_id(&self) -> &str {
        &self.language_id
    }
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }
    pub fn sync(&self) -> &SyncState {
        &self.sync
    }
    pub fn len_bytes(&self) -> usize {
        self.text.len_bytes()
    }

    /// Applies one `didChange` batch, all or nothing. On success returns where
    /// the last edit ended (where the editor's cursor most likely is now).
    /// On refusal the text is unchanged and the document is marked desynced,
    /// except that a full-text change always resyncs.
    pub fn apply_changes(
        &mut self,
        version: i32,
        changes: &[TextChange],
        encoding: PositionEncoding,
    ) -> Result<Option<LineCol>, ChangeError> {
        let starts_with_full_text = changes.first().is_some_and(|c| c.range.is_none());
        let refusal = match &self.sync {
            SyncState::Desynced { reason } if !starts_with_full_text => {
                Some(ChangeError::Desynced {
                    reason: reason.clone(),
                })
            }
            SyncState::InSync if version <= self.version => Some(ChangeError::StaleVersion {
                current: self.version,
                got: version,
            }),
            _ => None,
        };
        if let Some(err) = refusal {
            self.desync(&err);
            return Err(err);
        }
        // One change needs no copy: `apply_one` checks everything before it
        // writes. A batch works on a clone (O(1): ropes share nodes until
        // written) so that a bad change in the middle leaves no trace.
        let mut batch_copy = (changes.len() > 1).then(|| self.text.clone());
        let outcome = {
            let text = batch_copy.as_mut().unwrap_or(&mut self.text);
            let mut last_edit_end = None;
            changes
                .iter()
                .try_for_each(|change| {
                    last_edit_end = Some(apply_one(text, change, encoding)?);
                    Ok(())
                })
                .map(|()| last_edit_end.map(|end| to_line_col(text, end)))
        };
        let last_edit_end = outcome.inspect_err(|err| self.desync(err))?;
        if let Some(text) = batch_copy {
            self.text = text;
        }
        self.version = version;
        self.dirty = true;
        self.sync = SyncState::InSync;
        Ok(last_edit_end)
    }

    /// `didSave`: the editor's buffer now equals the file on disk. With
    /// `includeText` the saved text also replaces ours, which resyncs.
    pub fn saved(&mut self, text: Option<&str>) -> Result<(), ChangeError> {
        if let Some(text) = text {
            check_size(text.len())?;
            self.text = Rope::from_str(text);
            self.sync = SyncState::InSync;
        }
        self.dirty = false;
        Ok(())
    }

    /// Stops trusting our copy (the hub refuses a change the document
    /// itself accepted, e.g. over the workspace-wide cap).
    pub fn mark_desynced(&mut self, err: &ChangeError) {
        self.sync = SyncState::Desynced {
            reason: err.to_string(),
        };
    }

    fn desync(&mut self, err: &ChangeError) {
        if !matches!(err, ChangeError::Desynced { .. }) {
            self.sync = SyncState::Desynced {
                reason: err.to_string(),
            };
        }
    }
}

fn check_size(bytes: usize) -> Result<(), ChangeError> {
    if bytes > MAX_DOCUMENT_BYTES {
        return Err(ChangeError::TooLarge {
            bytes,
            limit: MAX_DOCUMENT_BYTES,
        });
    }
    Ok(())
}

/// Applies one change to `text` and returns the char index where it ended.
fn apply_one(
    text: &mut Rope,
    change: &TextChange,
    encoding: PositionEncoding,
) -> Result<CharIdx, ChangeError> {
    let Some((start, end)) = change.range else {
        check_size(change.text.len())?;
        *text = Rope::from_str(&change.text);
        return Ok(clamp_char_idx(text, usize::MAX));
    };
    if (start.line, start.character) > (end.line, end.character) {
        return Err(ChangeError::InvertedRange { start, end });
    }
    let from = to_char_idx(text, start, encoding).get();
    let to = if end == start {
        from
    } else {
        to_char_idx(text, end, encoding).get()
    };
    let removed_bytes = text.char_to_byte(to) - text.char_to_byte(from);
    check_size(text.len_bytes() - removed_bytes + change.text.len())?;
    text.remove(from..to);
    text.insert(from, &change.text);
    Ok(clamp_char_idx(text, from + change.text.chars().count()))
}
