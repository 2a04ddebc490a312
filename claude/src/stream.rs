//! Decoding the CLI's stdout: newline-framed JSON messages.
//!
//! Framing is by `\n` only. A line longer than the cap is dropped whole
//! (reported once) without buffering it. Lines that do not start with `{`
//! are noise some builds print (`[SandboxDebug] …`) and are skipped, as the
//! SDKs do. A `{` line that is not JSON (a torn write) is an error for that
//! line only; decoding goes on with the next. Message types this crate does
//! not know pass through as [`CliMessage::Other`]: new ones appear in minor
//! CLI releases.

use serde::Deserialize;
use serde_json::Value;

/// A message's JSON text as it came, validated once while its type was read.
/// The frequent messages (stream events, assistant and user messages) are
/// kept like this and parsed only by whoever needs their insides: decoding
/// every line into a `Value` tree cost more than everything else together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raw(Box<str>);

impl Raw {
    pub fn get(&self) -> &str {
        &self.0
    }
}

/// Longest stdout line kept. The CLI's largest lines are whole tool results
/// and initialize answers, well under this.
pub const MAX_LINE: usize = 32 << 20;

/// One message from the CLI. Every variant keeps the whole JSON (`raw`) so
/// transcripts can record it as it came.
#[derive(Clone, Debug)]
pub enum CliMessage {
    /// `system` frames: `init`, `status`, `api_retry`,
    /// `session_state_changed`, …
    System { subtype: String, raw: Raw },
    /// A raw Messages-API stream event (partial messages).
    StreamEvent { raw: Raw },
    /// A complete assistant message.
    Assistant { raw: Raw },
    /// Tool results and replays.
    User { raw: Raw },
    /// The end of a turn. An API failure arrives as `subtype: "success"`
    /// with `is_error: true`, its text in `result`.
    Result(TurnResult),
    /// The CLI asks the host something (a permission, an MCP message).
    ControlRequest {
        request_id: String,
        request: ControlRequest,
    },
    /// The CLI answers one of our control requests.
    ControlResponse {
        request_id: String,
        outcome: Result<Value, String>,
    },
    /// The CLI withdraws one of its own requests (e.g. a permission question
    /// after an interrupt): drop it and do not answer.
    ControlCancel { request_id: String },
    /// Anything else, passed through.
    Other { kind: String, raw: Raw },
}

#[derive(Clone, Debug, PartialEq)]
pub struct TurnResult {
    pub subtype: String,
    pub is_error: bool,
    /// The final text, or the error text of an API failure.
    pub text: Option<String>,
    pub api_error_status: Option<u64>,
    pub session_id: Option<String>,
    pub raw: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ControlRequest {
    /// A permission question (`--permission-prompt-tool stdio`).
    CanUseTool {
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
        raw: Value,
    },
    /// A JSON-RPC message for an in-process MCP server.
    McpMessage {
        server_name: String,
        message: Value,
    },
    Other {
        subtype: String,
        raw: Value,
    },
}

impl CliMessage {
    /// The text of a partial `text_delta`, if this is one.
    pub fn text_delta(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Event {
            event: Inner,
        }
        #[derive(Deserialize)]
        struct Inner {
            delta: Option<Delta>,
        }
        #[derive(Deserialize)]
        struct Delta {
            #[serde(rename = "type")]
            kind: String,
            text: Option<String>,
        }
        let CliMessage::StreamEvent { raw } = self else {
            return None;
        };
        let delta = serde_json::from_str::<Event>(raw.get()).ok()?.event.delta?;
        (delta.kind == "text_delta").then_some(delta.text).flatten()
    }

    /// The message as a JSON value (parsed again for the kept-raw kinds).
    pub fn to_value(&self) -> Value {
        let parse = |raw: &Raw| serde_json::from_str(raw.get()).expect("validated when decoded");
        match self {
            CliMessage::System { raw, .. }
            | CliMessage::StreamEvent { raw }
            | CliMessage::Assistant { raw }
            | CliMessage::User { raw }
            | CliMessage::Other { raw, .. } => parse(raw),
            CliMessage::Result(r) => r.raw.clone(),
            CliMessage::ControlRequest {
                request_id,
                request,
            } => {
                let request = match request {
                    ControlRequest::CanUseTool { raw, .. } | ControlRequest::Other { raw, .. } => {
                        raw.clone()
                    }
                    ControlRequest::McpMessage {
                        server_name,
                        message,
                    } => {
                        serde_json::json!({"subtype": "mcp_message", "server_name": server_name, "message": message})
                    }
                };
                serde_json::json!({"type": "control_request", "request_id": request_id, "request": request})
            }
            CliMessage::ControlResponse {
                request_id,
                outcome,
            } => match outcome {
                Ok(response) => {
                    serde_json::json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}})
                }
                Err(error) => {
                    serde_json::json!({"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": error}})
                }
            },
            CliMessage::ControlCancel { request_id } => {
                serde_json::json!({"type": "control_cancel_request", "request_id": request_id})
            }
        }
    }

    /// Reads the type of `line` (validating all of it) and keeps the text.
    fn decode(line: &str) -> Result<CliMessage, serde_json::Error> {
        #[derive(Deserialize)]
        struct Head<'a> {
            #[serde(rename = "type", borrow)]
            kind: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow)]
            subtype: Option<std::borrow::Cow<'a, str>>,
        }
        let head: Head<'_> = serde_json::from_str(line)?;
        let kind = head.kind.unwrap_or_default();
        let raw = Raw(line.into());
        Ok(match kind.as_ref() {
            "system" => CliMessage::System {
                subtype: head.subtype.unwrap_or_default().into_owned(),
                raw,
            },
            "stream_event" => CliMessage::StreamEvent { raw },
            "assistant" => CliMessage::Assistant { raw },
            "user" => CliMessage::User { raw },
            "result" | "control_request" | "control_response" | "control_cancel_request" => {
                CliMessage::from_json(serde_json::from_str(raw.get())?)
            }
            _ => CliMessage::Other {
                kind: kind.into_owned(),
                raw,
            },
        })
    }

    /// The rare kinds, whose fields the host reads.
    fn from_json(raw: Value) -> CliMessage {
        let kind = raw
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let string = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
        match kind.as_str() {
            "result" => CliMessage::Result(TurnResult {
                subtype: string(&raw, "subtype").unwrap_or_default(),
                is_error: raw
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                text: string(&raw, "result"),
                api_error_status: raw.get("api_error_status").and_then(Value::as_u64),
                session_id: string(&raw, "session_id"),
                raw,
            }),
            "control_request" => {
                let request_id = string(&raw, "request_id").unwrap_or_default();
                let req = raw.get("request").cloned().unwrap_or_default();
                let request = match req
                    .get("subtype")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                {
                    "can_use_tool" => ControlRequest::CanUseTool {
                        tool_name: string(&req, "tool_name").unwrap_or_default(),
                        input: req.get("input").cloned().unwrap_or_default(),
                        tool_use_id: string(&req, "tool_use_id"),
                        raw: req,
                    },
                    "mcp_message" => ControlRequest::McpMessage {
                        server_name: string(&req, "server_name").unwrap_or_default(),
                        message: req.get("message").cloned().unwrap_or_default(),
                    },
                    subtype => ControlRequest::Other {
                        subtype: subtype.to_owned(),
                        raw: req,
                    },
                };
                CliMessage::ControlRequest {
                    request_id,
                    request,
                }
            }
            "control_response" => {
                let resp = raw.get("response").cloned().unwrap_or_default();
                let request_id = string(&resp, "request_id").unwrap_or_default();
                let outcome = if resp.get("subtype").and_then(Value::as_str) == Some("error") {
                    Err(string(&resp, "error").unwrap_or_default())
                } else {
                    Ok(resp.get("response").cloned().unwrap_or_default())
                };
                CliMessage::ControlResponse {
                    request_id,
                    outcome,
                }
            }
            "control_cancel_request" => CliMessage::ControlCancel {
                request_id: string(&raw, "request_id").unwrap_or_default(),
            },
            other => {
                unreachable!("decode sends only results and control messages here, not {other:?}")
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("a line of over {limit} bytes was dropped")]
    LineTooLong { limit: usize },
    #[error("a line is not JSON ({0})")]
    BadJson(String),
}

/// Splits stdout bytes into messages, as they arrive in any chunking.
#[derive(Default)]
pub struct Decoder {
    line: Vec<u8>,
    /// Inside an over-long line: bytes are dropped until its end.
    skipping: bool,
    max_line: Option<usize>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// A decoder with a smaller cap (tests).
    pub fn with_max_line(max_line: usize) -> Decoder {
        Decoder {
            max_line: Some(max_line),
            ..Decoder::default()
        }
    }

    /// Feeds bytes; returns what completed lines decoded to.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<Result<CliMessage, DecodeError>> {
        let max = self.max_line.unwrap_or(MAX_LINE);
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let (chunk, rest, ends_line) = match bytes.iter().position(|&b| b == b'\n') {
                Some(nl) => (&bytes[..nl], &bytes[nl + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            // The common case: a whole line inside this read needs no copy.
            if ends_line && self.line.is_empty() && !self.skipping && chunk.len() <= max {
                out.extend(decode_line(chunk));
                continue;
            }
            if !self.skipping {
                if self.line.len() + chunk.len() > max {
                    self.line.clear();
                    self.skipping = true;
                    out.push(Err(DecodeError::LineTooLong { limit: max }));
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            if ends_line {
                if !self.skipping {
                    out.extend(decode_line(&self.line));
                }
                self.line.clear();
                self.skipping = false;
            }
        }
        out
    }
}

impl Decoder {
    /// At end of output: a line without its `\n` is a torn write.
    pub fn finish(&mut self) -> Option<Result<CliMessage, DecodeError>> {
        let torn = !self.line.is_empty() && !self.skipping;
        self.line.clear();
        self.skipping = false;
        torn.then(|| {
            Err(DecodeError::BadJson(
                "the output ended inside a line".into(),
            ))
        })
    }
}

fn decode_line(line: &[u8]) -> Option<Result<CliMessage, DecodeError>> {
    let trimmed = line.trim_ascii();
    if !trimmed.starts_with(b"{") {
        return None; // noise such as "[SandboxDebug] …"
    }
    let text = match std::str::from_utf8(trimmed) {
        Ok(text) => text,
        Err(e) => return Some(Err(DecodeError::BadJson(format!("not UTF-8: {e}")))),
    };
    Some(CliMessage::decode(text).map_err(|e| DecodeError::BadJson(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    fn kinds(messages: &[Result<CliMessage, DecodeError>]) -> String {
        messages
            .iter()
            .map(|m| match m {
                Ok(CliMessage::System { subtype, .. }) => format!("system/{subtype}"),
                Ok(CliMessage::StreamEvent { .. }) => "stream_event".into(),
                Ok(CliMessage::Assistant { .. }) => "assistant".into(),
                Ok(CliMessage::User { .. }) => "user".into(),
                Ok(CliMessage::Result(r)) => format!("result/{} error={}", r.subtype, r.is_error),
                Ok(CliMessage::ControlRequest { request, .. }) => match request {
                    ControlRequest::CanUseTool { tool_name, .. } => {
                        format!("can_use_tool {tool_name}")
                    }
                    ControlRequest::McpMessage { server_name, .. } => {
                        format!("mcp_message {server_name}")
                    }
                    ControlRequest::Other { subtype, .. } => format!("control_request/{subtype}"),
                },
                Ok(CliMessage::ControlResponse { outcome, .. }) => {
                    format!("control_response ok={}", outcome.is_ok())
                }
                Ok(CliMessage::ControlCancel { .. }) => "control_cancel".into(),
                Ok(CliMessage::Other { kind, .. }) => format!("other {kind}"),
                Err(e) => format!("error: {e}"),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A recorded session (a Write asked for and allowed) decodes the same
    /// whatever the chunking, and its streamed text can be rebuilt.
    #[test]
    fn recorded_session_in_any_chunking() {
        let as_values = |ms: &[Result<CliMessage, DecodeError>]| -> Vec<Value> {
            ms.iter()
                .map(|m| m.as_ref().map_or(Value::Null, CliMessage::to_value))
                .collect()
        };
        let bytes = include_bytes!("../tests/fixtures/f-stdio.stdout.jsonl");
        let whole = Decoder::new().push(bytes);
        for chunk in [1, 7, 4096] {
            let mut d = Decoder::new();
            let pieces: Vec<_> = bytes.chunks(chunk).flat_map(|c| d.push(c)).collect();
            assert_eq!(as_values(&pieces), as_values(&whole), "chunks of {chunk}");
        }
        let text: String = whole
            .iter()
            .filter_map(|m| m.as_ref().ok()?.text_delta())
            .collect();
        assert!(text.starts_with("tool done"), "{text}");
        let summary = kinds(&whole);
        assert!(summary.contains("can_use_tool Write"));
        assert!(summary.contains("result/success error=false"), "{summary}");
        // The recording ends with the answer to a control request the CLI
        // does not know.
        assert!(summary.ends_with("control_response ok=false"), "{summary}");
        assert!(!summary.contains("error:"));
    }

    /// An API failure: a result with subtype success and is_error.
    #[test]
    fn api_error_is_a_result_with_is_error() {
        let messages = Decoder::new().push(include_bytes!("../tests/fixtures/g-429.stdout.jsonl"));
        let Some(Ok(CliMessage::Result(r))) = messages.last() else {
            panic!("no result")
        };
        assert!(r.is_error);
        assert_eq!(r.api_error_status, Some(429));
        assert!(r.text.as_deref().unwrap_or_default().contains("429"));
    }

    #[test]
    fn noise_torn_lines_unknown_types_and_long_lines() {
        let mut d = Decoder::with_max_line(64);
        let input = concat!(
            "[SandboxDebug] starting\n",
            "{\"type\":\"system\",\"subtype\":\"init\"}\n",
            "{\"type\":\"assist\n",
            "{\"type\":\"tool_progress\",\"x\":1}\n",
            "{\"type\":\"user\",\"pad\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}\n",
            "{\"type\":\"control_cancel_request\",\"request_id\":\"r1\"}\n",
        );
        expect![[r#"
            system/init
            error: a line is not JSON (EOF while parsing a string at line 1 column 15)
            other tool_progress
            error: a line of over 64 bytes was dropped
            control_cancel"#]]
        .assert_eq(&kinds(&d.push(input.as_bytes())));
    }
}
