//! Documents and selections: what plugins and the Moonkale shell send
//! beside plain LSP text sync, and what they may ask of the documents the
//! service holds.

use lsp_types::{Diagnostic, Position, Range, TextDocumentIdentifier, Url};
use serde::{Deserialize, Serialize};

use crate::{notification, request};

notification!(
    /// The user's selection in the sending editor (editor → service).
    SelectionChanged,
    "moonkale/selectionChanged",
    SelectionChangedParams
);

/// Positions count in the editor's negotiated encoding. One of `selection`
/// and `cursor` must be there; with both, the anchor is the end of the
/// selection the cursor is not at; with `selection` alone, the cursor is
/// its `end`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectionChangedParams {
    pub text_document: TextDocumentIdentifier,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Range>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Position>,
}

notification!(
    /// Diagnostics another language server gave the sending editor, stored
    /// per (document, `source`) (editor → service).
    PublishDiagnostics,
    "moonkale/publishDiagnostics",
    PublishDiagnosticsParams
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PublishDiagnosticsParams {
    pub uri: Url,
    pub source: String,
    pub diagnostics: Vec<Diagnostic>,
}

request!(
    /// What the service holds of a document, from the editor that touched
    /// it last.
    DocumentText,
    "moonkale/document",
    UriParams => DocumentState
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UriParams {
    pub uri: Url,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentState {
    pub uri: Url,
    /// The editor whose buffer this is.
    pub editor: u64,
    pub version: i32,
    pub dirty: bool,
    pub in_sync: bool,
    pub text: String,
}

request!(
    /// Answers once the latest buffer of `uri` has at least `version`.
    WaitForVersion,
    "moonkale/waitForVersion",
    VersionParams => VersionResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionParams {
    pub uri: Url,
    pub version: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionResult {
    pub version: i32,
}
