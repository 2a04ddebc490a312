//! ACP's wire: JSON-RPC 2.0, one message per line. The messages are the
//! protocol crate's ([`moonkale_protocol::jsonrpc`], LSP's model too);
//! this file only splits lines and writes them. Hostile lines (not JSON,
//! not an object, too long, a bad id) become a [`ParseError`] with the
//! error to answer; nothing here panics.

use std::path::PathBuf;

use moonkale_protocol::jsonrpc::{self, Message, ParseError, ResponseError};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

pub use moonkale_protocol::jsonrpc::code;

/// Messages queued each way between the pipes and the bridge.
pub const QUEUE: usize = 1024;
/// The longest line taken from the client (a prompt with embedded files).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// One line from the client: a message, or why it is none (answered with
/// [`ParseError::to_response`]).
pub type Incoming = Result<Message, ParseError>;

/// The service's answer, passed on with its code and message.
pub fn from_service(e: moonkale_client::Error) -> ResponseError {
    match e {
        moonkale_client::Error::Remote { code, message } => ResponseError::new(code, message),
        other => ResponseError::new(code::INTERNAL_ERROR, other.to_string()),
    }
}

/// A message's params as a JSON value, for the handlers that read them
/// by key.
pub fn value(params: &jsonrpc::Params) -> Result<Value, ResponseError> {
    serde_json::from_str(params.get())
        .map_err(|e| ResponseError::invalid_params(format!("params: {e}")))
}

/// Reads the client's lines into `tx` until its end closes (or the bridge
/// is gone). A line over [`MAX_LINE`] is skipped to its end and answered
/// as invalid; blank lines are ignored.
pub async fn read_lines<R: AsyncRead + Unpin>(input: R, tx: mpsc::Sender<Incoming>) {
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = match input.fill_buf().await {
            Ok([]) | Err(_) => return,
            Ok(buf) => buf,
        };
        let (taken, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if !too_long {
            let piece = &buf[..if end { taken - 1 } else { taken }];
            if line.len() + piece.len() > MAX_LINE {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(piece);
            }
        }
        input.consume(taken);
        if !end {
            continue;
        }
        let message = if std::mem::take(&mut too_long) {
            Some(Err(ParseError::Invalid {
                id: None,
                why: format!("a message is at most {MAX_LINE} bytes"),
            }))
        } else if line.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            Some(jsonrpc::parse(&line))
        };
        line.clear();
        if let Some(message) = message
            && tx.send(message).await.is_err()
        {
            return;
        }
    }
}

/// Writes messages (`jsonrpc::response`, …) to the client as they come,
/// each on its line (JSON escapes every line break inside strings); a
/// closed end stops it.
pub async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(mut line) = rx.recv().await {
        line.push(b'\n');
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            return;
        }
    }
}

/// A request's params, read with errors a client can act on.
pub struct Params(pub Value);

impl Params {
    pub fn string(&self, key: &str) -> Result<String, ResponseError> {
        self.0[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ResponseError::invalid_params(format!("{key} (a string) is missing")))
    }

    pub fn absolute_path(&self, key: &str) -> Result<PathBuf, ResponseError> {
        let path = PathBuf::from(self.string(key)?);
        if path.is_absolute() {
            Ok(path)
        } else {
            Err(ResponseError::invalid_params(format!(
                "{key} must be an absolute path"
            )))
        }
    }
}

/// ACP's MCP servers as the CLI's `--mcp-config` entries. ACP lists env
/// and headers as `[{name, value}]`; the CLI takes maps.
pub fn mcp_servers(servers: &Value) -> Result<Map<String, Value>, ResponseError> {
    let mut out = Map::new();
    let Some(servers) = servers.as_array() else {
        return if servers.is_null() {
            Ok(out)
        } else {
            Err(ResponseError::invalid_params("mcpServers is a list"))
        };
    };
    let pairs = |list: &Value, what: &str| -> Result<Map<String, Value>, ResponseError> {
        let mut map = Map::new();
        for pair in list.as_array().into_iter().flatten() {
            let (Some(name), Some(value)) = (pair["name"].as_str(), pair["value"].as_str()) else {
                return Err(ResponseError::invalid_params(format!(
                    "an MCP server's {what} is a list of {{name, value}} strings"
                )));
            };
            map.insert(name.to_owned(), json!(value));
        }
        Ok(map)
    };
    for server in servers {
        let Some(name) = server["name"].as_str() else {
            return Err(ResponseError::invalid_params("an MCP server needs a name"));
        };
        let config = match server["type"].as_str() {
            Some(kind @ ("http" | "sse")) => {
                let Some(url) = server["url"].as_str() else {
                    return Err(ResponseError::invalid_params(format!(
                        "MCP server {name:?} needs a url"
                    )));
                };
                json!({"type": kind, "url": url, "headers": pairs(&server["headers"], "headers")?})
            }
            None | Some("stdio") => {
                let Some(command) = server["command"].as_str() else {
                    return Err(ResponseError::invalid_params(format!(
                        "MCP server {name:?} needs a command"
                    )));
                };
                let args: Vec<&str> = server["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                json!({"type": "stdio", "command": command, "args": args, "env": pairs(&server["env"], "env")?})
            }
            Some(other) => {
                return Err(ResponseError::invalid_params(format!(
                    "MCP server {name:?}: unknown transport {other:?} (stdio, http or sse)"
                )));
            }
        };
        out.insert(name.to_owned(), config);
    }
    Ok(out)
}

/// Milliseconds since the epoch as ISO 8601 in UTC
/// (`2026-12-01T20:10:58.123Z`).
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each kind of line becomes, as its answer's code for the
    /// hostile ones (the codes the ACP front door always answered).
    #[tokio::test]
    async fn lines_parse_into_what_they_are() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
                "request",
            ),
            (
                r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#,
                "notification",
            ),
            (r#"{"jsonrpc":"2.0","id":3,"result":{}}"#, "response"),
            (r#"{"jsonrpc":"2.0","id":3,"error":{"code":1}}"#, "response"),
            ("not json", "invalid -32700"),
            ("[1,2]", "invalid -32600"),
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#,
                "invalid -32600",
            ),
            (
                &format!(
                    r#"{{"jsonrpc":"2.0","id":"{}","method":"x"}}"#,
                    "i".repeat(300)
                ),
                "invalid -32600",
            ),
            (r#"{"jsonrpc":"2.0","id":1,"method":7}"#, "invalid -32600"),
            (r#"{"jsonrpc":"2.0","id":1}"#, "invalid -32600"),
            (r#"{}"#, "invalid -32600"),
            ("\"\\ud800\"", "invalid -32700"),
        ];
        for (line, want) in cases {
            let (tx, mut rx) = mpsc::channel(1);
            read_lines(format!("{line}\n").as_bytes(), tx).await;
            let got = match rx.recv().await.unwrap() {
                Ok(Message::Request { .. }) => "request".to_owned(),
                Ok(Message::Notification { .. }) => "notification".to_owned(),
                Ok(Message::Response { .. }) => "response".to_owned(),
                Err(e) => {
                    let answer: Value = serde_json::from_slice(&e.to_response()).unwrap();
                    format!("invalid {}", answer["error"]["code"])
                }
            };
            assert_eq!(&got, want, "{line}");
        }
    }

    #[tokio::test]
    async fn an_overlong_line_is_refused_and_the_next_one_read() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\n\n  \n{\"jsonrpc\":\"2.0\",\"method\":\"m\"}\n");
        let (tx, mut rx) = mpsc::channel(8);
        read_lines(&input[..], tx).await;
        match rx.recv().await.unwrap() {
            Err(ParseError::Invalid { id: None, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(rx.recv().await.unwrap(), Ok(Message::Notification { method, .. }) if method == "m")
        );
        assert!(rx.recv().await.is_none());
    }

    #[test]
    fn mcp_servers_become_the_clis_entries() {
        let acp = json!([
            {"name": "files", "command": "/bin/mcp", "args": ["-v"], "env": [{"name": "K", "value": "v"}]},
            {"type": "http", "name": "web", "url": "http://127.0.0.1:1/", "headers": [{"name": "A", "value": "b"}]},
        ]);
        let cli = mcp_servers(&acp).unwrap();
        assert_eq!(
            Value::Object(cli),
            json!({
                "files": {"type": "stdio", "command": "/bin/mcp", "args": ["-v"], "env": {"K": "v"}},
                "web": {"type": "http", "url": "http://127.0.0.1:1/", "headers": {"A": "b"}},
            })
        );
        assert!(mcp_servers(&json!([{"name": "x", "type": "ws"}])).is_err());
        assert!(mcp_servers(&json!([{"command": "x"}])).is_err());
        assert!(mcp_servers(&json!({})).is_err());
        assert!(mcp_servers(&Value::Null).unwrap().is_empty());
    }

    #[test]
    fn times_are_iso8601_in_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_796_155_858_123), "2026-12-01T20:10:58.123Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
