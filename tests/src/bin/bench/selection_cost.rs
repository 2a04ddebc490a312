//! `moonkale-bench selection-cost` (issue 25): what the `selection_changed`
//! payload costs the service while a Claude Code client is connected.
//!
//! An editor selects ~1 MB of text (one document, whole), then floods of
//! events that do not move that selection go to the service: forwarded
//! diagnostics of another document from the same (active) editor, edits
//! of another document by an observer connection (an editor's own edit
//! moves its cursor, and another editor's edit makes that editor the
//! active one: both change the payload for good reason), and `status`
//! requests. Each flood is timed without a Claude Code client, then with
//! one: the service's CPU time (utime + stime of its process, all
//! threads) per event, and the wall time until it has handled the last.
//!
//! `MOONKALE_BENCH_BASELINE_SERVICE=<path>` runs a second service binary
//! (e.g. one built from an older commit) the same way in the same run,
//! rounds alternating, so the two are printed side by side.

use std::path::{Path, PathBuf};
use std::time::Instant;

use moonkale_service::lsp::framing::encode_frame;
use moonkale_tests::{IdeClient, RawLsp, Sandbox, Service, ide_lock};
use serde_json::{Value, json};

use super::pct;

/// Events per flood.
const EVENTS: usize = 20_000;
/// Rounds per service binary (alternating); the medians are printed.
const ROUNDS: usize = 3;
/// `status` requests written before their replies are read.
const STATUS_BATCH: usize = 50;
/// Lines of the selected document, 50 bytes each: 1 000 000 bytes, under
/// the payload's 1 MiB cap on selected text.
const SELECTED_LINES: usize = 20_000;

/// The kinds of event flooded, in order.
const FLOODS: [&str; 3] = [
    "moonkale/publishDiagnostics, another document (active editor)",
    "didChange of another document (observer)",
    "moonkale/status requests (observer)",
];

/// One flood's figures.
#[derive(Clone, Copy, Default)]
struct Cost {
    /// The service's CPU time per event, µs.
    cpu_us: f64,
    /// First byte written → the last event handled, ms.
    wall_ms: f64,
}

/// One service's floods, without a client then with one.
struct Figures {
    without: [Cost; 3],
    with: [Cost; 3],
}

pub async fn bench() {
    let mut builds: Vec<(String, PathBuf)> = Vec::new();
    if let Some(baseline) =
        std::env::var_os("MOONKALE_BENCH_BASELINE_SERVICE").filter(|p| !p.is_empty())
    {
        builds.push((
            format!("baseline ({})", Path::new(&baseline).display()),
            baseline.into(),
        ));
    }
    builds.push(("this build".into(), moonkale_tests::bin("moonkale-service")));
    let load_before = super::acp::load();
    let started = Instant::now();
    let mut runs: Vec<Vec<Figures>> = builds.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for (i, (_, program)) in builds.iter().enumerate() {
            runs[i].push(one_service(program).await);
        }
    }
    println!(
        "\n## selection_changed payload cost: {EVENTS} events that do not move a ~1 MB selection \
         ({ROUNDS} rounds, medians); load before {load_before}, after {}",
        super::acp::load()
    );
    println!(
        "{:<64} {:<10} {:>14} {:>10}",
        "flood", "client", "CPU us/event", "wall ms"
    );
    for (f, flood) in FLOODS.iter().enumerate() {
        for ((name, _), figures) in builds.iter().zip(&runs) {
            for (client, pick) in [
                (
                    "none",
                    (|x: &Figures, f: usize| x.without[f]) as fn(&Figures, usize) -> Cost,
                ),
                ("connected", |x: &Figures, f: usize| x.with[f]),
            ] {
                let median = |g: fn(Cost) -> f64| {
                    let mut v: Vec<f64> = figures.iter().map(|x| g(pick(x, f))).collect();
                    v.sort_by(f64::total_cmp);
                    pct(&v, 50)
                };
                let runs: Vec<String> = figures
                    .iter()
                    .map(|x| format!("{:.1}", pick(x, f).cpu_us))
                    .collect();
                println!(
                    "{:<64} {client:<10} {:>14.1} {:>10.0}   {name}; runs {}",
                    flood,
                    median(|c| c.cpu_us),
                    median(|c| c.wall_ms),
                    runs.join(", ")
                );
            }
        }
    }
    println!("(section took {:.0} s)", started.elapsed().as_secs_f64());
}

/// CPU time the process `pid` used so far (all its threads), in µs.
fn cpu_us(pid: i32) -> f64 {
    let (ticks, _) = super::acp::proc_times(pid as u32, false).expect("the service's stat");
    ticks as f64 / super::acp::ticks_per_sec() * 1e6
}

/// The document the editor selects whole: 50-byte lines.
fn selected_text() -> String {
    let text: String = (0..SELECTED_LINES)
        .map(|i| format!("{i:06} one line of the selection-cost bench text.\n"))
        .collect();
    assert_eq!(text.len(), SELECTED_LINES * 50);
    text
}

/// What a flood is sent on and how its end is awaited.
struct Conns {
    service: Service,
    editor: RawLsp,
    observer: RawLsp,
    other: String,
    notes: String,
    /// The observer's next version of `notes`.
    version: i32,
    /// The observer's next request id.
    next_id: u64,
}

/// A fresh service from `program`: the floods without a client, then
/// with one.
async fn one_service(program: &Path) -> Figures {
    let sb = Sandbox::new();
    let service = sb.start_service_of(program, &[], &[]).await;
    let mut editor = service.connect().await;
    editor
        .initialize("bench-selection-cost", &["utf-16"], Value::Null)
        .await;
    let (selected, other, notes) = (
        sb.uri("selected.txt"),
        sb.uri("other.txt"),
        sb.uri("notes.txt"),
    );
    editor.did_open(&selected, 1, &selected_text()).await;
    editor.did_open(&other, 1, "one line\n").await;
    editor
        .notify(
            "moonkale/selectionChanged",
            json!({"textDocument": {"uri": selected}, "selection": {
                "start": {"line": 0, "character": 0},
                "end": {"line": SELECTED_LINES, "character": 0}}}),
        )
        .await;
    editor.barrier().await;
    let mut observer = service.connect().await;
    observer
        .initialize(
            "bench-selection-cost-observer",
            &["utf-16"],
            json!({"moonkaleRole": "observer"}),
        )
        .await;
    observer.did_open(&notes, 1, "notes\n").await;
    observer.wait_for_version(&notes, 1).await;
    let mut c = Conns {
        service,
        editor,
        observer,
        other,
        notes,
        version: 2,
        next_id: 1_000_000,
    };
    let mut without = [Cost::default(); 3];
    for (f, cost) in without.iter_mut().enumerate() {
        *cost = flood(&mut c, f).await;
    }
    let (port, lock) = ide_lock(&sb, &c.service);
    let mut client = IdeClient::connect(port, lock["authToken"].as_str().unwrap()).await;
    client.initialize("2025-11-25").await;
    // The client holds the ~1 MB selection before the floods start.
    loop {
        let n = client.notification("selection_changed").await;
        if n["params"]["text"].as_str().map(str::len) == Some(SELECTED_LINES * 50) {
            break;
        }
    }
    let mut with = [Cost::default(); 3];
    for (f, cost) in with.iter_mut().enumerate() {
        *cost = flood(&mut c, f).await;
    }
    // The selection never moved: nothing was sent to the client meanwhile.
    let quiet = std::time::Duration::from_millis(200);
    if let Ok(Some(Ok(frame))) =
        tokio::time::timeout(quiet, futures_util::StreamExt::next(&mut client.ws)).await
        && frame.is_text()
    {
        println!("note: the Claude Code client got a message during the floods: {frame}");
    }
    Figures { without, with }
}

/// Flood `f` of [`FLOODS`], written at once; returns when the service has
/// handled its last event.
async fn flood(c: &mut Conns, f: usize) -> Cost {
    let mut wire = Vec::new();
    // Every status request has the same length (ids of seven digits).
    let mut frame_len = 0;
    for n in 0..EVENTS {
        let message = match f {
            0 => json!({"jsonrpc": "2.0", "method": "moonkale/publishDiagnostics", "params": {
                "uri": c.other, "source": "bench", "diagnostics": [{
                    "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 3}},
                    "message": format!("problem {n}")}]}}),
            1 => {
                let version = c.version;
                c.version += 1;
                json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                    "textDocument": {"uri": c.notes, "version": version},
                    "contentChanges": [{"range": {"start": {"line": 0, "character": 0},
                        "end": {"line": 0, "character": 0}}, "text": "x"}]}})
            }
            _ => {
                c.next_id += 1;
                json!({"jsonrpc": "2.0", "id": c.next_id, "method": "moonkale/status", "params": null})
            }
        };
        let frame = encode_frame(&serde_json::to_vec(&message).unwrap());
        frame_len = frame.len();
        wire.extend(frame);
    }
    let pid = c.service.pid();
    let cpu_before = cpu_us(pid);
    let start = Instant::now();
    match f {
        0 => {
            c.editor.send_bytes(&wire).await;
            c.editor.barrier().await;
        }
        1 => {
            c.observer.send_bytes(&wire).await;
            let last = c.version - 1;
            c.observer.wait_for_version(&c.notes, last).await;
        }
        _ => {
            // In batches, each read before the next is written: the
            // replies must not fill the socket while requests are written.
            let first = c.next_id + 1 - EVENTS as u64;
            for (b, batch) in wire.chunks(STATUS_BATCH * frame_len).enumerate() {
                c.observer.send_bytes(batch).await;
                let last = first + ((b + 1) * STATUS_BATCH).min(EVENTS) as u64 - 1;
                let reply = c.observer.response(&json!(last)).await;
                assert!(reply.get("error").is_none(), "status failed: {reply}");
                c.observer.notifications.clear();
            }
        }
    }
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let cpu = cpu_us(pid) - cpu_before;
    Cost {
        cpu_us: cpu / EVENTS as f64,
        wall_ms,
    }
}
