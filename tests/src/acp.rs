//! An ACP client for the tests, speaking to `moonkale-service acp` the way
//! an editor's agent panel does: the agent is a child process, one JSON
//! message per line on its stdin/stdout. Everything the agent sends is
//! kept in order (`log`), so a test asserts on what a user would have
//! seen; every wait has a deadline.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::STEP;

/// One running `moonkale-service acp` and what it sent.
pub struct AcpAgent {
    pub child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<Value>,
    /// Every message the agent sent, in order (responses included).
    pub log: Vec<Value>,
    /// How many of `log` were taken by a `wait_for`.
    seen: usize,
    next_id: i64,
    /// Lines on its stdout that were not JSON (must stay empty).
    pub garbage: mpsc::UnboundedReceiver<String>,
    stderr: std::path::PathBuf,
}

impl AcpAgent {
    /// Starts `cmd` (a `moonkale-service acp …` command) with piped stdio;
    /// its stderr goes to `stderr`.
    pub fn spawn(mut cmd: tokio::process::Command, stderr: &Path) -> AcpAgent {
        let log = std::fs::File::create(stderr).unwrap();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("starting moonkale-service acp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        let (bad, garbage) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => {
                        let _ = bad.send(line);
                    }
                }
            }
        });
        AcpAgent {
            child,
            stdin,
            lines,
            log: Vec::new(),
            seen: 0,
            next_id: 0,
            garbage,
            stderr: stderr.to_owned(),
        }
    }

    pub async fn send_line(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn send(&mut self, message: Value) {
        self.send_line(&message.to_string()).await;
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
    /// (waiting up to [`STEP`] for it).
    pub async fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_any(what, STEP, pred).await
    }

    /// The first message after those a previous wait took that matches.
    pub async fn next_matching(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let from = self.seen;
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            if let Some(i) = self.log[from..].iter().position(&pred) {
                self.seen = from + i + 1;
                return self.log[from + i].clone();
            }
            self.pull(what, deadline).await;
        }
    }

    async fn wait_any(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(i) = self.log.iter().position(&pred) {
                self.seen = self.seen.max(i + 1);
                return self.log[i].clone();
            }
            self.pull(what, deadline).await;
        }
    }

    async fn pull(&mut self, what: &str, deadline: tokio::time::Instant) {
        match tokio::time::timeout_at(deadline, self.lines.recv()).await {
            Ok(Some(m)) => self.log.push(m),
            Ok(None) => panic!(
                "the acp agent closed its stdout while waiting for {what}\nit sent:\n{}\nits stderr:\n{}",
                self.describe(),
                self.stderr_text()
            ),
            Err(_) => panic!(
                "no {what} from the acp agent in time\nit sent:\n{}\nits stderr:\n{}",
                self.describe(),
                self.stderr_text()
            ),
        }
    }

    /// Takes what arrived without waiting.
    pub fn drain(&mut self) {
        while let Ok(m) = self.lines.try_recv() {
            self.log.push(m);
        }
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

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn describe(&self) -> String {
        let mut out = String::new();
        for m in self.log.iter().rev().take(40).rev() {
            let mut line = m.to_string();
            if line.len() > 400 {
                line.truncate(400);
                line.push('…');
            }
            out += &line;
            out.push('\n');
        }
        out
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
        drop(self.stdin);
        tokio::time::timeout(STEP, self.child.wait())
            .await
            .expect("the acp agent exits when its stdin closes")
            .ok()?
            .code()
    }
}

/// Whether `m` is the agent's `session/request_permission`.
pub fn is_permission_request(m: &Value) -> bool {
    m["method"] == "session/request_permission" && m.get("id").is_some()
}
