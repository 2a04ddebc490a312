//! Edits Claude Code proposes (`openDiff`): shown in every editor, decided
//! with buttons, commands or code actions (a hunk reverted in the proposal
//! document first, if the user likes), answered on the `openDiff` reply,
//! and withdrawn when the CLI goes.

use expect_test::expect;
use serde_json::json;

use super::harness::{Caps, World, diff};
use moonkale_protocol::ide::OpenDiff;

const TARGET: &str = "file:///w/src/lib.rs";
const PROPOSAL: &str = "file:///run/user/1000/moonkale/proposals/1-ab/lib.rs";
const OLD: &str = "one\ntwo\nthree\nfour\n";
const NEW: &str = "one\n2\nthree\nfour\nfive\n";

fn open_diff(tab: &str) -> OpenDiff {
    diff(tab, "/w/src/lib.rs", OLD, NEW)
}

/// A CLI, an editor with buttons holding the target unmodified, and one
/// without buttons holding it modified.
fn world() -> World {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::BUTTONS);
    w.attach(2, Caps::PLAIN);
    w.did_open(1, TARGET, 1, OLD);
    w.did_open(2, TARGET, 1, OLD);
    w.did_change(2, TARGET, 2, "one\ntwo\nthree\nfour (mine)\n");
    w
}

#[test]
fn reviewed_hunk_by_hunk_then_accepted_with_a_code_action() {
    let mut w = world();
    w.open_diff(9, open_diff("✻ [Claude Code] lib.rs"));
    w.status();
    w.did_open(2, PROPOSAL, 1, NEW);
    w.code_actions(2, PROPOSAL, (1, 0), (1, 0));
    w.code_actions(2, TARGET, (0, 0), (0, 0));
    w.execute(2, "moonkale.revertHunk", json!([PROPOSAL, 0]));
    w.did_change(2, PROPOSAL, 2, "one\ntwo\nthree\nfour\nfive\n");
    w.code_actions(2, PROPOSAL, (0, 0), (9, 0));
    w.execute(2, "moonkale.revertHunk", json!([PROPOSAL, 5]));
    w.execute(2, "moonkale.revertHunk", json!([PROPOSAL]));
    w.execute(1, "moonkale.revertHunk", json!([PROPOSAL, 0]));
    w.execute(2, "moonkale.acceptProposal", json!([PROPOSAL]));
    w.execute(2, "moonkale.acceptProposal", json!([]));
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed2 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed2 textDocument/didChange {"contentChanges":[{"text":"one\ntwo\nthree\nfour (mine)\n"}],"textDocument":{"uri":"file:///w/src/lib.rs","version":2}}
          selection = {"filePath":"/w/src/lib.rs","fileUrl":"file:///w/src/lib.rs","selection":{"end":{"character":0,"line":4},"isEmpty":true,"start":{"character":0,"line":4}},"text":""}
        > #1 ide9 openDiff "✻ [Claude Code] lib.rs" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-10" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-11" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed1 <- request "moonkale-12" window/showMessageRequest {"actions":[{"title":"Accept"},{"title":"Reject"}],"message":"Claude Code proposes 2 changes to lib.rs. Edit the proposal if you like, then accept or reject it.","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- request "moonkale-13" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- window/showMessage {"message":"Claude Code proposes 2 changes to lib.rs, each marked on its lines. Decide with the code actions on lib.rs: \"Accept Claude Code's edit to lib.rs\" or \"Reject Claude Code's edit to lib.rs\", or per change \"Keep this change\" and \"Revert this change\".","type":3}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 waits
        > status
          workspace /w (pid 0)
          0 claude processes run by the service
          Claude Code clients: 1 (pid unknown)
          1 proposed edit waiting for a decision in an editor
            file:///w/src/lib.rs
          2 editors attached
            #1 ed1 via unix, utf-16
              v1     file:///w/src/lib.rs
            #2 ed2 via unix, utf-32  [active]
              selection file:///w/src/lib.rs 4:0 -> 4:0 (from edit)
              v2     file:///w/src/lib.rs modified
          diagnostics for 0 (document, source) pairs
          18726 bytes held
          claude client 9 pid None
          proposal "✻ [Claude Code] lib.rs": file:///w/src/lib.rs in file:///run/user/1000/moonkale/proposals/1-ab/lib.rs
        > ed2 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\n2\nthree\nfour\nfive\n","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","version":1}}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
        > #2 ed2 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":1},"start":{"character":0,"line":1}},"textDocument":{"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}}
          #2 <- Ok
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.acceptProposal","title":"Accept Claude Code's edit to lib.rs"},"kind":"quickfix","title":"Accept Claude Code's edit to lib.rs"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.rejectProposal","title":"Reject Claude Code's edit to lib.rs"},"kind":"quickfix","title":"Reject Claude Code's edit to lib.rs"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.keepHunk","title":"Keep this change (line 2 of the proposal)"},"kind":"quickfix","title":"Keep this change (line 2 of the proposal)"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.revertHunk","title":"Revert this change (line 2 of the proposal)"},"kind":"quickfix","title":"Revert this change (line 2 of the proposal)"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",{"end":{"character":0,"line":1},"start":{"character":0,"line":1}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
          selection = {"filePath":"/run/user/1000/moonkale/proposals/1-ab/lib.rs","fileUrl":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","selection":{"end":{"character":0,"line":1},"isEmpty":true,"start":{"character":0,"line":1}},"text":""} (outside the workspace)
        > #3 ed2 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/src/lib.rs"}}
          #3 <- Ok
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.acceptProposal","title":"Accept Claude Code's edit to lib.rs"},"kind":"quickfix","title":"Accept Claude Code's edit to lib.rs"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.rejectProposal","title":"Reject Claude Code's edit to lib.rs"},"kind":"quickfix","title":"Reject Claude Code's edit to lib.rs"}
              {"command":{"arguments":["file:///w/src/lib.rs",{"end":{"character":0,"line":0},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
          selection = {"filePath":"/w/src/lib.rs","fileUrl":"file:///w/src/lib.rs","selection":{"end":{"character":0,"line":0},"isEmpty":true,"start":{"character":0,"line":0}},"text":""}
        > #4 ed2 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.revertHunk"}
          ed2 <- request "moonkale-20" workspace/applyEdit {"edit":{"changes":{"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs":[{"newText":"two\n","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}}}]}},"label":"Revert Claude Code's change"}
          #4 <- Ok {"reverted":0}
        > ed2 textDocument/didChange {"contentChanges":[{"text":"one\ntwo\nthree\nfour\nfive\n"}],"textDocument":{"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","version":2}}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          selection = {"filePath":"/run/user/1000/moonkale/proposals/1-ab/lib.rs","fileUrl":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","selection":{"end":{"character":0,"line":5},"isEmpty":true,"start":{"character":0,"line":5}},"text":""} (outside the workspace)
        > #5 ed2 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":9},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}}
          #5 <- Ok
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.acceptProposal","title":"Accept Claude Code's edit to lib.rs"},"kind":"quickfix","title":"Accept Claude Code's edit to lib.rs"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.rejectProposal","title":"Reject Claude Code's edit to lib.rs"},"kind":"quickfix","title":"Reject Claude Code's edit to lib.rs"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.keepHunk","title":"Keep this change (line 5 of the proposal)"},"kind":"quickfix","title":"Keep this change (line 5 of the proposal)"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.revertHunk","title":"Revert this change (line 5 of the proposal)"},"kind":"quickfix","title":"Revert this change (line 5 of the proposal)"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",{"end":{"character":0,"line":9},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
          selection = {"filePath":"/run/user/1000/moonkale/proposals/1-ab/lib.rs","fileUrl":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","selection":{"end":{"character":0,"line":5},"isEmpty":false,"start":{"character":0,"line":0}},"text":"one\ntwo\nthree\nfour\nfive\n"} (outside the workspace)
        > #6 ed2 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",5],"command":"moonkale.revertHunk"}
          #6 <- Err -32602 no such hunk
        > #7 ed2 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.revertHunk"}
          #7 <- Err -32602 moonkale.revertHunk wants [proposal, hunk index]
        > #8 ed1 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.revertHunk"}
          ed2 <- request "moonkale-25" workspace/applyEdit {"edit":{"changes":{"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs":[{"newText":"","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}}}]}},"label":"Revert Claude Code's change"}
          #8 <- Ok {"reverted":0}
        > #9 ed2 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.acceptProposal"}
          ed1 <- $/cancelRequest {"id":"moonkale-12"}
          ed1 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-26" workspace/applyEdit {"edit":{"changes":{"file:///w/src/lib.rs":[{"newText":"one\ntwo\nthree\nfour\nfive\n","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":0}},"uri":"file:///w/src/lib.rs"}]}},"label":"Claude Code edit"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- window/showMessage {"message":"Claude Code changed /w/src/lib.rs on disk, but your buffer has unsaved changes.","type":2}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 <- Ok tool result
              text:
                FILE_SAVED
              text:
                one
                two
                three
                four
                five
          #9 <- Ok {"accepted":true}
        > #10 ed2 workspace/executeCommand {"arguments":[],"command":"moonkale.acceptProposal"}
          #10 <- Err -32803 no proposal from Claude Code is waiting
    "#]]);
}

#[test]
fn accepted_and_rejected_with_buttons() {
    let mut w = world();
    w.open_diff(9, open_diff("first"));
    w.press(1, "Accept");
    w.open_diff(9, open_diff("second"));
    w.press(1, "Reject");
    // Dismissed: the buttons are gone, the code actions and commands stay.
    w.open_diff(9, open_diff("third"));
    w.dismiss(1);
    w.execute(2, "moonkale.rejectProposal", json!(["third"]));
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed2 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed2 textDocument/didChange {"contentChanges":[{"text":"one\ntwo\nthree\nfour (mine)\n"}],"textDocument":{"uri":"file:///w/src/lib.rs","version":2}}
          selection = {"filePath":"/w/src/lib.rs","fileUrl":"file:///w/src/lib.rs","selection":{"end":{"character":0,"line":4},"isEmpty":true,"start":{"character":0,"line":4}},"text":""}
        > #1 ide9 openDiff "first" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-10" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-11" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed1 <- request "moonkale-12" window/showMessageRequest {"actions":[{"title":"Accept"},{"title":"Reject"}],"message":"Claude Code proposes 2 changes to lib.rs. Edit the proposal if you like, then accept or reject it.","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- request "moonkale-13" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- window/showMessage {"message":"Claude Code proposes 2 changes to lib.rs, each marked on its lines. Decide with the code actions on lib.rs: \"Accept Claude Code's edit to lib.rs\" or \"Reject Claude Code's edit to lib.rs\", or per change \"Keep this change\" and \"Revert this change\".","type":3}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 waits
        > ed1 answers "moonkale-12" with Accept
          ed1 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-14" workspace/applyEdit {"edit":{"changes":{"file:///w/src/lib.rs":[{"newText":"one\n2\nthree\nfour\nfive\n","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":0}},"uri":"file:///w/src/lib.rs"}]}},"label":"Claude Code edit"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- window/showMessage {"message":"Claude Code changed /w/src/lib.rs on disk, but your buffer has unsaved changes.","type":2}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 <- Ok tool result
              text:
                FILE_SAVED
              text:
                one
                2
                three
                four
                five
        > #2 ide9 openDiff "second" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-16" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-17" window/showMessageRequest {"actions":[{"title":"Accept"},{"title":"Reject"}],"message":"Claude Code proposes 2 changes to lib.rs. Edit the proposal if you like, then accept or reject it.","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- request "moonkale-18" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- window/showMessage {"message":"Claude Code proposes 2 changes to lib.rs, each marked on its lines. Decide with the code actions on lib.rs: \"Accept Claude Code's edit to lib.rs\" or \"Reject Claude Code's edit to lib.rs\", or per change \"Keep this change\" and \"Revert this change\".","type":3}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #2 waits
        > ed1 answers "moonkale-17" with Reject
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #2 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                second
        > #3 ide9 openDiff "third" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-20" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-21" window/showMessageRequest {"actions":[{"title":"Accept"},{"title":"Reject"}],"message":"Claude Code proposes 2 changes to lib.rs. Edit the proposal if you like, then accept or reject it.","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- request "moonkale-22" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- window/showMessage {"message":"Claude Code proposes 2 changes to lib.rs, each marked on its lines. Decide with the code actions on lib.rs: \"Accept Claude Code's edit to lib.rs\" or \"Reject Claude Code's edit to lib.rs\", or per change \"Keep this change\" and \"Revert this change\".","type":3}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #3 waits
        > ed1 answers "moonkale-21" with nothing
        > #4 ed2 workspace/executeCommand {"arguments":["third"],"command":"moonkale.rejectProposal"}
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #3 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                third
          #4 <- Ok {"rejected":true}
    "#]]);
}

/// `close_tab` rejects the caller's proposal of that name: the editors
/// are told it closed, and the waiting `openDiff` answers `DIFF_REJECTED`.
/// Another CLI's `close_tab` of the same name is not its to close.
#[test]
fn close_tab_rejects_the_callers_proposal_of_that_name() {
    let mut w = world();
    w.ide_attach(8);
    w.open_diff(9, open_diff("a"));
    w.forget();
    w.ide_tool(8, "close_tab", json!({"tab_name": "a"}));
    w.ide_tool(9, "close_tab", json!({"tab_name": "a"}));
    w.check(expect![[r#"
        > #2 ide8 close_tab {"tab_name":"a"}
          #2 <- Ok tool result
              text:
                TAB_CLOSED
        > #3 ide9 close_tab {"tab_name":"a"}
          ed1 <- $/cancelRequest {"id":"moonkale-12"}
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                a
          #3 <- Ok tool result
              text:
                TAB_CLOSED
    "#]]);
}

/// `closeAllDiffTabs` rejects every proposal of the caller (not another
/// CLI's) and says how many it closed.
#[test]
fn close_all_diff_tabs_rejects_the_callers_proposals() {
    let mut w = world();
    w.ide_attach(8);
    w.open_diff(9, open_diff("a"));
    w.open_diff(8, open_diff("b"));
    w.open_diff(9, open_diff("c"));
    w.forget();
    w.ide_tool(9, "closeAllDiffTabs", json!({}));
    w.check(expect![[r#"
        > #4 ide9 closeAllDiffTabs {}
          ed1 <- $/cancelRequest {"id":"moonkale-12"}
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- $/cancelRequest {"id":"moonkale-20"}
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                a
          #3 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                c
          #4 <- Ok tool result
              text:
                CLOSED_2_DIFF_TABS
    "#]]);
}

/// A CLI that goes withdraws its proposals: rejected, the editors told,
/// and nothing is left to decide.
#[test]
fn a_cli_that_goes_withdraws_its_proposals() {
    let mut w = world();
    w.ide_attach(8);
    w.open_diff(8, open_diff("a"));
    w.forget();
    w.ide_detach(8);
    w.execute(1, "moonkale.rejectProposal", json!([]));
    w.check(expect![[r#"
        > ide8 detaches
          ed1 <- $/cancelRequest {"id":"moonkale-12"}
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                a
        > #2 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.rejectProposal"}
          #2 <- Err -32803 no proposal from Claude Code is waiting
    "#]]);
}

/// An `openDiff` whose paths are not absolute is refused.
#[test]
fn an_open_diff_of_a_relative_path_is_refused() {
    let mut w = world();
    w.forget();
    w.open_diff(9, diff("t", "relative.rs", "", ""));
    w.check(expect![[r#"
        > #1 ide9 openDiff "t" relative.rs (proposal /run/user/1000/moonkale/proposals/1-ab/relative.rs) old "" new ""
          #1 <- Err -32602 openDiff paths must be absolute
    "#]]);
}

/// Defect (issue 25): an editor with the Moonkale plugin (Neovim, VS Code)
/// was asked Accept/Reject over a window that did not show the change yet,
/// and after an accept its buffer of the target got the accepted text as an
/// edit, unsaved, just before Claude Code wrote the same text to disk (so
/// Neovim asked about a file "changed in Vim as well", VS Code kept it
/// dirty). Now a plugin is asked nothing (its diff view names the ways to
/// decide) and, accepted, is told the text Claude Code will write: a clean
/// buffer gets no edit (the plugin reloads it from disk); a buffer with an
/// unsaved change apart from Claude Code's gets the two merged; one whose
/// change collides is told which lines. An editor without the plugin gets
/// the accepted text as before.
#[test]
fn a_plugin_decides_in_its_own_view_and_reloads_the_accepted_file() {
    let old: String = (1..=10).map(|i| format!("{i}\n")).collect();
    let new = old.replace("8\n", "eight\n");
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::PLUGIN);
    w.attach(2, Caps::PLUGIN);
    w.attach(3, Caps::PLUGIN);
    w.attach(4, Caps::BUTTONS);
    for ed in 1..=4 {
        w.did_open(ed, TARGET, 1, &old);
    }
    w.did_change(2, TARGET, 2, &old.replace("2\n", "two (mine)\n"));
    w.did_change(3, TARGET, 2, &old.replace("9\n", "nine (mine)\n"));
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, buttons, progress, plugin, utf-16)
        > ed2 attaches (Editor, buttons, progress, plugin, utf-16)
        > ed3 attaches (Editor, buttons, progress, plugin, utf-16)
        > ed4 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed2 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed3 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed4 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed2 textDocument/didChange {"contentChanges":[{"text":"1\ntwo (mine)\n3\n4\n5\n6\n7\n8\n9\n10\n"}],"textDocument":{"uri":"file:///w/src/lib.rs","version":2}}
          selection = {"filePath":"/w/src/lib.rs","fileUrl":"file:///w/src/lib.rs","selection":{"end":{"character":0,"line":10},"isEmpty":true,"start":{"character":0,"line":10}},"text":""}
        > ed3 textDocument/didChange {"contentChanges":[{"text":"1\n2\n3\n4\n5\n6\n7\n8\nnine (mine)\n10\n"}],"textDocument":{"uri":"file:///w/src/lib.rs","version":2}}
    "#]]);
    w.open_diff(9, diff("tab", "/w/src/lib.rs", &old, &new));
    w.execute(1, "moonkale.acceptProposal", json!([PROPOSAL]));
    w.check(expect![[r#"
        > #1 ide9 openDiff "tab" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n" new "1\n2\n3\n4\n5\n6\n7\neight\n9\n10\n"
          ed1 <- request "moonkale-18" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-19" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1, replacing line 8 of the file:\n- 8","range":{"end":{"character":0,"line":8},"start":{"character":0,"line":7}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- request "moonkale-20" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- request "moonkale-21" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1, replacing line 8 of the file:\n- 8","range":{"end":{"character":0,"line":8},"start":{"character":0,"line":7}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed3 <- request "moonkale-22" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed3 <- request "moonkale-23" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed3 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1, replacing line 8 of the file:\n- 8","range":{"end":{"character":0,"line":8},"start":{"character":0,"line":7}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed4 <- request "moonkale-24" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed4 <- request "moonkale-25" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed4 <- request "moonkale-26" window/showMessageRequest {"actions":[{"title":"Accept"},{"title":"Reject"}],"message":"Claude Code proposes 1 change to lib.rs. Edit the proposal if you like, then accept or reject it.","type":3}
          ed4 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1, replacing line 8 of the file:\n- 8","range":{"end":{"character":0,"line":8},"start":{"character":0,"line":7}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 waits
        > #2 ed1 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.acceptProposal"}
          ed1 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","text":"1\n2\n3\n4\n5\n6\n7\neight\n9\n10\n","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","text":"1\n2\n3\n4\n5\n6\n7\neight\n9\n10\n","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed2 <- request "moonkale-27" workspace/applyEdit {"edit":{"changes":{"file:///w/src/lib.rs":[{"newText":"1\ntwo (mine)\n3\n4\n5\n6\n7\neight\n9\n10\n","range":{"end":{"character":0,"line":10},"start":{"character":0,"line":0}},"uri":"file:///w/src/lib.rs"}]}},"label":"Claude Code edit, merged with your unsaved changes"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed3 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","text":"1\n2\n3\n4\n5\n6\n7\neight\n9\n10\n","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed3 <- window/showMessage {"message":"You accepted Claude Code's edit to lib.rs, but it collides with your unsaved changes (line 9): your buffer keeps them, and Claude Code writes its text to lib.rs on disk.","type":2}
          ed3 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed4 <- $/cancelRequest {"id":"moonkale-26"}
          ed4 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed4 <- request "moonkale-28" workspace/applyEdit {"edit":{"changes":{"file:///w/src/lib.rs":[{"newText":"1\n2\n3\n4\n5\n6\n7\neight\n9\n10\n","range":{"end":{"character":0,"line":10},"start":{"character":0,"line":0}},"uri":"file:///w/src/lib.rs"}]}},"label":"Claude Code edit"}
          ed4 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 <- Ok tool result
              text:
                FILE_SAVED
              text:
                1
                2
                3
                4
                5
                6
                7
                eight
                9
                10
          #2 <- Ok {"accepted":true}
    "#]]);
}
