//! End to end with the real `claude` CLI (2.1.332, interactive, under a
//! pty), offline: the real service, a scripted LSP editor on its socket, and
//! the fake Anthropic API (`moonkale_tests::fakeapi`). Each test shows one thing
//! reaching the model or the IDE through the whole chain.
//!
//! Needs `scripts/install-test-peers.sh` (or `MOONKALE_CLAUDE`) and the
//! workspace's binaries (`cargo build --workspace`).
//!
//! The CLI uses the IDE in a turn only if it was connected when the prompt
//! was submitted (else an Edit gets the terminal's own diff, not `openDiff`).
//! Before submitting, make the editor's cursor or selection show in the
//! CLI's prompt box with [`World::show_in_cli`]: that proves the connection
//! is up.
//!
//! Adding an `openDiff` test: [`edit_script`] makes the model read a file and
//! propose an `Edit`; with `diffTool: "auto"` (seeded) and
//! `--permission-mode default` (the [`ClaudeConfig`] default) the CLI sends
//! it to the service as `openDiff` and waits, while its own terminal dialog
//! ([`EDIT_QUESTION`]) shows in parallel (the IDE's answer closes it). The
//! editor gets the proposal ([`editor_request`] for `window/showDocument`)
//! and decides it (`workspace/executeCommand` `moonkale.acceptProposal` /
//! `moonkale.rejectProposal`). Accepted: [`edit_result`] is the Edit's tool
//! result ("…has been updated successfully…", plus "The user modified your
//! proposed changes…" when the editor changed the proposal) and the file on
//! disk has the accepted text; rejected: the screen shows [`REJECTED_TEXT`],
//! the file is unchanged and the CLI makes no further API request in that
//! turn. Checked against the service of 2026-11-29:
//!
//! ```ignore
//! let mut w = World::start(&[("hello.txt", "hello world\nsecond line\n")], Script::new()).await;
//! let path = w.path("hello.txt");
//! w.fake.set_script(edit_script("edit hello", &path, "hello world", "hello EDITED", "EDIT_DONE"));
//! let uri = w.open("hello.txt").await;
//! let mut cli = w.claude(&w.sb.workspace, |c| c).await;
//! w.show_in_cli(&mut cli, &uri, (0, 0), (0, 0), "⧉ In hello.txt").await;
//! cli.submit("edit hello", STEP).await;
//! w.ed.server_request("window/showDocument", TIMEOUT).await;
//! w.ed.call("workspace/executeCommand",
//!     json!({"command": "moonkale.acceptProposal", "arguments": []})).await;
//! assert!(edit_result(&w.fake).await.text.contains("has been updated successfully"));
//! cli.wait_for_text("EDIT_DONE", STEP).await;
//! assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello EDITED\nsecond line\n");
//! ```

use std::path::PathBuf;

use moonkale_tests::claude_cli::{Claude, REJECTED_TEXT, edit_script};
use moonkale_tests::fakeapi::{FakeApi, Recorded, Reply, Script};
use moonkale_tests::world::World;
use moonkale_tests::{STEP, TIMEOUT};
use serde_json::{Value, json};

/// The end of a long text, for failure messages.
fn tail(text: &str) -> String {
    let n = text.chars().count();
    text.chars().skip(n.saturating_sub(600)).collect()
}

/// The main request that carried the user's `prompt`.
async fn prompt_request(fake: &FakeApi, prompt: &str) -> Recorded {
    fake.wait_prompt(prompt, STEP).await
}

/// (1) A selection made in an attached LSP editor reaches the model: the
/// editor opens a file and reports a two-line selection
/// (`moonkale/selectionChanged`); the service pushes it to the connected
/// CLI as `selection_changed`; the CLI shows it in its prompt box and sends
/// exactly the selected text (and where it is) with the user's next prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selection_in_the_editor_reaches_the_model() {
    let source = "def main():\n    answer = compute_answer()\n    return answer  # SELECTION_END\nprint('not selected')\n";
    let mut w = World::start(
        &[("src/app.py", source)],
        Script::new().on_prompt("explain this", Reply::text("SELECTION_EXPLAINED")),
    )
    .await;
    let uri = w.open("src/app.py").await;
    // From "answer =" on line 2 to the end of "SELECTION_END" on line 3.
    let line3_end = source.lines().nth(2).unwrap().len() as u32;
    let (start, end) = ((1, 4), (2, line3_end));
    w.select(&uri, start, end).await;
    let mut cli = w.claude(&w.sb.workspace, |c| c).await;

    // The CLI got the selection from the service.
    w.show_in_cli(&mut cli, &uri, start, end, "⧉ 2 lines selected")
        .await;
    cli.submit("explain this", STEP).await;
    let req = prompt_request(&w.fake, "explain this").await;
    let turn = req.latest_turn_text();
    let selected = "answer = compute_answer()\n    return answer  # SELECTION_END";
    assert!(
        turn.contains(selected),
        "the selected text is not in the request: …{}",
        tail(&turn)
    );
    let path = w.path("src/app.py").display().to_string();
    assert!(
        turn.contains(&format!("lines 2 to 3 from {path}")),
        "the selection's place is not in the request: …{}",
        tail(&turn)
    );
    // Exactly the selection: the rest of the file is not sent.
    let body = req.body_text();
    assert!(!body.contains("def main") && !body.contains("not selected"));
    cli.wait_for_text("SELECTION_EXPLAINED", STEP).await;
}

/// (4) The model calls `mcp__ide__getDiagnostics`; the CLI asks the service
/// (`tools/call getDiagnostics`) and sends back, as the tool result, the
/// diagnostics the editor forwarded with `moonkale/publishDiagnostics`:
/// message, severity name, 0-based range, source and code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_reads_the_editors_diagnostics() {
    let mut w = World::start(
        &[("src/app.py", "import os\nx = undefined_name\n")],
        Script::new()
            .on_prompt(
                "what is wrong",
                Reply::tool_use("mcp__ide__getDiagnostics", json!({})),
            )
            .after_tool("mcp__ide__getDiagnostics", Reply::text("DIAGNOSTICS_READ")),
    )
    .await;
    let uri = w.open("src/app.py").await;
    w.ed.notify(
        "moonkale/publishDiagnostics",
        json!({"uri": uri, "source": "ruff", "diagnostics": [
            {"range": {"start": {"line": 0, "character": 7}, "end": {"line": 0, "character": 9}},
             "severity": 2, "message": "DIAG_ONE `os` imported but unused", "source": "ruff", "code": "F401"},
            {"range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 18}},
             "severity": 1, "message": "DIAG_TWO undefined name", "source": "ruff", "code": "F821"}]}),
    )
    .await;
    w.cursor(&uri, (1, 4)).await;
    // Allowed up front: in default mode an MCP tool call otherwise waits for
    // the terminal's "Do you want to proceed?".
    let mut cli = w
        .claude(&w.sb.workspace, |c| {
            c.arg("--allowedTools").arg("mcp__ide__getDiagnostics")
        })
        .await;
    w.show_in_cli(&mut cli, &uri, (1, 4), (1, 4), "⧉ In app.py")
        .await;
    cli.submit("what is wrong", STEP).await;

    let (_, result) = w
        .fake
        .wait_tool_result("mcp__ide__getDiagnostics", STEP)
        .await;
    assert!(!result.is_error, "getDiagnostics failed: {}", result.text);
    let files: Value = serde_json::from_str(&result.text)
        .unwrap_or_else(|e| panic!("the tool result is not JSON ({e}): {}", result.text));
    let entry = files
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["uri"] == uri.as_str()))
        .unwrap_or_else(|| panic!("no entry for {uri} in {files:#}"));
    let by_message = |m: &str| {
        entry["diagnostics"]
            .as_array()
            .and_then(|ds| ds.iter().find(|d| d["message"] == m).cloned())
            .unwrap_or_else(|| panic!("no diagnostic {m:?} in {entry:#}"))
    };
    let one = by_message("DIAG_ONE `os` imported but unused");
    assert_eq!(
        (&one["severity"], &one["source"], &one["code"]),
        (&json!("Warning"), &json!("ruff"), &json!("F401"))
    );
    assert_eq!(
        one["range"],
        json!({"start": {"line": 0, "character": 7}, "end": {"line": 0, "character": 9}})
    );
    let two = by_message("DIAG_TWO undefined name");
    assert_eq!(
        (&two["severity"], &two["code"]),
        (&json!("Error"), &json!("F821"))
    );
    cli.wait_for_text("DIAGNOSTICS_READ", STEP).await;
}

/// (5) A plain `claude --ide`, without `CLAUDE_CODE_SSE_PORT`, started in a
/// folder inside the workspace, finds the service through the lock file
/// alone (its `workspaceFolders` contain the cwd; another IDE's lock for
/// another folder is passed over) and connects: the editor's selection
/// shows in the CLI and reaches the model, and the IDE's tools are offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_ide_flag_finds_the_service_by_its_lock_file() {
    let mut w = World::start(
        &[(
            "src/lib.rs",
            "pub fn found_by_lock_file() -> u8 {\n    7\n}\n",
        )],
        Script::new().on_prompt("which function", Reply::text("FOUND_IT")),
    )
    .await;
    // Another (live) IDE's lock for a folder that does not hold the cwd.
    let elsewhere = w.sb.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let decoy = json!({"pid": std::process::id(), "workspaceFolders": [elsewhere], "ideName": "Decoy",
                       "transport": "ws", "runningInWindows": false, "authToken": "decoy-token"});
    std::fs::write(w.sb.home.join(".claude/ide/1.lock"), decoy.to_string()).unwrap();
    let uri = w.open("src/lib.rs").await;
    // "fn found_by_lock_file"
    w.select(&uri, (0, 4), (0, 25)).await;

    let cwd = w.path("src");
    let mut cli = w
        .claude(&cwd, |mut c| {
            c.sse_port = None;
            c.arg("--ide")
        })
        .await;
    assert!(
        !cli.process_env()
            .iter()
            .any(|(k, _)| k.starts_with("CLAUDE_CODE_SSE_PORT")),
        "the CLI must find the IDE by the lock file alone"
    );
    w.show_in_cli(&mut cli, &uri, (0, 4), (0, 25), "⧉ 1 line selected")
        .await;
    cli.submit("which function", STEP).await;
    let req = prompt_request(&w.fake, "which function").await;
    let turn = req.latest_turn_text();
    let path = w.path("src/lib.rs").display().to_string();
    assert!(
        turn.contains(&format!(
            "lines 1 to 1 from {path}:\nfn found_by_lock_file\n"
        )),
        "the selection did not reach the model: …{}",
        tail(&turn)
    );
    // The IDE's model-visible tool is offered (2.1.332 defers it: named in
    // the system message for ToolSearch rather than in `tools`).
    assert!(req.body_text().contains("mcp__ide__getDiagnostics"));
    cli.wait_for_text("FOUND_IT", STEP).await;
}

/// The start of an edit turn: `hello.txt` open in the editor, the CLI
/// connected and asked to edit it; returns once the proposal reached the
/// editor (its `window/showDocument`), with the CLI and the file's path.
async fn edit_turn_until_the_proposal_shows(w: &mut World) -> (Claude, PathBuf, Value) {
    let path = w.path("hello.txt");
    w.fake.set_script(edit_script(
        "edit hello",
        &path,
        "hello world",
        "hello EDITED",
        "EDIT_DONE",
    ));
    let uri = w.open("hello.txt").await;
    let mut cli = w.claude(&w.sb.workspace, |c| c).await;
    w.show_in_cli(&mut cli, &uri, (0, 0), (0, 0), "⧉ In hello.txt")
        .await;
    cli.submit("edit hello", STEP).await;
    let show = w.ed.server_request("window/showDocument", TIMEOUT).await;
    (cli, path, show)
}

/// (2) The model's Edit reaches the editor as a proposal (`openDiff` →
/// `window/showDocument` of the proposal document); the user tweaks the
/// proposal in the editor and accepts it there: the CLI writes the tweaked
/// text to disk and tells the model the user modified its change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_accepted_in_the_editor_with_a_tweak() {
    let mut w = World::start(
        &[("hello.txt", "hello world\nsecond line\n")],
        Script::new(),
    )
    .await;
    let (mut cli, path, show) = edit_turn_until_the_proposal_shows(&mut w).await;
    w.tweak_and_accept(&show).await;
    w.assert_tweak_landed(&mut cli, &path, "has been updated successfully")
        .await;
}

/// (3) The user rejects the proposal in the editor: the file on disk is
/// unchanged, the CLI reports the rejection and asks the model nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_rejected_in_the_editor() {
    let mut w = World::start(
        &[("hello.txt", "hello world\nsecond line\n")],
        Script::new(),
    )
    .await;
    let (mut cli, path, _) = edit_turn_until_the_proposal_shows(&mut w).await;
    let requests_before = w.fake.requests().len();
    w.ed.call(
        "workspace/executeCommand",
        json!({"command": "moonkale.rejectProposal", "arguments": []}),
    )
    .await;
    cli.wait_for_text(REJECTED_TEXT, STEP).await;
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "hello world\nsecond line\n"
    );
    assert_eq!(
        w.fake.requests().len(),
        requests_before,
        "no further request to the model after a rejection"
    );
}

/// The fake API itself, without the CLI: a chunked streaming request gets
/// the SSE sequence the CLI parses (tool input split over deltas), a side
/// request gets a stub fitting its JSON schema, CONNECT is refused, and
/// everything is recorded.
#[tokio::test]
async fn fake_api_streams_and_records() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fake = FakeApi::start(Script::new().on_prompt(
        "hi",
        Reply::text("hello").and_tool_use("Read", json!({"file_path": "/x"})),
    ))
    .await;
    let exchange = |request: Vec<u8>| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", fake.port))
            .await
            .unwrap();
        s.write_all(&request).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(STEP, s.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8(out).unwrap()
    };
    let body = json!({"model": "m", "stream": true, "tools": [{"name": "Read"}],
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    .to_string();
    let (a, b) = body.split_at(10);
    let chunked = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let sse = exchange(chunked.into_bytes()).await;
    assert!(sse.starts_with("HTTP/1.1 200 OK\r\n"), "{sse}");
    let events: Vec<&str> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"message_start"));
    assert_eq!(events.last(), Some(&"message_stop"));
    let partial: String = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|d| d["delta"]["partial_json"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&partial).unwrap(),
        json!({"file_path": "/x"})
    );
    assert!(sse.contains(r#""stop_reason":"tool_use""#));

    let side = json!({"model": "m", "stream": false, "messages": [],
                      "output_config": {"format": {"type": "json_schema", "schema": {
                          "type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}}}})
    .to_string();
    let answer = exchange(
        format!(
            "POST /v1/messages HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{side}",
            side.len()
        )
        .into_bytes(),
    )
    .await;
    let json_body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let title: Value =
        serde_json::from_str(json_body["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(title, json!({"title": "Fake title"}));

    let refused =
        exchange(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".to_vec())
            .await;
    assert!(refused.starts_with("HTTP/1.1 403"));

    let log = fake.requests();
    assert_eq!(log.len(), 3);
    assert_eq!((log[0].turn, log[0].rule.as_str()), (1, "prompt \"hi\""));
    assert_eq!(log[0].latest_user_text(), "hi");
    assert_eq!(fake.outside_attempts(), ["example.com:443"]);
}

/// The model, asked "edit greek", proposes two hunks for `greek.txt`
/// (alpha and delta in capitals); the user's cursor is in `cursor_in`,
/// opened in the first editor, and the CLI is asked. The CLI and the
/// file's path.
async fn greek_turn(w: &mut World, cursor_in: &str) -> (Claude, PathBuf) {
    let path = w.path("greek.txt");
    w.fake.set_script(edit_script(
        "edit greek",
        &path,
        "alpha\nbeta\ngamma\ndelta",
        "ALPHA\nbeta\ngamma\nDELTA",
        "EDIT_DONE",
    ));
    let uri = w.open(cursor_in).await;
    let mut cli = w.claude(&w.sb.workspace, |c| c).await;
    w.show_in_cli(&mut cli, &uri, (0, 0), (0, 0), &format!("⧉ In {cursor_in}"))
        .await;
    cli.submit("edit greek", STEP).await;
    (cli, path)
}

/// (4) An editor with no plugin (Helix) reviews a proposal hunk by hunk:
/// one that cannot show the proposal document sees each hunk as a
/// diagnostic on the file itself, one that can sees them on the proposal
/// (each naming the lines it replaces); the user keeps the first hunk and
/// reverts the second with code actions, and the CLI writes exactly the
/// kept change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_editor_keeps_one_hunk_and_reverts_the_other() {
    let text = "alpha\nbeta\ngamma\ndelta\nepsilon\n";
    let mut w = World::builder()
        .editor("helix", moonkale_tests::lsp::plain_caps())
        .file("greek.txt", text)
        .start()
        .await;
    let shows = json!({"general": {"positionEncodings": ["utf-16"]},
                       "window": {"showDocument": {"support": true}}});
    let mut other = w.client("shows-documents", shows).await;
    let (mut cli, path) = greek_turn(&mut w, "greek.txt").await;
    let uri = w.sb.uri("greek.txt");

    // The editor that cannot show documents: the hunks on greek.txt.
    let on_target =
        w.ed.take("two hunk diagnostics on greek.txt", TIMEOUT, |m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri.as_str()
                && m["params"]["diagnostics"]
                    .as_array()
                    .is_some_and(|d| d.len() == 2)
        })
        .await;
    let diags = &on_target["params"]["diagnostics"];
    assert_eq!(diags[0]["source"], "claude");
    assert_eq!(diags[0]["range"]["start"]["line"], 0);
    assert!(
        diags[0]["message"]
            .as_str()
            .unwrap()
            .contains("for line 1:\n+ ALPHA"),
        "{diags}"
    );
    assert_eq!(diags[1]["range"]["start"]["line"], 3);
    assert!(
        diags[1]["message"]
            .as_str()
            .unwrap()
            .contains("for line 4:\n+ DELTA"),
        "{diags}"
    );
    // The one that can: on the proposal document, naming what they replace.
    let on_proposal = other
        .take("hunk diagnostics on the proposal", TIMEOUT, |m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"]
                    .as_str()
                    .is_some_and(|u| u.contains(moonkale_tests::PROPOSALS))
        })
        .await;
    let diags = &on_proposal["params"]["diagnostics"];
    assert_eq!(diags.as_array().unwrap().len(), 2, "{diags}");
    assert!(
        diags[0]["message"]
            .as_str()
            .unwrap()
            .contains("replacing line 1 of the file:\n- alpha"),
        "{diags}"
    );
    assert!(
        diags[1]["message"]
            .as_str()
            .unwrap()
            .contains("replacing line 4 of the file:\n- delta"),
        "{diags}"
    );

    // Keep the first hunk, revert the second, with the code actions on the
    // file, as Helix's code-action menu would.
    let run = |action: &Value| json!({"command": action["command"]["command"], "arguments": action["command"]["arguments"]});
    let actions =
        w.ed.call(
            "textDocument/codeAction",
            json!({
        "textDocument": {"uri": uri}, "context": {"diagnostics": []},
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}}),
        )
        .await;
    let keep = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"].as_str().unwrap().starts_with("Keep this change"))
        .unwrap_or_else(|| panic!("no Keep action: {actions}"))
        .clone();
    w.ed.call("workspace/executeCommand", run(&keep)).await;
    let actions =
        w.ed.call(
            "textDocument/codeAction",
            json!({
        "textDocument": {"uri": uri}, "context": {"diagnostics": []},
        "range": {"start": {"line": 3, "character": 0}, "end": {"line": 3, "character": 0}}}),
        )
        .await;
    let revert = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| {
            a["title"]
                .as_str()
                .unwrap()
                .starts_with("Revert this change")
        })
        .unwrap_or_else(|| panic!("no Revert action: {actions}"))
        .clone();
    w.ed.call("workspace/executeCommand", run(&revert)).await;

    // Nothing is left to decide: accepted with exactly the kept hunk.
    moonkale_tests::claude_cli::assert_modified_edit_landed(
        &w.fake,
        &mut cli,
        &path,
        "ALPHA\nbeta\ngamma\ndelta\nepsilon\n",
    )
    .await;
    // And the diagnostics are gone.
    w.ed.take("the diagnostics cleared", TIMEOUT, |m| {
        m["method"] == "textDocument/publishDiagnostics"
            && m["params"]["uri"] == uri.as_str()
            && m["params"]["diagnostics"]
                .as_array()
                .is_some_and(|d| d.is_empty())
    })
    .await;
}

/// (5) An LSP editor with no `window/showDocument` (it answers the request
/// with a null result) that keeps diagnostics only for documents it has
/// open: the announcement names the file and the code actions; once the
/// user opens the file after the proposal arrived, it shows one diagnostic
/// per hunk; "Accept Claude Code's edit to …" there gives Claude Code
/// `FILE_SAVED`, and the CLI writes exactly the proposal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_without_show_document_sees_the_proposal_on_the_file_it_opens() {
    let text = "alpha\nbeta\ngamma\ndelta\nepsilon\n";
    let mut w = World::builder()
        .editor("plain-no-show-document", moonkale_tests::lsp::plain_caps())
        .file("greek.txt", text)
        .file("notes.txt", "where the cursor is\n")
        .start()
        .await;
    // The user's cursor is in another file; greek.txt is not open.
    let (mut cli, path) = greek_turn(&mut w, "notes.txt").await;
    let uri = w.sb.uri("greek.txt");

    let show = w.ed.server_request("window/showDocument", TIMEOUT).await;
    w.ed.respond(&show["id"], Value::Null).await;
    let told =
        w.ed.take("the proposal announced", TIMEOUT, |m| {
            m["method"] == "window/showMessage"
                && m["params"]["message"]
                    .as_str()
                    .is_some_and(|t| t.contains("Claude Code proposes"))
        })
        .await;
    let told = told["params"]["message"].as_str().unwrap();
    assert!(
        told.contains("2 changes to greek.txt")
            && told.contains("\"Accept Claude Code's edit to greek.txt\"")
            && told.contains("\"Reject Claude Code's edit to greek.txt\""),
        "{told}"
    );
    w.ed.barrier().await;

    // The user opens the file: whatever came before is not shown there.
    w.ed.ignore_received();
    w.ed.did_open(&uri, 1, text).await;
    let diags =
        w.ed.take_diagnostics("one hunk diagnostic per change on greek.txt", &uri)
            .await;
    assert_eq!(diags.len(), 2, "{diags:?}");
    assert_eq!(diags[0]["range"]["start"]["line"], 0);
    assert!(
        diags[0]["message"].as_str().unwrap().contains("+ ALPHA"),
        "{diags:?}"
    );
    assert_eq!(diags[1]["range"]["start"]["line"], 3);
    assert!(
        diags[1]["message"].as_str().unwrap().contains("+ DELTA"),
        "{diags:?}"
    );

    w.ed.run_code_action(&uri, |t| t == "Accept Claude Code's edit to greek.txt")
        .await;
    let result = moonkale_tests::claude_cli::edit_result(&w.fake).await;
    assert!(!result.is_error, "{}", result.text);
    assert!(
        result.text.contains("has been updated successfully")
            && !result.text.contains("The user modified"),
        "{}",
        result.text
    );
    cli.wait_for_text("EDIT_DONE", STEP).await;
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "ALPHA\nbeta\ngamma\nDELTA\nepsilon\n"
    );
}

/// (6) A repository cannot switch review off: whatever it ships at
/// `.moonkale` (a file, a FIFO, a read-only folder, a symlink out of the
/// workspace or to an unwritable file), the real CLI's Edit is shown in the
/// editor, tweaked and accepted as usual. Proposals are written outside the
/// workspace, so the planted thing is neither used nor changed, and nothing
/// is written where a symlink points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_repository_ships_at_moonkale_does_not_stop_review() {
    for kind in moonkale_tests::PlantedMoonkale::ALL {
        eprintln!("planted .moonkale: {kind:?}");
        let sb = moonkale_tests::Sandbox::new();
        let outside = tempfile::tempdir().unwrap();
        kind.plant(&sb.workspace, outside.path());
        let planted = std::fs::symlink_metadata(sb.workspace.join(".moonkale")).unwrap();
        let mut w = World::builder()
            .in_sandbox(sb)
            .file("hello.txt", "hello world\nsecond line\n")
            .start()
            .await;
        let (mut cli, path, show) = edit_turn_until_the_proposal_shows(&mut w).await;
        w.tweak_and_accept(&show).await;
        w.assert_tweak_landed(&mut cli, &path, "has been updated successfully")
            .await;
        let after = std::fs::symlink_metadata(w.sb.workspace.join(".moonkale")).unwrap();
        assert_eq!(
            (after.file_type(), after.len()),
            (planted.file_type(), planted.len()),
            "{kind:?}: the planted .moonkale was changed"
        );
        let leaked: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
        assert!(leaked.is_empty(), "{kind:?}: written outside: {leaked:?}");
    }
}
