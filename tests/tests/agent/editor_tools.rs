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
