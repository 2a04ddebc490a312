//! `moonkale-bench`: prints the foundation's figures next to their baselines.
//!
//! 1. Incremental `didChange` ingest over the unix socket on a 100k-line
//!    document, next to the same edits applied in process (ropey alone, and
//!    through the document store with position conversion).
//! 2. Round-trip latency of a request through `moonkale-shim` next to the
//!    same request sent straight to the socket; the difference is what the
//!    shim adds.
//!
//! 3. Editor selection → `selection_changed` frame latency with 10 Claude Code
//!    clients connected, beside a bare TCP → WebSocket relay.
//!    `selection-cost`: the service's CPU per event (diagnostics, edits of
//!    another document, status) while an editor holds a ~1 MB selection,
//!    with and without a Claude Code client (`bench/selection_cost.rs`).
//! 4. openDiff hunk computation on a 20 000-line file with 200 changes,
//!    beside `git diff --no-index` on the same files.
//! 5. stream-json decoding of 100 MB of recorded CLI output, beside
//!    splitting the same bytes into lines alone.
//! 6. Prompt → first partial token with the real `claude` CLI against the
//!    fake Anthropic API, less the fake's own time: a long-lived CLI (driven
//!    directly, and through the service's `moonkale/agent/send`) beside a
//!    CLI started for each turn; and a new session (`moonkale/agent/start`)
//!    adopting the warm spare beside a cold one, with the memory of each.
//!    `first-token-jailed` (issue 29): the new-session rows again, (c) warm
//!    spare and (d) cold, unjailed beside the same with the workspace's
//!    default sandbox set to a real jail (network and mount namespaces, the
//!    fake API on the jail's own loopback), the warm spare started in it
//!    (`bench/spare.rs`; needs root). Runs with every section, and alone
//!    when named.
//!
//! 7. A change set of 200 files with 10 hunks each: recorded through the
//!    change-set host, then `moonkale/changes/list` and `show`, with the
//!    host's memory, beside `git diff --stat` and `git add -p`'s hunk
//!    listing of the same change.
//!
//! 8. `moonkale-service acp` beside Zed's `claude-agent-acp` 0.23.1 with the
//!    same CLI and fake API: `initialize` → `session/new`, prompt → first
//!    `agent_message_chunk`, memory, and 10 sessions at once (`bench/acp.rs`).
//!    `acp-crowd` runs the 10 sessions alone, in rounds, with other parts
//!    beside (a service from another commit, the spare prepared);
//!    `cli-crowd` starts 10 CLIs directly with our flags and the anchor's
//!    (`bench/cli_crowd.rs`). Both run only when named.
//!
//! 9. `web`: the Moonkale shell in a browser (`moonkale-service web`, issue
//!    28) in headless Chromium: a CLI's question → its card in the page
//!    beside → an LSP editor, the page's first load in bytes (and no other
//!    origin), the web process's memory per open page, a terminal
//!    keystroke → its echo in the page beside → the service's screen model
//!    (`bench/web.rs`). Runs with every section, and alone when named.
//!
//! Run with `scripts/bench.sh` (release build of every binary first).

use std::process::Stdio;
use std::time::{Duration, Instant};

#[path = "bench/acp.rs"]
mod acp;
#[path = "bench/cli_crowd.rs"]
mod cli_crowd;
#[path = "bench/editors.rs"]
mod editors;

use moonkale_service::core::{Document, PositionEncoding, TextChange, WirePosition};
use moonkale_service::lsp::framing::encode_frame;
use moonkale_tests::{RawLsp, Sandbox, fakeapi};
use serde_json::{Value, json};

#[path = "bench/selection_cost.rs"]
mod selection_cost;
#[path = "bench/spare.rs"]
mod spare;
#[path = "bench/web.rs"]
mod web;

const LINES: usize = 100_000;
const EDITS: usize = 200_000;
const ROUND_TRIPS: usize = 5_000;

/// Deterministic pseudo-random edit positions (an LCG; no dependency).
fn edit_positions(n: usize) -> Vec<(u32, u32)> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (((x >> 33) as usize % LINES) as u32, ((x >> 20) % 40) as u32)
        })
        .collect()
}

fn document_text() -> String {
    (0..LINES)
        .map(|i| format!("line {i:06} with some text, é and 😀 here\n"))
        .collect()
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

// One thread on the client side, so that its own task wake-ups do not
// blur the service's latency.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    println!(
        "moonkale-bench on {} cores, {machine}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let sections: Vec<String> = std::env::args().skip(1).collect();
    if sections.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage: moonkale-bench [SECTION...]   (no section: all of them)");
        for (name, what) in SECTIONS {
            println!("  {name:<12} {what}");
        }
        return;
    }
    if let Some(bad) = sections
        .iter()
        .find(|a| !SECTIONS.iter().any(|(name, _)| name == a))
    {
        eprintln!("moonkale-bench: unknown section {bad:?} (see --help)");
        std::process::exit(2);
    }
    // `acp-crowd` is part of `acp`: run only when named.
    let want = |name: &str| {
        (sections.is_empty() && !["acp-crowd", "cli-crowd"].contains(&name))
            || sections.iter().any(|a| a == name)
    };
    if want("lsp") {
        lsp_ingest_and_round_trips().await;
    }
    if want("selection") {
        selection_latency().await;
    }
    if want("selection-cost") {
        selection_cost::bench().await;
    }
    if want("diff") {
        hunk_computation();
    }
    if want("stream-json") {
        stream_json_ingest();
    }
    if want("changes") {
        change_set().await;
    }
    if want("first-token") {
        first_token_latency().await;
    }
    if want("first-token-jailed") {
        first_token_jailed().await;
    }
    if want("bad-tokens") {
        bad_token_flood().await;
    }
    if want("storm") {
        selection_storm().await;
    }
    if want("idle-memory") {
        idle_memory().await;
    }
    if want("soak") {
        editors_soak().await;
    }
    if want("nvim-keys") {
        editors::nvim_keys().await;
    }
    if want("vscode-keys") {
        editors::vscode_keys().await;
    }
    if want("web") {
        web::bench().await;
    }
    if want("acp") {
        acp::bench().await;
    }
    if want("acp-crowd") {
        acp::crowd_only().await;
    }
    if want("cli-crowd") {
        cli_crowd::bench().await;
    }
}

/// The sections `moonkale-bench` can run alone, by name.
const SECTIONS: &[(&str, &str)] = &[
    (
        "lsp",
        "didChange ingest and request round trips (direct, shim)",
    ),
    (
        "selection",
        "selection -> selection_changed at 10 Claude Code clients",
    ),
    (
        "selection-cost",
        "service CPU per event with a ~1 MB selection held, with and without a Claude Code client",
    ),
    ("diff", "openDiff hunk computation beside git diff"),
    (
        "stream-json",
        "stream-json decoding of 100 MB of recorded CLI output",
    ),
    (
        "changes",
        "a change set of 200 files x 10 hunks: record, list, show; beside git",
    ),
    (
        "first-token",
        "prompt -> first partial token with the real claude CLI (fake API)",
    ),
    (
        "first-token-jailed",
        "a new session's first token, warm spare and cold, unjailed beside jailed (needs root)",
    ),
    (
        "bad-tokens",
        "10 000 bad-token handshakes from 200 clients on the remote front door",
    ),
    (
        "storm",
        "selection moves at 100 Hz to 10 Claude Code clients for 60 s",
    ),
    (
        "idle-memory",
        "service memory alone and with 3 editors and 2 Claude Code clients",
    ),
    (
        "soak",
        "50 editors with random traffic for MOONKALE_SOAK_SECS (600) seconds",
    ),
    (
        "nvim-keys",
        "Neovim keystrokes -> selection_changed (beside claudecode.nvim)",
    ),
    ("vscode-keys", "VS Code keystrokes -> selection_changed"),
    (
        "web",
        "the shell in Chromium: question -> card, first load, memory per page, key -> echo",
    ),
    (
        "acp",
        "moonkale-service acp beside claude-agent-acp: new session, first chunk, memory, 10 at once",
    ),
    (
        "acp-crowd",
        "acp's 10 sessions at once alone (not run without a section named)",
    ),
    (
        "cli-crowd",
        "10 claude CLIs at once, driven directly: our flags vs the anchor's (only when named)",
    ),
];

/// Security.md 56: 10 Claude Code clients receiving selection updates at
/// 100 Hz (pacing off) for 60 s.
async fn selection_storm() {
    let r = moonkale_tests::load::selection_storm(10, 100, Duration::from_secs(60)).await;
    println!("\n## Selection storm: 100 Hz to 10 Claude Code clients for 60 s (pacing off)");
    println!(
        "sent {} moves, {} frames received ({:.1} % of 10 x sent)",
        r.sent,
        r.received,
        100.0 * r.received as f64 / (10 * r.sent) as f64
    );
    if !r.latency_ms.is_empty() {
        println!(
            "move -> frame at each client: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            pct(&r.latency_ms, 50),
            pct(&r.latency_ms, 99),
            r.latency_ms.last().copied().unwrap_or(0.0)
        );
    }
    println!(
        "service RSS {} KiB before, {} KiB peak, {} KiB after; descriptors {} before, {} after",
        r.rss_before_kib, r.rss_peak_kib, r.rss_after_kib, r.fds_before, r.fds_after
    );
}

async fn idle_memory() {
    let (alone, attached) = moonkale_tests::load::idle_memory().await;
    println!("\n## Idle memory (resident)");
    println!("service alone                                   {alone:>8} KiB");
    println!("with 3 editors (1 000-line documents) and 2 Claude Code clients {attached:>8} KiB");
}

/// Security.md 56e: 50 editors with random valid traffic; memory,
/// descriptors and hover latency sampled every minute.
async fn editors_soak() {
    let secs: u64 = std::env::var("MOONKALE_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let every = Duration::from_secs((secs / 10).max(1));
    let samples = moonkale_tests::load::editors_soak(50, Duration::from_secs(secs), every).await;
    println!("\n## Soak: 50 editors, random valid traffic (~20 messages/s each) for {secs} s");
    println!(
        "{:>8} {:>10} {:>6} {:>8} {:>12}",
        "at s", "RSS KiB", "fds", "hovers", "hover p99 ms"
    );
    for s in &samples {
        println!(
            "{:>8.0} {:>10} {:>6} {:>8} {:>12.2}",
            s.at.as_secs_f64(),
            s.rss_kib,
            s.fds,
            s.hovers,
            s.hover_p99_ms
        );
    }
}

/// Security.md 56a: 10 000 wrong-token upgrades from 200 parallel clients
/// over 60 s while a client with the right token stays connected and another connects
/// every 50 ms, from the flood's own address (as behind an SSH tunnel).
async fn bad_token_flood() {
    let r = moonkale_tests::load::bad_token_flood(10_000, 200, Duration::from_secs(60)).await;
    println!("\n## Bad-token flood on the remote front door (10 000 attempts, 200 clients, 60 s)");
    println!(
        "attempts: {} in {:.1} s ({:.0}/s); answers: {:?}; no answer: {}",
        r.attempts,
        r.elapsed.as_secs_f64(),
        r.attempts as f64 / r.elapsed.as_secs_f64(),
        r.statuses,
        r.errors
    );
    println!(
        "refusal time: p99 {:.2} ms, max {:.2} ms (goal: slowed refusals within 2 s, by design)",
        r.refusal_p99_ms, r.refusal_max_ms
    );
    println!(
        "service RSS: {} KiB before, {} KiB peak (+{} KiB), {} KiB after (goal: +16 MiB at most)",
        r.rss_before_kib,
        r.rss_peak_kib,
        r.rss_peak_kib.saturating_sub(r.rss_before_kib),
        r.rss_after_kib
    );
    println!(
        "open descriptors: {} before, {} one second after (goal: back to baseline)",
        r.fds_before, r.fds_after_1s
    );
    let mut legit = r.legit_ms.clone();
    legit.sort_by(f64::total_cmp);
    if legit.is_empty() {
        println!("right-token connects during the flood: none completed");
        return;
    }
    println!(
        "right-token connect + upgrade during the flood: {} samples, p50 {:.2} ms, p99 {:.2} ms (goal: p99 < 100 ms); the long-lived client {}",
        legit.len(),
        pct(&legit, 50),
        pct(&legit, 99),
        if r.long_lived_ok {
            "still answers"
        } else {
            "LOST"
        }
    );
}

/// didChange ingest over the socket beside in process, then request round
/// trips straight to the socket and through the shim.
async fn lsp_ingest_and_round_trips() {
    let text = document_text();
    let positions = edit_positions(EDITS);

    // In process: ropey alone.
    let mut rope = ropey::Rope::from_str(&text);
    let start = Instant::now();
    for &(line, col) in &positions {
        let at = rope.line_to_char(line as usize) + col as usize;
        rope.insert(at, "x");
    }
    let ropey_rate = per_sec(EDITS, start.elapsed());

    // In process: the document store (versions, position conversion, clamping).
    let mut doc = Document::open(&text, 0, "text").unwrap();
    let start = Instant::now();
    for (i, &(line, character)) in positions.iter().enumerate() {
        let at = WirePosition { line, character };
        let change = TextChange {
            range: Some((at, at)),
            text: "x".into(),
        };
        doc.apply_changes(i as i32 + 1, &[change], PositionEncoding::Utf16)
            .unwrap();
    }
    let store_rate = per_sec(EDITS, start.elapsed());

    // Over the socket: one didChange notification per edit, then wait until
    // the service has applied the last one.
    let sb = Sandbox::new();
    let service = sb.start_service(&[]).await;
    let mut ed = service.connect().await;
    ed.initialize("bench", &["utf-16"], Value::Null).await;
    let uri = sb.uri("big.txt");
    ed.did_open(&uri, 0, &text).await;
    ed.wait_for_version(&uri, 0).await;
    let mut wire = Vec::with_capacity(EDITS * 230);
    for (i, &(line, character)) in positions.iter().enumerate() {
        let p = json!({"line": line, "character": character});
        let msg = json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": uri, "version": i + 1},
            "contentChanges": [{"range": {"start": p, "end": p}, "text": "x"}]}});
        wire.extend(encode_frame(&serde_json::to_vec(&msg).unwrap()));
    }
    let start = Instant::now();
    ed.send_bytes(&wire).await;
    ed.wait_for_version(&uri, EDITS as i32).await;
    let socket_rate = per_sec(EDITS, start.elapsed());
    assert_eq!(
        ed.document(&uri).await["text"].as_str().map(str::len),
        Some(doc.len_bytes()),
        "same text as in process"
    );

    println!("\n## didChange ingest, {LINES}-line document, {EDITS} single-character edits");
    println!(
        "in process, ropey insert only        {:>12.0} edits/s",
        ropey_rate
    );
    println!(
        "in process, document store (utf-16)  {:>12.0} edits/s",
        store_rate
    );
    println!(
        "over the unix socket (framing+JSON)  {:>12.0} edits/s  = {:.2}x the in-process store, {:.2}x ropey",
        socket_rate,
        socket_rate / store_rate,
        socket_rate / ropey_rate
    );
    println!("goal: >= 100000 edits/s and >= 0.25x in process");

    // Round trips: a fresh direct connection and a shim, measured in
    // alternating rounds so that drift on the machine hits both alike.
    let mut direct_client = service.connect().await;
    direct_client
        .initialize("bench-direct", &["utf-16"], Value::Null)
        .await;
    let mut shim = sb.command("moonkale-shim");
    shim.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = shim.spawn().expect("spawn shim");
    let mut via = RawLsp::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    via.call(
        "initialize",
        json!({"rootUri": format!("file://{}", sb.workspace.display()), "capabilities": {"general": {"positionEncodings": ["utf-16"]}}}),
    )
    .await;
    let (mut direct, mut shimmed) = (Vec::new(), Vec::new());
    round_trips(&mut direct_client, &uri, 500).await;
    round_trips(&mut via, &uri, 500).await;
    for _ in 0..10 {
        direct.extend(round_trips(&mut direct_client, &uri, ROUND_TRIPS / 10).await);
        shimmed.extend(round_trips(&mut via, &uri, ROUND_TRIPS / 10).await);
    }
    direct.sort_by(f64::total_cmp);
    shimmed.sort_by(f64::total_cmp);
    println!("\n## request round trip ({ROUND_TRIPS} textDocument/hover each), microseconds");
    println!("{:<28} {:>8} {:>8} {:>8}", "", "p50", "p90", "p99");
    for (name, d) in [
        ("direct unix socket", &direct),
        ("through moonkale-shim", &shimmed),
    ] {
        println!(
            "{name:<28} {:>8.1} {:>8.1} {:>8.1}",
            pct(d, 50),
            pct(d, 90),
            pct(d, 99)
        );
    }
    println!(
        "added by the shim (p50)      {:>8.1}   goal: <= 50",
        pct(&shimmed, 50) - pct(&direct, 50)
    );
    let _ = child.kill().await;
    drop(service);
}

/// Decodes ~100 MB of recorded `claude` stdout (a real session, repeated)
/// in 64 KiB reads, as the agent host does.
fn stream_json_ingest() {
    let recording = include_bytes!("../../../claude/tests/fixtures/f-stdio.stdout.jsonl");
    let copies = (100 << 20) / recording.len() + 1;
    let input: Vec<u8> = recording.repeat(copies);
    let mb = input.len() as f64 / (1 << 20) as f64;
    let start = Instant::now();
    let mut decoder = moonkale_claude::stream::Decoder::new();
    let mut messages = 0usize;
    for chunk in input.chunks(64 * 1024) {
        messages += decoder.push(chunk).len();
    }
    let decode = mb / start.elapsed().as_secs_f64();
    let start = Instant::now();
    let lines = input
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let split = mb / start.elapsed().as_secs_f64();
    println!("\n## stream-json ingest, {mb:.0} MB of recorded CLI output ({messages} messages)");
    println!("typed decoding (moonkale-claude)     {decode:>8.0} MB/s   goal: >= 300");
    println!("splitting into lines only            {split:>8.0} MB/s   ({lines} lines)");
}

const CLIENTS: usize = 10;
const SELECTIONS: usize = 300;
/// Between two selections in the paced run: longer than the service's
/// pacing interval (50 ms), so each is a move after a quiet period, which
/// goes out at once, as a user's keystroke that ends a movement does.
const SELECTION_SPACING: Duration = Duration::from_millis(60);

/// Editor selection → `selection_changed` at 10 clients beside a bare relay
/// given the same spacing and the same frames: back to back with the
/// pacing off (as the figure was first measured), then at the service's
/// defaults with each selection after a quiet period.
async fn selection_latency() {
    for (spacing, interval, what) in [
        (Duration::ZERO, Some("0"), "back to back, pacing off"),
        (SELECTION_SPACING, None, "60 ms apart, service defaults"),
    ] {
        let service_us = service_selection_latency(spacing, interval).await;
        let relay_us = relay_latency(spacing).await;
        println!(
            "\n## selection -> selection_changed at {CLIENTS} clients ({SELECTIONS} selections, {what}), microseconds"
        );
        println!("{:<28} {:>8} {:>8} {:>8}", "", "p50", "p90", "p99");
        for (name, us) in [
            ("moonkale-service", &service_us),
            ("bare TCP -> WebSocket relay", &relay_us),
        ] {
            println!(
                "{name:<28} {:>8.1} {:>8.1} {:>8.1}",
                pct(us, 50),
                pct(us, 90),
                pct(us, 99)
            );
        }
        println!(
            "service / relay: p50 {:.1}x, p99 {:.1}x (goal: p99 <= 3x)",
            pct(&service_us, 50) / pct(&relay_us, 50),
            pct(&service_us, 99) / pct(&relay_us, 99)
        );
    }
}

/// The selection of bench round `i`: three lines and a bit.
fn bench_selection(uri: &str, i: usize) -> (u32, Value) {
    let line = (i % 900) as u32;
    let params = json!({"textDocument": {"uri": uri}, "selection": {"start": {"line": line, "character": 0}, "end": {"line": line + 3, "character": 4}}});
    (line, params)
}

/// Each selection timed at every one of the 10 clients (read one after
/// the other, each frame parsed as JSON).
async fn service_selection_latency(spacing: Duration, interval: Option<&str>) -> Vec<f64> {
    let sb = Sandbox::new();
    let env: Vec<(&str, &str)> = interval
        .map(|ms| ("MOONKALE_SELECTION_INTERVAL_MS", ms))
        .into_iter()
        .collect();
    let service = sb.start_service_with_env(&[], &env).await;
    let (port, lock) = moonkale_tests::ide_lock(&sb, &service);
    let token = lock["authToken"].as_str().unwrap().to_owned();
    let mut ed = service.connect().await;
    ed.initialize("bench-editor", &["utf-16"], Value::Null)
        .await;
    let uri = sb.uri("sel.txt");
    ed.did_open(&uri, 1, &selection_text()).await;
    ed.barrier().await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = moonkale_tests::IdeClient::connect(port, &token).await;
        c.initialize("2025-11-25").await;
        clients.push(c);
    }
    let mut us = Vec::new();
    for i in 0..SELECTIONS {
        let (line, params) = bench_selection(&uri, i);
        tokio::time::sleep(spacing).await;
        let start = Instant::now();
        ed.notify("moonkale/selectionChanged", params).await;
        for c in &mut clients {
            loop {
                let n = c.notification("selection_changed").await;
                if n["params"]["selection"]["start"]["line"] == line {
                    break;
                }
            }
            us.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    us.sort_by(f64::total_cmp);
    us
}

fn selection_text() -> String {
    (0..1000)
        .map(|i| format!("line {i} of the selection benchmark\n"))
        .collect()
}

/// The baseline: a relay that reads lines from one TCP connection and sends
/// each as a text frame to 10 WebSocket clients, in this process; the lines
/// are `selection_changed` notifications as the service sends them, and
/// the clients parse each frame as JSON, as for the service.
async fn relay_latency(spacing: Duration) -> Vec<f64> {
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::Message;
    let ws_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ws_port = ws_listener.local_addr().unwrap().port();
    let in_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let in_port = in_listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut sinks = Vec::new();
        for _ in 0..CLIENTS {
            let (tcp, _) = ws_listener.accept().await.unwrap();
            let ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            sinks.push(ws.split().0);
        }
        let (input, _) = in_listener.accept().await.unwrap();
        let mut lines = tokio::io::BufReader::new(input).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            for s in &mut sinks {
                s.send(Message::text(line.clone())).await.unwrap();
            }
        }
    });
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{ws_port}"))
            .await
            .unwrap();
        clients.push(ws);
    }
    let mut input = tokio::net::TcpStream::connect(("127.0.0.1", in_port))
        .await
        .unwrap();
    input.set_nodelay(true).unwrap();
    let text = selection_text();
    let mut us = Vec::new();
    for i in 0..SELECTIONS {
        let (line, _) = bench_selection("file:///w/sel.txt", i);
        let selected: String = text
            .lines()
            .skip(line as usize)
            .take(4)
            .collect::<Vec<_>>()
            .join("\n");
        let frame = json!({"jsonrpc": "2.0", "method": "selection_changed", "params": {
            "text": selected, "filePath": "/w/sel.txt", "fileUrl": "file:///w/sel.txt",
            "selection": {"start": {"line": line, "character": 0}, "end": {"line": line + 3, "character": 4}, "isEmpty": false}}});
        let frame = format!("{frame}\n");
        tokio::time::sleep(spacing).await;
        let start = Instant::now();
        input.write_all(frame.as_bytes()).await.unwrap();
        for c in &mut clients {
            let Some(Ok(Message::Text(t))) = c.next().await else {
                panic!("the relay closed");
            };
            let v: Value = serde_json::from_str(&t).unwrap();
            assert_eq!(v["params"]["selection"]["start"]["line"], line);
            us.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    us.sort_by(f64::total_cmp);
    us
}

/// Hunks of a 20 000-line file with 200 changed lines.
fn hunk_computation() {
    const LINES: usize = 20_000;
    const CHANGES: usize = 200;
    let old: String = (0..LINES)
        .map(|i| format!("let value_{i} = compute({i}, \"some text\");\n"))
        .collect();
    let changed: std::collections::BTreeSet<usize> = edit_positions(CHANGES)
        .into_iter()
        .map(|(l, _)| l as usize % LINES)
        .collect();
    let new: String = old
        .split_inclusive('\n')
        .enumerate()
        .map(|(i, l)| {
            if changed.contains(&i) {
                format!("// changed {i}\n{l}")
            } else {
                l.to_owned()
            }
        })
        .collect();
    let runs = 20;
    let start = Instant::now();
    let mut count = 0;
    for _ in 0..runs {
        count = moonkale_service::core::diff::hunks(&old, &new).len();
    }
    let ours = start.elapsed().as_secs_f64() * 1e3 / runs as f64;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("old.rs"), dir.path().join("new.rs"));
    std::fs::write(&a, &old).unwrap();
    std::fs::write(&b, &new).unwrap();
    let start = Instant::now();
    let mut git_ok = true;
    for _ in 0..runs {
        let out = std::process::Command::new("git")
            .args(["diff", "--no-index", "--no-color", "-U0"])
            .arg(&a)
            .arg(&b)
            .output();
        git_ok &= out.is_ok_and(|o| o.status.code() == Some(1));
    }
    let git = start.elapsed().as_secs_f64() * 1e3 / runs as f64;
    println!(
        "\n## openDiff hunks, {LINES}-line file with {} changed lines ({count} hunks), milliseconds per diff",
        changed.len()
    );
    println!("similar (in process)               {ours:>8.2}");
    if git_ok {
        println!(
            "git diff --no-index -U0 (process)  {git:>8.2}   (includes starting git and reading both files)"
        );
    } else {
        println!("git diff --no-index: not available");
    }
}

/// A change set of `FILES` files with `HUNKS` hunks each through the
/// change-set host (its record path, `list`, `show`), its memory, and the
/// same change listed by git.
async fn change_set() {
    use moonkale_service::hub::ports::{self, ChangeRecord, ChangeSource, ChangesCommand};
    use moonkale_service::hub::{EditorId, Event, HubHandle, Responder};
    const FILES: usize = 200;
    const HUNKS: usize = 10;
    const LINES: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let before: String = (0..LINES)
        .map(|i| format!("    let value_{i} = compute({i}, \"some text\");\n"))
        .collect();
    let after: String = before
        .split_inclusive('\n')
        .enumerate()
        .map(|(i, l)| {
            if i % (LINES / HUNKS) == LINES / HUNKS / 2 {
                format!("    // Claude changed this\n{}", l.replace("some", "other"))
            } else {
                l.to_owned()
            }
        })
        .collect();
    let paths: Vec<_> = (0..FILES)
        .map(|i| ws.join(format!("src/file_{i:03}.rs")))
        .collect();
    for p in &paths {
        std::fs::write(p, &before).unwrap();
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&ws)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let git_ok = git(&["init", "-q"])
        && git(&["add", "."])
        && git(&[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-qm",
            "before",
        ]);
    for p in &paths {
        std::fs::write(p, &after).unwrap();
    }
    let changed_bytes = FILES * (before.len() + after.len());

    let rss = || moonkale_tests::rss_kib(std::process::id() as i32);
    let rss_before = rss();
    let (hub, mut events) = HubHandle::detached(ws.clone());
    let (commands, rx) = ports::changes_channel();
    let host = moonkale_service::changes::spawn_in(hub, rx, None, Ok(dir.path().join("state")));
    let _ = events.recv().await;
    let start = Instant::now();
    for p in &paths {
        let record = ChangeRecord {
            source: ChangeSource::Agent {
                session: "bench".into(),
            },
            turn: "t".into(),
            title: Some("the benchmark's turn".into()),
            path: p.clone(),
            before: Some(before.clone()),
            after: Some(after.clone()),
            at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        commands.send(ChangesCommand::Record(record)).await.unwrap();
    }
    let mut pending_hunks = 0;
    while let Some(event) = events.recv().await {
        if let Event::ChangesUpdated { pending, .. } = event
            && pending.len() == FILES
        {
            pending_hunks = pending.iter().map(|f| f.hunks.len()).sum::<usize>();
            break;
        }
    }
    let recorded = start.elapsed();
    let ask = async |method: &str, params: Value| {
        let (reply, answered) = Responder::new();
        let params = moonkale_service::lsp::message::params(&params);
        let request = ports::Request::new(EditorId(1), method, params, reply);
        commands
            .send(ChangesCommand::Request(request))
            .await
            .unwrap();
        let start = Instant::now();
        let answer = answered.await.unwrap().expect("answered");
        (start.elapsed(), answer.to_string().len())
    };
    let (listed, list_bytes) = ask("moonkale/changes/list", json!(null)).await;
    let (shown, show_bytes) = ask("moonkale/changes/show", json!({"set": 1})).await;
    let rss_after = rss();
    commands.send(ChangesCommand::Shutdown).await.unwrap();
    host.await.unwrap();

    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "\n## Change set: {FILES} files x {HUNKS} hunks ({pending_hunks} hunks), {:.1} MiB of texts before and after",
        mib(changed_bytes)
    );
    println!(
        "record {FILES} edits (stored, hub told)  {:>8.1} ms",
        ms(recorded)
    );
    println!(
        "moonkale/changes/list                 {:>8.2} ms   ({list_bytes} bytes)",
        ms(listed)
    );
    println!(
        "moonkale/changes/show                 {:>8.1} ms   ({:.1} MiB)",
        ms(shown),
        mib(show_bytes)
    );
    println!(
        "host memory (RSS growth)              {:>8.1} MiB  ({:.1}x the texts)",
        (rss_after.saturating_sub(rss_before)) as f64 / 1024.0,
        (rss_after.saturating_sub(rss_before)) as f64 * 1024.0 / changed_bytes as f64
    );
    if !git_ok {
        println!("git: not available");
        return;
    }
    let time = |args: &[&str], input: Option<String>| {
        let start = Instant::now();
        let mut child = std::process::Command::new("git")
            .args(args)
            .current_dir(&ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if let Some(input) = input {
            use std::io::Write;
            let _ = stdin.write_all(input.as_bytes());
        }
        drop(stdin);
        let _ = child.wait();
        start.elapsed()
    };
    let stat = time(&["diff", "--stat"], None);
    // `n` to every hunk: git lists each one and stages nothing.
    let add_p = time(&["add", "-p"], Some("n\n".repeat(FILES * HUNKS)));
    println!("git diff --stat (process)             {:>8.1} ms", ms(stat));
    println!(
        "git add -p, every hunk listed         {:>8.1} ms",
        ms(add_p)
    );
}

async fn round_trips(c: &mut RawLsp, uri: &str, n: usize) -> Vec<f64> {
    let params = json!({"textDocument": {"uri": uri}, "position": {"line": 1, "character": 1}});
    let mut micros = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        c.call("textDocument/hover", params.clone()).await;
        micros.push(start.elapsed().as_secs_f64() * 1e6);
    }
    micros
}

fn pct(sorted: &[f64], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Measured turns per setup (after one warm-up turn each).
const TURNS: usize = 10;
/// The longest one CLI start or turn may take before the section gives up.
const TURN_DEADLINE: Duration = Duration::from_secs(30);
/// What the fake answers every prompt with (sent as three text deltas).
const REPLY: &str = "pong: a short reply in three deltas";

/// One measured turn, in milliseconds.
struct Turn {
    /// Prompt written (or, per turn, the process spawned) → first partial
    /// text received.
    total: f64,
    /// Prompt written → the fake has the CLI's request (it runs in this
    /// process; seen once it has answered, within its own time).
    to_api: f64,
    /// The fake's own time for the same request: replayed to it from here,
    /// first byte sent → first `text_delta` received.
    fake: f64,
}

/// Prompt → first partial token, less the fake API's own time, in three
/// setups: (a) a long-lived CLI driven directly with `moonkale_claude`,
/// (a') the same through the service's front door (`moonkale/agent/send` →
/// `moonkale/agent/text`), (b) a CLI started for each turn (`--resume` of
/// the same session, as a host without long-lived processes would do).
async fn first_token_latency() {
    println!(
        "\n## prompt -> first partial token, real claude CLI against the fake API, milliseconds"
    );
    let Some((claude, version, fake)) = claude_and_fake().await else {
        return;
    };
    let started = Instant::now();
    let setups = [
        (
            "(a) long-lived CLI, moonkale_claude",
            long_lived_turns(&claude, &fake).await,
        ),
        (
            "(a') long-lived, via moonkale/agent/send",
            service_turns(&claude, &fake).await,
        ),
        (
            "(b) a CLI per turn (--resume)",
            per_turn_turns(&claude, &fake).await,
        ),
    ];
    let (new_sessions, memory) = spare::setups(&claude, &fake).await;
    println!(
        "claude {version}; {TURNS} turns each after a warm-up; to API = prompt -> the request at the fake; \
         over(head) = total - the fake's own time (the same request replayed to it)"
    );
    print_turn_rows(setups.into_iter().chain(new_sessions));
    println!("{memory}");
    println!("(section took {:.0} s)", started.elapsed().as_secs_f64());
}

/// The first-token table: per setup, total and to-API p50, the fake's own
/// time, the overhead's p50 and p90 (or why the setup failed).
fn print_turn_rows(rows: impl IntoIterator<Item = (&'static str, Result<Vec<Turn>, String>)>) {
    println!(
        "{:<42} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "total p50", "to API", "fake p50", "over p50", "over p90"
    );
    for (name, turns) in rows {
        match turns {
            Ok(turns) => {
                let sorted = |f: &dyn Fn(&Turn) -> f64| {
                    let mut v: Vec<f64> = turns.iter().map(f).collect();
                    v.sort_by(f64::total_cmp);
                    v
                };
                let (total, fake_ms) = (sorted(&|t| t.total), sorted(&|t| t.fake));
                let (to_api, over) = (sorted(&|t| t.to_api), sorted(&|t| t.total - t.fake));
                println!(
                    "{name:<42} {:>9.1} {:>9.1} {:>9.2} {:>9.1} {:>9.1}",
                    pct(&total, 50),
                    pct(&to_api, 50),
                    pct(&fake_ms, 50),
                    pct(&over, 50),
                    pct(&over, 90)
                );
            }
            Err(e) => println!("{name:<42} failed: {e}"),
        }
    }
}

/// Issue 29: a new session's prompt → first partial token, less the
/// fake's own time, with the workspace's default sandbox set (`sandbox
/// set -- <jail> claude`: every hosted session and the warm spare run
/// their `claude` in a real jail, network and mount namespaces, the fake
/// listening on the jail's own loopback) beside the same without one, in
/// one run: (c)/(d) and their jailed rows (`bench/spare.rs`).
async fn first_token_jailed() {
    println!(
        "\n## a new session's prompt -> first partial token, jailed beside unjailed, milliseconds"
    );
    let Some((claude, version, fake)) = claude_and_fake().await else {
        return;
    };
    let started = Instant::now();
    let (rows, memory) = spare::jailed_setups(&claude, &fake).await;
    println!(
        "claude {version}; {TURNS} turns each after a warm-up; to API = prompt -> the request at the fake; \
         over(head) = total - the fake's own time (the same request replayed to it, from where the CLI runs)"
    );
    print_turn_rows(rows);
    println!("{memory}");
    println!("(section took {:.0} s)", started.elapsed().as_secs_f64());
}

/// The first-token sections' parts: the CLI, the version it says, and a
/// fake API answering [`REPLY`]; `None` (said) without a CLI.
async fn claude_and_fake() -> Option<(std::path::PathBuf, String, fakeapi::FakeApi)> {
    let Some(claude) = claude_bin() else {
        println!(
            "skipped: the claude CLI is not installed (scripts/install-test-peers.sh, or MOONKALE_CLAUDE)"
        );
        return None;
    };
    // A private HOME even here: some CLI versions write ~/.claude.json on
    // any start.
    let version = std::process::Command::new(&claude)
        .arg("--version")
        .env("HOME", &Sandbox::new().home)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let fake =
        fakeapi::FakeApi::start(fakeapi::Script::new().default_reply(fakeapi::Reply::text(REPLY)))
            .await;
    Some((claude, version, fake))
}

/// The CLI the tests use: `MOONKALE_CLAUDE`, else the one
/// scripts/install-test-peers.sh installs.
fn claude_bin() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("MOONKALE_CLAUDE").filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    let peer = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .join(".peers/claude/node_modules");
    [
        ".bin/claude",
        "@anthropic-ai/claude-code-linux-x64/claude",
        "@anthropic-ai/claude-code/bin/claude.exe",
    ]
    .into_iter()
    .map(|p| peer.join(p))
    .find(|p| p.is_file())
}

/// A private HOME whose `~/.claude/settings.json` points the CLI at the
/// fake (shared/docs/real-cli.md §2): no variable of ours reaches it.
fn claude_home(sb: &Sandbox, port: u16) {
    claude_settings(&sb.home, port);
}

/// `home/.claude/settings.json` pointing the CLI at the fake on `port` (of
/// the loopback the CLI sees: the host's, or a jail's).
fn claude_settings(home: &std::path::Path, port: u16) {
    let url = format!("http://127.0.0.1:{port}");
    let settings = json!({
        "env": {
            "ANTHROPIC_BASE_URL": url, "HTTPS_PROXY": url, "HTTP_PROXY": url,
            "NO_PROXY": "127.0.0.1,localhost", "CLAUDE_CODE_MAX_RETRIES": "2",
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        },
        "apiKeyHelper": "echo sk-test-dummy",
    });
    let dir = home.join(".claude");
    std::fs::create_dir_all(&dir).expect("create ~/.claude");
    std::fs::write(dir.join("settings.json"), settings.to_string()).expect("write settings");
}

/// Starts the CLI on `sb`'s workspace and HOME, as the service does
/// (scrubbed environment, `initialize` sent at once, no answer awaited).
async fn spawn_cli(
    claude: &std::path::Path,
    sb: &Sandbox,
    session: moonkale_claude::launch::SessionStart,
) -> Result<moonkale_claude::process::CliProcess, String> {
    use moonkale_claude::launch::{Launch, PermissionMode, child_env};
    use moonkale_claude::process::{CliProcess, ProcessConfig};
    let args = Launch {
        session,
        permission_mode: PermissionMode::Plan,
        model: None,
        mcp_config: None,
        setting_sources: None,
    }
    .argv()
    .map_err(|e| e.to_string())?;
    let parent = std::env::vars_os()
        .filter(|(k, _)| k != "HOME")
        .chain([("HOME".into(), sb.home.clone().into_os_string())]);
    let mut cli = CliProcess::spawn(ProcessConfig {
        program: claude.to_owned(),
        args,
        cwd: sb.workspace.clone(),
        env: child_env(parent, None),
        grace: Duration::from_secs(2),
    })
    .map_err(|e| format!("spawn {}: {e}", claude.display()))?;
    cli.send(&moonkale_claude::control::initialize("bench-init", &[]))
        .await
        .map_err(|e| e.to_string())?;
    Ok(cli)
}

/// Sends `prompt` and reads the turn to its `result`; returns when the
/// first partial text came, from `start`.
async fn cli_turn(
    cli: &mut moonkale_claude::process::CliProcess,
    prompt: &str,
    start: Instant,
) -> Result<f64, String> {
    use moonkale_claude::stream::CliMessage;
    cli.send(&moonkale_claude::control::user_message(prompt))
        .await
        .map_err(|e| e.to_string())?;
    let mut first = None;
    loop {
        let message = tokio::time::timeout(TURN_DEADLINE, cli.next())
            .await
            .map_err(|_| format!("no result within {TURN_DEADLINE:?}"))?;
        match message {
            None => return Err(format!("the CLI ended: {}", cli.stderr_tail())),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(m)) => {
                if first.is_none() && m.text_delta().is_some() {
                    first = Some(start.elapsed().as_secs_f64() * 1e3);
                }
                if let CliMessage::Result(r) = m {
                    if r.is_error {
                        return Err(format!("the turn failed: {:?}", r.text));
                    }
                    return first.ok_or_else(|| "a turn without partial text".to_owned());
                }
            }
        }
    }
}

/// Runs `turn` (started at `start`) and notes when the fake sees the next
/// main request; returns (first partial text, request seen), from `start`.
async fn with_api_time(
    fake: &fakeapi::FakeApi,
    start: Instant,
    turn: impl std::future::Future<Output = Result<f64, String>>,
) -> Result<(f64, f64), String> {
    let n = fake.main_requests().len() + 1;
    let seen = async {
        let probe = |log: &[fakeapi::Recorded]| {
            (log.iter().filter(|r| r.kind == fakeapi::Kind::Main).count() >= n).then_some(())
        };
        let wait = fake.wait_for("the turn's request", 2 * TURN_DEADLINE, probe);
        let seen = tokio::time::timeout(TURN_DEADLINE, wait).await;
        seen.ok().map(|()| start.elapsed().as_secs_f64() * 1e3)
    };
    let (total, seen) = tokio::join!(turn, seen);
    Ok((total?, seen.ok_or("the fake never got the request")?))
}

/// The fake's own time for the last main request it got: the same body
/// replayed to it on a fresh connection, first byte sent → first
/// `text_delta` received (its parse, its reply, loopback).
async fn fake_time(fake: &fakeapi::FakeApi) -> Result<f64, String> {
    fake_time_in(fake, None).await
}

/// [`fake_time`] for a fake listening in `jail` (its own loopback): the
/// replay's connection is made from the jail's network namespace, the
/// path the jailed CLI's request took.
async fn fake_time_in(
    fake: &fakeapi::FakeApi,
    jail: Option<&moonkale_tests::jail::Jail>,
) -> Result<f64, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = fake
        .main_requests()
        .last()
        .map(|r| r.body.to_string())
        .ok_or("the fake got no request")?;
    let mut request = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body.as_bytes());
    let mut s = match jail {
        None => tokio::net::TcpStream::connect(("127.0.0.1", fake.port))
            .await
            .map_err(|e| e.to_string())?,
        Some(jail) => connect_in(jail, fake.port)?,
    };
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let start = Instant::now();
    s.write_all(&request).await.map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 16 << 10];
    while !got.windows(10).any(|w| w == b"text_delta") {
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the fake closed before a text_delta".into());
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// (a): one CLI for every turn, prompts as stream-json user lines.
async fn long_lived_turns(
    claude: &std::path::Path,
    fake: &fakeapi::FakeApi,
) -> Result<Vec<Turn>, String> {
    let sb = Sandbox::new();
    claude_home(&sb, fake.port);
    let session = moonkale_claude::launch::SessionStart::New(uuid::Uuid::new_v4());
    let mut cli = spawn_cli(claude, &sb, session).await?;
    cli_turn(&mut cli, "warm up", Instant::now()).await?;
    let mut turns = Vec::new();
    for i in 0..TURNS {
        let start = Instant::now();
        let prompt = format!("prompt {i}");
        let turn = cli_turn(&mut cli, &prompt, start);
        let (total, to_api) = with_api_time(fake, start, turn).await?;
        turns.push(Turn {
            total,
            to_api,
            fake: fake_time(fake).await?,
        });
    }
    let _ = cli.shutdown().await;
    Ok(turns)
}

/// (b): a fresh CLI for every turn, resuming the session, timed from the
/// spawn (what a user waits for); its shutdown after the turn is not timed.
async fn per_turn_turns(
    claude: &std::path::Path,
    fake: &fakeapi::FakeApi,
) -> Result<Vec<Turn>, String> {
    use moonkale_claude::launch::SessionStart;
    let sb = Sandbox::new();
    claude_home(&sb, fake.port);
    let id = uuid::Uuid::new_v4();
    let mut turns = Vec::new();
    for i in 0..=TURNS {
        let session = if i == 0 {
            SessionStart::New(id)
        } else {
            SessionStart::Resume(id)
        };
        let start = Instant::now();
        let mut cli = spawn_cli(claude, &sb, session).await?;
        let prompt = format!("prompt {i}");
        let turn = cli_turn(&mut cli, &prompt, start);
        let (total, to_api) = with_api_time(fake, start, turn).await?;
        let _ = cli.shutdown().await;
        if i > 0 {
            turns.push(Turn {
                total,
                to_api,
                fake: fake_time(fake).await?,
            });
        }
    }
    Ok(turns)
}

/// (a'): the service hosts the CLI; an editor connection starts a session,
/// then sends each prompt with `moonkale/agent/send` and waits for its
/// first `moonkale/agent/text` and for the session to be idle again.
async fn service_turns(
    claude: &std::path::Path,
    fake: &fakeapi::FakeApi,
) -> Result<Vec<Turn>, String> {
    let sb = Sandbox::new();
    claude_home(&sb, fake.port);
    let bin = claude.display().to_string();
    let service = sb
        .start_service_with_env(&[], &[("MOONKALE_CLAUDE_BIN", bin.as_str())])
        .await;
    let mut ed = service.connect().await;
    ed.initialize("bench-agent", &["utf-16"], Value::Null).await;
    let started = ed
        .request(
            "moonkale/agent/start",
            json!({"prompt": "warm up", "permissionMode": "plan"}),
        )
        .await;
    let session = started["result"]["session"]
        .as_str()
        .ok_or_else(|| format!("moonkale/agent/start: {started}"))?
        .to_owned();
    agent_turn(&mut ed, &session, Instant::now()).await?;
    let mut turns = Vec::new();
    for i in 0..TURNS {
        let start = Instant::now();
        ed.send(
            json!({"jsonrpc": "2.0", "id": format!("send-{i}"), "method": "moonkale/agent/send",
                       "params": {"session": session, "prompt": format!("prompt {i}")}}),
        )
        .await;
        let (total, to_api) =
            with_api_time(fake, start, agent_turn(&mut ed, &session, start)).await?;
        turns.push(Turn {
            total,
            to_api,
            fake: fake_time(fake).await?,
        });
    }
    drop(ed);
    drop(service);
    Ok(turns)
}

/// A connection to `127.0.0.1:port` of `jail`'s loopback, made by a
/// short-lived thread that entered the jail's network namespace (the
/// socket stays in it), as [`moonkale_tests::jail::Jail::bind_tcp`] binds.
fn connect_in(
    jail: &moonkale_tests::jail::Jail,
    port: u16,
) -> Result<tokio::net::TcpStream, String> {
    use std::os::fd::AsRawFd;
    let netns = std::fs::File::open(jail.netns_path()).map_err(|e| e.to_string())?;
    let stream = std::thread::spawn(move || {
        // SAFETY: setns has no memory-safety preconditions; it moves only
        // this thread, which ends right after the connect.
        if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        std::net::TcpStream::connect(("127.0.0.1", port))
    })
    .join()
    .map_err(|_| "the connect thread panicked".to_owned())?
    .map_err(|e| format!("connect to the fake in the jail: {e}"))?;
    stream.set_nonblocking(true).map_err(|e| e.to_string())?;
    tokio::net::TcpStream::from_std(stream).map_err(|e| e.to_string())
}

/// Reads the service's messages until `session` is idle again after a
/// turn; returns when its first `moonkale/agent/text` came, from `start`.
async fn agent_turn(ed: &mut RawLsp, session: &str, start: Instant) -> Result<f64, String> {
    let deadline = Instant::now() + TURN_DEADLINE;
    let mut first = None;
    let mut result = false;
    while Instant::now() < deadline {
        let m = ed.recv().await;
        if m.get("error").is_some() {
            return Err(format!("the service answered {m}"));
        }
        if m["params"]["session"] != session {
            continue;
        }
        match m["method"].as_str() {
            Some("moonkale/agent/text") if first.is_none() => {
                first = Some(start.elapsed().as_secs_f64() * 1e3);
            }
            Some("moonkale/agent/event") => {
                let event = &m["params"]["event"];
                if event["kind"] == "cli" && event["data"]["type"] == "result" {
                    result = true;
                }
                let state = &event["data"]["state"];
                if event["kind"] == "state" && state == "failed" {
                    return Err(format!("the turn failed: {event}"));
                }
                if event["kind"] == "state" && state == "idle" && result {
                    return first.ok_or_else(|| "a turn without partial text".to_owned());
                }
            }
            _ => {}
        }
    }
    Err(format!("no idle state within {TURN_DEADLINE:?}"))
}
