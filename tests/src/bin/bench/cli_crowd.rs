//! `moonkale-bench cli-crowd`: where a crowd of new sessions spends its
//! time, without either adapter. Ten `claude` CLIs (`MOONKALE_BENCH_CLIS`)
//! are started at once against the fake API, driven directly from here:
//! with the argv, environment and in-process MCP server the service gives
//! its sessions ("ours"), or with what claude-agent-acp 0.23.1 gives its
//! own (its argv as read from /proc in an `acp` run, no MCP server: "the
//! anchor's"); the prompt written at once with `initialize` (as the
//! service does: a session's CLI starts at its first prompt) or only once
//! the CLI has answered `initialize` (as the anchor does: `session/new`
//! waits for its CLI); and ours without our MCP server, with the
//! variables the `acp` section gives the anchor's CLI, or with a service
//! running on the workspace (its IDE lock file where the CLI looks), and
//! the anchor's with our MCP server added. Each crowd: from the
//! spawns, all first text deltas, and the CLIs' CPU seconds at the end of
//! their turns (`MOONKALE_BENCH_CLI_LINGER_MS`: and that long after).
//! The ways (`MOONKALE_BENCH_CLI_WAYS`, by index) rotate from round to
//! round (`MOONKALE_BENCH_CROWDS`, 3).

use std::path::Path;
use std::time::{Duration, Instant};

use moonkale_claude::control;
use moonkale_claude::launch::{Launch, PermissionMode, SessionStart, child_env};
use moonkale_claude::process::{CliProcess, ProcessConfig};
use moonkale_claude::stream::{CliMessage, ControlRequest};
use moonkale_tests::{Sandbox, fakeapi};
use serde_json::{Value, json};

use super::acp::{proc_times, ticks_per_sec};
use super::{REPLY, TURN_DEADLINE, claude_bin, claude_home, pct};

/// What is added to (or taken from) the argv and environment the service
/// gives its sessions' CLIs.
#[derive(Clone, Copy, PartialEq)]
struct Extra {
    name: &'static str,
    /// Our in-process MCP server (`--mcp-config` and `initialize`).
    mcp: bool,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    /// A service runs on the workspace meanwhile (its IDE lock file in
    /// `~/.claude/ide`, as for the CLIs the service starts).
    service: bool,
}

const OURS: Extra = Extra {
    name: "our",
    mcp: true,
    args: &[],
    env: &[],
    service: false,
};

/// The variables the `acp` section gives the anchor's CLI (both CLIs also
/// get them from `~/.claude/settings.json`).
const DISABLE: &[(&str, &str)] = &[
    ("DISABLE_AUTOUPDATER", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
];

#[derive(Clone, Copy, PartialEq)]
enum Flags {
    Ours(Extra),
    /// claude-agent-acp's argv and environment (`true`: with our
    /// in-process MCP server added).
    Anchors(bool),
}

#[derive(Clone, Copy)]
struct Way {
    flags: Flags,
    /// The prompt goes with `initialize`, not after its answer.
    at_once: bool,
}

impl Way {
    fn name(self) -> String {
        format!(
            "{} flags, prompt {}",
            match self.flags {
                Flags::Ours(extra) => extra.name,
                Flags::Anchors(false) => "the anchor's",
                Flags::Anchors(true) => "the anchor's + our MCP server",
            },
            if self.at_once {
                "at once"
            } else {
                "after initialize"
            }
        )
    }
}

/// The ways, by index for `MOONKALE_BENCH_CLI_WAYS`: ours and the anchor's,
/// the prompt at once or after `initialize` (0–3), then ours without our
/// MCP server (4), with the anchor's variables (5), beside a service (6),
/// and the anchor's with our MCP server (7).
fn all_ways() -> Vec<Way> {
    let ours = |extra: Extra| Way {
        flags: Flags::Ours(extra),
        at_once: true,
    };
    vec![
        ours(OURS),
        Way {
            flags: Flags::Anchors(false),
            at_once: false,
        },
        Way {
            flags: Flags::Ours(OURS),
            at_once: false,
        },
        Way {
            flags: Flags::Anchors(false),
            at_once: true,
        },
        ours(Extra {
            name: "our (no MCP server)",
            mcp: false,
            ..OURS
        }),
        ours(Extra {
            name: "our (+ the anchor's DISABLE_* env)",
            env: DISABLE,
            ..OURS
        }),
        ours(Extra {
            name: "our (a service on the workspace)",
            service: true,
            ..OURS
        }),
        Way {
            flags: Flags::Anchors(true),
            at_once: true,
        },
    ]
}

/// One CLI of a crowd: its first text delta (ms from the spawns) and CPU
/// seconds at the end of its turn.
struct One {
    first: f64,
    cpu: f64,
}

pub async fn bench() {
    println!("\n## 10 claude CLIs at once, driven directly: our flags vs the anchor's");
    let Some(claude) = claude_bin() else {
        println!("skipped: the claude CLI is not installed (scripts/install-test-peers.sh)");
        return;
    };
    let fake =
        fakeapi::FakeApi::start(fakeapi::Script::new().default_reply(fakeapi::Reply::text(REPLY)))
            .await;
    let rounds = std::env::var("MOONKALE_BENCH_CROWDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3);
    let ways = all_ways();
    // `MOONKALE_BENCH_CLI_WAYS`: which of the ways, by index (all).
    let ways: Vec<Way> = match std::env::var("MOONKALE_BENCH_CLI_WAYS") {
        Ok(list) => list
            .split(',')
            .filter_map(|i| ways.get(i.trim().parse::<usize>().ok()?).copied())
            .collect(),
        Err(_) => ways,
    };
    let mut results: Vec<Vec<(f64, f64)>> = ways.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for k in 0..ways.len() {
            let w = (round + k) % ways.len();
            let load = super::acp::load();
            match crowd(&claude, &fake, ways[w]).await {
                Ok(ones) => {
                    let all = ones.iter().map(|o| o.first).fold(0.0, f64::max);
                    let cpu: f64 = ones.iter().map(|o| o.cpu).sum();
                    println!(
                        "round {}: {:<40} all first deltas {all:>8.0} ms, CLIs' CPU {cpu:>6.2} s (load {load})",
                        round + 1,
                        ways[w].name()
                    );
                    results[w].push((all, cpu));
                }
                Err(e) => println!("{}: failed: {e}", ways[w].name()),
            }
        }
    }
    println!("medians over {rounds} rounds:");
    for (way, r) in ways.iter().zip(&results) {
        let mut all: Vec<f64> = r.iter().map(|x| x.0).collect();
        let mut cpu: Vec<f64> = r.iter().map(|x| x.1).collect();
        all.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        println!(
            "{:<40} all first deltas {:>8.0} ms, CLIs' CPU {:>6.2} s",
            way.name(),
            pct(&all, 50),
            pct(&cpu, 50)
        );
    }
}

/// `--mcp-config` with our in-process server, as the service passes it.
fn our_mcp_config() -> String {
    json!({"mcpServers": {"moonkale": {"type": "sdk", "name": "moonkale"}}}).to_string()
}

/// The argv and environment of a session's CLI, as `way` starts it.
fn command(claude: &Path, sb: &Sandbox, way: Way) -> ProcessConfig {
    let id = uuid::Uuid::new_v4();
    let parent = std::env::vars_os()
        .filter(|(k, _)| k != "HOME")
        .chain([("HOME".into(), sb.home.clone().into_os_string())]);
    let anchors_env = [
        ("CLAUDE_CODE_ENTRYPOINT", "sdk-ts"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        // As root, its CLI refuses to start without it (the `acp` section
        // gives the anchor the same).
        ("IS_SANDBOX", "1"),
    ];
    let with = |mut env: Vec<(std::ffi::OsString, std::ffi::OsString)>, extra: &[(&str, &str)]| {
        for (k, v) in extra {
            env.retain(|(name, _)| name != k);
            env.push((k.into(), v.into()));
        }
        env
    };
    let (args, env) = match way.flags {
        Flags::Ours(extra) => {
            let launch = Launch {
                session: SessionStart::New(id),
                permission_mode: PermissionMode::Default,
                model: None,
                mcp_config: extra.mcp.then(our_mcp_config),
                setting_sources: None,
            };
            let mut args = launch.argv().expect("argv");
            args.extend(extra.args.iter().map(|a| a.to_string()));
            (args, with(child_env(parent, None), extra.env))
        }
        Flags::Anchors(mcp) => {
            let args = [
                "--output-format",
                "stream-json",
                "--verbose",
                "--input-format",
                "stream-json",
                "--permission-prompt-tool",
                "stdio",
                "--disallowedTools",
                "AskUserQuestion",
                "--tools",
                "default",
                "--setting-sources",
                "user,project,local",
                "--permission-mode",
                "default",
                "--allow-dangerously-skip-permissions",
                "--include-partial-messages",
                "--session-id",
                &id.to_string(),
                "--replay-user-messages",
            ]
            .map(String::from)
            .to_vec();
            let mut args = args;
            if mcp {
                args.push(format!("--mcp-config={}", our_mcp_config()));
            }
            let env = with(child_env(parent, None), &anchors_env);
            (args, env)
        }
    };
    ProcessConfig {
        program: claude.to_owned(),
        args,
        cwd: sb.workspace.clone(),
        env,
        grace: Duration::from_secs(2),
    }
}

async fn crowd(claude: &Path, fake: &fakeapi::FakeApi, way: Way) -> Result<Vec<One>, String> {
    let sb = Sandbox::new();
    claude_home(&sb, fake.port);
    sb.trust_workspace();
    let service = match way.flags {
        Flags::Ours(extra) if extra.service => Some(sb.start_service(&[]).await),
        _ => None,
    };
    let start = Instant::now();
    let clis = std::env::var("MOONKALE_BENCH_CLIS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(10);
    let mut tasks = Vec::new();
    for i in 0..clis {
        let cfg = command(claude, &sb, way);
        let cli = CliProcess::spawn(cfg).map_err(|e| format!("spawn: {e}"))?;
        tasks.push(tokio::spawn(drive(cli, way, start, i)));
    }
    let mut ones = Vec::new();
    let mut clis = Vec::new();
    for t in tasks {
        let (one, cli) = t.await.map_err(|e| e.to_string())??;
        ones.push(one);
        clis.push(cli);
    }
    // What the CLIs go on doing once their turn is over.
    if let Some(linger) = std::env::var("MOONKALE_BENCH_CLI_LINGER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(linger)).await;
        let later: f64 = clis
            .iter()
            .filter_map(|c| proc_times(u32::try_from(c.pid()).ok()?, true))
            .map(|t| t.0 as f64 / ticks_per_sec())
            .sum();
        let at_results: f64 = ones.iter().map(|o| o.cpu).sum();
        println!(
            "  {}: the CLIs' CPU {at_results:.2} s at their results, {later:.2} s {linger} ms later",
            way.name()
        );
    }
    for cli in clis {
        let _ = cli.shutdown().await;
    }
    drop(service);
    Ok(ones)
}

/// Drives one CLI through `initialize` and a prompt to its result.
async fn drive(
    mut cli: CliProcess,
    way: Way,
    start: Instant,
    i: usize,
) -> Result<(One, CliProcess), String> {
    let tools: Vec<Value> = (0..6)
        .map(|t| {
            json!({"name": format!("tool{t}"), "description": "An editor tool of the bench.",
                        "inputSchema": {"type": "object", "properties": {}}})
        })
        .collect();
    let sdk: &[&str] = match way.flags {
        Flags::Ours(extra) if extra.mcp => &["moonkale"],
        Flags::Anchors(true) => &["moonkale"],
        _ => &[],
    };
    cli.send(&control::initialize("init", sdk))
        .await
        .map_err(|e| e.to_string())?;
    let prompt = control::user_message(&format!("crowd prompt {i}"));
    if way.at_once {
        cli.send(&prompt).await.map_err(|e| e.to_string())?;
    }
    let mut first = None;
    loop {
        let message = tokio::time::timeout(TURN_DEADLINE, cli.next())
            .await
            .map_err(|_| "no result in time".to_owned())?;
        let m = match message {
            None => return Err(format!("the CLI ended: {}", cli.stderr_tail())),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(m)) => m,
        };
        if first.is_none() && m.text_delta().is_some() {
            first = Some(start.elapsed().as_secs_f64() * 1e3);
        }
        match m {
            CliMessage::ControlResponse { request_id, .. }
                if request_id == "init" && !way.at_once =>
            {
                cli.send(&prompt).await.map_err(|e| e.to_string())?;
            }
            CliMessage::ControlRequest {
                request_id,
                request: ControlRequest::McpMessage { message, .. },
            } => {
                let reply = message.get("id").map(|id| {
                    let result = match message["method"].as_str() {
                        Some("initialize") => json!({
                            "protocolVersion": message["params"]["protocolVersion"],
                            "capabilities": {"tools": {}},
                            "serverInfo": {"name": "moonkale", "version": "0"}}),
                        Some("tools/list") => json!({"tools": tools}),
                        _ => json!({}),
                    };
                    json!({"jsonrpc": "2.0", "id": id, "result": result})
                });
                cli.send(&control::mcp_response(&request_id, reply))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            CliMessage::ControlRequest { request_id, .. } => {
                cli.send(&control::error(&request_id, "not served by the bench"))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            CliMessage::Result(r) => {
                if r.is_error {
                    return Err(format!("the turn failed: {:?}", r.text));
                }
                let pid = u32::try_from(cli.pid()).unwrap_or(0);
                let cpu = proc_times(pid, true).map_or(0, |t| t.0) as f64 / ticks_per_sec();
                let first = first.ok_or("a turn without partial text")?;
                return Ok((One { first, cpu }, cli));
            }
            _ => {}
        }
    }
}
