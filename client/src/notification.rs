//! What the service pushes to a front end, typed, and the channel that
//! hands it out in order.

use moonkale_protocol::agent::{self, Approval, ApprovalStatus};
use moonkale_protocol::changes::{Changed, ChangedParams};
use moonkale_protocol::proposal::{ProposalClosed, ProposalClosedParams};
use moonkale_protocol::screen::Update;
use moonkale_protocol::status::{self, Status};
use moonkale_protocol::terminal::{self, TerminalId};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

/// Notifications kept for a front end that is not reading; past this, they
/// are dropped and counted (see [`Notification::Lagged`]).
pub const QUEUE: usize = 4096;

/// One notification of the service.
#[derive(Clone, Debug, PartialEq)]
pub enum Notification {
    /// The CLI's partial text as it streams (not stored).
    AgentText {
        session: String,
        text: String,
        /// The model's thinking, not its answer.
        thinking: bool,
        /// Where `text` starts in what was streamed of the message.
        offset: u64,
    },
    /// A stored event of a session, as it is stored.
    AgentEvent {
        session: String,
        event: agent::Event,
    },
    /// An approval was asked (`Pending`) or decided (`Closed`).
    Approval {
        session: String,
        approval: Box<Approval>,
        status: ApprovalStatus,
    },
    TerminalUpdate {
        terminal: TerminalId,
        update: Update,
    },
    TerminalExit {
        terminal: TerminalId,
        exit_code: Option<u32>,
    },
    TerminalClosed {
        terminal: TerminalId,
    },
    /// A proposal was accepted or rejected: its view may close.
    ProposalClosed(ProposalClosedParams),
    /// The pending change sets, all of them, after any change
    /// (`moonkale/changes/changed`).
    ChangesChanged(ChangedParams),
    /// Who is in the workspace or what waits changed: the new status
    /// (`moonkale/status/changed`, after [`crate::Client::status_subscribe`]).
    StatusChanged(Box<Status>),
    /// `missed` notifications were dropped because the front end did not
    /// read them in time: ask for what they would have said
    /// (`agent_events` from the last `seq`, `terminal_screen`).
    Lagged {
        missed: u64,
    },
    /// Anything else (`window/showMessage`, `$/progress`, …) or a
    /// notification whose params do not parse, as it came.
    Other {
        method: String,
        params: Value,
    },
}

/// The receiving end, handed out once by [`crate::Client::notifications`].
pub struct Notifications {
    pub(crate) rx: mpsc::Receiver<Notification>,
}

impl Notifications {
    /// The next notification, in the order the service sent them; `None`
    /// once the connection is closed and every notification was taken.
    /// Cancel-safe: dropping the future (in `select!`) loses nothing.
    pub async fn next(&mut self) -> Option<Notification> {
        self.rx.recv().await
    }

    /// A notification if one is there, without waiting.
    pub fn try_next(&mut self) -> Option<Notification> {
        self.rx.try_recv().ok()
    }
}

/// The reader's end: delivers in order, never waits, counts what it drops.
pub(crate) struct Delivery {
    pub tx: mpsc::Sender<Notification>,
    pub missed: u64,
}

impl Delivery {
    pub fn deliver(&mut self, notification: Notification) {
        if self.missed > 0 {
            let lagged = Notification::Lagged {
                missed: self.missed,
            };
            if self.tx.try_send(lagged).is_err() {
                self.missed += 1;
                return;
            }
            self.missed = 0;
        }
        if self.tx.try_send(notification).is_err() {
            self.missed += 1;
        }
    }
}

/// A notification's typed form; unknown or malformed ones stay
/// [`Notification::Other`].
pub(crate) fn typed(method: String, params: &RawValue) -> Notification {
    use moonkale_protocol::Notification as N;
    fn parse<T: N>(params: &RawValue) -> Option<T::Params> {
        serde_json::from_str(params.get()).ok()
    }
    let typed = match method.as_str() {
        m if m == agent::TextNotification::METHOD => {
            parse::<agent::TextNotification>(params).map(|p| Notification::AgentText {
                session: p.session,
                text: p.text,
                thinking: p.thinking,
                offset: p.offset,
            })
        }
        m if m == agent::EventNotification::METHOD => parse::<agent::EventNotification>(params)
            .map(|p| Notification::AgentEvent {
                session: p.session,
                event: p.event,
            }),
        m if m == agent::ApprovalNotification::METHOD => {
            parse::<agent::ApprovalNotification>(params).map(|p| Notification::Approval {
                session: p.session,
                approval: Box::new(p.approval),
                status: p.status,
            })
        }
        m if m == terminal::UpdateNotification::METHOD => {
            parse::<terminal::UpdateNotification>(params).map(|p| Notification::TerminalUpdate {
                terminal: p.terminal,
                update: p.update,
            })
        }
        m if m == terminal::ExitNotification::METHOD => parse::<terminal::ExitNotification>(params)
            .map(|p| Notification::TerminalExit {
                terminal: p.terminal,
                exit_code: p.exit_code,
            }),
        m if m == terminal::ClosedNotification::METHOD => {
            parse::<terminal::ClosedNotification>(params).map(|p| Notification::TerminalClosed {
                terminal: p.terminal,
            })
        }
        m if m == Changed::METHOD => parse::<Changed>(params).map(Notification::ChangesChanged),
        m if m == status::Changed::METHOD => {
            parse::<status::Changed>(params).map(|s| Notification::StatusChanged(Box::new(s)))
        }
        m if m == ProposalClosed::METHOD => {
            parse::<ProposalClosed>(params).map(Notification::ProposalClosed)
        }
        _ => None,
    };
    typed.unwrap_or_else(|| Notification::Other {
        params: serde_json::from_str(params.get()).unwrap_or_default(),
        method,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use moonkale_protocol::screen::Color;
    use serde_json::json;

    fn raw(v: Value) -> Box<RawValue> {
        moonkale_protocol::jsonrpc::params(&v)
    }

    #[test]
    fn notifications_are_typed_and_bad_ones_kept_as_they_came() {
        let update = typed(
            "moonkale/terminal/update".into(),
            &raw(
                json!({"terminal": 3, "lines": [{"index": 0, "spans": [{"text": "hi", "fg": "#010203", "bold": true}]}]}),
            ),
        );
        let Notification::TerminalUpdate {
            terminal: 3,
            update,
        } = update
        else {
            panic!("{update:?}");
        };
        let span = &update.lines[0].spans[0];
        assert_eq!(span.fg, Some(Color::Rgb(1, 2, 3)));
        assert!(span.bold && !span.italic);
        assert!(matches!(
            typed(
                "moonkale/agent/text".into(),
                &raw(json!({"session": "s", "text": "t"}))
            ),
            Notification::AgentText { .. }
        ));
        // A malformed one is not dropped.
        assert!(matches!(
            typed("moonkale/agent/text".into(), &raw(json!({"session": 1}))),
            Notification::Other { .. }
        ));
    }

    #[test]
    fn a_full_queue_drops_and_then_says_how_many() {
        let (tx, rx) = mpsc::channel(2);
        let mut notes = Notifications { rx };
        let mut delivery = Delivery { tx, missed: 0 };
        let closed = |terminal| Notification::TerminalClosed { terminal };
        for terminal in 0..5 {
            delivery.deliver(closed(terminal));
        }
        assert_eq!(notes.try_next(), Some(closed(0)));
        assert_eq!(notes.try_next(), Some(closed(1)));
        assert_eq!(notes.try_next(), None);
        delivery.deliver(closed(5));
        assert_eq!(notes.try_next(), Some(Notification::Lagged { missed: 3 }));
        assert_eq!(notes.try_next(), Some(closed(5)));
    }
}
