//! The world of an agent test (tests/tests/agent.rs): the service running
//! the real `claude` CLI headless (or a scripted stand-in), pointed at the
//! fake Anthropic API, and LSP clients that talk `moonkale/agent/*` to it.
//!
//! The CLI is spawned by the service with a scrubbed environment, so it
//! finds the fake through `<home>/.claude/settings.json` (real-cli.md §2):
//! the settings' `env` (base URL, proxies, retries) and an `apiKeyHelper`.
//!
//! [`Client`] reads its connection on a task of its own: every message the
//! service sends is kept in [`Client::log`], in arrival order; waits look
//! for a message there with a deadline, and requests the service sends
//! (`window/showMessageRequest`) stay unanswered until the test answers
//! them (only `window/workDoneProgress/create` and
//! `client/registerCapability` are answered at once).

#![allow(dead_code)] // each test file uses a different part of the support code

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use moonkale_service::lsp::framing::{FrameReader, encode_frame};
use moonkale_tests::{Sandbox, Service};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Mutex, mpsc};

use super::claude_cli::claude_bin;
use super::fakeapi::{FakeApi, FakeLog, Reply, Script};

/// The longest one step may take: a CLI start plus a turn is normally a
/// second or two (each test stays well under 30 s).
pub const STEP: Duration = Duration::from_secs(15);

/// `~/.claude/settings.json` for a CLI spawned with a scrubbed environment:
/// everything goes to the fake at `port` (real-cli.md §2).
pub fn write_claude_settings(home: &Path, port: u16) {
    let url = format!("http://127.0.0.1:{port}");
    let settings = json!({
        "env": {
            "ANTHROPIC_BASE_URL": url,
            "HTTPS_PROXY": url,
            "HTTP_PROXY": url,
            "NO_PROXY": "127.0.0.1,localhost",
            "CLAUDE_CODE_MAX_RETRIES": "2",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "true",
            "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
        },
        "apiKeyHelper": "echo sk-test-dummy",
    });
    let dir = home.join(".claude");
    std::fs::create_dir_all(&dir).expect("create ~/.claude");
    std::fs::write(
        dir.join("settings.json"),
        serde_json::to_vec_pretty(&settings).unwrap(),
    )
    .expect("write ~/.claude/settings.json");
}

/// What failure messages show: the service's log and the fake's requests.
#[derive(Clone)]
pub struct Diag {
    pub service_log: PathBuf,
    pub fake: Option<FakeLog>,
}

impl Diag {
    pub fn context(&self) -> String {
        let text = std::fs::read_to_string(&self.service_log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = all[all.len().saturating_sub(60)..].join("\n");
        let fake = self.fake.as_ref().map(|f| f.summary()).unwrap_or_default();
        format!("--- service log (tail) ---\n{tail}\n--- fake API requests ---\n{fake}")
    }
}

/// Capabilities of an editor that shows `window/showMessageRequest` with
/// buttons.
pub fn buttons_caps() -> Value {
    json!({"general": {"positionEncodings": ["utf-16"]},
           "window": {"showMessage": {"messageActionItem": {"additionalPropertiesSupport": false}}}})
}

/// Capabilities of an editor without buttons.
pub fn plain_caps() -> Value {
    json!({"general": {"positionEncodings": ["utf-16"]}})
}

/// The first `n` chars of `s`, for failure messages.
pub fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// An LSP client on the service's socket.
pub struct Client {
    pub name: String,
    writer: Arc<Mutex<OwnedWriteHalf>>,
    inbox: mpsc::UnboundedReceiver<Value>,
    /// Every message the service sent (responses to our requests aside), in
    /// arrival order.
    pub log: Vec<Value>,
    /// Which entries of `log` a [`Client::take`] already returned.
    taken: Vec<bool>,
    next_id: i64,
    reader: tokio::task::AbortHandle,
    /// Responses that arrived while waiting for something else.
    responses: Vec<Value>,
    closed: bool,
    pub diag: Diag,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

async fn write_msg(writer: &Mutex<OwnedWriteHalf>, msg: &Value) {
    let body = serde_json::to_vec(msg).expect("json");
    let mut w = writer.lock().await;
    let _ = w.write_all(&encode_frame(&body)).await;
    let _ = w.flush().await;
}

async fn read_loop(
    read: OwnedReadHalf,
    writer: Arc<Mutex<OwnedWriteHalf>>,
    tx: mpsc::UnboundedSender<Value>,
) {
    // Larger than the service's own limit: nothing it sends is refused here.
    let mut reader = FrameReader::with_max_body(read, 128 << 20);
    while let Ok(Some(body)) = reader.read_frame().await {
        let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
            continue;
        };
        if msg.get("id").is_some()
            && matches!(
                msg["method"].as_str(),
                Some("window/workDoneProgress/create" | "client/registerCapability")
            )
        {
            write_msg(
                &writer,
                &json!({"jsonrpc": "2.0", "id": msg["id"], "result": null}),
            )
            .await;
        }
        if tx.send(msg).is_err() {
            break;
        }
    }
}

impl Client {
    /// Connects to the service, initializes with `caps` and sends
    /// `initialized`.
    pub async fn connect(svc: &Service, name: &str, caps: Value, diag: Diag) -> Client {
        let stream = UnixStream::connect(&svc.info.socket)
            .await
            .expect("connect to the service's socket");
        let (r, w) = stream.into_split();
        let writer = Arc::new(Mutex::new(w));
        let (tx, inbox) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(r, writer.clone(), tx)).abort_handle();
        let mut c = Client {
            name: name.to_owned(),
            writer,
            inbox,
            log: Vec::new(),
            taken: Vec::new(),
            next_id: 0,
            reader,
            responses: Vec::new(),
            closed: false,
            diag,
        };
        c.call(
            "initialize",
            json!({"processId": std::process::id(), "clientInfo": {"name": name, "version": "test"},
                   "rootUri": null, "capabilities": caps}),
        )
        .await;
        c.notify("initialized", json!({})).await;
        c
    }

    pub async fn send(&mut self, msg: Value) {
        write_msg(&self.writer, &msg).await;
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Answers a request the service sent.
    pub async fn respond(&mut self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// Takes the next message off the connection into `log` (responses to
    /// our requests go to `responses`); false at the deadline or once the
    /// connection is closed.
    async fn pump(&mut self, deadline: tokio::time::Instant) -> bool {
        if self.closed {
            return false;
        }
        match tokio::time::timeout_at(deadline, self.inbox.recv()).await {
            Err(_) => false,
            Ok(None) => {
                self.closed = true;
                false
            }
            Ok(Some(msg)) => {
                if msg.get("method").is_none() && msg.get("id").is_some() {
                    self.responses.push(msg);
                } else {
                    self.log.push(msg);
                    self.taken.push(false);
                }
                true
            }
        }
    }

    /// Moves what has already arrived into `log`, without waiting.
    pub fn drain(&mut self) {
        while let Ok(msg) = self.inbox.try_recv() {
            if msg.get("method").is_none() && msg.get("id").is_some() {
                self.responses.push(msg);
            } else {
                self.log.push(msg);
                self.taken.push(false);
            }
        }
    }

    /// Sends a request and returns the whole response.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            if let Some(i) = self.responses.iter().position(|r| r["id"] == id) {
                return self.responses.remove(i);
            }
            if !self.pump(deadline).await {
                panic!(
                    "{}: no response to {method} {} ({})\n{}",
                    self.name,
                    short(&params.to_string(), 300),
                    if self.closed {
                        "connection closed"
                    } else {
                        "timed out"
                    },
                    self.diag.context()
                );
            }
        }
    }

    /// Sends a request and returns its `result`, failing on an error.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let resp = self.request(method, params.clone()).await;
        assert!(
            resp.get("error").is_none(),
            "{}: {method} {} failed: {resp}\n{}",
            self.name,
            short(&params.to_string(), 300),
            self.diag.context()
        );
        resp["result"].clone()
    }

    /// Returns once the service handled everything sent before (and sent
    /// us what it had to send by then).
    pub async fn barrier(&mut self) {
        self.call("moonkale/status", Value::Null).await;
    }

    /// The first message of `log` not taken yet that satisfies `pred`,
    /// waiting for it up to `timeout`; `None` after that.
    pub async fn try_take(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut from = 0;
        loop {
            for i in from..self.log.len() {
                if !self.taken[i] && pred(&self.log[i]) {
                    self.taken[i] = true;
                    return Some(self.log[i].clone());
                }
            }
            from = self.log.len();
            if !self.pump(deadline).await {
                // One last look at what came with the end.
                self.drain();
                for i in from..self.log.len() {
                    if !self.taken[i] && pred(&self.log[i]) {
                        self.taken[i] = true;
                        return Some(self.log[i].clone());
                    }
                }
                return None;
            }
        }
    }

    /// [`Client::try_take`], failing the test after `timeout`.
    pub async fn take(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(v) = self.try_take(timeout, pred).await {
            return v;
        }
        panic!(
            "{}: timed out after {timeout:?} waiting for {what}{}\n--- last messages ---\n{}\n{}",
            self.name,
            if self.closed {
                " (the connection is closed)"
            } else {
                ""
            },
            self.recent(25),
            self.diag.context()
        );
    }

    /// The last `n` messages received, one line each, for failure messages.
    pub fn recent(&self, n: usize) -> String {
        self.log[self.log.len().saturating_sub(n)..]
            .iter()
            .map(|m| format!("  {}", short(&m.to_string(), 400)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The next request the service sends us with `method`.
    pub async fn server_request(&mut self, method: &str, timeout: Duration) -> Value {
        self.take(&format!("a {method} request"), timeout, |m| {
            m["method"] == method && m.get("id").is_some()
        })
        .await
    }

    /// The code actions offered at the start of `uri`.
    pub async fn code_actions(&mut self, uri: &str) -> Vec<Value> {
        let actions = self
            .call(
                "textDocument/codeAction",
                json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}}),
            )
            .await;
        actions.as_array().cloned().unwrap_or_default()
    }

    /// Runs the code action at the start of `uri` whose title `pick`s.
    pub async fn run_code_action(&mut self, uri: &str, pick: impl Fn(&str) -> bool) {
        let actions = self.code_actions(uri).await;
        let action = actions
            .iter()
            .find(|a| a["title"].as_str().is_some_and(&pick))
            .unwrap_or_else(|| panic!("no such code action among {actions:?}"));
        self.call("workspace/executeCommand", action["command"].clone())
            .await;
    }

    // -----------------------------------------------------------------------
    // The agent

    /// `moonkale/agent/start`; returns the session id.
    pub async fn start_session(&mut self, params: Value) -> String {
        let r = self.call("moonkale/agent/start", params).await;
        r["session"]
            .as_str()
            .unwrap_or_else(|| panic!("start answered without a session: {r}"))
            .to_owned()
    }

    /// `moonkale/agent/send`; returns the `seq` of the stored prompt.
    pub async fn send_prompt(&mut self, session: &str, prompt: &str) -> u64 {
        let r = self
            .call(
                "moonkale/agent/send",
                json!({"session": session, "prompt": prompt}),
            )
            .await;
        assert_eq!(r["session"], session, "{r}");
        r["seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("send answered without a seq: {r}"))
    }

    /// One page of `moonkale/agent/events`.
    pub async fn events_page(&mut self, session: &str, since: u64, limit: u64) -> Value {
        self.call(
            "moonkale/agent/events",
            json!({"session": session, "since": since, "limit": limit}),
        )
        .await
    }

    /// Every stored event of `session`, read in pages of `limit` with
    /// `next`; also the last page (for `state`, `error`,
    /// `pendingApprovals`). Checks that the pages fit together.
    pub async fn all_events(&mut self, session: &str, limit: u64) -> (Vec<Value>, Value) {
        let mut events: Vec<Value> = Vec::new();
        let mut since = 0;
        for _ in 0..10_000 {
            let page = self.events_page(session, since, limit).await;
            let batch = page["events"]
                .as_array()
                .unwrap_or_else(|| panic!("events without an array: {page}"))
                .clone();
            assert!(
                batch.len() as u64 <= limit,
                "a page of {} events with limit {limit}",
                batch.len()
            );
            for e in &batch {
                assert_eq!(
                    e["seq"].as_u64(),
                    Some(events.len() as u64),
                    "events are not numbered 0, 1, 2, … across pages: {}",
                    short(&e.to_string(), 300)
                );
                events.push(e.clone());
            }
            let next = page["next"]
                .as_u64()
                .unwrap_or_else(|| panic!("events without next: {page}"));
            if batch.is_empty() {
                assert_eq!(next, since, "an empty page must not move next");
                return (events, page);
            }
            assert_eq!(next, events.len() as u64, "next after a page: {page}");
            since = next;
        }
        panic!("more than 10 000 pages of events");
    }

    /// The seq of the last `prompt` event stored for `session`.
    pub async fn last_prompt_seq(&mut self, session: &str) -> u64 {
        let (events, _) = self.all_events(session, 1000).await;
        events
            .iter()
            .rev()
            .find(|e| e["kind"] == "prompt")
            .and_then(|e| e["seq"].as_u64())
            .unwrap_or_else(|| {
                panic!(
                    "no prompt event in {session}: {}",
                    short(&Value::Array(events.clone()).to_string(), 2000)
                )
            })
    }

    /// Waits for a `moonkale/agent/event` of `session` whose event
    /// satisfies `pred`; returns the event.
    pub async fn agent_event(
        &mut self,
        session: &str,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(n) = self
            .try_take(timeout, |m| {
                m["method"] == "moonkale/agent/event"
                    && m["params"]["session"] == session
                    && pred(&m["params"]["event"])
            })
            .await
        {
            return n["params"]["event"].clone();
        }
        self.fail_with_events(
            session,
            &format!("timed out after {timeout:?} waiting for {what}"),
        )
        .await
    }

    /// Fails the test, showing `session`'s stored events, the messages
    /// received and the logs.
    pub async fn fail_with_events<T>(&mut self, session: &str, why: &str) -> T {
        let stored = if self.closed {
            "(connection closed)".to_owned()
        } else {
            let page = self
                .request(
                    "moonkale/agent/events",
                    json!({"session": session, "since": 0, "limit": 1000}),
                )
                .await;
            if page.get("error").is_some() {
                format!("(events failed: {})", page["error"])
            } else {
                describe_events(&page["result"])
            }
        };
        panic!(
            "{}: {why}\n--- stored events ---\n{stored}\n--- last messages ---\n{}\n{}",
            self.name,
            self.recent(25),
            self.diag.context()
        );
    }

    /// Waits for the end of the turn whose prompt is event `prompt_seq`:
    /// the first `state` event after it that is `idle` or `failed`.
    pub async fn turn_end(&mut self, session: &str, prompt_seq: u64, timeout: Duration) -> Value {
        self.agent_event(
            session,
            &format!("the end of the turn of prompt #{prompt_seq} (state idle or failed)"),
            timeout,
            |e| {
                e["kind"] == "state"
                    && e["seq"].as_u64().is_some_and(|s| s > prompt_seq)
                    && matches!(e["data"]["state"].as_str(), Some("idle" | "failed"))
            },
        )
        .await
    }

    /// [`Client::turn_end`], failing unless the turn ended `idle`.
    pub async fn turn_idle(&mut self, session: &str, prompt_seq: u64) -> Value {
        let end = self.turn_end(session, prompt_seq, STEP).await;
        if end["data"]["state"] != "idle" {
            return self
                .fail_with_events(
                    session,
                    &format!("the turn of prompt #{prompt_seq} ended {}", end["data"]),
                )
                .await;
        }
        end
    }

    /// Starts a session with `prompt` (and `extra` params), waits until its
    /// first turn ended idle; returns the session id and the prompt's seq.
    pub async fn run_first_turn(&mut self, prompt: &str, extra: Value) -> (String, u64) {
        let mut params = json!({"prompt": prompt});
        if let Value::Object(m) = extra {
            params.as_object_mut().unwrap().extend(m);
        }
        let session = self.start_session(params).await;
        let seq = self.last_prompt_seq(&session).await;
        self.turn_idle(&session, seq).await;
        (session, seq)
    }

    /// The `moonkale/agent/text` notifications of `session` so far, joined.
    pub fn streamed_text(&self, session: &str) -> String {
        self.log
            .iter()
            .filter(|m| m["method"] == "moonkale/agent/text" && m["params"]["session"] == session)
            .filter_map(|m| m["params"]["text"].as_str())
            .collect()
    }

    /// Index in `log` of the first message satisfying `pred`.
    pub fn position(&self, pred: impl Fn(&Value) -> bool) -> Option<usize> {
        self.log.iter().position(pred)
    }

    /// Every message of `log` (taken or not) satisfying `pred`.
    pub fn all(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.log.iter().filter(|m| pred(m)).cloned().collect()
    }
}

/// Events of an `events` answer, one line each (long ones shortened).
pub fn describe_events(page: &Value) -> String {
    let mut s = format!(
        "state={} error={} pendingApprovals={}\n",
        page["state"],
        page["error"],
        short(&page["pendingApprovals"].to_string(), 300)
    );
    for e in page["events"].as_array().into_iter().flatten() {
        s += &format!(
            "  #{} {} {}\n",
            e["seq"],
            e["kind"],
            short(&e["data"].to_string(), 300)
        );
    }
    s
}

/// The text of an `assistant` message (its text blocks joined).
pub fn assistant_text(event: &Value) -> String {
    event["data"]["message"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// The model writes `one` (`ONE\n`) on a prompt saying "write one" and
/// `two` (`TWO\n`) on "write two", each with the CLI's Write tool, then
/// says `WROTE_IT`.
pub fn two_writes_script(one: &Path, two: &Path) -> Script {
    let write = |path: &Path, text: &str| {
        Reply::tool_use(
            "Write",
            json!({"file_path": path.display().to_string(), "content": text}),
        )
    };
    Script::new()
        .on_prompt("write one", write(one, "ONE\n"))
        .on_prompt("write two", write(two, "TWO\n"))
        .after_tool("Write", Reply::text("WROTE_IT"))
}

/// The model plans (`ExitPlanMode` with "1. Write plan.txt"), then writes
/// `path` (`DONE\n`), then says `PLAN_CARRIED_OUT`.
pub fn plan_then_write_script(prompt: &str, path: &Path) -> Script {
    Script::new()
        .on_prompt(
            prompt,
            Reply::tool_use(
                "ExitPlanMode",
                json!({"plan": "1. Write plan.txt saying DONE"}),
            ),
        )
        .after_tool(
            "ExitPlanMode",
            Reply::tool_use(
                "Write",
                json!({"file_path": path.display().to_string(), "content": "DONE\n"}),
            ),
        )
        .after_tool("Write", Reply::text("PLAN_CARRIED_OUT"))
}

/// Whether `e` is a stored `cli` event of `type` (`assistant`, `result`, …).
pub fn is_cli(e: &Value, kind: &str) -> bool {
    e["kind"] == "cli" && e["data"]["type"] == kind
}

/// Configures an [`AgentWorld`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `MOONKALE_APPROVAL_TIMEOUT_MS`.
    pub approval_timeout_ms: Option<u64>,
    /// The CLI the service runs (default: the real one, [`claude_bin`]).
    pub claude: Option<PathBuf>,
    /// Files (relative to the workspace) written before the start.
    pub files: Vec<(String, String)>,
    /// The first editor does not show buttons.
    pub no_buttons: bool,
    /// More environment for the service (and so for the CLI, scrubbed).
    pub env: Vec<(String, String)>,
    /// More arguments for `serve`.
    pub args: Vec<String>,
}

/// The service (running the CLI), the fake API and a first editor.
/// Fields drop in order: the editor, the service, the fake, the sandbox.
pub struct AgentWorld {
    pub ed: Client,
    pub svc: Option<Service>,
    pub fake: FakeApi,
    /// The service's extra environment.
    pub env: Vec<(String, String)>,
    pub sb: Sandbox,
}

impl Drop for AgentWorld {
    fn drop(&mut self) {
        if let Some(mut svc) = self.svc.take() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(svc.pid(), libc::SIGTERM) };
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                if !matches!(svc.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // `MOONKALE_TEST_KEEP_LOGS=DIR` keeps each test's service logs.
        if let Some(dir) = std::env::var_os("MOONKALE_TEST_KEEP_LOGS") {
            let test = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .replace("::", "-");
            let dir = PathBuf::from(dir).join(test);
            let _ = std::fs::create_dir_all(&dir);
            for e in std::fs::read_dir(&self.sb.root)
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = e.file_name();
                if name.to_string_lossy().starts_with("service.log") {
                    let _ = std::fs::copy(e.path(), dir.join(name));
                }
            }
        }
        // Whatever the service left running in our sandbox (its CLIs): gone.
        for pid in processes_in(&self.sb.root) {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Processes whose working directory is inside `dir` (the CLIs of a test).
pub fn processes_in(dir: &Path) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .collect()
}

impl AgentWorld {
    pub async fn start(script: Script) -> AgentWorld {
        AgentWorld::start_with(script, Options::default()).await
    }

    pub async fn start_with(script: Script, opts: Options) -> AgentWorld {
        let sb = Sandbox::new();
        for (rel, text) in &opts.files {
            let path = sb.workspace.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let fake = FakeApi::start(script).await;
        write_claude_settings(&sb.home, fake.port);
        let claude = opts.claude.clone().unwrap_or_else(claude_bin);
        let mut env = vec![(
            "MOONKALE_CLAUDE_BIN".to_owned(),
            claude.display().to_string(),
        )];
        if let Some(ms) = opts.approval_timeout_ms {
            env.push(("MOONKALE_APPROVAL_TIMEOUT_MS".into(), ms.to_string()));
        }
        env.extend(opts.env.iter().cloned());
        let env_ref: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let args: Vec<&str> = opts.args.iter().map(String::as_str).collect();
        let svc = sb.start_service_with_env(&args, &env_ref).await;
        let diag = Diag {
            service_log: sb.root.join("service.log"),
            fake: Some(fake.log_handle()),
        };
        let caps = if opts.no_buttons {
            plain_caps()
        } else {
            buttons_caps()
        };
        let ed = Client::connect(&svc, "editor-a", caps, diag).await;
        AgentWorld {
            ed,
            svc: Some(svc),
            fake,
            env,
            sb,
        }
    }

    pub fn diag(&self) -> Diag {
        self.ed.diag.clone()
    }

    pub fn svc(&self) -> &Service {
        self.svc.as_ref().expect("the service is running")
    }

    /// Another editor on the service.
    pub async fn client(&self, name: &str, caps: Value) -> Client {
        Client::connect(self.svc(), name, caps, self.diag()).await
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.sb.workspace.join(rel)
    }

    /// Pids of the CLIs the service started, from its log.
    pub fn cli_pids(&self) -> Vec<i32> {
        self.service_log()
            .lines()
            .filter(|l| l.contains("started claude"))
            .filter_map(|l| {
                l.split("pid=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    }

    pub fn service_log(&self) -> String {
        std::fs::read_to_string(self.sb.root.join("service.log")).unwrap_or_default()
    }

    /// Stops the service with SIGTERM and waits until its process is gone.
    pub async fn stop_service(&mut self) {
        let mut svc = self.svc.take().expect("the service is running");
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(svc.pid(), libc::SIGTERM) };
        let status = tokio::time::timeout(STEP, svc.child.wait()).await;
        assert!(
            status.is_ok(),
            "the service did not exit within {STEP:?} of SIGTERM\n{}",
            self.diag().context()
        );
    }

    /// Starts the service again (same sandbox and environment); the old
    /// log is kept as `service.log.<n>`. Returns a fresh first editor (the
    /// old one is dropped).
    pub async fn restart_service(&mut self) {
        assert!(self.svc.is_none(), "stop the service first");
        let log = self.sb.root.join("service.log");
        for n in 1.. {
            let old = self.sb.root.join(format!("service.log.{n}"));
            if !old.exists() {
                let _ = std::fs::rename(&log, old);
                break;
            }
        }
        let env_ref: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let svc = self.sb.start_service_with_env(&[], &env_ref).await;
        self.svc = Some(svc);
        self.ed = self.client("editor-a", buttons_caps()).await;
    }

    /// `moonkale-service <args>` pointed at this sandbox, with the
    /// service's environment.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = self.sb.command("moonkale-service");
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd.args(args);
        cmd
    }
}

// ---------------------------------------------------------------------------
// A scripted stand-in for the CLI

/// The stand-in for `claude`: speaks just enough stream-json (control
/// requests answered with success, a reply per user line) and misbehaves
/// as `MODE` says. Every start is logged to `runs` next to it.
pub const STAND_IN: &str = r#"
import json, os, sys, time, uuid

HERE = os.path.dirname(os.path.abspath(__file__))
MODE = "__MODE__"
args = sys.argv[1:]
if "--version" in args:
    print("2.1.332 (Claude Code)")
    sys.exit(0)
session = None
for i, a in enumerate(args):
    for flag in ("--session-id", "--resume"):
        if a.startswith(flag + "="):
            session = a[len(flag) + 1:]
        elif a == flag and i + 1 < len(args):
            session = args[i + 1]
session = session or str(uuid.uuid4())
with open(os.path.join(HERE, "runs"), "a") as f:
    f.write(json.dumps(args) + "\n")
with open(os.path.join(HERE, "runs")) as f:
    run = sum(1 for _ in f)


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def raw(b):
    sys.stdout.buffer.write(b)
    sys.stdout.flush()


def ev(event):
    out({"type": "stream_event", "event": event, "session_id": session,
         "parent_tool_use_id": None, "uuid": str(uuid.uuid4())})


def init():
    out({"type": "system", "subtype": "init", "session_id": session, "cwd": os.getcwd(),
         "tools": ["Read"], "mcp_servers": [], "model": "stand-in", "permissionMode": "plan",
         "apiKeySource": "none", "claude_code_version": "2.1.332", "uuid": str(uuid.uuid4())})


def start(mid):
    ev({"type": "message_start", "message": {"id": mid, "type": "message", "role": "assistant",
        "model": "stand-in", "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1}}})
    ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})


def answer(text):
    init()
    mid = "msg_" + uuid.uuid4().hex
    start(mid)
    ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
    out({"type": "assistant", "message": {"id": mid, "type": "message", "role": "assistant",
         "model": "stand-in", "content": [{"type": "text", "text": text}], "stop_reason": None,
         "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}},
         "parent_tool_use_id": None, "session_id": session, "uuid": str(uuid.uuid4())})
    ev({"type": "content_block_stop", "index": 0})
    ev({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 1}})
    ev({"type": "message_stop"})
    out({"type": "result", "subtype": "success", "is_error": False, "api_error_status": None,
         "duration_ms": 1, "duration_api_ms": 1, "num_turns": 1, "result": text,
         "stop_reason": "end_turn", "session_id": session, "total_cost_usd": 0,
         "usage": {"input_tokens": 1, "output_tokens": 1}, "modelUsage": {},
         "permission_denials": [], "terminal_reason": "completed", "uuid": str(uuid.uuid4())})


turns = 0
for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    try:
        msg = json.loads(line)
    except Exception:
        continue
    kind = msg.get("type")
    if kind == "control_request":
        sub = msg.get("request", {}).get("subtype")
        resp = {}
        if sub == "initialize":
            resp = {"commands": [], "agents": [], "models": [], "account": {},
                    "output_style": "default", "available_output_styles": ["default"],
                    "pid": os.getpid()}
        out({"type": "control_response", "response": {"subtype": "success",
             "request_id": msg.get("request_id"), "response": resp}})
        continue
    if kind != "user":
        continue
    turns += 1
    if MODE == "crash" and run == 1:
        init()
        start("msg_crash")
        ev({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "PARTIAL_BEFORE_THE_CRASH"}})
        sys.stderr.write("stand-in: starting up\n" + "stand-in: noise\n" * 50
                         + "FAKE_CLI_STDERR_TAIL: the model server vanished\n")
        sys.stderr.flush()
        sys.exit(3)
    if MODE == "garbage":
        raw(b"this is not json at all\n")
        raw(b'{"type":"assistant","message":{"content":[{"type":"te\n')
        raw(b"\xff\xfe\x00 binary garbage \x1b[31m\n")
        raw(b"[1, 2, 3]\n")
        raw(b"\r\n")
        out({"type": "brand_new_type_from_a_future_cli", "x": 1})
        answer("SURVIVED_GARBAGE_%d" % turns)
        continue
    if MODE == "slow":
        # A turn of about 60 ms: 20 deltas, 3 ms apart (the crash loop kills
        # the service in the middle of some).
        init()
        mid = "msg_" + uuid.uuid4().hex
        start(mid)
        for i in range(20):
            ev({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "d%d " % i}})
            time.sleep(0.003)
        answer("SLOW_REPLY_%d" % turns)
        continue
    if MODE == "flood":
        chunk = b"E" * 1023 + b"\n"
        for _ in range(4096):
            sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        answer("AFTER_THE_FLOOD_%d" % turns)
        continue
    answer("STAND_IN_REPLY_%d_RUN_%d" % (turns, run))
"#;

/// Writes the stand-in (misbehaving as `mode`) into `dir`; returns its path.
pub fn stand_in(dir: &Path, mode: &str) -> PathBuf {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is needed for the stand-in CLI");
    let python = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(!python.is_empty(), "cannot find python3's executable");
    let path = dir.join("claude");
    std::fs::write(
        &path,
        format!("#!{python}\n{}", STAND_IN.replace("__MODE__", mode)),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The argument lists the stand-in was started with, one per start.
pub fn stand_in_runs(dir: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(dir.join("runs"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
