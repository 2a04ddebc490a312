//! End to end: the service's own terminals (`moonkale/terminal/*`,
//! docs/protocol.md "Terminals"), through the real service binary, with real
//! programs in real PTYs, and "Start Claude Code here" with the real `claude`
//! CLI against the fake API (security cases 48–52 of
//! shared/docs/security.md included).
//!
//! Waits are for `moonkale/terminal/update` notifications (then a fresh
//! `moonkale/terminal/screen`) with deadlines; nothing sleeps and hopes.
//!
//! Needs the workspace's binaries (`cargo build --workspace`) and, for the
//! CLI tests, `scripts/install-test-peers.sh` (or `MOONKALE_CLAUDE`).
//!
//! One test binary, one module per concern; this file holds the world, the
//! terminal requests and waits, and the `/proc` readers they share.

mod claude;
mod input;
mod output;
mod processes;
mod screen;

use std::time::Duration;

use moonkale_tests::lsp::{Client, plain_caps};
use moonkale_tests::short;
use moonkale_tests::world::{World, WorldBuilder};
use serde_json::{Value, json};

/// The longest one step may take.
const STEP: Duration = Duration::from_secs(10);

/// How to build the world of a terminal test: the service and one editor
/// without buttons (`term-editor`).
fn world() -> WorldBuilder {
    World::builder().editor("term-editor", plain_caps())
}

/// The world of most terminal tests.
async fn start() -> World {
    world().start().await
}

/// `moonkale/terminal/open`; the terminal's id and info.
async fn open(c: &mut Client, params: Value) -> (u64, Value) {
    let info = c.call("moonkale/terminal/open", params).await;
    let id = info["terminal"]
        .as_u64()
        .unwrap_or_else(|| panic!("no terminal id in {info}"));
    (id, info)
}

/// A `/bin/sh` terminal (argv given explicitly) of `rows`×`cols`.
async fn open_sh(c: &mut Client, rows: u16, cols: u16) -> (u64, Value) {
    open(c, json!({"argv": ["/bin/sh"], "rows": rows, "cols": cols})).await
}

async fn screen(c: &mut Client, id: u64) -> Value {
    c.call("moonkale/terminal/screen", json!({"terminal": id}))
        .await
}

async fn input_text(c: &mut Client, id: u64, text: &str) {
    c.call(
        "moonkale/terminal/input",
        json!({"terminal": id, "text": text}),
    )
    .await;
}

async fn keys(c: &mut Client, id: u64, keys: &[&str]) {
    c.call(
        "moonkale/terminal/input",
        json!({"terminal": id, "keys": keys}),
    )
    .await;
}

/// Types `line` and presses Enter.
async fn run(c: &mut Client, id: u64, line: &str) {
    input_text(c, id, line).await;
    keys(c, id, &["Enter"]).await;
}

/// The text of a row (its spans' text joined).
fn row_text(row: &Value) -> String {
    row["spans"]
        .as_array()
        .map(|spans| {
            spans
                .iter()
                .map(|s| s["text"].as_str().unwrap_or(""))
                .collect()
        })
        .unwrap_or_default()
}

/// The rows of a screen (or scrollback page) as text, trailing blanks
/// trimmed, in the order given.
fn rows(screen: &Value) -> Vec<String> {
    screen["lines"]
        .as_array()
        .map(|ls| {
            ls.iter()
                .map(|r| row_text(r).trim_end().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn text(screen: &Value) -> String {
    rows(screen).join("\n")
}

/// True if some row is exactly `line`.
fn has_line(screen: &Value, line: &str) -> bool {
    rows(screen).iter().any(|r| r == line)
}

fn count_lines(screen: &Value, line: &str) -> usize {
    rows(screen).iter().filter(|r| *r == line).count()
}

fn is_update(m: &Value, id: u64) -> bool {
    m["method"] == "moonkale/terminal/update" && m["params"]["terminal"] == id
}

/// Waits until some update of `id` at `c.log[after..]` (taken by an
/// earlier wait or not) satisfies `pred`; its index in the log.
async fn saw_update(
    c: &mut Client,
    id: u64,
    after: usize,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> usize {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        c.drain();
        if let Some(i) = c
            .log
            .iter()
            .skip(after)
            .position(|m| is_update(m, id) && pred(&m["params"]))
        {
            return after + i;
        }
        let now = tokio::time::Instant::now();
        assert!(
            now < deadline,
            "terminal {id}: no update with {what}\n{}",
            c.recent(20)
        );
        c.try_take((deadline - now).min(Duration::from_millis(50)), |_| false)
            .await;
    }
}

/// Waits until the screen of `id` satisfies `pred`: looks at the screen,
/// then waits for the terminal's next update (at most 250 ms, as updates to
/// a slow client may be dropped), up to `timeout`.
async fn wait_screen_for(
    c: &mut Client,
    id: u64,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let s = screen(c, id).await;
        if pred(&s) {
            return s;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            panic!(
                "terminal {id}: timed out after {timeout:?} waiting for {what}\n--- screen ---\n{}\n\
                 --- screen JSON ---\n{}\n{}",
                text(&s),
                short(&s.to_string(), 3000),
                c.diag.context()
            );
        }
        let wait = (deadline - now).min(Duration::from_millis(250));
        c.try_take(wait, |m| is_update(m, id)).await;
    }
}

async fn wait_screen(c: &mut Client, id: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    wait_screen_for(c, id, what, STEP, pred).await
}

/// Waits until a row is exactly `line`.
async fn wait_line(c: &mut Client, id: u64, line: &str) -> Value {
    wait_screen(c, id, &format!("the line {line:?}"), |s| has_line(s, line)).await
}

/// Waits for the shell's prompt (`$ ` or `# ` at the end of the last
/// non-empty row).
async fn wait_prompt(c: &mut Client, id: u64) -> Value {
    wait_screen(c, id, "a shell prompt", |s| {
        rows(s)
            .iter()
            .rev()
            .find(|r| !r.is_empty())
            .is_some_and(|r| r.ends_with('$') || r.ends_with('#'))
    })
    .await
}

/// All spans of all rows of a screen.
fn spans(screen: &Value) -> Vec<Value> {
    screen["lines"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// `(state, ppid, session, tty_nr)` from /proc/<pid>/stat.
fn proc_stat(pid: i32) -> Option<(char, i32, i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((
        f.first()?.chars().next()?,
        f.get(1)?.parse().ok()?,
        f.get(3)?.parse().ok()?,
        f.get(4)?.parse().ok()?,
    ))
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Live (not zombie) processes in session `sid`.
fn live_in_session(sid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|p| proc_stat(*p).is_some_and(|(st, _, s, _)| s == sid && st != 'Z'))
        .collect()
}

/// Zombie children of `parent`.
fn zombie_children(parent: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|p| proc_stat(*p).is_some_and(|(st, pp, _, _)| pp == parent && st == 'Z'))
        .collect()
}

fn children(parent: i32) -> Vec<(i32, String)> {
    all_pids()
        .into_iter()
        .filter(|p| proc_stat(*p).is_some_and(|(_, pp, _, _)| pp == parent))
        .map(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            (p, comm.trim().to_owned())
        })
        .collect()
}

fn pid_of(info: &Value) -> i32 {
    info["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pid in {info}")) as i32
}
