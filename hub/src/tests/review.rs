//! Claude's changes shown in any LSP editor: a proposal's hunks as
//! diagnostics (on the proposal, or on the target for an editor that cannot
//! show the proposal), kept or reverted one by one until nothing is left to
//! decide, listed for plugins, as inlay hints; and change sets (edits Claude
//! made without asking) as diagnostics and code actions on the changed
//! files, undone or kept through the change-set host.

use expect_test::expect;
use serde_json::{Value, json};

use super::harness::{Caps, World, diff};
use crate::{Event, PendingFile};
use moonkale_protocol::changes::{
    ChangeHunk, ChangeSetSummary, ChangeSource, FileChangeKind, FileSummary, LineRange, ReviewState,
};
use moonkale_protocol::ide::OpenDiff;

const TARGET: &str = "file:///w/src/lib.rs";
const PROPOSAL: &str = "file:///run/user/1000/moonkale/proposals/1-ab/lib.rs";
const OLD: &str = "one\ntwo\nthree\nfour\n";
const NEW: &str = "one\n2\nthree\nfour\nfive\n";

fn open_diff() -> OpenDiff {
    diff("✻ [Claude Code] lib.rs", "/w/src/lib.rs", OLD, NEW)
}

/// Helix as it is when it cannot show a document for the service.
const NO_DOCUMENTS: Caps = Caps {
    documents: false,
    ..Caps::PLAIN
};

#[test]
fn hunks_on_the_target_kept_and_reverted_until_the_proposal_is_answered() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, NO_DOCUMENTS);
    w.did_open(1, TARGET, 1, OLD);
    w.open_diff(9, open_diff());
    w.request(1, "moonkale/proposals", Value::Null);
    w.code_actions(1, TARGET, (1, 0), (1, 0));
    w.execute(1, "moonkale.keepHunk", json!([PROPOSAL, 0]));
    // Nobody holds the proposal document: the revert is made in the
    // service's copy, and with nothing left to decide the proposal is
    // accepted with exactly the kept hunk.
    w.execute(1, "moonkale.revertHunk", json!([PROPOSAL, 1]));
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
        > #1 ide9 openDiff "✻ [Claude Code] lib.rs" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-5" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- window/showMessage {"message":"Claude Code proposes 2 changes to lib.rs, each marked on its lines. Decide with the code actions on lib.rs: \"Accept Claude Code's edit to lib.rs\" or \"Reject Claude Code's edit to lib.rs\", or per change \"Keep this change\" and \"Revert this change\".","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 1 of 2) for line 2:\n+ 2","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 2 of 2) to add here:\n+ five","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///w/src/lib.rs"}
          #1 waits
        > #2 ed1 moonkale/proposals null
          #2 <- Ok {"proposals":[{"document":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","hunks":[{"added":"2\n","index":0,"kept":false,"original":{"end":2,"start":1},"proposed":{"end":2,"start":1},"removed":"two\n"},{"added":"five\n","index":1,"kept":false,"original":{"end":4,"start":4},"proposed":{"end":5,"start":4},"removed":""}],"original":"one\ntwo\nthree\nfour\n","tabName":"✻ [Claude Code] lib.rs","target":"file:///w/src/lib.rs"}]}
        > #3 ed1 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":1},"start":{"character":0,"line":1}},"textDocument":{"uri":"file:///w/src/lib.rs"}}
          #3 <- Ok
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.acceptProposal","title":"Accept Claude Code's edit to lib.rs"},"kind":"quickfix","title":"Accept Claude Code's edit to lib.rs"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"],"command":"moonkale.rejectProposal","title":"Reject Claude Code's edit to lib.rs"},"kind":"quickfix","title":"Reject Claude Code's edit to lib.rs"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.keepHunk","title":"Keep this change (line 2 of the proposal)"},"kind":"quickfix","title":"Keep this change (line 2 of the proposal)"}
              {"command":{"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.revertHunk","title":"Revert this change (line 2 of the proposal)"},"kind":"quickfix","title":"Revert this change (line 2 of the proposal)"}
              {"command":{"arguments":["file:///w/src/lib.rs",{"end":{"character":0,"line":1},"start":{"character":0,"line":1}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
          selection = {"filePath":"/w/src/lib.rs","fileUrl":"file:///w/src/lib.rs","selection":{"end":{"character":0,"line":1},"isEmpty":true,"start":{"character":0,"line":1}},"text":""}
        > #4 ed1 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.keepHunk"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 2 of 2) to add here:\n+ five","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///w/src/lib.rs"}
          #4 <- Ok {"kept":0}
        > #5 ed1 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",1],"command":"moonkale.revertHunk"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///w/src/lib.rs"}
          ed1 <- moonkale/proposalClosed {"accepted":true,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-8" workspace/applyEdit {"edit":{"changes":{"file:///w/src/lib.rs":[{"newText":"one\n2\nthree\nfour\n","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":0}},"uri":"file:///w/src/lib.rs"}]}},"label":"Claude Code edit"}
          #1 <- Ok tool result
              text:
                FILE_SAVED
              text:
                one
                2
                three
                four
          #5 <- Ok {"reverted":1}
    "#]]);
}

#[test]
fn every_hunk_reverted_in_the_editor_rejects_the_proposal() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::BUTTONS);
    w.did_open(1, TARGET, 1, OLD);
    w.open_diff(9, open_diff());
    w.did_open(1, PROPOSAL, 1, NEW);
    w.request(
        1,
        "textDocument/inlayHint",
        json!({"textDocument": {"uri": PROPOSAL}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 9, "character": 0}}}),
    );
    w.execute(1, "moonkale.revertHunk", json!([PROPOSAL, 1]));
    w.did_change(1, PROPOSAL, 2, "one\n2\nthree\nfour\n");
    w.execute(1, "moonkale.revertHunk", json!([PROPOSAL, 0]));
    w.did_change(1, PROPOSAL, 3, OLD);
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
        > #1 ide9 openDiff "✻ [Claude Code] lib.rs" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-5" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-6" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed1 <- request "moonkale-7" window/showMessageRequest {"actions":[{"title":"Accept"},{"title":"Reject"}],"message":"Claude Code proposes 2 changes to lib.rs. Edit the proposal if you like, then accept or reject it.","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 waits
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\n2\nthree\nfour\nfive\n","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","version":1}}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
        > #2 ed1 textDocument/inlayHint {"range":{"end":{"character":0,"line":9},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}}
          #2 <- Ok
              {"label":" ← was: two (1 of 2)","paddingLeft":true,"position":{"character":1,"line":1},"tooltip":"- two"}
              {"label":" ← Claude Code adds this (2 of 2)","paddingLeft":true,"position":{"character":4,"line":4}}
        > #3 ed1 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",1],"command":"moonkale.revertHunk"}
          ed1 <- request "moonkale-10" workspace/applyEdit {"edit":{"changes":{"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs":[{"newText":"","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}}}]}},"label":"Revert Claude Code's change"}
          #3 <- Ok {"reverted":1}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"one\n2\nthree\nfour\n"}],"textDocument":{"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","version":2}}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          selection = {"filePath":"/run/user/1000/moonkale/proposals/1-ab/lib.rs","fileUrl":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","selection":{"end":{"character":0,"line":4},"isEmpty":true,"start":{"character":0,"line":4}},"text":""} (outside the workspace)
        > #4 ed1 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs",0],"command":"moonkale.revertHunk"}
          ed1 <- request "moonkale-13" workspace/applyEdit {"edit":{"changes":{"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs":[{"newText":"two\n","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}}}]}},"label":"Revert Claude Code's change"}
          #4 <- Ok {"reverted":0}
        > ed1 textDocument/didChange {"contentChanges":[{"text":"one\ntwo\nthree\nfour\n"}],"textDocument":{"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","version":3}}
          ed1 <- $/cancelRequest {"id":"moonkale-7"}
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                ✻ [Claude Code] lib.rs
    "#]]);
}

#[test]
fn an_editor_that_refuses_to_show_the_proposal_sees_it_on_the_target() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::BUTTONS);
    w.did_open(1, TARGET, 1, OLD);
    w.open_diff(9, open_diff());
    w.answer(1, "window/showDocument", json!({"success": false}));
    // Rejected with a reason: the CLI is pointed at the lines it wanted.
    w.execute(
        1,
        "moonkale.rejectProposal",
        json!([PROPOSAL, "keep the old name"]),
    );
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
        > #1 ide9 openDiff "✻ [Claude Code] lib.rs" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-5" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-6" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed1 <- request "moonkale-7" window/showMessageRequest {"actions":[{"title":"Accept"},{"title":"Reject"}],"message":"Claude Code proposes 2 changes to lib.rs. Edit the proposal if you like, then accept or reject it.","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 waits
        > ed1 answers "moonkale-5" with {"success":false}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 1 of 2) for line 2:\n+ 2","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 2 of 2) to add here:\n+ five","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///w/src/lib.rs"}
        > #2 ed1 workspace/executeCommand {"arguments":["file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","keep the old name"],"command":"moonkale.rejectProposal"}
          ed1 <- $/cancelRequest {"id":"moonkale-7"}
          ed1 <- moonkale/proposalClosed {"accepted":false,"target":"file:///w/src/lib.rs","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///w/src/lib.rs"}
          ide9 <- at_mentioned {"filePath":"/w/src/lib.rs","lineEnd":3,"lineStart":1}
          #1 <- Ok tool result
              text:
                DIFF_REJECTED
              text:
                ✻ [Claude Code] lib.rs
          #2 <- Ok {"rejected":true}
    "#]]);
}

/// An editor without `showDocument` (it answers with a null result) that
/// keeps diagnostics only for documents it has open: the hunks go to the
/// target, and are sent again when the user opens it there.
#[test]
fn a_null_show_document_puts_the_hunks_on_the_target_once_it_is_opened() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::PLAIN);
    w.open_diff(9, open_diff());
    w.answer(1, "window/showDocument", Value::Null);
    w.did_open(1, TARGET, 1, OLD);
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, utf-32)
        > #1 ide9 openDiff "✻ [Claude Code] lib.rs" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-3" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- window/showMessage {"message":"Claude Code proposes 2 changes to lib.rs, each marked on its lines. Decide with the code actions on lib.rs: \"Accept Claude Code's edit to lib.rs\" or \"Reject Claude Code's edit to lib.rs\", or per change \"Keep this change\" and \"Revert this change\".","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 waits
        > ed1 answers "moonkale-3" with null
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 1 of 2) for line 2:\n+ 2","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 2 of 2) to add here:\n+ five","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///w/src/lib.rs"}
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 1 of 2) for line 2:\n+ 2","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 2 of 2) to add here:\n+ five","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///w/src/lib.rs"}
    "#]]);
}

/// An editor that never answers the `window/showDocument` of a proposal:
/// once its time is up the hunks go on the target; a late success moves
/// them back to the proposal.
#[test]
fn a_show_document_not_answered_in_time_counts_as_refused() {
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::PLAIN);
    w.did_open(1, TARGET, 1, OLD);
    w.open_diff(9, open_diff());
    w.wait_ms(4_000);
    w.wait_ms(1_000);
    w.answer(1, "window/showDocument", json!({"success": true}));
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, utf-32)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\ntwo\nthree\nfour\n","uri":"file:///w/src/lib.rs","version":1}}
        > #1 ide9 openDiff "✻ [Claude Code] lib.rs" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "one\ntwo\nthree\nfour\n" new "one\n2\nthree\nfour\nfive\n"
          ed1 <- request "moonkale-5" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- window/showMessage {"message":"Claude Code proposes 2 changes to lib.rs, each marked on its lines. Decide with the code actions on lib.rs: \"Accept Claude Code's edit to lib.rs\" or \"Reject Claude Code's edit to lib.rs\", or per change \"Keep this change\" and \"Revert this change\".","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 2, replacing line 2 of the file:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 2 of 2 adds 1 line.","range":{"end":{"character":0,"line":5},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 waits
        > 4000 ms pass
        > 1000 ms pass
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 1 of 2) for line 2:\n+ 2","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":3,"source":"claude"},{"code":"proposal","data":{"hunk":1,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code proposes (change 2 of 2) to add here:\n+ five","range":{"end":{"character":0,"line":4},"start":{"character":0,"line":4}},"severity":3,"source":"claude"}],"uri":"file:///w/src/lib.rs"}
        > ed1 answers "moonkale-5" with {"success":true}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///w/src/lib.rs"}
    "#]]);
}

fn hunk(
    index: usize,
    before: (u32, u32),
    after: (u32, u32),
    removed: &str,
    added: &str,
) -> ChangeHunk {
    ChangeHunk {
        index,
        before: LineRange {
            start: before.0,
            end: before.1,
        },
        after: LineRange {
            start: after.0,
            end: after.1,
        },
        removed: removed.into(),
        added: added.into(),
        state: ReviewState::Pending,
    }
}

/// One document's review diagnostics are capped: a change set with 150
/// pending hunks in one file shows 99 of them and one more that says how
/// many are left and where to see them.
#[test]
fn a_file_with_more_changes_than_the_cap_gets_a_summary() {
    let mut w = World::new();
    w.attach(1, Caps::PLAIN);
    let lib: lsp_types::Url = TARGET.parse().unwrap();
    let hunks: Vec<ChangeHunk> = (0..150u32)
        .map(|i| {
            hunk(
                i as usize,
                (2 * i, 2 * i + 1),
                (2 * i, 2 * i + 1),
                "a\n",
                "b\n",
            )
        })
        .collect();
    w.forget();
    w.changes_updated(Event::ChangesUpdated {
        sets: Vec::new(),
        pending: vec![PendingFile {
            set: 7,
            uri: lib,
            hunks,
        }],
        announce: None,
    });
    let sent = w.notified(1, "textDocument/publishDiagnostics");
    assert_eq!(sent.len(), 1, "{sent:?}");
    let diagnostics = sent[0]["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), 100);
    assert!(
        diagnostics[98]["message"]
            .as_str()
            .unwrap()
            .starts_with("Claude changed this (change 99 of 150, set 7)"),
        "{}",
        diagnostics[98]
    );
    let summary = &diagnostics[99];
    assert_eq!(summary["range"]["start"]["line"], 198);
    assert!(
        summary["message"]
            .as_str()
            .unwrap()
            .starts_with("… and 51 more of Claude's changes in this file"),
        "{summary}"
    );
}

/// Set 4: a hosted session changed two places of lib.rs and created new.rs.
fn set_four(announce: bool) -> Event {
    let lib: lsp_types::Url = TARGET.parse().unwrap();
    let new: lsp_types::Url = "file:///w/src/new.rs".parse().unwrap();
    let source = ChangeSource::Agent {
        session: "s1".into(),
    };
    let summary = ChangeSetSummary {
        id: 4,
        source: source.clone(),
        title: "rename things".into(),
        started: 1,
        updated: 2,
        state: ReviewState::Pending,
        open: !announce,
        files: vec![
            FileSummary {
                uri: lib.clone(),
                kind: FileChangeKind::Modified,
                hunks: 2,
                pending: 2,
            },
            FileSummary {
                uri: new.clone(),
                kind: FileChangeKind::Created,
                hunks: 1,
                pending: 1,
            },
        ],
    };
    Event::ChangesUpdated {
        sets: vec![summary],
        pending: vec![
            PendingFile {
                set: 4,
                uri: lib,
                hunks: vec![
                    hunk(0, (1, 2), (1, 2), "two\n", "TWO\n"),
                    hunk(1, (3, 4), (3, 3), "four\n", ""),
                ],
            },
            PendingFile {
                set: 4,
                uri: new,
                hunks: vec![hunk(0, (0, 0), (0, 1), "", "fn new() {}\n")],
            },
        ],
        announce: announce.then_some(4),
    }
}

#[test]
fn a_change_set_is_announced_shown_as_diagnostics_and_undone_through_the_host() {
    let mut w = World::new();
    w.attach(1, Caps::BUTTONS);
    w.attach(2, Caps::PLAIN);
    // The web shell's page: hears the sets, is shown nothing else.
    w.attach(3, Caps::OBSERVER);
    w.did_open(1, TARGET, 1, "one\nTWO\nthree\n");
    w.did_open(2, TARGET, 1, "one\nTWO\nthree\n");
    w.did_change(2, TARGET, 2, "one\nTWO\nthree (mine)\n");
    w.changes_updated(set_four(false));
    w.changes_updated(set_four(true));
    w.code_actions(1, TARGET, (1, 0), (1, 0));
    w.execute(
        1,
        "moonkale.undoChange",
        json!([{"set": 4, "uri": TARGET, "hunk": 0}]),
    );
    w.execute(
        1,
        "moonkale.keepChange",
        json!([{"set": 4, "uri": "file:///w/src/new.rs"}]),
    );
    w.execute(1, "moonkale.undoChange", json!(["nonsense"]));
    w.request(
        1,
        "moonkale/changes/undo",
        json!({"set": 4, "reason": "not now"}),
    );
    w.request(1, "moonkale/changes/list", Value::Null);
    w.execute(1, "moonkale.openChanges", json!([]));
    w.step(
        "the host undid hunk 0",
        Event::FileRewritten {
            uri: TARGET.parse().unwrap(),
            text: Some("one\ntwo\nthree\n".into()),
        },
    );
    w.step(
        "the host removed new.rs",
        Event::FileRewritten {
            uri: "file:///w/src/new.rs".parse().unwrap(),
            text: None,
        },
    );
    w.changes_updated(Event::ChangesUpdated {
        sets: Vec::new(),
        pending: Vec::new(),
        announce: None,
    });
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, utf-32)
        > ed3 attaches (Observer, utf-16)
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\nTWO\nthree\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed2 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"one\nTWO\nthree\n","uri":"file:///w/src/lib.rs","version":1}}
        > ed2 textDocument/didChange {"contentChanges":[{"text":"one\nTWO\nthree (mine)\n"}],"textDocument":{"uri":"file:///w/src/lib.rs","version":2}}
        > the change-set host updates
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"change","data":{"hunk":0,"set":4,"uri":"file:///w/src/lib.rs"},"message":"Claude changed this (change 1 of 2, set 4); it was:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":4,"source":"claude"},{"code":"change","data":{"hunk":1,"set":4,"uri":"file:///w/src/lib.rs"},"message":"Claude changed this (change 2 of 2, set 4): deleted 1 line here:\n- four","range":{"end":{"character":0,"line":3},"start":{"character":0,"line":3}},"severity":4,"source":"claude"}],"uri":"file:///w/src/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"change","data":{"hunk":0,"set":4,"uri":"file:///w/src/new.rs"},"message":"Claude changed this (change 1 of 1, set 4): added 1 line.","range":{"end":{"character":0,"line":1},"start":{"character":0,"line":0}},"severity":4,"source":"claude"}],"uri":"file:///w/src/new.rs"}
          ed1 <- moonkale/changes/changed {"sets":[{"files":[{"hunks":2,"kind":"modified","pending":2,"uri":"file:///w/src/lib.rs"},{"hunks":1,"kind":"created","pending":1,"uri":"file:///w/src/new.rs"}],"id":4,"open":true,"source":{"kind":"agent","session":"s1"},"started":1,"state":"pending","title":"rename things","updated":2}]}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"change","data":{"hunk":0,"set":4,"uri":"file:///w/src/lib.rs"},"message":"Claude changed this (change 1 of 2, set 4); it was:\n- two","range":{"end":{"character":0,"line":2},"start":{"character":0,"line":1}},"severity":4,"source":"claude"},{"code":"change","data":{"hunk":1,"set":4,"uri":"file:///w/src/lib.rs"},"message":"Claude changed this (change 2 of 2, set 4): deleted 1 line here:\n- four","range":{"end":{"character":0,"line":3},"start":{"character":0,"line":3}},"severity":4,"source":"claude"}],"uri":"file:///w/src/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"change","data":{"hunk":0,"set":4,"uri":"file:///w/src/new.rs"},"message":"Claude changed this (change 1 of 1, set 4): added 1 line.","range":{"end":{"character":0,"line":1},"start":{"character":0,"line":0}},"severity":4,"source":"claude"}],"uri":"file:///w/src/new.rs"}
          ed2 <- moonkale/changes/changed {"sets":[{"files":[{"hunks":2,"kind":"modified","pending":2,"uri":"file:///w/src/lib.rs"},{"hunks":1,"kind":"created","pending":1,"uri":"file:///w/src/new.rs"}],"id":4,"open":true,"source":{"kind":"agent","session":"s1"},"started":1,"state":"pending","title":"rename things","updated":2}]}
          ed3 <- moonkale/changes/changed {"sets":[{"files":[{"hunks":2,"kind":"modified","pending":2,"uri":"file:///w/src/lib.rs"},{"hunks":1,"kind":"created","pending":1,"uri":"file:///w/src/new.rs"}],"id":4,"open":true,"source":{"kind":"agent","session":"s1"},"started":1,"state":"pending","title":"rename things","updated":2}]}
        > the change-set host updates
          ed1 <- moonkale/changes/changed {"announce":4,"sets":[{"files":[{"hunks":2,"kind":"modified","pending":2,"uri":"file:///w/src/lib.rs"},{"hunks":1,"kind":"created","pending":1,"uri":"file:///w/src/new.rs"}],"id":4,"open":false,"source":{"kind":"agent","session":"s1"},"started":1,"state":"pending","title":"rename things","updated":2}]}
          ed1 <- window/showMessage {"message":"The hosted session s1 changed 2 files (3 changes): lib.rs, new.rs. Review them with the code actions on each file (undo or keep), or `moonkale-service changes show 4`.","type":3}
          ed2 <- moonkale/changes/changed {"announce":4,"sets":[{"files":[{"hunks":2,"kind":"modified","pending":2,"uri":"file:///w/src/lib.rs"},{"hunks":1,"kind":"created","pending":1,"uri":"file:///w/src/new.rs"}],"id":4,"open":false,"source":{"kind":"agent","session":"s1"},"started":1,"state":"pending","title":"rename things","updated":2}]}
          ed2 <- window/showMessage {"message":"The hosted session s1 changed 2 files (3 changes): lib.rs, new.rs. Review them with the code actions on each file (undo or keep), or `moonkale-service changes show 4`.","type":3}
          ed3 <- moonkale/changes/changed {"announce":4,"sets":[{"files":[{"hunks":2,"kind":"modified","pending":2,"uri":"file:///w/src/lib.rs"},{"hunks":1,"kind":"created","pending":1,"uri":"file:///w/src/new.rs"}],"id":4,"open":false,"source":{"kind":"agent","session":"s1"},"started":1,"state":"pending","title":"rename things","updated":2}]}
        > #1 ed1 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":1},"start":{"character":0,"line":1}},"textDocument":{"uri":"file:///w/src/lib.rs"}}
          #1 <- Ok
              {"command":{"arguments":[{"hunk":0,"set":4,"uri":"file:///w/src/lib.rs"}],"command":"moonkale.undoChange","title":"Undo Claude's change (line 2)"},"kind":"quickfix","title":"Undo Claude's change (line 2)"}
              {"command":{"arguments":[{"hunk":0,"set":4,"uri":"file:///w/src/lib.rs"}],"command":"moonkale.keepChange","title":"Keep Claude's change (line 2)"},"kind":"quickfix","title":"Keep Claude's change (line 2)"}
              {"command":{"arguments":[{"set":4,"uri":"file:///w/src/lib.rs"}],"command":"moonkale.undoChange","title":"Undo all of Claude's changes to lib.rs"},"kind":"quickfix","title":"Undo all of Claude's changes to lib.rs"}
              {"command":{"arguments":[{"set":4,"uri":"file:///w/src/lib.rs"}],"command":"moonkale.keepChange","title":"Keep Claude's changes to lib.rs"},"kind":"quickfix","title":"Keep Claude's changes to lib.rs"}
              {"command":{"arguments":["file:///w/src/lib.rs",{"end":{"character":0,"line":1},"start":{"character":0,"line":1}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
        > #2 ed1 workspace/executeCommand {"arguments":[{"hunk":0,"set":4,"uri":"file:///w/src/lib.rs"}],"command":"moonkale.undoChange"}
          changes <- Undo (strict) {"hunk":0,"set":4,"uri":"file:///w/src/lib.rs"} buffers ["file:///w/src/lib.rs \"one\\nTWO\\nthree\\n\"", "file:///w/src/lib.rs \"one\\nTWO\\nthree (mine)\\n\" dirty"]
          #2 <- Ok {"refused":[],"undone":1}
        > #3 ed1 workspace/executeCommand {"arguments":[{"set":4,"uri":"file:///w/src/new.rs"}],"command":"moonkale.keepChange"}
          changes <- Request ed1 moonkale/changes/keep {"set":4,"uri":"file:///w/src/new.rs"}
          #3 waits
        > #4 ed1 workspace/executeCommand {"arguments":["nonsense"],"command":"moonkale.undoChange"}
          #4 <- Err -32602 moonkale.undoChange wants [{set, uri?, hunk?, reason?}]: invalid type: string "nonsense", expected struct UndoParams
        > #5 ed1 moonkale/changes/undo {"reason":"not now","set":4}
          changes <- Undo {"reason":"not now","set":4} buffers ["file:///w/src/lib.rs \"one\\nTWO\\nthree\\n\"", "file:///w/src/lib.rs \"one\\nTWO\\nthree (mine)\\n\" dirty"]
          #5 <- Ok {"refused":[],"undone":1}
        > #6 ed1 moonkale/changes/list null
          changes <- Request ed1 moonkale/changes/list null
          #6 waits
        > #7 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.openChanges"}
          ed1 <- request "moonkale-12" window/showDocument {"selection":{"end":{"character":0,"line":0},"start":{"character":0,"line":0}},"takeFocus":false,"uri":"file:///w/src/new.rs"}
          ed1 <- request "moonkale-13" window/showDocument {"selection":{"end":{"character":0,"line":1},"start":{"character":0,"line":1}},"takeFocus":true,"uri":"file:///w/src/lib.rs"}
          #7 <- Ok {"opened":2}
        > the host undid hunk 0
          ed1 <- request "moonkale-14" workspace/applyEdit {"edit":{"changes":{"file:///w/src/lib.rs":[{"newText":"one\ntwo\nthree\n","range":{"end":{"character":0,"line":3},"start":{"character":0,"line":0}},"uri":"file:///w/src/lib.rs"}]}},"label":"Undo of Claude's change"}
          ed2 <- window/showMessage {"message":"Undoing Claude's change rewrote /w/src/lib.rs on disk, but your buffer has unsaved changes.","type":2}
        > the host removed new.rs
        > the change-set host updates
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///w/src/lib.rs"}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///w/src/new.rs"}
          ed1 <- moonkale/changes/changed {"sets":[]}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///w/src/lib.rs"}
          ed2 <- textDocument/publishDiagnostics {"diagnostics":[],"uri":"file:///w/src/new.rs"}
          ed2 <- moonkale/changes/changed {"sets":[]}
          ed3 <- moonkale/changes/changed {"sets":[]}
    "#]]);
}

/// Defect (issue 25): the inlay hint quoted 60 characters of the replaced
/// line and "(1 of 1)" after the proposed line, which ran off VS Code's
/// diff editor at 1280 px. It quotes 16 characters now (the tooltip has the
/// whole line), and counts only when there is more than one change.
#[test]
fn an_inlay_hint_stays_short() {
    let old = "let greeting = format!(\"hello, {}\", name.to_uppercase());\n";
    let mut w = World::new();
    w.ide_attach(9);
    w.attach(1, Caps::BUTTONS);
    w.open_diff(
        9,
        diff("tab", "/w/src/lib.rs", old, "let greeting = hello(name);\n"),
    );
    w.did_open(1, PROPOSAL, 1, "let greeting = hello(name);\n");
    w.check(expect![[r#"
        > ide9 attaches
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > #1 ide9 openDiff "tab" /w/src/lib.rs (proposal /run/user/1000/moonkale/proposals/1-ab/lib.rs) old "let greeting = format!(\"hello, {}\", name.to_uppercase());\n" new "let greeting = hello(name);\n"
          ed1 <- request "moonkale-3" window/showDocument {"takeFocus":true,"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          ed1 <- request "moonkale-4" client/registerCapability {"registrations":[{"id":"moonkale-proposal-hints","method":"textDocument/inlayHint","registerOptions":{"documentSelector":[{"pattern":"**/moonkale*/proposals/**","scheme":"file"}]}}]}
          ed1 <- request "moonkale-5" window/showMessageRequest {"actions":[{"title":"Accept"},{"title":"Reject"}],"message":"Claude Code proposes 1 change to lib.rs. Edit the proposal if you like, then accept or reject it.","type":3}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1, replacing line 1 of the file:\n- let greeting = format!(\"hello, {}\", name.to_uppercase());","range":{"end":{"character":0,"line":1},"start":{"character":0,"line":0}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
          #1 waits
        > ed1 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"let greeting = hello(name);\n","uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs","version":1}}
          ed1 <- textDocument/publishDiagnostics {"diagnostics":[{"code":"proposal","data":{"hunk":0,"proposal":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"},"message":"Claude Code's change 1 of 1, replacing line 1 of the file:\n- let greeting = format!(\"hello, {}\", name.to_uppercase());","range":{"end":{"character":0,"line":1},"start":{"character":0,"line":0}},"severity":3,"source":"claude"}],"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}
    "#]]);
    w.request(
        1,
        "textDocument/inlayHint",
        json!({"textDocument": {"uri": PROPOSAL}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}}}),
    );
    w.check(expect![[r#"
        > #2 ed1 textDocument/inlayHint {"range":{"end":{"character":0,"line":1},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///run/user/1000/moonkale/proposals/1-ab/lib.rs"}}
          #2 <- Ok
              {"label":" ← was: let greeting = f…","paddingLeft":true,"position":{"character":27,"line":0},"tooltip":"- let greeting = format!(\"hello, {}\", name.to_uppercase());"}
    "#]]);
}
