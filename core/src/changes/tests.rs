//! The change-set model against scripts of edits and undos, each checked
//! against a rendering of what the user would be shown.

use std::fmt::Write;

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;

fn uri(name: &str) -> Url {
    Url::from_file_path(format!("/w/{name}")).unwrap()
}

fn agent(session: &str) -> ChangeSource {
    ChangeSource::Agent {
        session: session.into(),
    }
}

fn edit(turn: &str, file: &str, before: Option<&str>, after: Option<&str>, at: u64) -> FileEdit {
    FileEdit {
        source: agent("s1"),
        turn: turn.into(),
        title: Some(format!("prompt of {turn}")),
        uri: uri(file),
        before: before.map(str::to_owned),
        after: after.map(str::to_owned),
        at,
    }
}

/// Every set as a list shows it, and each file's hunks as `show` does.
fn render(book: &ChangeBook) -> String {
    let mut out = String::new();
    for summary in book.list(true) {
        let set = book.set(summary.id).unwrap();
        writeln!(
            out,
            "set {} {:?} turn={:?} title={:?} {:?} open={} {}..{}",
            summary.id,
            summary.source,
            set.turn,
            summary.title,
            summary.state,
            summary.open,
            summary.started,
            summary.updated
        )
        .unwrap();
        for file in book.show(summary.id).unwrap().files {
            writeln!(
                out,
                "  {} {:?} after={:?}",
                file.uri.path(),
                file.kind,
                file.after
            )
            .unwrap();
            for h in file.hunks {
                writeln!(
                    out,
                    "    #{} {:?} before {}..{} after {}..{} -{:?} +{:?}",
                    h.index,
                    h.state,
                    h.before.start,
                    h.before.end,
                    h.after.start,
                    h.after.end,
                    h.removed,
                    h.added
                )
                .unwrap();
            }
        }
    }
    out
}

fn check(book: &ChangeBook, expect: Expect) {
    expect.assert_eq(&render(book));
}

#[test]
fn edits_of_one_turn_merge_and_a_new_turn_starts_a_set() {
    let mut book = ChangeBook::new();
    let r = book.record(edit("t1", "a.rs", Some("a\nb\nc\n"), Some("a\nB\nc\n"), 10));
    assert_eq!(
        r,
        Recorded {
            set: 1,
            closed: vec![]
        }
    );
    // The second edit of a.rs starts from the first one's text.
    book.record(edit(
        "t1",
        "a.rs",
        Some("a\nB\nc\n"),
        Some("a\nB\nc\nd\n"),
        11,
    ));
    book.record(edit("t1", "new.rs", None, Some("fn main() {}\n"), 12));
    // Edited, then edited back: no hunks.
    book.record(edit("t1", "back.rs", Some("x\n"), Some("y\n"), 13));
    book.record(edit("t1", "back.rs", Some("y\n"), Some("x\n"), 14));
    check(
        &book,
        expect![[r#"
            set 1 Agent { session: "s1" } turn="t1" title="prompt of t1" Pending open=true 10..14
              /w/a.rs Modified after=Some("a\nB\nc\nd\n")
                #0 Pending before 1..2 after 1..2 -"b\n" +"B\n"
                #1 Pending before 3..3 after 3..4 -"" +"d\n"
              /w/new.rs Created after=Some("fn main() {}\n")
                #0 Pending before 0..0 after 0..1 -"" +"fn main() {}\n"
              /w/back.rs Modified after=Some("x\n")
        "#]],
    );
    // A new turn of the same source closes the open set.
    let r = book.record(edit("t2", "a.rs", Some("a\nB\nc\nd\n"), None, 20));
    assert_eq!(
        r,
        Recorded {
            set: 2,
            closed: vec![1]
        }
    );
    // Another source's turn does not.
    let mut other = edit("t1", "b.rs", Some("1\n"), Some("2\n"), 21);
    other.source = ChangeSource::Ide {
        session: "s2".into(),
    };
    other.title = None;
    assert_eq!(book.record(other).closed, Vec::<u64>::new());
    assert_eq!(book.end_turn(&agent("s1"), "t2"), Some(2));
    assert_eq!(book.end_turn(&agent("s1"), "t2"), None, "once");
    check(
        &book,
        expect![[r#"
            set 1 Agent { session: "s1" } turn="t1" title="prompt of t1" Pending open=false 10..14
              /w/a.rs Modified after=Some("a\nB\nc\nd\n")
                #0 Pending before 1..2 after 1..2 -"b\n" +"B\n"
                #1 Pending before 3..3 after 3..4 -"" +"d\n"
              /w/new.rs Created after=Some("fn main() {}\n")
                #0 Pending before 0..0 after 0..1 -"" +"fn main() {}\n"
              /w/back.rs Modified after=Some("x\n")
            set 2 Agent { session: "s1" } turn="t2" title="prompt of t2" Pending open=false 20..20
              /w/a.rs Deleted after=None
                #0 Pending before 0..4 after 0..0 -"a\nB\nc\nd\n" +""
            set 3 Ide { session: "s2" } turn="t1" title="" Pending open=true 21..21
              /w/b.rs Modified after=Some("2\n")
                #0 Pending before 0..1 after 0..1 -"1\n" +"2\n"
        "#]],
    );
}

#[test]
fn a_source_without_turns_makes_bursts() {
    let mut book = ChangeBook::new();
    let watcher = |turn: &str, at| FileEdit {
        source: ChangeSource::Watcher,
        ..edit(turn, "w.rs", Some("1\n"), Some("2\n"), at)
    };
    assert_eq!(book.record(watcher("a", 1)).set, 1);
    assert_eq!(book.record(watcher("b", 2)).set, 1, "no turns: one burst");
    assert!(book.close(1));
    assert!(!book.close(1));
    assert_eq!(book.record(watcher("", 3)).set, 2);
}

/// A name, `before`, `after`, the file now, and the hunk to undo.
type UndoCase = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    Option<usize>,
);

/// Undo of one file of a set: (before, after, the file now, which hunk) →
/// what is undone, what refused, and the file's new text.
#[test]
fn undo_against_the_file_as_it_is_now() {
    let cases: &[UndoCase] = &[
        (
            "untouched since: every hunk",
            Some("a\nb\nc\nd\ne\n"),
            Some("a\nB\nc\nd\nE\n"),
            Some("a\nB\nc\nd\nE\n"),
            None,
        ),
        (
            "one hunk",
            Some("a\nb\nc\nd\ne\n"),
            Some("a\nB\nc\nd\nE\n"),
            Some("a\nB\nc\nd\nE\n"),
            Some(1),
        ),
        (
            "the user changed hunk 0's line: 1 still undone",
            Some("a\nb\nc\nd\ne\n"),
            Some("a\nB\nc\nd\nE\n"),
            Some("a\nBB\nc\nd\nE\n"),
            None,
        ),
        (
            "lines added above move the hunk",
            Some("a\nb\nc\nd\ne\n"),
            Some("a\nb\nc\nd\nE\n"),
            Some("new 1\nnew 2\na\nb\nc\nd\nE\n"),
            None,
        ),
        (
            "a change on the line next to the hunk touches it",
            Some("a\nb\nc\n"),
            Some("a\nB\nc\n"),
            Some("A\nB\nc\n"),
            None,
        ),
        (
            "a created file is removed",
            None,
            Some("new\n"),
            Some("new\n"),
            None,
        ),
        (
            "a created file the user changed stays",
            None,
            Some("new\n"),
            Some("new\nmine\n"),
            None,
        ),
        ("a deleted file comes back", Some("old\n"), None, None, None),
        (
            "a deleted file the user wrote again stays",
            Some("old\n"),
            None,
            Some("mine\n"),
            None,
        ),
        (
            "a modified file the user deleted",
            Some("a\n"),
            Some("b\n"),
            None,
            None,
        ),
        (
            "no trailing line break",
            Some("a\nb"),
            Some("a\nc"),
            Some("a\nc"),
            None,
        ),
    ];
    let mut out = String::new();
    for (name, before, after, current, hunk) in cases {
        let mut book = ChangeBook::new();
        book.record(edit("t", "f.txt", *before, *after, 1));
        let plan = book.plan_undo(1, &uri("f.txt"), *hunk, *current).unwrap();
        writeln!(
            out,
            "{name}:\n  undone {:?} text {:?}",
            plan.undone, plan.text
        )
        .unwrap();
        for r in plan.refused {
            writeln!(out, "  refused {:?}: {}", r.hunk, r.message).unwrap();
        }
    }
    expect![[r#"
        untouched since: every hunk:
          undone [0, 1] text Some("a\nb\nc\nd\ne\n")
        one hunk:
          undone [1] text Some("a\nB\nc\nd\ne\n")
        the user changed hunk 0's line: 1 still undone:
          undone [1] text Some("a\nBB\nc\nd\ne\n")
          refused Some(0): Line 2 of /w/f.txt changed after Claude Code's edit; not undone
        lines added above move the hunk:
          undone [0] text Some("new 1\nnew 2\na\nb\nc\nd\ne\n")
        a change on the line next to the hunk touches it:
          undone [] text Some("A\nB\nc\n")
          refused Some(0): Line 2 of /w/f.txt changed after Claude Code's edit; not undone
        a created file is removed:
          undone [0] text None
        a created file the user changed stays:
          undone [] text Some("new\nmine\n")
          refused Some(0): Line 1 of /w/f.txt changed after Claude Code's edit; not undone
        a deleted file comes back:
          undone [0] text Some("old\n")
        a deleted file the user wrote again stays:
          undone [] text Some("mine\n")
          refused Some(0): The lines around line 1 of /w/f.txt changed after Claude Code's edit; not undone
        a modified file the user deleted:
          undone [] text None
          refused Some(0): /w/f.txt no longer exists; nothing was undone
        no trailing line break:
          undone [0] text Some("a\nb")
    "#]]
    .assert_eq(&out);
}

#[test]
fn undone_hunks_are_put_back_in_the_effective_text_and_ranges() {
    let mut book = ChangeBook::new();
    let before = "1\n2\n3\n4\n5\n6\n";
    let after = "1\ntwo\n3\n4\n6\nseven\n";
    book.record(edit("t", "f.txt", Some(before), Some(after), 1));
    let plan = book
        .plan_undo(1, &uri("f.txt"), Some(1), Some(after))
        .unwrap();
    book.begin_undo(&plan).unwrap();
    assert_eq!(book.set(1).unwrap().intent, Some(plan.intent()));
    book.finish_undo(1);
    assert_eq!(book.set(1).unwrap().intent, None);
    // Kept hunks lose their pending state but stay in the text.
    assert!(
        book.keep(&KeepParams {
            set: 1,
            uri: Some(uri("f.txt")),
            hunk: Some(0),
        })
        .unwrap()
    );
    check(
        &book,
        expect![[r#"
            set 1 Agent { session: "s1" } turn="t" title="prompt of t" Pending open=true 1..1
              /w/f.txt Modified after=Some("1\ntwo\n3\n4\n5\n6\nseven\n")
                #0 Kept before 1..2 after 1..2 -"2\n" +"two\n"
                #1 Undone before 4..5 after 4..5 -"5\n" +""
                #2 Pending before 6..6 after 6..7 -"" +"seven\n"
        "#]],
    );
    let pending = book.pending_files();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].hunks.len(), 1);
    assert_eq!(pending[0].hunks[0].index, 2);
    let err = book.plan_undo(1, &uri("f.txt"), Some(1), None).unwrap_err();
    assert_eq!(err.message, "hunk 1 of /w/f.txt is undone already");
    book.end_turn(&agent("s1"), "t");
    assert!(!book.set(1).unwrap().is_settled());
    book.keep(&KeepParams {
        set: 1,
        uri: None,
        hunk: None,
    })
    .unwrap();
    assert_eq!(book.set(1).unwrap().state(), ReviewState::Undone);
    assert!(book.set(1).unwrap().is_settled());
    assert!(book.list(false).is_empty());
    assert_eq!(book.list(true).len(), 1);
}

#[test]
fn a_kept_hunk_stays_kept_when_claude_edits_the_file_again() {
    let mut book = ChangeBook::new();
    book.record(edit("t", "f.txt", Some("a\nb\nc\n"), Some("A\nb\nc\n"), 1));
    book.keep(&KeepParams {
        set: 1,
        uri: Some(uri("f.txt")),
        hunk: None,
    })
    .unwrap();
    book.record(edit("t", "f.txt", Some("A\nb\nc\n"), Some("A\nb\nC\n"), 2));
    check(
        &book,
        expect![[r#"
            set 1 Agent { session: "s1" } turn="t" title="prompt of t" Pending open=true 1..2
              /w/f.txt Modified after=Some("A\nb\nC\n")
                #0 Kept before 0..1 after 0..1 -"a\n" +"A\n"
                #1 Pending before 2..3 after 2..3 -"c\n" +"C\n"
        "#]],
    );
}

#[test]
fn refusals_of_keep_and_undo_name_what_is_wrong() {
    let mut book = ChangeBook::new();
    book.record(edit("t", "f.txt", Some("a\n"), Some("b\n"), 1));
    let keep = |set, file: Option<&str>, hunk| KeepParams {
        set,
        uri: file.map(uri),
        hunk,
    };
    let errors: Vec<String> = [
        book.clone().keep(&keep(9, None, None)).unwrap_err(),
        book.clone()
            .keep(&keep(1, Some("g.txt"), None))
            .unwrap_err(),
        book.clone()
            .keep(&keep(1, Some("f.txt"), Some(4)))
            .unwrap_err(),
        book.clone().keep(&keep(1, None, Some(0))).unwrap_err(),
        book.plan_undo(1, &uri("f.txt"), Some(3), None).unwrap_err(),
        book.undo_targets(1, Some(&uri("g.txt"))).unwrap_err(),
    ]
    .into_iter()
    .map(|e| e.message)
    .collect();
    expect![[r#"
        [
            "there is no change set 9",
            "change set 1 has no file /w/g.txt",
            "/w/f.txt has no hunk 4 in change set 1",
            "a hunk is kept by its file: give `uri` too",
            "/w/f.txt has no hunk 3 in change set 1",
            "change set 1 has no file /w/g.txt",
        ]
    "#]]
    .assert_debug_eq(&errors);
}

#[test]
fn an_intent_is_settled_by_the_file_after_a_crash() {
    let mut book = ChangeBook::new();
    book.record(edit("t", "f.txt", Some("a\n"), Some("b\n"), 1));
    book.record(edit("t", "new.txt", None, Some("n\n"), 1));
    let plan = book.plan_undo(1, &uri("f.txt"), None, Some("b\n")).unwrap();
    book.begin_undo(&plan).unwrap();
    // Stored, and read back as a restarted service would.
    let stored = serde_json::to_string(book.set(1).unwrap()).unwrap();
    let restore = || {
        let mut set: ChangeSet = serde_json::from_str(&stored).unwrap();
        set.restore().unwrap();
        ChangeBook::from_sets(vec![set])
    };
    let mut written = restore();
    assert!(written.resolve_intent(1, Some(b"a\n")));
    assert_eq!(
        written.set(1).unwrap().files[0].states,
        [ReviewState::Undone]
    );
    let mut not_written = restore();
    assert!(!not_written.resolve_intent(1, Some(b"b\n")));
    assert_eq!(
        not_written.set(1).unwrap().files[0].states,
        [ReviewState::Pending]
    );
    assert_eq!(not_written.set(1).unwrap().intent, None);
    // A removal is done when the file is gone.
    let plan = book
        .plan_undo(1, &uri("new.txt"), None, Some("n\n"))
        .unwrap();
    book.begin_undo(&plan).unwrap();
    let mut removed = book.clone();
    assert!(removed.resolve_intent(1, None));
    assert!(!book.resolve_intent(1, Some(b"n\n")));
    // New ids follow the stored ones.
    assert_eq!(written.record(edit("u", "f.txt", None, None, 2)).set, 2);
}

#[test]
fn a_damaged_stored_set_is_refused() {
    let mut book = ChangeBook::new();
    book.record(edit("t", "f.txt", Some("a\n"), Some("b\n"), 1));
    let mut set = book.set(1).unwrap().clone();
    set.files[0].states.push(ReviewState::Kept);
    let mut back: ChangeSet = serde_json::from_str(&serde_json::to_string(&set).unwrap()).unwrap();
    assert_eq!(
        back.restore().unwrap_err(),
        "/w/f.txt has 1 hunks but 2 decisions"
    );
}

#[test]
fn prune_forgets_old_sets_and_the_oldest_beyond_the_cap() {
    let mut book = ChangeBook::new();
    for (i, at) in [5, 50, 60, 70].into_iter().enumerate() {
        book.record(edit(
            &format!("t{i}"),
            "f.txt",
            Some("a\n"),
            Some("b\n"),
            at,
        ));
    }
    assert_eq!(book.prune(10, 2), vec![1, 2]);
    assert_eq!(book.sets().iter().map(|s| s.id).collect::<Vec<_>>(), [3, 4]);
}

/// Texts of a few short lines from a small alphabet, so diffs overlap.
fn text() -> impl Strategy<Value = Option<String>> {
    let line = prop_oneof![
        Just("a\n"),
        Just("b\n"),
        Just("c\n"),
        Just("d\n"),
        Just("\n"),
        Just("e"),
        Just("f\r\n"),
    ];
    prop::option::weighted(
        0.9,
        prop::collection::vec(line, 0..12).prop_map(|l| l.concat()),
    )
}

proptest! {
    /// Undoing every hunk, one at a time in any order, with the file as
    /// each undo left it, gives back `before` (no file for a created one).
    #[test]
    fn undoing_every_hunk_in_any_order_gives_back_before(
        before in text(),
        after in text(),
        order in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let mut book = ChangeBook::new();
        book.record(edit("t", "f.txt", before.as_deref(), after.as_deref(), 1));
        let file = uri("f.txt");
        let mut disk = after.clone();
        let mut pending: Vec<usize> = (0..book.set(1).unwrap().files[0].states.len()).collect();
        let mut picks = order.into_iter();
        while !pending.is_empty() {
            let at = picks.next().map_or(0, |i| i.index(pending.len()));
            let hunk = pending.remove(at);
            let plan = book.plan_undo(1, &file, Some(hunk), disk.as_deref()).unwrap();
            prop_assert_eq!(&plan.undone, &vec![hunk]);
            prop_assert!(plan.refused.is_empty());
            book.begin_undo(&plan).unwrap();
            disk = plan.text;
            book.finish_undo(1);
            prop_assert_eq!(&book.set(1).unwrap().files[0].effective(), &disk);
        }
        let no_hunks = book.set(1).unwrap().files[0].states.is_empty();
        if !no_hunks {
            prop_assert_eq!(disk, before);
        }
    }
}
