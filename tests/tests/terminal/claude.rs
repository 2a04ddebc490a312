//! "Start Claude Code here" and `moonkale-service claude` with the real CLI
//! generations: the CLI in a terminal connects to the service.

use std::path::Path;
use std::time::Duration;

use moonkale_tests::agent::{PERMISSION_DIALOG, bash_writes};
use moonkale_tests::claude_cli::{Claude, ClaudeConfig, claude_bin, claude_env};
use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::lsp::Client;
use moonkale_tests::{bin, poll_until, short};
use serde_json::{Value, json};

use crate::{
    STEP, input_text, keys, live_in_session, pid_of, screen, text, wait_screen, wait_screen_for,
    world,
};

/// The Claude Code clients in `moonkale/status`.
async fn claude_clients(c: &mut Client) -> Vec<Value> {
    let st = c.call("moonkale/status", Value::Null).await;
    st["claudeClients"].as_array().cloned().unwrap_or_default()
}

/// Waits up to `timeout` until `moonkale/status` shows a Claude Code client
/// with `pid`; the clients it shows last if none has it by then.
async fn claude_client_connects(
    c: &mut Client,
    pid: i32,
    timeout: Duration,
) -> Result<(), Vec<Value>> {
    let connected = poll_until(timeout, async || {
        let clients = claude_clients(c).await;
        clients.iter().any(|cl| cl["pid"] == pid).then_some(())
    })
    .await;
    match connected {
        Some(()) => Ok(()),
        None => Err(claude_clients(c).await),
    }
}

fn debug_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(40)..].join("\n")
}

/// (13) "Start Claude Code here" with the real CLI: the editor runs
/// `moonkale.startClaude`; the CLI in the service's terminal connects to the
/// service (status shows it with its pid), shows its prompt, and a prompt
/// typed into the terminal gets the fake model's reply on its screen; the
/// editor was told about the permission mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_claude_here_with_the_real_cli() {
    let mut w = world()
        .claude_in_terminals()
        .script(Script::new().on_prompt("say the word", Reply::text("TERMINAL_REPLY_OK")))
        .start()
        .await;
    let config = ClaudeConfig::new(&w.sb.home, &w.sb.workspace, w.fake.port);
    let port = w.svc().info.ide_port.unwrap();
    let (fake, c) = (&w.fake, &mut w.ed);
    let debug = config.debug_file.clone().unwrap();
    let info = c
        .call(
            "workspace/executeCommand",
            json!({"command": "moonkale.startClaude",
                   "arguments": [["--debug-file", debug.display().to_string()]]}),
        )
        .await;
    let id = info["terminal"]
        .as_u64()
        .unwrap_or_else(|| panic!("startClaude answered {info}"));
    let pid = pid_of(&info);
    let argv: Vec<&str> = info["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        argv.windows(2)
            .any(|w| w == ["--permission-mode", "default"]),
        "{info}"
    );
    let msg = c
        .take("window/showMessage about the permission mode", STEP, |m| {
            m["method"] == "window/showMessage"
                && m["params"]["message"]
                    .as_str()
                    .is_some_and(|s| s.contains("permission mode"))
        })
        .await;
    eprintln!("showMessage: {}", msg["params"]["message"]);

    wait_screen_for(
        c,
        id,
        "the CLI's prompt",
        Duration::from_secs(20),
        cli_ready,
    )
    .await;
    // Connected to the service, with its own pid.
    if let Err(clients) = claude_client_connects(c, pid, STEP).await {
        let s = screen(c, id).await;
        panic!(
            "no Claude Code client with pid {pid} in status: {clients:?}\n--- screen ---\n{}\n\
             --- CLI debug log ---\n{}\n{}",
            text(&s),
            debug_tail(&debug),
            c.diag.context()
        );
    }
    // The environment it got: the port, the switches, none of ours.
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap())
        .into_owned();
    for want in [
        format!("CLAUDE_CODE_SSE_PORT={port}"),
        "ENABLE_IDE_INTEGRATION=true".into(),
        "TERM=xterm-256color".into(),
    ] {
        assert!(environ.split('\0').any(|kv| kv == want), "no {want}");
    }
    // None of ours but the hooks' (where the service is, the start's
    // secret).
    assert!(
        !environ
            .split('\0')
            .any(|kv| kv.starts_with("MOONKALE") && !kv.starts_with("MOONKALE_HOOK_"))
    );

    let s = say_the_word(c, id, "TERMINAL_REPLY_OK").await;
    eprintln!("--- the service terminal ---\n{}", text(&s).trim_end());
    assert!(
        fake.outside_attempts().is_empty(),
        "the CLI tried to leave: {:?}",
        fake.outside_attempts()
    );
    c.call("moonkale/terminal/close", json!({"terminal": id}))
        .await;
    assert!(
        poll_until(Duration::from_secs(5), async || (live_in_session(pid)
            .is_empty())
        .then_some(()))
        .await
        .is_some(),
        "the CLI survived close"
    );
}

/// (14) `moonkale-service claude` in the user's own terminal, in the
/// workspace: it becomes the CLI, connects to the running service, and a
/// prompt gets the fake's reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moonkale_service_claude_in_a_pty() {
    let mut w = world()
        .script(Script::new().on_prompt("say the word", Reply::text("OWN_TERMINAL_REPLY_OK")))
        .start()
        .await;
    let (config, debug) = own_terminal_claude(&w);
    let mut cli = Claude::spawn(config);
    let pid = cli.pid();
    let ready = cli
        .try_wait_screen(Duration::from_secs(20), |s| {
            s.contains("? for shortcuts") && s.contains('❯')
        })
        .await;
    assert!(
        ready.is_some(),
        "no prompt:\n{}\n--- raw ---\n{}\n--- debug ---\n{}\n{}",
        cli.screen(),
        short(&cli.raw_output(), 2000),
        debug_tail(&debug),
        w.service_log_tail(40)
    );
    if let Err(clients) = claude_client_connects(&mut w.ed, pid as i32, STEP).await {
        panic!(
            "no Claude Code client with pid {pid} in status: {clients:?}\n--- screen ---\n{}\n\
             --- debug ---\n{}\n{}",
            cli.screen(),
            debug_tail(&debug),
            w.service_log_tail(40)
        );
    }
    let env = cli.process_env();
    let port = w.svc().info.ide_port.unwrap().to_string();
    assert!(
        env.iter()
            .any(|(k, v)| k == "CLAUDE_CODE_SSE_PORT" && *v == port),
        "{env:?}"
    );
    assert!(
        cli.raw_output().contains("permission mode"),
        "the launcher did not say which permission mode"
    );
    cli.submit("say the word", STEP).await;
    let screen = cli
        .wait_for_text("OWN_TERMINAL_REPLY_OK", Duration::from_secs(15))
        .await;
    eprintln!("--- the user's terminal ---\n{screen}");
    drop(cli);
}

/// The older CLI generations (2.0.50 and 1.0.60, installed by
/// `scripts/install-test-peers.sh`) started by "Start Claude Code here" also
/// connect at once: they need `CLAUDE_CODE_AUTO_CONNECT_IDE` beside the
/// port (cli-matrix.md), which the launcher sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_claude_here_connects_older_generations() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for version in ["2.0.50", "1.0.60"] {
        let bin = repo.join(format!(".peers/claude-{version}/node_modules/.bin/claude"));
        assert!(
            bin.is_file(),
            "claude {version} is not installed at {}; run scripts/install-test-peers.sh",
            bin.display()
        );
        let mut w = world()
            .claude_in_terminals()
            .env("MOONKALE_CLAUDE_BIN", bin.display().to_string())
            .start()
            .await;
        let c = &mut w.ed;
        let info = c
            .call(
                "workspace/executeCommand",
                json!({"command": "moonkale.startClaude", "arguments": []}),
            )
            .await;
        let id = info["terminal"]
            .as_u64()
            .unwrap_or_else(|| panic!("startClaude answered {info}"));
        let pid = pid_of(&info);
        if let Err(clients) = claude_client_connects(c, pid, Duration::from_secs(25)).await {
            let s = screen(c, id).await;
            panic!(
                "claude {version} (pid {pid}) did not connect: {clients:?}\n--- screen ---\n{}\n{}",
                text(&s),
                c.diag.context()
            );
        }
        c.call("moonkale/terminal/close", json!({"terminal": id}))
            .await;
    }
}

/// (15) "Start Claude Code here" inside a sandbox: `moonkale.startClaude`
/// with the command that runs `claude` in the jail (its own loopback and
/// HOME) opens a service terminal in which the real CLI runs jailed and
/// linked: the editor's cursor shows in its prompt box, a prompt gets the
/// model's reply (which only the jail's loopback reaches), and when the
/// terminal is closed its link socket goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_claude_here_inside_a_sandbox() {
    let mut w = world()
        .jailed()
        .claude_in_terminals()
        .file("hello.txt", "hello world\nsecond line\n")
        .script(Script::new().on_prompt("say the word", Reply::text("JAILED_TERMINAL_OK")))
        .start()
        .await;
    let home = w.jail().home().to_owned();
    moonkale_tests::claude_cli::seed_home(&home, &[&w.sb.workspace]);
    let debug = w.sb.root.join("jailed-claude-debug.log");
    let sandbox = w.jail().claude_command();
    let uri = w.open("hello.txt").await;
    let c = &mut w.ed;
    let info = c
        .call(
            "workspace/executeCommand",
            json!({"command": "moonkale.startClaude",
                   "arguments": [["--debug-file", debug.display().to_string()], sandbox]}),
        )
        .await;
    let id = info["terminal"]
        .as_u64()
        .unwrap_or_else(|| panic!("startClaude answered {info}"));
    let argv = info["argv"].to_string();
    assert!(argv.contains("\"sandbox-link\",\"--socket\""), "{argv}");
    let sockets = |ws: &Path| {
        std::fs::read_dir(ws)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".moonkale-link-")
            })
            .count()
    };
    assert_eq!(sockets(&w.sb.workspace), 1);
    linked_and_ready(&mut w, &uri, id).await;
    let c = &mut w.ed;
    say_the_word(c, id, "JAILED_TERMINAL_OK").await;
    c.call("moonkale/terminal/close", json!({"terminal": id}))
        .await;
    let ws = w.sb.workspace.clone();
    let gone = poll_until(STEP, async || (sockets(&ws) == 0).then_some(())).await;
    assert!(gone.is_some(), "the terminal's link outlived it");
}

/// (15b) The workspace's default sandbox, set by the user with
/// `moonkale-service sandbox set`: the editor's plain "Start Claude Code
/// here" runs the CLI in it and linked (its reply comes from the fake API
/// that only the jail's loopback reaches; the editor's file shows in its
/// prompt box). A sandbox the repository names in its own files changes
/// nothing. After `sandbox clear` the next start is unjailed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_claude_here_runs_in_the_workspaces_default_sandbox() {
    let mut w = world()
        .jailed()
        .claude_in_terminals()
        .file("hello.txt", "hello world\nsecond line\n")
        .file(
            ".moonkale/sandbox.json",
            r#"{"command": ["/bin/sh", "-c", "touch PLANTED; exec claude"]}"#,
        )
        .file(".moonkale/sandboxes.json", r#"{"sandboxes": []}"#)
        .script(Script::new().on_prompt("say the word", Reply::text("DEFAULT_SANDBOX_OK")))
        .start()
        .await;
    let home = w.jail().home().to_owned();
    moonkale_tests::claude_cli::seed_home(&home, &[&w.sb.workspace]);
    let ws = w.sb.workspace.display().to_string();
    let said = w.set_jail_as_default_sandbox(&[]).await;
    assert!(said.contains("now runs in the sandbox"), "{said}");
    let out = w
        .command(&["sandbox", "show", "--workspace", &ws])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(shown.contains("moonkale-jail-enter"), "{shown}");

    let uri = w.open("hello.txt").await;
    let c = &mut w.ed;
    let info = c
        .call(
            "workspace/executeCommand",
            json!({"command": "moonkale.startClaude", "arguments": []}),
        )
        .await;
    let id = info["terminal"]
        .as_u64()
        .unwrap_or_else(|| panic!("startClaude answered {info}"));
    let argv = info["argv"].to_string();
    assert!(argv.contains("\"sandbox-link\",\"--socket\""), "{argv}");
    assert!(argv.contains("moonkale-jail-enter"), "{argv}");
    linked_and_ready(&mut w, &uri, id).await;
    let c = &mut w.ed;
    say_the_word(c, id, "DEFAULT_SANDBOX_OK").await;
    assert!(
        !w.sb.workspace.join("PLANTED").exists(),
        "the repository's sandbox file ran"
    );
    c.call("moonkale/terminal/close", json!({"terminal": id}))
        .await;

    let out = w
        .command(&["sandbox", "clear", "--workspace", &ws])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("unjailed again"));
    let info =
        w.ed.call(
            "workspace/executeCommand",
            json!({"command": "moonkale.startClaude", "arguments": []}),
        )
        .await;
    let argv = info["argv"].to_string();
    assert!(!argv.contains("sandbox-link"), "{argv}");
    let id = info["terminal"].as_u64().expect("a terminal");
    w.ed.call("moonkale/terminal/close", json!({"terminal": id}))
        .await;
}

/// The CLI's prompt is on the screen, ready for input.
fn cli_ready(s: &Value) -> bool {
    let t = text(s);
    t.contains("? for shortcuts") && t.contains('❯')
}

/// Types "say the word" into the CLI of terminal `id`, sends it, and waits
/// for `reply` on the screen; that screen.
async fn say_the_word(c: &mut Client, id: u64, reply: &str) -> Value {
    input_text(c, id, "say the word").await;
    wait_screen(c, id, "the typed prompt", |s| {
        text(s).contains("say the word")
    })
    .await;
    keys(c, id, &["Enter"]).await;
    wait_screen_for(c, id, "the model's reply", Duration::from_secs(15), |s| {
        text(s).contains(reply)
    })
    .await
}

/// The CLI of terminal `id` at its prompt, and linked: the editor's
/// cursor on `uri` shows in it.
async fn linked_and_ready(w: &mut moonkale_tests::world::World, uri: &str, id: u64) {
    wait_screen_for(
        &mut w.ed,
        id,
        "the CLI's prompt",
        Duration::from_secs(20),
        cli_ready,
    )
    .await;
    cursor_shows_in_terminal(w, uri, id).await;
}

/// Linked: the cursor the editor reports on `uri` (hello.txt) shows in the
/// CLI of terminal `id`. (The CLI may take the first push in before its UI
/// listens: the cursor moves again, a real change each time, as
/// `World::show_in_cli` does.)
async fn cursor_shows_in_terminal(w: &mut moonkale_tests::world::World, uri: &str, id: u64) {
    let deadline = tokio::time::Instant::now() + STEP;
    for line in [0u32, 1].into_iter().cycle() {
        w.cursor(uri, (line, 1)).await;
        let shown = poll_until(Duration::from_secs(1), async || {
            text(&screen(&mut w.ed, id).await)
                .contains("⧉ In hello.txt")
                .then_some(())
        })
        .await;
        if shown.is_some() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the jailed CLI never showed the editor's file:\n{}",
            text(&screen(&mut w.ed, id).await)
        );
    }
}

/// The pending `moonkale/agent/approval` the editor (subscribed to every
/// session) is told of.
async fn pending_question(c: &mut Client, what: &str) -> Value {
    let note = c
        .take(what, Duration::from_secs(30), |m| {
            m["method"] == "moonkale/agent/approval" && m["params"]["status"] == "pending"
        })
        .await;
    note["params"]["approval"].clone()
}

/// A `claude` started here asks about a command: through the CLI's
/// `PermissionRequest` hook the question reaches a front end (here the
/// editor's `moonkale/agent/approval`, as the page and the `agent`
/// commands get it) while the terminal shows its own dialog; allowed from
/// there, the command runs and the dialog goes. A second question answered
/// in the terminal is withdrawn from every front end (no ghost card); a
/// third, denied with words, gives the model those words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_claudes_questions_reach_every_front_end() {
    let mut w = world().claude_in_terminals().start().await;
    let first = w.path("allowed-from-afar.txt");
    let second = w.path("allowed-in-the-terminal.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt("first file", bash_writes(&first, "FROM_AFAR"))
            .on_prompt("second file", bash_writes(&second, "IN_THE_TERMINAL"))
            .on_prompt("third file", bash_writes(&w.path("never.txt"), "NEVER"))
            .on_prompt(
                "fourth file",
                bash_writes(&w.path("refused.txt"), "REFUSED"),
            )
            .after_tool("Bash", Reply::text("BASH_TURN_DONE")),
    );
    let c = &mut w.ed;
    c.call("moonkale/agent/subscribe", json!({})).await;
    let (id, _) = c.start_claude_here().await;

    let ask = async |c: &mut Client, prompt: &str| {
        c.submit_in_terminal(id, prompt).await;
        let asked = pending_question(c, "the hook's question").await;
        c.terminal_shows(id, "the terminal's dialog", |t| {
            t.contains(PERMISSION_DIALOG)
        })
        .await;
        asked
    };

    // 1. Allowed from afar: the command runs, the terminal's dialog goes.
    let asked = ask(c, "first file").await;
    assert_eq!(asked["tool"], "Bash", "{asked}");
    assert!(
        asked["title"]
            .as_str()
            .is_some_and(|t| t.contains("echo FROM_AFAR")),
        "{asked}"
    );
    c.call(
        "moonkale/agent/answer",
        json!({"approval": asked["approval"], "allow": true}),
    )
    .await;
    wait_screen_for(c, id, "the turn's end", STEP, |s| {
        let t = text(s);
        t.contains("BASH_TURN_DONE") && !t.contains("Do you want to proceed?")
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(&first).unwrap_or_default(),
        "FROM_AFAR\n"
    );

    // 2. Answered in the terminal: the question is withdrawn everywhere.
    let asked = ask(c, "second file").await;
    c.answer_dialog_in_terminal(id, "1").await;
    c.take("the question withdrawn", STEP, |m| {
        m["method"] == "moonkale/agent/approval"
            && m["params"]["status"] != "pending"
            && m["params"]["approval"]["approval"] == asked["approval"]
    })
    .await;
    wait_screen_for(c, id, "the second turn's end", STEP, |s| {
        text(s).matches("BASH_TURN_DONE").count() >= 2
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(&second).unwrap_or_default(),
        "IN_THE_TERMINAL\n"
    );

    // 3. Denied from afar with words: the model hears them.
    let asked = ask(c, "third file").await;
    c.call(
        "moonkale/agent/answer",
        json!({"approval": asked["approval"], "allow": false, "message": "use pathlib instead"}),
    )
    .await;
    let heard = poll_until(STEP, async || {
        w.fake.requests().into_iter().rev().find_map(|r| {
            r.tool_result("Bash")
                .filter(|t| t.is_error && t.text.contains("use pathlib instead"))
        })
    })
    .await;
    assert!(
        heard.is_some(),
        "the model did not hear the reason:\n{}",
        w.fake.summary()
    );
    assert!(!w.path("never.txt").exists());

    // 4. Refused in the terminal ("4. No"): withdrawn everywhere too.
    let asked = ask(&mut w.ed, "fourth file").await;
    w.ed.answer_dialog_in_terminal(id, "4").await;
    w.ed.take("the refused question withdrawn", STEP, |m| {
        m["method"] == "moonkale/agent/approval"
            && m["params"]["status"] != "pending"
            && m["params"]["approval"]["approval"] == asked["approval"]
    })
    .await;
    assert!(!w.path("refused.txt").exists());

    // Only the CLIs the service started can ask: a caller without one of
    // their secrets is refused, and nothing is shown.
    let forged =
        w.ed.request(
            "moonkale/agent/hookPermission",
            json!({"token": "0".repeat(64), "input": {"session_id": asked["session"],
                   "tool_name": "Bash", "tool_input": {"command": "rm -rf ~"}}}),
        )
        .await;
    assert!(
        forged["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not one this service gave")),
        "{forged}"
    );
}

/// `moonkale-service claude` as a person runs it in their own terminal (a
/// PTY), in the workspace; and its debug log.
fn own_terminal_claude(w: &moonkale_tests::world::World) -> (ClaudeConfig, std::path::PathBuf) {
    let (mut config, _) = claude_env(&w.sb, &w.fake);
    let debug = config.debug_file.take().unwrap();
    config.bin = Some(bin("moonkale-service"));
    config.args = vec![
        "claude".into(),
        "--".into(),
        "--debug-file".into(),
        debug.display().to_string(),
    ];
    config.env = vec![
        ("XDG_RUNTIME_DIR".into(), w.sb.runtime.display().to_string()),
        (
            "MOONKALE_SERVICE_BIN".into(),
            bin("moonkale-service").display().to_string(),
        ),
        (
            "MOONKALE_CLAUDE_BIN".into(),
            claude_bin().display().to_string(),
        ),
    ];
    (config, debug)
}

/// The `claude` of `moonkale-service claude` in the user's own terminal
/// asks about a command: the question reaches the front ends (the hooks
/// with a secret the service gave this start), and allowed there, the
/// command runs in the user's terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moonkale_service_claudes_question_is_answered_from_afar() {
    let mut w = world().start().await;
    let target = w.path("from-the-own-terminal.txt");
    w.fake
        .set_script(write_it_with_bash(&target, "OWN_ALLOWED", "OWN_BASH_DONE"));
    w.ed.call("moonkale/agent/subscribe", json!({})).await;
    let (config, _) = own_terminal_claude(&w);
    let mut cli = Claude::spawn(config);
    cli.wait_ready(Duration::from_secs(20)).await;
    allowed_from_afar(&mut w, &mut cli, &target, "OWN_ALLOWED", "OWN_BASH_DONE").await;
}

/// The opt-in for a `claude` the user starts by hand: `hooks install` adds
/// the service's hooks to the user's own Claude Code settings (a copy of
/// the file kept); such a CLI's question is answered from a front end;
/// `hooks remove` takes the hooks out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_started_by_hand_is_answered_from_afar_after_the_opt_in() {
    let mut w = world().start().await;
    let target = w.path("from-a-hand-started-claude.txt");
    w.fake.set_script(write_it_with_bash(
        &target,
        "BY_HAND_ALLOWED",
        "BY_HAND_DONE",
    ));
    let settings = w.sb.home.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, r#"{"theme": "dark"}"#).unwrap();
    let hooks = async |w: &moonkale_tests::world::World, action: &str| {
        let out = w.command(&["hooks", action]).output().await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(&settings).unwrap()
    };
    let installed = hooks(&w, "install").await;
    assert!(
        installed.contains("hook permission --user") && installed.contains("\"theme\""),
        "{installed}"
    );
    assert_eq!(
        std::fs::read_to_string(w.sb.home.join(".claude/settings.json.moonkale-backup")).unwrap(),
        r#"{"theme": "dark"}"#
    );

    w.ed.call("moonkale/agent/subscribe", json!({})).await;
    let config = ClaudeConfig::new(&w.sb.home, &w.sb.workspace, w.fake.port)
        .env("XDG_RUNTIME_DIR", &w.sb.runtime.display().to_string());
    let mut cli = Claude::spawn(config);
    cli.wait_ready(Duration::from_secs(20)).await;
    allowed_from_afar(&mut w, &mut cli, &target, "BY_HAND_ALLOWED", "BY_HAND_DONE").await;
    drop(cli);

    let removed = hooks(&w, "remove").await;
    assert!(!removed.contains("moonkale-service"), "{removed}");
    assert!(removed.contains("\"theme\""), "{removed}");
}

/// The script of a CLI that, asked to "write it", runs `echo WORD > file`,
/// then says `done`.
fn write_it_with_bash(file: &Path, word: &str, done: &str) -> Script {
    Script::new()
        .on_prompt("write it", bash_writes(file, word))
        .after_tool("Bash", Reply::text(done))
}

/// `cli` is asked to "write it"; its Bash question reaches the editor (as
/// every front end), is allowed there, and the command runs: `file` holds
/// `word` and the CLI says `done`.
async fn allowed_from_afar(
    w: &mut moonkale_tests::world::World,
    cli: &mut Claude,
    file: &Path,
    word: &str,
    done: &str,
) {
    cli.submit("write it", STEP).await;
    let asked = pending_question(&mut w.ed, "the CLI's question").await;
    assert_eq!(asked["tool"], "Bash", "{asked}");
    w.ed.call(
        "moonkale/agent/answer",
        json!({"approval": asked["approval"], "allow": true}),
    )
    .await;
    cli.wait_for_text(done, STEP).await;
    assert_eq!(
        std::fs::read_to_string(file).unwrap_or_default(),
        format!("{word}\n")
    );
}

/// A prompt sent to the session of a `claude` running in a service
/// terminal (from the page, `agent send --session`) is typed into that
/// terminal: the CLI's own conversation takes it, and the model answers
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_sent_to_a_terminals_claude_is_typed_into_it() {
    let mut w = world()
        .claude_in_terminals()
        .script(Script::new().on_prompt("from afar", Reply::text("HEARD_FROM_AFAR")))
        .start()
        .await;
    let c = &mut w.ed;
    let (id, info) = c.start_claude_here().await;
    let argv: Vec<&str> = info["argv"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let session = argv
        .windows(2)
        .find_map(|w| (w[0] == "--session-id").then(|| w[1].to_owned()))
        .unwrap_or_else(|| panic!("no --session-id in {info}"));
    let sent = c
        .call(
            "moonkale/agent/send",
            json!({"session": session, "prompt": "a word from afar"}),
        )
        .await;
    assert_eq!(sent["session"], session.as_str(), "{sent}");
    wait_screen_for(c, id, "the model's reply in the terminal", STEP, |s| {
        text(s).contains("HEARD_FROM_AFAR")
    })
    .await;
    w.fake.wait_prompt("a word from afar", STEP).await;
}
