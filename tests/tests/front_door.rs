//! The front-door client (`moonkale_client`, for the Moonkale shell)
//! against a real service: documents and selection, terminals with typed
//! screens and updates, agent sessions, and the example shell.

use moonkale_client::moonkale_protocol::agent::{AnswerParams, SessionEvent, SessionState};
use moonkale_client::moonkale_protocol::terminal::OpenParams as OpenTerminal;
use moonkale_client::{Client, Notification, Notifications};
use moonkale_tests::{Sandbox, TIMEOUT};

/// Notifications until `pick` takes one (or the deadline fails the test).
async fn wait_for<T>(
    notes: &mut Notifications,
    what: &str,
    mut pick: impl FnMut(&Notification) -> Option<T>,
) -> T {
    let found = tokio::time::timeout(TIMEOUT, async {
        loop {
            let n = notes.next().await.expect("the service is there");
            if let Some(found) = pick(&n) {
                return found;
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

fn screen_text(snapshot: &moonkale_service::terminal::screen::Snapshot) -> String {
    moonkale_client::screen_text(&snapshot.lines)
}

/// A client of the service at `socket` as the shell connects, and its
/// notifications.
async fn shell(socket: &std::path::Path) -> (Client, Notifications) {
    let door = Client::connect_socket(socket, "moonkale-shell")
        .await
        .unwrap();
    let notes = door.notifications().unwrap();
    (door, notes)
}

/// A service whose `claude` is a stand-in shell script: it reads our
/// stream-json lines and answers with the `case` arms given.
async fn with_stand_in_cli(sb: &Sandbox, arms: &str) -> moonkale_tests::Service {
    let cli = sb.root.join("claude");
    let script = format!(
        "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo '2.1.332 (Claude Code)'; exit 0; }}\n\
         while read -r line; do\n  case \"$line\" in{arms}  esac\ndone\n"
    );
    std::fs::write(&cli, script).unwrap();
    std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    sb.start_service_with_env(&[], &[("MOONKALE_CLAUDE_BIN", cli.to_str().unwrap())])
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_and_selection() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let (door, _notes) = shell(&svc.info.socket).await;
    let uri = sb.uri("a.txt");
    door.open_document(&uri, 1, "héllo\nworld\n").await.unwrap();
    door.replace_document(&uri, 2, "héllo\nthere\n")
        .await
        .unwrap();
    door.select(&uri, (1, 0), (1, 5)).await.unwrap();
    let doc = door.document(&uri).await.unwrap();
    assert_eq!(doc.text, "héllo\nthere\n");
    assert_eq!(doc.version, 2);
    let status = door.status().await.unwrap();
    let me = &status.editors[0];
    assert_eq!(me.client, "moonkale-shell", "{status:?}");
    let selection = me.selection.as_ref().expect("a selection");
    assert_eq!(selection.anchor.line, 1, "{status:?}");
    // No proposal waits: deciding one is a clear error.
    assert!(door.accept_proposal(None).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminals_render_typed_screens_and_updates() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let (door, mut notes) = shell(&svc.info.socket).await;
    let info = door
        .terminal_open(&OpenTerminal {
            argv: Some(vec!["/bin/sh".into()]),
            rows: 10,
            cols: 40,
            ..OpenTerminal::default()
        })
        .await
        .unwrap();
    assert_eq!((info.rows, info.cols), (10, 40));
    door.terminal_text(
        info.terminal,
        "printf '\\033[1;32mgreen\\033[0m-%s\\n' $((6*7))",
    )
    .await
    .unwrap();
    door.terminal_keys(info.terminal, &["Enter"]).await.unwrap();
    let row = wait_for(&mut notes, "the green row", |n| match n {
        Notification::TerminalUpdate { terminal, update } if *terminal == info.terminal => update
            .lines
            .iter()
            .find(|r| r.spans.first().is_some_and(|s| s.text == "green"))
            .cloned(),
        _ => None,
    })
    .await;
    let green = &row.spans[0];
    assert!(green.bold);
    assert_eq!(
        green.fg,
        Some(moonkale_service::terminal::screen::Color::Indexed(2))
    );
    assert_eq!(row.spans[1].text, "-42");
    let screen = door.terminal_screen(info.terminal).await.unwrap().snapshot;
    assert!(
        screen_text(&screen).contains("green-42"),
        "{}",
        screen_text(&screen)
    );
    door.terminal_resize(info.terminal, 12, 50).await.unwrap();
    assert!(door.terminal_resize(info.terminal, 0, 0).await.is_err());
    assert_eq!(door.terminal_list().await.unwrap()[0].rows, 12);
    door.terminal_keys(info.terminal, &["Ctrl+d"])
        .await
        .unwrap();
    let code = wait_for(&mut notes, "the shell's exit", |n| match n {
        Notification::TerminalExit {
            terminal,
            exit_code,
        } if *terminal == info.terminal => Some(*exit_code),
        _ => None,
    })
    .await;
    assert_eq!(code, Some(0));
    door.terminal_close(info.terminal).await.unwrap();
    assert!(door.terminal_list().await.unwrap().is_empty());
}

/// Agent sessions through the typed client; the CLI is a stand-in that
/// answers one turn in stream-json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sessions() {
    let sb = Sandbox::new();
    // Answers every user turn with text and a result.
    let svc = with_stand_in_cli(
        &sb,
        r#"
    *'"type":"user"'*)
      echo '{"type":"system","subtype":"init","session_id":"s"}'
      echo '{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"stand-in reply"}}}'
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"stand-in reply"}]}}'
      echo '{"type":"result","subtype":"success","is_error":false,"result":"stand-in reply"}'
      ;;
"#,
    )
    .await;
    let (door, mut notes) = shell(&svc.info.socket).await;
    assert!(door.agent_list().await.unwrap().is_empty());
    let session = door.agent_start(Some("hello"), None).await.unwrap().session;
    let text = wait_for(&mut notes, "the streamed text", |n| match n {
        Notification::AgentText {
            session: s,
            text,
            thinking: false,
            ..
        } if *s == session => Some(text.clone()),
        _ => None,
    })
    .await;
    assert_eq!(text, "stand-in reply");
    wait_for(&mut notes, "the turn's end", |n| match n {
        Notification::AgentEvent { event, .. } => match &event.event {
            SessionEvent::State(data) if data.state == SessionState::Idle => Some(()),
            _ => None,
        },
        _ => None,
    })
    .await;
    let page = door.agent_events(&session, 0).await.unwrap();
    assert_eq!(page.events[0].event.kind(), "session");
    assert!(
        page.events
            .iter()
            .any(|e| matches!(&e.event, SessionEvent::Prompt(p) if p.text == "hello"))
    );
    assert_eq!(page.state, moonkale_service::agent::SessionState::Idle);
    let list = door.agent_list().await.unwrap();
    assert_eq!(list[0].session, session);
    assert_eq!(list[0].permission_mode, "plan");
    assert_eq!(list[0].title, "hello");
    assert!(
        door.agent_answer(AnswerParams::allow(format!("{session}/9")))
            .await
            .is_err()
    );
}

/// The example front end (`client/examples/shell.rs`), built by the test
/// command, run against a service whose CLI is a stand-in that asks to
/// write a file and finishes the turn once allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_shell_runs_against_a_service() {
    let sb = Sandbox::new();
    let svc = with_stand_in_cli(
        &sb,
        r#"
    *'"type":"user"'*)
      echo '{"type":"system","subtype":"init","session_id":"s"}'
      echo '{"type":"control_request","request_id":"perm-1","request":{"subtype":"can_use_tool","tool_name":"Write","input":{"file_path":"'"$PWD"'/hello.txt","content":"hello"}}}'
      ;;
    *'"behavior":"allow"'*)
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"wrote it"}]}}'
      echo '{"type":"result","subtype":"success","is_error":false,"result":"wrote it"}'
      ;;
"#,
    )
    .await;
    let built = moonkale_tests::bin("moonkale-service");
    let example = built.parent().unwrap().join("examples").join("shell");
    assert!(
        example.is_file(),
        "{} is not built: run `cargo build --workspace --bins --examples` first",
        example.display()
    );
    // Found from the workspace folder, as a shell started there finds it.
    let mut run = tokio::process::Command::new(&example);
    run.arg(&sb.workspace)
        .env("XDG_RUNTIME_DIR", &sb.runtime)
        .kill_on_drop(true);
    let out = tokio::time::timeout(TIMEOUT, run.output())
        .await
        .expect("the example finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let file = sb.workspace.join("example.txt");
    let expected = [
        format!("opened {}", file.display()),
        "selection example.txt 0:0 -> 0:5 (moonkale/selectionChanged)".into(),
        "selection example.txt 1:0 -> 1:3 (moonkale/selectionChanged)".into(),
        "session started".into(),
        "approval asked: Write hello.txt".into(),
        "approval answered: allow".into(),
        "turn ended: idle".into(),
        "screen 4x30:".into(),
        "| bold and plain".into(),
        "| second line".into(),
    ];
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, expected, "{stdout}");
    drop(svc);
}
