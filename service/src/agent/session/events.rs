//! The session's event log as it grows: each event stored in the
//! transcript (a prompt only if it could be kept), published to the
//! session's subscribers, and the summary, state and settings that follow
//! from it; notifications and progress to the hub.

use moonkale_protocol::agent::{self as wire, NoticeData, SessionEvent, SettingsData, StateData};
use moonkale_protocol::to_json;

use super::{Session, State, blocking};
use crate::clock::now_ms;
use crate::hub::{AgentProgress, Event, Topic};

impl Session {
    /// Stores an event and tells subscribers; its `seq`, or `None` if it
    /// could not be stored.
    pub(super) fn record(&mut self, event: SessionEvent) -> Option<u64> {
        let seq = self.log.len() as u64;
        let prompt = matches!(event, SessionEvent::Prompt(_));
        if prompt && self.store_error.is_some() {
            return None; // never run a prompt we could not keep
        }
        let event = wire::Event {
            seq,
            at: now_ms(),
            event,
        };
        let store = self.store_error.is_none();
        if let Err(e) = blocking(|| self.log.append(to_json(&event), store)) {
            tracing::error!(session = %self.id, "storing an event failed: {e}");
            self.store_error = Some(e.to_string());
            if prompt {
                return None;
            }
            // Kept in memory, so those watching still see it.
            let _ = self.log.append(to_json(&event), false);
        }
        let event = wire::EventParams {
            session: self.id_text.clone(),
            event,
        };
        self.notify::<wire::EventNotification>(&event);
        self.publish_summary();
        Some(seq)
    }

    pub(super) fn notice(&mut self, message: String) {
        let untrusted = false;
        self.record(SessionEvent::Notice(NoticeData { message, untrusted }));
    }

    pub(super) fn set_state(&mut self, state: State) {
        if self.state == state {
            return;
        }
        self.state = state;
        self.turn_running =
            (state == State::Running).then(|| crate::lifetime::Activity::process().busy());
        let data = StateData {
            state,
            error: self.error.clone().filter(|_| state == State::Failed),
            login: self.login.clone().filter(|_| state == State::Failed),
        };
        self.record(SessionEvent::State(data));
    }

    pub(super) fn publish_summary(&self) {
        self.summary_tx.send_modify(|s| {
            s.state = self.state;
            s.events = Some(self.log.len());
            s.updated = self.log.last_at().unwrap_or(s.updated);
            s.permission_mode = self.permission_mode;
            s.model = self.model.clone();
        });
    }

    pub(super) fn notify<N: moonkale_protocol::Notification>(&self, params: &N::Params) {
        if self.spare {
            return; // nobody knows of it yet
        }
        self.send_to_hub(Event::Publish {
            topic: Topic::Session(self.id_text.clone()),
            method: N::METHOD,
            params: to_json(params),
        });
    }

    /// Records the session's settings as they are now; `by` who changed
    /// them when it was not the front door.
    pub(super) fn record_settings(&mut self, by: Option<&str>) {
        let data = SettingsData {
            permission_mode: self.permission_mode,
            model: self.model.clone(),
            by: by.map(str::to_owned),
        };
        self.record(SessionEvent::Settings(data));
    }

    pub(super) fn progress(&self, progress: AgentProgress) {
        self.send_to_hub(Event::AgentProgress {
            session: self.id_text.clone(),
            progress,
        });
    }

    /// Hub events from synchronous code: never waits (a hub that is that
    /// far behind loses a notification, which `events` can recover).
    pub(super) fn send_to_hub(&self, event: Event) {
        self.hub.try_send(event);
    }
}
