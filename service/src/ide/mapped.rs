//! The paths of Claude Code's IDE protocol across a sandbox link whose
//! sandbox mounts the workspace elsewhere ([`PathMap`]): a tool call's
//! path arguments are mapped to this machine's before they are confined
//! ([`call_to_host`]), and every frame to the jailed CLI has its paths
//! mapped to the sandbox's ([`frame_to_inside`]): `selection_changed`,
//! `at_mentioned`, `diagnostics_changed`, and the JSON of tool results
//! (diagnostics, open editors, workspace folders, the selection).
//!
//! What maps to nothing is never guessed: a call naming such a path is
//! refused with a sentence, a notification about such a file is not sent,
//! an entry of a result naming one is left out.

use serde_json::{Map, Value};

use crate::core::path_map::{PathMap, Unmapped};

/// Argument names of the IDE tools that hold a path or a file URI.
const PATH_ARGS: [&str; 3] = ["filePath", "old_file_path", "new_file_path"];
const URI_ARGS: [&str; 1] = ["uri"];

/// Keys of what goes to the CLI that hold a path or a file URI.
const PATH_KEYS: [&str; 4] = ["filePath", "path", "fileName", "rootPath"];
const URI_KEYS: [&str; 2] = ["uri", "fileUrl"];

/// A `tools/call`'s params with their path arguments as this machine
/// knows them (a relative `filePath`, which older CLIs send, stays
/// relative to the workspace).
pub fn call_to_host(paths: &PathMap, params: &Value) -> Result<Value, Unmapped> {
    let mut params = params.clone();
    if paths.is_identity() {
        return Ok(params);
    }
    if let Some(Value::Object(args)) = params.get_mut("arguments") {
        for key in PATH_ARGS {
            if let Some(Value::String(p)) = args.get_mut(key)
                && p.starts_with('/')
            {
                *p = paths.to_host(p)?;
            }
        }
        for key in URI_ARGS {
            if let Some(Value::String(u)) = args.get_mut(key) {
                *u = paths.map_uri(u, PathMap::to_host)?;
            }
        }
    }
    Ok(params)
}

/// A frame to the jailed CLI with its paths as the sandbox knows them;
/// `None`: a notification about a file the sandbox cannot see (not sent).
pub fn frame_to_inside(paths: &PathMap, frame: &str) -> Option<String> {
    if paths.is_identity() {
        return Some(frame.to_owned());
    }
    let Ok(mut msg) = serde_json::from_str::<Value>(frame) else {
        return Some(frame.to_owned());
    };
    if let Some(params) = msg.get_mut("params") {
        // A notification: all of it maps, or it is not sent.
        map_value(paths, params, true).ok()?;
    }
    if let Some(result) = msg.get_mut("result") {
        result_to_inside(paths, result);
    }
    Some(msg.to_string())
}

/// A tool's result (`CallToolResult`) with the paths in its JSON text as
/// the sandbox knows them; an entry naming a file it cannot see is left
/// out.
pub fn result_to_inside(paths: &PathMap, result: &mut Value) {
    if paths.is_identity() {
        return;
    }
    let Some(Value::Array(content)) = result.get_mut("content") else {
        return;
    };
    for item in content {
        let Some(Value::String(text)) = item.get_mut("text") else {
            continue;
        };
        // Only results that are JSON: a plain text result may be a file's
        // contents (openDiff's FILE_SAVED), never rewritten.
        let Ok(mut inner) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        if inner.is_object() || inner.is_array() {
            let _ = map_value(paths, &mut inner, false);
            *text = inner.to_string();
        }
    }
}

/// Maps the path and URI fields of `value`, at any depth. `strict`: fail
/// at the first that maps to nothing; else leave out the array entry (or
/// the field) that holds it.
fn map_value(paths: &PathMap, value: &mut Value, strict: bool) -> Result<(), Unmapped> {
    match value {
        Value::Object(object) => map_object(paths, object, strict),
        Value::Array(items) => {
            let mut kept = Vec::with_capacity(items.len());
            for mut item in std::mem::take(items) {
                match map_value(paths, &mut item, strict) {
                    Ok(()) => kept.push(item),
                    Err(e) if strict => return Err(e),
                    Err(_) => {}
                }
            }
            *items = kept;
            Ok(())
        }
        _ => Ok(()),
    }
}

fn map_object(
    paths: &PathMap,
    object: &mut Map<String, Value>,
    strict: bool,
) -> Result<(), Unmapped> {
    for (key, field) in object.iter_mut() {
        let mapped = match field {
            Value::String(s) if PATH_KEYS.contains(&key.as_str()) && s.starts_with('/') => {
                paths.to_inside(s).map(|m| *s = m)
            }
            Value::String(s) if URI_KEYS.contains(&key.as_str()) => {
                paths.map_uri(s, PathMap::to_inside).map(|m| *s = m)
            }
            // `diagnostics_changed`'s `uris`, and nested objects.
            Value::Array(items) if key == "uris" => {
                let mut result = Ok(());
                items.retain_mut(|u| match u {
                    Value::String(s) => match paths.map_uri(s, PathMap::to_inside) {
                        Ok(m) => {
                            *s = m;
                            true
                        }
                        Err(e) => {
                            result = Err(e);
                            false
                        }
                    },
                    _ => true,
                });
                if strict { result } else { Ok(()) }
            }
            Value::Object(_) | Value::Array(_) => map_value(paths, field, strict),
            _ => Ok(()),
        };
        // An entry of an array is left out by the caller; a lone field of
        // a result cannot be, so it fails the whole object.
        mapped?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map() -> PathMap {
        PathMap::new(vec!["/home/me/proj=/workspaces/proj".parse().unwrap()])
    }

    #[test]
    fn tool_calls_name_host_paths_or_are_refused() {
        let call = json!({"name": "openDiff", "arguments": {
            "old_file_path": "/workspaces/proj/a.rs", "new_file_path": "/workspaces/proj/a.rs",
            "new_file_contents": "/workspaces/proj stays as written", "tab_name": "t"}});
        let mapped = call_to_host(&map(), &call).unwrap();
        assert_eq!(mapped["arguments"]["old_file_path"], "/home/me/proj/a.rs");
        assert_eq!(
            mapped["arguments"]["new_file_contents"],
            "/workspaces/proj stays as written"
        );
        let diagnostics =
            json!({"name": "getDiagnostics", "arguments": {"uri": "file:///workspaces/proj/a.rs"}});
        assert_eq!(
            call_to_host(&map(), &diagnostics).unwrap()["arguments"]["uri"],
            "file:///home/me/proj/a.rs"
        );
        let outside = json!({"name": "openFile", "arguments": {"filePath": "/etc/passwd"}});
        assert!(call_to_host(&map(), &outside).is_err());
        let climbing = json!({"name": "openFile", "arguments": {"filePath": "/workspaces/proj/../../etc/passwd"}});
        assert!(call_to_host(&map(), &climbing).is_err());
        let relative = json!({"name": "openFile", "arguments": {"filePath": "src/a.rs"}});
        assert_eq!(call_to_host(&map(), &relative).unwrap(), relative);
    }

    #[test]
    fn frames_to_the_sandbox_name_its_paths() {
        let selection = json!({"jsonrpc": "2.0", "method": "selection_changed", "params": {
            "text": "x", "filePath": "/home/me/proj/src/a.rs", "fileUrl": "file:///home/me/proj/src/a.rs",
            "selection": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}, "isEmpty": false}}});
        let out: Value =
            serde_json::from_str(&frame_to_inside(&map(), &selection.to_string()).unwrap())
                .unwrap();
        assert_eq!(out["params"]["filePath"], "/workspaces/proj/src/a.rs");
        assert_eq!(out["params"]["fileUrl"], "file:///workspaces/proj/src/a.rs");
        assert_eq!(out["params"]["text"], "x");
        // A file the sandbox cannot see: not told at all.
        let elsewhere = json!({"jsonrpc": "2.0", "method": "at_mentioned", "params": {"filePath": "/home/me/other/b.rs", "lineStart": 1}});
        assert_eq!(frame_to_inside(&map(), &elsewhere.to_string()), None);

        let folders = json!({"success": true, "folders": [{"name": "proj", "uri": "file:///home/me/proj", "path": "/home/me/proj"}], "rootPath": "/home/me/proj"});
        let diagnostics = json!([{"uri": "file:///home/me/proj/a.rs", "diagnostics": []}, {"uri": "file:///tmp/x.rs", "diagnostics": []}]);
        for (inner, check) in [
            (
                folders,
                "{\"folders\":[{\"name\":\"proj\",\"path\":\"/workspaces/proj\",\"uri\":\"file:///workspaces/proj\"}],\"rootPath\":\"/workspaces/proj\",\"success\":true}",
            ),
            (
                diagnostics,
                "[{\"diagnostics\":[],\"uri\":\"file:///workspaces/proj/a.rs\"}]",
            ),
        ] {
            let result = json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": inner.to_string()}]}});
            let out: Value =
                serde_json::from_str(&frame_to_inside(&map(), &result.to_string()).unwrap())
                    .unwrap();
            assert_eq!(out["result"]["content"][0]["text"], check);
        }
        // A plain text result (a file's contents) is left as it is.
        let saved = json!({"jsonrpc": "2.0", "id": 4, "result": {"content": [{"type": "text", "text": "FILE_SAVED"}, {"type": "text", "text": "path /home/me/proj/a.rs\n"}]}});
        assert_eq!(
            frame_to_inside(&map(), &saved.to_string()).unwrap(),
            saved.to_string()
        );
    }
}
