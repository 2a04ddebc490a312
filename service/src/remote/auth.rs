//! Whether an HTTP upgrade request may become a remote front-door client.
//!
//! Pure: a request head, the service's token, the client's address and the
//! time in; accept or an HTTP refusal out (security.md 40). Remote clients
//! send `Authorization: Bearer <token>` (the scheme in any letter case, once);
//! a token anywhere in the URL is refused, since URLs end up in logs and
//! proxies. A request with an `Origin` comes from a browser page and is
//! refused whatever it carries. Failed attempts are counted per address: the
//! sixth within a minute, and every attempt after it until the minute has
//! passed, is answered 429 before the token is even looked at.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::ide::handshake::{self, Head, Refusal};

/// Failed attempts an address may make per [`THROTTLE_WINDOW`].
pub const MAX_FAILURES: usize = 5;
pub const THROTTLE_WINDOW: Duration = Duration::from_secs(60);

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
    handshake::plain_upgrade(head)?;
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

pub const THROTTLED: Refusal = Refusal::new(429, "too many failed attempts; wait a minute");

/// Recent failed attempts per address.
#[derive(Default)]
pub struct Throttle {
    failures: HashMap<IpAddr, Vec<Instant>>,
}

impl Throttle {
    /// Whether `ip` may try now.
    pub fn allows(&mut self, ip: IpAddr, now: Instant) -> bool {
        match self.failures.get_mut(&ip) {
            None => true,
            Some(times) => {
                times.retain(|t| now.duration_since(*t) < THROTTLE_WINDOW);
                times.len() < MAX_FAILURES
            }
        }
    }

    pub fn failed(&mut self, ip: IpAddr, now: Instant) {
        if self.failures.len() >= MAX_TRACKED && !self.failures.contains_key(&ip) {
            self.failures.retain(|_, times| {
                times
                    .last()
                    .is_some_and(|t| now.duration_since(*t) < THROTTLE_WINDOW)
            });
            if self.failures.len() >= MAX_TRACKED
                && let Some(oldest) = self
                    .failures
                    .iter()
                    .min_by_key(|(_, times)| times.last().copied())
                    .map(|(ip, _)| *ip)
            {
                self.failures.remove(&oldest);
            }
        }
        self.failures.entry(ip).or_default().push(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ide::handshake::parse_head;
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
    fn throttle_counts_failures_per_address_for_a_minute() {
        let mut t = Throttle::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let start = Instant::now();
        for i in 0..MAX_FAILURES {
            assert!(t.allows(a, start), "attempt {i}");
            t.failed(a, start);
        }
        assert!(!t.allows(a, start + Duration::from_secs(59)));
        assert!(t.allows(b, start), "another address is not affected");
        assert!(t.allows(a, start + THROTTLE_WINDOW));
    }

    #[test]
    fn throttle_memory_is_bounded() {
        let mut t = Throttle::default();
        let now = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 100) {
            t.failed(IpAddr::from(i.to_be_bytes()), now);
        }
        assert!(t.failures.len() <= MAX_TRACKED);
    }
}
