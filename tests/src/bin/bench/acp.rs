//! `moonkale-bench acp`: `moonkale-service acp` beside the anchor, Zed's
//! `@zed-industries/claude-agent-acp` 0.23.1, in one run: the same machine,
//! the same fake API (in this process) and the same `claude` CLI (the
//! anchor's through `CLAUDE_CODE_EXECUTABLE`), both driven by the same ACP
//! client here (one JSON line per message on the agent's stdio, each line
//! stamped as it is read).
//!
//! Ours runs as it does under an editor: the workspace's service is up
//! (an editor attached, the warm spare on and settled before each new
//! session), and each run spawns a fresh `moonkale-service acp`. The
//! anchor's adapter is spawned fresh for each run. Runs alternate between
//! the two. Per run, (1) spawn → `initialize` reply → `session/new` reply;
//! (2) the prompt sent on that reply → the first `agent_message_chunk`
//! and the reply, and a second new session prompted once it has settled;
//! (3) resident memory of the adapter, the service and the CLIs, apart.
//! Then (4) 10 sessions created and prompted at once in one adapter
//! process each (ours: one `acp` process, on a fresh service).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use moonkale_tests::{RawLsp, Sandbox, Service, fakeapi};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use super::spare::{mib, next_spare};
use super::{REPLY, TURN_DEADLINE, claude_bin, claude_home, pct};

/// How long the second session of a run is left before its prompt (a
/// user types after the panel opened; the anchor's CLI has started).
const SETTLE: Duration = Duration::from_secs(3);
/// Sessions at once in (4).
const CONCURRENT: usize = 10;

/// An ACP agent process and the lines it wrote, each with when it was read.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<(Instant, Value)>,
    next_id: i64,
    stderr: PathBuf,
}

impl Peer {
    fn spawn(mut cmd: Command, stderr: &Path) -> Result<Peer, String> {
        let log = std::fs::File::create(stderr).map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let at = Instant::now();
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send((at, v));
                }
            }
        });
        Ok(Peer {
            child,
            stdin,
            lines,
            next_id: 0,
            stderr: stderr.to_owned(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Writes `message`; when its write began.
    async fn send(&mut self, message: Value) -> Result<Instant, String> {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let at = Instant::now();
        self.stdin
            .write_all(&line)
            .await
            .map_err(|e| format!("write to the agent: {e}"))?;
        Ok(at)
    }

    async fn request(&mut self, method: &str, params: Value) -> Result<(i64, Instant), String> {
        self.next_id += 1;
        let id = self.next_id;
        let at = self
            .send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        Ok((id, at))
    }

    /// The next message, before `until`; a request of the agent (none is
    /// expected: no fs, no terminal, no tool asks) is refused and skipped.
    async fn next(&mut self, until: Instant, what: &str) -> Result<(Instant, Value), String> {
        loop {
            let deadline = tokio::time::Instant::from_std(until);
            let got = tokio::time::timeout_at(deadline, self.lines.recv()).await;
            let (at, m) = match got {
                Ok(Some(m)) => m,
                Ok(None) => return Err(format!("the agent ended before {what}{}", self.tail())),
                Err(_) => return Err(format!("no {what} in time{}", self.tail())),
            };
            if m.get("method").is_some() && m.get("id").is_some() {
                let refusal = json!({"jsonrpc": "2.0", "id": m["id"],
                    "error": {"code": -32601, "message": "not served by the bench"}});
                self.send(refusal).await?;
                continue;
            }
            return Ok((at, m));
        }
    }

    /// The reply to `id`: when it came, and its result.
    async fn reply(
        &mut self,
        id: i64,
        since: Instant,
        what: &str,
    ) -> Result<(Instant, Value), String> {
        loop {
            let (at, m) = self.next(since + TURN_DEADLINE, what).await?;
            if m["id"] == id && m.get("method").is_none() {
                if let Some(e) = m.get("error") {
                    return Err(format!("{what}: {e}"));
                }
                return Ok((at, m["result"].clone()));
            }
        }
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let start = text.len().saturating_sub(600);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        format!("; its stderr ends: {}", &text[start..])
    }

    /// Ends the agent and everything it started (the anchor does not exit
    /// on stdin EOF; ours does, its sessions live on in the service).
    async fn stop(mut self) {
        let pid = self.pid();
        let tree = descendants(pid);
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_millis(500), self.child.wait())
            .await
            .is_err()
        {
            signal(pid, libc::SIGTERM);
            for &p in &tree {
                signal(p, libc::SIGTERM);
            }
            if tokio::time::timeout(Duration::from_secs(3), self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.kill().await;
            }
        }
        for p in tree {
            let deadline = Instant::now() + Duration::from_secs(3);
            while alive(p) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if alive(p) {
                signal(p, libc::SIGKILL);
            }
        }
    }
}

fn signal(pid: u32, sig: i32) {
    if pid > 0 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, sig) };
    }
}

/// Whether `pid` runs (a zombie does not count).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s[s.rfind(')')? + 2..].starts_with(|c| c != 'Z')))
        .unwrap_or(false)
}

/// Every process on the machine by its parent, from /proc.
fn by_parent() -> HashMap<u32, Vec<u32>> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …; comm may hold spaces and parentheses.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    children
}

/// Every process under `root` (not `root` itself), from /proc.
fn descendants(root: u32) -> Vec<u32> {
    let children = by_parent();
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).into_iter().flatten() {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

/// `VmRSS` of `pid` in bytes (0 once it is gone).
fn rss(pid: u32) -> u64 {
    moonkale_tests::try_rss_kib(pid as i32).unwrap_or(0) * 1024
}

/// The anonymous memory of `pid` (`RssAnon`: its heap and stacks), in
/// bytes: what is its own, beside the binary's and libraries' pages that
/// RSS also counts (shared with any other process of the same binary).
fn anon(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}

/// CPU time used so far by the processes under `root`, in clock ticks.
fn tree_ticks(root: u32) -> u64 {
    descendants(root)
        .into_iter()
        .filter_map(|p| Some(proc_times(p, false)?.0))
        .sum()
}

/// From `/proc/<pid>/stat`: the CPU time of `pid` (utime + stime, and
/// with `reaped` its waited-for children's too) and when it started, in
/// clock ticks (since boot).
pub(super) fn proc_times(pid: u32, reaped: bool) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<u64> = stat[stat.rfind(')')? + 2..]
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // utime, stime, cutime, cstime: fields 14–17 of stat; starttime 22.
    let mut cpu = fields.get(11)? + fields.get(12)?;
    if reaped {
        cpu += fields.get(13)? + fields.get(14)?;
    }
    Some((cpu, *fields.get(19)?))
}

/// The direct children of `pid` that run.
fn children(pid: u32) -> Vec<u32> {
    let mut all = by_parent();
    let mut out = all.remove(&pid).unwrap_or_default();
    out.retain(|&c| alive(c));
    out
}

pub(super) fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// Seconds since boot (`/proc/uptime`), the clock of a process's start.
fn uptime_secs() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The processes under `root` except `skip`'s subtree: how many, and
/// their RSS summed.
fn tree_rss(root: u32, skip: Option<u32>) -> (usize, u64) {
    let skipped: Vec<u32> = skip
        .map(|s| {
            let mut v = descendants(s);
            v.push(s);
            v
        })
        .unwrap_or_default();
    let pids: Vec<u32> = descendants(root)
        .into_iter()
        .filter(|p| !skipped.contains(p) && alive(*p))
        .collect();
    (pids.len(), pids.iter().map(|&p| rss(p)).sum())
}

fn ms(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1e3
}

/// The first `agent_message_chunk` of `session`'s prompt and its reply.
struct TurnTimes {
    sent: Instant,
    first_chunk: Instant,
    reply: Instant,
}

/// Sends a prompt in `session` and reads its turn to the reply.
async fn prompt_turn(peer: &mut Peer, session: &str, text: &str) -> Result<TurnTimes, String> {
    let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
    let (id, sent) = peer.request("session/prompt", prompt).await?;
    let mut first_chunk = None;
    loop {
        let (at, m) = peer
            .next(sent + TURN_DEADLINE, "the prompt's reply")
            .await?;
        if is_chunk(&m, session) {
            first_chunk.get_or_insert(at);
        } else if m["id"] == id && m.get("method").is_none() {
            if let Some(e) = m.get("error") {
                return Err(format!("session/prompt: {e}"));
            }
            if m["result"]["stopReason"] != "end_turn" {
                return Err(format!("session/prompt ended {}", m["result"]));
            }
            let first_chunk = first_chunk.ok_or("a turn without agent_message_chunk")?;
            return Ok(TurnTimes {
                sent,
                first_chunk,
                reply: at,
            });
        }
    }
}

/// Where a prompt's time went: prompt sent → the CLI's request at the
/// fake (seen once the fake, in this process, has taken it), and (ours) →
/// the service's first `moonkale/agent/text` at another connection.
struct Split {
    turn: TurnTimes,
    api: Instant,
    service_text: Option<Instant>,
}

/// [`prompt_turn`], noting when the fake got the CLI's request and when
/// `watcher` (subscribed to `session`) got the service's first text.
async fn split_turn(
    peer: &mut Peer,
    fake: &fakeapi::FakeApi,
    watcher: Option<&mut RawLsp>,
    session: &str,
    text: &str,
) -> Result<Split, String> {
    let n = fake.main_requests().len() + 1;
    let api = async {
        let probe = |log: &[fakeapi::Recorded]| {
            let main = log.iter().filter(|r| r.kind == fakeapi::Kind::Main).count();
            (main >= n).then(Instant::now)
        };
        let wait = fake.wait_for("the turn's request", 2 * TURN_DEADLINE, probe);
        tokio::time::timeout(TURN_DEADLINE, wait).await.ok()
    };
    let service_text = async {
        let watcher = watcher?;
        let text = async {
            loop {
                let m = watcher.recv().await;
                if m["method"] == "moonkale/agent/text" && m["params"]["session"] == session {
                    return Instant::now();
                }
            }
        };
        // Within `recv`'s own deadline, so that a failed turn is an error
        // of `prompt_turn`, not a panic here.
        tokio::time::timeout(moonkale_tests::TIMEOUT / 2, text)
            .await
            .ok()
    };
    let (turn, api, service_text) =
        tokio::join!(prompt_turn(peer, session, text), api, service_text);
    Ok(Split {
        turn: turn?,
        api: api.ok_or("the fake never got the turn's request")?,
        service_text,
    })
}

/// A connection of ours that follows `session` as an editor would.
async fn watcher(service: &Service, session: &str) -> RawLsp {
    let mut w = service.connect().await;
    w.initialize("bench-acp-watcher", &["utf-16"], Value::Null)
        .await;
    w.call("moonkale/agent/subscribe", json!({"session": session}))
        .await;
    w
}

fn is_chunk(m: &Value, session: &str) -> bool {
    m["method"] == "session/update"
        && m["params"]["sessionId"] == session
        && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
}

async fn initialize(peer: &mut Peer) -> Result<Instant, String> {
    let params = json!({"protocolVersion": 1, "clientCapabilities": {
        "fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
        "clientInfo": {"name": "moonkale-bench", "version": "0"}});
    let (id, sent) = peer.request("initialize", params).await?;
    let (at, result) = peer.reply(id, sent, "the initialize reply").await?;
    if result["protocolVersion"] != 1 {
        return Err(format!("initialize: {result}"));
    }
    Ok(at)
}

/// `session/new` in `cwd`: the session, when it was sent and answered.
async fn new_session(peer: &mut Peer, cwd: &Path) -> Result<(String, Instant, Instant), String> {
    let (id, sent) = peer
        .request("session/new", json!({"cwd": cwd, "mcpServers": []}))
        .await?;
    let (at, result) = peer.reply(id, sent, "the session/new reply").await?;
    let session = result["sessionId"]
        .as_str()
        .ok_or_else(|| format!("session/new: {result}"))?;
    Ok((session.to_owned(), sent, at))
}

/// The agent under test, set up once for the sequential runs.
enum Agent {
    /// The workspace's service (warm spare on, an editor attached); an
    /// `acp` process per run.
    Ours {
        sb: Sandbox,
        /// The service binary (`acp` runs the same one).
        program: PathBuf,
        service: Box<Service>,
        editor: Box<RawLsp>,
        spare: Option<u32>,
    },
    /// Zed's adapter with the same CLI, one per run.
    Anchor { sb: Sandbox, fake_url: String },
}

impl Agent {
    async fn ours(claude: &Path, fake: &fakeapi::FakeApi) -> Agent {
        Agent::ours_of(&moonkale_tests::bin("moonkale-service"), claude, fake).await
    }

    /// [`Agent::ours`] with the service (and `acp`) binary at `program`.
    async fn ours_of(program: &Path, claude: &Path, fake: &fakeapi::FakeApi) -> Agent {
        let sb = Sandbox::new();
        claude_home(&sb, fake.port);
        sb.trust_workspace();
        let bin = claude.display().to_string();
        let service = sb
            .start_service_of(
                program,
                &[],
                &[
                    ("MOONKALE_CLAUDE_BIN", bin.as_str()),
                    ("MOONKALE_WARM_SPARE", "1"),
                ],
            )
            .await;
        let mut editor = service.connect().await;
        editor
            .initialize("bench-acp-editor", &["utf-16"], Value::Null)
            .await;
        Agent::Ours {
            sb,
            program: program.to_owned(),
            service: Box::new(service),
            editor: Box::new(editor),
            spare: None,
        }
    }

    fn anchor(fake: &fakeapi::FakeApi) -> Agent {
        let sb = Sandbox::new();
        claude_home(&sb, fake.port);
        Agent::Anchor {
            sb,
            fake_url: fake.url(),
        }
    }

    fn sb(&self) -> &Sandbox {
        match self {
            Agent::Ours { sb, .. } | Agent::Anchor { sb, .. } => sb,
        }
    }

    /// Stops ours' service and waits for it and its CLIs to be gone, so
    /// that their shutdown does not slow what is timed next.
    async fn stop(self) {
        let Agent::Ours { service, .. } = &self else {
            return;
        };
        let mut tree = descendants(service.pid() as u32);
        tree.push(service.pid() as u32);
        drop(self);
        let deadline = Instant::now() + TURN_DEADLINE;
        while tree.iter().any(|&p| alive(p)) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Before a new session is timed: ours waits for a fresh spare and
    /// lets it settle, as `first-token` does.
    async fn ready(&mut self) -> Result<(), String> {
        if let Agent::Ours { editor, spare, .. } = self {
            *spare = Some(next_spare(editor, *spare).await?);
        }
        Ok(())
    }

    /// Ours: an ACP client's sessions are coming (`default` mode, as the
    /// `acp` process asks when it connects): waits for a spare of that
    /// mode and lets it settle.
    async fn ready_for_acp(&mut self) -> Result<(), String> {
        let Agent::Ours { editor, spare, .. } = self else {
            return Ok(());
        };
        editor
            .call(
                "moonkale/agent/prepare",
                json!({"permissionMode": "default"}),
            )
            .await;
        let deadline = Instant::now() + TURN_DEADLINE;
        while Instant::now() < deadline {
            let status = editor.request("moonkale/status", Value::Null).await;
            let now = &status["result"]["agentSpare"];
            let pid = now["pid"].as_u64().and_then(|p| u32::try_from(p).ok());
            if now["permissionMode"] == "default" && pid.is_some_and(|p| p > 0) {
                *spare = pid;
                tokio::time::sleep(super::spare::SETTLE).await;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err("no default-mode spare in time".into())
    }

    fn spawn(&self, claude: &Path, name: &str) -> Result<Peer, String> {
        let sb = self.sb();
        let log = sb.root.join(format!("{name}.stderr"));
        let cmd = match self {
            Agent::Ours { program, .. } => {
                let mut cmd = sb.command_of(program);
                cmd.arg("acp").arg("--workspace").arg(&sb.workspace);
                cmd
            }
            Agent::Anchor { fake_url, .. } => anchor_command(sb, claude, fake_url),
        };
        Peer::spawn(cmd, &log)
    }

    /// The CLIs serving `adapter`'s sessions: how many processes, their
    /// RSS (ours: under the service, less the spare).
    async fn cli_rss(&mut self, adapter: u32) -> (usize, u64) {
        match self {
            Agent::Ours {
                service, editor, ..
            } => {
                let spare = spare_pid(editor).await;
                tree_rss(service.pid() as u32, spare)
            }
            Agent::Anchor { .. } => tree_rss(adapter, None),
        }
    }

    /// The CLI of the session just started by `adapter`: ours, the spare
    /// it adopted (its process and those it started); the anchor's,
    /// everything under the adapter.
    fn session_cli_rss(&self, adapter: u32) -> (usize, u64) {
        match self {
            Agent::Ours { spare, .. } => {
                let cli = spare.unwrap_or(0);
                let (n, bytes) = tree_rss(cli, None);
                (n + usize::from(alive(cli)), bytes + rss(cli))
            }
            Agent::Anchor { .. } => tree_rss(adapter, None),
        }
    }

    /// The CPU seconds the CLI of the session just started by `adapter`
    /// has used so far (with the helpers it waited for): ours, the spare
    /// it adopted; the anchor's, the newest of the adapter's CLIs.
    fn session_cli_cpu(&self, adapter: u32) -> f64 {
        let cli = match self {
            Agent::Ours { spare, .. } => spare.unwrap_or(0),
            Agent::Anchor { .. } => children(adapter)
                .into_iter()
                .max_by_key(|&p| proc_times(p, false).map_or(0, |t| t.1))
                .unwrap_or(0),
        };
        let mut pids = descendants(cli);
        pids.push(cli);
        let ticks: u64 = pids
            .into_iter()
            .filter(|&p| p > 0)
            .filter_map(|p| Some(proc_times(p, true)?.0))
            .sum();
        ticks as f64 / ticks_per_sec()
    }

    fn service_rss(&self) -> Option<u64> {
        match self {
            Agent::Ours { service, .. } => Some(rss(service.pid() as u32)),
            Agent::Anchor { .. } => None,
        }
    }
}

async fn spare_pid(editor: &mut RawLsp) -> Option<u32> {
    let status = editor.request("moonkale/status", Value::Null).await;
    status["result"]["agentSpare"]["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p > 0)
}

/// The anchor adapter, as its README runs it, offline: the same CLI, the
/// fake API, a private HOME (the same settings as ours: the fake, its key), and
/// `IS_SANDBOX=1` (as root its CLI refuses to start without it).
fn anchor_command(sb: &Sandbox, claude: &Path, fake_url: &str) -> Command {
    let mut cmd = Command::new(anchor_bin());
    cmd.current_dir(&sb.workspace)
        .env("HOME", &sb.home)
        .env("CLAUDE_CONFIG_DIR", sb.home.join(".claude"))
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_STATE_HOME")
        .env("ANTHROPIC_BASE_URL", fake_url)
        // The key comes from the settings' `apiKeyHelper`, as for ours
        // (whose service never passes ANTHROPIC_API_KEY to the CLI).
        .env_remove("ANTHROPIC_API_KEY")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("IS_SANDBOX", "1")
        .env("CLAUDE_CODE_EXECUTABLE", claude);
    cmd
}

/// `MOONKALE_CLAUDE_AGENT_ACP`, else the pinned peer.
fn anchor_bin() -> PathBuf {
    std::env::var_os("MOONKALE_CLAUDE_AGENT_ACP")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            moonkale_tests::repo_root().join(".peers/acp/node_modules/.bin/claude-agent-acp")
        })
}

fn anchor_version() -> Option<String> {
    let package = anchor_bin()
        .canonicalize()
        .ok()?
        .parent()?
        .parent()?
        .join("package.json");
    let package: Value = serde_json::from_slice(&std::fs::read(package).ok()?).ok()?;
    Some(package["version"].as_str()?.to_owned())
}

/// One sequential run of one agent.
#[derive(Default)]
struct Run {
    /// Spawn → `initialize` reply.
    init: f64,
    /// `session/new` sent → its reply.
    new: f64,
    /// Spawn → `session/new` reply.
    spawn_to_new: f64,
    /// The prompt sent on the `session/new` reply → its first chunk.
    prompt_chunk: f64,
    /// `session/new` sent → that first chunk (the new session's wait):
    /// `new` + `prompt_chunk`.
    new_to_chunk: f64,
    /// Spawn → that first chunk (an editor's first use of the agent):
    /// `spawn_to_new` + `prompt_chunk`.
    spawn_to_chunk: f64,
    /// The prompt → its reply (`end_turn`).
    prompt_reply: f64,
    /// The prompt → the CLI's request at the fake.
    to_api: f64,
    /// Ours: the prompt → the service's first text at a watcher.
    service_text: f64,
    /// A second new session, prompted after [`SETTLE`]: prompt → first chunk.
    settled_chunk: f64,
    /// With one session, its turn over: the adapter's RSS, and what of it
    /// is its own.
    adapter_rss: u64,
    adapter_anon: u64,
    /// The CLI processes serving it (count, RSS).
    cli: (usize, u64),
    /// The settled session's CLI: its CPU seconds from its start to the
    /// end of its first turn (3 s or more apart).
    settled_cli_cpu: f64,
}

async fn run_once(
    agent: &mut Agent,
    claude: &Path,
    fake: &fakeapi::FakeApi,
    name: &str,
    i: usize,
) -> Result<Run, String> {
    agent.ready().await?;
    let spawned = Instant::now();
    let mut peer = agent.spawn(claude, name)?;
    let result = async {
        let initialized = initialize(&mut peer).await?;
        let cwd = agent.sb().workspace.clone();
        let (session, new_sent, new_replied) = new_session(&mut peer, &cwd).await?;
        let mut watch = match agent {
            Agent::Ours { service, .. } => Some(watcher(service, &session).await),
            Agent::Anchor { .. } => None,
        };
        let text = format!("{name} run {i}");
        let split = split_turn(&mut peer, fake, watch.as_mut(), &session, &text).await?;
        drop(watch);
        let turn = &split.turn;
        let mut run = Run {
            init: ms(spawned, initialized),
            new: ms(new_sent, new_replied),
            spawn_to_new: ms(spawned, new_replied),
            prompt_chunk: ms(turn.sent, turn.first_chunk),
            // Without the watcher's set-up between the two (ours only).
            new_to_chunk: ms(new_sent, new_replied) + ms(turn.sent, turn.first_chunk),
            spawn_to_chunk: ms(spawned, new_replied) + ms(turn.sent, turn.first_chunk),
            prompt_reply: ms(turn.sent, turn.reply),
            to_api: ms(turn.sent, split.api),
            service_text: split.service_text.map_or(0.0, |t| ms(turn.sent, t)),
            adapter_rss: rss(peer.pid()),
            adapter_anon: anon(peer.pid()),
            cli: agent.session_cli_rss(peer.pid()),
            ..Run::default()
        };
        agent.ready().await?;
        let (second, _, _) = new_session(&mut peer, &cwd).await?;
        tokio::time::sleep(SETTLE).await;
        let text = format!("{name} run {i}, settled");
        let turn = prompt_turn(&mut peer, &second, &text).await?;
        run.settled_chunk = ms(turn.sent, turn.first_chunk);
        run.settled_cli_cpu = agent.session_cli_cpu(peer.pid());
        Ok(run)
    }
    .await;
    peer.stop().await;
    result
}

/// (4): `CONCURRENT` sessions created at once in one adapter process, each
/// prompted on its `session/new` reply.
#[derive(Default)]
struct Crowd {
    /// Start → the last `session/new` reply, first chunk, prompt reply.
    all_new: f64,
    all_chunks: f64,
    all_replies: f64,
    /// Per session, the start → its first chunk (sorted).
    chunk_each: Vec<f64>,
    adapter_before: u64,
    adapter_after: u64,
    adapter_anon: u64,
    service_before: Option<u64>,
    service_after: Option<u64>,
    cli: (usize, u64),
    /// CPU seconds during the crowd: the adapter process, the service
    /// (ours), and each session's CLI (with the helpers it waited for).
    adapter_cpu: f64,
    service_cpu: Option<f64>,
    cli_cpu: Vec<f64>,
    /// When the CLIs started, ms from the first `session/new` (sorted).
    cli_started: Vec<f64>,
    /// The requests the fake got during the crowd: main, side, other.
    requests: (usize, usize, usize),
    /// Ours: the spare at the end, when it started (ms from the first
    /// `session/new`) and its CPU seconds.
    spare: Option<(f64, f64)>,
}

async fn crowd(
    agent: &mut Agent,
    claude: &Path,
    fake: &fakeapi::FakeApi,
    name: &str,
    prepared: bool,
) -> Result<Crowd, String> {
    if prepared {
        agent.ready_for_acp().await?;
    } else {
        agent.ready().await?;
    }
    let mut peer = agent.spawn(claude, &format!("{name}-crowd"))?;
    let service_pid = match agent {
        Agent::Ours { service, .. } => Some(service.pid() as u32),
        Agent::Anchor { .. } => None,
    };
    let cpu = |pid: u32| proc_times(pid, false).map_or(0, |t| t.0);
    let result = async {
        initialize(&mut peer).await?;
        let mut out = Crowd {
            adapter_before: rss(peer.pid()),
            service_before: agent.service_rss(),
            ..Crowd::default()
        };
        let cwd = agent.sb().workspace.clone();
        let requests_before = fake.requests().len();
        let (adapter_cpu, service_cpu) = (cpu(peer.pid()), service_pid.map(cpu));
        let booted = uptime_secs();
        let start = Instant::now();
        let mut news = HashSet::new();
        for _ in 0..CONCURRENT {
            let (id, _) = peer
                .request("session/new", json!({"cwd": cwd, "mcpServers": []}))
                .await?;
            news.insert(id);
        }
        // session → (first chunk, reply); prompt id → session.
        let mut sessions: HashMap<String, (Option<Instant>, Option<Instant>)> = HashMap::new();
        let mut prompts: HashMap<i64, String> = HashMap::new();
        let mut last_new = start;
        let mut done = 0;
        while done < CONCURRENT {
            let until = start + 4 * TURN_DEADLINE;
            let (at, m) = peer.next(until, "all the sessions' replies").await?;
            if m["method"] == "session/update" {
                if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                    && let Some(s) = m["params"]["sessionId"].as_str()
                    && let Some(times) = sessions.get_mut(s)
                {
                    times.0.get_or_insert(at);
                }
                continue;
            }
            let Some(id) = m["id"].as_i64() else { continue };
            if let Some(e) = m.get("error") {
                return Err(format!("request {id}: {e}"));
            }
            if news.remove(&id) {
                last_new = at;
                let session = m["result"]["sessionId"]
                    .as_str()
                    .ok_or_else(|| format!("session/new: {m}"))?
                    .to_owned();
                let text = format!("{name} crowd {}", sessions.len());
                let prompt =
                    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
                let (pid, _) = peer.request("session/prompt", prompt).await?;
                prompts.insert(pid, session.clone());
                sessions.insert(session, (None, None));
            } else if let Some(session) = prompts.remove(&id) {
                if m["result"]["stopReason"] != "end_turn" {
                    return Err(format!("session/prompt ended {}", m["result"]));
                }
                sessions.get_mut(&session).expect("known").1 = Some(at);
                done += 1;
            }
        }
        let chunk = |t: &(Option<Instant>, Option<Instant>)| t.0.map(|c| ms(start, c));
        let mut each: Vec<f64> = sessions.values().filter_map(chunk).collect();
        if each.len() < CONCURRENT {
            return Err("a turn without agent_message_chunk".into());
        }
        each.sort_by(f64::total_cmp);
        out.all_new = ms(start, last_new);
        out.all_chunks = each.last().copied().unwrap_or_default();
        out.all_replies = sessions
            .values()
            .filter_map(|t| t.1.map(|r| ms(start, r)))
            .fold(0.0, f64::max);
        out.chunk_each = each;
        let hz = ticks_per_sec();
        out.adapter_cpu = cpu(peer.pid()).saturating_sub(adapter_cpu) as f64 / hz;
        out.service_cpu = service_pid
            .zip(service_cpu)
            .map(|(pid, before)| cpu(pid).saturating_sub(before) as f64 / hz);
        // The sessions' CLIs: the adapter's children (the anchor), the
        // service's but the spare (ours).
        let spare = match agent {
            Agent::Ours { editor, .. } => spare_pid(editor).await,
            Agent::Anchor { .. } => None,
        };
        let clis: Vec<u32> = children(service_pid.unwrap_or(peer.pid()))
            .into_iter()
            .filter(|&p| Some(p) != spare)
            .collect();
        for p in clis {
            if let Some((cpu, started)) = proc_times(p, true) {
                out.cli_cpu.push(cpu as f64 / hz);
                out.cli_started.push((started as f64 / hz - booted) * 1e3);
            }
        }
        out.spare = spare
            .and_then(|p| proc_times(p, true))
            .map(|(cpu, started)| ((started as f64 / hz - booted) * 1e3, cpu as f64 / hz));
        out.cli_cpu.sort_by(f64::total_cmp);
        out.cli_started.sort_by(f64::total_cmp);
        for r in fake.requests().iter().skip(requests_before) {
            match r.kind {
                fakeapi::Kind::Main => out.requests.0 += 1,
                fakeapi::Kind::Side => out.requests.1 += 1,
                _ => out.requests.2 += 1,
            }
        }
        out.adapter_after = rss(peer.pid());
        out.adapter_anon = anon(peer.pid());
        out.service_after = agent.service_rss();
        out.cli = agent.cli_rss(peer.pid()).await;
        Ok(out)
    }
    .await;
    peer.stop().await;
    result
}

fn runs() -> usize {
    std::env::var("MOONKALE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(10)
}

pub(super) fn load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A row of the table: its name, and its figure in a run.
type Row = (&'static str, fn(&Run) -> f64);

/// p50 and p90 of one figure of the runs.
fn stats(runs: &[Run], f: impl Fn(&Run) -> f64) -> (f64, f64) {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    (pct(&v, 50), pct(&v, 90))
}

fn median_u64(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The CLI, if it and the anchor are installed; else says what is missing.
fn peers() -> Option<PathBuf> {
    let Some(claude) = claude_bin() else {
        println!("skipped: the claude CLI is not installed (scripts/install-test-peers.sh)");
        return None;
    };
    if !anchor_bin().exists() {
        println!(
            "skipped: {} is missing (scripts/install-test-peers.sh)",
            anchor_bin().display()
        );
        return None;
    }
    Some(claude)
}

pub async fn bench() {
    println!("\n## ACP: moonkale-service acp beside claude-agent-acp (same CLI, fake API)");
    let Some(claude) = peers() else { return };
    let started = Instant::now();
    let n = runs();
    let fake =
        fakeapi::FakeApi::start(fakeapi::Script::new().default_reply(fakeapi::Reply::text(REPLY)))
            .await;
    let load_before = load();
    let mut ours = Agent::ours(&claude, &fake).await;
    let mut anchor = Agent::anchor(&fake);
    let service_idle = ours.service_rss().unwrap_or(0);
    let (mut our_runs, mut anchor_runs) = (Vec::new(), Vec::new());
    // A warm-up run each (the CLI's and node's first start, page cache),
    // then the timed ones, alternating.
    for i in 0..=n {
        let a = run_once(&mut ours, &claude, &fake, "ours", i).await;
        let b = run_once(&mut anchor, &claude, &fake, "anchor", i).await;
        match (a, b) {
            (Ok(a), Ok(b)) if i > 0 => {
                our_runs.push(a);
                anchor_runs.push(b);
            }
            (Ok(_), Ok(_)) => {}
            (a, b) => {
                for (name, r) in [("ours", a.err()), ("anchor", b.err())] {
                    if let Some(e) = r {
                        println!("{name} failed in run {i}: {e}");
                    }
                }
                return;
            }
        }
    }
    // Every session of ours is still live in the service (2 a run, up to
    // its limit of 16): its growth per live session.
    let live = (2 * (n + 1)).min(16) as u64;
    let service_after = ours.service_rss().unwrap_or(0);
    // What ours' live sessions (idle CLIs, the spare) cost the machine
    // meanwhile, as the anchor's runs end theirs.
    let service_pid = match &ours {
        Agent::Ours { service, .. } => service.pid() as u32,
        Agent::Anchor { .. } => 0,
    };
    let ticks = tree_ticks(service_pid);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let hz = ticks_per_sec();
    let idle_cpu = tree_ticks(service_pid).saturating_sub(ticks) as f64 / hz / 5.0 * 100.0;
    let load_after = load();
    println!(
        "claude {}, claude-agent-acp {}, {n} runs each after a warm-up, alternating; load before {load_before}, after {load_after}",
        cli_version(&claude),
        anchor_version().unwrap_or_else(|| "?".into())
    );
    println!(
        "ms, p50 / p90               {:>19} {:>19}",
        "moonkale acp", "claude-agent-acp"
    );
    let rows: [Row; 9] = [
        ("spawn -> initialize reply", |r| r.init),
        ("session/new -> reply", |r| r.new),
        ("spawn -> session/new reply", |r| r.spawn_to_new),
        ("prompt -> request at the fake", |r| r.to_api),
        ("prompt -> first chunk", |r| r.prompt_chunk),
        ("session/new -> first chunk", |r| r.new_to_chunk),
        ("spawn -> first chunk", |r| r.spawn_to_chunk),
        ("prompt -> reply (end_turn)", |r| r.prompt_reply),
        ("settled 3 s: prompt -> chunk", |r| r.settled_chunk),
    ];
    for (name, f) in rows {
        let (a50, a90) = stats(&our_runs, f);
        let (b50, b90) = stats(&anchor_runs, f);
        println!(
            "{name:<28} {a50:>9.1} / {a90:>7.1} {b50:>9.1} / {b90:>7.1}  ({:.1}x)",
            b50 / a50
        );
    }
    let (cpu_a, cpu_a90) = stats(&our_runs, |r| r.settled_cli_cpu);
    let (cpu_b, cpu_b90) = stats(&anchor_runs, |r| r.settled_cli_cpu);
    println!(
        "the settled session's CLI, its start and first turn: {:.0} / {:.0} ms CPU vs {:.0} / {:.0} (p50 / p90)",
        cpu_a * 1e3,
        cpu_a90 * 1e3,
        cpu_b * 1e3,
        cpu_b90 * 1e3
    );
    let (text50, _) = stats(&our_runs, |r| r.service_text);
    let (bridge50, bridge90) = stats(&our_runs, |r| r.prompt_chunk - r.service_text);
    println!(
        "ours, the first prompt: the service's first agent/text at a watcher connection {text50:.1} ms (p50); \
         the acp process adds {bridge50:.2} / {bridge90:.2} ms (p50 / p90) to the chunk"
    );
    println!(
        "the first prompt's API request: ours {}, the anchor's {}",
        request_shape(&fake, "ours run 1"),
        request_shape(&fake, "anchor run 1")
    );
    let med = |runs: &[Run], f: fn(&Run) -> u64| median_u64(runs.iter().map(f).collect());
    println!(
        "one session, RSS (medians): adapter {} (moonkale acp; {} anon) vs {} (node; {} anon); \
         CLIs {} in {} process(es) vs {} in {}",
        mib(med(&our_runs, |r| r.adapter_rss)),
        mib(med(&our_runs, |r| r.adapter_anon)),
        mib(med(&anchor_runs, |r| r.adapter_rss)),
        mib(med(&anchor_runs, |r| r.adapter_anon)),
        mib(med(&our_runs, |r| r.cli.1)),
        med(&our_runs, |r| r.cli.0 as u64),
        mib(med(&anchor_runs, |r| r.cli.1)),
        med(&anchor_runs, |r| r.cli.0 as u64),
    );
    println!(
        "the service: {} with an editor and the spare, {} with {live} live sessions after the runs: {} per session",
        mib(service_idle),
        mib(service_after),
        mib(service_after.saturating_sub(service_idle) / live)
    );
    let (clis, clis_rss) = tree_rss(service_pid, None);
    println!(
        "its {clis} CLI processes (the live sessions' and the spare), {} in all, used {idle_cpu:.1} % of a core over 5 s idle",
        mib(clis_rss)
    );
    ours.stop().await;
    crowds(&claude, &fake, &mut anchor, 1).await;
    println!("(section took {:.0} s)", started.elapsed().as_secs_f64());
}

/// `moonkale-bench acp-crowd`: part (4) alone, `MOONKALE_BENCH_CROWDS`
/// rounds (3).
pub async fn crowd_only() {
    println!("\n## ACP: 10 sessions at once, moonkale-service acp beside claude-agent-acp");
    let Some(claude) = peers() else { return };
    let started = Instant::now();
    let fake =
        fakeapi::FakeApi::start(fakeapi::Script::new().default_reply(fakeapi::Reply::text(REPLY)))
            .await;
    let mut anchor = Agent::anchor(&fake);
    let rounds = std::env::var("MOONKALE_BENCH_CROWDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3);
    crowds(&claude, &fake, &mut anchor, rounds).await;
    println!("(section took {:.0} s)", started.elapsed().as_secs_f64());
}

/// One part of a round of (4).
#[derive(Clone, Copy, PartialEq)]
enum Part {
    /// Ours; `prepared`: the spare was made for the ACP client's mode
    /// before the crowd (`moonkale/agent/prepare`, as a client connected
    /// earlier would have), else the fresh service's spare is the
    /// service's default (`plan`) and the `acp` process's own prepare
    /// replaces it as the crowd starts.
    Ours {
        prepared: bool,
    },
    Anchor,
    /// Ours from the service binary `MOONKALE_BENCH_BASELINE_SERVICE`.
    Baseline {
        prepared: bool,
    },
}

impl Part {
    fn parse(name: &str) -> Option<Part> {
        Some(match name {
            "ours" => Part::Ours { prepared: false },
            "ours-prepared" => Part::Ours { prepared: true },
            "anchor" => Part::Anchor,
            "baseline" => Part::Baseline { prepared: false },
            "baseline-prepared" => Part::Baseline { prepared: true },
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Part::Ours { prepared: false } => "ours",
            Part::Ours { prepared: true } => "ours, spare prepared",
            Part::Anchor => "the anchor",
            Part::Baseline { prepared: false } => "the baseline",
            Part::Baseline { prepared: true } => "the baseline, spare prepared",
        }
    }
}

/// (4), `rounds` times. The parts of a round are `MOONKALE_BENCH_CROWD_PARTS`
/// (comma-separated: ours, ours-prepared, anchor, baseline,
/// baseline-prepared), by default ours and the anchor (and the baseline
/// with `MOONKALE_BENCH_BASELINE_SERVICE`, a service built elsewhere, e.g.
/// from an older commit); ours runs on a fresh service each time, so that
/// only these sessions are live; which part goes first rotates from round
/// to round.
async fn crowds(claude: &Path, fake: &fakeapi::FakeApi, anchor: &mut Agent, rounds: usize) {
    let baseline: Option<PathBuf> = std::env::var_os("MOONKALE_BENCH_BASELINE_SERVICE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let default = if baseline.is_some() {
        "ours,anchor,baseline"
    } else {
        "ours,anchor"
    };
    let wanted = std::env::var("MOONKALE_BENCH_CROWD_PARTS").unwrap_or_else(|_| default.into());
    let parts: Vec<Part> = wanted.split(',').filter_map(Part::parse).collect();
    if parts.is_empty()
        || (parts.iter().any(|p| matches!(p, Part::Baseline { .. })) && baseline.is_none())
    {
        println!(
            "MOONKALE_BENCH_CROWD_PARTS={wanted:?}: no parts to run (a baseline needs MOONKALE_BENCH_BASELINE_SERVICE)"
        );
        return;
    }
    let this = moonkale_tests::bin("moonkale-service");
    // Per part, each round's "all first chunks".
    let mut all_chunks: Vec<Vec<f64>> = parts.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let mut results: Vec<Option<Result<Crowd, String>>> = parts.iter().map(|_| None).collect();
        let mut order = Vec::new();
        for k in 0..parts.len() {
            let i = (round + k) % parts.len();
            let part = parts[i];
            order.push(format!("{} (load {})", part.name(), load()));
            results[i] = Some(match part {
                Part::Anchor => crowd(anchor, claude, fake, "anchor", false).await,
                Part::Ours { prepared } | Part::Baseline { prepared } => {
                    let program = match part {
                        Part::Baseline { .. } => baseline.as_deref().expect("checked"),
                        _ => &this,
                    };
                    let mut ours = Agent::ours_of(program, claude, fake).await;
                    let crowd = crowd(&mut ours, claude, fake, "ours", prepared).await;
                    ours.stop().await;
                    crowd
                }
            });
        }
        println!(
            "\n{CONCURRENT} sessions at once, one adapter process each (ours: one `moonkale-service acp`, a fresh service with its spare){}; in turn: {}",
            if rounds > 1 {
                format!(", round {} of {rounds}", round + 1)
            } else {
                String::new()
            },
            order.join(", ")
        );
        let results: Vec<Result<Crowd, String>> = results.into_iter().flatten().collect();
        let ours = parts.iter().position(|p| matches!(p, Part::Ours { .. }));
        let anchor = parts.iter().position(|p| *p == Part::Anchor);
        if let (Some(a), Some(b)) = (ours, anchor)
            && let (Ok(a), Ok(b)) = (&results[a], &results[b])
        {
            print_crowd(a, b);
        }
        for (i, (part, result)) in parts.iter().zip(&results).enumerate() {
            match result {
                Ok(c) => {
                    all_chunks[i].push(c.all_chunks);
                    if Some(i) != ours && Some(i) != anchor {
                        println!("{}: {}", part.name(), crowd_line(c));
                    }
                }
                Err(e) => println!("{} failed: {e}", part.name()),
            }
        }
    }
    if rounds > 1 {
        println!("\nall first chunks, ms, by round:");
        let anchor = parts.iter().position(|p| *p == Part::Anchor);
        for (part, each) in parts.iter().zip(&all_chunks) {
            let mut sorted = each.clone();
            sorted.sort_by(f64::total_cmp);
            let shown: Vec<String> = each.iter().map(|x| format!("{x:.0}")).collect();
            let ratio = anchor
                .filter(|_| *part != Part::Anchor)
                .map(|b| {
                    let mut r: Vec<f64> =
                        all_chunks[b].iter().zip(each).map(|(b, a)| b / a).collect();
                    r.sort_by(f64::total_cmp);
                    format!("; anchor / this, median of the rounds {:.2}x", pct(&r, 50))
                })
                .unwrap_or_default();
            println!(
                "{:<30} {} (median {:.0}){ratio}",
                part.name(),
                shown.join(", "),
                pct(&sorted, 50)
            );
        }
    }
}

/// A crowd in one line (for the parts beside ours and the anchor).
fn crowd_line(c: &Crowd) -> String {
    format!(
        "all session/new replies {:.1} ms, first chunk p50 {:.1}, all first chunks {:.1}, all prompt replies {:.1}; CPU s: service {}, CLIs {:.1} in all ({} processes, p50 {:.2}); CLIs started {:.0}–{:.0} ms; {}",
        c.all_new,
        pct(&c.chunk_each, 50),
        c.all_chunks,
        c.all_replies,
        c.service_cpu.map_or("-".into(), |x| format!("{x:.2}")),
        c.cli_cpu.iter().sum::<f64>(),
        c.cli_cpu.len(),
        pct(&c.cli_cpu, 50),
        c.cli_started.first().copied().unwrap_or_default(),
        c.cli_started.last().copied().unwrap_or_default(),
        spare_line(c.spare),
    )
}

/// Ours' spare after a crowd: when it started, what it cost meanwhile.
fn spare_line(spare: Option<(f64, f64)>) -> String {
    match spare {
        Some((at, cpu)) => format!("ours' next spare started at {at:.0} ms, {cpu:.2} s CPU"),
        None => "no spare of ours at the end".into(),
    }
}

fn print_crowd(a: &Crowd, b: &Crowd) {
    println!(
        "ms from the first session/new    {:>12} {:>18}",
        "moonkale acp", "claude-agent-acp"
    );
    for (name, x, y) in [
        ("all session/new replies", a.all_new, b.all_new),
        (
            "first chunk, p50 of the sessions",
            pct(&a.chunk_each, 50),
            pct(&b.chunk_each, 50),
        ),
        ("all first chunks", a.all_chunks, b.all_chunks),
        ("all prompt replies", a.all_replies, b.all_replies),
    ] {
        println!("{name:<32} {x:>12.1} {y:>18.1}  ({:.1}x)", y / x);
    }
    let per = |before: u64, after: u64| mib(after.saturating_sub(before) / CONCURRENT as u64);
    println!(
        "adapter RSS: {} -> {} (moonkale acp; {} anon), {} -> {} (node; {} anon): {} vs {} more per session",
        mib(a.adapter_before),
        mib(a.adapter_after),
        mib(a.adapter_anon),
        mib(b.adapter_before),
        mib(b.adapter_after),
        mib(b.adapter_anon),
        per(a.adapter_before, a.adapter_after),
        per(b.adapter_before, b.adapter_after),
    );
    if let (Some(before), Some(after)) = (a.service_before, a.service_after) {
        println!(
            "service RSS: {} -> {}: {} per session; ours in all (acp + service growth) per session: {}",
            mib(before),
            mib(after),
            per(before, after),
            per(before + a.adapter_before, after + a.adapter_after),
        );
    }
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    let spread = |v: &[f64]| match (v.first(), v.last()) {
        (Some(a), Some(b)) => format!("{a:.0}–{b:.0} ms"),
        _ => "?".into(),
    };
    println!(
        "CPU s during the crowd: adapter {:.2} vs {:.2}; service {}; CLIs {:.1} in all ({} processes, p50 {:.2}, max {:.2}) vs {:.1} ({}, p50 {:.2}, max {:.2})",
        a.adapter_cpu,
        b.adapter_cpu,
        a.service_cpu.map_or("-".into(), |c| format!("{c:.2}")),
        sum(&a.cli_cpu),
        a.cli_cpu.len(),
        pct(&a.cli_cpu, 50),
        a.cli_cpu.last().copied().unwrap_or_default(),
        sum(&b.cli_cpu),
        b.cli_cpu.len(),
        pct(&b.cli_cpu, 50),
        b.cli_cpu.last().copied().unwrap_or_default(),
    );
    println!(
        "CLIs started (from the first session/new): {} vs {}; requests at the fake (main, side, other): {:?} vs {:?}; {}",
        spread(&a.cli_started),
        spread(&b.cli_started),
        a.requests,
        b.requests,
        spare_line(a.spare),
    );
    println!(
        "CLIs: {} in {} processes (ours, the spare apart) vs {} in {}: {} vs {} per session",
        mib(a.cli.1),
        a.cli.0,
        mib(b.cli.1),
        b.cli.0,
        mib(a.cli.1 / CONCURRENT as u64),
        mib(b.cli.1 / CONCURRENT as u64),
    );
}

/// How many tools and bytes the main request carrying `prompt` had.
fn request_shape(fake: &fakeapi::FakeApi, prompt: &str) -> String {
    let request = fake
        .main_requests()
        .into_iter()
        .find(|r| r.latest_user_text().contains(prompt));
    match request {
        Some(r) => format!(
            "{} tools, {} KiB",
            r.body["tools"].as_array().map_or(0, Vec::len),
            r.body.to_string().len() / 1024
        ),
        None => "not seen".into(),
    }
}

fn cli_version(claude: &Path) -> String {
    std::process::Command::new(claude)
        .arg("--version")
        .env("HOME", &Sandbox::new().home)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}
