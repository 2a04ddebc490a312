//! The wire of Claude Code's IDE protocol as the service speaks it: MCP
//! tool results, the `selection_changed` and `at_mentioned` notifications,
//! and the JSON the IDE tools answer with (ide-protocol.md §4–§6); the
//! tools themselves, their one table and their calls are [`tools`]'.
//!
//! Lines and characters are 0-based and characters count UTF-16 code
//! units, as VS Code's do. Field names are the CLI's (camelCase); fields
//! it treats as absent when missing are left out, never sent as `null`.

use std::path::PathBuf;

pub mod tools;
pub use tools::{EditorTool, EditorToolCall, IdeTool, IdeToolCall, OpenDiff, OpenFile, ToolSpec};

use lsp_types::{Position, Range};
use serde::{Deserialize, Serialize};

/// An MCP `CallToolResult` of text items. The CLI parses the first item
/// (a plain word or JSON); the model sees them all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    pub content: Vec<Content>,
    /// The tool failed; the text says why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// One item of a tool result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Content {
    Text { text: String },
}

impl CallToolResult {
    /// A result of text items, in order.
    pub fn texts<S: Into<String>>(texts: impl IntoIterator<Item = S>) -> CallToolResult {
        CallToolResult {
            content: texts
                .into_iter()
                .map(|t| Content::Text { text: t.into() })
                .collect(),
            is_error: false,
        }
    }

    pub fn text(text: impl Into<String>) -> CallToolResult {
        CallToolResult::texts([text])
    }

    /// A failed call, with what went wrong.
    pub fn error(text: impl Into<String>) -> CallToolResult {
        CallToolResult {
            is_error: true,
            ..CallToolResult::text(text)
        }
    }
}

/// `selection_changed` params: the active editor's selection, also the
/// answer of `getLatestSelection`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectionChanged {
    /// The selected text; empty for a cursor, or when it is too large to
    /// send (the range still says where it is).
    pub text: String,
    pub file_path: PathBuf,
    pub file_url: String,
    pub selection: SelectionRange,
}

/// The ends of a selection, in document order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectionRange {
    pub start: Position,
    pub end: Position,
    pub is_empty: bool,
}

/// `getCurrentSelection`'s answer when there is a selection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentSelection {
    /// Always `true`.
    pub success: bool,
    #[serde(flatten)]
    pub selection: SelectionChanged,
}

/// What a tool answers when it has nothing to show
/// (`{"success": false, "message": …}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFailure {
    /// Always `false`.
    pub success: bool,
    pub message: String,
}

impl ToolFailure {
    pub fn new(message: impl Into<String>) -> ToolFailure {
        ToolFailure {
            success: false,
            message: message.into(),
        }
    }
}

/// `at_mentioned` params: a file, or lines of it, the user sent to Claude.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AtMentioned {
    pub file_path: PathBuf,
    /// First and last line (0-based, inclusive); both or neither.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_start: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_end: Option<u32>,
}

/// `getWorkspaceFolders`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceFolders {
    pub success: bool,
    pub folders: Vec<WorkspaceFolder>,
    pub root_path: String,
    /// Always `null`: the service has no `.code-workspace` file.
    pub workspace_file: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceFolder {
    pub name: String,
    pub uri: String,
    pub path: String,
    pub index: u32,
}

/// `checkDocumentDirty` for an open document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentDirty {
    pub success: bool,
    pub file_path: PathBuf,
    pub is_dirty: bool,
    pub is_untitled: bool,
}

/// `saveDocument` for an open document: the service cannot make an editor
/// save, so `saved` is `false` and `message` says what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentSave {
    pub success: bool,
    pub file_path: PathBuf,
    pub saved: bool,
    pub message: String,
}

/// `openFile` with `makeFrontmost: false`: the file's details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenedFile {
    pub success: bool,
    pub file_path: PathBuf,
    pub file_url: String,
    pub message: String,
    pub language_id: String,
    pub line_count: usize,
    pub is_dirty: bool,
    pub is_untitled: bool,
    pub is_closed: bool,
}

/// `getOpenEditors`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenEditors {
    pub tabs: Vec<Tab>,
}

/// One open document, as VS Code describes a tab.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tab {
    pub uri: String,
    pub is_active: bool,
    pub is_pinned: bool,
    pub is_preview: bool,
    pub is_dirty: bool,
    pub label: String,
    pub group_index: u32,
    pub view_column: u32,
    pub is_group_active: bool,
    pub file_name: String,
    pub language_id: String,
    pub line_count: usize,
    pub is_untitled: bool,
}

/// `getDiagnostics`: one file's diagnostics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiagnostics {
    pub uri: String,
    pub diagnostics: Vec<Diagnostic>,
}

/// A diagnostic as VS Code's extension reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub message: String,
    /// `Error`, `Warning`, `Information` or `Hint`.
    pub severity: String,
    pub range: Range,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Always a string, also for a numeric LSP code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// The agent's `readBuffer`: an editor's buffer of a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Buffer {
    pub file_path: String,
    pub is_dirty: bool,
    pub version: i32,
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_results_are_mcp_text_items() {
        assert_eq!(
            serde_json::to_value(CallToolResult::texts(["FILE_SAVED", "text"])).unwrap(),
            json!({"content": [{"type": "text", "text": "FILE_SAVED"}, {"type": "text", "text": "text"}]})
        );
        assert_eq!(
            serde_json::to_value(CallToolResult::error("no")).unwrap(),
            json!({"content": [{"type": "text", "text": "no"}], "isError": true})
        );
    }

    #[test]
    fn current_selection_is_the_payload_and_success() {
        let selection = SelectionChanged {
            text: "x".into(),
            file_path: "/w/a".into(),
            file_url: "file:///w/a".into(),
            selection: SelectionRange {
                start: Position::new(0, 0),
                end: Position::new(0, 1),
                is_empty: false,
            },
        };
        assert_eq!(
            serde_json::to_value(CurrentSelection {
                success: true,
                selection
            })
            .unwrap(),
            json!({"success": true, "text": "x", "filePath": "/w/a", "fileUrl": "file:///w/a",
                   "selection": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}, "isEmpty": false}})
        );
    }
}
