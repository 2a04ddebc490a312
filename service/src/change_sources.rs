//! Where a workspace's change records come from and go: the change-set
//! host's port and which CLI sessions the service started itself, so a
//! record read from a transcript is attributed to its terminal, left to
//! its hosted session, or else an IDE client's.
//!
//! It is a top-level module of its own because its users stand apart: the
//! agent host and the terminal host note the sessions they start, `ide`'s
//! transcript reader asks whose a session is, and `server` makes one per
//! workspace. It depends on nothing of the service but the hub's ports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::hub::ports::{ChangeSource, ChangesPort};

/// Sessions [`KnownSessions`] remembers; past that the least recently
/// started is forgotten. A live session is always among the newest: each
/// CLI start (a terminal's, a hosted session's, a resume) notes it again.
const MAX_KNOWN_SESSIONS: usize = 4096;

/// The CLI sessions the service started itself, by session id: a
/// terminal's records are that terminal's, not an anonymous IDE client's;
/// a hosted session's are reported by the session itself (from the CLI's
/// stdout), so its transcript is not read. At most
/// [`MAX_KNOWN_SESSIONS`], the most recently started.
#[derive(Clone, Debug, Default)]
pub struct KnownSessions(Arc<Mutex<Known>>);

#[derive(Debug, Default)]
struct Known {
    owners: HashMap<String, Owner>,
    /// The ids, least recently started first.
    order: std::collections::VecDeque<String>,
}

#[derive(Clone, Copy, Debug)]
enum Owner {
    Terminal(u64),
    Hosted,
}

impl KnownSessions {
    /// `session` runs in terminal `terminal`.
    pub fn insert_terminal(&self, session: String, terminal: u64) {
        self.insert(session, Owner::Terminal(terminal));
    }

    /// `session` is a hosted agent session.
    pub fn insert_hosted(&self, session: String) {
        self.insert(session, Owner::Hosted);
    }

    fn insert(&self, session: String, owner: Owner) {
        let mut known = self.0.lock().expect("known sessions lock");
        if known.owners.insert(session.clone(), owner).is_some() {
            known.order.retain(|s| *s != session);
        }
        known.order.push_back(session);
        while known.order.len() > MAX_KNOWN_SESSIONS {
            if let Some(oldest) = known.order.pop_front() {
                known.owners.remove(&oldest);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().expect("known sessions lock").owners.len()
    }

    /// Whose records `session`'s are; `None`: not the transcript's to say.
    pub(crate) fn source(&self, session: &str) -> Option<ChangeSource> {
        let session = session.to_owned();
        match self
            .0
            .lock()
            .expect("known sessions lock")
            .owners
            .get(&session)
        {
            Some(Owner::Terminal(terminal)) => Some(ChangeSource::Terminal {
                terminal: *terminal,
                session,
            }),
            Some(Owner::Hosted) => None,
            None => Some(ChangeSource::Ide { session }),
        }
    }
}

/// Where the change-set host hears of a workspace's transcript edits.
#[derive(Clone, Debug, Default)]
pub struct ChangeSources {
    /// `None`: no change sets, nothing is read.
    pub changes: Option<ChangesPort>,
    pub sessions: KnownSessions,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sessions are remembered up to the cap, the least recently started
    /// forgotten first; starting one again makes it the newest.
    #[test]
    fn known_sessions_are_bounded() {
        let known = KnownSessions::default();
        known.insert_hosted("first".into());
        for i in 0..MAX_KNOWN_SESSIONS - 1 {
            known.insert_terminal(format!("t{i}"), i as u64);
        }
        known.insert_hosted("first".into());
        known.insert_terminal("one more".into(), 1);
        assert_eq!(known.len(), MAX_KNOWN_SESSIONS);
        assert_eq!(known.source("first"), None, "started again: kept");
        assert_eq!(
            known.source("t0"),
            Some(ChangeSource::Ide {
                session: "t0".into()
            }),
            "the oldest is forgotten"
        );
        assert!(matches!(
            known.source("t1"),
            Some(ChangeSource::Terminal { terminal: 1, .. })
        ));
    }
}
