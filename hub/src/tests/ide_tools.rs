//! Claude Code's tools answered from the hub's state (ide-protocol.md
//! §4–§6), the agent's editor tools, `at_mentioned`, and diagnostics
//! forwarded by one editor and pulled by another.

use expect_test::expect;
use serde_json::{Value, json};

use super::harness::{Caps, World};

const A: &str = "file:///w/src/a.rs";
const B: &str = "file:///w/b%20c.rs";

fn diagnostic(line: u32, from: u32, to: u32, severity: u32, message: &str) -> Value {
    json!({
        "range": {"start": {"line": line, "character": from}, "end": {"line": line, "character": to}},
        "severity": severity, "message": message, "source": "rustc", "code": 308,
    })
}

/// An editor counting in chars holding two files, one modified.
fn world() -> World {
    let mut w = World::new();
    w.ide_attach(9);
    w.step(
        "ide9 ide_connected pid 4242",
        crate::Event::IdeConnected {
            client: crate::IdeClientId(9),
            pid: Some(4242),
        },
    );
    w.attach(1, Caps::PLAIN);
    w.attach(2, Caps::BUTTONS);
    w.did_open(1, A, 1, "let 😀 = 1;\nfn f() {}\n");
    w.did_open(1, B, 1, "spaced\n");
    w.did_change(1, B, 2, "spaced, changed\n");
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": A}, "cursor": {"line": 1, "character": 3}}),
    );
    w
}

#[test]
fn workspace_documents_and_dirtiness() {
    let mut w = world();
    w.ide_tool(9, "getOpenEditors", json!({}));
    w.ide_tool(9, "getWorkspaceFolders", json!({}));
    w.ide_tool(9, "checkDocumentDirty", json!({"filePath": "/w/b c.rs"}));
    w.ide_tool(9, "checkDocumentDirty", json!({"filePath": "/w/src/a.rs"}));
    w.ide_tool(9, "checkDocumentDirty", json!({"filePath": "/w/none.rs"}));
    w.ide_tool(9, "saveDocument", json!({"filePath": "/w/b c.rs"}));
    w.ide_tool(9, "saveDocument", json!({"filePath": "/w/src/a.rs"}));
    w.ide_tool(9, "saveDocument", json!({"filePath": "/w/none.rs"}));
    w.ide_tool(9, "getCurrentSelection", json!({}));
    w.ide_tool(9, "close_tab", json!({"tab_name": "nothing"}));
    w.ide_tool(9, "closeAllDiffTabs", json!({}));
    w.status();
    w.check(expect![[r#"
        > ide9 attaches
        > ide9 ide_connected pid 4242
        > ed1 attaches (Editor, utf-32)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"let 😀 = 1;\nfn f() {}\n","uri":"file:///w/src/a.rs","version":1}}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"spaced\n","uri":"file:///w/b%20c.rs","version":1}}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"spaced, changed\n"}],"textDocument":{"uri":"file:///w/b%20c.rs","version":2}}
          selection = {"filePath":"/w/b c.rs","fileUrl":"file:///w/b%20c.rs","selection":{"end":{"character":0,"line":1},"isEmpty":true,"start":{"character":0,"line":1}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":3,"line":1},"textDocument":{"uri":"file:///w/src/a.rs"}}
          selection = {"filePath":"/w/src/a.rs","fileUrl":"file:///w/src/a.rs","selection":{"end":{"character":3,"line":1},"isEmpty":true,"start":{"character":3,"line":1}},"text":""}
        > #1 ide9 getOpenEditors {}
          #1 <- Ok tool result
              text:
                {
                  "tabs": [
                    {
                      "fileName": "/w/b c.rs",
                      "groupIndex": 0,
                      "isActive": false,
                      "isDirty": true,
                      "isGroupActive": true,
                      "isPinned": false,
                      "isPreview": false,
                      "isUntitled": false,
                      "label": "b c.rs",
                      "languageId": "rust",
                      "lineCount": 2,
                      "uri": "file:///w/b c.rs",
                      "viewColumn": 1
                    },
                    {
                      "fileName": "/w/src/a.rs",
                      "groupIndex": 0,
                      "isActive": true,
                      "isDirty": false,
                      "isGroupActive": true,
                      "isPinned": false,
                      "isPreview": false,
                      "isUntitled": false,
                      "label": "a.rs",
                      "languageId": "rust",
                      "lineCount": 3,
                      "uri": "file:///w/src/a.rs",
                      "viewColumn": 1
                    }
                  ]
                }
        > #2 ide9 getWorkspaceFolders {}
          #2 <- Ok tool result
              text:
                {
                  "folders": [
                    {
                      "index": 0,
                      "name": "w",
                      "path": "/w",
                      "uri": "file:///w"
                    }
                  ],
                  "rootPath": "/w",
                  "success": true,
                  "workspaceFile": null
                }
        > #3 ide9 checkDocumentDirty {"filePath":"/w/b c.rs"}
          #3 <- Ok tool result
              text:
                {
                  "filePath": "/w/b c.rs",
                  "isDirty": true,
                  "isUntitled": false,
                  "success": true
                }
        > #4 ide9 checkDocumentDirty {"filePath":"/w/src/a.rs"}
          #4 <- Ok tool result
              text:
                {
                  "filePath": "/w/src/a.rs",
                  "isDirty": false,
                  "isUntitled": false,
                  "success": true
                }
        > #5 ide9 checkDocumentDirty {"filePath":"/w/none.rs"}
          #5 <- Ok tool result
              text:
                {
                  "message": "Document not open: /w/none.rs",
                  "success": false
                }
        > #6 ide9 saveDocument {"filePath":"/w/b c.rs"}
          #6 <- Ok tool result
              text:
                {
                  "filePath": "/w/b c.rs",
                  "message": "Document is modified in the editor; save it there",
                  "saved": false,
                  "success": true
                }
        > #7 ide9 saveDocument {"filePath":"/w/src/a.rs"}
          #7 <- Ok tool result
              text:
                {
                  "filePath": "/w/src/a.rs",
                  "message": "Document was not dirty or save failed",
                  "saved": false,
                  "success": true
                }
        > #8 ide9 saveDocument {"filePath":"/w/none.rs"}
          #8 <- Ok tool result
              text:
                {
                  "message": "Document not open: /w/none.rs",
                  "success": false
                }
        > #9 ide9 getCurrentSelection {}
          #9 <- Ok tool result
              text:
                {
                  "filePath": "/w/src/a.rs",
                  "fileUrl": "file:///w/src/a.rs",
                  "selection": {
                    "end": {
                      "character": 3,
                      "line": 1
                    },
                    "isEmpty": true,
                    "start": {
                      "character": 3,
                      "line": 1
                    }
                  },
                  "success": true,
                  "text": ""
                }
        > #10 ide9 close_tab {"tab_name":"nothing"}
          #10 <- Ok tool result
              text:
                TAB_CLOSED
        > #11 ide9 closeAllDiffTabs {}
          #11 <- Ok tool result
              text:
                CLOSED_0_DIFF_TABS
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          Claude Code clients: 1 (pid 4242)
          2 editors attached
            #1 ed1 via unix, utf-32  [active]
              selection file:///w/src/a.rs 1:3 -> 1:3 (from moonkale/selectionChanged)
              v2     file:///w/b%20c.rs modified
              v1     file:///w/src/a.rs
            #2 ed2 via unix, utf-16
          diagnostics for 0 (document, source) pairs
          12372 bytes held
          claude client 9 pid Some(4242)
    "#]]);
}

#[test]
fn diagnostics_forwarded_listed_and_pulled() {
    let mut w = world();
    w.notify(
        1,
        "moonkale/publishDiagnostics",
        json!({"uri": A, "source": "rust-analyzer", "diagnostics": [
            diagnostic(0, 4, 5, 1, "unused variable"),
            diagnostic(1, 3, 4, 2, "odd name"),
        ]}),
    );
    w.notify(2, "moonkale/publishDiagnostics", json!({"uri": A, "source": "clippy", "diagnostics": [
        {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 3}}, "message": "hint", "severity": 4, "code": "needless"},
        {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 3}}, "message": "no severity"},
    ]}));
    w.notify(2, "moonkale/publishDiagnostics", json!({"uri": A}));
    w.ide_tool(9, "getDiagnostics", json!({}));
    w.ide_tool(9, "getDiagnostics", json!({"uri": "file:///w/src/a.rs"}));
    w.ide_tool(9, "getDiagnostics", json!({"uri": "file:///w/none.rs"}));
    // Each editor pulls what the others forwarded, in its own encoding.
    w.request(
        2,
        "textDocument/diagnostic",
        json!({"textDocument": {"uri": A}}),
    );
    w.request(
        1,
        "textDocument/diagnostic",
        json!({"textDocument": {"uri": A}}),
    );
    w.status();
    w.detach(1);
    w.ide_tool(9, "getDiagnostics", json!({}));
    w.check(expect![[r#"
        > ide9 attaches
        > ide9 ide_connected pid 4242
        > ed1 attaches (Editor, utf-32)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"let 😀 = 1;\nfn f() {}\n","uri":"file:///w/src/a.rs","version":1}}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"spaced\n","uri":"file:///w/b%20c.rs","version":1}}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"spaced, changed\n"}],"textDocument":{"uri":"file:///w/b%20c.rs","version":2}}
          selection = {"filePath":"/w/b c.rs","fileUrl":"file:///w/b%20c.rs","selection":{"end":{"character":0,"line":1},"isEmpty":true,"start":{"character":0,"line":1}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":3,"line":1},"textDocument":{"uri":"file:///w/src/a.rs"}}
          selection = {"filePath":"/w/src/a.rs","fileUrl":"file:///w/src/a.rs","selection":{"end":{"character":3,"line":1},"isEmpty":true,"start":{"character":3,"line":1}},"text":""}
        > ed1 moonkale/publishDiagnostics {"diagnostics":[{"code":308,"message":"unused variable","range":{"end":{"character":5,"line":0},"start":{"character":4,"line":0}},"severity":1,"source":"rustc"},{"code":308,"message":"odd name","range":{"end":{"character":4,"line":1},"start":{"character":3,"line":1}},…
        > ed2 moonkale/publishDiagnostics {"diagnostics":[{"code":"needless","message":"hint","range":{"end":{"character":3,"line":0},"start":{"character":0,"line":0}},"severity":4},{"message":"no severity","range":{"end":{"character":3,"line":0},"start":{"character":0,"line":0}}}],"source":"clippy","uri":"fi…
        > ed2 moonkale/publishDiagnostics {"uri":"file:///w/src/a.rs"}
          ed2 <- window/logMessage {"message":"moonkale: moonkale/publishDiagnostics with invalid params: missing field `source` at line 1 column 28","type":2}
        > #1 ide9 getDiagnostics {}
          #1 <- Ok tool result
              text:
                [
                  {
                    "diagnostics": [
                      {
                        "code": "needless",
                        "message": "hint",
                        "range": {
                          "end": {
                            "character": 3,
                            "line": 0
                          },
                          "start": {
                            "character": 0,
                            "line": 0
                          }
                        },
                        "severity": "Hint"
                      },
                      {
                        "message": "no severity",
                        "range": {
                          "end": {
                            "character": 3,
                            "line": 0
                          },
                          "start": {
                            "character": 0,
                            "line": 0
                          }
                        },
                        "severity": "Error"
                      },
                      {
                        "code": "308",
                        "message": "unused variable",
                        "range": {
                          "end": {
                            "character": 6,
                            "line": 0
                          },
                          "start": {
                            "character": 4,
                            "line": 0
                          }
                        },
                        "severity": "Error",
                        "source": "rustc"
                      },
                      {
                        "code": "308",
                        "message": "odd name",
                        "range": {
                          "end": {
                            "character": 4,
                            "line": 1
                          },
                          "start": {
                            "character": 3,
                            "line": 1
                          }
                        },
                        "severity": "Warning",
                        "source": "rustc"
                      }
                    ],
                    "uri": "file:///w/src/a.rs"
                  }
                ]
        > #2 ide9 getDiagnostics {"uri":"file:///w/src/a.rs"}
          #2 <- Ok tool result
              text:
                [
                  {
                    "diagnostics": [
                      {
                        "code": "needless",
                        "message": "hint",
                        "range": {
                          "end": {
                            "character": 3,
                            "line": 0
                          },
                          "start": {
                            "character": 0,
                            "line": 0
                          }
                        },
                        "severity": "Hint"
                      },
                      {
                        "message": "no severity",
                        "range": {
                          "end": {
                            "character": 3,
                            "line": 0
                          },
                          "start": {
                            "character": 0,
                            "line": 0
                          }
                        },
                        "severity": "Error"
                      },
                      {
                        "code": "308",
                        "message": "unused variable",
                        "range": {
                          "end": {
                            "character": 6,
                            "line": 0
                          },
                          "start": {
                            "character": 4,
                            "line": 0
                          }
                        },
                        "severity": "Error",
                        "source": "rustc"
                      },
                      {
                        "code": "308",
                        "message": "odd name",
                        "range": {
                          "end": {
                            "character": 4,
                            "line": 1
                          },
                          "start": {
                            "character": 3,
                            "line": 1
                          }
                        },
                        "severity": "Warning",
                        "source": "rustc"
                      }
                    ],
                    "uri": "file:///w/src/a.rs"
                  }
                ]
        > #3 ide9 getDiagnostics {"uri":"file:///w/none.rs"}
          #3 <- Ok tool result
              text:
                [
                  {
                    "diagnostics": [],
                    "uri": "file:///w/none.rs"
                  }
                ]
        > #4 ed2 textDocument/diagnostic {"textDocument":{"uri":"file:///w/src/a.rs"}}
          #4 <- Ok {"items":[{"code":308,"message":"unused variable","range":{"end":{"character":6,"line":0},"start":{"character":4,"line":0}},"severity":1,"source":"rustc"},{"code":308,"message":"odd name","range":{"end":{"character":4,"line":1},"start":{"character":3,"line":1}},"severity":2,"source":"rustc"}],"kind":"full"}
        > #5 ed1 textDocument/diagnostic {"textDocument":{"uri":"file:///w/src/a.rs"}}
          #5 <- Ok {"items":[{"code":"needless","message":"hint","range":{"end":{"character":3,"line":0},"start":{"character":0,"line":0}},"severity":4},{"message":"no severity","range":{"end":{"character":3,"line":0},"start":{"character":0,"line":0}}}],"kind":"full"}
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          Claude Code clients: 1 (pid 4242)
          2 editors attached
            #1 ed1 via unix, utf-32  [active]
              selection file:///w/src/a.rs 1:3 -> 1:3 (from moonkale/selectionChanged)
              v2     file:///w/b%20c.rs modified
              v1     file:///w/src/a.rs
            #2 ed2 via unix, utf-16
          diagnostics for 2 (document, source) pairs
            file:///w/src/a.rs [clippy]: 1 error, 0 warnings, 0 info, 1 hint
            file:///w/src/a.rs [rust-analyzer]: 1 error, 1 warning, 0 info, 0 hints
          14082 bytes held
          claude client 9 pid Some(4242)
        > ed1 detaches
          terminals <- Detach ed1
          selection = none
        > #6 ide9 getDiagnostics {}
          #6 <- Ok tool result
              text:
                [
                  {
                    "diagnostics": [
                      {
                        "code": "needless",
                        "message": "hint",
                        "range": {
                          "end": {
                            "character": 3,
                            "line": 0
                          },
                          "start": {
                            "character": 0,
                            "line": 0
                          }
                        },
                        "severity": "Hint"
                      },
                      {
                        "message": "no severity",
                        "range": {
                          "end": {
                            "character": 3,
                            "line": 0
                          },
                          "start": {
                            "character": 0,
                            "line": 0
                          }
                        },
                        "severity": "Error"
                      }
                    ],
                    "uri": "file:///w/src/a.rs"
                  }
                ]
    "#]]);
}

#[test]
fn open_file_selects_text_in_the_active_editor() {
    let mut w = world();
    w.ide_tool(9, "openFile", json!({"filePath": "/w/src/a.rs"}));
    w.ide_tool(
        9,
        "openFile",
        json!({"filePath": "/w/src/a.rs", "startText": "fn", "endText": "}"}),
    );
    w.ide_tool(
        9,
        "openFile",
        json!({"filePath": "/w/src/a.rs", "startText": "😀", "selectToEndOfLine": true}),
    );
    w.ide_tool(
        9,
        "openFile",
        json!({"filePath": "/w/src/a.rs", "startText": "fn", "endText": "nowhere"}),
    );
    w.ide_tool(
        9,
        "openFile",
        json!({"filePath": "/w/src/a.rs", "startText": "nowhere", "endText": ""}),
    );
    w.open_file_on_disk(
        9,
        json!({"filePath": "/w/other.rs", "startText": "b", "makeFrontmost": false}),
        "a\nb\n",
    );
    w.ide_tool(
        9,
        "openFile",
        json!({"filePath": "/w/src/a.rs", "makeFrontmost": false}),
    );
    w.check(expect![[r#"
        > ide9 attaches
        > ide9 ide_connected pid 4242
        > ed1 attaches (Editor, utf-32)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"let 😀 = 1;\nfn f() {}\n","uri":"file:///w/src/a.rs","version":1}}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"spaced\n","uri":"file:///w/b%20c.rs","version":1}}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"spaced, changed\n"}],"textDocument":{"uri":"file:///w/b%20c.rs","version":2}}
          selection = {"filePath":"/w/b c.rs","fileUrl":"file:///w/b%20c.rs","selection":{"end":{"character":0,"line":1},"isEmpty":true,"start":{"character":0,"line":1}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":3,"line":1},"textDocument":{"uri":"file:///w/src/a.rs"}}
          selection = {"filePath":"/w/src/a.rs","fileUrl":"file:///w/src/a.rs","selection":{"end":{"character":3,"line":1},"isEmpty":true,"start":{"character":3,"line":1}},"text":""}
        > #1 ide9 openFile {"filePath":"/w/src/a.rs"}
          ed1 <- request "moonkale-11" window/showDocument {"takeFocus":true,"uri":"file:///w/src/a.rs"}
          #1 <- Ok tool result
              text:
                Opened file: /w/src/a.rs
        > #2 ide9 openFile {"endText":"}","filePath":"/w/src/a.rs","startText":"fn"}
          ed1 <- request "moonkale-12" window/showDocument {"selection":{"end":{"character":9,"line":1},"start":{"character":0,"line":1}},"takeFocus":true,"uri":"file:///w/src/a.rs"}
          #2 <- Ok tool result
              text:
                Opened file and selected text from "fn" to "}"
        > #3 ide9 openFile {"filePath":"/w/src/a.rs","selectToEndOfLine":true,"startText":"😀"}
          ed1 <- request "moonkale-13" window/showDocument {"selection":{"end":{"character":10,"line":0},"start":{"character":4,"line":0}},"takeFocus":true,"uri":"file:///w/src/a.rs"}
          #3 <- Ok tool result
              text:
                Opened file and selected text "😀"
        > #4 ide9 openFile {"endText":"nowhere","filePath":"/w/src/a.rs","startText":"fn"}
          ed1 <- request "moonkale-14" window/showDocument {"selection":{"end":{"character":2,"line":1},"start":{"character":0,"line":1}},"takeFocus":true,"uri":"file:///w/src/a.rs"}
          #4 <- Ok tool result
              text:
                Opened file and positioned at "fn" (end text "nowhere" not found)
        > #5 ide9 openFile {"endText":"","filePath":"/w/src/a.rs","startText":"nowhere"}
          ed1 <- request "moonkale-15" window/showDocument {"takeFocus":true,"uri":"file:///w/src/a.rs"}
          #5 <- Ok tool result
              text:
                Opened file, but text "nowhere" not found
        > #6 ide9 openFile {"filePath":"/w/other.rs","makeFrontmost":false,"startText":"b"} on disk "a\nb\n"
          ed1 <- request "moonkale-16" window/showDocument {"selection":{"end":{"character":1,"line":1},"start":{"character":0,"line":1}},"takeFocus":false,"uri":"file:///w/other.rs"}
          #6 <- Ok tool result
              text:
                {
                  "filePath": "/w/other.rs",
                  "fileUrl": "file:///w/other.rs",
                  "isClosed": true,
                  "isDirty": false,
                  "isUntitled": false,
                  "languageId": "",
                  "lineCount": 3,
                  "message": "Opened file and selected text \"b\"",
                  "success": true
                }
        > #7 ide9 openFile {"filePath":"/w/src/a.rs","makeFrontmost":false}
          ed1 <- request "moonkale-17" window/showDocument {"takeFocus":false,"uri":"file:///w/src/a.rs"}
          #7 <- Ok tool result
              text:
                {
                  "filePath": "/w/src/a.rs",
                  "fileUrl": "file:///w/src/a.rs",
                  "isClosed": false,
                  "isDirty": false,
                  "isUntitled": false,
                  "languageId": "rust",
                  "lineCount": 3,
                  "message": "Opened file: /w/src/a.rs",
                  "success": true
                }
    "#]]);
}

#[test]
fn agent_tools() {
    let mut w = world();
    w.agent_tool("readBuffer", json!({"filePath": "/w/b c.rs"}));
    w.agent_tool("readBuffer", json!({"filePath": "/w/none.rs"}));
    w.agent_tool("readBuffer", json!({"filePath": "relative.rs"}));
    w.agent_tool(
        "openFile",
        json!({"filePath": "/w/src/a.rs", "startLine": 2, "endLine": 1}),
    );
    w.agent_tool("openFile", json!({"filePath": "/w/src/a.rs"}));
    w.agent_tool("getLatestSelection", json!({}));
    w.agent_tool("getWorkspaceFolders", json!({}));
    w.detach(1);
    w.detach(2);
    w.agent_tool("openFile", json!({"filePath": "/w/src/a.rs"}));
    w.check(expect![[r#"
        > ide9 attaches
        > ide9 ide_connected pid 4242
        > ed1 attaches (Editor, utf-32)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"let 😀 = 1;\nfn f() {}\n","uri":"file:///w/src/a.rs","version":1}}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"spaced\n","uri":"file:///w/b%20c.rs","version":1}}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"spaced, changed\n"}],"textDocument":{"uri":"file:///w/b%20c.rs","version":2}}
          selection = {"filePath":"/w/b c.rs","fileUrl":"file:///w/b%20c.rs","selection":{"end":{"character":0,"line":1},"isEmpty":true,"start":{"character":0,"line":1}},"text":""}
        > ed1 moonkale/selectionChanged {"cursor":{"character":3,"line":1},"textDocument":{"uri":"file:///w/src/a.rs"}}
          selection = {"filePath":"/w/src/a.rs","fileUrl":"file:///w/src/a.rs","selection":{"end":{"character":3,"line":1},"isEmpty":true,"start":{"character":3,"line":1}},"text":""}
        > #1 agent tool readBuffer {"filePath":"/w/b c.rs"}
          #1 <- Ok tool result
              text:
                {"filePath":"/w/b c.rs","isDirty":true,"text":"spaced, changed\n","version":2}
        > #2 agent tool readBuffer {"filePath":"/w/none.rs"}
          #2 <- Ok tool result (isError)
              text:
                /w/none.rs is not open in any editor; read it from disk instead
        > #3 agent tool readBuffer {"filePath":"relative.rs"}
          #3 <- Ok tool result (isError)
              text:
                filePath must be an absolute path
        > #4 agent tool openFile {"endLine":1,"filePath":"/w/src/a.rs","startLine":2}
          ed1 <- request "moonkale-11" window/showDocument {"selection":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"takeFocus":true,"uri":"file:///w/src/a.rs"}
          #4 <- Ok tool result
              text:
                Opened /w/src/a.rs
        > #5 agent tool openFile {"filePath":"/w/src/a.rs"}
          ed1 <- request "moonkale-12" window/showDocument {"takeFocus":true,"uri":"file:///w/src/a.rs"}
          #5 <- Ok tool result
              text:
                Opened /w/src/a.rs
        > #6 agent tool getLatestSelection {}
          #6 <- Ok tool result
              text:
                {
                  "filePath": "/w/src/a.rs",
                  "fileUrl": "file:///w/src/a.rs",
                  "selection": {
                    "end": {
                      "character": 3,
                      "line": 1
                    },
                    "isEmpty": true,
                    "start": {
                      "character": 3,
                      "line": 1
                    }
                  },
                  "text": ""
                }
        > #7 agent tool getWorkspaceFolders {}
          #7 <- Ok tool result
              text:
                {
                  "folders": [
                    {
                      "index": 0,
                      "name": "w",
                      "path": "/w",
                      "uri": "file:///w"
                    }
                  ],
                  "rootPath": "/w",
                  "success": true,
                  "workspaceFile": null
                }
        > ed1 detaches
          terminals <- Detach ed1
          selection = none
        > ed2 detaches
          terminals <- Detach ed2
        > #8 agent tool openFile {"filePath":"/w/src/a.rs"}
          #8 <- Ok tool result (isError)
              text:
                no editor is attached
    "#]]);
}

/// `moonkale.sendToClaude`: an `at_mentioned` to every CLI, queued while
/// none is connected.
#[test]
fn send_to_claude() {
    let mut w = World::new();
    w.attach(1, Caps::BUTTONS);
    w.did_open(1, A, 1, "a\nb\nc\n");
    w.execute(1, "moonkale.sendToClaude", json!([]));
    w.execute(
        1,
        "moonkale.sendToClaude",
        json!([A, {"start": {"line": 0, "character": 0}, "end": {"line": 2, "character": 0}}]),
    );
    w.notify(1, "moonkale/selectionChanged", json!({"textDocument": {"uri": A}, "selection": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 1}}}));
    w.execute(1, "moonkale.sendToClaude", json!([]));
    w.ide_attach(9);
    w.ide_attach(8);
    w.execute(1, "moonkale.sendToClaude", json!([A]));
    w.execute(1, "moonkale.sendToClaude", json!(["untitled:x"]));
    w.execute(1, "moonkale.sendToClaude", json!(["not a uri"]));
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"a\nb\nc\n","uri":"file:///w/src/a.rs","version":1}}
        > #1 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.sendToClaude"}
          #1 <- Err -32602 no selection to send
        > #2 ed1 workspace/executeCommand {"arguments":["file:///w/src/a.rs",{"end":{"character":0,"line":2},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude"}
          #2 <- Ok {"queued":true}
        > ed1 moonkale/selectionChanged {"selection":{"end":{"character":1,"line":1},"start":{"character":0,"line":1}},"textDocument":{"uri":"file:///w/src/a.rs"}}
        > #3 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.sendToClaude"}
          #3 <- Ok {"queued":true}
        > ide9 attaches
          ide9 <- at_mentioned {"filePath":"/w/src/a.rs","lineEnd":1,"lineStart":0}
          ide9 <- at_mentioned {"filePath":"/w/src/a.rs","lineEnd":1,"lineStart":1}
          selection = {"filePath":"/w/src/a.rs","fileUrl":"file:///w/src/a.rs","selection":{"end":{"character":1,"line":1},"isEmpty":false,"start":{"character":0,"line":1}},"text":"b"}
        > ide8 attaches
        > #4 ed1 workspace/executeCommand {"arguments":["file:///w/src/a.rs"],"command":"moonkale.sendToClaude"}
          ide8 <- at_mentioned {"filePath":"/w/src/a.rs"}
          ide9 <- at_mentioned {"filePath":"/w/src/a.rs"}
          #4 <- Ok {"sent":2}
        > #5 ed1 workspace/executeCommand {"arguments":["untitled:x"],"command":"moonkale.sendToClaude"}
          #5 <- Err -32602 only file: URIs can be sent
        > #6 ed1 workspace/executeCommand {"arguments":["not a uri"],"command":"moonkale.sendToClaude"}
          #6 <- Err -32602 not a URI
    "#]]);
}

/// A CLI behind a sandbox link (ide8) learns nothing of the documents an
/// editor holds outside the workspace or in its `.git`, as its tool
/// arguments could not name them; a CLI on the host's port (ide9) sees
/// them as before. The selection there is published marked as outside (a
/// link's writer sends it nothing), and to ide8's tools it is no
/// selection; listings leave those documents out; a mention of one goes
/// only to a CLI that may see it, and waits for one while none is there.
#[test]
fn a_linked_cli_learns_nothing_of_documents_outside_the_workspace() {
    const SECRET: &str = "file:///home/u/.aws/credentials";
    const GIT: &str = "file:///w/.git/COMMIT_EDITMSG";
    let mut w = World::new();
    w.ide_attach(9);
    w.ide_link_attach(8);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, A, 1, "fn a() {}\n");
    w.did_open(1, GIT, 1, "fix\n");
    w.did_open(1, SECRET, 1, "[default]\naws_secret_access_key = KEY\n");
    for uri in [A, SECRET, GIT] {
        w.notify(
            1,
            "moonkale/publishDiagnostics",
            json!({"uri": uri, "source": "lint", "diagnostics": [diagnostic(0, 0, 1, 2, "look")]}),
        );
    }
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": SECRET}, "selection": {
            "start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 26}}}),
    );
    w.ide_tool(9, "getCurrentSelection", json!({}));
    w.ide_tool(8, "getCurrentSelection", json!({}));
    w.ide_tool(8, "getLatestSelection", json!({}));
    w.ide_tool(8, "getOpenEditors", json!({}));
    w.ide_tool(8, "getDiagnostics", json!({}));
    w.ide_tool(8, "getDiagnostics", json!({"uri": SECRET}));
    w.execute(1, "moonkale.sendToClaude", json!([SECRET]));
    w.execute(1, "moonkale.sendToClaude", json!([A]));
    // Only the linked CLI is left: a mention of the secret file waits for
    // a CLI that may see it.
    w.ide_detach(9);
    w.execute(1, "moonkale.sendToClaude", json!([SECRET]));
    w.ide_attach(7);
    w.check(expect![[r#"
        > ide9 attaches
        > ide8 attaches through a sandbox link
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"fn a() {}\n","uri":"file:///w/src/a.rs","version":1}}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"fix\n","uri":"file:///w/.git/COMMIT_EDITMSG","version":1}}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"[default]\naws_secret_access_key = KEY\n","uri":"file:///home/u/.aws/credentials","version":1}}
        > ed1 moonkale/publishDiagnostics {"diagnostics":[{"code":308,"message":"look","range":{"end":{"character":1,"line":0},"start":{"character":0,"line":0}},"severity":2,"source":"rustc"}],"source":"lint","uri":"file:///w/src/a.rs"}
        > ed1 moonkale/publishDiagnostics {"diagnostics":[{"code":308,"message":"look","range":{"end":{"character":1,"line":0},"start":{"character":0,"line":0}},"severity":2,"source":"rustc"}],"source":"lint","uri":"file:///home/u/.aws/credentials"}
        > ed1 moonkale/publishDiagnostics {"diagnostics":[{"code":308,"message":"look","range":{"end":{"character":1,"line":0},"start":{"character":0,"line":0}},"severity":2,"source":"rustc"}],"source":"lint","uri":"file:///w/.git/COMMIT_EDITMSG"}
        > ed1 moonkale/selectionChanged {"selection":{"end":{"character":26,"line":1},"start":{"character":0,"line":1}},"textDocument":{"uri":"file:///home/u/.aws/credentials"}}
          selection = {"filePath":"/home/u/.aws/credentials","fileUrl":"file:///home/u/.aws/credentials","selection":{"end":{"character":26,"line":1},"isEmpty":false,"start":{"character":0,"line":1}},"text":"aws_secret_access_key = KE"} (outside the workspace)
        > #1 ide9 getCurrentSelection {}
          #1 <- Ok tool result
              text:
                {
                  "filePath": "/home/u/.aws/credentials",
                  "fileUrl": "file:///home/u/.aws/credentials",
                  "selection": {
                    "end": {
                      "character": 26,
                      "line": 1
                    },
                    "isEmpty": false,
                    "start": {
                      "character": 0,
                      "line": 1
                    }
                  },
                  "success": true,
                  "text": "aws_secret_access_key = KE"
                }
        > #2 ide8 getCurrentSelection {}
          #2 <- Ok tool result
              text:
                {
                  "message": "No active editor found",
                  "success": false
                }
        > #3 ide8 getLatestSelection {}
          #3 <- Ok tool result
              text:
                {
                  "message": "No selection available",
                  "success": false
                }
        > #4 ide8 getOpenEditors {}
          #4 <- Ok tool result
              text:
                {
                  "tabs": [
                    {
                      "fileName": "/w/src/a.rs",
                      "groupIndex": 0,
                      "isActive": false,
                      "isDirty": false,
                      "isGroupActive": true,
                      "isPinned": false,
                      "isPreview": false,
                      "isUntitled": false,
                      "label": "a.rs",
                      "languageId": "rust",
                      "lineCount": 2,
                      "uri": "file:///w/src/a.rs",
                      "viewColumn": 1
                    }
                  ]
                }
        > #5 ide8 getDiagnostics {}
          #5 <- Ok tool result
              text:
                [
                  {
                    "diagnostics": [
                      {
                        "code": "308",
                        "message": "look",
                        "range": {
                          "end": {
                            "character": 1,
                            "line": 0
                          },
                          "start": {
                            "character": 0,
                            "line": 0
                          }
                        },
                        "severity": "Warning",
                        "source": "rustc"
                      }
                    ],
                    "uri": "file:///w/src/a.rs"
                  }
                ]
        > #6 ide8 getDiagnostics {"uri":"file:///home/u/.aws/credentials"}
          #6 <- Ok tool result
              text:
                []
        > #7 ed1 workspace/executeCommand {"arguments":["file:///home/u/.aws/credentials"],"command":"moonkale.sendToClaude"}
          ide9 <- at_mentioned {"filePath":"/home/u/.aws/credentials"}
          #7 <- Ok {"sent":1}
        > #8 ed1 workspace/executeCommand {"arguments":["file:///w/src/a.rs"],"command":"moonkale.sendToClaude"}
          ide8 <- at_mentioned {"filePath":"/w/src/a.rs"}
          ide9 <- at_mentioned {"filePath":"/w/src/a.rs"}
          #8 <- Ok {"sent":2}
        > ide9 detaches
        > #9 ed1 workspace/executeCommand {"arguments":["file:///home/u/.aws/credentials"],"command":"moonkale.sendToClaude"}
          #9 <- Ok {"queued":true}
        > ide7 attaches
          ide7 <- at_mentioned {"filePath":"/home/u/.aws/credentials"}
    "#]]);
}

/// A document an editor opened through a symlink (the workspace's `keys`
/// pointing elsewhere) is, for a linked CLI, as if outside the workspace:
/// no selection, not listed, no diagnostics, no mention. The CLI on the
/// host's port sees it.
#[test]
fn a_linked_cli_learns_nothing_of_documents_opened_through_a_symlink() {
    const LINKED: &str = "file:///w/keys/credentials";
    let mut w = World::new();
    w.ide_attach(9);
    w.ide_link_attach(8);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, A, 1, "fn a() {}\n");
    w.did_open_through_symlink(1, LINKED, "[default]\nkey = KEY\n");
    w.notify(
        1,
        "moonkale/publishDiagnostics",
        json!({"uri": LINKED, "source": "lint", "diagnostics": [diagnostic(0, 0, 1, 2, "look")]}),
    );
    w.notify(
        1,
        "moonkale/selectionChanged",
        json!({"textDocument": {"uri": LINKED}, "selection": {
            "start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 9}}}),
    );
    w.ide_tool(8, "getCurrentSelection", json!({}));
    w.ide_tool(8, "getOpenEditors", json!({}));
    w.ide_tool(8, "getDiagnostics", json!({}));
    w.ide_tool(9, "getOpenEditors", json!({}));
    w.ide_detach(9);
    w.execute(1, "moonkale.sendToClaude", json!([LINKED]));
    w.check(expect![[r#"
        > ide9 attaches
        > ide8 attaches through a sandbox link
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"fn a() {}\n","uri":"file:///w/src/a.rs","version":1}}
        > ed1 textDocument/didOpen through a symlink file:///w/keys/credentials
        > ed1 moonkale/publishDiagnostics {"diagnostics":[{"code":308,"message":"look","range":{"end":{"character":1,"line":0},"start":{"character":0,"line":0}},"severity":2,"source":"rustc"}],"source":"lint","uri":"file:///w/keys/credentials"}
        > ed1 moonkale/selectionChanged {"selection":{"end":{"character":9,"line":1},"start":{"character":0,"line":1}},"textDocument":{"uri":"file:///w/keys/credentials"}}
          selection = {"filePath":"/w/keys/credentials","fileUrl":"file:///w/keys/credentials","selection":{"end":{"character":9,"line":1},"isEmpty":false,"start":{"character":0,"line":1}},"text":"key = KEY"} (outside the workspace)
        > #1 ide8 getCurrentSelection {}
          #1 <- Ok tool result
              text:
                {
                  "message": "No active editor found",
                  "success": false
                }
        > #2 ide8 getOpenEditors {}
          #2 <- Ok tool result
              text:
                {
                  "tabs": [
                    {
                      "fileName": "/w/src/a.rs",
                      "groupIndex": 0,
                      "isActive": false,
                      "isDirty": false,
                      "isGroupActive": true,
                      "isPinned": false,
                      "isPreview": false,
                      "isUntitled": false,
                      "label": "a.rs",
                      "languageId": "rust",
                      "lineCount": 2,
                      "uri": "file:///w/src/a.rs",
                      "viewColumn": 1
                    }
                  ]
                }
        > #3 ide8 getDiagnostics {}
          #3 <- Ok tool result
              text:
                []
        > #4 ide9 getOpenEditors {}
          #4 <- Ok tool result
              text:
                {
                  "tabs": [
                    {
                      "fileName": "/w/keys/credentials",
                      "groupIndex": 0,
                      "isActive": true,
                      "isDirty": false,
                      "isGroupActive": true,
                      "isPinned": false,
                      "isPreview": false,
                      "isUntitled": false,
                      "label": "credentials",
                      "languageId": "rust",
                      "lineCount": 3,
                      "uri": "file:///w/keys/credentials",
                      "viewColumn": 1
                    },
                    {
                      "fileName": "/w/src/a.rs",
                      "groupIndex": 0,
                      "isActive": false,
                      "isDirty": false,
                      "isGroupActive": true,
                      "isPinned": false,
                      "isPreview": false,
                      "isUntitled": false,
                      "label": "a.rs",
                      "languageId": "rust",
                      "lineCount": 2,
                      "uri": "file:///w/src/a.rs",
                      "viewColumn": 1
                    }
                  ]
                }
        > ide9 detaches
        > #5 ed1 workspace/executeCommand {"arguments":["file:///w/keys/credentials"],"command":"moonkale.sendToClaude"}
          #5 <- Ok {"queued":true}
    "#]]);
}
