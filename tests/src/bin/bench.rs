//! `moonkale-bench`: prints the foundation's figures next to their baselines.
//!
//! 1. Incremental `didChange` ingest over the unix socket on a 100k-line
//!    document, next to the same edits applied in process (ropey alone, and
//!    through the document store with position conversion).
//! 2. Round-trip latency of a request through `moonkale-shim` next to the
//!    same request sent straight to the socket; the difference is what the
//!    shim adds.
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
