//! Bounds (issue 12): what editors forward is counted and capped, and long
//! answers to Claude Code are truncated with a note instead of costing the
//! client its connection.

use moonkale_tests::{IdeClient, RawLsp, Sandbox, ide_lock, rss_kib, tool_json};
use serde_json::{Value, json};

/// The answers' cap (`hub::workspace::ide::MAX_ANSWER_BYTES`).
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Publishes the serialized diagnostics `list` for `uri` (the bodies are
/// large: the list is built once and sent as it is).
async fn publish(ed: &mut RawLsp, uri: &str, list: &str) {
    let body = format!(
        r#"{{"jsonrpc":"2.0","method":"moonkale/publishDiagnostics","params":{{"uri":{},"source":"tsc","diagnostics":{list}}}}}"#,
        json!(uri)
    );
    let frame = format!("Content-Length: {}\r\n\r\n{body}", body.len());
    ed.send_bytes(frame.as_bytes()).await;
}

/// `count` error diagnostics with `message`, as a JSON array.
fn diagnostics(count: usize, message: &str) -> String {
    let items: Vec<Value> = (0..count)
        .map(|i| json!({"range": {"start": {"line": i, "character": 0}, "end": {"line": i, "character": 5}},
                        "severity": 1, "message": message}))
        .collect();
    serde_json::to_string(&items).unwrap()
}

/// What the service told `ed` with `window/logMessage` (its refusals).
fn log_messages(ed: &moonkale_tests::RawLsp) -> Vec<String> {
    ed.notifications
        .iter()
        .filter(|m| m["method"] == "window/logMessage")
        .map(|m| m["params"]["message"].as_str().unwrap().to_owned())
        .collect()
}

fn texts(result: &Value) -> Vec<String> {
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Defect: 48 000 diagnostics made one `getDiagnostics` answer larger than
/// the IDE WebSocket's outgoing cap, and Claude Code was dropped instead of
/// answered. Now the answer is at most 1 MiB of JSON with a note saying what
/// was left out, the client stays connected, and `getOpenEditors` over many
/// documents is bounded the same way.
#[tokio::test]
async fn get_diagnostics_of_48_000_is_truncated_and_keeps_the_client() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let (port, lock) = ide_lock(&sb, &svc);
    let mut c = IdeClient::connect(port, lock["authToken"].as_str().unwrap()).await;
    c.initialize("2025-11-25").await;
    let mut ed = svc.connect().await;
    ed.initialize("forwarder", &["utf-16"], Value::Null).await;
    let list = diagnostics(9_600, &"e".repeat(600));
    for f in 0..5 {
        publish(&mut ed, &sb.uri(&format!("gen/f{f}.ts")), &list).await;
    }
    ed.barrier().await;
    let refusals: Vec<&Value> = ed
        .notifications
        .iter()
        .filter(|m| m["method"] == "window/logMessage")
        .collect();
    assert!(refusals.is_empty(), "all 48 000 are kept: {refusals:?}");

    let result = c.tool("getDiagnostics", json!({})).await;
    let texts = texts(&result);
    assert_eq!(texts.len(), 2, "the listing and a note");
    assert!(texts[0].len() <= MAX_ANSWER_BYTES, "{}", texts[0].len());
    let files = tool_json(&result);
    let shown: usize = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["diagnostics"].as_array().unwrap().len())
        .sum();
    assert!(shown > 0 && shown < 48_000, "{shown}");
    assert!(
        texts[1].starts_with("Truncated") && texts[1].contains(&format!("{shown} of 48000")),
        "{}",
        texts[1]
    );
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
    let one = c
        .tool("getDiagnostics", json!({"uri": sb.uri("gen/f1.ts")}))
        .await;
    assert_eq!(tool_json(&one)[0]["uri"], sb.uri("gen/f1.ts"));

    // Many open documents with long names.
    let long = "n".repeat(200);
    for i in 0..2_000 {
        ed.did_open(&sb.uri(&format!("{long}/{i}.txt")), 1, "")
            .await;
    }
    ed.barrier().await;
    let editors = c.tool("getOpenEditors", json!({})).await;
    let texts = self::texts(&editors);
    assert!(texts[0].len() <= MAX_ANSWER_BYTES, "{}", texts[0].len());
    let tabs = tool_json(&editors)["tabs"].as_array().unwrap().len();
    assert!(tabs > 0 && tabs < 2_000, "{tabs}");
    assert!(
        texts[1].contains(&format!("{tabs} of 2000 open documents")),
        "{}",
        texts[1]
    );
    assert_eq!(c.request("ping", Value::Null).await["result"], json!({}));
}

/// Defect: diagnostics had no byte cap and did not count toward the
/// workspace's, so an editor could make the service hold any amount. Now a
/// publish over the cap (64 MiB) is refused with a `window/logMessage`, the
/// service's memory grows by not much more than the cap while an editor
/// forwards about 180 MB, and the editor goes on working.
#[tokio::test]
async fn diagnostics_over_the_byte_cap_are_refused_and_memory_stays_bounded() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let mut ed = svc.connect().await;
    ed.initialize("flooder", &["utf-16"], Value::Null).await;
    ed.barrier().await;
    let before = rss_kib(svc.pid());
    let list = diagnostics(10_000, &"w".repeat(1_200));
    for f in 0..12 {
        publish(&mut ed, &sb.uri(&format!("gen/f{f}.ts")), &list).await;
    }
    ed.barrier().await;
    let after = rss_kib(svc.pid());
    let refusals = log_messages(&ed);
    assert!(!refusals.is_empty(), "nothing was refused");
    assert!(
        refusals
            .iter()
            .all(|r| r.contains("refused") && r.contains("bytes")),
        "{refusals:?}"
    );
    let status = sb.status().await;
    let kept = status["diagnostics"].as_array().unwrap().len();
    assert_eq!(kept + refusals.len(), 12, "{status}");
    assert!(status["totalBytes"].as_u64().unwrap() <= 64 << 20);
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 64 + 96,
        "the service grew by {grown_mib} MiB for a 64 MiB cap"
    );

    let uri = sb.uri("still.txt");
    ed.did_open(&uri, 1, "works").await;
    assert_eq!(ed.document(&uri).await["text"], "works");
}

/// Defect (issue 25): one `replace_all` Edit of a 3.3 MiB file with
/// 120 000 changed lines became a change set of 120 000 hunks and a
/// `publishDiagnostics` of 120 000 hints per editor: the service went from
/// 9 MiB to 1.3 GiB. The hosted agent (the real CLI, `acceptEdits`) makes
/// that edit; the set has at most 256 hunks, each of two editors gets at
/// most 100 diagnostics for the file (the last one saying how many more
/// there are), and the service's peak memory stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replace_all_over_a_large_file_stays_small() {
    use moonkale_tests::fakeapi::{Reply, Script};
    const LINES: usize = 120_000;
    let big: String = (0..LINES)
        .map(|i| format!("let value_{i:06} = old_name_{i:06};\n"))
        .collect();
    assert!(big.len() > 3 << 20);
    let mut w = moonkale_tests::world::World::builder()
        .agent()
        .file("big.txt", big.clone())
        .start()
        .await;
    let mut other = w
        .client("second-editor", moonkale_tests::lsp::plain_caps())
        .await;
    let path = w.path("big.txt").display().to_string();
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "rename everything",
                // The CLI edits only files read in the session; a part is enough.
                Reply::tool_use("Read", json!({"file_path": path, "offset": 1, "limit": 5})),
            )
            .after_tool(
                "Read",
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": path, "old_string": "old_name", "new_string": "new_name", "replace_all": true}),
                ),
            )
            .after_tool("Edit", Reply::text("RENAMED")),
    );
    w.ed.run_first_turn(
        "rename everything",
        json!({"permissionMode": "acceptEdits"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(w.path("big.txt")).unwrap(),
        big.replace("old_name", "new_name"),
        "the CLI did not make the edit"
    );
    let root = w.sb.workspace.clone();
    let (set, _) = moonkale_tests::review::finished_set(&mut w.ed, &root).await;
    let shown =
        w.ed.call("moonkale/changes/show", json!({"set": set}))
            .await;
    let hunks = shown["files"][0]["hunks"].as_array().unwrap().len();
    assert!((1..=256).contains(&hunks), "{hunks} hunks");
    let uri = w.sb.uri("big.txt");
    for ed in [&mut w.ed, &mut other] {
        ed.did_open(&uri, 1, &big.replace("old_name", "new_name"))
            .await;
        let count = ed
            .take_diagnostics("the change hints on big.txt", &uri)
            .await
            .len();
        assert!(count <= 100, "{count} diagnostics");
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", w.svc().pid())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    eprintln!("the service peaked at {} MiB", peak_kib / 1024);
    assert!(
        peak_kib < 200 * 1024,
        "the service peaked at {} MiB",
        peak_kib / 1024
    );
}

/// Memory (issue 25): every byte one editor makes the service hold is
/// counted. With a 16 MiB workspace cap, one editor opens 20 000 empty
/// documents under long names (their text counts nothing; their names and
/// bookkeeping do), parks 3 000 `waitForVersion` calls, publishes small
/// diagnostics for 3 000 documents and moves its selection over 500 long
/// names: the refusals name the cap, and the service grows by at most the
/// cap and 10 %.
#[tokio::test]
async fn one_editor_cannot_make_the_service_hold_more_than_the_cap() {
    const CAP: usize = 16 << 20;
    let sb = Sandbox::new();
    let cap = CAP.to_string();
    let svc = sb
        .start_service_with_env(&[], &[("MOONKALE_MAX_WORKSPACE_BYTES", &cap)])
        .await;
    let mut ed = svc.connect().await;
    ed.initialize("hoarder", &["utf-16"], Value::Null).await;
    ed.barrier().await;
    let before = rss_kib(svc.pid());
    let long = "n".repeat(300);
    for i in 0..20_000 {
        ed.did_open(&sb.uri(&format!("{long}/{i}.txt")), 1, "")
            .await;
    }
    for i in 0..3_000 {
        let uri = sb.uri(&format!("{long}/wait-{i}.txt"));
        ed.send(
            json!({"jsonrpc": "2.0", "id": 100_000 + i, "method": "moonkale/waitForVersion",
                       "params": {"uri": uri, "version": 7}}),
        )
        .await;
    }
    for i in 0..3_000 {
        let uri = sb.uri(&format!("{long}/diag-{i}.txt"));
        publish(&mut ed, &uri, &diagnostics(1, "small")).await;
    }
    for i in 0..500 {
        let uri = sb.uri(&format!("{long}/sel-{i}.txt"));
        ed.notify(
            "moonkale/selectionChanged",
            json!({"textDocument": {"uri": uri}, "cursor": {"line": 0, "character": 0}}),
        )
        .await;
    }
    ed.barrier().await;
    let after = rss_kib(svc.pid());
    let refusals = log_messages(&ed);
    assert!(
        refusals
            .iter()
            .any(|r| r.contains("didOpen") && r.contains("cap of 16 MiB")),
        "{:?}",
        &refusals[..refusals.len().min(3)]
    );
    let status = sb.status().await;
    assert!(
        status["totalBytes"].as_u64().unwrap() as usize <= CAP,
        "{}",
        status["totalBytes"]
    );
    let grown = after.saturating_sub(before) as usize * 1024;
    eprintln!(
        "the service grew by {} KiB for a {} KiB cap",
        grown >> 10,
        CAP >> 10
    );
    assert!(
        grown <= CAP + CAP / 10,
        "the service grew by {} KiB for a {} KiB cap",
        grown >> 10,
        CAP >> 10
    );
    // Closing documents makes room again: the editor goes on working.
    for i in 0..100 {
        let uri = sb.uri(&format!("{long}/{i}.txt"));
        ed.notify(
            "textDocument/didClose",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    }
    let uri = sb.uri("still.txt");
    ed.did_open(&uri, 1, "works").await;
    assert_eq!(ed.document(&uri).await["text"], "works");
}
