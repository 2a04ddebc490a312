//! The service's editor tools, called by the model through the CLI.

use moonkale_tests::STEP;
use moonkale_tests::agent::describe_events;
use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::world::World;
use serde_json::json;

/// The model calls the service's editor tools through the CLI: `readBuffer`
/// returns the editor's unsaved text, `getDiagnostics` what the editor
/// published, `getCurrentSelection` its selection. Nothing is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_reads_an_unsaved_buffer_through_the_editor_tools() {
    let mut w = World::builder()
        .agent()
        .file("notes.txt", "SAVED_ON_DISK\n")
        .start()
        .await;
    let path = w.path("notes.txt");
    let uri = w.sb.uri("notes.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "read my buffer",
                Reply::tool_use(
                    "mcp__moonkale__readBuffer",
                    json!({"filePath": path.display().to_string()}),
                ),
            )
            .after_tool(
                "mcp__moonkale__readBuffer",
                Reply::tool_use("mcp__moonkale__getDiagnostics", json!({"uri": uri})),
            )
            .after_tool(
                "mcp__moonkale__getDiagnostics",
                Reply::tool_use("mcp__moonkale__getCurrentSelection", json!({})),
            )
            .after_tool(
                "mcp__moonkale__getCurrentSelection",
                Reply::text("TOOLS_DONE"),
            ),
    );
    w.ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "text", "version": 1, "text": "SAVED_ON_DISK\n"}}),
    )
    .await;
    w.ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2},
               "contentChanges": [{"text": "UNSAVED_EDIT_7f3a\nsecond line\n"}]}),
    )
    .await;
    w.publish_diagnostic(&uri, 1, "DIAG_FROM_THE_EDITOR").await;
    w.ed.notify(
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": uri}, "selection": {
            "start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 12}}}),
    )
    .await;
    w.ed.barrier().await;

    let (session, _) = w.ed.run_first_turn("read my buffer", json!({})).await;
    let (_, buffer) = w
        .fake
        .wait_tool_result("mcp__moonkale__readBuffer", STEP)
        .await;
    assert!(!buffer.is_error, "readBuffer failed: {}", buffer.text);
    assert!(
        buffer.text.contains("UNSAVED_EDIT_7f3a") && !buffer.text.contains("SAVED_ON_DISK"),
        "readBuffer did not return the unsaved text: {}",
        buffer.text
    );
    let (_, diags) = w
        .fake
        .wait_tool_result("mcp__moonkale__getDiagnostics", STEP)
        .await;
    assert!(
        !diags.is_error && diags.text.contains("DIAG_FROM_THE_EDITOR"),
        "getDiagnostics: {}",
        diags.text
    );
    let (_, selection) = w
        .fake
        .wait_tool_result("mcp__moonkale__getCurrentSelection", STEP)
        .await;
    assert!(
        !selection.is_error && selection.text.contains("UNSAVED_EDIT"),
        "getCurrentSelection: {}",
        selection.text
    );
    let (events, page) = w.ed.all_events(&session, 1000).await;
    assert!(
        !events.iter().any(|e| e["kind"] == "approval"),
        "an editor tool asked:\n{}",
        describe_events(&page)
    );
}

/// A session started with no editor attached (from a front end: an ACP
/// panel, the command line) gives its CLI no editor tools: they would show
/// nothing, and each CLI pays CPU for them. An editor attaching while the
/// CLI runs brings them: the next turn's `getDiagnostics` gets the editor's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editor_tools_come_to_a_running_session_when_an_editor_attaches() {
    let mut w = World::builder()
        .agent()
        .observer()
        .file("notes.txt", "one\ntwo\n")
        .start()
        .await;
    let uri = w.sb.uri("notes.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt("hello", Reply::text("HELLO_DONE"))
            .on_prompt(
                "what does my editor say",
                Reply::tool_use("mcp__moonkale__getDiagnostics", json!({"uri": uri})),
            )
            .after_tool("mcp__moonkale__getDiagnostics", Reply::text("DIAGS_READ")),
    );
    let (session, _) = w.ed.run_first_turn("hello", json!({})).await;
    let pids = w.cli_pids();
    assert_eq!(pids.len(), 1, "one CLI runs the session: {pids:?}");
    let argv = std::fs::read(format!("/proc/{}/cmdline", pids[0])).unwrap();
    let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
    assert!(
        argv.contains("--mcp-config") && !argv.contains("moonkale"),
        "no editor, yet the CLI was given the editor tools: {argv}"
    );

    let mut editor = w.client("editor-b", json!({})).await;
    editor
        .notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "text", "version": 1, "text": "one\ntwo\n"}}),
        )
        .await;
    editor
        .notify(
            "moonkale/publishDiagnostics",
            json!({"uri": uri, "source": "lint", "diagnostics": [
                {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 3}},
                 "severity": 1, "message": "DIAG_OF_THE_LATE_EDITOR", "source": "lint"}]}),
        )
        .await;
    editor.barrier().await;

    let seq = w.ed.send_prompt(&session, "what does my editor say").await;
    let (_, diags) = w
        .fake
        .wait_tool_result("mcp__moonkale__getDiagnostics", STEP)
        .await;
    assert!(
        !diags.is_error && diags.text.contains("DIAG_OF_THE_LATE_EDITOR"),
        "getDiagnostics: {}",
        diags.text
    );
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(
        w.cli_pids(),
        pids,
        "the same CLI took the tools (no restart)"
    );
}
