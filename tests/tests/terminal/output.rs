//! Hostile output (security cases 49, 50): a flood to a client that does
//! not read, split and invalid UTF-8.

use std::time::Duration;

use moonkale_tests::lsp::plain_caps;
use moonkale_tests::rss_kib;
use serde_json::{Value, json};

use crate::{
    has_line, is_update, open_sh, rows, run, screen, spans, start, text, wait_line, wait_prompt,
    wait_screen, world,
};

/// Hostile 49: 50 MB of output to a subscribed client that does not read its
/// socket: the service's memory stays flat, another client is answered
/// meanwhile (screen, resize), and afterwards input still reaches the shell
/// and the slow client gets answers once it reads again.
/// The CPU time (user + system, in clock ticks) process `pid` has used.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let field = |n: usize| {
        fields
            .get(n)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat(5): 11 and 12 here.
    field(11) + field(12)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_49_flood_to_a_client_that_does_not_read() {
    let mut w = world().editor("watcher", plain_caps()).start().await;
    let svc_pid = w.svc().pid();
    // The opener: a raw client that reads only when the test says so.
    let mut slow = w.svc().connect().await;
    slow.initialize("slow-editor", &["utf-16"], Value::Null)
        .await;
    let info = slow
        .call(
            "moonkale/terminal/open",
            json!({"argv": ["/bin/sh"], "rows": 24, "cols": 80}),
        )
        .await;
    let id = info["terminal"].as_u64().expect("terminal id");
    let c = &mut w.ed;
    wait_prompt(c, id).await;
    let base = rss_kib(svc_pid);

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
    wait_screen(c, id, "the flood on the screen", |s| {
        has_line(s, &"a".repeat(80))
    })
    .await;
    let r = c
        .call(
            "moonkale/terminal/resize",
            json!({"terminal": id, "rows": 30, "cols": 100}),
        )
        .await;
    assert_eq!(r, json!({"rows": 30, "cols": 100}));
    // Answered while the flood still runs: the watcher did not wait for it.
    let s = screen(c, id).await;
    assert!(
        !has_line(&s, "flood-7"),
        "the resize was answered only after the flood:\n{}",
        text(&s)
    );

    let mut peak = base;
    // A debug build renders the 50 MB in about 20 s on two idle cores, and
    // a loaded machine takes what it takes: the wait ends on the flood's
    // end, and fails only when the service stops making progress (no CPU
    // time used for 15 s), not after a total time.
    let stall = Duration::from_secs(15);
    let mut progress = (cpu_ticks(svc_pid), tokio::time::Instant::now());
    loop {
        peak = peak.max(rss_kib(svc_pid));
        let s = screen(c, id).await;
        if has_line(&s, "flood-7") {
            assert_eq!((&s["rows"], &s["cols"]), (&json!(30), &json!(100)));
            break;
        }
        let ticks = cpu_ticks(svc_pid);
        if ticks != progress.0 {
            progress = (ticks, tokio::time::Instant::now());
        }
        assert!(
            progress.1.elapsed() < stall,
            "the 50 MB flood stalled: the service used no CPU for {stall:?} (RSS {base} → {peak} KiB)\n{}\n{}",
            text(&s),
            c.diag.context()
        );
        c.try_take(Duration::from_millis(100), |m| is_update(m, id))
            .await;
    }
    peak = peak.max(rss_kib(svc_pid));
    assert!(
        peak < base + 100 * 1024,
        "the service's RSS grew from {base} KiB to {peak} KiB during the flood"
    );

    // Input still reaches the shell.
    run(c, id, "echo done-$((2+3))").await;
    wait_line(c, id, "done-5").await;

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
    let mut w = start().await;
    let (id, _) = open_sh(&mut w.ed, 24, 80).await;
    wait_prompt(&mut w.ed, id).await;
    run(&mut w.ed, id, r"printf '\303'; sleep 0.2; printf '\251\n'").await;
    let s = wait_screen(&mut w.ed, id, "é", |s| {
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
        &mut w.ed,
        id,
        r"printf '\033[3'; sleep 0.2; printf '1mSPLIT\033[0m\n'",
    )
    .await;
    let s = wait_line(&mut w.ed, id, "SPLIT").await;
    let split = spans(&s)
        .into_iter()
        .find(|sp| sp["text"] == "SPLIT")
        .expect("a SPLIT span");
    assert_eq!(split["fg"], json!("1"), "{split}");

    run(
        &mut w.ed,
        id,
        r"printf 'bad-\377\376\300-x \355\240\200 \370\210\200\200\200\n'; echo ok-$((5+5))",
    )
    .await;
    let s = wait_line(&mut w.ed, id, "ok-10").await;
    let bad = rows(&s)
        .into_iter()
        .find(|r| r.starts_with("bad-"))
        .unwrap_or_else(|| panic!("no bad- row:\n{}", text(&s)));
    assert!(bad.contains("-x"), "{bad:?}");
    // Still working: more input, more output, and valid text after it.
    run(&mut w.ed, id, r"printf 'caf\303\251-%s\n' $((1+1))").await;
    wait_line(&mut w.ed, id, "café-2").await;
}
