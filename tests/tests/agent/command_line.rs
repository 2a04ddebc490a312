//! `moonkale-service agent …` in the user's terminal: send, list, show and
//! answer.

use std::process::Stdio;
use std::time::Duration;

use moonkale_tests::STEP;
use moonkale_tests::fakeapi::{Gate, Reply, Script};
use moonkale_tests::world::World;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::{first_piece, is_text_of, read};

/// Reads `stdout` until it contains `needle`; returns what was read.
async fn read_until(
    stdout: &mut tokio::process::ChildStdout,
    got: &mut Vec<u8>,
    needle: &str,
    timeout: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(got).contains(needle) {
        match tokio::time::timeout_at(deadline, stdout.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
    true
}

/// `moonkale-service agent <args[0]> --workspace <the workspace>
/// <args[1..]>`, with its output piped.
fn agent_command(w: &World, args: &[&str]) -> tokio::process::Command {
    let ws = w.sb.workspace.display().to_string();
    let mut all = vec!["agent", args[0], "--workspace", &ws];
    all.extend(&args[1..]);
    let mut cmd = w.command(&all);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// `moonkale-service agent send --workspace DIR "prompt"` prints the reply
/// as it streams and exits 0; `agent list` lists the session; `agent show
/// ID` prints the prompt and the reply; a failing turn exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_sends_lists_and_shows() {
    let gate = Gate::new();
    let text = "CLI_STREAM_ONE then CLI_STREAM_TWO and CLI_STREAM_THREE";
    let mut w = World::agent(
        Script::new()
            .on_prompt(
                "hello from the command line",
                Reply::text(text).gated(&gate, 1),
            )
            .on_prompt(
                "fail from the command line",
                Reply::error(401, "authentication_error", "invalid x-api-key"),
            ),
    )
    .await;
    let mut child = agent_command(&w, &["send", "hello from the command line"])
        .current_dir(&w.sb.workspace)
        .spawn()
        .expect("run agent send");
    let mut stdout = child.stdout.take().unwrap();
    let mut got = Vec::new();
    let first = first_piece(text);
    let streamed = read_until(&mut stdout, &mut got, &first, STEP).await;
    assert!(!gate.is_open());
    gate.open();
    if !streamed {
        let out = tokio::time::timeout(STEP, child.wait_with_output()).await;
        panic!(
            "agent send printed nothing of the reply while it streamed; stdout so far {:?}; then {out:?}\n{}",
            String::from_utf8_lossy(&got),
            w.diag().context()
        );
    }
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(STEP, stdout.read_to_end(&mut rest)).await;
    got.extend(rest);
    let status = tokio::time::timeout(STEP, child.wait())
        .await
        .expect("agent send exits")
        .unwrap();
    let mut stderr = Vec::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = tokio::time::timeout(STEP, e.read_to_end(&mut stderr)).await;
    }
    let stdout_text = String::from_utf8_lossy(&got).into_owned();
    assert!(
        status.success(),
        "agent send: {status}\nstdout: {stdout_text}\nstderr: {}",
        String::from_utf8_lossy(&stderr)
    );
    assert!(
        stdout_text.contains(text),
        "agent send printed {stdout_text:?}"
    );

    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let session = list["sessions"][0]["session"]
        .as_str()
        .unwrap_or_else(|| panic!("no session listed: {list}"))
        .to_owned();
    let out = agent_command(&w, &["list"])
        .current_dir(&w.sb.workspace)
        .output()
        .await
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && listed.contains(&session),
        "agent list: {}\n{listed}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let out = agent_command(&w, &["show", &session])
        .current_dir(&w.sb.workspace)
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && shown.contains("hello from the command line")
            && shown.contains(text),
        "agent show: {}\n{shown}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    let out = tokio::time::timeout(
        Duration::from_secs(25),
        agent_command(
            &w,
            &["send", "--session", &session, "fail from the command line"],
        )
        .current_dir(&w.sb.workspace)
        .output(),
    )
    .await
    .expect("a failing agent send exits")
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed turn: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    w.ed.barrier().await;
}

/// `agent send --session S` to a session whose turn is still running
/// prints and waits for its own turn, not the end of the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_send_to_a_busy_session_waits_for_its_own_turn() {
    let gate = Gate::new();
    let mut w = World::agent(
        Script::new()
            .on_prompt(
                "busy first",
                Reply::text("BUSY_FIRST_REPLY_TEXT").gated(&gate, 1),
            )
            .on_prompt("queued second", Reply::text("QUEUED_SECOND_REPLY")),
    )
    .await;
    let session = w.ed.start_session(json!({"prompt": "busy first"})).await;
    w.ed.take("the first turn's text", STEP, |m| is_text_of(m, &session))
        .await;
    let child = agent_command(&w, &["send", "--session", &session, "queued second"])
        .spawn()
        .expect("run agent send");
    w.ed.agent_event(&session, "the queued prompt stored", STEP, |e| {
        e["kind"] == "prompt" && e["data"]["text"] == "queued second"
    })
    .await;
    gate.open();
    let out = tokio::time::timeout(STEP, child.wait_with_output())
        .await
        .expect("agent send exits")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("QUEUED_SECOND_REPLY"),
        "agent send to a busy session: {}\nstdout: {stdout:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The approval `agent send` (spawned with `args`) shows on stderr, read
/// from the whole command it prints for answering it.
async fn approval_shown(w: &World, child: &mut tokio::process::Child) -> String {
    let stderr = child.stderr.as_mut().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(id) = text
            .split("moonkale-service agent answer ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
        {
            return id.to_owned();
        }
        match tokio::time::timeout_at(deadline, stderr.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => panic!(
                "agent send did not show how to answer the approval: {text:?}\n{}",
                w.diag().context()
            ),
        }
    }
}

/// `agent send --permission-mode default` of a turn that asks to write
/// `path` ([`say_then_write`]): the running command and the approval it
/// shows.
async fn send_asking_to_write(
    w: &World,
    path: &std::path::Path,
) -> (tokio::process::Child, String) {
    w.fake.set_script(say_then_write(path));
    let mut child = agent_command(
        w,
        &["send", "--permission-mode", "default", "write the file"],
    )
    .spawn()
    .expect("run agent send");
    let approval = approval_shown(w, &mut child).await;
    (child, approval)
}

/// Claude says what it will do, writes, and says it is done.
fn say_then_write(path: &std::path::Path) -> Script {
    Script::new()
        .on_prompt(
            "write the file",
            Reply::text("I will write it.").and_tool_use(
                "Write",
                json!({"file_path": path.display().to_string(), "content": "ALLOWED IN THE TERMINAL\n"}),
            ),
        )
        .after_tool("Write", Reply::text("WRITE_DONE"))
}

/// `agent send --permission-mode default` shows an approval with the whole
/// command that answers it; `agent show` (given a prefix of the session)
/// shows the question with its id and that command; `agent answer
/// PREFIX/N allow` allows it; the two messages' text print as two
/// paragraphs, not run together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_answers_an_approval() {
    let w = World::agent(Script::new()).await;
    let path = w.path("from-the-terminal.txt");
    let (child, approval) = send_asking_to_write(&w, &path).await;
    let (session, number) = approval.split_once('/').expect("SESSION/N");
    assert!(!path.exists());

    let out = agent_command(&w, &["show", &session[..8]])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("(approval {approval})"))
            && shown.contains(&format!("moonkale-service agent answer {approval} allow"))
            && shown.contains("[Write ")
            && !shown.contains("file_path"),
        "agent show:\n{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let by_prefix = format!("{}/{number}", &session[..8]);
    let out = agent_command(&w, &["answer", &by_prefix, "allow"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "agent answer {by_prefix}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tokio::time::timeout(STEP, child.wait_with_output())
        .await
        .expect("agent send exits")
        .unwrap();
    assert!(out.status.success(), "agent send: {}", out.status);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "I will write it.\n\nWRITE_DONE\n"
    );
    assert_eq!(read(&path).as_deref(), Some("ALLOWED IN THE TERMINAL\n"));
}

/// Ctrl-C during `agent send` leaves the turn to the service and says how
/// to follow it; `agent follow --until-idle` then sees it through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_agent_send_says_how_to_follow_the_turn() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("after-ctrl-c.txt");
    let (child, approval) = send_asking_to_write(&w, &path).await;
    let session = approval.split_once('/').expect("SESSION/N").0.to_owned();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id().expect("running") as i32, libc::SIGINT) };
    let out = tokio::time::timeout(STEP, child.wait_with_output())
        .await
        .expect("agent send exits on Ctrl-C")
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{said}");
    assert!(
        said.contains(&format!(
            "`moonkale-service agent follow {session}` shows it"
        )),
        "{said}"
    );
    w.ed.call(
        "moonkale/agent/answer",
        json!({"approval": approval, "allow": true}),
    )
    .await;
    let out = tokio::time::timeout(
        STEP,
        agent_command(&w, &["follow", &session, "--until-idle"]).output(),
    )
    .await
    .expect("follow ends with the turn")
    .unwrap();
    let followed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && followed.contains("WRITE_DONE"),
        "{followed}"
    );
    assert_eq!(read(&path).as_deref(), Some("ALLOWED IN THE TERMINAL\n"));
}

/// `agent send --session ID --permission-mode MODE` continues the session
/// in that mode (it was once ignored without a word).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_given_with_a_session_is_applied() {
    let mut w = World::agent(Script::new().default_reply(Reply::text("TURN_OK"))).await;
    let (session, _) =
        w.ed.run_first_turn("first", json!({"permissionMode": "plan"}))
            .await;
    let out = agent_command(
        &w,
        &[
            "send",
            "--session",
            &session[..8],
            "--permission-mode",
            "acceptEdits",
            "second",
        ],
    )
    .output()
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    let mode = list["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["session"] == session.as_str()))
        .map(|s| s["permissionMode"].clone());
    assert_eq!(mode, Some(json!("acceptEdits")), "{list}");
}
