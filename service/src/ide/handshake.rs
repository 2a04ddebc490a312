//! Whether an HTTP upgrade request may become a Claude Code IDE connection.
//!
//! Pure: a request head in, accept or an HTTP refusal out. Everything is
//! decided before the 101, so a browser page (CVE-2025-52882), a DNS-rebinding
//! page or a local process without the lock file's token never gets a
//! WebSocket. The CLI sends `GET /` with `Host: 127.0.0.1:<port>`, no
//! `Origin`, `Sec-WebSocket-Protocol: mcp` and the token in
//! `X-Claude-Code-Ide-Authorization`.

use crate::http::{Head, Refusal, plain_upgrade};

pub const AUTH_HEADER: &str = "x-claude-code-ide-authorization";

/// Which `Host` a server accepts: its own loopback port, or (a sandbox
/// link, reached through a relay on the sandbox's loopback, whose port we
/// do not choose) any port on a loopback name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostRule {
    Port(u16),
    AnyLoopbackPort,
}

impl HostRule {
    fn allows(self, host: &[u8]) -> bool {
        let Ok(host) = std::str::from_utf8(host) else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        let Some((name, port)) = host.rsplit_once(':') else {
            return false;
        };
        let Ok(port) = port.parse::<u16>() else {
            return false;
        };
        let loopback = matches!(name, "127.0.0.1" | "localhost" | "[::1]");
        loopback
            && match self {
                HostRule::Port(ours) => port == ours,
                HostRule::AnyLoopbackPort => port != 0,
            }
    }
}

/// Decides a parsed head for a server whose `Host` rule is `host_rule`,
/// with `token`.
pub fn decide(head: &Head, host_rule: HostRule, token: &str) -> Result<(), Refusal> {
    plain_upgrade(head)?;
    let host = head
        .single("host")
        .map_err(|()| Refusal::new(400, "Host given twice"))?;
    let host = host.ok_or(Refusal::new(400, "Host is required"))?;
    if !host_rule.allows(host) {
        return Err(Refusal::new(403, "Host must be this loopback server"));
    }
    let presented = head
        .single(AUTH_HEADER)
        .map_err(|()| Refusal::new(401, "unauthorized"))?;
    if !presented.is_some_and(|p| constant_time_eq::constant_time_eq(p, token.as_bytes())) {
        return Err(Refusal::new(401, "unauthorized"));
    }
    let upgrade = head
        .single("upgrade")
        .ok()
        .flatten()
        .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"websocket"));
    let connection = head
        .all("connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"));
    if !upgrade || !connection {
        return Err(Refusal::new(426, "WebSocket upgrade required"));
    }
    if head.single("sec-websocket-version").ok().flatten() != Some(b"13".as_slice()) {
        return Err(Refusal::new(426, "WebSocket version 13 required"));
    }
    let key = head
        .single("sec-websocket-key")
        .ok()
        .flatten()
        .unwrap_or_default();
    if !is_valid_key(key) {
        return Err(Refusal::new(400, "bad Sec-WebSocket-Key"));
    }
    Ok(())
}

/// A key is the base64 of 16 bytes: 22 base64 characters and `==`.
fn is_valid_key(key: &[u8]) -> bool {
    key.len() == 24
        && key.ends_with(b"==")
        && key[..22]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse_head;
    use expect_test::{Expect, expect};

    const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn head_with(extra: &str) -> String {
        format!(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
        )
    }

    /// Decides each head and prints the outcome, one line each.
    #[track_caller]
    fn check(heads: &[&str], expect: Expect) {
        let mut out = String::new();
        for h in heads {
            let outcome = parse_head(h.as_bytes())
                .and_then(|head| decide(&head, HostRule::Port(4000), TOKEN));
            match outcome {
                Ok(()) => out.push_str("accept\n"),
                Err(r) => out.push_str(&format!("{} {}\n", r.status, r.reason)),
            }
        }
        expect.assert_eq(&out);
    }

    #[test]
    fn tokens() {
        let good = format!("X-Claude-Code-Ide-Authorization: {TOKEN}\r\n");
        let lower = format!("x-claude-code-ide-authorization: {TOKEN}\r\n");
        let upper = format!(
            "X-Claude-Code-Ide-Authorization: {}\r\n",
            TOKEN.to_uppercase()
        );
        let longer = format!("X-Claude-Code-Ide-Authorization: {TOKEN}0\r\n");
        let twice = format!("{good}{good}");
        check(
            &[
                &head_with(&good),
                &head_with(&lower),
                &head_with(""),
                &head_with("X-Claude-Code-Ide-Authorization: \r\n"),
                &head_with(&upper),
                &head_with(&longer),
                &head_with(&twice),
            ],
            expect![[r#"
                accept
                accept
                401 unauthorized
                401 unauthorized
                401 unauthorized
                401 unauthorized
                401 unauthorized
            "#]],
        );
    }

    #[test]
    fn origins_hosts_and_upgrades() {
        let auth = format!("X-Claude-Code-Ide-Authorization: {TOKEN}\r\n");
        let with = |extra: &str| head_with(&format!("{auth}{extra}"));
        check(
            &[
                &with("Origin: https://evil.example\r\n"),
                &with("Origin: null\r\n"),
                &head_with(&auth).replace("127.0.0.1:4000", "evil.example:4000"),
                &head_with(&auth).replace("Host: 127.0.0.1:4000\r\n", ""),
                &head_with(&auth).replace("127.0.0.1:4000", "localhost:4000"),
                &head_with(&auth).replace("127.0.0.1:4000", "127.0.0.1:4001"),
                &head_with(&auth).replace("GET /", "POST /"),
                &head_with(&auth).replace("GET / ", "GET /api "),
                &head_with(&auth).replace("HTTP/1.1", "HTTP/1.0"),
                &head_with(&auth).replace("Version: 13", "Version: 8"),
                &head_with(&auth).replace("dGhlIHNhbXBsZSBub25jZQ==", "short"),
                &head_with(&auth).replace("Upgrade: websocket\r\n", ""),
                &format!(
                    "OPTIONS / HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nAccess-Control-Request-Headers: {AUTH_HEADER}\r\n\r\n"
                ),
                "\u{16}\u{3}\u{1}\u{0}\r\n\r\n",
            ],
            expect![[r#"
                403 requests with an Origin are refused
                403 requests with an Origin are refused
                403 Host must be this loopback server
                400 Host is required
                accept
                403 Host must be this loopback server
                405 only GET upgrades are served
                404 not found
                400 HTTP/1.1 required
                426 WebSocket version 13 required
                400 bad Sec-WebSocket-Key
                426 WebSocket upgrade required
                405 only GET upgrades are served
                400 not an HTTP request
            "#]],
        );
    }

    /// A sandbox link is reached through a relay on the sandbox's own
    /// loopback, on a port we do not know: any loopback name and port is
    /// its `Host`, nothing else.
    #[test]
    fn a_link_takes_any_loopback_port() {
        let auth = format!("X-Claude-Code-Ide-Authorization: {TOKEN}\r\n");
        let mut out = String::new();
        for host in [
            "127.0.0.1:4000",
            "127.0.0.1:39123",
            "LOCALHOST:1",
            "[::1]:65535",
            "127.0.0.1:0",
            "127.0.0.1",
            "127.0.0.1:x",
            "evil.example:4000",
            "127.0.0.2:4000",
        ] {
            let head = head_with(&auth).replace("127.0.0.1:4000", host);
            let outcome = parse_head(head.as_bytes())
                .and_then(|h| decide(&h, HostRule::AnyLoopbackPort, TOKEN));
            out.push_str(&format!(
                "{host}: {}\n",
                outcome.map_or_else(|r| r.status.to_string(), |()| "accept".into())
            ));
        }
        expect![[r#"
            127.0.0.1:4000: accept
            127.0.0.1:39123: accept
            LOCALHOST:1: accept
            [::1]:65535: accept
            127.0.0.1:0: 403
            127.0.0.1: 403
            127.0.0.1:x: 403
            evil.example:4000: 403
            127.0.0.2:4000: 403
        "#]]
        .assert_eq(&out);
    }
}
