//! Real ACP clients start `moonkale-service acp` as their agent, the way a
//! user runs them: acpx (a headless CLI), Toad (a TUI, in a pty, typed at
//! like a person) and the official SDK's scripted client
//! (`tests/acp/driver.mjs`, which checks every message of the wire against
//! the ACP v1 schema). The agent is the real service hosting the real CLI
//! against the fake API.
//!
//! The peers are pinned by `scripts/install-test-peers.sh`; a missing one
//! fails the test with that advice (nothing is skipped).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use moonkale_tests::fakeapi::{Block, Gate, Reply, Script};
use moonkale_tests::world::World;
use moonkale_tests::{STEP, peer_bin, repo_root};
use serde_json::{Value, json};
use tokio::process::Command;

use moonkale_tests::acp::JsonPeer;
use moonkale_tests::agent::write_script;

use crate::model_writes;

// ---------------------------------------------------------------------------
// Shared

/// The command line an ACP client is given to start its agent: our
/// `moonkale-service acp` on the world's workspace (no spaces in either
/// path, so a client splitting it like a shell gets it right).
fn agent_line(w: &World) -> String {
    let bin = moonkale_tests::bin("moonkale-service");
    format!(
        "{} acp --workspace {}",
        bin.display(),
        w.sb.workspace.display()
    )
}

/// The environment `moonkale-service` gets in this world (the sandbox's
/// HOME and runtime directory, the CLI to run; some variables removed):
/// given to a peer, the agent it starts finds the world's service.
fn world_env(w: &World) -> Vec<(OsString, Option<OsString>)> {
    let cmd = w.command(&[]);
    cmd.as_std()
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.map(OsStr::to_owned)))
        .collect()
}

/// `program` with [`world_env`], in the workspace.
fn peer_command(w: &World, program: &Path) -> Command {
    let mut cmd = Command::new(program);
    for (k, v) in world_env(w) {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.current_dir(&w.sb.workspace).kill_on_drop(true);
    cmd
}

fn is_update(m: &Value, kind: &str) -> bool {
    m["method"] == "session/update" && m["params"]["update"]["sessionUpdate"] == kind
}

// ---------------------------------------------------------------------------
// acpx

fn acpx_bin() -> PathBuf {
    peer_bin("MOONKALE_ACPX", "acp/node_modules/.bin/acpx")
}

/// `acpx --agent <ours> --cwd <workspace> <args>`, its state in the
/// sandbox's home (`~/.acpx`).
fn acpx(w: &World, args: &[&str]) -> Command {
    let mut cmd = peer_command(w, &acpx_bin());
    cmd.arg("--agent")
        .arg(agent_line(w))
        .arg("--cwd")
        .arg(&w.sb.workspace)
        .args(args)
        .stdin(Stdio::null());
    cmd
}

/// What one acpx run printed: `--format json` is the wire, one JSON-RPC
/// message per line, both directions.
struct AcpxRun {
    code: Option<i32>,
    wire: Vec<Value>,
    stdout: String,
    stderr: String,
}

impl AcpxRun {
    fn from_output(out: std::process::Output) -> AcpxRun {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        AcpxRun {
            code: out.status.code(),
            wire: stdout
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// The agent's answer: the text of its message chunks, joined.
    fn answer(&self) -> String {
        self.wire
            .iter()
            .filter(|m| is_update(m, "agent_message_chunk"))
            .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
            .collect()
    }

    /// The first request of `method` and the response to it: the next
    /// message with its id that is not a request (both sides number their
    /// requests from the same few ids).
    fn exchange(&self, method: &str) -> (&Value, &Value) {
        let at = self
            .wire
            .iter()
            .position(|m| m["method"] == method && m.get("id").is_some())
            .unwrap_or_else(|| panic!("acpx: no {method} on the wire\n{}", self.describe()));
        let request = &self.wire[at];
        let reply = self.wire[at + 1..]
            .iter()
            .find(|m| m.get("method").is_none() && m["id"] == request["id"])
            .unwrap_or_else(|| {
                panic!(
                    "acpx: no response to {method} on the wire\n{}",
                    self.describe()
                )
            });
        (request, reply)
    }
}

/// Runs acpx to its end (within two steps: a CLI start and a turn).
async fn run_acpx(w: &World, args: &[&str]) -> AcpxRun {
    let out = tokio::time::timeout(2 * STEP, acpx(w, args).output())
        .await
        .unwrap_or_else(|_| panic!("acpx {args:?} did not finish in {:?}", 2 * STEP))
        .expect("running acpx");
    AcpxRun::from_output(out)
}

/// `acpx exec --approve-all`: the Write is asked, acpx picks the allow
/// option, the file is written and the prompt ends `end_turn`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acpx_exec_approve_all_writes_the_file() {
    let w = World::builder().agent().start().await;
    let path = model_writes(
        &w,
        "write the acpx file",
        "acpx.txt",
        "FROM ACPX\n",
        "ACPX_WROTE_IT",
    );
    let run = run_acpx(
        &w,
        &[
            "--format",
            "json",
            "--approve-all",
            "exec",
            "write the acpx file",
        ],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let (ask, answer) = run.exchange("session/request_permission");
    assert_eq!(ask["params"]["toolCall"]["title"], "Write acpx.txt");
    let allow = ask["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "allow_once")
        .expect("an allow_once option");
    assert_eq!(
        answer["result"]["outcome"],
        json!({"outcome": "selected", "optionId": allow["optionId"]}),
        "{}",
        run.describe()
    );
    let (_, reply) = run.exchange("session/prompt");
    assert_eq!(
        reply["result"]["stopReason"],
        "end_turn",
        "{}",
        run.describe()
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "FROM ACPX\n");
    assert_eq!(run.answer(), "ACPX_WROTE_IT", "{}", run.describe());
}

/// Without `--approve-all` and without a terminal to ask on, acpx rejects
/// the Write and exits 5 (permission denied); the file is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acpx_exec_without_a_tty_rejects_the_write() {
    let w = World::builder()
        .agent()
        .file("acpx.txt", "MINE\n")
        .start()
        .await;
    let path = model_writes(
        &w,
        "write the acpx file",
        "acpx.txt",
        "THEIRS\n",
        "ACPX_DONE",
    );
    let run = run_acpx(&w, &["--format", "json", "exec", "write the acpx file"]).await;
    assert_eq!(run.code, Some(5), "{}", run.describe());
    let (ask, answer) = run.exchange("session/request_permission");
    let reject = ask["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "reject_once")
        .expect("a reject_once option");
    assert_eq!(
        answer["result"]["outcome"],
        json!({"outcome": "selected", "optionId": reject["optionId"]}),
        "{}",
        run.describe()
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "MINE\n");
}

/// A persistent `acpx prompt` streams while a second acpx process runs
/// `acpx cancel`: the queue owner sends `session/cancel` and the prompt
/// ends `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acpx_cancel_from_another_process_ends_the_turn_cancelled() {
    let gate = Gate::new();
    let w = World::builder()
        .agent()
        .script(Script::new().on_prompt(
            "long acpx answer",
            Reply::text("ACPX_CANCEL_ME slowly, in pieces, never whole").gated(&gate, 1),
        ))
        .start()
        .await;
    // A persistent prompt goes to the cwd's session, made first.
    let created = run_acpx(&w, &["--format", "json", "sessions", "new"]).await;
    assert_eq!(created.code, Some(0), "{}", created.describe());
    let mut prompt = JsonPeer::spawn(
        "acpx prompt",
        acpx(&w, &["--format", "json", "prompt", "long acpx answer"]),
        &w.sb.root.join("acpx-prompt.stderr"),
    );
    let chunk = prompt
        .wait_for_within("the first chunk", STEP, |m| {
            is_update(m, "agent_message_chunk")
        })
        .await;
    let session = chunk["params"]["sessionId"].clone();
    let cancel = run_acpx(&w, &["--format", "json", "cancel"]).await;
    assert_eq!(cancel.code, Some(0), "{}", cancel.describe());
    assert!(
        cancel
            .wire
            .iter()
            .any(|m| m["action"] == "cancel_result" && m["cancelled"] == true),
        "{}",
        cancel.describe()
    );
    let cancelled = prompt
        .wait_for_within("the prompt's reply", STEP, |m| {
            m.get("method").is_none() && m["result"]["stopReason"].is_string()
        })
        .await;
    assert_eq!(cancelled["result"]["stopReason"], "cancelled");
    let notice = prompt
        .wait_for_within("session/cancel", STEP, |m| m["method"] == "session/cancel")
        .await;
    assert_eq!(notice["params"]["sessionId"], session);
    gate.open();
    assert_eq!(prompt.finish(STEP).await, Some(0), "{}", prompt.describe());
}

/// The processes of this world with `arg` among their arguments.
fn processes_with_arg(w: &World, arg: &str) -> Vec<i32> {
    let arg = format!("\0{arg}\0");
    moonkale_tests::agent::processes_in(&w.sb.root)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = [b"\0", c.as_slice()].concat();
                c.windows(arg.len()).any(|w| w == arg.as_bytes())
            })
        })
        .collect()
}

/// acpx's queue owners in this world, and the agents they started.
fn acpx_owners_and_agents(w: &World) -> Vec<i32> {
    let mut pids = processes_with_arg(w, "__queue-owner");
    pids.extend(processes_with_arg(w, "acp"));
    pids
}

/// A persistent acpx session outlives its agent process: once the queue
/// owner has gone idle and stopped its agent (`--ttl 1`), the next
/// `acpx prompt` starts a new one that reconnects with `session/resume`
/// (acpx has the history; it would use `session/load` without it), and the
/// conversation goes on: the same session, and the model is sent the
/// earlier exchange.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acpx_prompt_after_the_agent_was_replaced_resumes_the_session() {
    let w = World::builder()
        .agent()
        .script(
            Script::new()
                .on_prompt("first acpx question", Reply::text("FIRST_ACPX_ANSWER"))
                .on_prompt("second acpx question", Reply::text("SECOND_ACPX_ANSWER")),
        )
        .start()
        .await;
    let created = run_acpx(&w, &["--format", "json", "sessions", "new"]).await;
    assert_eq!(created.code, Some(0), "{}", created.describe());
    // A queue owner that stops after a second idle.
    let prompt_with_ttl = async |question: &str| {
        run_acpx(&w, &["--format", "json", "--ttl", "1", "prompt", question]).await
    };
    let first = prompt_with_ttl("first acpx question").await;
    assert_eq!(first.code, Some(0), "{}", first.describe());
    assert_eq!(first.answer(), "FIRST_ACPX_ANSWER", "{}", first.describe());
    let gone = moonkale_tests::poll_until(STEP, async || {
        acpx_owners_and_agents(&w).is_empty().then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the idle queue owner did not stop: {:?}",
        acpx_owners_and_agents(&w)
    );
    let second = prompt_with_ttl("second acpx question").await;
    assert_eq!(second.code, Some(0), "{}", second.describe());
    // A new agent process (initialized anew) is handed the same session.
    let session = &first.exchange("session/prompt").0["params"]["sessionId"];
    assert!(second.exchange("initialize").1.get("result").is_some());
    let (load, loaded) = second.exchange("session/resume");
    assert_eq!(
        &load["params"]["sessionId"],
        session,
        "{}",
        second.describe()
    );
    assert!(loaded.get("result").is_some(), "{}", second.describe());
    assert!(
        !second.wire.iter().any(|m| m["method"] == "session/new"),
        "{}",
        second.describe()
    );
    let (prompt, reply) = second.exchange("session/prompt");
    assert_eq!(&prompt["params"]["sessionId"], session);
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    assert_eq!(
        second.answer(),
        "SECOND_ACPX_ANSWER",
        "{}",
        second.describe()
    );
    let request = w.fake.wait_prompt("second acpx question", STEP).await;
    let history = request.body_text();
    assert!(
        history.contains("first acpx question") && history.contains("FIRST_ACPX_ANSWER"),
        "the model was not sent the earlier exchange: {history}"
    );
}

// ---------------------------------------------------------------------------
// Toad, in a pty

fn toad_bin() -> PathBuf {
    peer_bin("MOONKALE_TOAD", "toad-venv/bin/toad")
}

const ROWS: u16 = 45;
const COLS: u16 = 150;

/// A program on a pseudo-terminal; its output goes through a vt100 screen
/// that the test waits on (the approach of `moonkale_tests::claude_cli`).
struct Tui {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    writer: Box<dyn std::io::Write + Send>,
    _master: Box<dyn portable_pty::MasterPty + Send>,
    /// The screen, and whether the program's end of the pty closed.
    term: std::sync::Arc<std::sync::Mutex<(vt100::Parser, bool)>>,
    changed: tokio::sync::watch::Receiver<u64>,
}

impl Tui {
    fn spawn(cmd: portable_pty::CommandBuilder) -> Tui {
        let pty = portable_pty::native_pty_system()
            .openpty(portable_pty::PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pty");
        let child = pty.slave.spawn_command(cmd).expect("spawn on the pty");
        drop(pty.slave);
        let mut reader = pty.master.try_clone_reader().expect("pty reader");
        let writer = pty.master.take_writer().expect("pty writer");
        let parser = vt100::Parser::new(
            std::num::NonZeroU16::new(ROWS).unwrap(),
            std::num::NonZeroU16::new(COLS).unwrap(),
            0,
        );
        let term = std::sync::Arc::new(std::sync::Mutex::new((parser, false)));
        let (tx, changed) = tokio::sync::watch::channel(0u64);
        let shared = term.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 << 10];
            while let Ok(n @ 1..) = std::io::Read::read(&mut reader, &mut buf) {
                shared.lock().unwrap().0.process(&buf[..n]);
                tx.send_modify(|g| *g += 1);
            }
            shared.lock().unwrap().1 = true;
            tx.send_modify(|g| *g += 1);
        });
        Tui {
            child,
            writer,
            _master: pty.master,
            term,
            changed,
        }
    }

    fn screen(&self) -> String {
        let t = self.term.lock().unwrap();
        let rows: Vec<String> =
            t.0.screen()
                .rows(0, COLS)
                .map(|r| r.trim_end().to_owned())
                .collect();
        rows.join("\n").trim_end().to_owned()
    }

    /// Waits until `pred` holds for the screen; that screen. Fails with the
    /// screen after `timeout`, or when the program is gone.
    async fn wait_screen(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            self.changed.borrow_and_update();
            let screen = self.screen();
            if pred(&screen) {
                return screen;
            }
            let ended = self.term.lock().unwrap().1;
            if ended
                || tokio::time::timeout_at(deadline, self.changed.changed())
                    .await
                    .is_err()
            {
                let screen = self.screen();
                if pred(&screen) {
                    return screen;
                }
                panic!(
                    "{} waiting for {what}\n--- screen ---\n{screen}",
                    if ended {
                        "the program ended"
                    } else {
                        "timed out"
                    }
                );
            }
        }
    }

    async fn wait_text(&mut self, text: &str, timeout: Duration) -> String {
        self.wait_screen(&format!("{text:?} on the screen"), timeout, |s| {
            s.contains(text)
        })
        .await
    }

    fn keys(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
        self.writer.flush().unwrap();
    }

    /// Types `text`, waits until the input box shows it, presses Enter.
    async fn submit(&mut self, text: &str) {
        let before = self.screen().matches(text).count();
        self.keys(text.as_bytes());
        self.wait_screen(&format!("{text:?} typed"), STEP, |s| {
            s.matches(text).count() > before
        })
        .await;
        self.keys(b"\r");
    }

    /// Waits for the program to exit; its status.
    async fn wait_exit(&mut self, timeout: Duration) -> portable_pty::ExitStatus {
        let child = &mut self.child;
        let status =
            moonkale_tests::poll_until(timeout, async || child.try_wait().ok().flatten()).await;
        status.unwrap_or_else(|| panic!("it did not exit\n--- screen ---\n{}", self.screen()))
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        if let Some(pid) = self.child.process_id() {
            // SAFETY: kill has no memory-safety preconditions; the group is
            // the program's own session (portable-pty calls setsid).
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A person in Toad: the prompt box shows, a question typed and sent is
/// answered on screen as it streams; a second one's Write asks on screen,
/// `a` allows it once, the file is written and the answer shown; Ctrl+Q
/// quits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toad_in_a_terminal_asks_streams_and_writes() {
    let w = World::builder().agent().start().await;
    let path = w.path("toad.txt");
    w.fake.set_script(
        write_script("write the toad file", &path, "FROM TOAD\n", "TOAD_WROTE_IT").on_prompt(
            "hello toad",
            Reply::text("TOAD_HELLO streamed to the screen"),
        ),
    );
    let mut cmd = portable_pty::CommandBuilder::new(toad_bin());
    for (k, v) in world_env(&w) {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        }
    }
    // Its config and data go to the sandbox's home too.
    for k in ["XDG_DATA_HOME", "XDG_CACHE_HOME"] {
        cmd.env_remove(k);
    }
    cmd.env("TERM", "xterm-256color");
    cmd.env("COLORTERM", "truecolor");
    cmd.env("LANG", "C.UTF-8");
    cmd.env("TOAD_LOG", w.sb.root.join("toad-acp.log"));
    cmd.cwd(&w.sb.workspace);
    cmd.args(["acp", &agent_line(&w)]);
    cmd.arg(&w.sb.workspace);
    let mut toad = Tui::spawn(cmd);
    // As a person does, wait until the status line names the agent instead
    // of "Initializing…" (it refuses prompts before).
    toad.wait_screen("the prompt box and the agent ready", 2 * STEP, |s| {
        s.contains("How can I help you today?")
            && !s.contains("Initializing…")
            && s.contains("moonkale-service")
    })
    .await;
    toad.submit("hello toad").await;
    toad.wait_text("TOAD_HELLO streamed to the screen", STEP)
        .await;

    toad.submit("write the toad file").await;
    // Its keys in the footer: the question has the focus, `a` goes to it.
    toad.wait_screen("the permission prompt, focused", STEP, |s| {
        s.contains("Approval request") && s.contains("a Allow") && s.contains("Allow once")
    })
    .await;
    assert!(!path.exists(), "written before it was allowed");
    toad.keys(b"a");
    toad.wait_text("TOAD_WROTE_IT", STEP).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "FROM TOAD\n");
    toad.keys(b"\x11");
    let status = toad.wait_exit(STEP).await;
    assert!(status.success(), "{status:?}\n{}", toad.screen());
}

// ---------------------------------------------------------------------------
// The official SDK's scripted client, checking the wire against the schema

/// `node tests/acp/driver.mjs -- <ours>`: the SDK 2.4.0 client, driven by
/// commands on its stdin, reporting events (and any message of either
/// direction that the ACP v1 schema refuses) on its stdout.
struct Driver {
    peer: JsonPeer,
    next_id: u64,
}

impl Driver {
    fn start(w: &World, name: &str) -> Driver {
        let modules = peer_bin("MOONKALE_ACP_NODE_MODULES", "acp/node_modules");
        peer_bin(
            "MOONKALE_ACP_NODE_MODULES",
            "acp/node_modules/@agentclientprotocol/sdk/schema/v1/schema.json",
        );
        let mut cmd = peer_command(w, Path::new("node"));
        cmd.env("MOONKALE_ACP_NODE_MODULES", modules)
            .arg(repo_root().join("tests/acp/driver.mjs"))
            .arg("--")
            .arg(moonkale_tests::bin("moonkale-service"))
            .args(["acp", "--workspace"])
            .arg(&w.sb.workspace);
        let stderr = w.sb.root.join(format!("driver-{name}.stderr"));
        let peer = JsonPeer::spawn("the SDK driver", cmd, &stderr);
        Driver { peer, next_id: 0 }
    }

    /// Sends a command; its id.
    async fn send(&mut self, mut command: Value) -> u64 {
        self.next_id += 1;
        command["id"] = json!(self.next_id);
        self.peer.send(command).await;
        self.next_id
    }

    /// The reply to command `id`: the result or the error.
    async fn reply(&mut self, id: u64) -> Result<Value, Value> {
        self.reply_within(id, STEP).await
    }

    async fn reply_within(&mut self, id: u64, timeout: Duration) -> Result<Value, Value> {
        let what = format!("the reply to command {id}");
        let reply = self
            .peer
            .wait_for_within(&what, timeout, |m| m["reply"] == id)
            .await;
        match reply.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(reply["result"].clone()),
        }
    }

    async fn command(&mut self, command: Value) -> Result<Value, Value> {
        let id = self.send(command).await;
        self.reply(id).await
    }

    async fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.command(json!({"call": method, "params": params}))
            .await
    }

    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let result = self.call(method, params).await;
        result.unwrap_or_else(|e| panic!("{method} failed: {e}\n{}", self.peer.describe()))
    }

    /// `initialize`, given two steps: node, the SDK and the schema's
    /// compilation come before the agent's start.
    async fn initialize(&mut self) -> Value {
        let id = self
            .send(
                json!({"call": "initialize", "params": {"protocolVersion": 1,
                "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false},
                    "terminal": false},
                "clientInfo": {"name": "sdk-driver", "version": "2.4.0"}}}),
            )
            .await;
        let result = self.reply_within(id, 2 * STEP).await;
        result.unwrap_or_else(|e| panic!("initialize failed: {e}\n{}", self.peer.describe()))
    }

    /// The updates of `session` so far, in order.
    fn updates(&self, session: &str) -> Vec<Value> {
        self.peer
            .log
            .iter()
            .filter(|m| m["update"]["sessionId"] == session)
            .map(|m| m["update"]["update"].clone())
            .collect()
    }

    /// The joined text of `session`'s `kind` updates.
    fn text(&self, session: &str, kind: &str) -> String {
        self.updates(session)
            .iter()
            .filter(|u| u["sessionUpdate"] == kind)
            .filter_map(|u| u["content"]["text"].as_str())
            .collect()
    }

    async fn update(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let m = self
            .peer
            .wait_for_within(what, STEP, |m| {
                m.get("update").is_some() && pred(&m["update"]["update"])
            })
            .await;
        m["update"]["update"].clone()
    }

    /// Ends the agent (its stdin closed); what the driver counted: every
    /// message of the wire validated, none refused.
    async fn finish(mut self) -> u64 {
        assert_eq!(self.peer.finish(STEP).await, Some(0));
        let invalid: Vec<&Value> = self
            .peer
            .log
            .iter()
            .filter(|m| m.get("invalid").is_some() && !m["invalid"].is_number())
            .collect();
        assert!(
            invalid.is_empty(),
            "messages the ACP v1 schema refuses: {invalid:#?}"
        );
        let count = self
            .peer
            .log
            .iter()
            .find(|m| m["validated"].is_number())
            .unwrap_or_else(|| panic!("no count from the driver\n{}", self.peer.describe()));
        assert_eq!(count["invalid"], 0, "{}", self.peer.describe());
        let exit = self
            .peer
            .log
            .iter()
            .find(|m| m.get("exit").is_some())
            .unwrap();
        assert_eq!(exit["exit"], 0, "the agent's exit: {exit}");
        let garbage: Vec<&Value> = self.peer.log.iter().filter(|m| m.is_string()).collect();
        assert!(garbage.is_empty(), "not JSON from the driver: {garbage:?}");
        count["validated"].as_u64().unwrap()
    }
}

/// Every method the agent serves, through the official SDK, with every
/// message of both directions validated against the ACP v1 schema:
/// initialize, authenticate (refused: nothing to authenticate), session/new
/// in a subfolder with a stdio MCP server (the CLI is given both),
/// session/prompt (streamed, its Write asked and allowed),
/// session/set_mode, session/set_config_option (the model), session/list,
/// session/cancel mid-stream, a hostile line, session/load from a second
/// client (the conversation replayed), and session/resume and
/// session/close from a third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_drives_every_method_and_the_wire_fits_the_schema() {
    let gate = Gate::new();
    let mut w = World::builder()
        .agent()
        .file("sub/keep.txt", "x\n")
        .start()
        .await;
    let sub = w.path("sub");
    let path = sub.join("sdk.txt");
    w.fake.set_script(
        write_script(
            "write the sdk file",
            &path,
            "FROM THE SDK\n",
            "SDK_WROTE_IT",
        )
        .on_prompt(
            "long sdk answer",
            Reply::text("SDK_CANCEL_ME slowly, in pieces, never whole").gated(&gate, 1),
        ),
    );
    let mut a = Driver::start(&w, "a");
    let init = a.initialize().await;
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    let auth = a.call("authenticate", json!({"methodId": "none"})).await;
    assert!(auth.is_err(), "{auth:?}");

    let probe = json!({"name": "probe", "command": "/nonexistent/moonkale-mcp-probe",
        "args": ["--probe"], "env": [{"name": "PROBE", "value": "1"}]});
    let new = a
        .ok("newSession", json!({"cwd": sub, "mcpServers": [probe]}))
        .await;
    let session = new["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(new["modes"]["currentModeId"], "default");

    // A prompt: its Write asked and allowed, its answer streamed.
    let prompt = a
        .send(json!({"call": "prompt", "params": {"sessionId": session,
            "prompt": [{"type": "text", "text": "write the sdk file"}]}}))
        .await;
    let ask = a
        .peer
        .wait_for_within("the permission request", STEP, |m| {
            m.get("permission").is_some()
        })
        .await;
    assert_eq!(ask["params"]["toolCall"]["title"], "Write sub/sdk.txt");
    a.command(json!({"answer": ask["permission"],
        "outcome": {"outcome": "selected", "optionId": "allow"}}))
        .await
        .unwrap();
    let done = a.reply(prompt).await.expect("the prompt's reply");
    assert_eq!(done["stopReason"], "end_turn", "{}", a.peer.describe());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "FROM THE SDK\n");
    assert_eq!(a.text(&session, "agent_message_chunk"), "SDK_WROTE_IT");
    let pieces = a
        .updates(&session)
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .count();
    assert!(
        pieces > 1,
        "the answer came in {pieces} piece(s), not streamed"
    );
    assert!(
        a.updates(&session)
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
    );

    // The CLI runs in the subfolder and was given the MCP server (which it
    // reports failed: there is no such program).
    let (events, _) = w.ed.all_events(&session, 1000).await;
    let init = events
        .iter()
        .map(|e| &e["data"])
        .find(|d| d["type"] == "system" && d["subtype"] == "init")
        .unwrap_or_else(|| panic!("no system/init from the CLI in {events:?}"));
    assert_eq!(init["cwd"], json!(sub), "{init}");
    let servers = init["mcp_servers"].as_array().unwrap();
    let listed = servers.iter().find(|s| s["name"] == "probe");
    assert_eq!(
        listed.map(|s| &s["status"]),
        Some(&json!("failed")),
        "{init}"
    );

    let set = a
        .ok(
            "setSessionMode",
            json!({"sessionId": session, "modeId": "acceptEdits"}),
        )
        .await;
    assert_eq!(set, json!({}));
    a.update("the mode update", |u| {
        u["sessionUpdate"] == "current_mode_update" && u["currentModeId"] == "acceptEdits"
    })
    .await;
    let set = a
        .ok(
            "setSessionConfigOption",
            json!({"sessionId": session, "configId": "model", "value": "claude-haiku-4-5"}),
        )
        .await;
    assert_eq!(
        set["configOptions"][0]["currentValue"], "claude-haiku-4-5",
        "{set}"
    );
    let listed = a.ok("listSessions", json!({})).await;
    assert_eq!(
        listed["sessions"][0]["sessionId"],
        session.as_str(),
        "{listed}"
    );
    assert_eq!(
        listed["sessions"][0]["title"], "write the sdk file",
        "{listed}"
    );

    // A cancel while the answer streams.
    let prompt = a
        .send(json!({"call": "prompt", "params": {"sessionId": session,
            "prompt": [{"type": "text", "text": "long sdk answer"}]}}))
        .await;
    a.update("the first chunk of the long answer", |u| {
        u["sessionUpdate"] == "agent_message_chunk"
            && u["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("SDK_CANCEL_ME"))
    })
    .await;
    let request = w.fake.wait_prompt("long sdk answer", STEP).await;
    assert_eq!(request.body["model"], "claude-haiku-4-5");
    a.command(json!({"notify": "cancel", "params": {"sessionId": session}}))
        .await
        .unwrap();
    let cancelled = a.reply(prompt).await.expect("the cancelled prompt's reply");
    assert_eq!(cancelled["stopReason"], "cancelled", "{cancelled}");
    gate.open();

    // A hostile line: not JSON-RPC, answered with a parse error (id null).
    a.command(json!({"call": "raw", "line": "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"session/prompt\",\"params\":"}))
        .await
        .unwrap();
    let raw = a
        .peer
        .wait_for_within("the answer to the hostile line", STEP, |m| {
            m.get("raw").is_some()
        })
        .await;
    let answer: Value = serde_json::from_str(raw["line"].as_str().unwrap()).unwrap();
    assert_eq!(answer["error"]["code"], -32700, "{answer}");

    // A second client loads the session: it is shown the conversation.
    let mut b = Driver::start(&w, "b");
    b.initialize().await;
    let loaded = b
        .ok(
            "loadSession",
            json!({"sessionId": session, "cwd": sub, "mcpServers": []}),
        )
        .await;
    assert_eq!(loaded["modes"]["currentModeId"], "acceptEdits", "{loaded}");
    let replayed = b.text(&session, "user_message_chunk");
    assert!(replayed.contains("write the sdk file"), "{replayed:?}");
    assert!(
        b.text(&session, "agent_message_chunk")
            .contains("SDK_WROTE_IT")
    );
    assert!(
        b.updates(&session)
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call")
    );

    // A third one that has the conversation resumes it (nothing
    // replayed) and closes it again.
    let mut c = Driver::start(&w, "c");
    c.initialize().await;
    let resumed = c
        .ok(
            "resumeSession",
            json!({"sessionId": session, "cwd": sub, "mcpServers": []}),
        )
        .await;
    assert_eq!(
        resumed["modes"]["currentModeId"], "acceptEdits",
        "{resumed}"
    );
    assert!(c.updates(&session).is_empty(), "resume replays nothing");
    c.ok("closeSession", json!({"sessionId": session})).await;

    let checked = a.finish().await + b.finish().await + c.finish().await;
    assert!(checked > 20, "only {checked} messages validated");
}

/// The rest of what the agent sends, through the SDK and validated: a
/// command asked (`execute`) and answered first in an LSP editor (the
/// client's question withdrawn with `$/cancel_request`), a command
/// rejected (a failed tool call), thinking (`agent_thought_chunk`) and a
/// todo list (`plan`), a question with its options, and a plan approved
/// into `acceptEdits` (`switch_mode`, `current_mode_update`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_validates_commands_thoughts_questions_and_plans() {
    let mut w = World::builder().agent().start().await;
    let ran = w.path("ran.txt");
    let refused = w.path("refused.txt");
    let planned = w.path("plan.txt");
    let bash = |path: &Path| {
        Reply::tool_use(
            "Bash",
            json!({"command": format!("echo ran > {}", path.display()), "description": "write a file"}),
        )
    };
    let thought = Reply {
        blocks: vec![
            Block::Thinking {
                thinking: "SDK_THOUGHT about the list".into(),
                signature: "sig".into(),
            },
            Block::ToolUse {
                id: None,
                name: "TodoWrite".into(),
                input: json!({"todos": [
                    {"content": "First step", "status": "completed", "activeForm": "Doing the first"},
                    {"content": "Second step", "status": "in_progress", "activeForm": "Doing the second"},
                ]}),
            },
        ],
        ..Reply::default()
    };
    let questions = json!([{
        "question": "Which database should the tests use?",
        "header": "Database",
        "options": [{"label": "SQLite", "description": "in memory"},
                    {"label": "Postgres", "description": "a server"}],
        "multiSelect": false,
    }]);
    let script = moonkale_tests::agent::plan_then_write_script("plan it", &planned)
        .on_prompt("run the command", bash(&ran))
        .on_prompt("refuse the command", bash(&refused))
        .after_tool("Bash", Reply::text("BASH_DONE"))
        .on_prompt("think first", thought)
        .after_tool("TodoWrite", Reply::text("LISTED"))
        .on_prompt(
            "ask me",
            Reply::tool_use("AskUserQuestion", json!({"questions": questions})),
        )
        .after_tool("AskUserQuestion", Reply::text("NOTED"));
    w.fake.set_script(script);
    let mut a = Driver::start(&w, "a");
    a.initialize().await;
    let new = a
        .ok(
            "newSession",
            json!({"cwd": w.sb.workspace, "mcpServers": []}),
        )
        .await;
    let session = new["sessionId"].as_str().unwrap().to_owned();
    let prompt = |text: &str| {
        json!({"call": "prompt", "params": {"sessionId": session,
            "prompt": [{"type": "text", "text": text}]}})
    };
    let is_asked = |m: &Value| m.get("permission").is_some();

    // Answered in the editor first: the client's question is withdrawn.
    let turn = a.send(prompt("run the command")).await;
    let ask = a
        .peer
        .next_within("the command's question", STEP, is_asked)
        .await;
    assert_eq!(ask["params"]["toolCall"]["kind"], "execute", "{ask}");
    let button = w.ed.server_request("window/showMessageRequest", STEP).await;
    w.ed.respond(&button["id"], json!({"title": "Allow"})).await;
    let withdrawn = a
        .peer
        .wait_for_within("the withdrawn question", STEP, |m| {
            m.get("cancelled_request").is_some()
        })
        .await;
    assert_eq!(withdrawn["cancelled_request"], ask["permission"]);
    assert_eq!(a.reply(turn).await.unwrap()["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");

    // Rejected in the client: the tool call fails.
    let turn = a.send(prompt("refuse the command")).await;
    let ask = a
        .peer
        .next_within("the command's question", STEP, is_asked)
        .await;
    a.command(json!({"answer": ask["permission"],
        "outcome": {"outcome": "selected", "optionId": "reject"}}))
        .await
        .unwrap();
    assert_eq!(a.reply(turn).await.unwrap()["stopReason"], "end_turn");
    assert!(!refused.exists());
    a.update("the failed command", |u| {
        u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed"
    })
    .await;

    // Thinking and a todo list.
    let turn = a.send(prompt("think first")).await;
    assert_eq!(a.reply(turn).await.unwrap()["stopReason"], "end_turn");
    assert!(
        a.text(&session, "agent_thought_chunk")
            .contains("SDK_THOUGHT")
    );
    let plan = a
        .update("the todo list", |u| u["sessionUpdate"] == "plan")
        .await;
    assert_eq!(plan["entries"][1]["status"], "in_progress", "{plan}");

    // A question: its options, one picked.
    let turn = a.send(prompt("ask me")).await;
    let ask = a.peer.next_within("the question", STEP, is_asked).await;
    let options: Vec<&str> = ask["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert!(options.contains(&"Postgres"), "{ask}");
    a.command(json!({"answer": ask["permission"],
        "outcome": {"outcome": "selected", "optionId": "option:1"}}))
        .await
        .unwrap();
    assert_eq!(a.reply(turn).await.unwrap()["stopReason"], "end_turn");
    let (_, answer) = w.fake.wait_tool_result("AskUserQuestion", STEP).await;
    assert!(answer.text.contains("Postgres"), "{}", answer.text);

    // Plan mode, the plan approved into acceptEdits: its write is not asked.
    a.ok(
        "setSessionMode",
        json!({"sessionId": session, "modeId": "plan"}),
    )
    .await;
    let turn = a.send(prompt("plan it")).await;
    let ask = a
        .peer
        .next_within("the plan's question", STEP, is_asked)
        .await;
    assert_eq!(ask["params"]["toolCall"]["kind"], "switch_mode", "{ask}");
    a.command(json!({"answer": ask["permission"],
        "outcome": {"outcome": "selected", "optionId": "mode:acceptEdits"}}))
        .await
        .unwrap();
    assert_eq!(a.reply(turn).await.unwrap()["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&planned).unwrap(), "DONE\n");
    a.update("the switch to acceptEdits", |u| {
        u["sessionUpdate"] == "current_mode_update" && u["currentModeId"] == "acceptEdits"
    })
    .await;
    assert!(
        !a.peer.log[a.peer.seen..].iter().any(is_asked),
        "the write after the plan was asked"
    );

    a.finish().await;
}
