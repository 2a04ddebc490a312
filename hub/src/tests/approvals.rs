//! Permission questions of the three kinds (a tool, a plan, questions):
//! buttons in editors that have them, a message in those that do not, code
//! actions and `moonkale.answerApproval` everywhere; the answer goes to the
//! agent port, and the other editors' buttons are cancelled once the agent
//! closes the question. Trust of the workspace, and `$/progress`.

use expect_test::expect;
use serde_json::{Value, json};

use super::harness::{Caps, Ports, World};
use crate::AgentProgress;
use crate::workspace::Limits;

const A: &str = "file:///w/a.rs";

fn tool(id: &str) -> Value {
    json!({"approval": id, "session": "s1", "tool": "Write", "title": "Write a.txt", "input": {}})
}

fn plan() -> Value {
    json!({"approval": "s1/2", "session": "s1", "kind": "plan", "tool": "ExitPlanMode", "title": "Plan", "plan": "1. Read\n2. Write"})
}

fn questions() -> Value {
    json!({"approval": "s1/3", "session": "s1", "kind": "question", "tool": "AskUserQuestion", "title": "Questions", "questions": [
        {"question": "Which colour?", "header": "Colour", "options": [{"label": "Red"}, {"label": "Blue"}], "multiSelect": false},
        {"question": "Which sizes?", "options": [{"label": "S"}, {"label": "M"}], "multiSelect": true},
    ]})
}

/// Three editors: two with buttons, one without, and a front end
/// following the session.
fn world() -> World {
    let mut w = World::new();
    w.attach(1, Caps::BUTTONS);
    w.attach(2, Caps::BUTTONS);
    w.attach(3, Caps::PLAIN);
    w.did_open(3, A, 1, "x\n");
    w.request(2, "moonkale/agent/subscribe", json!({"session": "s1"}));
    w
}

#[test]
fn a_tool_approval_pressed_in_one_editor() {
    let mut w = world();
    w.approval(tool("s1/1"));
    w.code_actions(3, A, (0, 0), (0, 0));
    w.press(1, "Always allow Write in this session");
    w.approval_closed("s1", "s1/1");
    // Too late: the question is gone.
    w.execute(
        3,
        "moonkale.answerApproval",
        json!([{"approval": "s1/1", "allow": true}]),
    );
    w.code_actions(3, A, (0, 0), (0, 0));
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed3 attaches (Editor, utf-32)
        > ed3 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x\n","uri":"file:///w/a.rs","version":1}}
        > #1 ed2 moonkale/agent/subscribe {"session":"s1"}
          #1 <- Ok {}
        > agent asks {"approval":"s1/1","input":{},"session":"s1","title":"Write a.txt","tool":"Write"}
          ed1 <- request "moonkale-6" window/showMessageRequest {"actions":[{"title":"Allow"},{"title":"Always allow Write in this session"},{"title":"Deny"}],"message":"Claude wants to run Write a.txt","type":3}
          ed2 <- request "moonkale-7" window/showMessageRequest {"actions":[{"title":"Allow"},{"title":"Always allow Write in this session"},{"title":"Deny"}],"message":"Claude wants to run Write a.txt","type":3}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/1","destructive":false,"input":{},"kind":"tool","session":"s1","title":"Write a.txt","tool":"Write"},"session":"s1","status":"pending"}
          ed3 <- window/showMessage {"message":"Claude wants to run Write a.txt: use the code actions (Claude: allow / deny) to answer.","type":3}
        > #2 ed3 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          #2 <- Ok
              {"command":{"arguments":[{"allow":true,"always":false,"approval":"s1/1"}],"command":"moonkale.answerApproval","title":"Claude: allow Write a.txt"},"kind":"quickfix","title":"Claude: allow Write a.txt"}
              {"command":{"arguments":[{"allow":true,"always":true,"approval":"s1/1"}],"command":"moonkale.answerApproval","title":"Claude: always allow Write in this session"},"kind":"quickfix","title":"Claude: always allow Write in this session"}
              {"command":{"arguments":[{"allow":false,"always":false,"approval":"s1/1"}],"command":"moonkale.answerApproval","title":"Claude: deny Write a.txt"},"kind":"quickfix","title":"Claude: deny Write a.txt"}
              {"command":{"arguments":["file:///w/a.rs",{"end":{"character":0,"line":0},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
        > ed1 answers "moonkale-6" with Always allow Write in this session
          agent <- Answer s1/1 Answer { allow: true, always: true, message: None, by: "editor", mode: None, answers: None }
        > agent closes s1/1
          ed2 <- $/cancelRequest {"id":"moonkale-7"}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/1","destructive":false,"input":{},"kind":"tool","session":"s1","title":"Write a.txt","tool":"Write"},"session":"s1","status":"closed"}
        > #3 ed3 workspace/executeCommand {"arguments":[{"allow":true,"approval":"s1/1"}],"command":"moonkale.answerApproval"}
          agent <- Answer s1/1 Answer { allow: true, always: false, message: None, by: "editor", mode: None, answers: None }
          #3 <- Ok {}
        > #4 ed3 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          #4 <- Ok
              {"command":{"arguments":["file:///w/a.rs",{"end":{"character":0,"line":0},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
    "#]]);
}

#[test]
fn a_tool_approval_answered_by_command_and_dismissed_buttons() {
    let mut w = world();
    let mut destructive = tool("s1/1");
    destructive["destructive"] = json!(true);
    destructive["title"] = json!("Bash rm -rf build");
    w.approval(destructive);
    w.dismiss(1);
    w.press(2, "Deny");
    w.execute(
        3,
        "moonkale.answerApproval",
        json!([{"approval": "s1/1", "allow": true, "always": true, "message": "ok"}]),
    );
    w.execute(
        3,
        "moonkale.answerApproval",
        json!([{"approval": "s1/1", "mode": "sideways"}]),
    );
    w.execute(3, "moonkale.answerApproval", json!(["nonsense"]));
    w.approval_closed("s1", "s1/1");
    w.approval_closed("s1", "s1/1");
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed3 attaches (Editor, utf-32)
        > ed3 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x\n","uri":"file:///w/a.rs","version":1}}
        > #1 ed2 moonkale/agent/subscribe {"session":"s1"}
          #1 <- Ok {}
        > agent asks {"approval":"s1/1","destructive":true,"input":{},"session":"s1","title":"Bash rm -rf build","tool":"Write"}
          ed1 <- request "moonkale-6" window/showMessageRequest {"actions":[{"title":"Allow"},{"title":"Deny"}],"message":"Claude wants to run Bash rm -rf build","type":2}
          ed2 <- request "moonkale-7" window/showMessageRequest {"actions":[{"title":"Allow"},{"title":"Deny"}],"message":"Claude wants to run Bash rm -rf build","type":2}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/1","destructive":true,"input":{},"kind":"tool","session":"s1","title":"Bash rm -rf build","tool":"Write"},"session":"s1","status":"pending"}
          ed3 <- window/showMessage {"message":"Claude wants to run Bash rm -rf build: use the code actions (Claude: allow / deny) to answer.","type":3}
        > ed1 answers "moonkale-6" with nothing
        > ed2 answers "moonkale-7" with Deny
          agent <- Answer s1/1 Answer { allow: false, always: false, message: None, by: "editor", mode: None, answers: None }
        > #2 ed3 workspace/executeCommand {"arguments":[{"allow":true,"always":true,"approval":"s1/1","message":"ok"}],"command":"moonkale.answerApproval"}
          agent <- Answer s1/1 Answer { allow: true, always: true, message: Some("ok"), by: "editor", mode: None, answers: None }
          #2 <- Ok {}
        > #3 ed3 workspace/executeCommand {"arguments":[{"approval":"s1/1","mode":"sideways"}],"command":"moonkale.answerApproval"}
          #3 <- Err -32602 "sideways" is not a permission mode
        > #4 ed3 workspace/executeCommand {"arguments":["nonsense"],"command":"moonkale.answerApproval"}
          #4 <- Err -32602 moonkale.answerApproval wants [{"approval", "allow", "always"?, "mode"?, "question"?, "choice"?, "answers"?}]
        > agent closes s1/1
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/1","destructive":true,"input":{},"kind":"tool","session":"s1","title":"Bash rm -rf build","tool":"Write"},"session":"s1","status":"closed"}
        > agent closes s1/1
    "#]]);
}

#[test]
fn a_plan() {
    let mut w = world();
    w.approval(plan());
    w.code_actions(3, A, (0, 0), (0, 0));
    w.press(2, "Approve; accept edits");
    w.press(1, "Keep planning");
    w.execute(
        3,
        "moonkale.answerApproval",
        json!([{"approval": "s1/2", "allow": true, "mode": "default"}]),
    );
    w.approval_closed("s1", "s1/2");
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed3 attaches (Editor, utf-32)
        > ed3 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x\n","uri":"file:///w/a.rs","version":1}}
        > #1 ed2 moonkale/agent/subscribe {"session":"s1"}
          #1 <- Ok {}
        > agent asks {"approval":"s1/2","kind":"plan","plan":"1. Read\n2. Write","session":"s1","title":"Plan","tool":"ExitPlanMode"}
          ed1 <- request "moonkale-6" window/showMessageRequest {"actions":[{"title":"Approve; ask before edits"},{"title":"Approve; accept edits"},{"title":"Keep planning"}],"message":"Claude's plan is ready:\n\n1. Read\n2. Write","type":3}
          ed2 <- request "moonkale-7" window/showMessageRequest {"actions":[{"title":"Approve; ask before edits"},{"title":"Approve; accept edits"},{"title":"Keep planning"}],"message":"Claude's plan is ready:\n\n1. Read\n2. Write","type":3}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/2","choices":[],"destructive":false,"input":{},"kind":"plan","plan":"1. Read\n2. Write","session":"s1","title":"Plan","tool":"ExitPlanMode"},"session":"s1","status":"pending"}
          ed3 <- window/showMessage {"message":"Claude's plan is ready:\n\n1. Read\n2. Write\n\nUse the code actions (Claude: approve the plan …) to answer.","type":3}
        > #2 ed3 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          #2 <- Ok
              {"command":{"arguments":[{"allow":true,"approval":"s1/2","mode":"default"}],"command":"moonkale.answerApproval","title":"Claude: approve; ask before edits (the plan)"},"kind":"quickfix","title":"Claude: approve; ask before edits (the plan)"}
              {"command":{"arguments":[{"allow":true,"approval":"s1/2","mode":"acceptEdits"}],"command":"moonkale.answerApproval","title":"Claude: approve; accept edits (the plan)"},"kind":"quickfix","title":"Claude: approve; accept edits (the plan)"}
              {"command":{"arguments":[{"allow":false,"approval":"s1/2","message":"The user wants to keep planning."}],"command":"moonkale.answerApproval","title":"Claude: keep planning (the plan)"},"kind":"quickfix","title":"Claude: keep planning (the plan)"}
              {"command":{"arguments":["file:///w/a.rs",{"end":{"character":0,"line":0},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
        > ed2 answers "moonkale-7" with Approve; accept edits
          agent <- Answer s1/2 Answer { allow: true, always: false, message: None, by: "editor", mode: Some(AcceptEdits), answers: None }
        > ed1 answers "moonkale-6" with Keep planning
          agent <- Answer s1/2 Answer { allow: false, always: false, message: Some("The user wants to keep planning."), by: "editor", mode: None, answers: None }
        > #3 ed3 workspace/executeCommand {"arguments":[{"allow":true,"approval":"s1/2","mode":"default"}],"command":"moonkale.answerApproval"}
          agent <- Answer s1/2 Answer { allow: true, always: false, message: None, by: "editor", mode: Some(Default), answers: None }
          #3 <- Ok {}
        > agent closes s1/2
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/2","choices":[],"destructive":false,"input":{},"kind":"plan","plan":"1. Read\n2. Write","session":"s1","title":"Plan","tool":"ExitPlanMode"},"session":"s1","status":"closed"}
    "#]]);
}

/// Each question is asked on its own; the first answer to a question wins
/// and withdraws that question elsewhere; once every question has an
/// answer they go to the agent together.
#[test]
fn questions_answered_one_at_a_time() {
    let mut w = world();
    w.approval(questions());
    w.press(1, "Blue");
    w.code_actions(3, A, (0, 0), (0, 0));
    w.execute(
        3,
        "moonkale.answerApproval",
        json!([{"approval": "s1/3", "question": 7, "choice": "S"}]),
    );
    w.execute(
        3,
        "moonkale.answerApproval",
        json!([{"approval": "s1/3", "question": 1, "choice": "M"}]),
    );
    w.approval_closed("s1", "s1/3");
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed3 attaches (Editor, utf-32)
        > ed3 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x\n","uri":"file:///w/a.rs","version":1}}
        > #1 ed2 moonkale/agent/subscribe {"session":"s1"}
          #1 <- Ok {}
        > agent asks {"approval":"s1/3","kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","too…
          ed1 <- request "moonkale-6" window/showMessageRequest {"actions":[{"title":"Red"},{"title":"Blue"},{"title":"Decline to answer"}],"message":"Claude asks: Which colour?","type":3}
          ed1 <- request "moonkale-8" window/showMessageRequest {"actions":[{"title":"S"},{"title":"M"},{"title":"Decline to answer"}],"message":"Claude asks: Which sizes? (one choice here; several with `moonkale-service agent answer`)","type":3}
          ed2 <- request "moonkale-7" window/showMessageRequest {"actions":[{"title":"Red"},{"title":"Blue"},{"title":"Decline to answer"}],"message":"Claude asks: Which colour?","type":3}
          ed2 <- request "moonkale-9" window/showMessageRequest {"actions":[{"title":"S"},{"title":"M"},{"title":"Decline to answer"}],"message":"Claude asks: Which sizes? (one choice here; several with `moonkale-service agent answer`)","type":3}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/3","destructive":false,"input":{},"kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","tool":"AskUserQuestion"},"session":"s1","status":"pending"}
          ed3 <- window/showMessage {"message":"Claude asks: Which colour? Use the code actions (Claude asks …) to answer.","type":3}
          ed3 <- window/showMessage {"message":"Claude asks: Which sizes? Use the code actions (Claude asks …) to answer.","type":3}
        > ed1 answers "moonkale-6" with Blue
          ed2 <- $/cancelRequest {"id":"moonkale-7"}
        > #2 ed3 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          #2 <- Ok
              {"command":{"arguments":[{"approval":"s1/3","choice":"S","question":1}],"command":"moonkale.answerApproval","title":"Claude asks Which sizes?: S"},"kind":"quickfix","title":"Claude asks Which sizes?: S"}
              {"command":{"arguments":[{"approval":"s1/3","choice":"M","question":1}],"command":"moonkale.answerApproval","title":"Claude asks Which sizes?: M"},"kind":"quickfix","title":"Claude asks Which sizes?: M"}
              {"command":{"arguments":[{"allow":false,"approval":"s1/3","message":"The user declined to answer."}],"command":"moonkale.answerApproval","title":"Claude asks: decline to answer"},"kind":"quickfix","title":"Claude asks: decline to answer"}
              {"command":{"arguments":["file:///w/a.rs",{"end":{"character":0,"line":0},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
        > #3 ed3 workspace/executeCommand {"arguments":[{"approval":"s1/3","choice":"S","question":7}],"command":"moonkale.answerApproval"}
          #3 <- Err -32602 approval s1/3 has no question 7
        > #4 ed3 workspace/executeCommand {"arguments":[{"approval":"s1/3","choice":"M","question":1}],"command":"moonkale.answerApproval"}
          ed1 <- $/cancelRequest {"id":"moonkale-8"}
          ed2 <- $/cancelRequest {"id":"moonkale-9"}
          agent <- Answer s1/3 Answer { allow: true, always: false, message: None, by: "editor", mode: None, answers: Some({"Which colour?": String("Blue"), "Which sizes?": String("M")}) }
          #4 <- Ok {}
        > agent closes s1/3
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/3","destructive":false,"input":{},"kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","tool":"AskUserQuestion"},"session":"s1","status":"closed"}
    "#]]);
}

#[test]
fn questions_declined_or_answered_at_once() {
    let mut w = world();
    w.approval(questions());
    w.press(2, "Decline to answer");
    w.approval_closed("s1", "s1/3");
    let mut again = questions();
    again["approval"] = json!("s1/4");
    w.approval(again);
    w.execute(3, "moonkale.answerApproval", json!([{"approval": "s1/4", "allow": true, "answers": {"Which colour?": "Red", "Which sizes?": ["S", "M"]}}]));
    w.approval_closed("s1", "s1/4");
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed3 attaches (Editor, utf-32)
        > ed3 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x\n","uri":"file:///w/a.rs","version":1}}
        > #1 ed2 moonkale/agent/subscribe {"session":"s1"}
          #1 <- Ok {}
        > agent asks {"approval":"s1/3","kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","too…
          ed1 <- request "moonkale-6" window/showMessageRequest {"actions":[{"title":"Red"},{"title":"Blue"},{"title":"Decline to answer"}],"message":"Claude asks: Which colour?","type":3}
          ed1 <- request "moonkale-8" window/showMessageRequest {"actions":[{"title":"S"},{"title":"M"},{"title":"Decline to answer"}],"message":"Claude asks: Which sizes? (one choice here; several with `moonkale-service agent answer`)","type":3}
          ed2 <- request "moonkale-7" window/showMessageRequest {"actions":[{"title":"Red"},{"title":"Blue"},{"title":"Decline to answer"}],"message":"Claude asks: Which colour?","type":3}
          ed2 <- request "moonkale-9" window/showMessageRequest {"actions":[{"title":"S"},{"title":"M"},{"title":"Decline to answer"}],"message":"Claude asks: Which sizes? (one choice here; several with `moonkale-service agent answer`)","type":3}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/3","destructive":false,"input":{},"kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","tool":"AskUserQuestion"},"session":"s1","status":"pending"}
          ed3 <- window/showMessage {"message":"Claude asks: Which colour? Use the code actions (Claude asks …) to answer.","type":3}
          ed3 <- window/showMessage {"message":"Claude asks: Which sizes? Use the code actions (Claude asks …) to answer.","type":3}
        > ed2 answers "moonkale-9" with Decline to answer
          agent <- Answer s1/3 Answer { allow: false, always: false, message: Some("The user declined to answer."), by: "editor", mode: None, answers: None }
        > agent closes s1/3
          ed1 <- $/cancelRequest {"id":"moonkale-6"}
          ed1 <- $/cancelRequest {"id":"moonkale-8"}
          ed2 <- $/cancelRequest {"id":"moonkale-7"}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/3","destructive":false,"input":{},"kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","tool":"AskUserQuestion"},"session":"s1","status":"closed"}
        > agent asks {"approval":"s1/4","kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","too…
          ed1 <- request "moonkale-10" window/showMessageRequest {"actions":[{"title":"Red"},{"title":"Blue"},{"title":"Decline to answer"}],"message":"Claude asks: Which colour?","type":3}
          ed1 <- request "moonkale-12" window/showMessageRequest {"actions":[{"title":"S"},{"title":"M"},{"title":"Decline to answer"}],"message":"Claude asks: Which sizes? (one choice here; several with `moonkale-service agent answer`)","type":3}
          ed2 <- request "moonkale-11" window/showMessageRequest {"actions":[{"title":"Red"},{"title":"Blue"},{"title":"Decline to answer"}],"message":"Claude asks: Which colour?","type":3}
          ed2 <- request "moonkale-13" window/showMessageRequest {"actions":[{"title":"S"},{"title":"M"},{"title":"Decline to answer"}],"message":"Claude asks: Which sizes? (one choice here; several with `moonkale-service agent answer`)","type":3}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/4","destructive":false,"input":{},"kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","tool":"AskUserQuestion"},"session":"s1","status":"pending"}
          ed3 <- window/showMessage {"message":"Claude asks: Which colour? Use the code actions (Claude asks …) to answer.","type":3}
          ed3 <- window/showMessage {"message":"Claude asks: Which sizes? Use the code actions (Claude asks …) to answer.","type":3}
        > #2 ed3 workspace/executeCommand {"arguments":[{"allow":true,"answers":{"Which colour?":"Red","Which sizes?":["S","M"]},"approval":"s1/4"}],"command":"moonkale.answerApproval"}
          agent <- Answer s1/4 Answer { allow: true, always: false, message: None, by: "editor", mode: None, answers: Some({"Which colour?": String("Red"), "Which sizes?": Array [String("S"), String("M")]}) }
          #2 <- Ok {}
        > agent closes s1/4
          ed1 <- $/cancelRequest {"id":"moonkale-10"}
          ed1 <- $/cancelRequest {"id":"moonkale-12"}
          ed2 <- $/cancelRequest {"id":"moonkale-11"}
          ed2 <- $/cancelRequest {"id":"moonkale-13"}
          ed2 <- moonkale/agent/approval {"approval":{"approval":"s1/4","destructive":false,"input":{},"kind":"question","questions":[{"header":"Colour","multiSelect":false,"options":[{"label":"Red"},{"label":"Blue"}],"question":"Which colour?"},{"multiSelect":true,"options":[{"label":"S"},{"label":"M"}],"question":"Which sizes?"}],"session":"s1","title":"Questions","tool":"AskUserQuestion"},"session":"s1","status":"closed"}
    "#]]);
}

#[test]
fn answers_are_dropped_without_an_agent_or_when_it_is_busy() {
    let mut w = World::build(Ports::None, Limits::default());
    w.attach(1, Caps::BUTTONS);
    w.approval(tool("s1/1"));
    w.press(1, "Allow");
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > agent asks {"approval":"s1/1","input":{},"session":"s1","title":"Write a.txt","tool":"Write"}
          ed1 <- request "moonkale-2" window/showMessageRequest {"actions":[{"title":"Allow"},{"title":"Always allow Write in this session"},{"title":"Deny"}],"message":"Claude wants to run Write a.txt","type":3}
        > ed1 answers "moonkale-2" with Allow
    "#]]);

    let mut w = World::build(Ports::Full, Limits::default());
    w.attach(1, Caps::BUTTONS);
    w.approval(tool("s1/1"));
    w.approval(tool("s1/2"));
    w.request(1, "moonkale/agent/list", json!({}));
    w.press(1, "Allow");
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > agent asks {"approval":"s1/1","input":{},"session":"s1","title":"Write a.txt","tool":"Write"}
          ed1 <- request "moonkale-2" window/showMessageRequest {"actions":[{"title":"Allow"},{"title":"Always allow Write in this session"},{"title":"Deny"}],"message":"Claude wants to run Write a.txt","type":3}
        > agent asks {"approval":"s1/2","input":{},"session":"s1","title":"Write a.txt","tool":"Write"}
          ed1 <- request "moonkale-3" window/showMessageRequest {"actions":[{"title":"Allow"},{"title":"Always allow Write in this session"},{"title":"Deny"}],"message":"Claude wants to run Write a.txt","type":3}
        > #1 ed1 moonkale/agent/list {}
          #1 <- Err -32603 the agent is busy or stopping; try again
        > ed1 answers "moonkale-3" with Allow
    "#]]);
}

#[test]
fn trust() {
    let mut w = world();
    w.step(
        "agent says: not trusted",
        crate::Event::WorkspaceTrust {
            trusted: false,
            message: None,
        },
    );
    w.code_actions(3, A, (0, 0), (0, 0));
    w.status();
    w.execute(3, "moonkale.trustWorkspace", json!([{"trusted": true}]));
    w.host_answers(json!({"trusted": true}));
    w.execute(1, "moonkale.trustWorkspace", json!([]));
    w.step(
        "agent says: trusted, by the user",
        crate::Event::WorkspaceTrust {
            trusted: true,
            message: Some("This workspace is trusted now.".into()),
        },
    );
    w.code_actions(3, A, (0, 0), (0, 0));
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed3 attaches (Editor, utf-32)
        > ed3 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x\n","uri":"file:///w/a.rs","version":1}}
        > #1 ed2 moonkale/agent/subscribe {"session":"s1"}
          #1 <- Ok {}
        > agent says: not trusted
        > #2 ed3 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          #2 <- Ok
              {"command":{"arguments":["file:///w/a.rs",{"end":{"character":0,"line":0},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
              {"command":{"arguments":[{"trusted":true}],"command":"moonkale.trustWorkspace","title":"Moonkale: trust this workspace (lets its .claude settings, hooks and .mcp.json servers run in Claude Code sessions)"},"kind":"source","title":"Moonkale: trust this workspace (lets its .claude settings, hooks and .mcp.json servers run in Claude Code sessions)"}
        > status
          workspace /w (pid 0)
          not trusted: Claude Code sessions load only your own settings (`moonkale-service trust` to change)
          0 claude processes run by the service
          3 editors attached
            #1 ed1 via unix, utf-16
            #2 ed2 via unix, utf-16
            #3 ed3 via unix, utf-32  [active]
              selection file:///w/a.rs 0:0 -> 0:0 (from codeAction)
              v1     file:///w/a.rs
          diagnostics for 0 (document, source) pairs
          6164 bytes held
        > #3 ed3 workspace/executeCommand {"arguments":[{"trusted":true}],"command":"moonkale.trustWorkspace"}
          agent <- Request ed3 moonkale/agent/trust {"trusted":true}
          #3 waits
        > the host answers moonkale/agent/trust
          #3 <- Ok {"trusted":true}
        > #4 ed1 workspace/executeCommand {"arguments":[],"command":"moonkale.trustWorkspace"}
          agent <- Request ed1 moonkale/agent/trust {"trusted":true}
          #4 waits
        > agent says: trusted, by the user
          ed1 <- window/showMessage {"message":"This workspace is trusted now.","type":3}
          ed2 <- window/showMessage {"message":"This workspace is trusted now.","type":3}
          ed3 <- window/showMessage {"message":"This workspace is trusted now.","type":3}
        > #5 ed3 textDocument/codeAction {"context":{"diagnostics":[]},"range":{"end":{"character":0,"line":0},"start":{"character":0,"line":0}},"textDocument":{"uri":"file:///w/a.rs"}}
          #5 <- Ok
              {"command":{"arguments":["file:///w/a.rs",{"end":{"character":0,"line":0},"start":{"character":0,"line":0}}],"command":"moonkale.sendToClaude","title":"Send selection to Claude Code"},"kind":"source","title":"Send selection to Claude Code"}
              {"command":{"arguments":[],"command":"moonkale.startClaude","title":"Start Claude Code here"},"kind":"source","title":"Start Claude Code here"}
    "#]]);
}

#[test]
fn progress_is_created_once_per_turn_where_it_is_shown() {
    let mut w = world();
    w.progress("s1", AgentProgress::Report("early".into()));
    w.progress("s1", AgentProgress::Begin("turn".into()));
    w.progress("s1", AgentProgress::Report("using Write".into()));
    w.progress("s1", AgentProgress::End("done".into()));
    w.progress("s1", AgentProgress::End("again".into()));
    w.progress("s1", AgentProgress::Begin("next".into()));
    w.detach(1);
    w.progress("s1", AgentProgress::End("done".into()));
    w.check(expect![[r#"
        > ed1 attaches (Editor, buttons, progress, utf-16)
        > ed2 attaches (Editor, buttons, progress, utf-16)
        > ed3 attaches (Editor, utf-32)
        > ed3 textDocument/didOpen {"textDocument":{"languageId":"rust","text":"x\n","uri":"file:///w/a.rs","version":1}}
        > #1 ed2 moonkale/agent/subscribe {"session":"s1"}
          #1 <- Ok {}
        > agent progress s1 Report("early")
        > agent progress s1 Begin("turn")
          ed1 <- request "moonkale-6" window/workDoneProgress/create {"token":"moonkale-agent-s1"}
          ed1 <- $/progress {"token":"moonkale-agent-s1","value":{"cancellable":false,"kind":"begin","message":"turn","title":"Claude"}}
          ed2 <- request "moonkale-7" window/workDoneProgress/create {"token":"moonkale-agent-s1"}
          ed2 <- $/progress {"token":"moonkale-agent-s1","value":{"cancellable":false,"kind":"begin","message":"turn","title":"Claude"}}
        > agent progress s1 Report("using Write")
          ed1 <- $/progress {"token":"moonkale-agent-s1","value":{"kind":"report","message":"using Write"}}
          ed2 <- $/progress {"token":"moonkale-agent-s1","value":{"kind":"report","message":"using Write"}}
        > agent progress s1 End("done")
          ed1 <- $/progress {"token":"moonkale-agent-s1","value":{"kind":"end","message":"done"}}
          ed2 <- $/progress {"token":"moonkale-agent-s1","value":{"kind":"end","message":"done"}}
        > agent progress s1 End("again")
        > agent progress s1 Begin("next")
          ed1 <- request "moonkale-8" window/workDoneProgress/create {"token":"moonkale-agent-s1"}
          ed1 <- $/progress {"token":"moonkale-agent-s1","value":{"cancellable":false,"kind":"begin","message":"next","title":"Claude"}}
          ed2 <- request "moonkale-9" window/workDoneProgress/create {"token":"moonkale-agent-s1"}
          ed2 <- $/progress {"token":"moonkale-agent-s1","value":{"cancellable":false,"kind":"begin","message":"next","title":"Claude"}}
        > ed1 detaches
          terminals <- Detach ed1
        > agent progress s1 End("done")
          ed2 <- $/progress {"token":"moonkale-agent-s1","value":{"kind":"end","message":"done"}}
    "#]]);
}
