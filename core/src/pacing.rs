//! Pacing of a stream of states towards a reader that wants the newest one,
//! but not too often: the selection on its way to Claude Code.
//!
//! The rules, decided here and nowhere else:
//! - the first change after a quiet period goes out at once (no wait for a
//!   change that may never follow);
//! - while changes keep coming, at most one goes out per interval, and it is
//!   the newest state when the interval ends (never a queue of old ones);
//! - the last state always goes out, at most one interval after it arrived;
//! - a state equal to the one sent last is never sent again.
//!
//! The pacer reads no clock: every call is given `now`, of whatever instant
//! type the caller's clock has (the hub's is tokio's, so paused test time
//! paces it), and the caller arms a timer for [`Pacer::due`].

use std::ops::Add;
use std::time::Duration;

/// The pacing state of one stream of `T`s, with `Instant` for time.
#[derive(Debug)]
pub struct Pacer<T, Instant = std::time::Instant> {
    interval: Duration,
    /// The state the reader has: the one sent last, or the one it started
    /// with.
    sent: T,
    /// When the last state was sent (none yet: the next goes at once).
    sent_at: Option<Instant>,
    /// The newest state not sent yet (it differs from `sent`).
    pending: Option<T>,
}

impl<T: PartialEq, Instant: Copy + Ord + Add<Duration, Output = Instant>> Pacer<T, Instant> {
    /// At most one state per `interval` (zero: every change at once),
    /// towards a reader that starts with `initial`.
    pub fn new(interval: Duration, initial: T) -> Pacer<T, Instant> {
        Pacer {
            interval,
            sent: initial,
            sent_at: None,
            pending: None,
        }
    }

    /// A new state arrived at `now`: what to send at once, if anything.
    pub fn offer(&mut self, now: Instant, state: T) -> Option<&T> {
        if self.sent == state {
            // Back where the reader already is: whatever was waiting is
            // stale.
            self.pending = None;
            return None;
        }
        let quiet = self.sent_at.is_none_or(|at| now >= at + self.interval);
        if self.pending.is_none() && quiet {
            return Some(self.send(now, state));
        }
        self.pending = Some(state);
        None
    }

    /// When the waiting state is due, if one waits.
    pub fn due(&self) -> Option<Instant> {
        self.pending.as_ref()?;
        // A state waits only behind one that was sent.
        Some(self.sent_at? + self.interval)
    }

    /// The timer for [`Pacer::due`] fired at `now`: the state to send.
    pub fn fire(&mut self, now: Instant) -> Option<&T> {
        let due = self.due()?;
        if now < due {
            return None;
        }
        let state = self.pending.take().expect("due() saw it");
        Some(self.send(now, state))
    }

    fn send(&mut self, now: Instant, state: T) -> &T {
        self.sent = state;
        self.sent_at = Some(now);
        &self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};
    use std::time::Instant;

    /// Plays `script` (one step per line: `<ms> <state>` offers a state at
    /// that time, `<ms> tick` fires the timer if it is due by then) with a
    /// 50 ms interval and prints what goes out when.
    fn check(script: &str, expected: Expect) {
        let start = Instant::now();
        let mut pacer = Pacer::new(Duration::from_millis(50), String::new());
        let mut out = String::new();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let ms = |i: Instant| i.duration_since(start).as_millis();
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (time, what) = line.split_once(' ').expect("<ms> <what>");
            let now = at(time.parse().expect("ms"));
            let sent = if what == "tick" {
                match pacer.due() {
                    Some(due) if due <= now => pacer.fire(due).cloned().map(|s| (ms(due), s)),
                    _ => None,
                }
            } else {
                pacer
                    .offer(now, what.to_owned())
                    .cloned()
                    .map(|s| (ms(now), s))
            };
            if let Some((when, state)) = sent {
                out.push_str(&format!("{when}ms: {state}\n"));
            }
            if let Some(due) = pacer.due() {
                out.push_str(&format!("  (due at {}ms)\n", ms(due)));
            }
        }
        expected.assert_eq(&out);
    }

    #[test]
    fn a_single_change_goes_out_at_once() {
        check(
            "0 a
             500 b
             1000 tick",
            expect![[r#"
                0ms: a
                500ms: b
            "#]],
        );
    }

    #[test]
    fn continuous_movement_sends_the_newest_once_per_interval_and_the_last() {
        // A key repeat at 100 Hz for 120 ms, then quiet.
        check(
            "0 l0
             10 l1
             20 l2
             30 l3
             40 l4
             50 tick
             50 l5
             60 l6
             70 l7
             80 l8
             90 l9
             100 tick
             100 l10
             110 l11
             120 l12
             150 tick
             1000 tick",
            expect![[r#"
                0ms: l0
                  (due at 50ms)
                  (due at 50ms)
                  (due at 50ms)
                  (due at 50ms)
                50ms: l4
                  (due at 100ms)
                  (due at 100ms)
                  (due at 100ms)
                  (due at 100ms)
                  (due at 100ms)
                100ms: l9
                  (due at 150ms)
                  (due at 150ms)
                  (due at 150ms)
                150ms: l12
            "#]],
        );
    }

    #[test]
    fn the_same_state_is_never_sent_twice() {
        // Away and back before the interval ends: nothing is left to send.
        check(
            "0 a
             10 b
             20 a
             100 tick
             200 a
             210 b
             210 b
             300 tick",
            expect![[r#"
                0ms: a
                  (due at 50ms)
                210ms: b
            "#]],
        );
    }

    #[test]
    fn a_change_after_a_quiet_interval_is_not_held_back() {
        // 60 ms after the last send, the interval is over: at once.
        check(
            "0 a
             60 b
             70 c
             110 tick",
            expect![[r#"
                0ms: a
                60ms: b
                  (due at 110ms)
                110ms: c
            "#]],
        );
    }

    #[test]
    fn a_zero_interval_sends_every_change() {
        let start = Instant::now();
        let mut pacer = Pacer::new(Duration::ZERO, 0);
        assert_eq!(pacer.offer(start, 0).copied(), None, "the reader has it");
        assert_eq!(pacer.offer(start, 1).copied(), Some(1));
        assert_eq!(pacer.offer(start, 2).copied(), Some(2));
        assert_eq!(pacer.offer(start, 2).copied(), None);
        assert_eq!(pacer.due(), None);
    }

    /// The rules over any stream of changes: nothing goes out twice in a
    /// row, no two sends are closer than the interval, what is sent is the
    /// newest state at that moment, and the last state always goes out.
    #[test]
    fn the_rules_hold_for_any_stream() {
        use proptest::prelude::*;
        let interval = Duration::from_millis(50);
        proptest!(|(steps in proptest::collection::vec((0u64..80, 0u8..4), 1..60))| {
            let start = Instant::now();
            let mut pacer = Pacer::new(interval, u8::MAX);
            let mut now = start;
            let mut sends: Vec<(Instant, u8)> = Vec::new();
            let mut newest = None;
            let drain = |pacer: &mut Pacer<u8>, until: Instant, sends: &mut Vec<(Instant, u8)>| {
                while let Some(due) = pacer.due().filter(|d| *d <= until) {
                    let s = *pacer.fire(due).expect("due");
                    sends.push((due, s));
                }
            };
            for (gap, state) in steps {
                now += Duration::from_millis(gap);
                drain(&mut pacer, now, &mut sends);
                newest = Some(state);
                if let Some(s) = pacer.offer(now, state) {
                    sends.push((now, *s));
                }
            }
            drain(&mut pacer, now + interval, &mut sends);
            prop_assert!(pacer.due().is_none());
            prop_assert_eq!(sends.last().map(|s| s.1), newest, "the last state went out");
            for pair in sends.windows(2) {
                prop_assert_ne!(pair[0].1, pair[1].1, "sent twice");
                prop_assert!(pair[1].0 >= pair[0].0 + interval, "too often");
            }
        });
    }
}
