//! A front end in miniature, as the Moonkale shell uses the front door:
//! it opens a document, follows the selection, answers the approval a
//! Claude Code session asks, and renders a terminal's screen as text.
//!
//! ```text
//! cargo run -p moonkale-client --example shell -- [SOCKET|FOLDER] [PROMPT]
//! ```
//!
//! SOCKET is a running service's unix socket; a FOLDER (default: the
//! current one) is looked up in the runtime directory. The session runs in
//! permission mode `default`, so a write asks: PROMPT should make Claude
//! write a file.

use std::path::PathBuf;
use std::time::Duration;

use moonkale_client::moonkale_protocol::agent::{
    AnswerParams, ApprovalStatus, PermissionMode, SessionEvent,
};
use moonkale_client::moonkale_protocol::lsp_types::Url;
use moonkale_client::moonkale_protocol::status::SelectionStatus;
use moonkale_client::moonkale_protocol::terminal::OpenParams;
use moonkale_client::{Client, Notification, Notifications, screen_text};
use tokio::sync::mpsc;

/// How long one step may wait for the service (a turn of a real Claude
/// takes a while).
const STEP: Duration = Duration::from_secs(120);

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let target = args
        .next()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let prompt = args
        .next()
        .unwrap_or_else(|| "Write the word hello to hello.txt".into());
    let socket = if is_socket(&target) {
        target
    } else {
        Client::find_socket(&target)
            .ok_or_else(|| format!("no moonkale-service serves {}", target.display()))?
    };
    let client = Client::connect_socket(&socket, "moonkale-shell-example").await?;
    let mut notes = client.notifications().expect("a new client's");
    let workspace = client.status().await?.workspace;

    // A document, and the selection in it as the service reports it.
    let path = workspace.join("example.txt");
    let uri = Url::from_file_path(&path)
        .map_err(|()| format!("{} is not an absolute path", path.display()))?
        .to_string();
    client.open_document(&uri, 1, "hello\nworld\n").await?;
    println!("opened {}", path.display());
    let (seen_tx, mut seen) = mpsc::channel(16);
    let follower = tokio::spawn(follow_selection(client.clone(), seen_tx));
    for (line, end) in [(0, 5), (1, 3)] {
        client.select(&uri, (line, 0), (line, end)).await?;
        within("the selection", async {
            while let Some(s) = seen.recv().await {
                if (s.cursor.line, s.cursor.character) == (line, end) {
                    return Some(());
                }
            }
            None
        })
        .await?;
    }
    follower.abort();

    // A Claude Code session whose tool use waits for the user.
    let started = client
        .agent_start(Some(&prompt), Some(PermissionMode::Default))
        .await?;
    let session = started.session;
    println!("session started");
    let approval = wait_for(&mut notes, "an approval", |n| match n {
        Notification::Approval {
            session: s,
            approval,
            status: ApprovalStatus::Pending,
        } if *s == session => Some(approval.clone()),
        _ => None,
    })
    .await?;
    println!("approval asked: {}", approval.title);
    client
        .agent_answer(AnswerParams::allow(approval.approval.clone()))
        .await?;
    println!("approval answered: allow");
    let state = wait_for(&mut notes, "the turn's end", |n| match n {
        Notification::AgentEvent { session: s, event } if *s == session => {
            let SessionEvent::State(data) = &event.event else {
                return None;
            };
            let state = data.state.as_str();
            matches!(state, "idle" | "failed").then(|| state.to_owned())
        }
        _ => None,
    })
    .await?;
    println!("turn ended: {state}");

    // A terminal, drawn as text once its program is done.
    let open = OpenParams {
        argv: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            r"printf '\033[1mbold\033[0m and plain\nsecond line\n'".into(),
        ]),
        rows: 4,
        cols: 30,
        ..OpenParams::default()
    };
    let terminal = client.terminal_open(&open).await?.terminal;
    wait_for(&mut notes, "the program's exit", |n| match n {
        Notification::TerminalExit { terminal: t, .. } if *t == terminal => Some(()),
        _ => None,
    })
    .await?;
    let screen = client.terminal_screen(terminal).await?.snapshot;
    println!("screen {}x{}:", screen.rows, screen.cols);
    for line in screen_text(&screen.lines).trim_end().lines() {
        println!("| {line}");
    }
    client.terminal_close(terminal).await?;
    Ok(())
}

/// Prints each selection of the active editor the service reports, and
/// hands it on; polls `moonkale/status` (the front door pushes none).
async fn follow_selection(client: Client, seen: mpsc::Sender<SelectionStatus>) {
    let mut last = None;
    loop {
        let Ok(status) = client.status().await else {
            return;
        };
        let active = status.editors.into_iter().find(|e| e.active);
        let selection = active.and_then(|e| e.selection);
        if selection != last
            && let Some(s) = &selection
        {
            let file = s.uri.rsplit('/').next().unwrap_or_default();
            println!(
                "selection {file} {}:{} -> {}:{} ({})",
                s.anchor.line, s.anchor.character, s.cursor.line, s.cursor.character, s.source
            );
            if seen.send(s.clone()).await.is_err() {
                return;
            }
        }
        last = selection;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Notifications until `pick` takes one, for at most [`STEP`].
async fn wait_for<T>(
    notes: &mut Notifications,
    what: &str,
    mut pick: impl FnMut(&Notification) -> Option<T>,
) -> Result<T, Error> {
    within(what, async {
        while let Some(n) = notes.next().await {
            if let Some(found) = pick(&n) {
                return Some(found);
            }
        }
        None // the connection closed
    })
    .await
}

async fn within<T>(what: &str, step: impl Future<Output = Option<T>>) -> Result<T, Error> {
    match tokio::time::timeout(STEP, step).await {
        Ok(Some(found)) => Ok(found),
        Ok(None) => Err(format!("the connection closed while waiting for {what}").into()),
        Err(_) => Err(format!("no {what} within {} s", STEP.as_secs()).into()),
    }
}

fn is_socket(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}
