//! Who may use the page: the login secret exchanged for a cookie, the
//! `Host` allow-list (DNS rebinding), the exact `Origin` of a WebSocket
//! upgrade (cross-site pages), and the answers to each request before any
//! workspace data is served. Pure: a request head in, a [`Route`] or a
//! [`Refusal`] out; the login sessions are a small bounded set.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::http::{Head, Refusal};

/// Logged-in browsers remembered (each login is one cookie); the oldest
/// is forgotten past this.
pub const MAX_LOGINS: usize = 64;

/// The page's login secret and the cookies it was exchanged for.
pub struct Gate {
    secret: String,
    /// `mk_<port>`: cookies are not separated by port, so the name is.
    cookie: String,
    logins: VecDeque<String>,
    /// `Host` values this listener answers to.
    hosts: Vec<String>,
    /// The exact origins a WebSocket upgrade may come from.
    origins: Vec<String>,
    secure: bool,
}

/// What a request asks for, once it passed the gate.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// The right secret: set this cookie and go to `/`.
    Login {
        set_cookie: String,
    },
    Index,
    Asset(&'static str),
    /// The page's WebSocket.
    Socket,
}

pub const NO_LOGIN: Refusal = Refusal::new(
    401,
    "not logged in: open the URL `moonkale-service web` printed (it holds the secret)",
);
const BAD_HOST: Refusal = Refusal::new(403, "this server does not answer to that host name");
const BAD_ORIGIN: Refusal = Refusal::new(403, "a page of another site may not connect");
const NOT_FOUND: Refusal = Refusal::new(404, "no such page");
const ONLY_GET: Refusal = Refusal::new(405, "only GET is served");

/// The static files the page loads (no workspace data in them).
pub const ASSETS: [&str; 4] = ["/liveview.js", "/app.js", "/app.css", "/icon.svg"];

impl Gate {
    /// A gate for a listener on `addr` (its loopback names are allowed
    /// too when it is a loopback address), served over TLS or not.
    pub fn new(secret: String, addr: SocketAddr, secure: bool) -> Gate {
        let port = addr.port();
        let mut names = vec![addr.ip().to_string()];
        if addr.ip().is_ipv6() {
            names[0] = format!("[{}]", addr.ip());
        }
        if addr.ip().is_loopback() {
            names.extend(["127.0.0.1".into(), "localhost".into(), "[::1]".into()]);
        }
        names.dedup();
        let scheme = if secure { "https" } else { "http" };
        Gate {
            secret,
            cookie: format!("mk_{port}"),
            logins: VecDeque::new(),
            hosts: names.iter().map(|n| format!("{n}:{port}")).collect(),
            origins: names
                .iter()
                .map(|n| format!("{scheme}://{n}:{port}"))
                .collect(),
            secure,
        }
    }

    /// Also answer to `name` (a LAN name the user gave with `--listen`).
    pub fn allow_host(&mut self, name: &str, port: u16) {
        let scheme = if self.secure { "https" } else { "http" };
        self.hosts.push(format!("{name}:{port}"));
        self.origins.push(format!("{scheme}://{name}:{port}"));
    }

    /// Decides one request. A new login is remembered.
    pub fn route(
        &mut self,
        head: &Head,
        new_login: impl FnOnce() -> String,
    ) -> Result<Route, Refusal> {
        let host = single(head, "host")?;
        if !host.is_some_and(|h| self.hosts.iter().any(|ok| ok.eq_ignore_ascii_case(h))) {
            return Err(BAD_HOST);
        }
        if head.method != "GET" {
            return Err(ONLY_GET);
        }
        let (path, query) = head.path.split_once('?').unwrap_or((&head.path, ""));
        if let Some(asset) = ASSETS.iter().find(|a| **a == path) {
            return Ok(Route::Asset(asset));
        }
        match path {
            "/" => {
                if let Some(given) = query.split('&').find_map(|kv| kv.strip_prefix("token=")) {
                    if !constant_time_eq::constant_time_eq(given.as_bytes(), self.secret.as_bytes())
                    {
                        return Err(NO_LOGIN);
                    }
                    let login = new_login();
                    if self.logins.len() == MAX_LOGINS {
                        self.logins.pop_front();
                    }
                    self.logins.push_back(login.clone());
                    let secure = if self.secure { "; Secure" } else { "" };
                    return Ok(Route::Login {
                        set_cookie: format!(
                            "{}={login}; HttpOnly; SameSite=Lax; Path=/{secure}",
                            self.cookie
                        ),
                    });
                }
                self.logged_in(head)?;
                Ok(Route::Index)
            }
            "/ws" => {
                let origin = single(head, "origin")?;
                if !origin.is_some_and(|o| self.origins.iter().any(|ok| ok == o)) {
                    return Err(BAD_ORIGIN);
                }
                self.logged_in(head)?;
                Ok(Route::Socket)
            }
            _ => Err(NOT_FOUND),
        }
    }

    fn logged_in(&self, head: &Head) -> Result<(), Refusal> {
        let presented = head
            .all("cookie")
            .filter_map(|v| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .filter(|(name, _)| *name == self.cookie)
            .map(|(_, value)| value);
        for value in presented {
            if self
                .logins
                .iter()
                .any(|l| constant_time_eq::constant_time_eq(l.as_bytes(), value.as_bytes()))
            {
                return Ok(());
            }
        }
        Err(NO_LOGIN)
    }
}

fn single<'a>(head: &'a Head, name: &'a str) -> Result<Option<&'a str>, Refusal> {
    match head.single(name) {
        Ok(v) => Ok(v.and_then(|v| std::str::from_utf8(v).ok())),
        Err(()) => Err(Refusal::new(
            400,
            "a header that must appear once is repeated",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse_head;

    fn head(text: &str) -> Head {
        parse_head(
            format!("{text}\r\n\r\n")
                .replace('\n', "\r\n")
                .replace("\r\r", "\r")
                .as_bytes(),
        )
        .unwrap()
    }

    fn gate() -> Gate {
        Gate::new("s3cret".into(), "127.0.0.1:4000".parse().unwrap(), false)
    }

    #[test]
    fn the_secret_becomes_a_cookie_and_the_cookie_opens_the_page() {
        let mut g = gate();
        let login = g.route(
            &head("GET /?token=s3cret HTTP/1.1\nHost: 127.0.0.1:4000"),
            || "L1".into(),
        );
        assert_eq!(
            login,
            Ok(Route::Login {
                set_cookie: "mk_4000=L1; HttpOnly; SameSite=Lax; Path=/".into()
            })
        );
        let index = head("GET / HTTP/1.1\nHost: localhost:4000\nCookie: a=b; mk_4000=L1");
        assert_eq!(g.route(&index, || unreachable!()), Ok(Route::Index));
        let ws = head(
            "GET /ws HTTP/1.1\nHost: 127.0.0.1:4000\nOrigin: http://127.0.0.1:4000\nCookie: mk_4000=L1",
        );
        assert_eq!(g.route(&ws, || unreachable!()), Ok(Route::Socket));
    }

    #[test]
    fn no_secret_a_wrong_one_a_foreign_host_or_origin_are_refused() {
        let mut g = gate();
        let refused =
            |g: &mut Gate, text: &str| g.route(&head(text), || "L".into()).unwrap_err().status;
        assert_eq!(refused(&mut g, "GET / HTTP/1.1\nHost: 127.0.0.1:4000"), 401);
        assert_eq!(
            refused(&mut g, "GET /?token=wrong HTTP/1.1\nHost: 127.0.0.1:4000"),
            401
        );
        assert_eq!(
            refused(&mut g, "GET /?token= HTTP/1.1\nHost: 127.0.0.1:4000"),
            401
        );
        assert_eq!(
            refused(
                &mut g,
                "GET / HTTP/1.1\nHost: 127.0.0.1:4000\nCookie: mk_4000=guess"
            ),
            401
        );
        // DNS rebinding: the right secret under an attacker's name.
        assert_eq!(
            refused(
                &mut g,
                "GET /?token=s3cret HTTP/1.1\nHost: evil.example:4000"
            ),
            403
        );
        assert_eq!(
            refused(&mut g, "GET /app.css HTTP/1.1\nHost: evil.example:4000"),
            403
        );
        assert_eq!(refused(&mut g, "GET / HTTP/1.1"), 403);
        g.route(
            &head("GET /?token=s3cret HTTP/1.1\nHost: 127.0.0.1:4000"),
            || "L1".into(),
        )
        .unwrap();
        // A page of another site (or another port) with our cookie.
        assert_eq!(
            refused(
                &mut g,
                "GET /ws HTTP/1.1\nHost: 127.0.0.1:4000\nOrigin: http://127.0.0.1:4001\nCookie: mk_4000=L1"
            ),
            403
        );
        assert_eq!(
            refused(
                &mut g,
                "GET /ws HTTP/1.1\nHost: 127.0.0.1:4000\nCookie: mk_4000=L1"
            ),
            403
        );
        assert_eq!(
            refused(
                &mut g,
                "GET /ws HTTP/1.1\nHost: 127.0.0.1:4000\nOrigin: http://127.0.0.1:4000"
            ),
            401
        );
        assert_eq!(
            refused(&mut g, "POST / HTTP/1.1\nHost: 127.0.0.1:4000"),
            405
        );
        assert_eq!(
            refused(&mut g, "GET /etc/passwd HTTP/1.1\nHost: 127.0.0.1:4000"),
            404
        );
    }

    #[test]
    fn logins_are_bounded_and_https_cookies_are_secure() {
        let mut g = Gate::new("k".into(), "0.0.0.0:443".parse().unwrap(), true);
        g.allow_host("box.lan", 443);
        let mut n = 0;
        for _ in 0..=MAX_LOGINS {
            n += 1;
            let r = g.route(&head("GET /?token=k HTTP/1.1\nHost: box.lan:443"), || {
                format!("L{n}")
            });
            assert!(
                matches!(r, Ok(Route::Login { set_cookie }) if set_cookie.ends_with("; Secure"))
            );
        }
        let first = head("GET / HTTP/1.1\nHost: box.lan:443\nCookie: mk_443=L1");
        assert_eq!(g.route(&first, || unreachable!()).unwrap_err().status, 401);
        let last = head(&format!(
            "GET / HTTP/1.1\nHost: box.lan:443\nCookie: mk_443=L{n}"
        ));
        assert_eq!(g.route(&last, || unreachable!()), Ok(Route::Index));
    }
}
