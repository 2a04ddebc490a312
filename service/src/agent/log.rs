//! A session's event log: the events live in its transcript on disk; memory
//! holds only where each one starts, so reading a session costs memory in
//! proportion to the page asked for, not to the transcript's size.
//!
//! Events that could not be stored (the transcript failed or is read-only)
//! are kept in memory after the stored ones, so clients of a live session
//! still see them; their numbering goes on where the stored ones end.
//!
//! A warm spare session has no transcript yet: its log holds its few
//! events in memory until it is adopted ([`EventLog::keep_in`]).

use serde_json::Value;

use super::transcript::{Transcript, TranscriptError};

/// Most bytes of stored events one page reads (a page always holds at
/// least one event, even a larger one).
pub const PAGE_BYTES: u64 = 8 << 20;

pub struct EventLog {
    /// `None` for a spare session's log until it is adopted.
    transcript: Option<Transcript>,
    /// Offset and length (without `\n`) of every stored event, by index.
    stored: Vec<(u64, u32)>,
    /// Events after the stored ones that could not be stored.
    unstored: Vec<Value>,
    /// `at` of the last event.
    last_at: Option<u64>,
}

impl EventLog {
    /// The log of `transcript`, calling `each` with every stored event in
    /// order (one in memory at a time).
    pub fn load(
        transcript: Transcript,
        mut each: impl FnMut(&Value),
    ) -> Result<EventLog, TranscriptError> {
        let mut stored = Vec::new();
        let mut last_at = None;
        transcript.for_each(|offset, len, value| {
            stored.push((offset, len as u32));
            last_at = value["at"].as_u64().or(last_at);
            each(&value);
        })?;
        Ok(EventLog {
            transcript: Some(transcript),
            stored,
            unstored: Vec::new(),
            last_at,
        })
    }

    /// A log with no transcript (a spare session's): every event is held
    /// in memory until [`EventLog::keep_in`].
    pub fn in_memory() -> EventLog {
        EventLog {
            transcript: None,
            stored: Vec::new(),
            unstored: Vec::new(),
            last_at: None,
        }
    }

    /// The log from now on is `transcript`'s (a new, empty one): the events
    /// held in memory so far are stored in it first, dated `at` (the
    /// session starts now, whenever its spare was made). On a failure the
    /// events stay in memory and later ones join them.
    pub fn keep_in(&mut self, transcript: Transcript, at: u64) -> Result<(), TranscriptError> {
        debug_assert!(self.transcript.is_none() && self.stored.is_empty());
        self.transcript = Some(transcript);
        let held = std::mem::take(&mut self.unstored);
        for (i, mut event) in held.iter().cloned().enumerate() {
            event["at"] = at.into();
            if let Err(e) = self.append(event, true) {
                self.unstored.extend(held[i..].iter().cloned());
                return Err(e);
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.stored.len() + self.unstored.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn last_at(&self) -> Option<u64> {
        self.last_at
    }

    /// Stores `event` (`store`), or keeps it in memory after the stored
    /// ones; once one is in memory, all later ones are. A failed store
    /// keeps nothing and returns the error.
    pub fn append(&mut self, event: Value, store: bool) -> Result<(), TranscriptError> {
        self.last_at = event["at"].as_u64().or(self.last_at);
        let Some(transcript) = self.transcript.as_mut().filter(|_| store) else {
            self.unstored.push(event);
            return Ok(());
        };
        if !self.unstored.is_empty() {
            self.unstored.push(event);
            return Ok(());
        }
        let offset = transcript.len();
        match transcript.append(&event) {
            Ok(_) => {
                let len = transcript.len() - offset - 1;
                self.stored.push((offset, len as u32));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Events `from..to` (clamped), read from disk up to [`PAGE_BYTES`]:
    /// the page may end early; the caller says where it ended.
    pub fn page(&self, from: usize, to: usize) -> Result<Vec<Value>, TranscriptError> {
        let to = to.min(self.len());
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for index in from..to {
            if let (Some(&(offset, len)), Some(transcript)) =
                (self.stored.get(index), &self.transcript)
            {
                if !out.is_empty() && bytes + u64::from(len) > PAGE_BYTES {
                    break;
                }
                bytes += u64::from(len);
                out.push(transcript.read_at(offset, u64::from(len))?);
            } else {
                out.push(self.unstored[index - self.stored.len()].clone());
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pages_read_back_what_was_appended_and_reloading_finds_it_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut log = EventLog::load(Transcript::open(&path).unwrap(), |_| {}).unwrap();
        assert!(log.is_empty());
        for seq in 0..5 {
            log.append(json!({"seq": seq, "at": 10 + seq, "kind": "k"}), true)
                .unwrap();
        }
        let page = log.page(1, 3).unwrap();
        assert_eq!(page.len(), 2);
        assert_eq!(page[0]["seq"], 1);
        assert_eq!(log.last_at(), Some(14));
        drop(log);

        let mut seen = Vec::new();
        let log = EventLog::load(Transcript::open(&path).unwrap(), |e| {
            seen.push(e["seq"].as_u64().unwrap())
        })
        .unwrap();
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert_eq!(log.len(), 5);
        assert_eq!(log.page(4, 100).unwrap()[0]["seq"], 4);
        assert!(log.page(9, 100).unwrap().is_empty());
    }

    #[test]
    fn a_page_stops_at_its_byte_budget_but_holds_one_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut log = EventLog::load(Transcript::open(&path).unwrap(), |_| {}).unwrap();
        let big = "x".repeat((PAGE_BYTES / 2) as usize);
        for seq in 0..4 {
            log.append(json!({"seq": seq, "text": big}), true).unwrap();
        }
        let page = log.page(0, 4).unwrap();
        assert_eq!(page.len(), 1, "two halves and their JSON exceed the budget");
        let huge = "y".repeat(PAGE_BYTES as usize + 10);
        log.append(json!({"seq": 4, "text": huge}), true).unwrap();
        assert_eq!(log.page(4, 5).unwrap().len(), 1);
    }

    #[test]
    fn a_spare_log_is_stored_whole_once_adopted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut log = EventLog::in_memory();
        log.append(json!({"seq": 0, "at": 1}), true).unwrap();
        log.append(json!({"seq": 1, "at": 2}), true).unwrap();
        assert!(!path.exists());
        log.keep_in(Transcript::open(&path).unwrap(), 50).unwrap();
        log.append(json!({"seq": 2, "at": 60}), true).unwrap();
        drop(log);
        let mut seen = Vec::new();
        EventLog::load(Transcript::open(&path).unwrap(), |e| {
            seen.push((e["seq"].as_u64().unwrap(), e["at"].as_u64().unwrap()))
        })
        .unwrap();
        assert_eq!(seen, [(0, 50), (1, 50), (2, 60)]);
    }

    #[test]
    fn unstored_events_follow_the_stored_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut log = EventLog::load(Transcript::open(&path).unwrap(), |_| {}).unwrap();
        log.append(json!({"seq": 0}), true).unwrap();
        log.append(json!({"seq": 1}), false).unwrap();
        log.append(json!({"seq": 2}), true).unwrap();
        let seqs: Vec<u64> = log
            .page(0, 3)
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, [0, 1, 2]);
    }
}
