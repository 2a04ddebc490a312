//! The IDE server's side of MCP (the methods and `initialize` are
//! [`crate::mcp`]'s): the versions it accepts, its tool list, and turning a
//! `tools/call` into work for the hub. The replies must match the CLI's
//! recorded shapes byte for byte in places (`FILE_SAVED` + contents).

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::hub;
use crate::mcp::{self, ServerInfo, Versions};
use crate::workspace_fs as paths;
use moonkale_protocol::ide::{IdeTool, IdeToolCall, OpenDiff, OpenFile};

/// Versions the CLI accepts in an `initialize` answer (2.1.332's list).
pub const PROTOCOL_VERSIONS: [&str; 5] = [
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
    "2024-10-07",
];
/// What we answer a client whose version we do not know: accepted by every
/// CLI generation.
pub const FALLBACK_VERSION: &str = "2024-11-05";

/// What the IDE server answers `initialize` with.
pub const SERVER: ServerInfo = ServerInfo {
    name: "Claude Code Moonkale MCP",
    versions: Versions::Known {
        accepted: &PROTOCOL_VERSIONS,
        fallback: FALLBACK_VERSION,
    },
    tools_list_changed: true,
};

/// The IDE server's `tools/list`: every [`IdeTool`].
pub fn tools_list() -> Value {
    mcp::tools_list(IdeTool::ALL.map(IdeTool::spec))
}

/// Largest file `openFile` reads to find its selection text.
const MAX_READ: u64 = 16 << 20;

/// A confined file's text, up to [`MAX_READ`] bytes.
fn read_capped(root: &paths::Root, path: &paths::ConfinedPath) -> Result<String, String> {
    use std::io::Read;
    let file = root
        .open_beneath(path, paths::Open::Read)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_READ)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// What to do with a `tools/call`.
pub enum ToolCall {
    /// Answer now with this `CallToolResult`.
    Answer(Value),
    /// A JSON-RPC error (bad params, unknown tool).
    Error(i64, String),
    /// Ask the hub this call (its paths confined); remove `cleanup` (a
    /// directory we created) once it has answered.
    Hub {
        call: Box<IdeToolCall>,
        cleanup: Option<PathBuf>,
    },
}

impl From<IdeToolCall> for ToolCall {
    fn from(call: IdeToolCall) -> ToolCall {
        ToolCall::Hub {
            call: Box::new(call),
            cleanup: None,
        }
    }
}

/// Checks a `tools/call`'s params, types it as the hub takes it and
/// confines the paths it names to the workspace `root` (one per IDE
/// server); an `openDiff`'s proposal is written to `proposals`. Refused
/// paths become `isError` results that quote only the path.
pub fn prepare_call(
    params: &Value,
    root: &paths::Root,
    proposals: &super::proposals::ProposalDir,
) -> ToolCall {
    use crate::lsp::message::code;
    let roots = std::slice::from_ref(root.path());
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return ToolCall::Error(code::INVALID_PARAMS, "tools/call needs a tool name".into());
    };
    let args = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => {
            return ToolCall::Error(code::INVALID_PARAMS, "arguments must be an object".into());
        }
    };
    let string_arg = |key: &str| args.get(key).and_then(Value::as_str);
    let missing = |key: &str| {
        ToolCall::Error(
            code::INVALID_PARAMS,
            format!("Missing required parameter: {key}"),
        )
    };
    let confined = |key: &str| -> Result<paths::ConfinedPath, ToolCall> {
        let raw = string_arg(key).ok_or_else(|| missing(key))?;
        paths::confine(roots, raw)
            .map_err(|paths::Refused(why)| ToolCall::Answer(hub::error_result(why)))
    };
    let Some(tool) = IdeTool::parse(name) else {
        return ToolCall::Error(code::METHOD_NOT_FOUND, format!("Tool not found: {name}"));
    };
    match tool {
        IdeTool::OpenDiff => {
            for key in [
                "old_file_path",
                "new_file_path",
                "new_file_contents",
                "tab_name",
            ] {
                if string_arg(key).is_none() {
                    return missing(key);
                }
            }
            let contents = string_arg("new_file_contents").unwrap_or_default();
            let tab_name = string_arg("tab_name").unwrap_or_default();
            let (old_path, new_path) = match confined("old_file_path")
                .and_then(|old| Ok((old, confined("new_file_path")?)))
            {
                Ok(paths) => paths,
                Err(refusal) => return refusal,
            };
            // The proposal is written outside the workspace, so nothing
            // below would notice a workspace moved or deleted under us: a
            // folder that took its name is not it.
            if let Err(e) = root.check_still_here() {
                return ToolCall::Answer(hub::error_result(e.to_string()));
            }
            let old_text = if old_path.exists() {
                match read_capped(root, &old_path) {
                    Ok(text) => text,
                    Err(why) => return ToolCall::Answer(hub::error_result(why)),
                }
            } else {
                String::new() // a new file
            };
            let (dir, proposal) = match proposals.write(&new_path, contents) {
                Ok(written) => written,
                Err(why) => return ToolCall::Answer(hub::error_result(why)),
            };
            ToolCall::Hub {
                call: Box::new(IdeToolCall::OpenDiff(OpenDiff {
                    old_file_path: old_path.into(),
                    new_file_path: new_path.into(),
                    new_file_contents: contents.to_owned(),
                    tab_name: tab_name.to_owned(),
                    old_text,
                    proposal_path: proposal,
                })),
                cleanup: Some(dir),
            }
        }
        IdeTool::CloseTab => match string_arg("tab_name") {
            Some(tab_name) => IdeToolCall::CloseTab {
                tab_name: tab_name.to_owned(),
            }
            .into(),
            None => missing("tab_name"),
        },
        IdeTool::CloseAllDiffTabs => IdeToolCall::CloseAllDiffTabs.into(),
        IdeTool::ExecuteCode => ToolCall::Answer(hub::error_result(format!(
            "{tool} is not supported by Moonkale"
        ))),
        IdeTool::GetDiagnostics => {
            let mut uri = None;
            if let Some(raw) = string_arg("uri") {
                // The canonical form, as the hub keys diagnostics.
                let url = hub::lenient_file_url(raw);
                let path = url.as_ref().and_then(|u| u.to_file_path().ok());
                let (Some(url), Some(path)) = (url, path.as_ref().and_then(|p| p.to_str())) else {
                    return ToolCall::Answer(hub::error_result(format!(
                        "not a local file URI: {raw:?}"
                    )));
                };
                if let Err(paths::Refused(why)) = paths::confine(roots, path) {
                    return ToolCall::Answer(hub::error_result(why));
                }
                uri = Some(url.to_string());
            }
            IdeToolCall::GetDiagnostics { uri }.into()
        }
        IdeTool::CheckDocumentDirty | IdeTool::SaveDocument => match confined("filePath") {
            Ok(file_path) if tool == IdeTool::SaveDocument => IdeToolCall::SaveDocument {
                file_path: file_path.into(),
            }
            .into(),
            Ok(file_path) => IdeToolCall::CheckDocumentDirty {
                file_path: file_path.into(),
            }
            .into(),
            Err(answer) => answer,
        },
        IdeTool::GetCurrentSelection => IdeToolCall::GetCurrentSelection.into(),
        IdeTool::GetLatestSelection => IdeToolCall::GetLatestSelection.into(),
        IdeTool::GetOpenEditors => IdeToolCall::GetOpenEditors.into(),
        IdeTool::GetWorkspaceFolders => IdeToolCall::GetWorkspaceFolders.into(),
        IdeTool::OpenFile => {
            let raw = string_arg("filePath").unwrap_or_default();
            // Older CLIs send paths relative to the first workspace folder.
            let absolute = match roots.first() {
                Some(root) if !raw.starts_with('/') && !raw.is_empty() => {
                    root.join(raw).display().to_string()
                }
                _ => raw.to_owned(),
            };
            match paths::confine(roots, &absolute) {
                Ok(path) if path.is_file() => {
                    // The hub searches the editor's buffer when the file is
                    // open; it does no IO, so it gets the file's text too.
                    let file_text = match read_capped(root, &path) {
                        Ok(text) => text,
                        Err(why) => return ToolCall::Answer(hub::error_result(why)),
                    };
                    let flag = |key: &str| args.get(key).and_then(Value::as_bool);
                    IdeToolCall::OpenFile(OpenFile {
                        file_path: path.into(),
                        start_text: string_arg("startText").map(str::to_owned),
                        end_text: string_arg("endText").map(str::to_owned),
                        select_to_end_of_line: flag("selectToEndOfLine").unwrap_or(false),
                        make_frontmost: flag("makeFrontmost").unwrap_or(true),
                        file_text,
                    })
                    .into()
                }
                Ok(path) => ToolCall::Answer(hub::error_result(format!(
                    "File not found: {}",
                    path.display()
                ))),
                Err(paths::Refused(why)) => ToolCall::Answer(hub::error_result(why)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tool as the list was written by hand before the tool table.
    fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
        json!({
            "name": name,
            "description": description,
            "inputSchema": {"type": "object", "properties": properties, "required": required},
        })
    }

    fn string(description: &str) -> Value {
        json!({"type": "string", "description": description})
    }

    fn boolean(description: &str) -> Value {
        json!({"type": "boolean", "description": description})
    }

    /// The table lists the tools byte for byte as the hand-written list did.
    #[test]
    fn tools_list_is_the_recorded_one() {
        let (s, b) = (string, boolean);
        let expected = json!({"tools": [
            tool("openDiff", "Open a diff of a proposed change for the user to accept or reject in their editor.",
                 json!({"old_file_path": s("Path of the file to change"), "new_file_path": s("Path of the file after the change"),
                        "new_file_contents": s("The whole proposed contents"), "tab_name": s("Name of the diff view")}),
                 &["old_file_path", "new_file_path", "new_file_contents", "tab_name"]),
            tool("close_tab", "Close a diff view by its name.", json!({"tab_name": s("Name of the diff view")}), &["tab_name"]),
            tool("closeAllDiffTabs", "Close every diff view opened for Claude Code.", json!({}), &[]),
            tool("getDiagnostics", "Get language diagnostics from the editor.",
                 json!({"uri": s("Optional file URI to get diagnostics for. If not provided, gets diagnostics for all files.")}), &[]),
            tool("openFile", "Open a file in the editor and optionally select a range of text.",
                 json!({"filePath": s("Path to the file to open"), "preview": b("Open in preview mode"),
                        "startText": s("Text pattern to find the start of the selection"),
                        "endText": s("Text pattern to find the end of the selection"),
                        "selectToEndOfLine": b("Extend the selection to the end of the line"),
                        "makeFrontmost": b("Make the file the active editor tab")}), &["filePath"]),
            tool("getCurrentSelection", "Get the current text selection in the active editor.", json!({}), &[]),
            tool("getLatestSelection", "Get the most recent text selection.", json!({}), &[]),
            tool("getOpenEditors", "Get the documents open in the editors.", json!({}), &[]),
            tool("getWorkspaceFolders", "Get the workspace folders.", json!({}), &[]),
            tool("checkDocumentDirty", "Check whether a document has unsaved changes.",
                 json!({"filePath": s("Path to the file to check")}), &["filePath"]),
            tool("saveDocument", "Save a document with unsaved changes.", json!({"filePath": s("Path to the file to save")}), &["filePath"]),
            tool("executeCode", "Execute code in the editor (not supported by Moonkale).", json!({"code": s("The code to execute")}), &["code"]),
        ]});
        assert_eq!(
            serde_json::to_string(&tools_list()).unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
    }
}
