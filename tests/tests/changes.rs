//! End to end: a change set from the real `claude` CLI hosted in
//! `acceptEdits` (it edits two places of one file and writes a new one,
//! [`moonkale_tests::review`]), reviewed the way a user does from a shell:
//! `moonkale-service changes list | show | undo | keep` and `status`, with
//! the files on disk checked after each step.
//!
//! Needs `scripts/install-test-peers.sh` and `cargo build --workspace --bins`.

use expect_test::expect;
use moonkale_tests::review;
use moonkale_tests::world::World;
use serde_json::json;

/// `moonkale-service <args> --workspace <ws>`: its exit code and output
/// (stdout, then stderr), the workspace shown as `<ws>`.
async fn run(w: &World, args: &[&str]) -> String {
    let ws = w.sb.workspace.display().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--workspace", &ws]);
    let out = w
        .command(&all)
        .output()
        .await
        .expect("moonkale-service runs");
    let text = format!(
        "exit {}\n{}{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.replace(&ws, "<ws>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_turn_is_reviewed_and_undone_from_the_command_line() {
    let mut w = review::world(review::Source::Hosted).await;
    let root = w.sb.workspace.clone();
    let session =
        w.ed.start_session(json!({"permissionMode": "acceptEdits"}))
            .await;
    let seq = w.ed.send_prompt(&session, review::PROMPT).await;
    w.ed.turn_idle(&session, seq).await;
    review::assert_applied(&root);
    expect![[r#"
        agent "tidy the review file" pending
        review.txt modified
          0..1 -> 0..1: "one\n" -> "ONE\n"
          9..10 -> 9..10: "ten\n" -> "TEN\n"
        added.txt created
          0..0 -> 0..1: "" -> "written by Claude\n""#]]
    .assert_eq(&review::finished_set(&mut w.ed, &root).await.1);

    let listed = run(&w, &["changes", "list"]).await;
    let listed = listed.replace(&session, "<session>");
    expect![[r#"
        exit 0
        set 1  pending  by the hosted session <session>  "tidy the review file"
          modified review.txt  2 of 2 hunks pending
          created  added.txt  1 of 1 hunk pending
    "#]]
    .assert_eq(&listed);
    expect![[r#"
        exit 0
        Claude's changes to review: 1 change set, 2 files (`moonkale-service changes list`)
    "#]]
    .assert_eq(
        &run(&w, &["status"])
            .await
            .lines()
            .filter(|l| l.starts_with("exit") || l.contains("Claude's changes"))
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    );

    // Hunk 1 of review.txt (TEN): undone, ONE stays.
    let file = root.join(review::FILE).display().to_string();
    expect![[r#"
        exit 0
        undid 1 hunk
    "#]]
    .assert_eq(
        &run(
            &w,
            &[
                "changes",
                "undo",
                "1",
                &file,
                "1",
                "--reason",
                "ten stays lowercase",
            ],
        )
        .await,
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        review::AFTER.replace("TEN", "ten")
    );
    expect![[r#"
        exit 0
        set 1  pending  by the hosted session <session>  "tidy the review file"
          modified review.txt  1 of 2 hunks pending
          created  added.txt  1 of 1 hunk pending

        review.txt (modified)
          hunk 0 [pending] line 1 (before: line 1)
          - one
          + ONE
          hunk 1 [undone] line 10 (before: line 10)
          - ten
          + TEN

        added.txt (created)
          hunk 0 [pending] line 1 (before: no lines, at line 1)
          + written by Claude
    "#]]
    .assert_eq(
        &run(&w, &["changes", "show", "1"])
            .await
            .replace(&session, "<session>"),
    );

    // The user changes Claude's first line; undoing the set leaves it and
    // removes the file Claude created.
    std::fs::write(
        &file,
        review::AFTER.replace("ONE", "One").replace("TEN", "ten"),
    )
    .unwrap();
    expect![[r#"
        exit 0
        undid 1 hunk
        not undone: Line 1 of <ws>/review.txt changed after Claude Code's edit; not undone
    "#]]
    .assert_eq(&run(&w, &["changes", "undo", "1"]).await);
    assert!(!root.join(review::NEW_FILE).exists());
    assert!(std::fs::read_to_string(&file).unwrap().starts_with("One\n"));

    // Errors are one sentence; keeping the rest settles the set.
    expect![[r#"
        exit 1
        moonkale-service: there is no change set 9 in this workspace (`changes list --all` shows them)
    "#]]
    .assert_eq(&run(&w, &["changes", "keep", "9"]).await);
    expect![[r#"
        exit 0
    "#]]
    .assert_eq(&run(&w, &["changes", "keep", "1"]).await);
    expect![[r#"
        exit 0
        no change sets to review
    "#]]
    .assert_eq(&run(&w, &["changes", "list"]).await);
    let json = run(&w, &["changes", "list", "--all", "--json"]).await;
    assert!(json.contains(r#""state": "undone""#), "{json}");
}
