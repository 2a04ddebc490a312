//! Decoding the CLI's stdout: newline-framed JSON messages.
//!
//! Framing is by `\n` only. A line longer than the cap is dropped whole
//! (reported once) without buffering it. Lines that do not start with `{`
//! are noise some builds print (`[SandboxDebug] …`) and are skipped, as the
//! SDKs do. A `{` line that is not JSON (a torn write) is an error for that
//! line only; decoding goes on with the next. Message types this crate does
//! not know pass through as [`CliMessage::Other`]: new ones appear in minor
//! CLI releases.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde_json::{Map, Value};

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

/// Partial output of the model, as it streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    Text(String),
    Thinking(String),
}

impl CliMessage {
    /// The text of a partial `text_delta`, if this is one.
    pub fn text_delta(&self) -> Option<String> {
        match self.delta()? {
            Delta::Text(text) => Some(text),
            Delta::Thinking(_) => None,
        }
    }

    /// The text of a partial `text_delta` or `thinking_delta`, if this is
    /// one.
    pub fn delta(&self) -> Option<Delta> {
        #[derive(Deserialize)]
        struct Event {
            event: Inner,
        }
        #[derive(Deserialize)]
        struct Inner {
            delta: Option<Wire>,
        }
        #[derive(Deserialize)]
        struct Wire {
            #[serde(rename = "type")]
            kind: String,
            text: Option<String>,
            thinking: Option<String>,
        }
        let CliMessage::StreamEvent { raw } = self else {
            return None;
        };
        let delta = serde_json::from_str::<Event>(raw.get()).ok()?.event.delta?;
        match delta.kind.as_str() {
            "text_delta" => delta.text.map(Delta::Text),
            "thinking_delta" => delta.thinking.map(Delta::Thinking),
            _ => None,
        }
    }

    /// The message as a JSON value (parsed again for the kept-raw kinds).
    pub fn to_value(&self) -> Value {
        // Decoding validates the JSON syntax only where it needs to, so a
        // lone surrogate escape or very deep nesting may still fail here: a
        // hostile line must not panic the reader, it becomes a marker.
        let parse = |raw: &Raw| {
            serde_json::from_str(raw.get()).unwrap_or_else(
                |e| serde_json::json!({"type": "unreadable", "error": e.to_string()}),
            )
        };
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
    ///
    /// Two routes that give the same answer for every line: the prefix only
    /// picks the cheaper one. The kinds whose fields the host reads (results
    /// and control messages, a third of the bytes of a session, the largest
    /// being the `initialize` answer) must become `Value`s anyway, so when
    /// the CLI's usual `{"type":"…"` prefix names one of them, the line is
    /// parsed once, straight into a map. Every other line is only validated
    /// while its `type` and `subtype` are read, and kept as text.
    fn decode(line: &str) -> Result<CliMessage, serde_json::Error> {
        if prefix_kind(line).is_some_and(is_read_kind) {
            // Whatever this route cannot answer exactly as the plain one
            // would, it leaves to it: a broken line (whose error message
            // the plain route words differently), and a kind other than the
            // prefix's, which no prefix read allows (tested) but the map,
            // not the prefix, is the authority.
            if let Ok(TopLevel(map)) = serde_json::from_str(line)
                && map
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(is_read_kind)
            {
                return Ok(CliMessage::from_map(map));
            }
        }
        let head: Head<'_> = serde_json::from_str(line)?;
        let kind = head.kind.unwrap_or_default();
        if is_read_kind(&kind) {
            // A line whose `type` is not first, or is escaped, parsed again.
            return match serde_json::from_str(line)? {
                Value::Object(map) => Ok(CliMessage::from_map(map)),
                // Only serde_json's private raw-value key, first, makes a
                // `{` line parse to something else, and then it fails on the
                // `type` key after it; should that ever change: an error,
                // not a panic.
                _ => Err(serde_json::Error::custom("not a JSON object")),
            };
        }
        let raw = Raw(line.into());
        Ok(match kind.as_ref() {
            "system" => CliMessage::System {
                subtype: head.subtype.unwrap_or_default().into_owned(),
                raw,
            },
            "stream_event" => CliMessage::StreamEvent { raw },
            "assistant" => CliMessage::Assistant { raw },
            "user" => CliMessage::User { raw },
            _ => CliMessage::Other {
                kind: kind.into_owned(),
                raw,
            },
        })
    }

    /// The kinds whose fields the host reads, from their whole object.
    /// Fields are moved out, not cloned: the `initialize` answer alone is
    /// tens of kilobytes of JSON.
    fn from_map(mut raw: Map<String, Value>) -> CliMessage {
        fn string(v: Option<&Value>) -> Option<String> {
            v.and_then(Value::as_str).map(str::to_owned)
        }
        fn take(map: Option<&mut Map<String, Value>>, key: &str) -> Value {
            map.and_then(|m| m.remove(key)).unwrap_or_default()
        }
        let kind = string(raw.get("type")).unwrap_or_default();
        match kind.as_str() {
            "result" => CliMessage::Result(TurnResult {
                subtype: string(raw.get("subtype")).unwrap_or_default(),
                is_error: raw
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                text: string(raw.get("result")),
                api_error_status: raw.get("api_error_status").and_then(Value::as_u64),
                session_id: string(raw.get("session_id")),
                raw: Value::Object(raw),
            }),
            "control_request" => {
                let request_id = string(raw.get("request_id")).unwrap_or_default();
                let mut req = raw.remove("request").unwrap_or_default();
                let subtype = string(req.get("subtype")).unwrap_or_default();
                let request = match subtype.as_str() {
                    "can_use_tool" => ControlRequest::CanUseTool {
                        tool_name: string(req.get("tool_name")).unwrap_or_default(),
                        // Cloned: `raw` keeps the whole request, input too.
                        input: req.get("input").cloned().unwrap_or_default(),
                        tool_use_id: string(req.get("tool_use_id")),
                        raw: req,
                    },
                    "mcp_message" => ControlRequest::McpMessage {
                        server_name: string(req.get("server_name")).unwrap_or_default(),
                        message: take(req.as_object_mut(), "message"),
                    },
                    _ => ControlRequest::Other { subtype, raw: req },
                };
                CliMessage::ControlRequest {
                    request_id,
                    request,
                }
            }
            "control_response" => {
                let mut resp = raw.remove("response").unwrap_or_default();
                let request_id = string(resp.get("request_id")).unwrap_or_default();
                let outcome = if resp.get("subtype").and_then(Value::as_str) == Some("error") {
                    Err(string(resp.get("error")).unwrap_or_default())
                } else {
                    Ok(take(resp.as_object_mut(), "response"))
                };
                CliMessage::ControlResponse {
                    request_id,
                    outcome,
                }
            }
            "control_cancel_request" => CliMessage::ControlCancel {
                request_id: string(raw.get("request_id")).unwrap_or_default(),
            },
            other => {
                unreachable!("decode sends only results and control messages here, not {other:?}")
            }
        }
    }
}

/// Results and control messages: the kinds parsed whole (see `decode`).
fn is_read_kind(kind: &str) -> bool {
    matches!(
        kind,
        "result" | "control_request" | "control_response" | "control_cancel_request"
    )
}

/// The `type` of a line that starts the way the CLI writes every message,
/// `{"type":"<kind>",` (or `}`), with no escape in the kind; else `None`.
/// A hint to pick how to parse, never the classification itself.
fn prefix_kind(line: &str) -> Option<&str> {
    let rest = line.strip_prefix(r#"{"type":""#)?;
    let end = rest.find(['"', '\\'])?;
    let after = rest.as_bytes()[end..].get(..2)?;
    matches!(after, [b'"', b',' | b'}']).then(|| &rest[..end])
}

/// What is read of every line: its `type` and `subtype`. Deriving it makes
/// serde_json validate the whole line and reject a second `type` or
/// `subtype` key, or one that is not a string: a message whose kind is
/// ambiguous is not trusted.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    subtype: Option<Cow<'a, str>>,
}

/// A whole line as a map, with exactly the checks of [`Head`] (a repeated
/// `type` or `subtype` key, or one that is neither a string nor null, is an
/// error with the same message) so that both routes of `decode` accept the
/// same lines.
struct TopLevel(Map<String, Value>);

impl<'de> Deserialize<'de> for TopLevel {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<TopLevel, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = TopLevel;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<TopLevel, A::Error> {
                let mut map = Map::new();
                let (mut kind, mut subtype) = (false, false);
                while let Some(key) = fields.next_key::<String>()? {
                    let checked = match key.as_str() {
                        "type" => Some((&mut kind, "type")),
                        "subtype" => Some((&mut subtype, "subtype")),
                        _ => None,
                    };
                    let value = match checked {
                        Some((seen, name)) => {
                            if std::mem::replace(seen, true) {
                                return Err(A::Error::duplicate_field(name));
                            }
                            let text: Option<String> = fields.next_value()?;
                            text.map_or(Value::Null, Value::String)
                        }
                        None => fields.next_value()?,
                    };
                    // A repeated other key: the last one wins, as in `Value`.
                    map.insert(key, value);
                }
                Ok(TopLevel(map))
            }
        }
        deserializer.deserialize_map(Fields)
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
            let (chunk, rest, ends_line) = match find_newline(bytes) {
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

/// The index of the first `\n`, a word at a time: scanning byte by byte
/// took a tenth of the decoding time. Per 8-byte word, `(w - 0x01..) & !w &
/// 0x80..` flags the bytes that were zero after `^ b'\n'`; the lowest flag
/// is always a true one (borrows only run upwards), and bytes are taken
/// little-endian, so the lowest flag is the first newline.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const NEWLINES: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let w = u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ NEWLINES;
        let found = w.wrapping_sub(ONES) & !w & HIGHS;
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let tail = words.remainder();
    tail.iter().position(|&b| b == b'\n').map(|i| at + i)
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
mod hostile_tests {
    use super::*;

    /// Security case 43: lines the decoder accepts but serde_json cannot
    /// build a value of (a lone surrogate, nesting past its limit) never
    /// panic `to_value`.
    #[test]
    fn hostile_43_lines_that_do_not_parse_whole_do_not_panic() {
        let deep = format!(
            "{{\"type\":\"assistant\",\"x\":{}{}}}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        let lines = [
            "{\"type\":\"assistant\",\"message\":\"\\ud800\"}\n".to_owned(),
            "{\"type\":\"stream_event\",\"event\":\"\\udfff\"}\n".to_owned(),
            deep,
        ];
        let mut accepted = 0;
        for line in lines {
            for message in Decoder::new().push(line.as_bytes()).into_iter().flatten() {
                accepted += 1;
                let _ = message.to_value();
                let _ = message.text_delta();
            }
        }
        assert!(
            accepted > 0,
            "the decoder rejects them all: nothing to check"
        );
    }
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

    /// The noise case again in every chunking: the word-at-a-time newline
    /// scan and the over-long line that straddles reads.
    #[test]
    fn noise_case_in_any_chunking() {
        let input = concat!(
            "[SandboxDebug] starting\n",
            "{\"type\":\"system\",\"subtype\":\"init\"}\n",
            "{\"type\":\"assist\n",
            "{\"type\":\"user\",\"pad\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}\n",
            "{\"type\":\"result\",\"subtype\":\"success\"}\n",
            "{\"type\":\"control_cancel_request\",\"request_id\":\"r1\"}\n",
            "{\"type\":\"system\",\"subtype\":\"torn",
        )
        .as_bytes();
        let whole = {
            let mut d = Decoder::with_max_line(64);
            let mut out = d.push(input);
            out.extend(d.finish());
            kinds(&out)
        };
        expect![[r#"
            system/init
            error: a line is not JSON (EOF while parsing a string at line 1 column 15)
            error: a line of over 64 bytes was dropped
            result/success error=false
            control_cancel
            error: a line is not JSON (the output ended inside a line)"#]]
        .assert_eq(&whole);
        for chunk in 1..=input.len() {
            let mut d = Decoder::with_max_line(64);
            let mut out: Vec<_> = input.chunks(chunk).flat_map(|c| d.push(c)).collect();
            out.extend(d.finish());
            assert_eq!(kinds(&out), whole, "chunks of {chunk}");
        }
    }

    #[test]
    fn find_newline_matches_a_byte_scan() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut random = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Bytes next to '\n' (0x0a) in value or in bit pattern, where a
            // word trick would go wrong if it did.
            [b'\n', 0x0b, 0x09, 0x8a, 0x00, 0xff, b'a', b'{'][(x >> 61) as usize]
        };
        for len in 0..40 {
            // Dense: newlines anywhere, several per word.
            for _ in 0..50 {
                let bytes: Vec<u8> = (0..len).map(|_| random()).collect();
                assert_eq!(find_newline(&bytes), bytes.iter().position(|&b| b == b'\n'));
            }
            // One newline at each position, or none, in each alignment.
            for at in 0..=len {
                let mut bytes: Vec<u8> = (0..len).map(|_| random()).collect();
                bytes
                    .iter_mut()
                    .filter(|b| **b == b'\n')
                    .for_each(|b| *b = 0x0b);
                if at < len {
                    bytes[at] = b'\n';
                }
                for start in 0..8.min(bytes.len() + 1) {
                    let b = &bytes[start..];
                    assert_eq!(find_newline(b), b.iter().position(|&c| c == b'\n'), "{b:?}");
                }
            }
        }
    }

    #[test]
    fn prefix_is_read_only_in_the_form_the_cli_writes() {
        let cases = [
            (r#"{"type":"result","subtype":"success"}"#, Some("result")),
            (r#"{"type":"control_response"}"#, Some("control_response")),
            (r#"{"type":"","x":1}"#, Some("")),
            (r#"{"type":"res\u0075lt","x":1}"#, None),
            (r#"{"type":"result\"x","y":1}"#, None),
            (r#"{"type":"result" ,"x":1}"#, None),
            (r#"{"type":"result"x"#, None),
            (r#"{"type":"result""#, None),
            (r#"{"type":"result"#, None),
            (r#"{ "type":"result","x":1}"#, None),
            (r#"{"type": "result","x":1}"#, None),
            (r#"{"typ\u0065":"result","x":1}"#, None),
            (r#"{"x":"{\"type\":\"result\",","type":"user"}"#, None),
        ];
        for (line, kind) in cases {
            assert_eq!(prefix_kind(line), kind, "{line}");
        }
    }

    /// Lines built to tell the two routes of `decode` apart: the kind must
    /// come from the whole object whatever the prefix says.
    #[test]
    fn both_routes_classify_from_the_whole_object() {
        let lines = [
            // `type` not first, or spaced, or escaped: the plain route.
            r#"{"subtype":"success","type":"result","is_error":true}"#,
            r#"{ "type" : "result" , "subtype" : "error_max_turns" }"#,
            r#"{"type":"res\u0075lt","subtype":"success"}"#,
            r#"{"typ\u0065":"control_cancel_request","request_id":"r9"}"#,
            // A `"type"` inside another field, before the real one.
            r#"{"pad":"{\"type\":\"result\",","type":"user"}"#,
            r#"{"x":{"type":"result"},"type":"stream_event"}"#,
            r#"{"type":"user","message":{"type":"result"}}"#,
            // The prefix names a read kind: the map route.
            r#"{"type":"result","subtype":"success","result":"hi","session_id":"s"}"#,
            r#"{"type":"control_request","request_id":"q","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"a":1}}}"#,
            r#"{"type":"control_request","request_id":"q","request":{"subtype":"mcp_message","server_name":"s","message":{"id":1}}}"#,
            r#"{"type":"control_request","request_id":"q","request":[1]}"#,
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"q","response":{"ok":true}}}"#,
            r#"{"type":"control_response","response":{"subtype":"error","request_id":"q","error":"no"}}"#,
            r#"{"type":"control_response","response":"strange"}"#,
            r#"{"type":"control_response","request_id":7,"request_id":"q"}"#,
            // Ambiguous or mistyped kinds are errors on both routes.
            r#"{"type":"result","type":"user"}"#,
            r#"{"type":"user","type":"result"}"#,
            r#"{"type":"result","subtype":"a","subtype":"b"}"#,
            r#"{"type":"result","subtype":5}"#,
            r#"{"type":"user","subtype":[]}"#,
            r#"{"type":"result","x":[1,}"#,
            r#"{"type":"result"}x"#,
            r#"{"type":null}"#,
            r#"{"type":5}"#,
            // serde_json's private raw-value key, first or not.
            r#"{"$serde_json::private::RawValue":"{}","type":"result"}"#,
            r#"{"type":"result","$serde_json::private::RawValue":"{}"}"#,
        ];
        let decoded: Vec<_> = lines
            .iter()
            .map(|line| {
                let m = CliMessage::decode(line).map_err(|e| DecodeError::BadJson(e.to_string()));
                assert_eq!(
                    format!("{m:?}"),
                    format!("{:?}", reference::decode(line)),
                    "{line}"
                );
                m
            })
            .collect();
        expect![[r#"
            result/success error=true
            result/error_max_turns error=false
            result/success error=false
            control_cancel
            user
            stream_event
            user
            result/success error=false
            can_use_tool Bash
            mcp_message s
            control_request/
            control_response ok=true
            control_response ok=false
            control_response ok=true
            control_response ok=true
            error: a line is not JSON (duplicate field `type` at line 1 column 23)
            error: a line is not JSON (duplicate field `type` at line 1 column 21)
            error: a line is not JSON (duplicate field `subtype` at line 1 column 40)
            error: a line is not JSON (invalid type: integer `5`, expected a string at line 1 column 28)
            error: a line is not JSON (invalid type: sequence, expected a string at line 1 column 25)
            error: a line is not JSON (expected value at line 1 column 25)
            error: a line is not JSON (trailing characters at line 1 column 18)
            other 
            error: a line is not JSON (invalid type: integer `5`, expected a string at line 1 column 9)
            error: a line is not JSON (trailing comma at line 1 column 39)
            result/ error=false"#]]
        .assert_eq(&kinds(&decoded));
    }

    /// Every line of the recordings, and mutations of them (cut short,
    /// a byte changed, the kind moved, spaced, escaped or repeated), decode
    /// exactly as the plain serde code that came before the prefix route.
    #[test]
    fn same_as_the_plain_serde_decoder_on_recordings_and_mutations() {
        let recordings = [
            &include_bytes!("../tests/fixtures/f-stdio.stdout.jsonl")[..],
            include_bytes!("../tests/fixtures/g-429.stdout.jsonl"),
            include_bytes!("../tests/fixtures/d-transcript.jsonl"),
        ];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as usize % n.max(1)
        };
        let (mut checked, mut errors) = (0, 0);
        let mut check = |line: &str| {
            let new = CliMessage::decode(line).map_err(|e| DecodeError::BadJson(e.to_string()));
            let old = reference::decode(line);
            assert_eq!(format!("{new:?}"), format!("{old:?}"), "{line}");
            checked += 1;
            errors += new.is_err() as usize;
        };
        for recording in recordings {
            for line in std::str::from_utf8(recording).unwrap().lines() {
                check(line);
                // (The CLI writes the type first; transcripts do not.)
                if let Some(kind) = prefix_kind(line) {
                    let rest = &line[r#"{"type":""#.len() + kind.len() + 1..];
                    let body = &rest[..rest.len() - 1];
                    // The kind elsewhere than first, spaced, escaped, repeated,
                    // shadowed by a decoy, or mistyped.
                    check(&format!(
                        r#"{{"decoy":"{{\"type\":\"result\",\""{body},"type":"{kind}"}}"#
                    ));
                    check(&format!(r#"{{ "type" : "{kind}" {body}}}"#));
                    check(&format!(
                        r#"{{"type":"{}"{body}}}"#,
                        kind.replacen('e', r"\u0065", 1)
                    ));
                    check(&format!(r#"{{"type":"{kind}"{body},"type":"{kind}"}}"#));
                    check(&format!(r#"{{"type":"{kind}"{body},"subtype":{{}}}}"#));
                    check(&format!(r#"{{"type":"{kind}"{body},"request_id":1}}"#));
                    for other in ["result", "control_response", "user", "stream_event"] {
                        check(&format!(r#"{{"type":"{other}"{body}}}"#));
                    }
                }
                // Cut short, or one byte changed to a JSON-significant one.
                for _ in 0..20 {
                    let mut cut = next(line.len());
                    while !line.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    check(&line[..cut]);
                    let mut at = next(line.len());
                    while !line.is_char_boundary(at) {
                        at -= 1;
                    }
                    let width = line[at..].chars().next().map_or(0, char::len_utf8);
                    let byte = [
                        "\"", "{", "}", "[", "]", ",", ":", "\\", " ", "0", "x", "\u{1}",
                    ][next(12)];
                    check(&format!("{}{byte}{}", &line[..at], &line[at + width..]));
                }
            }
        }
        assert!(
            checked > 5000 && errors > 1000 && errors < checked - 1000,
            "{checked} {errors}"
        );
    }

    /// The decoder as it was before the prefix route (validation and the
    /// type read together, then a `Value` for the kinds the host reads),
    /// kept as the reference.
    mod reference {
        use super::super::{CliMessage, ControlRequest, DecodeError, Head, Raw, TurnResult};
        use serde_json::Value;

        pub fn decode(line: &str) -> Result<CliMessage, DecodeError> {
            decode_json(line).map_err(|e| DecodeError::BadJson(e.to_string()))
        }

        fn decode_json(line: &str) -> Result<CliMessage, serde_json::Error> {
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
                    from_json(serde_json::from_str(raw.get())?)
                }
                _ => CliMessage::Other {
                    kind: kind.into_owned(),
                    raw,
                },
            })
        }

        fn from_json(raw: Value) -> CliMessage {
            let kind = raw
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let string =
                |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
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
                other => unreachable!("{other:?}"),
            }
        }
    }
}
