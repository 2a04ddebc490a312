//! A fake Anthropic Messages API for driving the real `claude` CLI offline.
//!
//! Hand-written HTTP/1.1 on 127.0.0.1 (no TLS, no framework): the CLI is
//! pointed at it with `ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`, and it also
//! serves as `HTTPS_PROXY`, so every attempt to reach an outside host arrives
//! here as `CONNECT host:443`, is refused with 403 and is recorded
//! (shared/docs/real-cli.md §2). [`FakeApi::start_in`] listens on a
//! [`Jail`]'s own loopback instead of the host's.
//!
//! What it serves (real-cli.md §3):
//! - `POST /v1/messages[?beta=true]`: streaming SSE (`message_start`, `ping`,
//!   per block `content_block_start` / deltas / `content_block_stop`,
//!   `message_delta`, `message_stop`), or one JSON message when the request
//!   is not streaming (the CLI's fallback after a broken stream);
//! - `POST /v1/messages/count_tokens`, `GET /v1/models[/id]`, any other
//!   `GET`/`HEAD` → 200 `{}`, any other `POST` → 404 Anthropic-style.
//!
//! A request is *main* (the agent loop) when it offers tools; everything
//! else is a *side* request (the session title, ...), answered with a stub
//! that fits its `output_config.format` JSON schema. Main requests are
//! answered from a [`Script`]: the first [`Rule`] whose [`When`] holds, else
//! the script's default reply.
//!
//! A reply may also be paced or broken on purpose: a delay before it, a
//! hang after `message_start`, a pause before each delta
//! ([`Reply::with_delta_delay`]), a hold after the first deltas until the
//! test opens a [`Gate`] ([`Reply::gated`]), or a stream cut mid-message
//! whose non-streaming fallback fails too ([`Reply::broken_stream`]).
//!
//! Every request (method, path, headers, JSON body, what it was answered
//! with, whether the reply went out whole) is recorded; tests read the log
//! or wait on it with a deadline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::jail::Jail;

/// Longest a connection may stay silent while we wait for a request.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest request head (request line + headers).
const MAX_HEAD: usize = 64 << 10;
/// Largest request body (the CLI's requests are ~100 KB).
const MAX_BODY: usize = 64 << 20;
/// Longest a scripted delay or hang may last.
const MAX_DELAY: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Replies

/// One content block of a scripted assistant message.
#[derive(Clone, Debug)]
pub enum Block {
    Text(String),
    ToolUse {
        id: Option<String>,
        name: String,
        input: Value,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
}

/// What the fake answers one request with.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    pub blocks: Vec<Block>,
    /// Defaults to `tool_use` when a block is a tool use, else `end_turn`.
    pub stop_reason: Option<String>,
    /// An HTTP error instead of a message: (status, error type, message).
    pub error: Option<(u16, String, String)>,
    /// Waits this long before answering (bounded by one minute).
    pub delay: Duration,
    /// Sends `message_start`, then keeps the stream open this long.
    pub hang: Option<Duration>,
    /// Streams slowly: waits this long before each content delta after the
    /// first (the bytes so far are flushed first).
    pub delta_delay: Duration,
    /// Holds the stream after `.1` content deltas (flushed) until the gate
    /// is opened (bounded by one minute), then sends the rest.
    pub gate: Option<(Gate, usize)>,
    /// A broken stream: `message_start`, the first block's start and first
    /// delta, then the connection is closed mid-message. The non-streaming
    /// fallback the CLI then tries fails too, with this error (a 500
    /// `api_error` unless set).
    pub broken: Option<(u16, String, String)>,
}

/// A gate a streaming reply waits at (see [`Reply::gated`]); the test opens
/// it. Once open it stays open.
#[derive(Clone, Debug)]
pub struct Gate(Arc<watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Gate {
        Gate::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate(Arc::new(watch::channel(false).0))
    }

    /// Opens the gate: every reply held by it goes on.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    /// Whether the gate was opened.
    pub fn is_open(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the gate is open, at most `max`.
    async fn wait(&self, max: Duration) {
        let mut rx = self.0.subscribe();
        let _ = tokio::time::timeout(max, rx.wait_for(|open| *open)).await;
    }
}

impl Reply {
    /// A reply with one text block.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::default().and_text(text)
    }

    /// A `tool_use` block with a fresh id.
    pub fn tool_use(name: impl Into<String>, input: Value) -> Reply {
        Reply::default().and_tool_use(name, input)
    }

    /// An Anthropic-style error answer, e.g. `(529, "overloaded_error", ...)`.
    pub fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply {
            error: Some((status, kind.into(), message.into())),
            ..Reply::default()
        }
    }

    fn and_text(mut self, text: impl Into<String>) -> Reply {
        self.blocks.push(Block::Text(text.into()));
        self
    }

    /// This reply with one more `tool_use` block.
    pub fn and_tool_use(mut self, name: impl Into<String>, input: Value) -> Reply {
        self.blocks.push(Block::ToolUse {
            id: None,
            name: name.into(),
            input,
        });
        self
    }

    /// This reply, sent after `delay`.
    pub fn with_delay(mut self, delay: Duration) -> Reply {
        self.delay = delay.min(MAX_DELAY);
        self
    }

    /// This reply, which hangs `how_long` after `message_start`.
    pub fn hanging(mut self, how_long: Duration) -> Reply {
        self.hang = Some(how_long.min(MAX_DELAY));
        self
    }

    /// Waits `delay` before each content delta after the first.
    pub fn with_delta_delay(mut self, delay: Duration) -> Reply {
        self.delta_delay = delay.min(MAX_DELAY);
        self
    }

    /// Sends `after` content deltas (text pieces or tool input pieces, three
    /// per block), then holds the rest of the stream until `gate` opens.
    pub fn gated(mut self, gate: &Gate, after: usize) -> Reply {
        self.gate = Some((gate.clone(), after));
        self
    }

    /// A stream cut mid-message (after `text`'s first piece) whose
    /// non-streaming fallback fails with a 500 `api_error`.
    pub fn broken_stream(text: impl Into<String>) -> Reply {
        Reply::text(text).and_broken_fallback(
            500,
            "api_error",
            "fake API: the stream broke and the fallback fails too",
        )
    }

    /// Makes the stream break mid-message and the non-streaming fallback
    /// answer (status, error type, message).
    fn and_broken_fallback(mut self, status: u16, kind: &str, message: &str) -> Reply {
        self.broken = Some((status, kind.into(), message.into()));
        self
    }
}

// ---------------------------------------------------------------------------
// Script

/// When a [`Rule`] applies to a main request. "The latest user turn" is the
/// run of user messages at the end of the conversation (trailing `system`
/// messages, which the CLI appends, are skipped).
#[derive(Clone)]
pub enum When {
    /// The user typed a prompt containing this text: the latest user turn
    /// holds it and carries no tool result.
    Prompt(String),
    /// The latest user turn carries the result of a call to this tool (as
    /// the model named it, e.g. `mcp__ide__getDiagnostics`).
    ToolResult(String),
    /// The n-th main request (1-based).
    Turn(usize),
    /// Every main request.
    Always,
    /// Anything else: a predicate on the request body.
    Body(Arc<dyn Fn(&Value) -> bool + Send + Sync>),
}

impl std::fmt::Debug for When {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            When::Prompt(s) => write!(f, "Prompt({s:?})"),
            When::ToolResult(s) => write!(f, "ToolResult({s:?})"),
            When::Turn(n) => write!(f, "Turn({n})"),
            When::Always => write!(f, "Always"),
            When::Body(_) => write!(f, "Body(..)"),
        }
    }
}

impl When {
    fn holds(&self, body: &Value, turn: usize) -> bool {
        match self {
            When::Prompt(text) => {
                let latest = latest_user_turn(body);
                !latest.iter().any(|m| !tool_results(m).is_empty())
                    && latest
                        .iter()
                        .any(|m| content_text(&m["content"]).contains(text))
            }
            When::ToolResult(name) => latest_tool_results(body)
                .iter()
                .any(|r| r.tool_name.as_deref() == Some(name)),
            When::Turn(n) => turn == *n,
            When::Always => true,
            When::Body(f) => f(body),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub name: String,
    pub when: When,
    pub reply: Reply,
    /// Used at most once.
    pub once: bool,
    used: bool,
}

impl Rule {
    /// A rule named `name`: `reply` when `when` holds.
    pub fn new(name: impl Into<String>, when: When, reply: Reply) -> Rule {
        Rule {
            name: name.into(),
            when,
            reply,
            once: false,
            used: false,
        }
    }

    /// The rule applies to one request only.
    pub fn once(mut self) -> Rule {
        self.once = true;
        self
    }
}

/// How main requests are answered: the first rule that holds, else
/// `default`.
#[derive(Clone, Debug)]
pub struct Script {
    pub rules: Vec<Rule>,
    pub default: Reply,
}

impl Default for Script {
    fn default() -> Script {
        Script {
            rules: Vec::new(),
            default: Reply::text("Hello from the fake API."),
        }
    }
}

impl Script {
    /// A script with no rules and the default reply.
    pub fn new() -> Script {
        Script::default()
    }

    /// Adds `rule` (rules are tried in order).
    pub fn rule(mut self, rule: Rule) -> Script {
        self.rules.push(rule);
        self
    }

    /// Answers a prompt containing `text` with `reply`.
    pub fn on_prompt(self, text: &str, reply: Reply) -> Script {
        self.rule(Rule::new(
            format!("prompt {text:?}"),
            When::Prompt(text.into()),
            reply,
        ))
    }

    /// Answers the request that carries the result of `tool` with `reply`.
    pub fn after_tool(self, tool: &str, reply: Reply) -> Script {
        self.rule(Rule::new(
            format!("after {tool}"),
            When::ToolResult(tool.into()),
            reply,
        ))
    }

    /// What a main request no rule matches gets.
    pub fn default_reply(mut self, reply: Reply) -> Script {
        self.default = reply;
        self
    }
}

// ---------------------------------------------------------------------------
// The request log

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/messages` offering tools: the agent loop.
    Main,
    /// `/v1/messages` without tools: titles and other helpers.
    Side,
    /// `CONNECT host:port`: an attempt to reach the outside, refused.
    Connect,
    /// Anything else.
    Other,
}

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// 1-based, in arrival order.
    pub seq: usize,
    pub method: String,
    pub path: String,
    /// Names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` if empty or not JSON).
    pub body: Value,
    pub kind: Kind,
    /// For main requests: their 1-based number among main requests.
    pub turn: usize,
    /// Which rule answered (`default`, `side`, a rule name, or empty).
    pub rule: String,
    /// Ids of the tool_use blocks this request was answered with.
    pub answered_tool_uses: Vec<String>,
    /// For `/v1/messages`: the whole reply was written (after its delay,
    /// hang or gate); false while it is being sent and when it broke off.
    pub answered: bool,
}

/// A `tool_result` block the CLI sent, with the name of the tool it answers.
#[derive(Clone, Debug)]
pub struct ToolResult {
    pub tool_use_id: String,
    /// From the assistant `tool_use` with the same id, if it is in the body.
    pub tool_name: Option<String>,
    /// The text of the result (text items joined by newlines).
    pub text: String,
    pub is_error: bool,
    pub block: Value,
}

impl Recorded {
    /// The request's header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The whole body as JSON text (for substring assertions).
    pub fn body_text(&self) -> String {
        self.body.to_string()
    }

    /// The text of the latest user turn: the prompt (or tool results) and
    /// what the CLI attached to it (reminders, the IDE selection, ...), which
    /// 2.1.332 sends as a `system` message after the user message.
    pub fn latest_turn_text(&self) -> String {
        latest_turn(&self.body)
            .iter()
            .map(|m| content_text(&m["content"]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The text of the user messages of the latest turn only.
    pub fn latest_user_text(&self) -> String {
        latest_user_turn(&self.body)
            .iter()
            .map(|m| content_text(&m["content"]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Text of every user and system message, in order.
    pub fn all_message_text(&self) -> String {
        messages(&self.body)
            .iter()
            .filter(|m| m["role"] != "assistant")
            .map(|m| content_text(&m["content"]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The tool results in the latest user turn.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        latest_tool_results(&self.body)
    }

    /// The latest user turn's result of a call to `tool`.
    pub fn tool_result(&self, tool: &str) -> Option<ToolResult> {
        self.tool_results()
            .into_iter()
            .find(|r| r.tool_name.as_deref() == Some(tool))
    }

    /// One line for failure messages.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "#{} {:?} {} {}",
            self.seq, self.kind, self.method, self.path
        );
        if self.kind == Kind::Main {
            let last = self.latest_user_text();
            let n = last.chars().count();
            let last: String = last.chars().skip(n.saturating_sub(160)).collect();
            s += &format!(
                " turn={} rule={} latest user turn: {last:?}",
                self.turn, self.rule
            );
        }
        s
    }
}

fn messages(body: &Value) -> Vec<&Value> {
    body["messages"]
        .as_array()
        .map(|ms| ms.iter().collect())
        .unwrap_or_default()
}

/// The messages after the last assistant message, oldest first: the user's
/// prompt or tool results, and the `system` messages the CLI 2.1.332 puts
/// after them (mid-conversation system beta), which carry the attachments:
/// the IDE selection, the open file, the date.
fn latest_turn(body: &Value) -> Vec<&Value> {
    let mut out: Vec<&Value> = messages(body)
        .into_iter()
        .rev()
        .take_while(|m| m["role"] != "assistant")
        .collect();
    out.reverse();
    out
}

/// The user messages of [`latest_turn`].
fn latest_user_turn(body: &Value) -> Vec<&Value> {
    latest_turn(body)
        .into_iter()
        .filter(|m| m["role"] == "user")
        .collect()
}

/// Text of a message content: a string, or text blocks and tool results'
/// texts joined by newlines.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().map(str::to_owned),
                Some("tool_result") => Some(content_text(&b["content"])),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn tool_results(message: &Value) -> Vec<&Value> {
    message["content"]
        .as_array()
        .map(|bs| bs.iter().filter(|b| b["type"] == "tool_result").collect())
        .unwrap_or_default()
}

fn latest_tool_results(body: &Value) -> Vec<ToolResult> {
    let all = messages(body);
    let name_of = |id: &str| {
        all.iter()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .find(|b| b["type"] == "tool_use" && b["id"] == id)
            .and_then(|b| b["name"].as_str().map(str::to_owned))
    };
    latest_user_turn(body)
        .into_iter()
        .flat_map(tool_results)
        .map(|b| {
            let id = b["tool_use_id"].as_str().unwrap_or_default().to_owned();
            ToolResult {
                tool_name: name_of(&id),
                tool_use_id: id,
                text: content_text(&b["content"]),
                is_error: b["is_error"].as_bool().unwrap_or(false),
                block: b.clone(),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The server

struct State {
    script: Script,
    log: Vec<Recorded>,
    main_turns: usize,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped after every recorded request.
    changed: watch::Sender<usize>,
    ids: AtomicU64,
}

impl Shared {
    fn next_id(&self, prefix: &str) -> String {
        format!(
            "{prefix}{:024x}",
            self.ids.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    fn record(&self, mut entry: Recorded) -> usize {
        let seq = {
            let mut st = self.state.lock().expect("fake API state");
            entry.seq = st.log.len() + 1;
            st.log.push(entry);
            st.log.len()
        };
        self.changed.send_replace(seq);
        seq
    }

    /// Notes that the reply to request `seq` was sent whole.
    fn mark_answered(&self, seq: usize) {
        {
            let mut st = self.state.lock().expect("fake API state");
            if let Some(entry) = st.log.get_mut(seq - 1) {
                entry.answered = true;
            }
        }
        // Wakes the waiters (the log's length is what they watch).
        self.changed.send_modify(|_| {});
    }
}

/// The running fake; stops accepting when dropped.
pub struct FakeApi {
    pub port: u16,
    shared: Arc<Shared>,
    accept: tokio::task::AbortHandle,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeApi {
    /// Listens on 127.0.0.1 (any free port) and answers from `script`.
    pub async fn start(script: Script) -> FakeApi {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind the fake API");
        FakeApi::with_listener(script, listener)
    }

    /// Listens on the 127.0.0.1 of `jail` (any free port: its loopback is
    /// its own, the host cannot reach it) and answers from `script`.
    pub async fn start_in(script: Script, jail: &Jail) -> FakeApi {
        let listener = jail.bind_tcp(0).expect("bind the fake API in the jail");
        FakeApi::with_listener(script, listener)
    }

    /// Answers from `script` on `listener` (bound by the caller, e.g. with
    /// [`Jail::bind_tcp`]); [`FakeApi::port`] is the listener's port. Needs
    /// a tokio runtime.
    pub fn with_listener(script: Script, listener: std::net::TcpListener) -> FakeApi {
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let listener = TcpListener::from_std(listener).expect("the fake API's listener");
        let port = listener.local_addr().expect("fake API address").port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                script,
                log: Vec::new(),
                main_turns: 0,
            }),
            changed: watch::channel(0).0,
            ids: AtomicU64::new(0),
        });
        let accept_shared = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = accept_shared.clone();
                tokio::spawn(async move {
                    let _ = serve_connection(stream, shared).await;
                });
            }
        });
        FakeApi {
            port,
            shared,
            accept: accept.abort_handle(),
        }
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL` and the proxies.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Replaces the script (rules already used are forgotten).
    pub fn set_script(&self, script: Script) {
        self.shared.state.lock().expect("fake API state").script = script;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .state
            .lock()
            .expect("fake API state")
            .log
            .clone()
    }

    /// The recorded main requests (the agent loop's), in order.
    pub fn main_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.kind == Kind::Main)
            .collect()
    }

    /// Hosts the CLI tried to reach through the proxy (all refused).
    pub fn outside_attempts(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| r.kind == Kind::Connect)
            .map(|r| r.path)
            .collect()
    }

    /// A handle on the request log (for failure messages of helpers that do
    /// not hold the fake).
    pub fn log_handle(&self) -> FakeLog {
        FakeLog(self.shared.clone())
    }

    /// The log, one line per request, for failure messages.
    pub fn summary(&self) -> String {
        self.requests()
            .iter()
            .map(|r| format!("  {}\n", r.summary()))
            .collect()
    }

    /// Waits until `probe` finds something in the log; panics with the log
    /// after `timeout`.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut(&[Recorded]) -> Option<T>,
    ) -> T {
        let mut rx = self.shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            {
                let st = self.shared.state.lock().expect("fake API state");
                if let Some(v) = probe(&st.log) {
                    return v;
                }
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                panic!(
                    "fake API: timed out after {timeout:?} waiting for {what}; requests:\n{}",
                    self.summary()
                );
            }
        }
    }

    /// The first main request (from the start of the log) that satisfies
    /// `pred`.
    async fn wait_main(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Recorded) -> bool,
    ) -> Recorded {
        self.wait_for(what, timeout, |log| {
            log.iter()
                .find(|r| r.kind == Kind::Main && pred(r))
                .cloned()
        })
        .await
    }

    /// The main request that carries the user's prompt containing `text`.
    pub async fn wait_prompt(&self, text: &str, timeout: Duration) -> Recorded {
        let when = When::Prompt(text.into());
        self.wait_main(&format!("a prompt {text:?}"), timeout, |r| {
            when.holds(&r.body, r.turn)
        })
        .await
    }

    /// The main request that carries the result of a call to `tool`, and
    /// that result.
    pub async fn wait_tool_result(&self, tool: &str, timeout: Duration) -> (Recorded, ToolResult) {
        self.wait_for(&format!("the result of {tool}"), timeout, |log| {
            log.iter()
                .filter(|r| r.kind == Kind::Main)
                .find_map(|r| r.tool_result(tool).map(|t| (r.clone(), t)))
        })
        .await
    }
}

/// A handle on a fake's request log.
#[derive(Clone)]
pub struct FakeLog(Arc<Shared>);

impl FakeLog {
    /// The log, one line per request (with `answered` marks).
    pub fn summary(&self) -> String {
        self.0
            .state
            .lock()
            .expect("fake API state")
            .log
            .iter()
            .map(|r| {
                let mark = if r.kind == Kind::Main && !r.answered {
                    " (not answered whole)"
                } else {
                    ""
                };
                format!("  {}{mark}\n", r.summary())
            })
            .collect()
    }
}

/// Bytes read from a connection but not used yet.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Conn {
    async fn fill(&mut self) -> std::io::Result<bool> {
        let mut chunk = [0u8; 16 << 10];
        let n = tokio::time::timeout(IDLE_TIMEOUT, self.stream.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "idle"))??;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    fn bad(why: &str) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned())
    }

    /// The next request, or `None` at a clean end of stream.
    async fn read_request(&mut self) -> std::io::Result<Option<Request>> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(Self::bad("request head too large"));
            }
            if !self.fill().await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(Self::bad("end of stream inside a request head"))
                };
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        self.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or_default().split(' ');
        let method = first.next().unwrap_or_default().to_owned();
        let path = first.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
        let body = if chunked {
            self.read_chunked().await?
        } else {
            let len: usize = match header("content-length") {
                Some(v) => v.parse().map_err(|_| Self::bad("bad Content-Length"))?,
                None => 0,
            };
            if len > MAX_BODY {
                return Err(Self::bad("body too large"));
            }
            self.read_exact_len(len).await?
        };
        Ok(Some(Request {
            method,
            path,
            headers,
            body,
        }))
    }

    async fn read_exact_len(&mut self, len: usize) -> std::io::Result<Vec<u8>> {
        while self.buf.len() < len {
            if !self.fill().await? {
                return Err(Self::bad("end of stream inside a body"));
            }
        }
        Ok(self.buf.drain(..len).collect())
    }

    async fn read_line(&mut self) -> std::io::Result<String> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD {
                return Err(Self::bad("chunk line too long"));
            }
            if !self.fill().await? {
                return Err(Self::bad("end of stream inside a chunk line"));
            }
        }
    }

    async fn read_chunked(&mut self) -> std::io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line().await?;
            let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| Self::bad("bad chunk size"))?;
            if body.len() + size > MAX_BODY {
                return Err(Self::bad("body too large"));
            }
            if size == 0 {
                // Trailers, up to the empty line.
                while !self.read_line().await?.is_empty() {}
                return Ok(body);
            }
            body.extend(self.read_exact_len(size).await?);
            self.read_line().await?;
        }
    }

    async fn send_json(&mut self, status: u16, body: &Value, close: bool) -> std::io::Result<()> {
        let data = body.to_string();
        let reason = match status {
            200 => "OK",
            403 => "Forbidden",
            404 => "Not Found",
            _ => "Error",
        };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             request-id: req_fake\r\nConnection: {}\r\n\r\n",
            data.len(),
            if close { "close" } else { "keep-alive" }
        );
        self.stream.write_all(head.as_bytes()).await?;
        self.stream.write_all(data.as_bytes()).await?;
        self.stream.flush().await
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let mut conn = Conn {
        stream,
        buf: Vec::new(),
    };
    while let Some(req) = conn.read_request().await? {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let mut entry = Recorded {
            seq: 0,
            method: req.method.clone(),
            path: req.path.clone(),
            headers: req.headers.clone(),
            body: body.clone(),
            kind: Kind::Other,
            turn: 0,
            rule: String::new(),
            answered_tool_uses: Vec::new(),
            answered: false,
        };
        let route = req.path.split('?').next().unwrap_or_default().to_owned();
        match (req.method.as_str(), route.as_str()) {
            ("CONNECT", _) => {
                entry.kind = Kind::Connect;
                shared.record(entry);
                conn.stream
                    .write_all(
                        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .await?;
                return Ok(());
            }
            ("POST", "/v1/messages") if body.is_object() => {
                let (kind, turn, rule, reply) = choose(&shared, &body);
                let reply = with_ids(&shared, reply);
                entry.kind = kind;
                entry.turn = turn;
                entry.rule = rule;
                entry.answered_tool_uses = reply
                    .blocks
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolUse { id, .. } => id.clone(),
                        _ => None,
                    })
                    .collect();
                let seq = shared.record(entry);
                if answer_messages(&mut conn, &shared, &body, &reply).await? {
                    shared.mark_answered(seq);
                }
                return Ok(());
            }
            ("POST", "/v1/messages/count_tokens") => {
                shared.record(entry);
                let tokens = (req.body.len() / 4).max(1);
                conn.send_json(200, &json!({"input_tokens": tokens}), false)
                    .await?;
            }
            ("GET", "/v1/models") => {
                shared.record(entry);
                let list = json!({"data": [model("claude-sonnet-4-5"), model("claude-haiku-4-5")],
                                  "has_more": false, "first_id": "claude-sonnet-4-5", "last_id": "claude-haiku-4-5"});
                conn.send_json(200, &list, false).await?;
            }
            ("GET", p) if p.starts_with("/v1/models/") => {
                shared.record(entry);
                let id = p.rsplit('/').next().unwrap_or_default();
                conn.send_json(200, &model(id), false).await?;
            }
            ("GET" | "HEAD", _) => {
                shared.record(entry);
                conn.send_json(200, &json!({}), false).await?;
            }
            _ => {
                shared.record(entry);
                let err = json!({"type": "error", "error": {"type": "not_found_error",
                                 "message": format!("fake API: no route {route}")}});
                conn.send_json(404, &err, false).await?;
            }
        }
    }
    Ok(())
}

fn model(id: &str) -> Value {
    json!({"type": "model", "id": id, "display_name": id, "created_at": "2025-01-01T00:00:00Z"})
}

/// Classifies a `/v1/messages` body and picks its reply.
fn choose(shared: &Shared, body: &Value) -> (Kind, usize, String, Reply) {
    let offers_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    if !offers_tools {
        let fmt = &body["output_config"]["format"];
        let text = if fmt["type"] == "json_schema" {
            schema_stub(&fmt["schema"]).to_string()
        } else {
            "Fake side reply".to_owned()
        };
        return (Kind::Side, 0, "side".into(), Reply::text(text));
    }
    let mut st = shared.state.lock().expect("fake API state");
    st.main_turns += 1;
    let turn = st.main_turns;
    for rule in st.script.rules.iter_mut() {
        if rule.once && rule.used {
            continue;
        }
        if rule.when.holds(body, turn) {
            rule.used = true;
            return (Kind::Main, turn, rule.name.clone(), rule.reply.clone());
        }
    }
    (
        Kind::Main,
        turn,
        "default".into(),
        st.script.default.clone(),
    )
}

/// Gives every tool use of `reply` an id.
fn with_ids(shared: &Shared, mut reply: Reply) -> Reply {
    for b in &mut reply.blocks {
        if let Block::ToolUse { id, .. } = b
            && id.is_none()
        {
            *id = Some(shared.next_id("toolu_fake"));
        }
    }
    reply
}

/// The smallest value that fits a (simple) JSON schema; the CLI's session
/// title request wants `{"title": string}`.
fn schema_stub(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("object") => {
            let props = schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let keys: Vec<String> = match schema["required"].as_array() {
                Some(req) => req
                    .iter()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect(),
                None => props.keys().cloned().collect(),
            };
            Value::Object(
                keys.into_iter()
                    .map(|k| {
                        let v = schema_stub(props.get(&k).unwrap_or(&Value::Null));
                        (k, v)
                    })
                    .collect(),
            )
        }
        Some("array") => json!([]),
        Some("number" | "integer") => json!(0),
        Some("boolean") => json!(false),
        Some("null") => Value::Null,
        _ => json!("Fake title"),
    }
}

fn usage(body: &Value) -> Value {
    let input = (body["messages"].to_string().len() / 4).max(1);
    json!({"input_tokens": input, "cache_creation_input_tokens": 0,
           "cache_read_input_tokens": 0, "output_tokens": 5})
}

fn stop_reason(reply: &Reply) -> String {
    reply.stop_reason.clone().unwrap_or_else(|| {
        if reply
            .blocks
            .iter()
            .any(|b| matches!(b, Block::ToolUse { .. }))
        {
            "tool_use".into()
        } else {
            "end_turn".into()
        }
    })
}

fn block_json(b: &Block) -> Value {
    match b {
        Block::Text(t) => json!({"type": "text", "text": t}),
        Block::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::Thinking {
            thinking,
            signature,
        } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
    }
}

/// Splits `s` into up to three non-empty pieces on char boundaries, so the
/// CLI's partial-message code runs.
fn pieces(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= 1 {
        return vec![s.to_owned()];
    }
    chars
        .chunks(chars.len().div_ceil(3))
        .map(|c| c.iter().collect())
        .collect()
}

/// Answers one `/v1/messages` request; true when the whole reply was sent
/// (not after a hang or a deliberately broken stream).
async fn answer_messages(
    conn: &mut Conn,
    shared: &Shared,
    body: &Value,
    reply: &Reply,
) -> std::io::Result<bool> {
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let model = body["model"].as_str().unwrap_or("claude-fake").to_owned();
    if let Some((status, kind, message)) = &reply.error {
        let err = json!({"type": "error", "error": {"type": kind, "message": message},
                         "request_id": "req_fake_error"});
        conn.send_json(*status, &err, true).await?;
        return Ok(true);
    }
    if body["stream"] != true
        && let Some((status, kind, message)) = &reply.broken
    {
        // The CLI's fallback after the broken stream: fails too.
        let err = json!({"type": "error", "error": {"type": kind, "message": message},
                         "request_id": "req_fake_error"});
        conn.send_json(*status, &err, true).await?;
        return Ok(true);
    }
    let msg_id = shared.next_id("msg_fake");
    if body["stream"] != true {
        let msg = json!({"id": msg_id, "type": "message", "role": "assistant", "model": model,
                         "content": reply.blocks.iter().map(block_json).collect::<Vec<_>>(),
                         "stop_reason": stop_reason(reply), "stop_sequence": null, "usage": usage(body)});
        conn.send_json(200, &msg, false).await?;
        return Ok(true);
    }
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n\
                Cache-Control: no-cache\r\nrequest-id: req_fake\r\nConnection: close\r\n\r\n";
    let mut out = String::from(head);
    let event = |out: &mut String, name: &str, data: Value| {
        *out += &format!("event: {name}\ndata: {data}\n\n");
    };
    let mut start_usage = usage(body);
    start_usage["output_tokens"] = json!(1);
    event(
        &mut out,
        "message_start",
        json!({"type": "message_start", "message": {"id": msg_id, "type": "message", "role": "assistant",
               "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    );
    if let Some(hang) = reply.hang {
        conn.stream.write_all(out.as_bytes()).await?;
        conn.stream.flush().await?;
        tokio::time::sleep(hang).await;
        return Ok(false);
    }
    event(&mut out, "ping", json!({"type": "ping"}));
    // Content deltas sent so far: where the slow, gated and broken streams
    // pause or stop.
    let mut deltas = 0usize;
    for (i, b) in reply.blocks.iter().enumerate() {
        match b {
            Block::Text(text) => {
                event(
                    &mut out,
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                );
                for p in pieces(text) {
                    if !pace(reply, &mut deltas, &mut out, conn).await? {
                        return Ok(false);
                    }
                    event(
                        &mut out,
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": p}}),
                    );
                }
            }
            Block::ToolUse { id, name, input } => {
                event(
                    &mut out,
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i,
                           "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                );
                for p in pieces(&input.to_string()) {
                    if !pace(reply, &mut deltas, &mut out, conn).await? {
                        return Ok(false);
                    }
                    event(
                        &mut out,
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i,
                               "delta": {"type": "input_json_delta", "partial_json": p}}),
                    );
                }
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                event(
                    &mut out,
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i,
                           "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                );
                if !pace(reply, &mut deltas, &mut out, conn).await? {
                    return Ok(false);
                }
                event(
                    &mut out,
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": thinking}}),
                );
                event(
                    &mut out,
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": signature}}),
                );
            }
        }
        event(
            &mut out,
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
    }
    if reply.broken.is_some() {
        // Fewer than two deltas: break before the end all the same.
        conn.stream.write_all(out.as_bytes()).await?;
        conn.stream.flush().await?;
        return Ok(false);
    }
    event(
        &mut out,
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
               "usage": {"output_tokens": 5}}),
    );
    event(&mut out, "message_stop", json!({"type": "message_stop"}));
    conn.stream.write_all(out.as_bytes()).await?;
    conn.stream.flush().await?;
    conn.stream.shutdown().await?;
    Ok(true)
}

/// Called before each content delta of a streaming reply: flushes and waits
/// as the reply's pacing says. False: stop here (a broken stream).
async fn pace(
    reply: &Reply,
    deltas: &mut usize,
    out: &mut String,
    conn: &mut Conn,
) -> std::io::Result<bool> {
    if reply.broken.is_some() && *deltas == 1 {
        conn.stream.write_all(out.as_bytes()).await?;
        conn.stream.flush().await?;
        return Ok(false);
    }
    if let Some((gate, after)) = &reply.gate
        && *deltas == *after
        && !gate.is_open()
    {
        conn.stream.write_all(out.as_bytes()).await?;
        conn.stream.flush().await?;
        out.clear();
        gate.wait(MAX_DELAY).await;
    }
    if *deltas > 0 && !reply.delta_delay.is_zero() {
        conn.stream.write_all(out.as_bytes()).await?;
        conn.stream.flush().await?;
        out.clear();
        tokio::time::sleep(reply.delta_delay).await;
    }
    *deltas += 1;
    Ok(true)
}
