//! An HTTP/1.1 request head: parsed with caps, the checks every WebSocket
//! upgrade we serve must pass, and the refusal answered otherwise.
//!
//! Pure: bytes in, a [`Head`] or a [`Refusal`] out. It sits in `http`,
//! under both listeners (`ide`'s for Claude Code, `remote`'s for front
//! ends), which each add their own decision (token, `Host`) on top.

/// Largest request head read before answering 431.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most header lines in a head.
pub const MAX_HEADER_LINES: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub reason: &'static str,
}

impl Refusal {
    pub const fn new(status: u16, reason: &'static str) -> Refusal {
        Refusal { status, reason }
    }

    /// The whole HTTP response for this refusal (no CORS headers, ever).
    pub fn response(&self) -> Vec<u8> {
        let phrase = match self.status {
            400 => "Bad Request",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            409 => "Conflict",
            426 => "Upgrade Required",
            429 => "Too Many Requests",
            431 => "Request Header Fields Too Large",
            _ => "Error",
        };
        let extra = if self.status == 426 {
            "Sec-WebSocket-Version: 13\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 {} {phrase}\r\nConnection: close\r\n{extra}Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{}",
            self.status,
            self.reason.len(),
            self.reason
        )
        .into_bytes()
    }
}

pub const TOO_LARGE: Refusal = Refusal::new(431, "request head too large");

/// A parsed request head.
pub struct Head {
    pub method: String,
    pub path: String,
    pub minor_version: u8,
    /// Names lower-cased.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// The value of a header that must appear at most once; `Err` if repeated.
    pub(crate) fn single<'a>(&'a self, name: &'a str) -> Result<Option<&'a [u8]>, ()> {
        let mut values = self.all(name);
        let first = values.next();
        if values.next().is_some() {
            Err(())
        } else {
            Ok(first)
        }
    }

    /// Whether the client offered the `mcp` subprotocol.
    pub fn offers_mcp(&self) -> bool {
        self.all("sec-websocket-protocol")
            .flat_map(|v| v.split(|&b| b == b','))
            .any(|p| p.trim_ascii().eq_ignore_ascii_case(b"mcp"))
    }
}

/// Parses a complete head (`bytes` ends with the blank line).
pub fn parse_head(bytes: &[u8]) -> Result<Head, Refusal> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADER_LINES];
    let mut req = httparse::Request::new(&mut slots);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Refusal::new(400, "incomplete request head")),
        Err(httparse::Error::TooManyHeaders) => return Err(TOO_LARGE),
        Err(_) => return Err(Refusal::new(400, "not an HTTP request")),
    }
    Ok(Head {
        method: req.method.unwrap_or_default().to_owned(),
        path: req.path.unwrap_or_default().to_owned(),
        minor_version: req.version.unwrap_or(0),
        headers: req
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect(),
    })
}

/// What every WebSocket upgrade we serve must be: `GET /` over HTTP/1.1
/// without an `Origin` (our clients never send one; browsers always do, so
/// this refuses every web page, CVE-2025-52882).
pub fn plain_upgrade(head: &Head) -> Result<(), Refusal> {
    if head.method != "GET" {
        return Err(Refusal::new(405, "only GET upgrades are served"));
    }
    if head.path != "/" {
        return Err(Refusal::new(404, "not found"));
    }
    if head.minor_version != 1 {
        return Err(Refusal::new(400, "HTTP/1.1 required"));
    }
    if head.all("origin").next().is_some() {
        return Err(Refusal::new(403, "requests with an Origin are refused"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_with(extra: &str) -> String {
        format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:4000\r\n{extra}\r\n")
    }

    #[test]
    fn subprotocol_offer() {
        let head =
            parse_head(head_with("Sec-WebSocket-Protocol: foo, MCP\r\n").as_bytes()).unwrap();
        assert!(head.offers_mcp());
        assert!(!parse_head(head_with("").as_bytes()).unwrap().offers_mcp());
    }

    #[test]
    fn refusals_carry_no_cors_headers() {
        let r = String::from_utf8(Refusal::new(405, "x").response()).unwrap();
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\nConnection: close\r\n"));
        assert!(!r.to_ascii_lowercase().contains("access-control"));
    }
}
