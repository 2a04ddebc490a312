//! Whether an HTTP upgrade request may become a remote front-door client.
//!
//! Pure: a request head, the service's token, the client's address and the
//! time in; accept or an HTTP refusal out (security.md 40). Remote clients
//! send `Authorization: Bearer <token>` (the scheme in any letter case, once);
//! a token anywhere in the URL is refused, since URLs end up in logs and
//! proxies. A request with an `Origin` comes from a browser page and is
//! refused whatever it carries.
//!
//! Failed attempts are counted per address, and each failure beyond the
//! first few is answered later than the one before ([`Throttle::failed`]):
//! guessing is slowed, but nothing is ever locked out. The right token is
//! looked at first and always gets in at once, because every client of an
//! SSH tunnel comes from 127.0.0.1 and a lockout of that address would lock
//! out everyone. Only so many slowed attempts may wait at once, per address
//! and overall; more are answered 429 at once, so waiting attempts cannot
//! fill the handshake slots that other clients need.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::http::{self, Head, Refusal};

/// Failures per address within [`THROTTLE_WINDOW`] that are answered at once.
pub const FREE_FAILURES: usize = 5;
pub const THROTTLE_WINDOW: Duration = Duration::from_secs(60);
/// The delay of the first slowed failure; it doubles with each one after.
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest delay, well inside the handshake deadline.
pub const MAX_DELAY: Duration = Duration::from_secs(2);
/// Slowed attempts that may wait at once from one address, and from all.
pub const MAX_WAITING_PER_ADDRESS: usize = 8;
pub const MAX_WAITING: usize = 256;

/// Addresses remembered at most; the oldest are forgotten first, so a flood
/// from many addresses cannot grow this without bound.
const MAX_TRACKED: usize = 4096;

/// Decides a parsed head against `token`.
pub fn decide(head: &Head, token: &str) -> Result<(), Refusal> {
    if head.path.contains('?') {
        return Err(Refusal::new(
            401,
            "credentials in the URL are refused: send Authorization: Bearer <token>",
        ));
    }
    http::plain_upgrade(head)?;
    let value = match head.single("authorization") {
        Err(()) => return Err(Refusal::new(401, "Authorization given twice")),
        Ok(None) => {
            return Err(Refusal::new(
                401,
                "Authorization: Bearer <token> is required",
            ));
        }
        Ok(Some(v)) => v,
    };
    let presented = value
        .split_at_checked(7)
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|(_, rest)| rest.trim_ascii())
        .ok_or(Refusal::new(401, "only the Bearer scheme is accepted"))?;
    if !constant_time_eq::constant_time_eq(presented, token.as_bytes()) {
        return Err(Refusal::new(401, "wrong token"));
    }
    Ok(())
}

pub const THROTTLED: Refusal = Refusal::new(
    429,
    "too many failed attempts from this address; wait a minute",
);

/// What to do with a failed attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Slowed {
    /// Answer after this long (zero: at once); [`Throttle::done_waiting`]
    /// when answered.
    After(Duration),
    /// Too many attempts wait already: answer [`THROTTLED`] at once.
    Throttled,
}

#[derive(Default)]
struct Recent {
    /// Failures within the window, oldest first; at most as many as make
    /// the delay reach [`MAX_DELAY`].
    failures: VecDeque<Instant>,
    waiting: usize,
}

/// Recent failed attempts per address, and the slowed attempts waiting.
#[derive(Default)]
pub struct Throttle {
    addresses: HashMap<IpAddr, Recent>,
    waiting: usize,
}

/// Failures remembered per address: beyond this the delay is [`MAX_DELAY`]
/// anyway.
const REMEMBERED: usize = FREE_FAILURES + 16;

impl Throttle {
    /// Records a failed attempt from `ip` and says when to answer it. A
    /// [`Slowed::After`] with a non-zero delay counts as waiting until
    /// [`Throttle::done_waiting`].
    pub fn failed(&mut self, ip: IpAddr, now: Instant) -> Slowed {
        if self.addresses.len() >= MAX_TRACKED && !self.addresses.contains_key(&ip) {
            self.forget_old(now);
        }
        let recent = self.addresses.entry(ip).or_default();
        while recent
            .failures
            .front()
            .is_some_and(|t| now.duration_since(*t) >= THROTTLE_WINDOW)
        {
            recent.failures.pop_front();
        }
        if recent.failures.len() == REMEMBERED {
            recent.failures.pop_front();
        }
        recent.failures.push_back(now);
        let Some(beyond) = recent.failures.len().checked_sub(FREE_FAILURES + 1) else {
            return Slowed::After(Duration::ZERO);
        };
        if recent.waiting >= MAX_WAITING_PER_ADDRESS || self.waiting >= MAX_WAITING {
            return Slowed::Throttled;
        }
        recent.waiting += 1;
        self.waiting += 1;
        let delay = FIRST_DELAY.saturating_mul(1 << beyond.min(16));
        Slowed::After(delay.min(MAX_DELAY))
    }

    /// A slowed attempt from `ip` was answered (or its client went away).
    pub fn done_waiting(&mut self, ip: IpAddr) {
        if let Some(recent) = self.addresses.get_mut(&ip) {
            recent.waiting = recent.waiting.saturating_sub(1);
        }
        self.waiting = self.waiting.saturating_sub(1);
    }

    /// Forgets addresses without recent failures or waiting attempts, then
    /// the one whose last failure is oldest.
    fn forget_old(&mut self, now: Instant) {
        self.addresses.retain(|_, r| {
            r.waiting > 0
                || r.failures
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < THROTTLE_WINDOW)
        });
        if self.addresses.len() >= MAX_TRACKED
            && let Some(oldest) = self
                .addresses
                .iter()
                .filter(|(_, r)| r.waiting == 0)
                .min_by_key(|(_, r)| r.failures.back().copied())
                .map(|(ip, _)| *ip)
        {
            self.addresses.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse_head;
    use expect_test::{Expect, expect};

    const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn check(extra_headers: &str, path: &str, expect: Expect) {
        let raw = format!(
            "GET {path} HTTP/1.1\r\nHost: example.org:7000\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra_headers}\r\n"
        );
        let verdict = parse_head(raw.as_bytes()).and_then(|h| decide(&h, TOKEN));
        let shown = match verdict {
            Ok(()) => "accepted".to_owned(),
            Err(r) => format!("{} {}", r.status, r.reason),
        };
        expect.assert_eq(&shown);
    }

    /// Security case 40: every way of presenting (or not) the token.
    #[test]
    fn hostile_40_remote_auth() {
        let good = format!("Authorization: Bearer {TOKEN}\r\n");
        check(&good, "/", expect!["accepted"]);
        check(
            &format!("authorization: bearer {TOKEN}\r\n"),
            "/",
            expect!["accepted"],
        );
        check(
            "",
            "/",
            expect!["401 Authorization: Bearer <token> is required"],
        );
        check(
            "Authorization: Bearer nope\r\n",
            "/",
            expect!["401 wrong token"],
        );
        check(
            "authorization: bearer nope\r\n",
            "/",
            expect!["401 wrong token"],
        );
        check(
            &format!("Authorization: Bearer {}\r\n", &TOKEN[..63]),
            "/",
            expect!["401 wrong token"],
        );
        check(
            "Authorization: Basic dXNlcjpwYXNz\r\n",
            "/",
            expect!["401 only the Bearer scheme is accepted"],
        );
        check(
            "Authorization: Bearer\r\n",
            "/",
            expect!["401 only the Bearer scheme is accepted"],
        );
        check(
            &format!("{good}Authorization: Bearer {TOKEN}\r\n"),
            "/",
            expect!["401 Authorization given twice"],
        );
        check(
            "",
            &format!("/?token={TOKEN}"),
            expect!["401 credentials in the URL are refused: send Authorization: Bearer <token>"],
        );
        check(
            &format!("{good}Origin: https://evil.example\r\n"),
            "/",
            expect!["403 requests with an Origin are refused"],
        );
        check(&good, "/other", expect!["404 not found"]);
    }

    #[test]
    fn throttle_slows_failures_per_address_for_a_minute() {
        let mut t = Throttle::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let start = Instant::now();
        for i in 0..FREE_FAILURES {
            assert_eq!(t.failed(a, start), Slowed::After(Duration::ZERO), "{i}");
        }
        let delays: Vec<_> = (0..6)
            .map(|_| {
                let d = t.failed(a, start);
                t.done_waiting(a);
                d
            })
            .collect();
        let ms = |n| Slowed::After(Duration::from_millis(n));
        assert_eq!(
            delays,
            [ms(100), ms(200), ms(400), ms(800), ms(1600), ms(2000)]
        );
        assert_eq!(t.failed(b, start), Slowed::After(Duration::ZERO), "b");
        let later = start + THROTTLE_WINDOW;
        assert_eq!(t.failed(a, later), Slowed::After(Duration::ZERO), "forgot");
    }

    #[test]
    fn throttle_bounds_waiting_attempts() {
        let mut t = Throttle::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let now = Instant::now();
        for _ in 0..FREE_FAILURES {
            t.failed(a, now);
        }
        for i in 0..MAX_WAITING_PER_ADDRESS {
            assert!(matches!(t.failed(a, now), Slowed::After(_)), "{i}");
        }
        assert_eq!(t.failed(a, now), Slowed::Throttled);
        t.done_waiting(a);
        assert!(matches!(t.failed(a, now), Slowed::After(_)));
        // Many addresses together wait at most MAX_WAITING.
        let mut waiting = 0;
        for i in 0..200u32 {
            let ip = IpAddr::from((0x0b00_0000 + i).to_be_bytes());
            for _ in 0..FREE_FAILURES + 4 {
                if t.failed(ip, now) != Slowed::After(Duration::ZERO) {
                    waiting += 1;
                }
            }
        }
        assert!(t.waiting <= MAX_WAITING, "{}", t.waiting);
        assert!(waiting > MAX_WAITING, "some were throttled");
    }

    #[test]
    fn throttle_memory_is_bounded() {
        let mut t = Throttle::default();
        let now = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 100) {
            t.failed(IpAddr::from(i.to_be_bytes()), now);
        }
        assert!(t.addresses.len() <= MAX_TRACKED);
    }
}
