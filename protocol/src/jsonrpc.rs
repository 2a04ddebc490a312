//! JSON-RPC 2.0 messages, parsed defensively: the one model of every
//! JSON-RPC peer of the project, LSP's frames and ACP's lines alike (the
//! framing is the caller's; `service/src/acp/wire.rs` only splits lines).
//!
//! Parsing never trusts the peer: the body must be UTF-8 and JSON (nesting is
//! bounded by serde_json's recursion limit), `jsonrpc` must be `"2.0"`, and an
//! id is an integer or a string of at most [`MAX_ID_LEN`] characters.
//!
//! Params stay raw JSON text ([`Params`]) until the handler that knows their
//! type parses them: building a `serde_json::Value` tree for every
//! `didChange` only to take it apart again cost more than applying the edit.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// A message's `params`, validated JSON kept as text.
pub type Params = Box<RawValue>;

/// `null` as [`Params`], for messages without params.
pub fn no_params() -> Params {
    RawValue::from_string("null".into()).expect("null is JSON")
}

/// Serializes `value` as [`Params`].
pub fn params(value: &Value) -> Params {
    serde_json::value::to_raw_value(value).expect("a serde_json::Value always serializes")
}

pub const MAX_ID_LEN: usize = 256;
/// Deepest JSON nesting accepted, as serde_json's own limit for values.
pub const MAX_NESTING: usize = 128;

/// Error codes from JSON-RPC and the LSP specification.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const SERVER_NOT_INITIALIZED: i64 = -32002;
    pub const REQUEST_FAILED: i64 = -32803;
    pub const REQUEST_CANCELLED: i64 = -32800;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl RequestId {
    pub fn to_json(&self) -> Value {
        match self {
            RequestId::Number(n) => json!(n),
            RequestId::String(s) => json!(s),
        }
    }

    fn from_json(v: &Value) -> Option<RequestId> {
        match v {
            Value::Number(n) => n.as_i64().map(RequestId::Number),
            Value::String(s) if s.chars().count() <= MAX_ID_LEN => {
                Some(RequestId::String(s.clone()))
            }
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Message {
    Request {
        id: RequestId,
        method: String,
        params: Params,
    },
    Notification {
        method: String,
        params: Params,
    },
    Response {
        id: Option<RequestId>,
        result: Result<Value, ResponseError>,
    },
}

/// A JSON-RPC error object: its code, its message and, when the peer sent
/// or we send one, its `data`.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl ResponseError {
    pub fn new(code: i64, message: impl Into<String>) -> ResponseError {
        ResponseError {
            code,
            message: message.into(),
            data: None,
        }
    }
    pub fn invalid_params(message: impl Into<String>) -> ResponseError {
        ResponseError::new(code::INVALID_PARAMS, message)
    }
    pub fn with_data(mut self, data: Value) -> ResponseError {
        self.data = Some(data);
        self
    }

    /// The error object as it goes on the wire.
    pub fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// Why a body could not be turned into a [`Message`].
#[derive(Clone, Debug, PartialEq)]
pub enum ParseError {
    /// Not UTF-8 or not JSON: answered with -32700 and a null id.
    Parse(String),
    /// JSON, but not a JSON-RPC message: answered with -32600 and the id when
    /// one could be read.
    Invalid { id: Option<RequestId>, why: String },
}

impl ParseError {
    pub fn to_response(&self) -> Vec<u8> {
        match self {
            ParseError::Parse(why) => {
                error_response(None, &ResponseError::new(code::PARSE_ERROR, why.clone()))
            }
            ParseError::Invalid { id, why } => error_response(
                id.as_ref(),
                &ResponseError::new(code::INVALID_REQUEST, why.clone()),
            ),
        }
    }
}

/// The fields of a JSON-RPC message we look at; others are ignored.
#[derive(Deserialize)]
struct Envelope {
    jsonrpc: Option<String>,
    /// `Some(Null)` for `"id": null`, `None` when absent.
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Params>,
    /// `Some(Null)` for `"result": null`, `None` when absent.
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    error: Option<Value>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

pub fn parse(body: &[u8]) -> Result<Message, ParseError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ParseError::Parse(format!("body is not UTF-8: {e}")))?;
    let env: Envelope = serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ParseError::Invalid {
            id: None,
            why: format!("not a JSON-RPC message: {e}"),
        },
        _ => ParseError::Parse(format!("body is not JSON: {e}")),
    })?;
    if env.method.is_some() && env.id == Some(Value::Null) {
        return Err(ParseError::Invalid {
            id: None,
            why: "a request id cannot be null".into(),
        });
    }
    let id = match env.id.as_ref().filter(|v| !v.is_null()) {
        None => None,
        Some(v) => Some(RequestId::from_json(v).ok_or_else(|| ParseError::Invalid {
            id: None,
            why: format!("id must be an integer or a string of at most {MAX_ID_LEN} characters"),
        })?),
    };
    if env.jsonrpc.as_deref() != Some("2.0") {
        return Err(ParseError::Invalid {
            id,
            why: "jsonrpc must be \"2.0\"".into(),
        });
    }
    let params = env.params.unwrap_or_else(no_params);
    if nesting_depth(params.get()) > MAX_NESTING {
        // serde_json checks depth when building values, not when it keeps
        // raw text; handlers would meet it later, so refuse it here.
        return Err(ParseError::Parse(format!(
            "params nest deeper than {MAX_NESTING} levels"
        )));
    }
    match (env.method, id) {
        (Some(Value::String(method)), Some(id)) => Ok(Message::Request { id, method, params }),
        (Some(Value::String(method)), None) => Ok(Message::Notification { method, params }),
        (Some(_), id) => Err(ParseError::Invalid {
            id,
            why: "method must be a string".into(),
        }),
        (None, id) => {
            let result = match (env.result, env.error) {
                (Some(result), None) => Ok(result),
                (None, Some(err)) => Err(ResponseError {
                    code: err
                        .get("code")
                        .and_then(Value::as_i64)
                        .unwrap_or(code::INTERNAL_ERROR),
                    message: err
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    data: err.get("data").cloned(),
                }),
                _ => {
                    return Err(ParseError::Invalid {
                        id,
                        why: "neither a request nor a response".into(),
                    });
                }
            };
            Ok(Message::Response { id, result })
        }
    }
}

/// The deepest array/object nesting in valid JSON text.
fn nesting_depth(json: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in json.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

pub fn request(id: &RequestId, method: &str, params: Value) -> Vec<u8> {
    to_vec(json!({"jsonrpc": "2.0", "id": id.to_json(), "method": method, "params": params}))
}

pub fn notification(method: &str, params: Value) -> Vec<u8> {
    to_vec(json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

pub fn response(id: &RequestId, result: &Result<Value, ResponseError>) -> Vec<u8> {
    match result {
        Ok(value) => to_vec(json!({"jsonrpc": "2.0", "id": id.to_json(), "result": value})),
        Err(err) => error_response(Some(id), err),
    }
}

pub fn error_response(id: Option<&RequestId>, err: &ResponseError) -> Vec<u8> {
    let id = id.map_or(Value::Null, RequestId::to_json);
    to_vec(json!({"jsonrpc": "2.0", "id": id, "error": err.to_json()}))
}

fn to_vec(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).expect("a serde_json::Value always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    #[track_caller]
    fn check(body: &str, expect: Expect) {
        let out = match parse(body.as_bytes()) {
            Ok(m) => format!("{m:?}"),
            Err(e) => String::from_utf8(e.to_response()).unwrap(),
        };
        expect.assert_eq(&out);
    }

    #[test]
    fn messages() {
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#,
            expect![[r#"Request { id: Number(1), method: "shutdown", params: RawValue(null) }"#]],
        );
        check(
            r#"{"jsonrpc":"2.0","method":"exit"}"#,
            expect![[r#"Notification { method: "exit", params: RawValue(null) }"#]],
        );
        check(
            r#"{"jsonrpc":"2.0","id":"a","result":null}"#,
            expect![[r#"Response { id: Some(String("a")), result: Ok(Null) }"#]],
        );
        check(
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"m","data":{"k":1}}}"#,
            expect![[
                r#"Response { id: Some(Number(2)), result: Err(ResponseError { code: -32000, message: "m", data: Some(Object {"k": Number(1)}) }) }"#
            ]],
        );
    }

    #[test]
    fn errors_carry_their_data() {
        let err = ResponseError::new(-32000, "auth").with_data(json!({"session": "s"}));
        assert_eq!(
            String::from_utf8(error_response(Some(&RequestId::Number(3)), &err)).unwrap(),
            r#"{"error":{"code":-32000,"data":{"session":"s"},"message":"auth"},"id":3,"jsonrpc":"2.0"}"#
        );
    }

    #[test]
    fn bad_messages() {
        check(
            "{",
            expect![[
                r#"{"error":{"code":-32700,"message":"body is not JSON: EOF while parsing an object at line 1 column 1"},"id":null,"jsonrpc":"2.0"}"#
            ]],
        );
        check(
            "[1]",
            expect![[
                r#"{"error":{"code":-32600,"message":"not a JSON-RPC message: invalid type: integer `1`, expected a string at line 1 column 2"},"id":null,"jsonrpc":"2.0"}"#
            ]],
        );
        check(
            r#"{"id":7,"method":"x"}"#,
            expect![[
                r#"{"error":{"code":-32600,"message":"jsonrpc must be \"2.0\""},"id":7,"jsonrpc":"2.0"}"#
            ]],
        );
        check(
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            expect![[
                r#"{"error":{"code":-32600,"message":"id must be an integer or a string of at most 256 characters"},"id":null,"jsonrpc":"2.0"}"#
            ]],
        );
        check(
            &format!("{}1{}", "[".repeat(200_000), "]".repeat(200_000)),
            expect![[
                r#"{"error":{"code":-32600,"message":"not a JSON-RPC message: invalid type: sequence, expected a string at line 1 column 1"},"id":null,"jsonrpc":"2.0"}"#
            ]],
        );
    }

    #[test]
    fn deep_params_hit_the_nesting_limit() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{}1{}}}"#,
            "[".repeat(200_000),
            "]".repeat(200_000)
        );
        let Err(ParseError::Parse(why)) = parse(deep.as_bytes()) else {
            panic!("deep params accepted")
        };
        assert!(why.contains("deeper than 128"), "{why}");
        let ok = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{{"a":"[[[[","b":{}{}}}}}"#,
            "[".repeat(127),
            "]".repeat(127)
        );
        assert!(parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn invalid_utf8_is_a_parse_error() {
        assert!(matches!(
            parse(b"{\"a\":\"\xff\"}"),
            Err(ParseError::Parse(_))
        ));
    }
}
