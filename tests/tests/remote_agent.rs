//! Server mode with the real CLI (2.1.332 against the fake API): a turn
//! started from a local editor is followed live by two remote clients on the
//! remote front door; `moonkale-service connect … answer` (a third remote
//! client) answers its approval; both followers see it resolved; one of them
//! is away for 30 s while the turn ends and, back, gets exactly the events
//! it missed from its last sequence number. And `connect … follow` through
//! a tunnel that drops mid-turn resumes after the last event it printed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use moonkale_tests::bin;
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use moonkale_tests::remote::{RemoteClient, TOKEN};
use moonkale_tests::world::World;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How long the second follower stays away (the figure).
const AWAY: Duration = Duration::from_secs(30);

/// The `seq`s of the `moonkale/agent/event` notifications of `session`
/// among `messages`.
fn event_seqs(messages: &[Value], session: &str) -> Vec<u64> {
    messages
        .iter()
        .filter(|m| m["method"] == "moonkale/agent/event" && m["params"]["session"] == session)
        .filter_map(|m| m["params"]["event"]["seq"].as_u64())
        .collect()
}

/// Reads `c`'s messages (keeping them in `c.notifications`) until one
/// satisfies `pred`.
async fn until(c: &mut RemoteClient, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    if let Some(m) = c.notifications.iter().find(|m| pred(m)) {
        return m.clone();
    }
    loop {
        let m = tokio::time::timeout(moonkale_tests::TIMEOUT, c.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
        c.notifications.push(m.clone());
        if pred(&m) {
            return m;
        }
    }
}

/// The approval id of a `moonkale/agent/approval` notification (its
/// `approval` is the approval object, or its id).
fn approval_of(m: &Value) -> Option<&str> {
    let a = &m["params"]["approval"];
    a.as_str().or_else(|| a["approval"].as_str())
}

async fn follower(addr: &str, name: &str, root: &std::path::Path) -> RemoteClient {
    let mut c = RemoteClient::connect(addr, TOKEN).await;
    c.initialize(name, root).await;
    c.call("moonkale/agent/subscribe", json!({})).await;
    c
}

/// An agent world whose service also listens for remote clients (its
/// address is in the info file).
async fn remote_world() -> World {
    World::builder()
        .agent()
        .arg("--listen")
        .arg("127.0.0.1:0")
        // The sandbox lives under /tmp.
        .env("MOONKALE_ROOT", "/tmp")
        .env("MOONKALE_TOKEN", TOKEN)
        .start()
        .await
}

async fn connect_command(addr: &str, args: &[&str]) -> std::process::Output {
    let out = tokio::process::Command::new(bin("moonkale-service"))
        .arg("connect")
        .arg(format!("ws://{addr}/"))
        .args(args)
        .env("MOONKALE_TOKEN", TOKEN)
        .env("MOONKALE_LOG", "warn")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("connect finished")
        .expect("run connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_clients_follow_answer_and_catch_up_on_a_local_turn() {
    let mut w = remote_world().await;
    let addr = w.svc().info.remote.clone().expect("remote address");
    let path = w.path("remote.txt");
    // The turn's last words wait until remote-two has gone away.
    let away = Gate::new();
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "write the remote file",
                Reply::tool_use(
                    "Write",
                    json!({"file_path": path.display().to_string(), "content": "FROM AFAR\n"}),
                ),
            )
            .after_tool("Write", Reply::text("REMOTE_DONE").gated(&away, 0)),
    );
    let root = w.sb.workspace.clone();
    let mut r1 = follower(&addr, "remote-one", &root).await;
    let mut r2 = follower(&addr, "remote-two", &root).await;

    let session =
        w.ed.start_session(json!({"prompt": "write the remote file", "permissionMode": "default"}))
            .await;
    let pending = |s: &str| {
        let s = s.to_owned();
        move |m: &Value| {
            m["method"] == "moonkale/agent/approval"
                && m["params"]["session"] == s
                && m["params"]["status"] == "pending"
        }
    };
    let asked = until(
        &mut r1,
        "the approval, live at remote-one",
        pending(&session),
    )
    .await;
    until(
        &mut r2,
        "the approval, live at remote-two",
        pending(&session),
    )
    .await;
    let approval = approval_of(&asked)
        .unwrap_or_else(|| panic!("no approval id: {asked}"))
        .to_owned();

    // A third remote client follows on the command line, and another one
    // answers there.
    let follow = {
        let addr = addr.clone();
        let session = session.clone();
        tokio::spawn(
            async move { connect_command(&addr, &["follow", &session, "--until-idle"]).await },
        )
    };
    let answered = connect_command(&addr, &["answer", &approval, "allow"]).await;
    assert!(
        answered.status.success(),
        "{}",
        String::from_utf8_lossy(&answered.stderr)
    );

    let closed = |m: &Value| {
        m["method"] == "moonkale/agent/approval"
            && m["params"]["status"] == "closed"
            && approval_of(m) == Some(approval.as_str())
    };
    until(&mut r1, "the approval resolved at remote-one", closed).await;
    until(&mut r2, "the approval resolved at remote-two", closed).await;

    // remote-two goes away for 30 s while the turn ends.
    let seen_by_r2 = event_seqs(&r2.notifications, &session);
    let last = *seen_by_r2.iter().max().expect("remote-two saw events");
    drop(r2);
    let back_at = tokio::time::Instant::now() + AWAY;
    away.open();

    let prompt_seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, prompt_seq).await;
    until(&mut r1, "the end of the turn, live at remote-one", |m| {
        m["method"] == "moonkale/agent/event"
            && m["params"]["session"] == session.as_str()
            && m["params"]["event"]["kind"] == "state"
            && m["params"]["event"]["data"]["state"] == "idle"
    })
    .await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "FROM AFAR\n");
    let followed = follow.await.expect("follow task");
    let followed_out = String::from_utf8_lossy(&followed.stdout);
    assert!(
        followed.status.success(),
        "{}",
        String::from_utf8_lossy(&followed.stderr)
    );
    assert!(followed_out.contains("REMOTE_DONE"), "{followed_out}");
    assert!(followed_out.contains("[allowed "), "{followed_out}");

    tokio::time::sleep_until(back_at).await;
    let mut r2 = RemoteClient::connect(&addr, TOKEN).await;
    r2.initialize("remote-two", &root).await;
    let page = r2
        .call(
            "moonkale/agent/events",
            json!({"session": session, "since": last + 1}),
        )
        .await;
    let missed: Vec<u64> = page["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    let (all, _) = w.ed.all_events(&session, 1000).await;
    let all: Vec<u64> = all.iter().filter_map(|e| e["seq"].as_u64()).collect();
    let expected: Vec<u64> = all.iter().copied().filter(|s| *s > last).collect();
    assert_eq!(missed, expected, "exactly the missed events");
    let mut together = seen_by_r2.clone();
    together.extend(&missed);
    together.sort_unstable();
    together.dedup();
    assert_eq!(together, all, "nothing lost between the two connections");
    assert!(
        page["events"].to_string().contains("REMOTE_DONE"),
        "the end of the turn is among them"
    );

    // The command line lists the session and shows its transcript.
    let listed = connect_command(&addr, &["list"]).await;
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&session));
    let shown = connect_command(&addr, &["show", &session]).await;
    assert!(String::from_utf8_lossy(&shown.stdout).contains("REMOTE_DONE"));
}

/// A TCP relay to the service whose connections the test can cut, as a
/// flaky tunnel or a phone going to sleep would.
struct Relay {
    addr: String,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accepting: tokio::task::AbortHandle,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay address").to_string();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let tracked = connections.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((mut near, _)) = listener.accept().await {
                let target = target.clone();
                let relay = tokio::spawn(async move {
                    if let Ok(mut far) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut near, &mut far).await;
                    }
                });
                tracked.lock().unwrap().push(relay.abort_handle());
            }
        })
        .abort_handle();
        Relay {
            addr,
            connections,
            accepting,
        }
    }

    /// Drops every connection relayed so far (both ends see it closed);
    /// how many there were.
    fn cut(&self) -> usize {
        let cut: Vec<_> = self.connections.lock().unwrap().drain(..).collect();
        cut.iter().for_each(|c| c.abort());
        cut.len()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accepting.abort();
        self.cut();
    }
}

/// The lines a child writes to one of its pipes, as they come.
fn lines_of(
    pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Reads `lines` (keeping them in `seen`) until one satisfies `pred`.
async fn line_where(
    lines: &mut mpsc::UnboundedReceiver<String>,
    seen: &mut Vec<String>,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    loop {
        let line = tokio::time::timeout(moonkale_tests::TIMEOUT, lines.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}; so far: {seen:#?}"))
            .unwrap_or_else(|| panic!("the pipe closed before {what}; so far: {seen:#?}"));
        seen.push(line.clone());
        if pred(&line) {
            return line;
        }
    }
}

/// `connect … follow --until-idle` through a relay that drops every
/// connection while an approval is pending: the command says so, comes
/// back through the relay, and prints the rest of the turn, so its output
/// is the whole transcript once, as `connect … show` prints it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_resumes_after_the_tunnel_drops() {
    let mut w = remote_world().await;
    let relay = Relay::start(w.svc().info.remote.clone().expect("remote address")).await;
    let path = w.path("tunnel.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "write through the tunnel",
                Reply::tool_use(
                    "Write",
                    json!({"file_path": path.display().to_string(), "content": "THROUGH\n"}),
                ),
            )
            .after_tool("Write", Reply::text("AFTER_THE_DROP")),
    );
    let session = w
        .ed
        .start_session(json!({"prompt": "write through the tunnel", "permissionMode": "default"}))
        .await;

    let mut follow = tokio::process::Command::new(bin("moonkale-service"))
        .arg("connect")
        .arg(format!("ws://{}/", relay.addr))
        .args(["follow", &session, "--until-idle"])
        .env("MOONKALE_TOKEN", TOKEN)
        .env("MOONKALE_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run connect follow");
    let mut out = lines_of(follow.stdout.take().unwrap());
    let mut err = lines_of(follow.stderr.take().unwrap());
    let (mut printed, mut said) = (Vec::new(), Vec::new());

    let hint = line_where(&mut err, &mut said, "the approval's hint", |l| {
        l.starts_with("Claude asks to run Write")
    })
    .await;
    let approval = hint
        .split_whitespace()
        .skip_while(|word| *word != "answer")
        .nth(1)
        .unwrap_or_else(|| panic!("no approval id in {hint:?}"))
        .to_owned();
    assert_eq!(relay.cut(), 1, "follow's one connection");
    line_where(&mut err, &mut said, "the lost connection", |l| {
        l.starts_with("[connection lost")
    })
    .await;

    // The rest of the turn happens while the command is away.
    let r =
        w.ed.call(
            "moonkale/agent/answer",
            json!({"approval": approval, "allow": true}),
        )
        .await;
    assert_eq!(r, json!({}));
    let prompt_seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, prompt_seq).await;

    let status = tokio::time::timeout(moonkale_tests::TIMEOUT, follow.wait())
        .await
        .expect("follow ends once the session is idle")
        .expect("wait for follow");
    while let Some(line) = out.recv().await {
        printed.push(line);
    }
    while let Some(line) = err.recv().await {
        said.push(line);
    }
    assert!(status.success(), "follow: {status}; stderr: {said:#?}");
    let lost = said
        .iter()
        .filter(|l| l.starts_with("[connection lost"))
        .count();
    assert_eq!(lost, 1, "{said:#?}");

    let shown = connect_command(&relay.addr, &["show", &session]).await;
    assert!(shown.status.success());
    let mut expected: Vec<String> = String::from_utf8_lossy(&shown.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(expected.pop().as_deref(), Some("[state: idle]"));
    assert_eq!(
        printed, expected,
        "follow printed the transcript once, in order"
    );
    assert!(
        printed.iter().any(|l| l == "AFTER_THE_DROP"),
        "{printed:#?}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "THROUGH\n");
}

/// Bytes a terminal acts on: OSC 52 (sets the clipboard), CSI (moves the
/// cursor, clears the screen), BEL, and C1's one-byte CSI.
const HOSTILE: &str = "\u{1b}]52;c;cHduZWQ=\u{7} \u{1b}[2J\u{1b}[1;31m \u{9b}0m \u{202e}";

/// Panics if `out` holds any byte of a terminal escape, or lacks one of
/// the visible forms in `shown` (so the escapes were there to be shown).
fn assert_terminal_safe(what: &str, out: &[u8], shown: &[&str]) {
    let text = String::from_utf8_lossy(out);
    assert!(
        !text.contains(['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}']),
        "{what} printed a terminal escape: {text:?}"
    );
    for form in shown {
        assert!(
            text.contains(form),
            "{what} did not show {form:?}: {text:?}"
        );
    }
}

/// What a transcript printer shows of [`HOSTILE`].
const SHOWN: &[&str] = &["^[]52;c;cHduZWQ=^G", "^[[2J", "<U+009B>", "<U+202E>"];

/// A session whose prompt and reply carry terminal escapes: `agent send`,
/// `list`, `show` and `follow`, locally and through `connect`, print them
/// as visible escapes and never as the bytes a terminal would act on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_text_reaches_the_terminal_without_escapes() {
    let w = remote_world().await;
    let addr = w.svc().info.remote.clone().expect("remote address");
    let prompt = format!("say it {HOSTILE}");
    w.fake
        .set_script(Script::new().default_reply(Reply::text(format!("REPLY {HOSTILE} END"))));
    let ws = w.sb.workspace.display().to_string();
    let run = |args: Vec<String>| {
        let mut cmd = w.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
        cmd.current_dir(&w.sb.workspace);
        async move {
            tokio::time::timeout(Duration::from_secs(60), cmd.output())
                .await
                .expect("the command finished")
                .expect("run moonkale-service")
        }
    };
    let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let sent = run(args(&["agent", "send", "--workspace", &ws, &prompt])).await;
    assert!(
        sent.status.success(),
        "agent send: {}\n{}",
        String::from_utf8_lossy(&sent.stderr),
        w.diag().context()
    );
    assert_terminal_safe("agent send", &sent.stdout, SHOWN);
    assert_terminal_safe("agent send (stderr)", &sent.stderr, &[]);
    let session = String::from_utf8_lossy(&sent.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("session ").map(str::to_owned))
        .expect("agent send names its session");

    let commands: Vec<(&str, Vec<String>)> = vec![
        ("agent list", args(&["agent", "list", "--workspace", &ws])),
        (
            "agent list --json",
            args(&["agent", "list", "--json", "--workspace", &ws]),
        ),
        (
            "agent show",
            args(&["agent", "show", "--workspace", &ws, &session]),
        ),
        (
            "agent follow",
            args(&[
                "agent",
                "follow",
                "--until-idle",
                "--workspace",
                &ws,
                &session,
            ]),
        ),
    ];
    for (what, argv) in commands {
        let out = run(argv).await;
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A list shows the title (the prompt's start); JSON escapes it.
        let shown = match what {
            "agent list" => &["^[]52"][..],
            "agent list --json" => &["\\u001b]52"][..],
            _ => SHOWN,
        };
        assert_terminal_safe(what, &out.stdout, shown);
    }
    for (argv, shown) in [
        (vec!["list"], &["^[]52"][..]),
        (vec!["show", &session], SHOWN),
        (vec!["follow", &session, "--until-idle"], SHOWN),
    ] {
        let out = connect_command(&addr, &argv).await;
        let what = format!("connect {argv:?}");
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_terminal_safe(&what, &out.stdout, shown);
    }
}
