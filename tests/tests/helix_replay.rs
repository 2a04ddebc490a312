//! Helix's recorded traffic replayed against the real `moonkale-shim`, the
//! way the README's Helix recipe attaches it (an extra stdio server):
//! `tests/fixtures/helix-25.07.1-session.jsonl` holds, in order, what Helix
//! 25.07.1 sent one of its language servers in a recorded session
//! (shared/reference/editors-lab/logs/hx-a.txt): opening a file, the
//! selection keymap of the recipe (`:lsp-workspace-command
//! moonkale.selection %{…}`), a code action on a selection, hover, one
//! `didChange` per typed character, deleting a line, `:w`, a second file,
//! an edit applied by the server, closing, quitting. The service must end up
//! holding what Helix held at each step.

use std::process::Stdio;

use moonkale_tests::{RawLsp, Sandbox};
use serde_json::{Value, json};

const SESSION: &str = include_str!("../fixtures/helix-25.07.1-session.jsonl");

/// Helix's `initialize`, as recorded: no `rootUri`, no workspace folders,
/// the cwd as `rootPath`, three encodings, `window` with only progress.
fn helix_initialize(root: &str) -> Value {
    json!({
        "processId": 4242,
        "clientInfo": {"name": "helix", "version": "25.07.1"},
        "rootPath": root,
        "rootUri": null,
        "workspaceFolders": [],
        "capabilities": {
            "general": {"positionEncodings": ["utf-8", "utf-32", "utf-16"]},
            "window": {"workDoneProgress": true},
        },
    })
}

/// The first recipe: the shim as an extra server beside the language's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helix_session_through_the_shim_as_an_extra_server() {
    replay(&[]).await;
}

/// The second recipe: the shim wrapping the language's server (pylsp here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helix_session_through_the_shim_wrapping_a_server() {
    let pylsp = moonkale_tests::pylsp_bin();
    replay(&["--".into(), pylsp.display().to_string()]).await;
}

async fn replay(shim_args: &[String]) {
    let sb = Sandbox::new();
    let ws = sb.workspace.display().to_string();
    std::fs::write(
        sb.workspace.join("test.txt"),
        "first line alpha\nsecond line beta\nthird line gamma\nfourth line delta\n",
    )
    .unwrap();
    let mut shim = sb.command("moonkale-shim");
    shim.args(shim_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .current_dir(&sb.workspace);
    let mut child = shim.spawn().expect("spawn moonkale-shim");
    let mut hx = RawLsp::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let init = hx.call("initialize", helix_initialize(&ws)).await;
    if shim_args.is_empty() {
        assert_eq!(init["capabilities"]["positionEncoding"], "utf-8", "{init}");
    }
    let commands = &init["capabilities"]["executeCommandProvider"]["commands"];
    assert!(
        commands
            .as_array()
            .unwrap()
            .contains(&json!("moonkale.selection")),
        "the recipe's keymap needs the command offered: {init}"
    );
    let test_uri = format!("file://{ws}/test.txt");
    let mut checkpoints = 0;

    for line in SESSION.lines() {
        let message: Value = serde_json::from_str(line).expect("fixture line");
        let method = message["method"].as_str().unwrap();
        let params: Value =
            serde_json::from_str(&message["params"].to_string().replace("$WS", &ws)).unwrap();
        match method {
            "shutdown" => {
                // Before quitting: what Helix held, the service holds.
                let st = hx.call("moonkale/status", Value::Null).await;
                let me = &st["editors"][0];
                assert_eq!(me["client"], "helix", "{st}");
                let docs = me["documents"].as_array().unwrap();
                assert_eq!(docs.len(), 1, "test.txt was closed: {st}");
                assert!(
                    docs[0]["uri"].as_str().unwrap().ends_with("other.txt"),
                    "{st}"
                );
                let resp = hx.request("shutdown", Value::Null).await;
                assert!(resp.get("error").is_none(), "{resp}");
            }
            "exit" => hx.notify("exit", Value::Null).await,
            "textDocument/codeAction" => {
                let actions = hx.call(method, params).await;
                let titles: Vec<&str> = actions
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|a| a["title"].as_str())
                    .collect();
                assert!(
                    titles.contains(&"Send selection to Claude Code"),
                    "{titles:?}"
                );
            }
            "textDocument/hover" | "workspace/executeCommand" => {
                let resp = hx.request(method, params).await;
                assert!(resp.get("error").is_none(), "{method}: {resp}");
            }
            _ => hx.notify(method, params).await,
        }
        // Checkpoints: the service's view after the steps that change it.
        match (
            method,
            message["params"]["textDocument"]["version"].as_i64(),
        ) {
            ("workspace/executeCommand", _) => {
                checkpoints += 1;
                // `%{selection_line_start}`..`%{selection_line_end}` = 2..3,
                // 1-based: lines 1 and 2, 0-based, whole.
                let st = hx.call("moonkale/status", Value::Null).await;
                let sel = &st["editors"][0]["selection"];
                assert_eq!(sel["uri"], json!(test_uri), "{st}");
                assert_eq!(
                    (&sel["anchor"]["line"], &sel["cursor"]["line"]),
                    (&json!(1), &json!(3)),
                    "{st}"
                );
            }
            ("textDocument/didChange", Some(6)) => {
                checkpoints += 1;
                hx.wait_for_version(&test_uri, 6).await;
                let doc = hx.document(&test_uri).await;
                assert_eq!(
                    doc["text"],
                    "HELLO first line alpha\nsecond line beta\nthird line gamma\nfourth line delta\n"
                );
            }
            ("textDocument/didSave", _) => {
                checkpoints += 1;
                let doc = hx.document(&test_uri).await;
                let saved = message["params"]["text"].as_str().unwrap();
                assert_eq!(doc["text"], saved);
                assert_eq!(doc["dirty"], false, "{doc}");
                assert_eq!(doc["inSync"], true, "{doc}");
            }
            ("textDocument/didChange", Some(8)) => {
                checkpoints += 1;
                hx.wait_for_version(&test_uri, 8).await;
                let doc = hx.document(&test_uri).await;
                assert_eq!(
                    doc["text"],
                    "// applied by server\nHELLO first line alpha\nthird line gamma\nfourth line delta\n"
                );
            }
            _ => {}
        }
    }
    assert_eq!(
        checkpoints, 4,
        "every checkpoint of the session was reached"
    );
    let status = tokio::time::timeout(moonkale_tests::TIMEOUT, child.wait())
        .await
        .expect("the shim exits after exit")
        .unwrap();
    assert!(
        status.success(),
        "exit after shutdown is a clean exit: {status}"
    );
}
