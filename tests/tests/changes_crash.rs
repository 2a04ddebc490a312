//! Crash test of an undo: the change-set host (in `changes-writer`)
//! records a change set of one big file and undoes it, and we SIGKILL it at
//! a random moment between the record and the end of the undo's write,
//! many times. After each kill a restarted host settles what it finds.
//! The invariant: the file holds either Claude's text (nothing undone) or
//! the text before (undone), never a mix or a torn file, and the set says
//! the same (every hunk pending, or every hunk undone); no intent is left
//! in the stored set and no temporary file in the workspace.
//!
//! A SIGKILL loses no page cache, so this covers process crashes, not power
//! loss. Every wait has a deadline; nothing sleeps but the aimed kill.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const ROUNDS: usize = 30;
const FILE: &str = "big.txt";

/// A text of `lines` numbered lines; every 7th differs in `after`.
fn texts(lines: usize) -> (String, String) {
    let mut before = String::new();
    let mut after = String::new();
    for i in 0..lines {
        let line = format!(
            "line {i} of a file Claude changed in many places ({})\n",
            "x".repeat(40)
        );
        before.push_str(&line);
        if i % 7 == 3 {
            after.push_str(&format!("CLAUDE WROTE LINE {i}\n"));
        } else {
            after.push_str(&line);
        }
    }
    (before, after)
}

fn writer(state: &Path) -> Command {
    let mut cmd = Command::new(moonkale_tests::bin("changes-writer"));
    cmd.env("XDG_STATE_HOME", state).env("MOONKALE_LOG", "warn");
    cmd
}

/// Runs an undo and kills it `kill_after` past its `recorded` line (or
/// lets it finish with `None`); how long the undo took when it finished.
fn run_undo(
    ws: &Path,
    state: &Path,
    before: &Path,
    kill_after: Option<Duration>,
) -> Option<Duration> {
    let mut child = writer(state)
        .args([
            "undo",
            &ws.display().to_string(),
            FILE,
            &before.display().to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start changes-writer");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("readable");
    assert_eq!(first, "recorded");
    let recorded = Instant::now();
    if let Some(after) = kill_after {
        std::thread::sleep(after);
        // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        return None;
    }
    let done = lines.next().expect("a line").expect("readable");
    assert!(done.starts_with("undone Ok("), "{done}");
    let took = recorded.elapsed();
    assert!(child.wait().expect("wait").success());
    Some(took)
}

/// Whether the stored set held an undo under way, and a restarted host's
/// view of set 1.
fn check(ws: &Path, state: &Path) -> (bool, Value) {
    let out = writer(state)
        .args(["check", &ws.display().to_string()])
        .output()
        .expect("run changes-writer check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8(out.stdout).expect("UTF-8");
    let (held, shown) = out.split_once('\n').expect("two lines");
    (
        held == "intent",
        serde_json::from_str(shown).expect("show answer"),
    )
}

#[test]
fn a_kill_during_an_undo_leaves_the_old_or_the_new_file_and_a_set_that_agrees() {
    let (rounds, mut rng) = moonkale_tests::crash_rounds(ROUNDS);
    // ~1 MiB: the undo's window is long enough to be hit often, and a
    // debug build still diffs it quickly.
    let (before, after) = texts(10_000);
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let before_file = base.join("before.txt");
    std::fs::write(&before_file, &before).unwrap();

    let fresh = |round: usize| {
        let ws = base.join(format!("ws{round}"));
        let state = base.join(format!("state{round}"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join(FILE), &after).unwrap();
        (ws, state)
    };
    // One undo left alone: how long the window is.
    let (ws, state) = fresh(rounds);
    let window = run_undo(&ws, &state, &before_file, None).expect("finished");
    assert_eq!(std::fs::read_to_string(ws.join(FILE)).unwrap(), before);

    let (mut undone, mut not_undone, mut intents) = (0, 0, 0);
    for round in 0..rounds {
        let (ws, state) = fresh(round);
        let kill_after = window.mul_f64((rng.next() % 1000) as f64 / 1000.0 * 0.8);
        run_undo(&ws, &state, &before_file, Some(kill_after));
        let (held, shown) = check(&ws, &state);
        intents += u32::from(held);
        let now = std::fs::read_to_string(ws.join(FILE)).expect("the file is there");
        let states: Vec<&str> = shown["files"][0]["hunks"]
            .as_array()
            .expect("hunks")
            .iter()
            .map(|h| h["state"].as_str().unwrap())
            .collect();
        let expected = if now == before {
            undone += 1;
            "undone"
        } else if now == after {
            not_undone += 1;
            "pending"
        } else {
            panic!(
                "round {round}: the file is neither text ({} bytes)",
                now.len()
            );
        };
        assert!(
            states.iter().all(|s| *s == expected),
            "round {round}: file {expected} but hunks {states:?}"
        );
        assert_eq!(
            shown["files"][0]["after"].as_str(),
            Some(now.as_str()),
            "round {round}: the set's effective text is the file's"
        );
        for entry in walk(&state) {
            assert!(
                !entry
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .contains(".tmp"),
                "round {round}: a temporary file is left: {}",
                entry.display()
            );
            let text = std::fs::read_to_string(&entry).unwrap_or_default();
            assert!(
                !text.contains("\"intent\""),
                "round {round}: {} still holds an intent",
                entry.display()
            );
        }
        let leftovers: Vec<_> = std::fs::read_dir(&ws)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != FILE)
            .collect();
        assert!(
            leftovers.is_empty(),
            "round {round}: left in the workspace: {leftovers:?}"
        );
    }
    eprintln!(
        "{rounds} kills: {undone} found undone, {not_undone} not yet, {intents} with an undo \
         under way (window {window:?})"
    );
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
