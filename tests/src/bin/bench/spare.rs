//! The first-token section's new sessions: `moonkale/agent/start` with a
//! prompt → the first `moonkale/agent/text`, less the fake API's own time,
//! (c) adopting the service's warm spare `claude` beside (d) a cold start
//! (spare off), in the same run; (c') the floor under (c): a fresh CLI's
//! first turn, driven directly once it has started; and the service's
//! memory with and without a spare, the spare CLI's own printed apart.

use std::time::{Duration, Instant};

use moonkale_tests::{RawLsp, Sandbox, fakeapi};
use serde_json::{Value, json};

use super::{
    TURN_DEADLINE, TURNS, Turn, agent_turn, claude_home, cli_turn, fake_time, spawn_cli,
    with_api_time,
};

/// How long a spare is left to finish its start-up before it is used (a
/// user's spare has had minutes): its process is up, its `initialize` and
/// MCP handshake done.
pub const SETTLE: Duration = Duration::from_secs(3);

/// What one setup measured.
pub struct NewSessions {
    pub turns: Vec<Turn>,
    /// The service's RSS with an editor attached, before any session (with
    /// the spare running, for (c)).
    pub service_rss: u64,
    /// The spare CLI's own RSS (c), median over the spares used.
    pub spare_rss: Option<u64>,
}

/// Runs `TURNS` new sessions (after a warm-up one) through a service with
/// the warm spare on (`warm`) or off.
pub async fn new_session_turns(
    claude: &std::path::Path,
    fake: &fakeapi::FakeApi,
    warm: bool,
) -> Result<NewSessions, String> {
    let sb = Sandbox::new();
    claude_home(&sb, fake.port);
    // Trusted: a cold start is the CLI's start alone (an untrusted one
    // also asks `claude --version` first).
    sb.trust_workspace();
    let bin = claude.display().to_string();
    let spare = if warm { "1" } else { "0" };
    let service = sb
        .start_service_with_env(
            &[],
            &[
                ("MOONKALE_CLAUDE_BIN", bin.as_str()),
                ("MOONKALE_WARM_SPARE", spare),
            ],
        )
        .await;
    let mut ed = service.connect().await;
    ed.initialize("bench-new-session", &["utf-16"], Value::Null)
        .await;
    let mut spare_pid = None;
    let mut spare_rss = Vec::new();
    if warm {
        spare_pid = Some(next_spare(&mut ed, None).await?);
    } else {
        tokio::time::sleep(SETTLE).await;
    }
    let service_rss = rss(service.pid() as u32).ok_or("no RSS for the service")?;
    let mut turns = Vec::new();
    for i in 0..=TURNS {
        if let Some(pid) = spare_pid {
            spare_rss.extend(rss(pid));
        }
        let start = Instant::now();
        let prompt = format!("new session {i}");
        let turn = async {
            let started = ed
                .request(
                    "moonkale/agent/start",
                    json!({"prompt": prompt, "permissionMode": "plan"}),
                )
                .await;
            let session = started["result"]["session"]
                .as_str()
                .ok_or_else(|| format!("moonkale/agent/start: {started}"))?
                .to_owned();
            agent_turn(&mut ed, &session, start).await
        };
        let (total, to_api) = with_api_time(fake, start, turn).await?;
        if i > 0 {
            turns.push(Turn {
                total,
                to_api,
                fake: fake_time(fake).await?,
            });
        }
        if warm {
            spare_pid = Some(next_spare(&mut ed, spare_pid).await?);
        }
    }
    spare_rss.sort_unstable();
    drop(ed);
    drop(service);
    Ok(NewSessions {
        turns,
        service_rss,
        spare_rss: spare_rss.get(spare_rss.len() / 2).copied(),
    })
}

/// (c'): for each turn a new CLI, started and left to settle like a spare,
/// then its first prompt (what no host can make faster without running a
/// turn in the CLI before the user's).
pub async fn fresh_cli_first_turns(
    claude: &std::path::Path,
    fake: &fakeapi::FakeApi,
) -> Result<Vec<Turn>, String> {
    let sb = Sandbox::new();
    claude_home(&sb, fake.port);
    let mut turns = Vec::new();
    for i in 0..=TURNS {
        let session = moonkale_claude::launch::SessionStart::New(uuid::Uuid::new_v4());
        let mut cli = spawn_cli(claude, &sb, session).await?;
        tokio::time::sleep(SETTLE).await;
        let start = Instant::now();
        let prompt = format!("fresh cli {i}");
        let (total, to_api) =
            with_api_time(fake, start, cli_turn(&mut cli, &prompt, start)).await?;
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

/// Uses the agent (prepares sessions), waits for a spare other than `old`
/// in `moonkale/status`, then lets it settle; returns its pid.
pub async fn next_spare(ed: &mut RawLsp, old: Option<u32>) -> Result<u32, String> {
    // A spare comes only in a workspace whose agent was used (a
    // front end preparing its sessions is a use).
    ed.request("moonkale/agent/prepare", serde_json::json!({}))
        .await;
    let deadline = Instant::now() + TURN_DEADLINE;
    while Instant::now() < deadline {
        let status = ed.request("moonkale/status", Value::Null).await;
        let pid = status["result"]["agentSpare"]["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|&p| p > 0 && Some(p) != old);
        if let Some(pid) = pid {
            tokio::time::sleep(SETTLE).await;
            return Ok(pid);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("no new warm spare within {TURN_DEADLINE:?}"))
}

/// `VmRSS` of `pid`, in bytes.
fn rss(pid: u32) -> Option<u64> {
    Some(moonkale_tests::try_rss_kib(pid as i32)? * 1024)
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// (c) and (d), for the first-token table, and the memory lines printed
/// under it.
pub async fn setups(
    claude: &std::path::Path,
    fake: &fakeapi::FakeApi,
) -> (Vec<(&'static str, Result<Vec<Turn>, String>)>, String) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let warm = new_session_turns(claude, fake, true).await;
    let fresh = fresh_cli_first_turns(claude, fake).await;
    let cold = new_session_turns(claude, fake, false).await;
    let mut memory = format!(
        "new sessions: agent/start with a prompt -> first agent/text, trusted workspace; load before (c): {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    if let (Ok(w), Ok(c)) = (&warm, &cold) {
        memory.push_str(&format!(
            "\nservice RSS, an editor attached: {} with the spare, {} without; the spare claude's own RSS: {}",
            mib(w.service_rss),
            mib(c.service_rss),
            w.spare_rss.map_or("unknown".to_owned(), mib)
        ));
    }
    let rows = vec![
        (
            "(c) new session, warm spare (agent/start)",
            warm.map(|w| w.turns),
        ),
        ("(c') a fresh CLI's first turn, directly", fresh),
        ("(d) new session, cold (spare off)", cold.map(|c| c.turns)),
    ];
    (rows, memory)
}
