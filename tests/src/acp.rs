//! An ACP client for the tests, speaking to `moonkale-service acp` the way
//! an editor's agent panel does: the agent is a child process, one JSON
//! message per line on its stdin/stdout. Everything the agent sends is
//! kept in order (`log`), so a test asserts on what a user would have
//! seen; every wait has a deadline.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::STEP;

/// A child process whose stdout is one JSON value per line (the ACP agent,
/// acpx `--format json`, the SDK driver's events), read as it comes and
/// kept in order; every wait has a deadline.
pub struct JsonPeer {
    name: &'static str,
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<Value>,
    /// Everything it printed so far, in order (a line that is not JSON is
    /// kept as a string).
    pub log: Vec<Value>,
    /// How much of `log` a [`JsonPeer::next_within`] went past.
    pub seen: usize,
    stderr: PathBuf,
}

impl JsonPeer {
    /// Starts `cmd` with piped stdin and stdout; its stderr goes to
    /// `stderr`.
    pub fn spawn(name: &'static str, mut cmd: Command, stderr: &Path) -> JsonPeer {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(stderr).unwrap())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
                let _ = tx.send(value);
            }
        });
        JsonPeer {
            name,
            child,
            stdin,
            lines,
            log: Vec::new(),
            seen: 0,
            stderr: stderr.to_owned(),
        }
    }

    pub async fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    pub async fn send(&mut self, message: Value) {
        self.send_line(&message.to_string()).await;
    }

    /// Where in `log` (from its start) the first line matching `pred` is,
    /// waiting up to `timeout` for it.
    pub async fn position_within(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(i) = self.log.iter().position(&pred) {
                return i;
            }
            self.pull(what, deadline).await;
        }
    }

    /// The first line (from the start) matching `pred`, waiting up to
    /// `timeout` for it.
    pub async fn wait_for_within(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let i = self.position_within(what, timeout, pred).await;
        self.log[i].clone()
    }

    /// The first line after those a previous `next_within` took that
    /// matches `pred`, waiting up to `timeout` for it.
    pub async fn next_within(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(i) = self.log[self.seen..].iter().position(&pred) {
                self.seen += i + 1;
                return self.log[self.seen - 1].clone();
            }
            self.pull(what, deadline).await;
        }
    }

    async fn pull(&mut self, what: &str, deadline: tokio::time::Instant) {
        match tokio::time::timeout_at(deadline, self.lines.recv()).await {
            Ok(Some(m)) => self.log.push(m),
            Ok(None) => panic!("{} ended before {what}\n{}", self.name, self.describe()),
            Err(_) => panic!("no {what} from {} in time\n{}", self.name, self.describe()),
        }
    }

    /// Takes what arrived without waiting.
    pub fn drain(&mut self) {
        while let Ok(m) = self.lines.try_recv() {
            self.log.push(m);
        }
    }

    /// The lines it printed that were not JSON.
    pub fn non_json(&mut self) -> Vec<String> {
        self.drain();
        self.log
            .iter()
            .filter_map(|m| m.as_str().map(str::to_owned))
            .collect()
    }

    /// Closes its stdin, reads its stdout to the end and waits for it to
    /// exit; its exit code.
    pub async fn finish(&mut self, timeout: Duration) -> Option<i32> {
        drop(self.stdin.take());
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(m)) => self.log.push(m),
                Ok(None) => break,
                Err(_) => panic!("{} did not end in time\n{}", self.name, self.describe()),
            }
        }
        let status = tokio::time::timeout_at(deadline, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit in time", self.name))
            .unwrap();
        status.code()
    }

    /// What it printed (the last 40 lines, each cut at 600 bytes) and its
    /// stderr, for a failure message.
    pub fn describe(&self) -> String {
        let mut out = String::from("--- stdout ---\n");
        for m in self.log.iter().rev().take(40).rev() {
            out += &crate::short(&m.to_string(), 600);
            out.push('\n');
        }
        out += "--- stderr ---\n";
        out += &std::fs::read_to_string(&self.stderr).unwrap_or_default();
        out
    }
}

/// One running `moonkale-service acp` and what it sent ([`JsonPeer`]'s
/// `log`, `child`), with the client's side of ACP's JSON-RPC.
pub struct AcpAgent {
    peer: JsonPeer,
    next_id: i64,
}

impl std::ops::Deref for AcpAgent {
    type Target = JsonPeer;

    fn deref(&self) -> &JsonPeer {
        &self.peer
    }
}

impl std::ops::DerefMut for AcpAgent {
    fn deref_mut(&mut self) -> &mut JsonPeer {
        &mut self.peer
    }
}

impl AcpAgent {
    /// Starts `cmd` (a `moonkale-service acp …` command) with piped stdio;
    /// its stderr goes to `stderr`.
    pub fn spawn(cmd: Command, stderr: &Path) -> AcpAgent {
        AcpAgent {
            peer: JsonPeer::spawn("the acp agent", cmd, stderr),
            next_id: 0,
        }
    }

    /// Sends a request; its id.
    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Answers the agent's request `id`.
    pub async fn respond(&mut self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// Sends `text` as a prompt of `session`; the request's id (its
    /// answer comes at the end of the turn).
    pub async fn prompt(&mut self, session: &str, text: &str) -> i64 {
        self.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        )
        .await
    }

    /// The next `session/request_permission` (after those taken).
    pub async fn permission(&mut self, what: &str) -> Value {
        self.next_matching(what, is_permission_request).await
    }

    /// Answers a permission request with the option `option`.
    pub async fn choose(&mut self, ask: &Value, option: &str) {
        self.respond(
            &ask["id"],
            json!({"outcome": {"outcome": "selected", "optionId": option}}),
        )
        .await;
    }

    /// A request and its answer: the result, or the error object.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.request(method, params).await;
        self.response(id, STEP).await
    }

    /// The answer to request `id`, waiting up to `timeout`.
    pub async fn response(&mut self, id: i64, timeout: Duration) -> Result<Value, Value> {
        let what = format!("the response to request {id}");
        let m = self
            .wait_any(&what, timeout, |m| {
                m["id"] == id && m.get("method").is_none()
            })
            .await;
        match m.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(m["result"].clone()),
        }
    }

    /// The first message from the start of the log matching `pred`
    /// (waiting up to [`STEP`] for it); later `next_matching` calls look
    /// past it.
    pub async fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_any(what, STEP, pred).await
    }

    /// The first message after those a previous wait took that matches.
    pub async fn next_matching(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.peer.next_within(what, STEP, pred).await
    }

    async fn wait_any(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let i = self.peer.position_within(what, timeout, pred).await;
        self.peer.seen = self.peer.seen.max(i + 1);
        self.peer.log[i].clone()
    }

    /// The `session/update`s of `session` so far, in order.
    pub fn updates(&mut self, session: &str) -> Vec<Value> {
        self.drain();
        self.log
            .iter()
            .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
            .map(|m| m["params"]["update"].clone())
            .collect()
    }

    /// The text of `session`'s updates of `kind` (e.g.
    /// `agent_message_chunk`), joined.
    pub fn chunks(&mut self, session: &str, kind: &str) -> String {
        self.updates(session)
            .iter()
            .filter(|u| u["sessionUpdate"] == kind)
            .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
            .collect()
    }

    /// Waits until the joined text of `session`'s `kind` updates passes
    /// `pred`; that text.
    pub async fn wait_text(
        &mut self,
        session: &str,
        kind: &str,
        what: &str,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            let text = self.chunks(session, kind);
            if pred(&text) {
                return text;
            }
            self.pull(what, deadline).await;
        }
    }

    /// `initialize` as an editor's panel sends it.
    pub async fn initialize(&mut self) -> Value {
        self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {
                "fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
                "clientInfo": {"name": "moonkale-tests", "version": "0"}}),
        )
        .await
        .expect("initialize")
    }

    /// `session/new` in `cwd` with no MCP servers; the session id.
    pub async fn new_session(&mut self, cwd: &Path) -> String {
        let reply = self
            .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await
            .expect("session/new");
        reply["sessionId"].as_str().unwrap().to_owned()
    }

    /// Closes its stdin and waits for it to exit; its exit code.
    pub async fn close(mut self) -> Option<i32> {
        self.peer.finish(STEP).await
    }
}

/// Whether `m` is the agent's `session/request_permission`.
pub fn is_permission_request(m: &Value) -> bool {
    m["method"] == "session/request_permission" && m.get("id").is_some()
}
