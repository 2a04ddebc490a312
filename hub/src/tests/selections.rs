//! The five selection sources, which editor is active, and the
//! `selection_changed` payload Claude Code connections follow (the
//! `selection` watch, `getLatestSelection`).

use expect_test::expect;
use serde_json::json;

use super::harness::{Caps, World};
use crate::core::PositionEncoding;

const A: &str = "file:///w/a.rs";
const B: &str = "file:///w/b.rs";

fn pos(line: u32, character: u32) -> serde_json::Value {
    json!({"line": line, "character": character})
}

#[test]
fn each_source_sets_the_selection() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::BUTTONS);
    w.did_open(1, A, 1, "héllo wörld\nsecond line\n");
    // The plugin's notification: a range and the cursor at one of its ends.
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "selection": {"start": pos(0, 0), "end": pos(0, 5)}, "cursor": pos(0, 0)}),
    );
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "selection": {"start": pos(0, 6), "end": pos(1, 6)}}),
    );
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "cursor": pos(1, 3)}),
    );
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}}),
    );
    // Requests that carry a position.
    for method in [
        "textDocument/hover",
        "textDocument/definition",
        "textDocument/references",
    ] {
        w.request(
            1,
            method,
            json!({"textDocument": {"uri": A}, "position": pos(1, 1)}),
        );
    }
    // A code action's range.
    w.code_actions(1, "untitled:Untitled-1", (0, 0), (0, 2));
    w.request(1, "textDocument/codeAction", json!({"textDocument": {"uri": A}, "range": {"start": pos(1, 0), "end": pos(0, 0)}, "context": {"diagnostics": []}}));
    // An edit puts the cursor at its end.
    w.notify(
        1,
        "textDocument/didChange",
        json!({"textDocument": {"uri": A, "version": 2}, "contentChanges": [
            {"range": {"start": pos(1, 0), "end": pos(1, 0)}, "text": "a "}
        ]}),
    );
    w.status();
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"héllo wörld\nsecond line\n","uri":"file:///w/a.rs","version":1}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":0},"selection":{"end":{"character":5,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":5,"line":0},"isEmpty":false,"start":{"character":0,"line":0}},"text":"héllo"}
        > ed1 moonkale/selectionChanged {"selection":{"end":{"character":6,"line":1},"start":{"character":6,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":6,"line":1},"isEmpty":false,"start":{"character":6,"line":0}},"text":"wörld\nsecond"}
        > ed1 moonkale/selectionChanged {"cursor":{"character":3,"line":1},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":3,"line":1},"isEmpty":true,"start":{"character":3,"line":1}},"text":""}
        > ed1 moonkale/selectionChanged {"textDocument":{"uri":"file:///w/a.rs"}}
          ed1 <- window/logMessage {"message":"moonkale: moonkale/selectionChanged needs `selection` or `cursor`","type":2}
        > #1 ed1 textDocument/hover {"position":{"character":1,"line":1},"textDocument":{"uri":"file:///w/a.rs"}}
          #1 <- Ok null
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":1,"line":1},"isEmpty":true,"start":{"character":1,"line":1}},"text":""}
        > #2 ed1 textDocument/definition {"position":{"character":1,"line":1},"textDocument":{"uri":"file:///w/a.rs"}}
          #2 <- Ok null
        > #3 ed1 textDocument/references {"position":{"character":1,"line":1},"textDocument":{"uri":"file:///w/a.rs"}}
          #3 <- Ok null
        > #4 ed1 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":2,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"untitled:Untitled-1"}}
          #4 <- Ok []
          selection = none
        > #5 ed1 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":0},"start":{"character":0,"line":1}},"textDocument":{"uri":"file:///w/a.rs"}}
          #5 <- Err -32602 range start is after its end
        > ed1 textDocument/didChange {"contentChanges":[{"range":{"end":{"character":0,"line":1},"start":{"character":0,"line":1}},"text":"a "}],"textDocument":{"uri":"file:///w/a.rs","version":2}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":2,"line":1},"isEmpty":true,"start":{"character":2,"line":1}},"text":""}
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          Claude Code clients: 1 (pid unknown)
          1 editor attached
            #1 ed1 via unix, utf-16  [active]
              selection file:///w/a.rs 1:2 -> 1:2 (from edit)
              v2     file:///w/a.rs modified
          diagnostics for 0 (document, source) pairs
          6190 bytes held
          claude client 9 pid None
    "#]]);
}

/// Helix's keymap command: `[path relative to the root, cursor line,
/// cursor column, first line, last line]`, 1-based, columns in chars.
#[test]
fn the_helix_selection_command() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, A, 1, "ab😀cd\nline two\nthree\n");
    w.execute(1, "moonkale.selection", json!(["a.rs", 1, 4, 1, 1]));
    w.execute(1, "moonkale.selection", json!(["sub/../a.rs", 2, 1, 1, 2]));
    w.execute(
        1,
        "moonkale.selection",
        json!(["../elsewhere/x.rs", 1, 1, 1, 1]),
    );
    w.execute(1, "moonkale.selection", json!(["a.rs", "one"]));
    w.execute(1, "moonkale.nothing", json!([]));
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"ab😀cd\nline two\nthree\n","uri":"file:///w/a.rs","version":1}}
        > #1 ed1 workspace/executeCommand {"arguments":["a.rs",1,4,1,1],"command":"moonkale.selection"}
          #1 <- Ok null
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":4,"line":0},"isEmpty":true,"start":{"character":4,"line":0}},"text":""}
        > #2 ed1 workspace/executeCommand {"arguments":["sub/../a.rs",2,1,1,2],"command":"moonkale.selection"}
          #2 <- Ok null
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":0,"line":2},"isEmpty":false,"start":{"character":0,"line":0}},"text":"ab😀cd\nline two\n"}
        > #3 ed1 workspace/executeCommand {"arguments":["../elsewhere/x.rs",1,1,1,1],"command":"moonkale.selection"}
          #3 <- Ok null
          selection = {"filePath":"/elsewhere/x.rs","fileUrl":"file:///elsewhere/x.rs","selection":{"end":{"character":0,"line":0},"isEmpty":true,"start":{"character":0,"line":0}},"text":""} (outside the workspace)
        > #4 ed1 workspace/executeCommand {"arguments":["a.rs","one"],"command":"moonkale.selection"}
          #4 <- Err -32602 moonkale.selection wants [path, line, column, first line, last line]
        > #5 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.nothing"}
          #5 <- Err -32602 unknown command moonkale.nothing
    "#]]);
}

#[test]
fn the_active_editor_is_the_one_used_last() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::BUTTONS);
    w.attach(2, Caps::PLAIN);
    w.attach(3, Caps::OBSERVER);
    w.did_open(1, A, 1, "in one\n");
    w.did_open(2, B, 1, "in two\n");
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "cursor": pos(0, 3)}),
    );
    // Opening a file marks an editor active, though it has no selection yet.
    w.did_open(2, A, 1, "in one\n");
    w.request(
        2,
        "textDocument/hover",
        json!({"textDocument": {"uri": B}, "position": pos(0, 2)}),
    );
    // An observer's requests never move the selection.
    w.request(
        3,
        "textDocument/hover",
        json!({"textDocument": {"uri": A}, "position": pos(0, 1)}),
    );
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "cursor": pos(0, 1)}),
    );
    // Closing the selected document drops the selection.
    w.notify(
        1,
        "textDocument/didClose",
        json!({"textDocument": {"uri": A}}),
    );
    w.detach(1);
    w.status();
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, utf-32)
        > ed3 attaches (Observer, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"in one\n","uri":"file:///w/a.rs","version":1}}
        > ed2 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"in two\n","uri":"file:///w/b.rs","version":1}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":3,"line":0},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":3,"line":0},"isEmpty":true,"start":{"character":3,"line":0}},"text":""}
        > ed2 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"in one\n","uri":"file:///w/a.rs","version":1}}
          selection = none
        > #1 ed2 textDocument/hover {"position":{"character":2,"line":0},"textDocument":{"uri":"file:///w/b.rs"}}
          #1 <- Ok null
          selection = {"filePath":"/w/b.rs","fileUrl":"file:///w/b.rs","selection":{"end":{"character":2,"line":0},"isEmpty":true,"start":{"character":2,"line":0}},"text":""}
        > #2 ed3 textDocument/hover {"position":{"character":1,"line":0},"textDocument":{"uri":"file:///w/a.rs"}}
          #2 <- Ok null
        > ed1 moonkale/selectionChanged {"cursor":{"character":1,"line":0},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":1,"line":0},"isEmpty":true,"start":{"character":1,"line":0}},"text":""}
        > ed1 textDocument/didClose {"textDocument":{"uri":"file:///w/a.rs"}}
          selection = none
        > ed1 detaches
          terminals <- Detach ed1
          selection = {"filePath":"/w/b.rs","fileUrl":"file:///w/b.rs","selection":{"end":{"character":2,"line":0},"isEmpty":true,"start":{"character":2,"line":0}},"text":""}
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          Claude Code clients: 1 (pid unknown)
          1 editor attached
            #2 ed2 via unix, utf-32  [active]
              selection file:///w/b.rs 0:2 -> 0:2 (from hover)
              v1     file:///w/a.rs
              v1     file:///w/b.rs
          diagnostics for 0 (document, source) pairs
          12338 bytes held
          claude client 9 pid None
    "#]]);
}

/// The payload counts UTF-16 units whatever the editor's encoding, orders
/// the ends, clamps into the text and leaves out a text that is too large.
#[test]
fn the_selection_changed_payload() {
    let mut w = World::new();
    w.attach(1, Caps::PLAIN);
    w.did_open(1, A, 1, "😀😀 x\ny\n");
    // Nobody follows the watch yet: it is not even computed.
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "cursor": pos(0, 1)}),
    );
    w.ide_attach(9);
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "selection": {"start": pos(0, 1), "end": pos(1, 99)}, "cursor": pos(1, 99)}),
    );
    // The cursor at the other end of the same (clamped) range, then the
    // same selection again: the watch does not fire.
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "selection": {"start": pos(0, 1), "end": pos(1, 1)}, "cursor": pos(0, 1)}),
    );
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "selection": {"start": pos(0, 1), "end": pos(1, 1)}, "cursor": pos(0, 1)}),
    );
    // A file no editor holds: the editor's numbers as they are.
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": B}, "selection": {"start": pos(3, 4), "end": pos(5, 6)}}),
    );
    // Not a file: nothing to show.
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": "untitled:x"}, "cursor": pos(0, 0)}),
    );
    w.ide_tool(9, "getLatestSelection", json!({}));
    w.ide_tool(9, "getCurrentSelection", json!({}));
    w.check(expect![[r#"
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"😀😀 x\ny\n","uri":"file:///w/a.rs","version":1}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":1,"line":0},"textDocument":{"uri":"file:///w/a.rs"}}
        > ide9 attaches
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":2,"line":0},"isEmpty":true,"start":{"character":2,"line":0}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":99,"line":1},"selection":{"end":{"character":99,"line":1},"start":{"character":1,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":1,"line":1},"isEmpty":false,"start":{"character":2,"line":0}},"text":"😀 x\ny"}
        > ed1 moonkale/selectionChanged {"cursor":{"character":1,"line":0},"selection":{"end":{"character":1,"line":1},"start":{"character":1,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":1,"line":0},"selection":{"end":{"character":1,"line":1},"start":{"character":1,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"selection":{"end":{"character":6,"line":5},"start":{"character":4,"line":3}},"textDocument":{"uri":"file:///w/b.rs"}}
          selection = {"filePath":"/w/b.rs","fileUrl":"file:///w/b.rs","selection":{"end":{"character":6,"line":5},"isEmpty":false,"start":{"character":4,"line":3}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":0},"textDocument":{"uri":"untitled:x"}}
          selection = none
        > #1 ide9 getLatestSelection {}
          #1 <- Ok tool result
              text:
                {
                  "message": "No selection available",
                  "success": false
                }
        > #2 ide9 getCurrentSelection {}
          #2 <- Ok tool result
              text:
                {
                  "message": "No active editor found",
                  "success": false
                }
    "#]]);

    let big = "x".repeat((1 << 20) + 1);
    w.did_open(1, B, 1, &big);
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": B}, "selection": {"start": pos(0, 0), "end": pos(1, 0)}}),
    );
    w.check(expect![[r#"
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…
        > ed1 moonkale/selectionChanged {"selection":{"end":{"character":0,"line":1},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/b.rs"}}
          selection = {"filePath":"/w/b.rs","fileUrl":"file:///w/b.rs","selection":{"end":{"character":1048577,"line":0},"isEmpty":false,"start":{"character":0,"line":0}},"text":""}
    "#]]);
}

#[test]
fn utf8_editors_count_bytes() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(
        1,
        Caps {
            encoding: PositionEncoding::Utf8,
            ..Caps::PLAIN
        },
    );
    w.did_open(1, A, 1, "é😀x\n");
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "selection": {"start": pos(0, 2), "end": pos(0, 6)}}),
    );
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, utf-8)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"é😀x\n","uri":"file:///w/a.rs","version":1}}
        > ed1 moonkale/selectionChanged {"selection":{"end":{"character":6,"line":0},"start":{"character":2,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":3,"line":0},"isEmpty":false,"start":{"character":1,"line":0}},"text":"😀"}
    "#]]);
}

/// The pace of `selection_changed` (`core::pacing`, 50 ms): a move after a
/// quiet period goes out with its own event; a key held at 100 Hz gives
/// one update per 50 ms, each the newest, and the last position after the
/// keys stop; a position already sent is not sent again. The hosted
/// agent's tool answers from the newest state in the middle of the burst.
#[test]
fn selection_changes_are_paced_for_claude_code() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::PLAIN);
    let text: String = (0..20).map(|i| format!("line {i}\n")).collect();
    w.did_open(1, A, 1, &text);
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"line 0\nline 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\n","uri":"file:///w/a.rs","version":1}}
    "#]]);
    let cursor = |w: &mut World, line: u32| {
        w.notify(
            1,
            "moonkale/selectionChanged",
            json!({"textDocument": {"uri": A}, "cursor": pos(line, 0)}),
        );
    };
    // `j` held: a move every 10 ms (each step below is 10 ms after the one
    // before it).
    w.step_gap = std::time::Duration::from_millis(10);
    for line in 1..=7 {
        cursor(&mut w, line);
    }
    w.agent_tool("getCurrentSelection", json!({}));
    for line in 8..=12 {
        cursor(&mut w, line);
    }
    w.wait_ms(100);
    // Back and forth within one interval, ending where Claude Code is.
    w.step_gap = std::time::Duration::from_secs(1);
    cursor(&mut w, 3);
    w.step_gap = std::time::Duration::from_millis(10);
    cursor(&mut w, 4);
    cursor(&mut w, 3);
    w.wait_ms(100);
    w.check(expect![[r#"
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":1},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":0,"line":1},"isEmpty":true,"start":{"character":0,"line":1}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":2},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":3},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":4},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":5},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":6},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":0,"line":6},"isEmpty":true,"start":{"character":0,"line":6}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":7},"textDocument":{"uri":"file:///w/a.rs"}}
        > #1 agent tool getCurrentSelection {}
          #1 <- Ok tool result
              text:
                {
                  "filePath": "/w/a.rs",
                  "fileUrl": "file:///w/a.rs",
                  "selection": {
                    "end": {
                      "character": 0,
                      "line": 7
                    },
                    "isEmpty": true,
                    "start": {
                      "character": 0,
                      "line": 7
                    }
                  },
                  "success": true,
                  "text": ""
                }
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":8},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":9},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":10},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":0,"line":10},"isEmpty":true,"start":{"character":0,"line":10}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":11},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":12},"textDocument":{"uri":"file:///w/a.rs"}}
        > 100 ms pass
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":0,"line":12},"isEmpty":true,"start":{"character":0,"line":12}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":3},"textDocument":{"uri":"file:///w/a.rs"}}
          selection = {"filePath":"/w/a.rs","fileUrl":"file:///w/a.rs","selection":{"end":{"character":0,"line":3},"isEmpty":true,"start":{"character":0,"line":3}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":4},"textDocument":{"uri":"file:///w/a.rs"}}
        > ed1 moonkale/selectionChanged {"cursor":{"character":0,"line":3},"textDocument":{"uri":"file:///w/a.rs"}}
        > 100 ms pass
    "#]]);
}

/// The same rules through the hub's own loop and timer, in paused time: a
/// single move reaches the watch without any time passing; a burst at
/// 100 Hz for a second reaches it at most once per 50 ms, with no gap over
/// 50 ms, each value the newest at that moment, and the final position
/// last; nothing is published twice.
#[tokio::test(start_paused = true)]
async fn the_hub_loop_paces_the_selection_in_real_time() {
    use crate::{EditorId, EditorInfo, Event, IdeClientId, Role, Transport};
    use moonkale_protocol::jsonrpc as message;
    use std::time::Duration;
    use tokio::time::Instant;

    let hub = crate::spawn("/w".into(), crate::Hosts::default(), Default::default());
    let (outbox, _editor_rx) = tokio::sync::mpsc::channel(256);
    let info = EditorInfo {
        client_name: "ed1".into(),
        client_version: None,
        process_id: None,
        transport: Transport::Unix,
        encoding: PositionEncoding::Utf16,
        role: Role::Editor,
        shows_message_buttons: false,
        shows_progress: false,
        announces_changes: false,
        reviews_proposals: false,
        shows_documents: false,
        registers_inlay_hints: false,
    };
    let editor = EditorId(1);
    let notify = move |method: &str, params: serde_json::Value| Event::Notification {
        editor,
        method: method.into(),
        params: message::params(&params),
    };
    let (ide_outbox, _ide_rx) = tokio::sync::mpsc::channel(64);
    assert!(
        hub.send(Event::IdeAttach {
            client: IdeClientId(9),
            scope: crate::IdeScope::Host,
            outbox: ide_outbox
        })
        .await
    );
    assert!(
        hub.send(Event::Attach {
            editor,
            info,
            outbox
        })
        .await
    );
    let text: String = (0..200).map(|i| format!("line {i}\n")).collect();
    assert!(
        hub.send(notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": A, "languageId": "rust", "version": 1, "text": text}})
        ))
        .await
    );
    let mut watch = hub.selection();
    let line_of = |w: &tokio::sync::watch::Receiver<Option<crate::SelectionNotification>>| {
        w.borrow().as_ref().map(|s| s.params.selection.start.line)
    };
    let cursor = move |line: u32| {
        notify(
            "moonkale/selectionChanged",
            json!({"textDocument": {"uri": A}, "cursor": pos(line, 0)}),
        )
    };

    // One move: published with no time passing.
    let start = Instant::now();
    assert!(hub.send(cursor(1)).await);
    watch.changed().await.expect("hub runs");
    assert_eq!(Instant::now(), start, "the first move waits for nothing");
    assert_eq!(line_of(&watch), Some(1));

    // A quiet second, then 100 moves 10 ms apart; the publications are
    // collected as they happen.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let moves = {
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut sent = Vec::new();
            for line in 2..102u32 {
                hub.send(cursor(line)).await;
                sent.push((Instant::now(), line));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            sent
        })
    };
    let mut published: Vec<(Instant, u32)> = Vec::new();
    while published.last().map(|p| p.1) != Some(101) {
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("a publication within 5 s")
            .expect("hub runs");
        published.push((Instant::now(), line_of(&watch).expect("a selection")));
    }
    let sent = moves.await.expect("moves");
    assert!(
        published.len() <= 22,
        "at most 20 a second: {}",
        published.len()
    );
    for pair in published.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap >= Duration::from_millis(50), "too close: {gap:?}");
        assert!(
            gap <= Duration::from_millis(60),
            "a gap of {gap:?} during movement"
        );
        assert_ne!(pair[0].1, pair[1].1, "published twice");
    }
    for (at, line) in &published {
        // The newest move the hub had seen by then.
        let newest = sent.iter().rev().find(|(t, _)| t <= at).expect("a move").1;
        assert_eq!(*line, newest, "stale at {:?}", *at - start);
    }
    // Nothing more once it stopped.
    assert!(
        tokio::time::timeout(Duration::from_secs(1), watch.changed())
            .await
            .is_err(),
        "nothing after the final position"
    );
}

/// Performance (issue 25): the `selection_changed` payload (up to 1 MiB of
/// selected text) is computed again only when the selection or its
/// document changed, not after every event: 200 forwarded diagnostics
/// while a Claude Code client is connected compute it not once more; an
/// edit of the selected document does.
#[test]
fn the_payload_is_computed_only_when_its_inputs_change() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, "file:///w/a.rs", 1, "selected text\n");
    w.did_open(1, "file:///w/b.rs", 1, "");
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": "file:///w/a.rs"},
               "selection": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 8}}}),
    );
    let before = w.ws.payloads_computed;
    for n in 0..200 {
        let diagnostic = json!({"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}},
                                "message": format!("problem {n}")});
        w.notify(
            1,
            "moonkale/publishDiagnostics",
            json!({"uri": "file:///w/b.rs", "source": "tsc", "diagnostics": [diagnostic]}),
        );
    }
    assert_eq!(
        w.ws.payloads_computed, before,
        "recomputed for unrelated events"
    );
    w.did_change(1, "file:///w/a.rs", 2, "SELECTED text\n");
    assert_eq!(w.ws.payloads_computed, before + 1);
}
