//! JSON-RPC 2.0 messages as LSP uses them, parsed defensively.
//!
//! Parsing never trusts the peer: the body must be UTF-8 and JSON (nesting is
//! bounded by serde_json's recursion limit), `jsonrpc` must be `"2.0"`, and an
//! id is an integer or a string of at most [`MAX_ID_LEN`] characters.

use serde_json::{Value, json};

pub const MAX_ID_LEN: usize = 256;

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

#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: Option<RequestId>,
        result: Result<Value, ResponseError>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ResponseError {
    pub code: i64,
    pub message: String,
}

impl ResponseError {
    pub fn new(code: i64, message: impl Into<String>) -> ResponseError {
        ResponseError {
            code,
            message: message.into(),
        }
    }
    pub fn invalid_params(message: impl Into<String>) -> ResponseError {
        ResponseError::new(code::INVALID_PARAMS, message)
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

pub fn parse(body: &[u8]) -> Result<Message, ParseError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ParseError::Parse(format!("body is not UTF-8: {e}")))?;
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ParseError::Parse(format!("body is not JSON: {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(ParseError::Invalid {
            id: None,
            why: "message is not a JSON object".into(),
        });
    };
    let raw_id = obj.get("id").filter(|v| !v.is_null());
    let id = match raw_id {
        None => None,
        Some(v) => Some(RequestId::from_json(v).ok_or_else(|| ParseError::Invalid {
            id: None,
            why: format!("id must be an integer or a string of at most {MAX_ID_LEN} characters"),
        })?),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(ParseError::Invalid {
            id,
            why: "jsonrpc must be \"2.0\"".into(),
        });
    }
    let params = obj.remove("params").unwrap_or(Value::Null);
    match (obj.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Ok(Message::Request { id, method, params }),
        (Some(Value::String(method)), None) => Ok(Message::Notification { method, params }),
        (Some(_), id) => Err(ParseError::Invalid {
            id,
            why: "method must be a string".into(),
        }),
        (None, id) => {
            let result = match (obj.remove("result"), obj.remove("error")) {
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
    to_vec(json!({"jsonrpc": "2.0", "id": id, "error": {"code": err.code, "message": err.message}}))
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
            expect![[r#"Request { id: Number(1), method: "shutdown", params: Null }"#]],
        );
        check(
            r#"{"jsonrpc":"2.0","method":"exit"}"#,
            expect![[r#"Notification { method: "exit", params: Null }"#]],
        );
        check(
            r#"{"jsonrpc":"2.0","id":"a","result":null}"#,
            expect![[r#"Response { id: Some(String("a")), result: Ok(Null) }"#]],
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
                r#"{"error":{"code":-32600,"message":"message is not a JSON object"},"id":null,"jsonrpc":"2.0"}"#
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
                r#"{"error":{"code":-32700,"message":"body is not JSON: recursion limit exceeded at line 1 column 128"},"id":null,"jsonrpc":"2.0"}"#
            ]],
        );
    }

    #[test]
    fn invalid_utf8_is_a_parse_error() {
        assert!(matches!(
            parse(b"{\"a\":\"\xff\"}"),
            Err(ParseError::Parse(_))
        ));
    }
}
