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
//! two CLI tests, `scripts/install-test-peers.sh` (or `MOONKALE_CLAUDE`).

use std::path::Path;
use std::time::{Duration, Instant};

use moonkale_tests::claude_cli::{Claude, claude_bin, claude_env};
use moonkale_tests::fakeapi::{FakeApi, Reply, Script};
use moonkale_tests::lsp::{Client, Diag, plain_caps};
use moonkale_tests::short;
use moonkale_tests::{Sandbox, Service, bin, rss_kib};
use serde_json::{Value, json};

/// The longest one step may take.
const STEP: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// The world of a test

/// A service and one editor connected to it. Fields drop in order: the
/// editor, the service (SIGTERM), the sandbox's folders.
struct World {
    c: Client,
    svc: Service,
    sb: Sandbox,
}

impl World {
    async fn start() -> World {
        World::start_with(&[]).await
    }

    async fn start_with(env: &[(&str, &str)]) -> World {
        let sb = Sandbox::new();
        let svc = sb.start_service_with_env(&[], env).await;
        let c = client(&sb, &svc, "term-editor").await;
        World { c, svc, sb }
    }

    fn log(&self) -> String {
        service_log(&self.sb)
    }
}

fn diag(sb: &Sandbox) -> Diag {
    Diag {
        service_log: sb.root.join("service.log"),
        fake: None,
    }
}

async fn client(sb: &Sandbox, svc: &Service, name: &str) -> Client {
    Client::connect(svc, name, plain_caps(), diag(sb)).await
}

fn service_log(sb: &Sandbox) -> String {
    let text = std::fs::read_to_string(sb.root.join("service.log")).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(40)..].join("\n")
}

// ---------------------------------------------------------------------------
// Terminal requests

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

// ---------------------------------------------------------------------------
// Processes

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

/// Waits (polling /proc, which has no push channel) until `cond` holds, up
/// to `timeout`; false after that.
async fn poll(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pid_of(info: &Value) -> i32 {
    info["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pid in {info}")) as i32
}

// ---------------------------------------------------------------------------
// 1–4: the screen

/// (1) Text and Enter reach `/bin/sh`; its output shows in an update and on
/// the screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_round_trip() {
    let mut w = World::start().await;
    let (id, info) = open_sh(&mut w.c, 24, 80).await;
    assert_eq!(info["argv"], json!(["/bin/sh"]), "{info}");
    assert_eq!((&info["rows"], &info["cols"]), (&json!(24), &json!(80)));
    assert_eq!(info["cwd"], json!(w.sb.workspace), "{info}");
    assert!(info["pid"].as_u64().is_some_and(|p| p > 1), "{info}");
    wait_prompt(&mut w.c, id).await;
    run(&mut w.c, id, "echo hi-$((1+1))").await;
    // The opener is subscribed: an update carries the output row.
    let update =
        w.c.take("an update with hi-2", STEP, |m| {
            is_update(m, id)
                && m["params"]["lines"]
                    .as_array()
                    .is_some_and(|ls| ls.iter().any(|r| row_text(r).trim_end() == "hi-2"))
        })
        .await;
    assert!(update["params"]["lines"][0]["index"].is_u64(), "{update}");
    let s = wait_line(&mut w.c, id, "hi-2").await;
    assert_eq!((&s["rows"], &s["cols"]), (&json!(24), &json!(80)), "{s}");
    assert_eq!(s["exited"], json!(false));
    assert_eq!(s["alternateScreen"], json!(false));
}

/// (2) SGR colours and attributes land as styled spans: bold + palette 1,
/// 256-colour 123, truecolour #010203.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colours_and_attributes_are_spans() {
    let mut w = World::start().await;
    let (id, _) = open_sh(&mut w.c, 24, 100).await;
    wait_prompt(&mut w.c, id).await;
    run(
        &mut w.c,
        id,
        r"printf '\033[1;31mred\033[0m \033[38;5;123mx\033[0m \033[38;2;1;2;3my\033[0m \033[4;7mul\033[0m\n'",
    )
    .await;
    let s = wait_line(&mut w.c, id, "red x y ul").await;
    let row = s["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| row_text(r).trim_end() == "red x y ul")
        .unwrap()
        .clone();
    let span = |t: &str| {
        row["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|sp| sp["text"] == t)
            .cloned()
            .unwrap_or_else(|| panic!("no span {t:?} in {row}"))
    };
    let red = span("red");
    assert_eq!(
        (&red["bold"], &red["fg"]),
        (&json!(true), &json!("1")),
        "{row}"
    );
    assert_eq!(span("x")["fg"], json!("123"), "{row}");
    assert!(span("x").get("bold").is_none(), "{row}");
    assert_eq!(span("y")["fg"], json!("#010203"), "{row}");
    let ul = span("ul");
    assert_eq!(
        (&ul["underline"], &ul["inverse"]),
        (&json!(true), &json!(true)),
        "{row}"
    );
    // Default-style blanks between them carry no style fields.
    let blank = span(" ");
    assert!(
        blank.get("fg").is_none() && blank.get("bold").is_none(),
        "{row}"
    );
}

/// (3) + hostile 51: resizing reaches the program (`stty size`); garbage
/// sizes are refused with -32602 and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_and_hostile_51_garbage_sizes() {
    let mut w = World::start().await;
    let (id, _) = open_sh(&mut w.c, 24, 80).await;
    wait_prompt(&mut w.c, id).await;
    run(&mut w.c, id, "stty size").await;
    wait_line(&mut w.c, id, "24 80").await;

    let r =
        w.c.call(
            "moonkale/terminal/resize",
            json!({"terminal": id, "rows": 40, "cols": 132}),
        )
        .await;
    assert_eq!(r, json!({"rows": 40, "cols": 132}));
    // After a resize every row is sent, with the size.
    w.c.take("an update with the new size", STEP, |m| {
        is_update(m, id) && m["params"]["size"]["rows"] == 40 && m["params"]["size"]["cols"] == 132
    })
    .await;
    run(&mut w.c, id, "stty size").await;
    wait_line(&mut w.c, id, "40 132").await;

    for bad in [
        json!({"terminal": id, "rows": 0, "cols": 0}),
        json!({"terminal": id, "rows": 65535, "cols": 65535}),
        json!({"terminal": id, "rows": -1, "cols": 80}),
        json!({"terminal": id, "rows": 24, "cols": -80}),
        json!({"terminal": id, "rows": 1001, "cols": 80}),
        json!({"terminal": id, "rows": 24, "cols": 4001}),
        json!({"terminal": id, "rows": 0, "cols": 80}),
        json!({"terminal": id, "rows": "24", "cols": 80}),
        json!({"terminal": id, "rows": 24.5, "cols": 80}),
        json!({"terminal": id, "rows": 99999999999u64, "cols": 80}),
        json!({"terminal": id}),
        json!(null),
    ] {
        let resp = w.c.request("moonkale/terminal/resize", bad.clone()).await;
        assert_eq!(
            resp["error"]["code"],
            json!(-32602),
            "resize {bad} was not refused as invalid params: {resp}"
        );
    }
    let s = screen(&mut w.c, id).await;
    assert_eq!((&s["rows"], &s["cols"]), (&json!(40), &json!(132)), "{s}");
    let list = w.c.call("moonkale/terminal/list", Value::Null).await;
    let info = &list["terminals"][0];
    assert_eq!(
        (&info["rows"], &info["cols"]),
        (&json!(40), &json!(132)),
        "{list}"
    );
    // The program saw no size change either.
    run(&mut w.c, id, "stty size").await;
    wait_screen(&mut w.c, id, "a second `40 132`", |s| {
        count_lines(s, "40 132") == 2
    })
    .await;
}

/// (4) A program on the alternate screen: reported, then left, and the
/// primary screen's content is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternate_screen_comes_and_goes() {
    let mut w = World::start().await;
    let (id, _) = open_sh(&mut w.c, 24, 80).await;
    wait_prompt(&mut w.c, id).await;
    run(&mut w.c, id, "echo primary-$((3*3))").await;
    wait_line(&mut w.c, id, "primary-9").await;
    run(
        &mut w.c,
        id,
        r"printf '\033[?1049h\033[H\033[2JALT-%s\n' SCREEN; read x; printf '\033[?1049l'",
    )
    .await;
    let s = wait_screen(&mut w.c, id, "the alternate screen", |s| {
        s["alternateScreen"] == true && has_line(s, "ALT-SCREEN")
    })
    .await;
    assert!(!has_line(&s, "primary-9"), "{}", text(&s));
    let entered = saw_update(&mut w.c, id, 0, "alternateScreen: true", |p| {
        p["alternateScreen"] == true
    })
    .await;
    keys(&mut w.c, id, &["Enter"]).await;
    let s = wait_screen(&mut w.c, id, "the primary screen back", |s| {
        s["alternateScreen"] == false && has_line(s, "primary-9")
    })
    .await;
    assert!(!has_line(&s, "ALT-SCREEN"), "{}", text(&s));
    saw_update(&mut w.c, id, entered + 1, "alternateScreen: false", |p| {
        p["alternateScreen"] == false
    })
    .await;
}

// ---------------------------------------------------------------------------
// Hostile 49, 50: output

/// Hostile 49: 50 MB of output to a subscribed client that does not read its
/// socket: the service's memory stays flat, another client is answered
/// meanwhile (screen, resize), and afterwards input still reaches the shell
/// and the slow client gets answers once it reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_49_flood_to_a_client_that_does_not_read() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    // The opener: a raw client that reads only when the test says so.
    let mut slow = svc.connect().await;
    slow.initialize("slow-editor", &["utf-16"], Value::Null)
        .await;
    let info = slow
        .call(
            "moonkale/terminal/open",
            json!({"argv": ["/bin/sh"], "rows": 24, "cols": 80}),
        )
        .await;
    let id = info["terminal"].as_u64().expect("terminal id");
    let mut c = client(&sb, &svc, "watcher").await;
    wait_prompt(&mut c, id).await;
    let base = rss_kib(svc.pid());

    // Sent by the slow client, whose replies and updates then pile up unread.
    let flood = "head -c 50000000 /dev/zero | tr '\\0' a; echo; echo flood-$((6+1))";
    slow.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "moonkale/terminal/input",
                     "params": {"terminal": id, "text": flood}}),
    )
    .await;
    slow.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "moonkale/terminal/input",
                     "params": {"terminal": id, "keys": ["Enter"]}}),
    )
    .await;

    // Meanwhile the watcher is served: the flood is under way, a resize is
    // answered and reaches the screen.
    wait_screen(&mut c, id, "the flood on the screen", |s| {
        has_line(s, &"a".repeat(80))
    })
    .await;
    let started = Instant::now();
    let r = c
        .call(
            "moonkale/terminal/resize",
            json!({"terminal": id, "rows": 30, "cols": 100}),
        )
        .await;
    assert_eq!(r, json!({"rows": 30, "cols": 100}));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a resize during the flood took {:?}",
        started.elapsed()
    );

    let mut peak = base;
    // A debug build renders the 50 MB in about 20 s on this machine's two
    // cores; the deadline leaves room for a busy one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(45);
    loop {
        peak = peak.max(rss_kib(svc.pid()));
        let s = screen(&mut c, id).await;
        if has_line(&s, "flood-7") {
            assert_eq!((&s["rows"], &s["cols"]), (&json!(30), &json!(100)));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the 50 MB flood did not end within 45 s (RSS {base} → {peak} KiB)\n{}\n{}",
            text(&s),
            service_log(&sb)
        );
        c.try_take(Duration::from_millis(100), |m| is_update(m, id))
            .await;
    }
    peak = peak.max(rss_kib(svc.pid()));
    assert!(
        peak < base + 100 * 1024,
        "the service's RSS grew from {base} KiB to {peak} KiB during the flood"
    );

    // Input still reaches the shell.
    run(&mut c, id, "echo done-$((2+3))").await;
    wait_line(&mut c, id, "done-5").await;

    // The slow client reads again: its two inputs were answered, and it is
    // answered now.
    let s = slow
        .call("moonkale/terminal/screen", json!({"terminal": id}))
        .await;
    assert_eq!(s["terminal"], json!(id), "{s}");
    for n in [1, 2] {
        assert!(
            slow.notifications
                .iter()
                .any(|m| m["id"] == n && m.get("result").is_some()),
            "the slow client's input {n} was not answered"
        );
    }
    let updates = slow
        .notifications
        .iter()
        .filter(|m| m["method"] == "moonkale/terminal/update")
        .count();
    eprintln!("flood: RSS {base} → {peak} KiB; the slow client got {updates} updates");
}

/// Hostile 50: a UTF-8 character and an escape sequence split across
/// writes arrive whole; invalid UTF-8 breaks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_50_split_and_invalid_utf8() {
    let mut w = World::start().await;
    let (id, _) = open_sh(&mut w.c, 24, 80).await;
    wait_prompt(&mut w.c, id).await;
    run(&mut w.c, id, r"printf '\303'; sleep 0.2; printf '\251\n'").await;
    let s = wait_screen(&mut w.c, id, "é", |s| {
        rows(s)
            .iter()
            .any(|r| r.contains('é') || r.contains('\u{fffd}'))
    })
    .await;
    assert!(
        has_line(&s, "é"),
        "the split character was not carried across writes:\n{}",
        text(&s)
    );

    run(
        &mut w.c,
        id,
        r"printf '\033[3'; sleep 0.2; printf '1mSPLIT\033[0m\n'",
    )
    .await;
    let s = wait_line(&mut w.c, id, "SPLIT").await;
    let split = spans(&s)
        .into_iter()
        .find(|sp| sp["text"] == "SPLIT")
        .expect("a SPLIT span");
    assert_eq!(split["fg"], json!("1"), "{split}");

    run(
        &mut w.c,
        id,
        r"printf 'bad-\377\376\300-x \355\240\200 \370\210\200\200\200\n'; echo ok-$((5+5))",
    )
    .await;
    let s = wait_line(&mut w.c, id, "ok-10").await;
    let bad = rows(&s)
        .into_iter()
        .find(|r| r.starts_with("bad-"))
        .unwrap_or_else(|| panic!("no bad- row:\n{}", text(&s)));
    assert!(bad.contains("-x"), "{bad:?}");
    // Still working: more input, more output, and valid text after it.
    run(&mut w.c, id, r"printf 'caf\303\251-%s\n' $((1+1))").await;
    wait_line(&mut w.c, id, "café-2").await;
}

// ---------------------------------------------------------------------------
// Hostile 48: endings

/// Hostile 48 (a): the shell exits → `exit` with its code, and the service
/// reaps it (no zombie child).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_48a_shell_exit_is_reported_and_reaped() {
    let mut w = World::start().await;
    let (id, info) = open_sh(&mut w.c, 24, 80).await;
    let pid = pid_of(&info);
    wait_prompt(&mut w.c, id).await;
    run(&mut w.c, id, "exit 3").await;
    let exit =
        w.c.take("moonkale/terminal/exit", STEP, |m| {
            m["method"] == "moonkale/terminal/exit" && m["params"]["terminal"] == id
        })
        .await;
    assert_eq!(exit["params"]["exitCode"], json!(3), "{exit}");
    assert!(
        poll(STEP, || proc_stat(pid).is_none()).await,
        "the exited shell {pid} was not reaped: {:?}",
        proc_stat(pid)
    );
    let zombies = zombie_children(w.svc.pid());
    assert!(
        zombies.is_empty(),
        "zombie children of the service: {zombies:?}"
    );
    let list = w.c.call("moonkale/terminal/list", Value::Null).await;
    let t = list["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["terminal"] == id)
        .cloned();
    if let Some(t) = t {
        assert_eq!(
            (&t["exited"], &t["exitCode"]),
            (&json!(true), &json!(3)),
            "{t}"
        );
    }
    let s = screen(&mut w.c, id).await;
    assert_eq!(s["exited"], json!(true), "{s}");
    // Input to an exited program is refused, not lost silently.
    let resp =
        w.c.request(
            "moonkale/terminal/input",
            json!({"terminal": id, "text": "x"}),
        )
        .await;
    assert!(resp.get("error").is_some(), "{resp}");
}

/// Hostile 48 (b): the opener disconnects → its terminals' programs get
/// SIGHUP (gone at once) or SIGKILL 3 s later (one that ignores SIGHUP);
/// a `keepAlive` terminal survives, is listed to a new client and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_48b_opener_disconnect_hangs_up() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let mut a = client(&sb, &svc, "opener").await;
    let (plain, info) = open_sh(&mut a, 24, 80).await;
    let plain_pid = pid_of(&info);
    let (stubborn, info) = open(
        &mut a,
        json!({"argv": ["/bin/sh", "-c", "trap '' HUP; echo ignoring-hup; while :; do sleep 1; done"]}),
    )
    .await;
    let stubborn_pid = pid_of(&info);
    let (kept, info) = open(&mut a, json!({"argv": ["/bin/sh"], "keepAlive": true})).await;
    let kept_pid = pid_of(&info);
    wait_prompt(&mut a, plain).await;
    wait_line(&mut a, stubborn, "ignoring-hup").await;
    wait_prompt(&mut a, kept).await;

    drop(a);
    let gone = Instant::now();
    assert!(
        poll(Duration::from_secs(3), || live_in_session(plain_pid)
            .is_empty())
        .await,
        "the shell {plain_pid} outlived its opener by 3 s: {:?}\n{}",
        live_in_session(plain_pid),
        service_log(&sb)
    );
    assert!(
        poll(Duration::from_secs(6), || live_in_session(stubborn_pid)
            .is_empty())
        .await,
        "the SIGHUP-ignoring program {stubborn_pid} outlived its opener by 6 s: {:?}\n{}",
        live_in_session(stubborn_pid),
        service_log(&sb)
    );
    let stubborn_took = gone.elapsed();
    assert!(
        stubborn_took >= Duration::from_millis(2500),
        "the SIGHUP-ignoring program was gone after {stubborn_took:?}: no 3 s grace?"
    );
    assert!(
        poll(STEP, || proc_stat(plain_pid).is_none()
            && proc_stat(stubborn_pid).is_none())
        .await,
        "not reaped: {:?} {:?}",
        proc_stat(plain_pid),
        proc_stat(stubborn_pid)
    );
    assert!(proc_stat(kept_pid).is_some_and(|(st, ..)| st != 'Z'));

    let mut b = client(&sb, &svc, "later").await;
    let list = b.call("moonkale/terminal/list", Value::Null).await;
    let ids: Vec<u64> = list["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["terminal"].as_u64())
        .collect();
    assert_eq!(ids, vec![kept], "{list}");
    b.call("moonkale/terminal/subscribe", json!({"terminal": kept}))
        .await;
    run(&mut b, kept, "echo alive-$((1+6))").await;
    wait_line(&mut b, kept, "alive-7").await;
    b.call("moonkale/terminal/close", json!({"terminal": kept}))
        .await;
    b.take("moonkale/terminal/closed", STEP, |m| {
        m["method"] == "moonkale/terminal/closed" && m["params"]["terminal"] == kept
    })
    .await;
    assert!(
        poll(Duration::from_secs(4), || live_in_session(kept_pid)
            .is_empty())
        .await,
        "the closed terminal's shell survived"
    );
}

/// Hostile 48 (c): service shutdown (SIGTERM) leaves no PTY program
/// running: not the shells, not a background job, not a SIGHUP-ignorer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_48c_service_shutdown_leaves_no_pty_child() {
    let mut w = World::start().await;
    let (sh, info) = open(&mut w.c, json!({"argv": ["/bin/sh"], "keepAlive": true})).await;
    let sh_pid = pid_of(&info);
    let (stubborn, info) = open(
        &mut w.c,
        json!({"argv": ["/bin/sh", "-c", "trap '' HUP TERM; echo ignoring-hup; while :; do sleep 1; done"]}),
    )
    .await;
    let stubborn_pid = pid_of(&info);
    wait_prompt(&mut w.c, sh).await;
    run(&mut w.c, sh, "sleep 300 & echo bg-$((2*4))").await;
    wait_line(&mut w.c, sh, "bg-8").await;
    wait_line(&mut w.c, stubborn, "ignoring-hup").await;
    assert!(live_in_session(sh_pid).len() >= 2, "no background job");

    let pid = w.svc.pid();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(10), w.svc.child.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the service did not stop within 10 s of SIGTERM\n{}",
                w.log()
            )
        })
        .expect("wait for the service");
    eprintln!("service exited: {status}");
    // Orphans go to a parent that may not reap them: zombies are dead.
    let clean = poll(Duration::from_secs(2), || {
        live_in_session(sh_pid).is_empty() && live_in_session(stubborn_pid).is_empty()
    })
    .await;
    let survivors = (live_in_session(sh_pid), live_in_session(stubborn_pid));
    // Whatever survived was started by this test: gone before failing.
    for pid in survivors.0.iter().chain(&survivors.1) {
        // SAFETY: as above.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        clean,
        "PTY programs survived the service (pgrep -s): session {sh_pid}: {:?}, session \
         {stubborn_pid}: {:?} (a background job has a process group of its own)\n{}",
        survivors.0,
        survivors.1,
        w.log()
    );
}

// ---------------------------------------------------------------------------
// Hostile 52: spawn

/// Hostile 52: started by argv (no shell in between), in its own session
/// with the PTY as controlling terminal, fds 0–2 only, no `MOONKALE_*` or
/// `CLAUDECODE` in its environment (not even through `env`), `TERM` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_52_spawn_session_fds_environment() {
    let mut w = World::start_with(&[
        ("MOONKALE_SECRET_TEST", "x"),
        ("CLAUDECODE", "1"),
        ("KEEP_ME_TEST", "kept"),
        ("TERM", "dumb"),
    ])
    .await;
    let sub = w.sb.workspace.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let (id, info) = open(
        &mut w.c,
        json!({"argv": ["/bin/sh", "-c", "echo started; exec /bin/cat"], "cwd": "sub",
               "env": {"MOONKALE_INJECTED": "y", "EXTRA_TEST": "e"}}),
    )
    .await;
    wait_line(&mut w.c, id, "started").await;
    // cat opens locale files while it starts; once it has echoed a line it
    // is past that and blocked reading the PTY (the line shows twice: the
    // terminal's echo, then cat's).
    run(&mut w.c, id, "ping").await;
    wait_screen(&mut w.c, id, "cat echoing a line", |s| {
        count_lines(s, "ping") == 2
    })
    .await;
    let pid = pid_of(&info);
    assert_eq!(info["cwd"], json!(sub), "{info}");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert_eq!(cmdline, b"/bin/cat\0", "argv of {pid}");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), sub);
    let (_, ppid, sid, tty) = proc_stat(pid).expect("stat");
    assert_eq!(
        ppid,
        w.svc.pid(),
        "the program is not the service's own child"
    );
    assert_eq!(sid, pid, "the program is not a session leader");
    assert_ne!(tty, 0, "the program has no controlling terminal");
    let fd0 = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap();
    assert!(fd0.starts_with("/dev/pts/"), "{}", fd0.display());
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort();
    let links: Vec<String> = fds
        .iter()
        .map(|fd| {
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(fds, vec![0, 1, 2], "open fds: {links:?}");
    for fd in 1..3 {
        assert_eq!(
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap(),
            fd0
        );
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<(String, String)> = environ
        .split(|b| *b == 0)
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=').unwrap_or((&kv, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect();
    let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let leaked: Vec<&String> = vars
        .iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("MOONKALE") || *k == "CLAUDECODE")
        .collect();
    assert!(leaked.is_empty(), "the program inherited {leaked:?}");
    assert_eq!(get("TERM"), Some("xterm-256color"));
    assert_eq!(get("KEEP_ME_TEST"), Some("kept"));
    assert_eq!(get("EXTRA_TEST"), Some("e"));
    // The service's token never reaches the program.
    let token = std::fs::read_to_string(&w.svc.info.token_file).unwrap_or_default();
    let token = token.trim();
    if !token.is_empty() {
        assert!(
            !vars.iter().any(|(_, v)| v.contains(token)),
            "the service token leaked into the program's environment"
        );
    }
    // A cwd outside the workspace is refused.
    for bad in [json!("/tmp"), json!(".."), json!("../home")] {
        let resp =
            w.c.request(
                "moonkale/terminal/open",
                json!({"argv": ["/bin/true"], "cwd": bad}),
            )
            .await;
        assert!(resp.get("error").is_some(), "cwd {bad} accepted: {resp}");
    }
}

// ---------------------------------------------------------------------------
// Input

/// (9) Bracketed paste: wrapped in 200~/201~ when the program asked for
/// it; an end marker inside the pasted text is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bracketed_paste_is_wrapped_and_end_marker_stripped() {
    let mut w = World::start().await;
    let (id, _) = open(
        &mut w.c,
        json!({"argv": ["/bin/sh", "-c",
              r"stty -icanon -echo; printf '\033[?2004hREADY\n'; exec cat -v"],
               "cols": 120}),
    )
    .await;
    wait_line(&mut w.c, id, "READY").await;
    w.c.call(
        "moonkale/terminal/input",
        json!({"terminal": id, "paste": "abc\u{1b}[201~def|"}),
    )
    .await;
    let s = wait_screen(&mut w.c, id, "the pasted text", |s| {
        rows(s).iter().any(|r| r.contains('|'))
    })
    .await;
    let row = rows(&s).into_iter().find(|r| r.contains('|')).unwrap();
    assert_eq!(
        row, "^[[200~abcdef|^[[201~",
        "the paste as the program got it (cat -v)"
    );
}

/// (9b) Without bracketed-paste mode a paste is sent as is (no markers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paste_without_bracketed_mode_is_plain() {
    let mut w = World::start().await;
    let (id, _) = open(
        &mut w.c,
        json!({"argv": ["/bin/sh", "-c", r"stty -icanon -echo; echo READY; exec cat -v"]}),
    )
    .await;
    wait_line(&mut w.c, id, "READY").await;
    w.c.call(
        "moonkale/terminal/input",
        json!({"terminal": id, "paste": "plain|"}),
    )
    .await;
    let s = wait_screen(&mut w.c, id, "the pasted text", |s| {
        rows(s).iter().any(|r| r.contains('|'))
    })
    .await;
    assert!(has_line(&s, "plain|"), "{}", text(&s));
}

/// (10) Keys: Ctrl+c interrupts `sleep 100`; Up recalls history in bash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_interrupt_and_history() {
    let mut w = World::start().await;
    let (id, info) = open_sh(&mut w.c, 24, 80).await;
    let sh_pid = pid_of(&info);
    wait_prompt(&mut w.c, id).await;
    run(&mut w.c, id, "sleep 100").await;
    assert!(
        poll(STEP, || children(sh_pid).iter().any(|(_, c)| c == "sleep")).await,
        "sleep did not start"
    );
    keys(&mut w.c, id, &["Ctrl+c"]).await;
    assert!(
        poll(STEP, || !children(sh_pid).iter().any(|(_, c)| c == "sleep")).await,
        "Ctrl+c did not interrupt sleep"
    );
    run(&mut w.c, id, "echo after-$((1+2))").await;
    wait_line(&mut w.c, id, "after-3").await;

    // Unknown key names are refused.
    let resp =
        w.c.request(
            "moonkale/terminal/input",
            json!({"terminal": id, "keys": ["Ctrl+NoSuchKey"]}),
        )
        .await;
    assert!(resp.get("error").is_some(), "{resp}");

    if !Path::new("/bin/bash").is_file() {
        eprintln!("no /bin/bash: history part skipped");
        return;
    }
    let (b, _) = open(
        &mut w.c,
        json!({"argv": ["/bin/bash", "--norc", "--noprofile"], "env": {"PS1": "bash$ "}}),
    )
    .await;
    wait_prompt(&mut w.c, b).await;
    run(&mut w.c, b, "echo hist-$((4+5))").await;
    wait_line(&mut w.c, b, "hist-9").await;
    keys(&mut w.c, b, &["Up"]).await;
    wait_screen(&mut w.c, b, "the recalled command", |s| {
        rows(s)
            .iter()
            .filter(|r| r.ends_with("echo hist-$((4+5))"))
            .count()
            == 2
    })
    .await;
    keys(&mut w.c, b, &["Enter"]).await;
    wait_screen(&mut w.c, b, "a second hist-9", |s| {
        count_lines(s, "hist-9") == 2
    })
    .await;
    // Ctrl+Left/Home/End etc. are accepted (bash reads them).
    keys(
        &mut w.c,
        b,
        &["Home", "End", "Ctrl+Left", "Alt+b", "F5", "Escape"],
    )
    .await;
}

// ---------------------------------------------------------------------------
// Links and scrollback

/// (11) `path:line:col` of a workspace file is a link; a path outside the
/// workspace is not; opening a link shows the file in the editor (0-based).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_links_and_open_link() {
    let mut w = World::start().await;
    let file = w.sb.workspace.join("src/a.rs");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "fn a() {}\nfn b() {}\nfn c() {}\n").unwrap();
    let (id, _) = open_sh(&mut w.c, 24, 80).await;
    wait_prompt(&mut w.c, id).await;
    run(
        &mut w.c,
        id,
        "echo src/a.rs:3:2; echo /etc/passwd:1; echo src/none.rs:1",
    )
    .await;
    wait_line(&mut w.c, id, "src/none.rs:1").await;
    let links =
        w.c.call("moonkale/terminal/links", json!({"terminal": id}))
            .await;
    let all = links["links"].as_array().expect("links");
    let out_row = rows(&screen(&mut w.c, id).await)
        .iter()
        .position(|r| r == "src/a.rs:3:2")
        .expect("the output row");
    let link = all
        .iter()
        .find(|l| l["row"] == out_row)
        .unwrap_or_else(|| panic!("no link on row {out_row}: {links}"));
    assert_eq!(link["path"], json!(file), "{link}");
    assert_eq!(
        (&link["line"], &link["column"]),
        (&json!(3), &json!(2)),
        "{link}"
    );
    assert_eq!(
        (&link["start"], &link["end"]),
        (&json!(0), &json!(12)),
        "{link}"
    );
    for l in all {
        assert_eq!(l["path"], json!(file), "only a.rs is a link: {links}");
    }

    w.c.call(
        "moonkale/terminal/openLink",
        json!({"path": link["path"], "line": 3, "column": 2}),
    )
    .await;
    let show = w.c.server_request("window/showDocument", STEP).await;
    let p = &show["params"];
    assert_eq!(
        p["uri"],
        json!(format!("file://{}", file.display())),
        "{show}"
    );
    assert_eq!(
        p["selection"]["start"],
        json!({"line": 2, "character": 1}),
        "{show}"
    );
    w.c.respond(&show["id"], json!({"success": true})).await;
    let resp =
        w.c.request(
            "moonkale/terminal/openLink",
            json!({"path": "/etc/passwd", "line": 1}),
        )
        .await;
    assert!(resp.get("error").is_some(), "{resp}");
}

/// (12) 200 lines through a 10-row terminal: the earlier ones are in the
/// scrollback, oldest first, `offset` pages further up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrollback_keeps_earlier_lines() {
    let mut w = World::start().await;
    let (id, _) = open_sh(&mut w.c, 10, 80).await;
    wait_prompt(&mut w.c, id).await;
    run(
        &mut w.c,
        id,
        "i=1; while [ $i -le 200 ]; do echo row-$i; i=$((i+1)); done",
    )
    .await;
    let s = wait_line(&mut w.c, id, "row-200").await;
    assert!(!has_line(&s, "row-100"));
    let page =
        w.c.call(
            "moonkale/terminal/scrollback",
            json!({"terminal": id, "count": 1000}),
        )
        .await;
    let back = rows(&page);
    let pos = |l: &str| back.iter().position(|r| r == l);
    let (p1, p100, p190) = (pos("row-1"), pos("row-100"), pos("row-190"));
    assert!(
        p1.is_some() && p100.is_some() && p190.is_some(),
        "scrollback lacks rows: {back:?}"
    );
    assert!(p1 < p100 && p100 < p190, "not oldest first: {back:?}");
    // The last one is just above the screen: index 1.
    let lines = page["lines"].as_array().unwrap();
    assert_eq!(
        lines.last().unwrap()["index"],
        json!(1),
        "{}",
        short(&page.to_string(), 500)
    );
    // A page ending 50 lines above the top, 5 long.
    let page2 =
        w.c.call(
            "moonkale/terminal/scrollback",
            json!({"terminal": id, "offset": 50, "count": 5}),
        )
        .await;
    let back2 = rows(&page2);
    assert_eq!(back2.len(), 5, "{page2}");
    let last = page2["lines"][4]["index"].as_u64().unwrap();
    assert_eq!(last, 51, "{page2}");
    // Row `index` n of the first page is row `index` n of this one.
    let by_index = |p: &Value, i: u64| {
        p["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["index"] == i)
            .map(row_text)
    };
    assert_eq!(by_index(&page2, 51), by_index(&page, 51));
    assert_eq!(by_index(&page2, 55), by_index(&page, 55));
}

// ---------------------------------------------------------------------------
// 13, 14: Claude Code

/// The Claude Code clients in `moonkale/status`.
async fn claude_clients(c: &mut Client) -> Vec<Value> {
    let st = c.call("moonkale/status", Value::Null).await;
    st["claudeClients"].as_array().cloned().unwrap_or_default()
}

fn debug_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(40)..].join("\n")
}

/// (13) "Start Claude Code here" with the real CLI: the editor runs
/// `moonkale.startClaude`; the CLI in the service's terminal connects to the
/// service (status shows it with its pid), shows its prompt, and a prompt
/// typed into the terminal gets the fake model's reply on its screen; the
/// editor was told about the permission mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_claude_here_with_the_real_cli() {
    let sb = Sandbox::new();
    let fake =
        FakeApi::start(Script::new().on_prompt("say the word", Reply::text("TERMINAL_REPLY_OK")))
            .await;
    let (config, env) = claude_env(&sb, &fake);
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let svc = sb.start_service_with_env(&[], &env_ref).await;
    let mut c = Client::connect(
        &svc,
        "term-editor",
        plain_caps(),
        Diag {
            service_log: sb.root.join("service.log"),
            fake: Some(fake.log_handle()),
        },
    )
    .await;
    let debug = config.debug_file.clone().unwrap();
    let info = c
        .call(
            "workspace/executeCommand",
            json!({"command": "moonkale.startClaude",
                   "arguments": [["--debug-file", debug.display().to_string()]]}),
        )
        .await;
    let id = info["terminal"]
        .as_u64()
        .unwrap_or_else(|| panic!("startClaude answered {info}"));
    let pid = pid_of(&info);
    let argv: Vec<&str> = info["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        argv.windows(2)
            .any(|w| w == ["--permission-mode", "default"]),
        "{info}"
    );
    let msg = c
        .take("window/showMessage about the permission mode", STEP, |m| {
            m["method"] == "window/showMessage"
                && m["params"]["message"]
                    .as_str()
                    .is_some_and(|s| s.contains("permission mode"))
        })
        .await;
    eprintln!("showMessage: {}", msg["params"]["message"]);

    let ready = |s: &Value| {
        let t = text(s);
        t.contains("? for shortcuts") && t.contains('❯')
    };
    let s = wait_screen_for(
        &mut c,
        id,
        "the CLI's prompt",
        Duration::from_secs(20),
        ready,
    )
    .await;
    let _ = s;
    // Connected to the service, with its own pid.
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let clients = claude_clients(&mut c).await;
        if clients.iter().any(|cl| cl["pid"] == pid) {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            let s = screen(&mut c, id).await;
            panic!(
                "no Claude Code client with pid {pid} in status: {clients:?}\n--- screen ---\n{}\n\
                 --- CLI debug log ---\n{}\n{}",
                text(&s),
                debug_tail(&debug),
                c.diag.context()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The environment it got: the port, the switches, none of ours.
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap())
        .into_owned();
    let port = svc.info.ide_port.unwrap();
    for want in [
        format!("CLAUDE_CODE_SSE_PORT={port}"),
        "ENABLE_IDE_INTEGRATION=true".into(),
        "TERM=xterm-256color".into(),
    ] {
        assert!(environ.split('\0').any(|kv| kv == want), "no {want}");
    }
    assert!(!environ.split('\0').any(|kv| kv.starts_with("MOONKALE")));

    input_text(&mut c, id, "say the word").await;
    wait_screen(&mut c, id, "the typed prompt", |s| {
        text(s).contains("say the word")
    })
    .await;
    keys(&mut c, id, &["Enter"]).await;
    let s = wait_screen_for(
        &mut c,
        id,
        "the model's reply",
        Duration::from_secs(15),
        |s| text(s).contains("TERMINAL_REPLY_OK"),
    )
    .await;
    eprintln!("--- the service terminal ---\n{}", text(&s).trim_end());
    assert!(
        fake.outside_attempts().is_empty(),
        "the CLI tried to leave: {:?}",
        fake.outside_attempts()
    );
    c.call("moonkale/terminal/close", json!({"terminal": id}))
        .await;
    assert!(
        poll(Duration::from_secs(5), || live_in_session(pid).is_empty()).await,
        "the CLI survived close"
    );
}

/// (14) `moonkale-service claude` in the user's own terminal, in the
/// workspace: it becomes the CLI, connects to the running service, and a
/// prompt gets the fake's reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moonkale_service_claude_in_a_pty() {
    let sb = Sandbox::new();
    let fake = FakeApi::start(
        Script::new().on_prompt("say the word", Reply::text("OWN_TERMINAL_REPLY_OK")),
    )
    .await;
    let (mut config, _) = claude_env(&sb, &fake);
    let svc = sb.start_service(&[]).await;
    let mut ed = client(&sb, &svc, "term-editor").await;
    let debug = config.debug_file.take().unwrap();
    config.bin = Some(bin("moonkale-service"));
    config.args = vec![
        "claude".into(),
        "--".into(),
        "--debug-file".into(),
        debug.display().to_string(),
    ];
    config.env = vec![
        ("XDG_RUNTIME_DIR".into(), sb.runtime.display().to_string()),
        (
            "MOONKALE_SERVICE_BIN".into(),
            bin("moonkale-service").display().to_string(),
        ),
        (
            "MOONKALE_CLAUDE_BIN".into(),
            claude_bin().display().to_string(),
        ),
    ];
    let mut cli = Claude::spawn(config);
    let pid = cli.pid();
    let ready = cli
        .try_wait_screen(Duration::from_secs(20), |s| {
            s.contains("? for shortcuts") && s.contains('❯')
        })
        .await;
    assert!(
        ready.is_some(),
        "no prompt:\n{}\n--- raw ---\n{}\n--- debug ---\n{}\n{}",
        cli.screen(),
        short(&cli.raw_output(), 2000),
        debug_tail(&debug),
        service_log(&sb)
    );
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let clients = claude_clients(&mut ed).await;
        if clients.iter().any(|cl| cl["pid"] == pid) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Claude Code client with pid {pid} in status: {clients:?}\n--- screen ---\n{}\n\
             --- debug ---\n{}\n{}",
            cli.screen(),
            debug_tail(&debug),
            service_log(&sb)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let env = cli.process_env();
    let port = svc.info.ide_port.unwrap().to_string();
    assert!(
        env.iter()
            .any(|(k, v)| k == "CLAUDE_CODE_SSE_PORT" && *v == port),
        "{env:?}"
    );
    assert!(
        cli.raw_output().contains("permission mode"),
        "the launcher did not say which permission mode"
    );
    cli.submit("say the word", STEP).await;
    let screen = cli
        .wait_for_text("OWN_TERMINAL_REPLY_OK", Duration::from_secs(15))
        .await;
    eprintln!("--- the user's terminal ---\n{screen}");
    drop(cli);
}

/// The older CLI generations (2.0.50 and 1.0.60, installed by
/// `scripts/install-test-peers.sh`) started by "Start Claude Code here" also
/// connect at once: they need `CLAUDE_CODE_AUTO_CONNECT_IDE` beside the
/// port (cli-matrix.md), which the launcher sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_claude_here_connects_older_generations() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for version in ["2.0.50", "1.0.60"] {
        let bin = repo.join(format!(".peers/claude-{version}/node_modules/.bin/claude"));
        assert!(
            bin.is_file(),
            "claude {version} is not installed at {}; run scripts/install-test-peers.sh",
            bin.display()
        );
        let sb = Sandbox::new();
        let fake = FakeApi::start(Script::new()).await;
        let (_, mut env) = claude_env(&sb, &fake);
        env.retain(|(k, _)| k != "MOONKALE_CLAUDE_BIN");
        env.push(("MOONKALE_CLAUDE_BIN".into(), bin.display().to_string()));
        let env_ref: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let svc = sb.start_service_with_env(&[], &env_ref).await;
        let mut c = Client::connect(
            &svc,
            "term-editor",
            plain_caps(),
            Diag {
                service_log: sb.root.join("service.log"),
                fake: Some(fake.log_handle()),
            },
        )
        .await;
        let info = c
            .call(
                "workspace/executeCommand",
                json!({"command": "moonkale.startClaude", "arguments": []}),
            )
            .await;
        let id = info["terminal"]
            .as_u64()
            .unwrap_or_else(|| panic!("startClaude answered {info}"));
        let pid = pid_of(&info);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(25);
        loop {
            let clients = claude_clients(&mut c).await;
            if clients.iter().any(|cl| cl["pid"] == pid) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let s = screen(&mut c, id).await;
                panic!(
                    "claude {version} (pid {pid}) did not connect: {clients:?}\n--- screen ---\n{}\n{}",
                    text(&s),
                    c.diag.context()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        c.call("moonkale/terminal/close", json!({"terminal": id}))
            .await;
    }
}
