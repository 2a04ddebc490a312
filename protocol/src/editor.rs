//! The notifications an editor sends the hub, as one closed enum parsed
//! once at the hub's door: the LSP document lifecycle and moonkale's
//! selection and diagnostics. The hub matches on [`EditorNotification`],
//! never on a method name.

use lsp_types::notification::{
    DidChangeConfiguration, DidChangeTextDocument, DidChangeWatchedFiles,
    DidChangeWorkspaceFolders, DidCloseTextDocument, DidOpenTextDocument, DidSaveTextDocument,
    Notification, WillSaveTextDocument,
};
use lsp_types::{
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
    DidSaveTextDocumentParams,
};
use serde_json::value::RawValue;

use crate::document::{
    PublishDiagnostics, PublishDiagnosticsParams, SelectionChanged, SelectionChangedParams,
};

/// A notification from an editor, its params parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum EditorNotification {
    DidOpen(DidOpenTextDocumentParams),
    DidChange(DidChangeTextDocumentParams),
    DidSave(DidSaveTextDocumentParams),
    DidClose(DidCloseTextDocumentParams),
    SelectionChanged(SelectionChangedParams),
    PublishDiagnostics(PublishDiagnosticsParams),
    /// Known notifications the hub has no use for (`willSave`, workspace
    /// configuration and folders, watched files, every `$/…`).
    Ignored,
    /// A method this crate does not know; the hub logs and drops it.
    Unknown(String),
}

/// Params that do not parse as their method's: a protocol violation by
/// the editor, reported to it in these words.
#[derive(Debug, thiserror::Error)]
#[error("{what} with invalid params: {error}")]
pub struct InvalidNotification {
    /// The method, without the `textDocument/` of LSP's own.
    pub what: String,
    pub error: serde_json::Error,
}

impl EditorNotification {
    /// `method`'s notification with `params` parsed as its own type.
    pub fn parse(method: &str, params: &RawValue) -> Result<Self, InvalidNotification> {
        use EditorNotification as N;
        Ok(match method {
            DidOpenTextDocument::METHOD => N::DidOpen(params_of::<DidOpenTextDocument>(params)?),
            DidChangeTextDocument::METHOD => {
                N::DidChange(params_of::<DidChangeTextDocument>(params)?)
            }
            DidSaveTextDocument::METHOD => N::DidSave(params_of::<DidSaveTextDocument>(params)?),
            DidCloseTextDocument::METHOD => N::DidClose(params_of::<DidCloseTextDocument>(params)?),
            SelectionChanged::METHOD => N::SelectionChanged(params_of::<SelectionChanged>(params)?),
            PublishDiagnostics::METHOD => {
                N::PublishDiagnostics(params_of::<PublishDiagnostics>(params)?)
            }
            WillSaveTextDocument::METHOD
            | DidChangeConfiguration::METHOD
            | DidChangeWorkspaceFolders::METHOD
            | DidChangeWatchedFiles::METHOD => N::Ignored,
            _ if method.starts_with("$/") => N::Ignored,
            _ => N::Unknown(method.to_owned()),
        })
    }
}

/// `params` as `N`'s params, or the violation that says why not.
pub fn params_of<N: Notification>(params: &RawValue) -> Result<N::Params, InvalidNotification> {
    serde_json::from_str(params.get()).map_err(|error| InvalidNotification {
        what: N::METHOD
            .strip_prefix("textDocument/")
            .unwrap_or(N::METHOD)
            .to_owned(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc;
    use serde_json::json;

    fn parse(method: &str, params: serde_json::Value) -> Result<EditorNotification, String> {
        EditorNotification::parse(method, &jsonrpc::params(&params)).map_err(|e| e.to_string())
    }

    #[test]
    fn each_notification_is_its_variant_or_says_what_is_wrong() {
        let uri = "file:///w/a.py";
        let selection = parse(
            "moonkale/selectionChanged",
            json!({"textDocument": {"uri": uri}, "cursor": {"line": 1, "character": 2}}),
        );
        assert!(
            matches!(selection, Ok(EditorNotification::SelectionChanged(p)) if p.selection.is_none())
        );
        let close = parse(
            "textDocument/didClose",
            json!({"textDocument": {"uri": uri}}),
        );
        assert!(matches!(close, Ok(EditorNotification::DidClose(_))));
        let open = parse(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri}}),
        );
        assert!(
            open.as_ref()
                .unwrap_err()
                .starts_with("didOpen with invalid params: missing field `languageId`"),
            "{open:?}"
        );
        let diagnostics = parse("moonkale/publishDiagnostics", json!({"uri": uri}));
        assert!(
            diagnostics.as_ref().unwrap_err().starts_with(
                "moonkale/publishDiagnostics with invalid params: missing field `source`"
            ),
            "{diagnostics:?}"
        );
        assert_eq!(
            parse("$/setTrace", json!({})).unwrap(),
            EditorNotification::Ignored
        );
        assert_eq!(
            parse("workspace/didChangeConfiguration", json!(null)).unwrap(),
            EditorNotification::Ignored
        );
        assert_eq!(
            parse("custom/thing", json!(null)).unwrap(),
            EditorNotification::Unknown("custom/thing".into())
        );
    }
}
