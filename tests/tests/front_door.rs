//! The typed front-door client (`moonkale_service::front_door`, for the
//! Moonkale shell) against a real service: documents and selection,
//! terminals with typed screens and updates, agent sessions.

use moonkale_service::front_door::{FrontDoor, Notification, OpenTerminal};
use moonkale_tests::{Sandbox, TIMEOUT};

/// Notifications until `pick` takes one (or the deadline fails the test).
async fn wait_for<T>(
    door: &mut FrontDoor,
    what: &str,
    mut pick: impl FnMut(&Notification) -> Option<T>,
) -> T {
    let found = tokio::time::timeout(TIMEOUT, async {
        loop {
            let n = door
                .next_notification()
                .await
                .expect("the service is there");
            if let Some(found) = pick(&n) {
                return found;
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

fn screen_text(snapshot: &moonkale_service::terminal::screen::Snapshot) -> String {
    snapshot
        .lines
        .iter()
        .map(|row| {
            row.spans
                .iter()
                .map(|s| s.text.as_str())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_and_selection() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let mut door = FrontDoor::connect_socket(&svc.info.socket, "moonkale-shell")
        .await
        .unwrap();
    let uri = sb.uri("a.txt");
    door.open_document(&uri, 1, "héllo\nworld\n").await.unwrap();
    door.replace_document(&uri, 2, "héllo\nthere\n")
        .await
        .unwrap();
    door.select(&uri, (1, 0), (1, 5)).await.unwrap();
    let doc = door.document(&uri).await.unwrap();
    assert_eq!(doc["text"], "héllo\nthere\n");
    assert_eq!(doc["version"], 2);
    let status = door.status().await.unwrap();
    let me = &status["editors"][0];
    assert_eq!(me["client"], "moonkale-shell", "{status}");
    assert_eq!(me["selection"]["anchor"]["line"], 1, "{status}");
    // No proposal waits: deciding one is a clear error.
    assert!(door.decide_proposal(None, true).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminals_render_typed_screens_and_updates() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&[]).await;
    let mut door = FrontDoor::connect_socket(&svc.info.socket, "moonkale-shell")
        .await
        .unwrap();
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
    let row = wait_for(&mut door, "the green row", |n| match n {
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
    let screen = door.terminal_screen(info.terminal).await.unwrap();
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
    let code = wait_for(&mut door, "the shell's exit", |n| match n {
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
    let cli = sb.root.join("claude");
    // Reads our lines; answers every user turn with text and a result.
    std::fs::write(
        &cli,
        r#"#!/bin/sh
[ "$1" = --version ] && { echo '2.1.332 (Claude Code)'; exit 0; }
while read -r line; do
  case "$line" in
    *'"type":"user"'*)
      echo '{"type":"system","subtype":"init","session_id":"s"}'
      echo '{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"stand-in reply"}}}'
      echo '{"type":"assistant","message":{"content":[{"type":"text","text":"stand-in reply"}]}}'
      echo '{"type":"result","subtype":"success","is_error":false,"result":"stand-in reply"}'
      ;;
  esac
done
"#,
    )
    .unwrap();
    std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let svc = sb
        .start_service_with_env(&[], &[("MOONKALE_CLAUDE_BIN", cli.to_str().unwrap())])
        .await;
    let mut door = FrontDoor::connect_socket(&svc.info.socket, "moonkale-shell")
        .await
        .unwrap();
    assert!(door.agent_list().await.unwrap().is_empty());
    let session = door.agent_start(Some("hello"), None).await.unwrap();
    let text = wait_for(&mut door, "the streamed text", |n| match n {
        Notification::AgentText { session: s, text } if *s == session => Some(text.clone()),
        _ => None,
    })
    .await;
    assert_eq!(text, "stand-in reply");
    wait_for(&mut door, "the turn's end", |n| match n {
        Notification::AgentEvent { event, .. }
            if event.kind == "state" && event.data["state"] == "idle" =>
        {
            Some(())
        }
        _ => None,
    })
    .await;
    let page = door.agent_events(&session, 0).await.unwrap();
    assert_eq!(page.events[0].kind, "session");
    assert!(
        page.events
            .iter()
            .any(|e| e.kind == "prompt" && e.data["text"] == "hello")
    );
    assert_eq!(page.state, moonkale_service::agent::SessionState::Idle);
    let list = door.agent_list().await.unwrap();
    assert_eq!(list[0].session, session);
    assert_eq!(list[0].permission_mode, "plan");
    assert_eq!(list[0].title, "hello");
    assert!(
        door.agent_answer(&format!("{session}/9"), true, false)
            .await
            .is_err()
    );
}
