//! Topics front ends subscribe to (a session, every session, a terminal),
//! what the hub hands the agent and terminal ports, and what it refuses
//! when a port is absent or full.

use expect_test::expect;
use serde_json::json;

use super::harness::{Caps, Ports, World};
use crate::Topic;
use crate::workspace::Limits;

#[test]
fn subscriptions_and_publish() {
    let mut w = World::new();
    w.attach(1, Caps::PLAIN);
    w.attach(2, Caps::PLAIN);
    w.attach(3, Caps::OBSERVER);
    w.request(1, "moonkale/agent/subscribe", json!({"session": "s1"}));
    w.request(2, "moonkale/agent/subscribe", json!({}));
    w.request(3, "moonkale/terminal/subscribe", json!({"terminal": 7}));
    w.request(3, "moonkale/terminal/subscribe", json!({}));
    w.publish(
        Topic::Session("s1".into()),
        "moonkale/agent/text",
        json!({"session": "s1", "text": "hi"}),
    );
    w.publish(
        Topic::Session("s2".into()),
        "moonkale/agent/text",
        json!({"session": "s2", "text": "ho"}),
    );
    w.publish(
        Topic::Terminal(7),
        "moonkale/terminal/output",
        json!({"terminal": 7}),
    );
    w.request(2, "moonkale/agent/unsubscribe", json!({}));
    w.publish(
        Topic::Session("s1".into()),
        "moonkale/agent/text",
        json!({"session": "s1", "text": "again"}),
    );
    // A host subscribes the connection that started a topic; one that is
    // gone is not subscribed.
    w.step(
        "host subscribes ed2 to terminal 8",
        crate::Event::Subscribe {
            editor: crate::EditorId(2),
            topic: Topic::Terminal(8),
        },
    );
    w.step(
        "host subscribes ed5 to terminal 8",
        crate::Event::Subscribe {
            editor: crate::EditorId(5),
            topic: Topic::Terminal(8),
        },
    );
    w.publish(
        Topic::Terminal(8),
        "moonkale/terminal/output",
        json!({"terminal": 8}),
    );
    w.step(
        "terminal 8 ends",
        crate::Event::TopicEnded {
            topic: Topic::Terminal(8),
        },
    );
    w.publish(
        Topic::Terminal(8),
        "moonkale/terminal/output",
        json!({"terminal": 8}),
    );
    w.detach(1);
    w.publish(
        Topic::Session("s1".into()),
        "moonkale/agent/text",
        json!({"session": "s1", "text": "gone"}),
    );
    w.check(expect![[r#"
        > ed1 attaches (Editor, utf-32)
        > ed2 attaches (Editor, utf-32)
        > ed3 attaches (Observer, utf-16)
        > #1 ed1 moonkale/agent/subscribe {"session":"s1"}
          #1 <- Ok {}
        > #2 ed2 moonkale/agent/subscribe {}
          #2 <- Ok {}
        > #3 ed3 moonkale/terminal/subscribe {"terminal":7}
          #3 <- Ok {}
        > #4 ed3 moonkale/terminal/subscribe {}
          #4 <- Err -32602 invalid params: missing field `terminal` at line 1 column 2
        > publish Session("s1") moonkale/agent/text {"session":"s1","text":"hi"}
          ed1 <- moonkale/agent/text {"session":"s1","text":"hi"}
          ed2 <- moonkale/agent/text {"session":"s1","text":"hi"}
        > publish Session("s2") moonkale/agent/text {"session":"s2","text":"ho"}
          ed2 <- moonkale/agent/text {"session":"s2","text":"ho"}
        > publish Terminal(7) moonkale/terminal/output {"terminal":7}
          ed3 <- moonkale/terminal/output {"terminal":7}
        > #5 ed2 moonkale/agent/unsubscribe {}
          #5 <- Ok {}
        > publish Session("s1") moonkale/agent/text {"session":"s1","text":"again"}
          ed1 <- moonkale/agent/text {"session":"s1","text":"again"}
        > host subscribes ed2 to terminal 8
        > host subscribes ed5 to terminal 8
        > publish Terminal(8) moonkale/terminal/output {"terminal":8}
          ed2 <- moonkale/terminal/output {"terminal":8}
        > terminal 8 ends
        > publish Terminal(8) moonkale/terminal/output {"terminal":8}
        > ed1 detaches
          terminals <- Detach ed1
        > publish Session("s1") moonkale/agent/text {"session":"s1","text":"gone"}
    "#]]);
}

/// The agent keeps its warm spare while editors are attached: it hears
/// every change of their number (observers are not counted).
#[test]
fn the_agent_hears_how_many_editors_are_attached() {
    let mut w = World::new();
    w.attach(1, Caps::PLAIN);
    w.attach(2, Caps::OBSERVER);
    w.attach(3, Caps::PLAIN);
    w.detach(1);
    w.detach(2);
    w.detach(3);
    assert_eq!(w.editor_counts, [1, 1, 2, 1, 1, 0]);
}

#[test]
fn requests_go_to_the_hosts() {
    let mut w = World::new();
    w.attach(1, Caps::PLAIN);
    w.request(1, "moonkale/agent/list", json!({}));
    w.host_answers(json!({"sessions": []}));
    w.request(1, "moonkale/terminal/open", json!({"command": ["sh"]}));
    w.host_answers(json!({"terminal": 1}));
    w.execute(1, "moonkale.startClaude", json!([["--model", "opus"]]));
    w.execute(1, "moonkale.startClaude", json!([]));
    w.detach(1);
    w.check(expect![[r#"
        > ed1 attaches (Editor, utf-32)
        > #1 ed1 moonkale/agent/list {}
          agent <- Request ed1 moonkale/agent/list {}
          #1 waits
        > the host answers moonkale/agent/list
          #1 <- Ok {"sessions":[]}
        > #2 ed1 moonkale/terminal/open {"command":["sh"]}
          terminals <- Request ed1 moonkale/terminal/open {"command":["sh"]}
          #2 waits
        > the host answers moonkale/terminal/open
          #2 <- Ok {"terminal":1}
        > #3 ed1 workspace/executeCommand {"arguments":[["--model","opus"]],"command":"moonkale.startClaude"}
          terminals <- Request ed1 moonkale/terminal/startClaude {"args":["--model","opus"],"sandbox":[]}
          #3 waits
        > #4 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.startClaude"}
          terminals <- Request ed1 moonkale/terminal/startClaude {"args":[],"sandbox":[]}
          #4 waits
        > ed1 detaches
          terminals <- Detach ed1
    "#]]);
}

#[test]
fn without_hosts_or_with_busy_ones() {
    let mut w = World::build(Ports::None, Limits::default());
    w.attach(1, Caps::PLAIN);
    w.request(1, "moonkale/agent/start", json!({}));
    w.request(1, "moonkale/terminal/open", json!({}));
    w.execute(1, "moonkale.startClaude", json!([]));
    w.execute(1, "moonkale.trustWorkspace", json!([]));
    w.check(expect![[r#"
        > ed1 attaches (Editor, utf-32)
        > #1 ed1 moonkale/agent/start {}
          #1 <- Err -32601 the agent is not available in this service
        > #2 ed1 moonkale/terminal/open {}
          #2 <- Err -32601 terminals are not available in this service
        > #3 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.startClaude"}
          #3 <- Err -32601 terminals are not available in this service
        > #4 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.trustWorkspace"}
          #4 <- Err -32601 the agent is not available in this service
    "#]]);

    let mut w = World::build(Ports::Full, Limits::default());
    w.attach(1, Caps::PLAIN);
    w.request(1, "moonkale/agent/start", json!({}));
    w.request(1, "moonkale/agent/start", json!({}));
    w.request(1, "moonkale/terminal/open", json!({}));
    w.request(1, "moonkale/terminal/open", json!({}));
    w.check(expect![[r#"
        > ed1 attaches (Editor, utf-32)
        > #1 ed1 moonkale/agent/start {}
          #1 <- Err -32603 the agent is busy or stopping; try again
        > #2 ed1 moonkale/agent/start {}
          #2 <- Err -32603 the agent is busy or stopping; try again
        > #3 ed1 moonkale/terminal/open {}
          #3 <- Err -32603 terminals are busy or stopping; try again
        > #4 ed1 moonkale/terminal/open {}
          #4 <- Err -32603 terminals are busy or stopping; try again
    "#]]);
}

/// `moonkale/terminal/openLink`: a file link from a terminal, shown in
/// the active editor; only inside the workspace.
#[test]
fn terminal_links_open_in_the_active_editor() {
    let mut w = World::new();
    w.attach(3, Caps::OBSERVER);
    w.request(
        3,
        "moonkale/terminal/openLink",
        json!({"path": "/w/src/main.rs", "line": 3}),
    );
    w.attach(1, Caps::BUTTONS);
    w.request(
        3,
        "moonkale/terminal/openLink",
        json!({"path": "/w/src/main.rs", "line": 3, "column": 7}),
    );
    w.request(
        3,
        "moonkale/terminal/openLink",
        json!({"path": "/etc/passwd", "line": 1}),
    );
    w.request(
        3,
        "moonkale/terminal/openLink",
        json!({"path": "src/main.rs", "line": 1}),
    );
    // Lexical confinement: `..` cannot climb out, `.git` is not shown.
    w.request(
        3,
        "moonkale/terminal/openLink",
        json!({"path": "/w/../etc/passwd", "line": 1}),
    );
    w.request(
        3,
        "moonkale/terminal/openLink",
        json!({"path": "/w/.git/config", "line": 1}),
    );
    w.request(
        3,
        "moonkale/terminal/openLink",
        json!({"path": "/w/src/main.rs"}),
    );
    w.check(expect![[r#"
        > ed3 attaches (Observer, utf-16)
        > #1 ed3 moonkale/terminal/openLink {"line":3,"path":"/w/src/main.rs"}
          #1 <- Err -32803 no editor is attached
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > #2 ed3 moonkale/terminal/openLink {"column":7,"line":3,"path":"/w/src/main.rs"}
          ed1 <- request "moonkale-3" window/showDocument {"selection":{"end":{"character":6,"line":2},"start":{"character":6,"line":2}},"takeFocus":true,"uri":"file:///w/src/main.rs"}
          #2 <- Ok {}
        > #3 ed3 moonkale/terminal/openLink {"line":1,"path":"/etc/passwd"}
          #3 <- Err -32602 path must be an absolute path inside the workspace (outside the workspace: "/etc/passwd")
        > #4 ed3 moonkale/terminal/openLink {"line":1,"path":"src/main.rs"}
          #4 <- Err -32602 path must be an absolute path inside the workspace (not an absolute path: "src/main.rs")
        > #5 ed3 moonkale/terminal/openLink {"line":1,"path":"/w/../etc/passwd"}
          #5 <- Err -32602 path must be an absolute path inside the workspace (`..` is not allowed: "/w/../etc/passwd")
        > #6 ed3 moonkale/terminal/openLink {"line":1,"path":"/w/.git/config"}
          #6 <- Err -32602 path must be an absolute path inside the workspace (inside .git: "/w/.git/config")
        > #7 ed3 moonkale/terminal/openLink {"path":"/w/src/main.rs"}
          #7 <- Err -32602 invalid params: missing field `line` at line 1 column 25
    "#]]);
}

/// A front end following the status (the web shell's header) hears who
/// comes and goes and what starts or stops waiting, each move once; not
/// typing or selecting, and not after it unsubscribed by leaving.
#[test]
fn status_subscribers_hear_the_roster_move() {
    use super::harness::diff;
    const TARGET: &str = "file:///w/src/lib.rs";
    let mut w = World::new();
    w.attach(3, Caps::OBSERVER);
    w.request(3, "moonkale/status/subscribe", serde_json::Value::Null);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, TARGET, 1, "one\n");
    w.did_change(1, TARGET, 2, "two\n");
    w.ide_attach(9);
    w.open_diff(
        9,
        diff("✻ [Claude Code] lib.rs", "/w/src/lib.rs", "two\n", "2\n"),
    );
    w.ide_detach(9);
    // The warm spare started counts; its memory read again does not.
    let spare = |rss| moonkale_protocol::status::SpareStatus {
        pid: 4242,
        permission_mode: moonkale_protocol::PermissionMode::Default,
        model: None,
        trusted: false,
        jailed: false,
        rss_bytes: Some(rss),
    };
    w.step(
        "spare",
        crate::Event::AgentSpare {
            spare: Some(spare(1)),
        },
    );
    w.step(
        "spare's memory",
        crate::Event::AgentSpare {
            spare: Some(spare(2)),
        },
    );
    w.detach(1);
    w.detach(3);
    w.attach(2, Caps::PLAIN);
    w.check(expect![[r#"
        > ed3 attaches (Observer, utf-16)
        > #1 ed3 moonkale/status/subscribe null
          #1 <- Ok status editors [] claude [] proposals [] trusted null sets 0 files 0 spare null
        > ed1 attaches (Editor, utf-32)
          ed3 <- moonkale/status/changed editors [ed1 "ed1"] claude [] proposals [] trusted null sets 0 files 0 spare null
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"two\n"}],"textDocument":{"uri":"file:///w/src/lib.rs","version":2}}
        > ide9 attaches
          ed3 <- moonkale/status/changed editors [ed1 "ed1"] claude [ide9 pid null] proposals [] trusted null sets 0 files 0 spare null
          selection = {"filePath":"/w/src/lib.rs","fileUrl":"file:///w/src/lib.rs","selection":{"end":{"character":0,"line":1},"isEmpty":true,"start":{"character":0,"line":1}},"text":""}
        > #2 ide9 openDiff "✻ [Claude Code] lib.rs" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "two\n" new "2\n"
          ed1 <- request "moonkale-8" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- window/showMessage {"message":"Claude Code proposes 1 change to lib.rs, each marked on its lines. Decide with the code actions on lib.rs: \"Accept Claude Code's edit to lib.rs\" or \"Reject Claude Code's edit to lib.rs\", or per change \"Keep this change\" and \"Revert this change\".","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1, replacing line 1 of the file:\n- two","range":{"end":{"character":0,"line":1},"start":{"character":0,"line":0}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed3 <- moonkale/status/changed editors [ed1 "ed1"] claude [ide9 pid null] proposals [✻ [Claude Code] lib.rs] trusted null sets 0 files 0 spare null
          #2 waits
        > ide9 detaches
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed3 <- moonkale/status/changed editors [ed1 "ed1"] claude [] proposals [] trusted null sets 0 files 0 spare null
          #2 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                ✻ [Claude Code] lib.rs
        > spare
          ed3 <- moonkale/status/changed editors [ed1 "ed1"] claude [] proposals [] trusted null sets 0 files 0 spare 4242
        > spare's memory
        > ed1 detaches
          ed3 <- moonkale/status/changed editors [] claude [] proposals [] trusted null sets 0 files 0 spare 4242
          terminals <- Detach ed1
        > ed3 detaches
          terminals <- Detach ed3
        > ed2 attaches (Editor, utf-32)
    "#]]);
}
