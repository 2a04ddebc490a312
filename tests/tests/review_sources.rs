//! End to end: every edit the real `claude` CLI 2.1.332 makes without
//! asking (its default "auto" mode in a TTY) is seen by the service, for
//! each way Claude runs here: a plain `claude --ide` the user started in
//! the workspace, "Start Claude Code here", and the hosted agent in
//! `acceptEdits`. The model edits two places of one file and writes a new
//! one ([`moonkale_tests::review`]); a plain LSP client then reads the
//! change set.
//!
//! Needs `scripts/install-test-peers.sh` and `cargo build --workspace --bins`.

use expect_test::expect;
use moonkale_tests::fakeapi::Script;
use moonkale_tests::review;
use moonkale_tests::world::World;
use moonkale_tests::{STEP, wait_until};

/// (1) The user starts plain `claude --ide` in a terminal of their own in
/// the workspace: its edits are read from its transcript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_claude_in_auto_mode_leaves_a_change_set() {
    let mut w = World::start(&[(review::FILE, review::BEFORE)], Script::new()).await;
    let root = w.sb.workspace.clone();
    w.fake.set_script(review::script(&root));
    let uri = w.open(review::FILE).await;
    let mut cli = w
        .claude(&root, |c| {
            let mut c = c.auto_mode();
            c.sse_port = None;
            c.arg("--ide")
        })
        .await;
    w.show_in_cli(&mut cli, &uri, (0, 0), (0, 0), "⧉ In review.txt")
        .await;
    cli.submit(review::PROMPT, STEP).await;
    cli.wait_for_text(review::DONE, STEP).await;
    review::assert_applied(&root);
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
}
