//! Names of files as editors spell them (issue 12, "Names and paths"): one
//! file is one document however its `file:` URI is percent-encoded, so what
//! the service names (proposals, the target of an `openDiff`, paths from
//! Claude Code) and what editors send meet.

use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use moonkale_tests::{IdeClient, RawLsp, Sandbox, ide_lock, tool_json};
use serde_json::{Value, json};

/// `path` as VS Code (and Neovim) spell it: every byte but the unreserved
/// ones and `/` percent-encoded, so `[id].tsx` is `%5Bid%5D.tsx`.
fn editor_uri(path: &Path) -> String {
    let mut out = String::from("file://");
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The path a `file:///` URI names (percent-decoded).
fn path_of(uri: &str) -> PathBuf {
    let raw = uri.strip_prefix("file://").expect("a file URI").as_bytes();
    let mut bytes = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = std::str::from_utf8(&raw[i + 1..i + 3]).unwrap();
            bytes.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            bytes.push(raw[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(bytes))
}

/// The next message from the service that `wanted` accepts (others kept).
async fn next_matching(ed: &mut RawLsp, wanted: impl Fn(&Value) -> bool) -> Value {
    if let Some(i) = ed.notifications.iter().position(&wanted) {
        return ed.notifications.remove(i);
    }
    loop {
        let msg = ed.recv().await;
        if wanted(&msg) {
            return msg;
        }
        ed.notifications.push(msg);
    }
}

/// Defect: URIs were compared byte for byte, so `pages/posts/[id].tsx`,
/// which editors send as `%5Bid%5D.tsx`, was not the document the service
/// named. Now: Claude Code's path tools find the editor's unsaved buffer
/// and its diagnostics; the proposal document the editor opens under its own
/// spelling keeps the user's tweak on accept; the target, open with unsaved
/// changes, gets the warning (and no edit); the Accept code action is offered
/// on the target as the editor spells it.
#[tokio::test]
async fn percent_encoded_uris_are_the_documents_the_service_names() {
    let sb = Sandbox::new();
    let dir = sb.workspace.join("pages/posts");
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("[id].tsx");
    let on_disk = "export const id = 1;\n";
    std::fs::write(&target, on_disk).unwrap();
    let svc = sb.start_service(&[]).await;
    let (port, lock) = ide_lock(&sb, &svc);
    let mut c = IdeClient::connect(port, lock["authToken"].as_str().unwrap()).await;
    c.initialize("2025-11-25").await;

    let mut ed = svc.connect().await;
    ed.initialize("percent-encoder", &["utf-16"], Value::Null)
        .await;
    let target_uri = editor_uri(&target);
    assert!(target_uri.ends_with("/pages/posts/%5Bid%5D.tsx"));
    ed.did_open(&target_uri, 1, on_disk).await;
    // An unsaved edit, sent under another spelling of the same file.
    let lower_hex = target_uri.replace("%5B", "%5b").replace("%5D", "%5d");
    ed.did_change(&lower_hex, 2, [0, 20, 0, 20], " // mine")
        .await;
    ed.notify(
        "moonkale/publishDiagnostics",
        json!({"uri": target_uri, "source": "tsc", "diagnostics": [
            {"range": {"start": {"line": 0, "character": 13}, "end": {"line": 0, "character": 15}}, "severity": 1, "message": "unused"}]}),
    )
    .await;
    ed.barrier().await;
    let spelled_by_cli = format!("file://{}", target.display());
    let doc = ed
        .document(&format!("FILE://localhost{}", target.display()))
        .await;
    assert_eq!(doc["text"], "export const id = 1; // mine\n");

    // Claude Code names the file by its path, as the CLI does.
    let dirty = tool_json(
        &c.tool("checkDocumentDirty", json!({"filePath": target}))
            .await,
    );
    assert_eq!(dirty["isDirty"], true, "{dirty}");
    let diagnostics = tool_json(
        &c.tool("getDiagnostics", json!({"uri": spelled_by_cli}))
            .await,
    );
    assert_eq!(diagnostics[0]["uri"], spelled_by_cli.as_str());
    assert_eq!(diagnostics[0]["diagnostics"][0]["message"], "unused");

    // openDiff on `[id].tsx`: the editor opens the proposal under its own
    // spelling and tweaks it.
    let proposed = "export const id = 2;\n";
    c.send(json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {"name": "openDiff", "arguments": {
        "old_file_path": target, "new_file_path": target, "new_file_contents": proposed,
        "tab_name": "✻ [Claude Code] [id].tsx ⧉"}}}))
        .await;
    let show = next_matching(&mut ed, |m| m["method"] == "window/showDocument").await;
    let shown = path_of(show["params"]["uri"].as_str().unwrap());
    assert_eq!(shown.file_name().unwrap(), "[id].tsx");
    assert_eq!(std::fs::read_to_string(&shown).unwrap(), proposed);
    let proposal_uri = editor_uri(&shown);
    ed.did_open(&proposal_uri, 1, proposed).await;
    ed.did_change(&proposal_uri, 2, [0, 18, 0, 19], "3").await;

    let actions = ed
        .call(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": target_uri},
                   "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                   "context": {"diagnostics": []}}),
        )
        .await;
    let accept = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["command"]["command"] == "moonkale.acceptProposal")
        .unwrap_or_else(|| panic!("no Accept on the target: {actions}"))
        .clone();
    assert_eq!(accept["title"], "Accept Claude Code's edit to [id].tsx");
    ed.call("workspace/executeCommand", accept["command"].clone())
        .await;

    let mut answer = None;
    while answer.is_none() {
        let msg = c.recv().await;
        if msg["id"] == 50 {
            answer = Some(msg);
        }
    }
    let answer = answer.unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "FILE_SAVED");
    assert_eq!(
        answer["result"]["content"][1]["text"], "export const id = 3;\n",
        "the user's tweak is the answer"
    );
    let warning = next_matching(&mut ed, |m| {
        m["method"] == "window/showMessage"
            && m["params"]["message"]
                .as_str()
                .is_some_and(|t| t.contains("unsaved changes"))
    })
    .await;
    assert!(
        warning["params"]["message"]
            .as_str()
            .unwrap()
            .contains("[id].tsx"),
        "{warning}"
    );
    assert!(
        !ed.notifications
            .iter()
            .any(|m| m["method"] == "workspace/applyEdit"),
        "a buffer with unsaved changes is left alone: {:?}",
        ed.notifications
    );
}
