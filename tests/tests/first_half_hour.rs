//! A newcomer's first half hour, scripted with the real pinned `claude` CLI
//! in a fresh HOME with no Claude Code login: one `agent send`, one ACP
//! prompt, an editor opening a file, then `connect … send` to a service on
//! another front door. Each failure is one sentence naming the fix; no
//! `claude` is left running (and `status` says so); no spare starts; the
//! service the commands started on the user's behalf is gone after its idle
//! period, with its socket and Claude Code lock file.

use std::process::Stdio;

use moonkale_tests::acp::AcpAgent;
use moonkale_tests::agent::processes_in;
use moonkale_tests::claude_cli::claude_bin;
use moonkale_tests::fakeapi::{FakeApi, Reply, Script};
use moonkale_tests::{RawLsp, STEP, Sandbox, wait_until};
use serde_json::{Value, json};

const NOT_LOGGED_IN: &str =
    "Claude Code is not logged in: run `claude auth login` in a terminal, then try again.";

fn newcomer() -> Sandbox {
    let sb = Sandbox::new();
    std::fs::write(sb.workspace.join("app.py"), "print('hi')\n").unwrap();
    sb
}

/// `moonkale-service ARGS` in the workspace, with the real CLI and a short
/// idle period for what it starts, and no `MOONKALE_LOG`, as a newcomer
/// runs it (a service the command starts prints no log line into the
/// user's terminal).
fn service_command(sb: &Sandbox, args: &[&str]) -> tokio::process::Command {
    let mut cmd = sb.command("moonkale-service");
    cmd.args(args)
        .env_remove("MOONKALE_LOG")
        .current_dir(&sb.workspace)
        .env("MOONKALE_CLAUDE_BIN", claude_bin())
        .env("MOONKALE_AUTOSTART_IDLE_MS", "1500")
        .stdin(Stdio::null());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_without_a_login_gets_one_sentence_and_nothing_left_running() {
    let sb = newcomer();

    // `agent send` starts the service and fails in one line on stderr.
    let out = service_command(&sb, &["agent", "send", "hello"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "nothing on stdout"
    );
    assert_eq!(stderr, format!("moonkale-service: {NOT_LOGGED_IN}\n"));
    let info = sb.files_for(&sb.workspace).read_info().expect("a service");

    // `agent show` says it once.
    let list = service_command(&sb, &["agent", "list", "--json"])
        .output()
        .await
        .unwrap();
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    let session = list["sessions"][0]["session"].as_str().unwrap().to_owned();
    assert_eq!(list["sessions"][0]["state"], "failed");
    let show = service_command(&sb, &["agent", "show", &session[..8]])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert_eq!(shown.matches("not logged in").count(), 1, "{shown}");
    assert_eq!(shown.matches("Not logged in").count(), 0, "{shown}");

    // An empty prompt from standard input is refused in one sentence; a
    // failed session is closed, then cleaned with the others in one go.
    // (Its standard input is empty.)
    let empty = service_command(&sb, &["agent", "send", "-"])
        .output()
        .await
        .unwrap();
    assert_eq!(empty.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&empty.stderr),
        "moonkale-service: the prompt is empty: say what Claude should do\n"
    );
    let closed = service_command(&sb, &["agent", "close", &session[..6]])
        .output()
        .await
        .unwrap();
    assert_eq!(closed.status.code(), Some(0), "{closed:?}");
    let deleted = service_command(&sb, &["agent", "delete", "--failed"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&deleted.stderr),
        "deleted 1 failed session\n"
    );
    let listed = service_command(&sb, &["agent", "list"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "no agent sessions in this workspace\n"
    );

    // An ACP panel: its prompt is answered with ACP's "authentication
    // required", the same sentence, and `authMethods` says what to run.
    let mut acp = AcpAgent::spawn(service_command(&sb, &["acp"]), &sb.root.join("acp.log"));
    let init = acp.initialize().await;
    let method = &init["authMethods"][0];
    assert!(
        method["description"]
            .as_str()
            .unwrap()
            .contains("claude auth login"),
        "{init}"
    );
    let acp_session = acp.new_session(&sb.workspace).await;
    let denied = acp
        .call(
            "session/prompt",
            json!({"sessionId": acp_session, "prompt": [{"type": "text", "text": "hello"}]}),
        )
        .await
        .expect_err("no login");
    assert_eq!(denied["code"], -32000, "{denied}");
    assert_eq!(denied["message"], NOT_LOGGED_IN);

    // An editor opens a file: no spare `claude` starts without a login.
    let mut shim = sb.command("moonkale-shim");
    shim.arg("--workspace")
        .arg(&sb.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut shim = shim.spawn().unwrap();
    let mut ed = RawLsp::new(shim.stdout.take().unwrap(), shim.stdin.take().unwrap());
    ed.initialize("newcomer-editor", &["utf-8"], Value::Null)
        .await;
    let uri = sb.uri("app.py");
    ed.did_open(&uri, 1, "print('hi')\n").await;

    // Every failed turn's CLI is gone, no spare came: `status` says so.
    // What runs with the workspace as its folder, but the service and the
    // ACP adapter the test started there.
    let claudes = || -> Vec<String> {
        processes_in(&sb.workspace)
            .iter()
            .map(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .unwrap_or_default()
                    .replace('\0', " ")
            })
            .filter(|argv| !argv.contains("moonkale-service"))
            .collect()
    };
    let none = moonkale_tests::poll_until(moonkale_tests::TIMEOUT, async || {
        claudes().is_empty().then_some(())
    })
    .await;
    assert!(none.is_some(), "claude processes left: {:#?}", claudes());
    let status = service_command(&sb, &["status"]).output().await.unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("0 claude processes run by the service"),
        "{status}"
    );
    assert!(!status.contains("warm spare"), "{status}");

    // Everyone leaves; after its idle period the service is gone, with its
    // socket and Claude Code lock file.
    ed.request("shutdown", Value::Null).await;
    ed.notify("exit", Value::Null).await;
    shim.wait().await.unwrap();
    acp.close().await;
    wait_until("the auto-started service exits", || {
        let gone = !moonkale_service::runtime::process_alive(info.pid);
        async move { gone.then_some(()) }
    })
    .await;
    assert!(!info.socket.exists(), "its socket is left");
    let locks: Vec<_> = std::fs::read_dir(sb.home.join(".claude/ide"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "lock"))
        .collect();
    assert!(locks.is_empty(), "a Claude Code lock file is left");
}

/// `connect … send` to a service elsewhere (its remote front door) without
/// a login there: the sentence says the login is needed on the server's
/// machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_says_the_login_is_needed_on_the_servers_machine() {
    let sb = newcomer();
    let token = "newcomer-remote-token-0123456789abcdef";
    let token_file = sb.root.join("remote.token");
    std::fs::write(&token_file, token).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut serve = service_command(&sb, &["serve", "--listen", &listen, "--token-file"]);
    serve
        .arg(&token_file)
        .env("MOONKALE_ROOT", &sb.workspace)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let _serve = serve.spawn().unwrap();
    let files = sb.files_for(&sb.workspace);
    wait_until("the served workspace", || {
        let info = files.read_info();
        async move { info }
    })
    .await;
    let url = format!("ws://{listen}/");
    let out = service_command(&sb, &["connect", &url, "--token-file"])
        .arg(&token_file)
        .args(["send", "hello"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "moonkale-service: Claude Code is not logged in on the server's machine: \
         run `claude auth login` in a terminal there, then try again.\n"
    );
}

/// `moonkale-service claude` in a terminal: the user's `claude` (here a
/// stand-in that prints its arguments) gets the terminal after one line of
/// ours on stderr that says where edits are reviewed, with an editor
/// attached or without; never a log line, neither of the command nor of the
/// service it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_says_one_line_of_its_own_and_where_edits_are_reviewed() {
    use std::os::unix::fs::PermissionsExt;
    let sb = newcomer();
    let stub = sb.root.join("claude-stand-in");
    std::fs::write(&stub, "#!/bin/sh\necho \"STAND_IN_CLAUDE $*\"\n").unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let claude = async || {
        let out = service_command(&sb, &["claude"])
            .env("MOONKALE_CLAUDE_BIN", &stub)
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "STAND_IN_CLAUDE --permission-mode default\n",
            "the user's claude runs with the terminal"
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(stderr.lines().count(), 1, "one line of ours: {stderr}");
        assert!(stderr.starts_with("moonkale: Claude Code starts connected to this workspace"));
        stderr
    };

    let alone = claude().await;
    assert!(
        alone.contains("no editor is attached")
            && alone.contains("`moonkale-service changes`")
            && !alone.contains("comes to your editor"),
        "{alone}"
    );

    let mut shim = sb.command("moonkale-shim");
    shim.arg("--workspace")
        .arg(&sb.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut shim = shim.spawn().unwrap();
    let mut ed = RawLsp::new(shim.stdout.take().unwrap(), shim.stdin.take().unwrap());
    ed.initialize("an-editor", &["utf-8"], Value::Null).await;
    let with_editor = claude().await;
    assert!(
        with_editor.contains("every edit comes to your editor for review"),
        "{with_editor}"
    );

    // The service `claude` started lives on its own (its output is not
    // the terminal's) and leaves once nobody uses it.
    let info = sb.files_for(&sb.workspace).read_info().expect("a service");
    ed.request("shutdown", Value::Null).await;
    ed.notify("exit", Value::Null).await;
    shim.wait().await.unwrap();
    wait_until("the auto-started service exits", || {
        let gone = !moonkale_service::runtime::process_alive(info.pid);
        async move { gone.then_some(()) }
    })
    .await;
}

/// A user whose only login is `ANTHROPIC_API_KEY` (as `claude -p` honours
/// it): `doctor` says the login is there, and `agent send` runs a turn
/// with that key (the service once dropped the variable, and the session
/// said "not logged in").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_in_the_environment_is_a_login_for_hosted_sessions() {
    let sb = newcomer();
    let fake = FakeApi::start(Script::new().default_reply(Reply::text("KEY_WAS_USED"))).await;
    // The fake's address, without the harness's key helper: the variable
    // is the only login.
    moonkale_tests::agent::write_claude_settings(&sb.home, fake.port);
    let settings = sb.home.join(".claude/settings.json");
    let mut json: Value = serde_json::from_slice(&std::fs::read(&settings).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("apiKeyHelper");
    std::fs::write(&settings, json.to_string()).unwrap();
    let key = "sk-ant-api03-only-in-the-environment";

    let out = service_command(&sb, &["doctor"])
        .env("ANTHROPIC_API_KEY", key)
        .output()
        .await
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.lines().any(|l| l.starts_with("ok    login")),
        "{report}"
    );
    let out = tokio::time::timeout(
        STEP,
        service_command(&sb, &["agent", "send", "hello"])
            .env("ANTHROPIC_API_KEY", key)
            .output(),
    )
    .await
    .expect("agent send ends")
    .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("KEY_WAS_USED"),
        "agent send: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let asked = fake.wait_prompt("hello", STEP).await;
    assert_eq!(asked.header("x-api-key"), Some(key));
    let info = sb.files_for(&sb.workspace).read_info().expect("a service");
    let _ = service_command(&sb, &["stop"]).output().await;
    wait_until("the service to stop", async || {
        (!std::path::Path::new(&format!("/proc/{}", info.pid)).exists()).then_some(())
    })
    .await;
}
