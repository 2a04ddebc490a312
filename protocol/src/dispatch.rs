//! Typed dispatch of a request by its method, in the manner of
//! rust-analyzer's `RequestDispatcher`: the params are parsed once, here,
//! into the method's [`Request::Params`], so a handler receives a typed
//! value; a method no handler took is `METHOD_NOT_FOUND`.
//!
//! ```
//! use moonkale_protocol::dispatch::Dispatch;
//! use moonkale_protocol::{agent, jsonrpc};
//!
//! let params = jsonrpc::params(&serde_json::json!({"session": "s"}));
//! let answer: Result<String, _> = Dispatch::new("moonkale/agent/interrupt", &params)
//!     .on::<agent::Interrupt>(|p| Ok(format!("interrupt {}", p.session)))
//!     .on::<agent::List>(|_| Ok("list".into()))
//!     .finish();
//! assert_eq!(answer.unwrap(), "interrupt s");
//! ```

use lsp_types::request::Request;
use serde_json::value::RawValue;

use crate::jsonrpc::{ResponseError, code};

/// One request on its way to the handler of its method.
#[must_use = "a dispatch answers only through `finish`"]
pub struct Dispatch<'a, T> {
    method: &'a str,
    params: &'a RawValue,
    answer: Option<Result<T, ResponseError>>,
}

impl<'a, T> Dispatch<'a, T> {
    pub fn new(method: &'a str, params: &'a RawValue) -> Self {
        Dispatch {
            method,
            params,
            answer: None,
        }
    }

    /// Hands the request to `handler` if it is `R`'s; params that do not
    /// parse as `R::Params` are answered -32602 without calling it.
    pub fn on<R: Request>(
        mut self,
        handler: impl FnOnce(R::Params) -> Result<T, ResponseError>,
    ) -> Self {
        if self.answer.is_none() && self.method == R::METHOD {
            self.answer = Some(parse::<R::Params>(self.params).and_then(handler));
        }
        self
    }

    /// The handler's answer, or `METHOD_NOT_FOUND` if none took it.
    pub fn finish(self) -> Result<T, ResponseError> {
        self.answer.unwrap_or_else(|| {
            Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                format!("unknown method {}", self.method),
            ))
        })
    }
}

/// `params` as `P`, or the -32602 that says why not.
pub fn parse<P: serde::de::DeserializeOwned>(params: &RawValue) -> Result<P, ResponseError> {
    serde_json::from_str(params.get())
        .map_err(|e| ResponseError::invalid_params(format!("invalid params: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{jsonrpc, terminal};
    use serde_json::json;

    fn dispatch(method: &str, params: serde_json::Value) -> Result<String, ResponseError> {
        let params = jsonrpc::params(&params);
        Dispatch::new(method, &params)
            .on::<terminal::Close>(|p| Ok(format!("close {}", p.terminal)))
            .on::<terminal::List>(|_| Ok("list".into()))
            .on::<terminal::StartClaude>(|p| Ok(format!("claude {:?}", p.unwrap_or_default().args)))
            .finish()
    }

    #[test]
    fn each_method_reaches_its_handler_with_typed_params() {
        assert_eq!(
            dispatch("moonkale/terminal/close", json!({"terminal": 3})).unwrap(),
            "close 3"
        );
        assert_eq!(
            dispatch("moonkale/terminal/list", json!({})).unwrap(),
            "list"
        );
        assert_eq!(
            dispatch("moonkale/terminal/startClaude", json!(null)).unwrap(),
            "claude []"
        );
        let bad = dispatch("moonkale/terminal/close", json!({"terminal": "x"})).unwrap_err();
        assert_eq!(bad.code, code::INVALID_PARAMS);
        assert!(
            bad.message.starts_with("invalid params: "),
            "{}",
            bad.message
        );
        let unknown = dispatch("moonkale/terminal/frobnicate", json!({})).unwrap_err();
        assert_eq!(unknown.code, code::METHOD_NOT_FOUND);
        assert_eq!(
            unknown.message,
            "unknown method moonkale/terminal/frobnicate"
        );
    }
}
