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
/// 127.0.0.1 against `serve --listen`, spread evenly over `over`, while one client with the right
/// token (from 127.0.0.2, so the per-address throttle that stops the flood
/// does not stop it) stays connected and another connects every 50 ms.
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
    let legit_ip: IpAddr = "127.0.0.2".parse().expect("ip");
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
