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
//! 4. openDiff hunk computation on a 20 000-line file with 200 changes,
//!    beside `git diff --no-index` on the same files.
//! 5. stream-json decoding of 100 MB of recorded CLI output, beside
//!    splitting the same bytes into lines alone.
//!
//! Run with `scripts/bench.sh` (release build of every binary first).

use std::process::Stdio;
use std::time::{Duration, Instant};

use moonkale_service::core::{Document, PositionEncoding, TextChange, WirePosition};
use moonkale_service::lsp::framing::encode_frame;
use moonkale_tests::{RawLsp, Sandbox};
use serde_json::{Value, json};

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

    selection_latency().await;
    hunk_computation();
    stream_json_ingest();
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
const SELECTIONS: usize = 500;

/// Editor selection → `selection_changed` at 10 clients, debounce 0 so the
/// figure is what the service adds beyond the debounce.
async fn selection_latency() {
    let sb = Sandbox::new();
    let service = sb
        .start_service_with_env(&[], &[("MOONKALE_SELECTION_DEBOUNCE_MS", "0")])
        .await;
    let (port, lock) = moonkale_tests::ide_lock(&sb, &service);
    let token = lock["authToken"].as_str().unwrap().to_owned();
    let mut ed = service.connect().await;
    ed.initialize("bench-editor", &["utf-16"], Value::Null)
        .await;
    let uri = sb.uri("sel.txt");
    let text: String = (0..1000)
        .map(|i| format!("line {i} of the selection benchmark\n"))
        .collect();
    ed.did_open(&uri, 1, &text).await;
    ed.barrier().await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = moonkale_tests::IdeClient::connect(port, &token).await;
        c.initialize("2025-11-25").await;
        clients.push(c);
    }
    let mut service_us = Vec::new();
    for i in 0..SELECTIONS {
        let line = (i % 900) as u32;
        let params = json!({"textDocument": {"uri": uri}, "selection": {"start": {"line": line, "character": 0}, "end": {"line": line + 3, "character": 4}}});
        let start = Instant::now();
        ed.notify("moonkale/selectionChanged", params).await;
        for c in &mut clients {
            loop {
                let n = c.notification("selection_changed").await;
                if n["params"]["selection"]["start"]["line"] == line {
                    break;
                }
            }
            service_us.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    service_us.sort_by(f64::total_cmp);
    let relay_us = relay_latency().await;
    println!(
        "\n## selection -> selection_changed at {CLIENTS} clients ({SELECTIONS} selections, debounce 0), microseconds"
    );
    println!("{:<28} {:>8} {:>8} {:>8}", "", "p50", "p90", "p99");
    println!(
        "{:<28} {:>8.1} {:>8.1} {:>8.1}",
        "moonkale-service",
        pct(&service_us, 50),
        pct(&service_us, 90),
        pct(&service_us, 99)
    );
    println!(
        "{:<28} {:>8.1} {:>8.1} {:>8.1}",
        "bare TCP -> WebSocket relay",
        pct(&relay_us, 50),
        pct(&relay_us, 90),
        pct(&relay_us, 99)
    );
    println!("goal: p99 <= 1000 us beyond the debounce");
}

/// The baseline: a relay that reads lines from one TCP connection and sends
/// each as a text frame to 10 WebSocket clients, in this process.
async fn relay_latency() -> Vec<f64> {
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
    let mut us = Vec::new();
    for i in 0..SELECTIONS {
        let start = Instant::now();
        input
            .write_all(format!("{{\"selection\":{i}}}\n").as_bytes())
            .await
            .unwrap();
        for c in &mut clients {
            let _ = c.next().await;
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
