//! The first-token section's new sessions: `moonkale/agent/start` with a
//! prompt → the first `moonkale/agent/text`, less the fake API's own time,
//! (c) adopting the service's warm spare `claude` beside (d) a cold start
//! (spare off), in the same run; (c') the floor under (c): a fresh CLI's
//! first turn, driven directly once it has started; and the service's
//! memory with and without a spare, the spare CLI's own printed apart.
//!
//! `first-token-jailed` (issue 29): (c) and (d) again, each beside the same
//! with the workspace's default sandbox set (`sandbox set -- <jail> env
//! HOME=<jail's> claude`): a real jail of its own per setup (network and
//! mount namespaces, `moonkale_tests::jail`), the fake API with the same
//! script on the jail's loopback (the host's is not reachable from it), the
//! CLI's settings in the jail's HOME. The service runs on the host either
//! way; in the jailed rows every session's `claude`, and the warm spare's,
//! starts through the jail's `nsenter`. Each turn checks the session says
//! it is jailed (or not) as its row expects, and each spare too.

use std::time::{Duration, Instant};

use moonkale_tests::jail::Jail;
use moonkale_tests::{RawLsp, Sandbox, fakeapi};
use serde_json::{Value, json};

use super::{
    REPLY, TURN_DEADLINE, TURNS, Turn, agent_turn, claude_home, claude_settings, cli_turn,
    fake_time, fake_time_in, spawn_cli, with_api_time,
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

/// Where a setup's `claude` runs.
#[derive(Clone, Copy)]
pub enum Place<'a> {
    /// On the host, against this fake on the host's loopback.
    Host(&'a fakeapi::FakeApi),
    /// In the workspace's default sandbox, a jail of its own, against a
    /// fake with the same script on the jail's loopback.
    Jailed,
}

/// A setup's jail and the fake inside it.
struct InJail {
    fake: fakeapi::FakeApi,
    jail: Jail,
}

/// Starts a jail for `sb` (one that hides its HOME and runtime directory)
/// and the fake API on its loopback; the jail's failure (not root, no
/// `unshare`) is an error, not a panic.
async fn start_jail(sb: &Sandbox) -> Result<InJail, String> {
    let jail =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Jail::new(sb))).map_err(|e| {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            format!("no jail (it needs root, unshare, nsenter, ip): {why}")
        })?;
    let script = fakeapi::Script::new().default_reply(fakeapi::Reply::text(REPLY));
    let fake = fakeapi::FakeApi::start_in(script, &jail).await;
    Ok(InJail { fake, jail })
}

/// Runs `TURNS` new sessions (after a warm-up one) through a service with
/// the warm spare on (`warm`) or off, their `claude` at `place`.
pub async fn new_session_turns(
    claude: &std::path::Path,
    place: Place<'_>,
    warm: bool,
) -> Result<NewSessions, String> {
    let sb = Sandbox::new();
    let in_jail = match place {
        Place::Host(_) => None,
        Place::Jailed => Some(start_jail(&sb).await?),
    };
    let fake = match (place, &in_jail) {
        (Place::Host(fake), _) => fake,
        (Place::Jailed, Some(j)) => &j.fake,
        (Place::Jailed, None) => unreachable!("a jailed setup has its jail"),
    };
    // The host HOME's settings: the unjailed CLI's; in a jailed setup what
    // the service's login check reads before it starts a spare (the jail
    // hides this HOME: its CLI reads the jail's, written below).
    claude_home(&sb, fake.port);
    // Trusted: a cold start is the CLI's start alone (an untrusted one
    // also asks `claude --version` first).
    sb.trust_workspace();
    let bin = claude.display().to_string();
    if let Some(j) = &in_jail {
        claude_settings(j.jail.home(), fake.port);
        let ws = sb.workspace.display().to_string();
        let out = sb
            .command("moonkale-service")
            .args(["sandbox", "set", "--workspace", &ws, "--"])
            .args(j.jail.enter())
            .arg("/usr/bin/env")
            .arg(format!("HOME={}", j.jail.home().display()))
            .arg(&bin)
            .output()
            .await
            .map_err(|e| format!("sandbox set: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "sandbox set: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let jailed = in_jail.is_some();
    let jail = in_jail.as_ref().map(|j| &j.jail);
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
        spare_jailed(&mut ed, jailed).await?;
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
        let mut session = String::new();
        let turn = async {
            let started = ed
                .request(
                    "moonkale/agent/start",
                    json!({"prompt": prompt, "permissionMode": "plan"}),
                )
                .await;
            session = started["result"]["session"]
                .as_str()
                .ok_or_else(|| format!("moonkale/agent/start: {started}"))?
                .to_owned();
            agent_turn(&mut ed, &session, start).await
        };
        let (total, to_api) = with_api_time(fake, start, turn).await?;
        session_jailed(&mut ed, &session, jailed).await?;
        if i > 0 {
            turns.push(Turn {
                total,
                to_api,
                fake: fake_time_in(fake, jail).await?,
            });
        }
        if warm {
            spare_pid = Some(next_spare(&mut ed, spare_pid).await?);
            spare_jailed(&mut ed, jailed).await?;
        }
    }
    spare_rss.sort_unstable();
    drop(ed);
    drop(service);
    drop(in_jail);
    Ok(NewSessions {
        turns,
        service_rss,
        spare_rss: spare_rss.get(spare_rss.len() / 2).copied(),
    })
}

/// Fails unless `session` says (`moonkale/agent/list`) it runs jailed as
/// `jailed` expects.
async fn session_jailed(ed: &mut RawLsp, session: &str, jailed: bool) -> Result<(), String> {
    let list = ed.request("moonkale/agent/list", json!({})).await;
    let said = list["result"]["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["session"] == session))
        .map(|s| s["jailed"] == true);
    match said {
        Some(said) if said == jailed => Ok(()),
        _ => Err(format!(
            "session {session} should run {}: {list}",
            if jailed { "jailed" } else { "unjailed" }
        )),
    }
}

/// Fails unless the spare in `moonkale/status` runs jailed as `jailed`
/// expects.
async fn spare_jailed(ed: &mut RawLsp, jailed: bool) -> Result<(), String> {
    let status = ed.request("moonkale/status", Value::Null).await;
    let spare = &status["result"]["agentSpare"];
    if (spare["jailed"] == true) == jailed {
        Ok(())
    } else {
        Err(format!(
            "the spare should run {}: {spare}",
            if jailed { "jailed" } else { "unjailed" }
        ))
    }
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

/// The memory line of a warm setup `w` beside its cold twin `c`.
fn rss_line(w: &NewSessions, c: &NewSessions) -> String {
    format!(
        "service RSS, an editor attached: {} with the spare, {} without; the spare claude's own RSS: {}",
        mib(w.service_rss),
        mib(c.service_rss),
        w.spare_rss.map_or("unknown".to_owned(), mib)
    )
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
    let warm = new_session_turns(claude, Place::Host(fake), true).await;
    let fresh = fresh_cli_first_turns(claude, fake).await;
    let cold = new_session_turns(claude, Place::Host(fake), false).await;
    let mut memory = format!(
        "new sessions: agent/start with a prompt -> first agent/text, trusted workspace; load before (c): {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    if let (Ok(w), Ok(c)) = (&warm, &cold) {
        memory.push_str(&format!("\n{}", rss_line(w, c)));
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

/// `first-token-jailed`: (c) and (d) unjailed, each followed by its jailed
/// twin (interleaved, so that a change in the machine's load falls on
/// both), and the memory lines printed under them.
pub async fn jailed_setups(
    claude: &std::path::Path,
    fake: &fakeapi::FakeApi,
) -> (Vec<(&'static str, Result<Vec<Turn>, String>)>, String) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let warm = new_session_turns(claude, Place::Host(fake), true).await;
    let warm_jailed = new_session_turns(claude, Place::Jailed, true).await;
    let cold = new_session_turns(claude, Place::Host(fake), false).await;
    let cold_jailed = new_session_turns(claude, Place::Jailed, false).await;
    let mut memory = format!(
        "new sessions: agent/start with a prompt -> first agent/text, trusted workspace, spare settled {SETTLE:?}; \
         jailed = the workspace's default sandbox is a jail (net + mount namespaces) entered with nsenter, \
         its fake on the jail's loopback; load before: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    for (label, w, c) in [
        ("unjailed", &warm, &cold),
        ("jailed", &warm_jailed, &cold_jailed),
    ] {
        if let (Ok(w), Ok(c)) = (w, c) {
            memory.push_str(&format!("\n{label}: {}", rss_line(w, c)));
        }
    }
    let rows = vec![
        ("(c) new session, warm spare", warm.map(|w| w.turns)),
        (
            "(cj) new session, warm spare, jailed",
            warm_jailed.map(|w| w.turns),
        ),
        ("(d) new session, cold (spare off)", cold.map(|c| c.turns)),
        (
            "(dj) new session, cold, jailed",
            cold_jailed.map(|c| c.turns),
        ),
    ];
    (rows, memory)
}
