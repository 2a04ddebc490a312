//! Text sync: each editor's own buffers, versions, out-of-sync copies,
//! the caps, `moonkale/document` and `moonkale/waitForVersion`.

use expect_test::expect;
use serde_json::json;

use super::harness::{Caps, Ports, World};
use crate::workspace::Limits;
use crate::workspace::documents::DOCUMENT_OVERHEAD;

const A: &str = "file:///w/a.rs";

#[test]
fn open_change_save_close() {
    let mut w = World::new();
    w.attach(1, Caps::BUTTONS);
    w.did_open(1, A, 1, "fn main() {}\n");
    w.notify(
        1,
        "textDocument/didChange",
        json!({"textDocument": {"uri": A, "version": 2}, "contentChanges": [
            {"range": {"start": {"line": 0, "character": 11}, "end": {"line": 0, "character": 11}}, "text": " todo!(); "}
        ]}),
    );
    w.request(1, "moonkale/document", json!({"uri": A}));
    w.notify(
        1,
        "textDocument/didSave",
        json!({"textDocument": {"uri": A}}),
    );
    w.request(1, "moonkale/document", json!({"uri": A}));
    w.status();
    w.notify(
        1,
        "textDocument/didClose",
        json!({"textDocument": {"uri": A}}),
    );
    w.request(1, "moonkale/document", json!({"uri": A}));
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"fn main() {}\n","uri":"file:///w/a.rs","version":1}}
        > ed1 textDocument/didChange {"contentChanges":[{"range":{"end":{"character":11,"line":0},"start":{"character":11,"line":0}},"text":" todo!(); "}],"textDocument":{"uri":"file:///w/a.rs","version":2}}
        > #1 ed1 moonkale/document {"uri":"file:///w/a.rs"}
          #1 <- Ok {"dirty":true,"editor":1,"inSync":true,"text":"fn main() { todo!(); }\n","uri":"file:///w/a.rs","version":2}
        > ed1 textDocument/didSave {"textDocument":{"uri":"file:///w/a.rs"}}
        > #2 ed1 moonkale/document {"uri":"file:///w/a.rs"}
          #2 <- Ok {"dirty":false,"editor":1,"inSync":true,"text":"fn main() { todo!(); }\n","uri":"file:///w/a.rs","version":2}
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          1 editor attached
            #1 ed1 via unix, utf-16  [active]
              selection file:///w/a.rs 0:21 -> 0:21 (from edit)
              v2     file:///w/a.rs
          diagnostics for 0 (document, source) pairs
          6185 bytes held
        > ed1 textDocument/didClose {"textDocument":{"uri":"file:///w/a.rs"}}
        > #3 ed1 moonkale/document {"uri":"file:///w/a.rs"}
          #3 <- Err -32803 file:///w/a.rs is not open in any editor
    "#]]);
}

#[test]
fn violations_are_told_to_the_editor_and_change_nothing() {
    let mut w = World::new();
    w.attach(1, Caps::PLAIN);
    w.did_change(1, A, 2, "not open");
    w.notify(
        1,
        "textDocument/didSave",
        json!({"textDocument": {"uri": A}}),
    );
    w.notify(
        1,
        "textDocument/didClose",
        json!({"textDocument": {"uri": A}}),
    );
    w.notify(
        1,
        "textDocument/didOpen",
        json!({"textDocument": {"uri": A}}),
    );
    w.did_open(1, "https://example.com/x.rs", 1, "x");
    w.did_open(1, A, 1, "one\n");
    // A version that goes backwards, a range past the end: our copy is no
    // longer trusted until the editor sends the whole text again.
    w.did_change(1, A, 1, "older");
    w.notify(
        1,
        "textDocument/didChange",
        json!({"textDocument": {"uri": A, "version": 3}, "contentChanges": [
            {"range": {"start": {"line": 9, "character": 0}, "end": {"line": 9, "character": 1}}, "text": "x"}
        ]}),
    );
    w.request(1, "moonkale/document", json!({"uri": A}));
    w.did_change(1, A, 4, "whole again\n");
    w.request(1, "moonkale/document", json!({"uri": A}));
    // Saved with a text that differs from ours: the editor's text wins.
    w.notify(
        1,
        "textDocument/didSave",
        json!({"textDocument": {"uri": A}, "text": "disk\n"}),
    );
    w.request(1, "moonkale/document", json!({"uri": A}));
    w.notify(
        1,
        "workspace/didChangeConfiguration",
        json!({"settings": {}}),
    );
    w.notify(1, "$/setTrace", json!({"value": "off"}));
    w.notify(1, "something/unknown", json!({}));
    w.request(1, "something/unknown", json!({}));
    w.request(1, "moonkale/test/panic", json!({}));
    w.check(expect![[r#"
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didChange {"contentChanges":[{"text":"not open"}],"textDocument":{"uri":"file:///w/a.rs","version":2}}
          ed1 <- window/logMessage {"message":"moonkale: didChange for file:///w/a.rs, which is not open","type":2}
        > ed1 textDocument/didSave {"textDocument":{"uri":"file:///w/a.rs"}}
          ed1 <- window/logMessage {"message":"moonkale: didSave for file:///w/a.rs, which is not open","type":2}
        > ed1 textDocument/didClose {"textDocument":{"uri":"file:///w/a.rs"}}
          ed1 <- window/logMessage {"message":"moonkale: didClose for file:///w/a.rs, which is not open","type":2}
        > ed1 textDocument/didOpen {"textDocument":{"uri":"file:///w/a.rs"}}
          ed1 <- window/logMessage {"message":"moonkale: didOpen with invalid params: missing field `languageId` at line 1 column 40","type":2}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x","uri":"https://example.com/x.rs","version":1}}
          ed1 <- window/logMessage {"message":"moonkale: didOpen of https://example.com/x.rs refused: only file: and untitled: URIs","type":2}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\n","uri":"file:///w/a.rs","version":1}}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"older"}],"textDocument":{"uri":"file:///w/a.rs","version":1}}
          ed1 <- window/logMessage {"message":"moonkale: didChange for file:///w/a.rs refused: version 1 is not newer than the current version 1","type":2}
        > ed1 textDocument/didChange {"contentChanges":[{"range":{"end":{"character":1,"line":9},"start":{"character":0,"line":9}},"text":"x"}],"textDocument":{"uri":"file:///w/a.rs","version":3}}
          ed1 <- window/logMessage {"message":"moonkale: didChange for file:///w/a.rs refused: document is out of sync (version 1 is not newer than the current version 1); waiting for a full-text change or didOpen","type":2}
        > #1 ed1 moonkale/document {"uri":"file:///w/a.rs"}
          #1 <- Ok {"dirty":false,"editor":1,"inSync":false,"text":"one\n","uri":"file:///w/a.rs","version":1}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"whole again\n"}],"textDocument":{"uri":"file:///w/a.rs","version":4}}
        > #2 ed1 moonkale/document {"uri":"file:///w/a.rs"}
          #2 <- Ok {"dirty":true,"editor":1,"inSync":true,"text":"whole again\n","uri":"file:///w/a.rs","version":4}
        > ed1 textDocument/didSave {"text":"disk\n","textDocument":{"uri":"file:///w/a.rs"}}
        > #3 ed1 moonkale/document {"uri":"file:///w/a.rs"}
          #3 <- Ok {"dirty":false,"editor":1,"inSync":true,"text":"disk\n","uri":"file:///w/a.rs","version":4}
        > ed1 workspace/didChangeConfiguration {"settings":{}}
        > ed1 $/setTrace {"value":"off"}
        > ed1 something/unknown {}
        > #4 ed1 something/unknown {}
          #4 <- Err -32601 unknown method something/unknown
        > #5 ed1 moonkale/test/panic {}
          #5 <- Err -32603 the service dropped this request unanswered
    "#]]);
}

/// Security case 27: caps on documents per editor and on total bytes (text,
/// URI and language id); refused opens are reported and change nothing.
#[test]
fn hostile_27_store_caps() {
    // Room for two documents' bookkeeping and 40 bytes of names and text.
    let limits = Limits {
        total_bytes: 2 * DOCUMENT_OVERHEAD + 40,
        documents_per_editor: 2,
        diagnostics_bytes: 32,
        ..Limits::default()
    };
    let mut w = World::build(Ports::None, limits);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, "file:///w/a", 1, "12345");
    w.did_open(1, "file:///w/b", 1, "1");
    w.did_open(1, "file:///w/c", 1, "1");
    w.did_open(1, "file:///w/a", 1, "1234567890");
    w.did_change(1, "file:///w/b", 2, "1234567890");
    w.status();
    w.check(expect![[r#"
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"12345","uri":"file:///w/a","version":1}}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"1","uri":"file:///w/b","version":1}}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"1","uri":"file:///w/c","version":1}}
          ed1 <- window/logMessage {"message":"moonkale: didOpen of file:///w/c refused: over 2 open documents","type":2}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"1234567890","uri":"file:///w/a","version":1}}
          ed1 <- window/logMessage {"message":"moonkale: didOpen of file:///w/a refused: the workspace would hold more than its cap of 12328 bytes","type":2}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"1234567890"}],"textDocument":{"uri":"file:///w/b","version":2}}
          ed1 <- window/logMessage {"message":"moonkale: didChange for file:///w/b refused: document would hold 12333 bytes, over the 12328-byte cap","type":2}
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          1 editor attached
            #1 ed1 via unix, utf-32  [active]
              v1     file:///w/a
              v2     file:///w/b modified OUT OF SYNC
          diagnostics for 0 (document, source) pairs
          12333 bytes held
    "#]]);
}

/// Bounds: every byte of the diagnostics counts toward the caps; a publish
/// over them is refused and keeps the old entry; clearing and detaching
/// give the bytes back.
#[test]
fn diagnostics_count_toward_the_caps() {
    let limits = Limits {
        total_bytes: DOCUMENT_OVERHEAD + 6000,
        documents_per_editor: 10,
        diagnostics_bytes: 3000,
        ..Limits::default()
    };
    let mut w = World::build(Ports::None, limits);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, "file:///w/a", 1, "x");
    let held = |w: &World| w.ws.status().total_bytes;
    let publish = |w: &mut World, source: &str, n: usize| {
        let d = json!({"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}, "message": "m".repeat(500)});
        let params = json!({"uri": "file:///w/a", "source": source, "diagnostics": vec![d; n]});
        w.step(
            format!("ed1 publishes {n} diagnostics of 500 bytes from {source}"),
            crate::Event::Notification {
                editor: crate::EditorId(1),
                method: "moonkale/publishDiagnostics".into(),
                params: moonkale_protocol::jsonrpc::params(&params),
            },
        );
    };
    let doc = 11 + 4 + 1 + DOCUMENT_OVERHEAD;
    assert_eq!(held(&w), doc);
    publish(&mut w, "s1", 1);
    let one = held(&w) - doc;
    assert!(
        one > std::mem::size_of::<lsp_types::Diagnostic>() + 500 + 11,
        "{one}"
    );
    publish(&mut w, "s1", 2);
    let two = held(&w) - doc;
    assert!(
        two > one && two < 2 * one,
        "replaced, not added: {one} {two}"
    );
    publish(&mut w, "s2", 4);
    assert_eq!(held(&w), doc + two, "over the diagnostics cap: refused");
    publish(&mut w, "s1", 0);
    assert_eq!(held(&w), doc);
    publish(&mut w, "s1", 1);
    w.detach(1);
    assert_eq!(held(&w), 0);
    w.check(expect![[r#"
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x","uri":"file:///w/a","version":1}}
        > ed1 publishes 1 diagnostics of 500 bytes from s1
        > ed1 publishes 2 diagnostics of 500 bytes from s1
        > ed1 publishes 4 diagnostics of 500 bytes from s2
          ed1 <- window/logMessage {"message":"moonkale: diagnostics for file:///w/a from s2 refused: they would make 5234 bytes, over the 3000 left for diagnostics","type":2}
        > ed1 publishes 0 diagnostics of 500 bytes from s1
        > ed1 publishes 1 diagnostics of 500 bytes from s1
        > ed1 detaches
    "#]]);
}

/// Questions about a file are answered from the editor that touched it
/// last; a detached editor's buffers go with it.
#[test]
fn the_latest_editor_answers() {
    let mut w = World::new();
    w.attach(1, Caps::BUTTONS);
    w.attach(2, Caps::PLAIN);
    w.did_open(1, A, 1, "one");
    w.did_open(2, A, 7, "two");
    w.request(1, "moonkale/document", json!({"uri": A}));
    w.did_change(1, A, 2, "uno");
    w.request(2, "moonkale/document", json!({"uri": A}));
    w.detach(1);
    w.request(2, "moonkale/document", json!({"uri": A}));
    w.request(2, "moonkale/document", json!({"uri": "file:///w/none.rs"}));
    w.request(2, "moonkale/document", json!({}));
    w.status();
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one","uri":"file:///w/a.rs","version":1}}
        > ed2 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"two","uri":"file:///w/a.rs","version":7}}
        > #1 ed1 moonkale/document {"uri":"file:///w/a.rs"}
          #1 <- Ok {"dirty":false,"editor":2,"inSync":true,"text":"two","uri":"file:///w/a.rs","version":7}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"uno"}],"textDocument":{"uri":"file:///w/a.rs","version":2}}
        > #2 ed2 moonkale/document {"uri":"file:///w/a.rs"}
          #2 <- Ok {"dirty":true,"editor":1,"inSync":true,"text":"uno","uri":"file:///w/a.rs","version":2}
        > ed1 detaches
          terminals <- Detach ed1
        > #3 ed2 moonkale/document {"uri":"file:///w/a.rs"}
          #3 <- Ok {"dirty":false,"editor":2,"inSync":true,"text":"two","uri":"file:///w/a.rs","version":7}
        > #4 ed2 moonkale/document {"uri":"file:///w/none.rs"}
          #4 <- Err -32803 file:///w/none.rs is not open in any editor
        > #5 ed2 moonkale/document {}
          #5 <- Err -32602 invalid params: missing field `uri` at line 1 column 2
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          1 editor attached
            #2 ed2 via unix, utf-32  [active]
              v7     file:///w/a.rs
          diagnostics for 0 (document, source) pairs
          6165 bytes held
    "#]]);
}

#[test]
fn wait_for_version_parks_until_the_version_arrives() {
    let mut w = World::new();
    w.attach(1, Caps::BUTTONS);
    w.request(
        1,
        "moonkale/waitForVersion",
        json!({"uri": A, "version": 1}),
    );
    w.did_open(1, A, 1, "v1");
    w.request(
        1,
        "moonkale/waitForVersion",
        json!({"uri": A, "version": 1}),
    );
    w.request(
        1,
        "moonkale/waitForVersion",
        json!({"uri": A, "version": 3}),
    );
    w.request(
        1,
        "moonkale/waitForVersion",
        json!({"uri": "file:///w/b.rs", "version": 1}),
    );
    w.did_change(1, A, 2, "v2");
    w.did_change(1, A, 5, "v5");
    w.request(1, "moonkale/waitForVersion", json!({"version": 1}));
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > #1 ed1 moonkale/waitForVersion {"uri":"file:///w/a.rs","version":1}
          #1 waits
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"v1","uri":"file:///w/a.rs","version":1}}
          #1 <- Ok {"version":1}
        > #2 ed1 moonkale/waitForVersion {"uri":"file:///w/a.rs","version":1}
          #2 <- Ok {"version":1}
        > #3 ed1 moonkale/waitForVersion {"uri":"file:///w/a.rs","version":3}
          #3 waits
        > #4 ed1 moonkale/waitForVersion {"uri":"file:///w/b.rs","version":1}
          #4 waits
        > ed1 textDocument/didChange {"contentChanges":[{"text":"v2"}],"textDocument":{"uri":"file:///w/a.rs","version":2}}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"v5"}],"textDocument":{"uri":"file:///w/a.rs","version":5}}
          #3 <- Ok {"version":5}
        > #5 ed1 moonkale/waitForVersion {"version":1}
          #5 <- Err -32602 invalid params: missing field `uri` at line 1 column 13
    "#]]);
}

#[test]
fn requests_before_attach_and_from_observers() {
    let mut w = World::new();
    w.request(9, "moonkale/document", json!({"uri": A}));
    w.attach(3, Caps::OBSERVER);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, A, 1, "text");
    w.request(3, "moonkale/document", json!({"uri": A}));
    w.status();
    w.check(expect![[r#"
        > #1 ed9 moonkale/document {"uri":"file:///w/a.rs"}
          #1 <- Err -32002 not initialized
        > ed3 attaches (Observer, utf-16)
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"text","uri":"file:///w/a.rs","version":1}}
        > #2 ed3 moonkale/document {"uri":"file:///w/a.rs"}
          #2 <- Ok {"dirty":false,"editor":1,"inSync":true,"text":"text","uri":"file:///w/a.rs","version":1}
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          1 editor attached
            #1 ed1 via unix, utf-32  [active]
              v1     file:///w/a.rs
          diagnostics for 0 (document, source) pairs
          6166 bytes held
    "#]]);
}

/// Memory (issue 25): an empty document still costs its bookkeeping, so a
/// flood of empty documents reaches the workspace's cap, and the refusal
/// names it; closing them gives the bytes back.
#[test]
fn empty_documents_count_toward_the_cap() {
    let limits = Limits {
        total_bytes: 64 << 10,
        ..Limits::default()
    };
    let mut w = World::build(Ports::None, limits);
    w.attach(1, Caps::PLAIN);
    let held = |w: &World| w.ws.status().total_bytes;
    let mut opened = 0;
    while held(&w) + DOCUMENT_OVERHEAD + 32 <= 64 << 10 {
        w.did_open(1, &format!("file:///w/{opened:04}"), 1, "");
        opened += 1;
    }
    assert_eq!(opened, 10);
    w.forget();
    w.did_open(1, "file:///w/one-too-many", 1, "");
    w.check(expect![[r#"
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"","uri":"file:///w/one-too-many","version":1}}
          ed1 <- window/logMessage {"message":"moonkale: didOpen of file:///w/one-too-many refused: the workspace would hold more than its cap of 64 KiB","type":2}
    "#]]);
    for i in 0..opened {
        w.notify(
            1,
            "textDocument/didClose",
            json!({"textDocument": {"uri": format!("file:///w/{i:04}")}}),
        );
    }
    assert_eq!(held(&w), 0);
}
