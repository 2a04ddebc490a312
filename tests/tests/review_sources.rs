//! End to end: every edit the real `claude` CLI 2.1.332 makes without
//! asking (its default "auto" mode in a TTY) is seen by the service, for
//! each way Claude runs here: a plain `claude --ide` the user started in
//! the workspace, "Start Claude Code here", and the hosted agent in
//! `acceptEdits`. The model edits two places of one file and writes a new
//! one ([`moonkale_tests::review`]); a plain LSP client then reads the
//! change set and reviews it as a Helix user would, with diagnostics and
//! code actions alone ([`review::walk_in_a_plain_editor`]).
//!
//! Needs `scripts/install-test-peers.sh` and `cargo build --workspace --bins`.

use std::path::Path;

use expect_test::expect;
use moonkale_tests::review::{self, Source};
use moonkale_tests::world::World;
use moonkale_tests::{IdeClient, STEP, wait_until};
use serde_json::json;

/// The set [`review::script`] leaves, made by a source of `kind`.
fn check_set(set: &str, kind: &str) {
    let (head, files) = set.split_once('\n').unwrap_or((set, ""));
    assert_eq!(head, format!("{kind} {:?} pending", review::PROMPT));
    expect![[r#"
        review.txt modified
          0..1 -> 0..1: "one\n" -> "ONE\n"
          9..10 -> 9..10: "ten\n" -> "TEN\n"
        added.txt created
          0..0 -> 0..1: "" -> "written by Claude\n""#]]
    .assert_eq(files);
}

/// (1) The user starts plain `claude --ide` in a terminal of their own in
/// the workspace: its edits are read from its transcript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_claude_in_auto_mode_leaves_a_change_set() {
    let mut w = review::world(Source::UserCli).await;
    let root = w.sb.workspace.clone();
    let _claude = review::turn(&mut w, Source::UserCli).await;
    // What the CLI wrote in its transcript, as the service reads it (the
    // turn's last line comes a moment after the screen shows it).
    let transcript = wait_until("the transcript's end of turn", async || {
        let read = review::transcript_edits(&w.sb.home, &root);
        read.contains("turn ended").then_some(read)
    })
    .await;
    expect![[r#"
        prompt "tidy the review file"
        edit review.txt Some("one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n") -> "ONE\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n"
        edit review.txt Some("ONE\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n") -> "ONE\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nTEN\n"
        edit added.txt None -> "written by Claude\n"
        turn ended"#]].assert_eq(&transcript);
    // The change set a plain LSP client is told of and shown.
    let (_, set) = review::finished_set(&mut w.ed, &root).await;
    check_set(&set, "ide");
    review::walk_in_a_plain_editor(&mut w.ed, &root).await;
}

/// (2) "Start Claude Code here" (`moonkale.startClaude`), the user choosing
/// the CLI's own auto mode: the CLI gets a session id of the service's, so
/// its transcript is known exactly, and its edits are the terminal's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_claude_here_in_auto_mode_leaves_a_change_set() {
    let mut w = review::world(Source::Terminal).await;
    let root = w.sb.workspace.clone();
    let (_, argv) = review::terminal_turn(&mut w.ed).await;
    let session = argv
        .windows(2)
        .find(|w| w[0] == "--session-id")
        .map(|w| w[1].clone())
        .unwrap_or_else(|| panic!("no --session-id in {argv:?}"));
    review::assert_applied(&root);
    let transcript =
        w.sb.home
            .join(".claude/projects")
            .join(moonkale_claude::sessions::project_slug(&root))
            .join(format!("{session}.jsonl"));
    assert!(transcript.is_file(), "no {}", transcript.display());
    let (_, set) = review::finished_set(&mut w.ed, &root).await;
    check_set(&set, "terminal");
    review::walk_in_a_plain_editor(&mut w.ed, &root).await;
}

/// (3) The hosted agent in `acceptEdits`: the edits come from the CLI's
/// own tool results on its stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosted_agent_in_accept_edits_leaves_a_change_set() {
    let mut w = review::world(Source::Hosted).await;
    let root = w.sb.workspace.clone();
    let (session, _) =
        w.ed.run_first_turn(review::PROMPT, json!({"permissionMode": "acceptEdits"}))
            .await;
    review::assert_applied(&root);
    let (id, set) = review::finished_set(&mut w.ed, &root).await;
    check_set(&set, "agent");
    // The user undoes the second hunk and says why: Claude hears it with
    // the next prompt.
    let undone =
        w.ed.call(
            "moonkale/changes/undo",
            json!({"set": id, "uri": w.sb.uri(review::FILE), "hunk": 1,
                   "reason": "keep ten in lower case"}),
        )
        .await;
    assert_eq!(undone["undone"], 1, "{undone}");
    assert_eq!(
        std::fs::read_to_string(root.join(review::FILE)).unwrap(),
        review::AFTER.replace("TEN", "ten")
    );
    w.ed.send_prompt(&session, "carry on").await;
    let asked = w.fake.wait_prompt("carry on", STEP).await;
    let told = asked.latest_user_text();
    assert!(
        told.contains("Note from the user's editor")
            && told.contains("review.txt")
            && told.contains("keep ten in lower case"),
        "the model was not told why: {told}"
    );
}

/// (3, reviewed) The hosted agent's set, reviewed in an editor with no
/// plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosted_agents_set_is_reviewed_in_a_plain_editor() {
    let mut w = review::world(Source::Hosted).await;
    let root = w.sb.workspace.clone();
    let _claude = review::turn(&mut w, Source::Hosted).await;
    let (_, set) = review::finished_set(&mut w.ed, &root).await;
    check_set(&set, "agent");
    review::walk_in_a_plain_editor(&mut w.ed, &root).await;
}

/// Appends a turn of a `claude` the user runs (session `session`) to its
/// transcript: a prompt, a Write of `file` with `text`, the final answer.
fn user_claude_turn(home: &Path, root: &Path, session: &str, prompt: &str, file: &str, text: &str) {
    use std::io::Write;
    let dir = home
        .join(".claude/projects")
        .join(moonkale_claude::sessions::project_slug(root));
    std::fs::create_dir_all(&dir).unwrap();
    let path = root.join(file).display().to_string();
    let lines = [
        json!({"type": "user", "sessionId": session, "promptId": prompt, "uuid": prompt,
               "message": {"role": "user", "content": prompt}}),
        json!({"type": "user", "sessionId": session, "message": {"role": "user", "content": []},
               "toolUseResult": {"type": "create", "filePath": path, "content": text,
                                 "structuredPatch": [], "originalFile": null}}),
        json!({"type": "assistant", "sessionId": session,
               "message": {"role": "assistant", "stop_reason": "end_turn", "content": []}}),
    ];
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{session}.jsonl")))
        .unwrap();
    for line in lines {
        writeln!(f, "{line}").unwrap();
    }
}

/// The hosted CLI writes a transcript too, in the same projects folder the
/// service reads while a Claude Code client is connected: its edits are
/// the session's (from its stdout) and are not read again from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_turn_is_one_set_while_an_ide_client_is_connected() {
    let mut w = World::builder()
        .agent()
        .file(review::FILE, review::BEFORE)
        .start()
        .await;
    let root = w.sb.workspace.clone();
    let home = w.sb.home.clone();
    w.fake.set_script(review::script(&root));
    let mut ide = IdeClient::connect(w.ide_port(), &w.ide_token()).await;
    ide.initialize("2025-11-25").await;
    // A turn of the user's own claude: the transcripts are being read.
    let user = "22222222-3333-4444-8555-666666666666";
    user_claude_turn(&home, &root, user, "before", "before.txt", "b\n");
    let (_, before) = review::finished_set(&mut w.ed, &root).await;
    assert!(before.starts_with("ide \"before\""), "{before}");
    w.ed.run_first_turn(review::PROMPT, json!({"permissionMode": "acceptEdits"}))
        .await;
    let (_, hosted) = review::finished_set(&mut w.ed, &root).await;
    check_set(&hosted, "agent");
    // The hosted CLI's transcript was complete before its turn ended: once
    // a later transcript turn is announced, everything it holds was read.
    user_claude_turn(&home, &root, user, "after", "after.txt", "a\n");
    let (_, after) = review::finished_set(&mut w.ed, &root).await;
    assert!(after.starts_with("ide \"after\""), "{after}");
    let listed = w.ed.call("moonkale/changes/list", json!({})).await;
    let titles: Vec<String> = listed["sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s["source"]["kind"], s["title"]))
        .collect();
    expect![[r#"
        "ide" "before"
        "agent" "tidy the review file"
        "ide" "after""#]]
    .assert_eq(&titles.join("\n"));
}
