//! Load runs for `moonkale-bench` (security.md 56, §3): what a flood does to
//! the service, measured from outside (its resident memory and open
//! descriptors from /proc, latencies at the clients).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::remote::{RemoteClient, TOKEN};
use crate::{Sandbox, rss_kib};

/// What [`bad_token_flood`] saw.
pub struct FloodReport {
    pub attempts: usize,
    pub elapsed: Duration,
    /// HTTP status → count.
    pub statuses: BTreeMap<u16, usize>,
    /// Failed connects or reads (no status at all).
    pub errors: usize,
    pub refusal_p99_ms: f64,
    pub refusal_max_ms: f64,
    pub rss_before_kib: u64,
    pub rss_peak_kib: u64,
    pub rss_after_kib: u64,
    pub fds_before: usize,
    pub fds_after_1s: usize,
    /// Connect + upgrade of a client with the right token, during the flood.
    pub legit_ms: Vec<f64>,
    /// The client connected before the flood still answers after it.
    pub long_lived_ok: bool,
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

async fn connect_from(local: IpAddr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(local, 0))?;
    socket.connect(addr).await
}

/// One upgrade attempt with a wrong token from 127.0.0.1: the status and
/// how long the refusal took.
async fn bad_attempt(addr: SocketAddr) -> Option<(u16, Duration)> {
    let start = Instant::now();
    let mut tcp = TcpStream::connect(addr).await.ok()?;
    let head = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer not-the-token-but-long-enough-0123456789\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.ok()?;
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while !got.windows(2).any(|w| w == b"\r\n") {
        let n = tcp.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let status = String::from_utf8_lossy(&got)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((status, start.elapsed()))
}

/// `total` upgrade attempts with a wrong token from `parallel` clients on
/// 127.0.0.1 against `serve --listen`, spread evenly over `over`, while one
/// client with the right token stays connected and another connects every
/// 50 ms, from the flood's own address (as every client of an SSH tunnel
/// does): the throttle slows the flood, never the right token.
pub async fn bad_token_flood(total: usize, parallel: usize, over: Duration) -> FloodReport {
    let sb = Sandbox::new();
    let root = sb.workspace.to_str().expect("UTF-8").to_owned();
    let svc = sb
        .start_service_with_env(
            &["--no-claude-ide", "--listen", "127.0.0.1:0"],
            &[("MOONKALE_ROOT", &root), ("MOONKALE_TOKEN", TOKEN)],
        )
        .await;
    let addr: SocketAddr = svc
        .info
        .remote
        .as_deref()
        .expect("remote address")
        .parse()
        .expect("address");
    let pid = svc.pid();
    let legit_ip: IpAddr = "127.0.0.1".parse().expect("ip");
    let tcp = connect_from(legit_ip, addr).await.expect("legit connect");
    let mut long_lived = RemoteClient::over_stream(Box::new(tcp), &addr.to_string(), TOKEN).await;
    long_lived
        .initialize("bench-long-lived", &sb.workspace)
        .await;
    // Settle, then measure the baseline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before_kib = rss_kib(pid);
    let fds_before = open_fds(pid);

    let start = Instant::now();
    let per_client = total.div_ceil(parallel);
    let flood: Vec<_> = (0..parallel)
        .map(|client| {
            let pace = over / per_client as u32;
            // Clients start spread over one pace, not all at once.
            let offset = pace * client as u32 / parallel as u32;
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(per_client);
                let mut next = tokio::time::Instant::now() + offset;
                for _ in 0..per_client {
                    tokio::time::sleep_until(next).await;
                    next += pace;
                    out.push(bad_attempt(addr).await);
                }
                out
            })
        })
        .collect();
    let mut legit_ms = Vec::new();
    let mut rss_peak_kib = rss_before_kib;
    while !flood.iter().all(|t| t.is_finished()) {
        let t = Instant::now();
        if let Ok(tcp) = connect_from(legit_ip, addr).await {
            let c = RemoteClient::over_stream(Box::new(tcp), &addr.to_string(), TOKEN).await;
            legit_ms.push(t.elapsed().as_secs_f64() * 1e3);
            drop(c);
        }
        rss_peak_kib = rss_peak_kib.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = start.elapsed();
    let mut statuses = BTreeMap::new();
    let mut errors = 0;
    let mut refusals = Vec::new();
    for task in flood {
        for attempt in task.await.expect("flood task") {
            match attempt {
                Some((status, took)) => {
                    *statuses.entry(status).or_insert(0) += 1;
                    refusals.push(took.as_secs_f64() * 1e3);
                }
                None => errors += 1,
            }
        }
    }
    refusals.sort_by(f64::total_cmp);
    let p99 = refusals
        .get(refusals.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or(0.0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fds_after_1s = open_fds(pid);
    let rss_after_kib = rss_kib(pid);
    let long_lived_ok = long_lived
        .request("moonkale/status", serde_json::Value::Null)
        .await
        .get("result")
        .is_some();
    FloodReport {
        attempts: per_client * parallel,
        elapsed,
        statuses,
        errors,
        refusal_p99_ms: p99,
        refusal_max_ms: refusals.last().copied().unwrap_or(0.0),
        rss_before_kib,
        rss_peak_kib,
        rss_after_kib,
        fds_before,
        fds_after_1s,
        legit_ms,
        long_lived_ok,
    }
}

/// What [`selection_storm`] saw.
pub struct StormReport {
    pub sent: usize,
    /// Frames received, over all clients.
    pub received: usize,
    pub latency_ms: Vec<f64>,
    pub rss_before_kib: u64,
    pub rss_peak_kib: u64,
    pub rss_after_kib: u64,
    pub fds_before: usize,
    pub fds_after: usize,
}

/// An editor moving its selection `hz` times a second for `duration`, with
/// `clients` Claude Code clients on the IDE WebSocket (pacing off: every
/// move goes to every client).
pub async fn selection_storm(clients: usize, hz: u32, duration: Duration) -> StormReport {
    use crate::IdeClient;
    let sb = Sandbox::new();
    let svc = sb
        .start_service_with_env(&[], &[("MOONKALE_SELECTION_INTERVAL_MS", "0")])
        .await;
    let pid = svc.pid();
    let (port, lock) = crate::ide_lock(&sb, &svc);
    let token = lock["authToken"].as_str().expect("token").to_owned();
    let mut ed = svc.connect().await;
    ed.initialize("storm-editor", &["utf-16"], serde_json::Value::Null)
        .await;
    let uri = sb.uri("storm.txt");
    let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
    ed.did_open(&uri, 1, &text).await;
    ed.barrier().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let mut c = IdeClient::connect(port, &token).await;
        c.initialize("2025-11-25").await;
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(Some(msg)) =
                    tokio::time::timeout(Duration::from_millis(200), c.try_recv()).await
                else {
                    continue;
                };
                if msg["method"] == "selection_changed" {
                    let line = msg["params"]["selection"]["start"]["line"].as_u64();
                    got.push((Instant::now(), line.unwrap_or(u64::MAX)));
                }
            }
            got
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before_kib = rss_kib(pid);
    let fds_before = open_fds(pid);
    let mut rss_peak_kib = rss_before_kib;
    let mut sends: Vec<(Instant, u64)> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / hz);
    let end = Instant::now() + duration;
    let mut i = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        let line = i % 900;
        i += 1;
        let params = serde_json::json!({"textDocument": {"uri": uri},
            "selection": {"start": {"line": line, "character": 0}, "end": {"line": line + 2, "character": 3}}});
        sends.push((Instant::now(), line));
        ed.notify("moonkale/selectionChanged", params).await;
        if i.is_multiple_of(u64::from(hz)) {
            rss_peak_kib = rss_peak_kib.max(rss_kib(pid));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut latency_ms = Vec::new();
    let mut received = 0;
    for t in tasks {
        for (at, line) in t.await.expect("client task") {
            received += 1;
            // The latest send of that line before the frame arrived.
            if let Some((sent_at, _)) = sends.iter().rev().find(|(s, l)| *l == line && *s <= at) {
                latency_ms.push((at - *sent_at).as_secs_f64() * 1e3);
            }
        }
    }
    latency_ms.sort_by(f64::total_cmp);
    tokio::time::sleep(Duration::from_millis(500)).await;
    StormReport {
        sent: sends.len(),
        received,
        latency_ms,
        rss_before_kib,
        rss_peak_kib,
        rss_after_kib: rss_kib(pid),
        fds_before,
        fds_after: open_fds(pid),
    }
}

/// One sample of a soak: when, the service's memory and descriptors, and
/// the hover round trips of the window before it.
pub struct SoakSample {
    pub at: Duration,
    pub rss_kib: u64,
    pub fds: usize,
    pub hovers: usize,
    pub hover_p99_ms: f64,
}

/// `editors` editors on the unix socket, each editing its own document,
/// moving its selection and asking for hovers and code actions at random
/// (about 20 messages a second each) for `duration`; sampled every `every`.
pub async fn editors_soak(editors: usize, duration: Duration, every: Duration) -> Vec<SoakSample> {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let pid = svc.pid();
    let hovers = std::sync::Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for e in 0..editors {
        let mut ed = svc.connect().await;
        ed.initialize(&format!("soak-{e}"), &["utf-16"], serde_json::Value::Null)
            .await;
        let uri = sb.uri(&format!("soak-{e}.txt"));
        let hovers = hovers.clone();
        tasks.push(tokio::spawn(async move {
            let text: String = (0..200).map(|i| format!("line {i} of editor {e}\n")).collect();
            ed.did_open(&uri, 1, &text).await;
            let mut rng = (e as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut version = 1;
            while Instant::now() < end {
                let line = (next() % 150) as u32;
                match next() % 4 {
                    0 => {
                        version += 1;
                        // Insert a word, then take it out again: the
                        // document keeps its size.
                        ed.did_change(&uri, version, [line, 0, line, 0], "word ").await;
                        version += 1;
                        ed.did_change(&uri, version, [line, 0, line, 5], "").await;
                    }
                    1 => {
                        let sel = serde_json::json!({"textDocument": {"uri": uri},
                            "selection": {"start": {"line": line, "character": 0}, "end": {"line": line + 1, "character": 2}}});
                        ed.notify("moonkale/selectionChanged", sel).await;
                    }
                    2 => {
                        let t = Instant::now();
                        ed.request(
                            "textDocument/hover",
                            serde_json::json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": 1}}),
                        )
                        .await;
                        hovers
                            .lock()
                            .expect("hovers")
                            .push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    _ => {
                        ed.request(
                            "textDocument/codeAction",
                            serde_json::json!({"textDocument": {"uri": uri},
                                "range": {"start": {"line": line, "character": 0}, "end": {"line": line, "character": 3}},
                                "context": {"diagnostics": []}}),
                        )
                        .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }
    let start = Instant::now();
    let mut samples = Vec::new();
    while Instant::now() < end {
        tokio::time::sleep(every.min(end.saturating_duration_since(Instant::now()))).await;
        let mut window = std::mem::take(&mut *hovers.lock().expect("hovers"));
        window.sort_by(f64::total_cmp);
        samples.push(SoakSample {
            at: start.elapsed(),
            rss_kib: rss_kib(pid),
            fds: open_fds(pid),
            hovers: window.len(),
            hover_p99_ms: window
                .get(window.len().saturating_sub(1) * 99 / 100)
                .copied()
                .unwrap_or(0.0),
        });
    }
    for t in tasks {
        let _ = t.await;
    }
    samples
}

/// The service's resident memory alone, then with 3 editors holding a
/// 1 000-line document each and 2 Claude Code clients on the IDE WebSocket,
/// once idle.
pub async fn idle_memory() -> (u64, u64) {
    use crate::IdeClient;
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let pid = svc.pid();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let alone = rss_kib(pid);
    let mut editors = Vec::new();
    for e in 0..3 {
        let mut ed = svc.connect().await;
        ed.initialize(&format!("idle-{e}"), &["utf-16"], serde_json::Value::Null)
            .await;
        let text: String = (0..1000)
            .map(|i| format!("line {i} of editor {e}\n"))
            .collect();
        ed.did_open(&sb.uri(&format!("idle-{e}.txt")), 1, &text)
            .await;
        ed.barrier().await;
        editors.push(ed);
    }
    let (port, lock) = crate::ide_lock(&sb, &svc);
    let mut clis = Vec::new();
    for _ in 0..2 {
        let mut c = IdeClient::connect(port, lock["authToken"].as_str().expect("token")).await;
        c.initialize("2025-11-25").await;
        clis.push(c);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    (alone, rss_kib(pid))
}
