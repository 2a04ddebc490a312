//! The IDE server's side of MCP (the methods and `initialize` are
//! [`crate::mcp`]'s): the versions it accepts, its tool list, and turning a
//! `tools/call` into work for the hub. The replies must match the CLI's
//! recorded shapes byte for byte in places (`FILE_SAVED` + contents).

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::hub;
use crate::mcp::{ServerInfo, Versions, boolean, string, tool};
use crate::workspace_fs as paths;

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

pub fn tools_list() -> Value {
    let (s, b) = (string, boolean);
    json!({"tools": [
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
    ]})
}

/// Largest file `openFile` reads to find its selection text.
const MAX_READ: u64 = 16 << 20;

/// A confined file's text, up to [`MAX_READ`] bytes.
fn read_capped(root: &paths::Root, path: &std::path::Path) -> Result<String, String> {
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
    /// Ask the hub, with these (confined) arguments; remove `cleanup` (a
    /// directory we created) once it has answered.
    Hub {
        tool: String,
        arguments: Value,
        cleanup: Option<PathBuf>,
    },
}

/// Checks a `tools/call`'s params and confines the paths it names to the
/// workspace `root` (one per IDE server); an `openDiff`'s proposal is
/// written to `proposals`. Refused paths become `isError`
/// results that quote only the path.
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
    let confined = |key: &str| -> Result<PathBuf, ToolCall> {
        let raw = string_arg(key).ok_or_else(|| {
            ToolCall::Error(
                code::INVALID_PARAMS,
                format!("Missing required parameter: {key}"),
            )
        })?;
        paths::confine(roots, raw)
            .map_err(|paths::Refused(why)| ToolCall::Answer(hub::error_result(why)))
    };
    match name {
        "openDiff" => {
            for key in [
                "old_file_path",
                "new_file_path",
                "new_file_contents",
                "tab_name",
            ] {
                if string_arg(key).is_none() {
                    return ToolCall::Error(
                        code::INVALID_PARAMS,
                        format!("Missing required parameter: {key}"),
                    );
                }
            }
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
            let contents = string_arg("new_file_contents").unwrap_or_default();
            let (dir, proposal) = match proposals.write(&new_path, contents) {
                Ok(written) => written,
                Err(why) => return ToolCall::Answer(hub::error_result(why)),
            };
            let mut arguments = args.clone();
            arguments["oldText"] = json!(old_text);
            arguments["new_file_path"] = json!(new_path);
            arguments["proposalPath"] = json!(proposal);
            ToolCall::Hub {
                tool: name.into(),
                arguments,
                cleanup: Some(dir),
            }
        }
        "close_tab" => match string_arg("tab_name") {
            Some(_) => ToolCall::Hub {
                tool: name.into(),
                arguments: args,
                cleanup: None,
            },
            None => ToolCall::Error(
                code::INVALID_PARAMS,
                "Missing required parameter: tab_name".into(),
            ),
        },
        "closeAllDiffTabs" => ToolCall::Hub {
            tool: name.into(),
            arguments: args,
            cleanup: None,
        },
        "executeCode" => ToolCall::Answer(hub::error_result(
            "executeCode is not supported by Moonkale",
        )),
        "getDiagnostics" => {
            let mut args = args.clone();
            if let Some(raw) = string_arg("uri") {
                // The canonical form, as the hub keys diagnostics.
                let uri = hub::lenient_file_url(raw);
                let path = uri.as_ref().and_then(|u| u.to_file_path().ok());
                let (Some(uri), Some(path)) = (uri, path.as_ref().and_then(|p| p.to_str())) else {
                    return ToolCall::Answer(hub::error_result(format!(
                        "not a local file URI: {raw:?}"
                    )));
                };
                if let Err(paths::Refused(why)) = paths::confine(roots, path) {
                    return ToolCall::Answer(hub::error_result(why));
                }
                args["uri"] = json!(uri);
            }
            ToolCall::Hub {
                tool: name.into(),
                arguments: args,
                cleanup: None,
            }
        }
        "checkDocumentDirty" | "saveDocument" => match confined("filePath") {
            Ok(path) => ToolCall::Hub {
                tool: name.into(),
                arguments: json!({"filePath": path}),
                cleanup: None,
            },
            Err(answer) => answer,
        },
        "getCurrentSelection" | "getLatestSelection" | "getOpenEditors" | "getWorkspaceFolders" => {
            ToolCall::Hub {
                tool: name.into(),
                arguments: args,
                cleanup: None,
            }
        }
        "openFile" => {
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
                    let mut args = args.clone();
                    args["filePath"] = json!(path);
                    // The hub searches the editor's buffer when the file is
                    // open; it does no IO, so it gets the file's text too.
                    match read_capped(root, &path) {
                        Ok(text) => args["fileText"] = json!(text),
                        Err(why) => return ToolCall::Answer(hub::error_result(why)),
                    }
                    ToolCall::Hub {
                        tool: name.into(),
                        arguments: args,
                        cleanup: None,
                    }
                }
                Ok(path) => ToolCall::Answer(hub::error_result(format!(
                    "File not found: {}",
                    path.display()
                ))),
                Err(paths::Refused(why)) => ToolCall::Answer(hub::error_result(why)),
            }
        }
        _ => ToolCall::Error(code::METHOD_NOT_FOUND, format!("Tool not found: {name}")),
    }
}
