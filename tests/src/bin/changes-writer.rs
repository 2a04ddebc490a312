//! `changes-writer`: the child of the change-set crash test
//! (`tests/tests/changes_crash.rs`). It runs the service's change-set host
//! (`moonkale_service::changes`) over a workspace with a detached hub, so
//! the parent can SIGKILL it at any moment of an undo.
//!
//! `changes-writer undo <workspace> <file> <before-file>`: records one edit
//! of `<file>` (in the workspace; its text on disk is Claude's `after`,
//! `<before-file>` holds the text before), prints `recorded` once the set
//! is stored, asks to undo the whole set, and prints `undone` with the
//! answer.
//!
//! `changes-writer check <workspace>`: prints `intent` if a stored set
//! holds an undo under way (else `no intent`), starts the host (which
//! loads the stored sets and settles that undo), prints the answer of
//! `moonkale/changes/show` for set 1 on one line, and stops.
//!
//! The state directory is `$XDG_STATE_HOME`, as in the service.

use std::path::PathBuf;
use std::process::ExitCode;

use moonkale_service::hub::ports::{
    ChangeRecord, ChangeSource, ChangesCommand, Request, changes_channel,
};
use moonkale_service::hub::{EditorId, Event, HubHandle, Responder};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [mode, ws, file, before] if mode == "undo" => undo(ws, file, before).await,
        [mode, ws] if mode == "check" => check(ws).await,
        _ => Err("usage: changes-writer undo <ws> <file> <before> | check <ws>".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("changes-writer: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Host {
    commands: tokio::sync::mpsc::Sender<ChangesCommand>,
    events: tokio::sync::mpsc::Receiver<Event>,
    task: tokio::task::JoinHandle<()>,
}

impl Host {
    async fn start(ws: &str) -> Host {
        let (hub, mut events) = HubHandle::detached(PathBuf::from(ws));
        let (commands, rx) = changes_channel();
        let task = moonkale_service::changes::spawn(hub, rx, None);
        // Its first report: the stored sets are loaded.
        wait_for_update(&mut events).await;
        Host {
            commands,
            events,
            task,
        }
    }

    async fn stop(self) {
        let _ = self.commands.send(ChangesCommand::Shutdown).await;
        let _ = self.task.await;
    }
}

async fn wait_for_update(events: &mut tokio::sync::mpsc::Receiver<Event>) {
    while let Some(event) = events.recv().await {
        if matches!(event, Event::ChangesUpdated { .. }) {
            return;
        }
    }
}

async fn undo(ws: &str, file: &str, before: &str) -> Result<(), String> {
    let before = std::fs::read_to_string(before).map_err(|e| e.to_string())?;
    let path = PathBuf::from(ws).join(file);
    let after = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let mut host = Host::start(ws).await;
    let record = ChangeRecord {
        source: ChangeSource::Agent {
            session: "crash".into(),
        },
        turn: "t".into(),
        title: None,
        path,
        before: Some(before),
        after: Some(after),
        at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    };
    let _ = host.commands.send(ChangesCommand::Record(record)).await;
    // Stored before the host reports it.
    wait_for_update(&mut host.events).await;
    println!("recorded");
    let (reply, answered) = Responder::new();
    let _ = host
        .commands
        .send(ChangesCommand::Undo {
            params: serde_json::from_value(json!({"set": 1})).expect("undo params"),
            buffers: Vec::new(),
            strict: false,
            reply,
        })
        .await;
    let answer = answered.await.map_err(|e| e.to_string())?;
    println!("undone {answer:?}");
    host.stop().await;
    Ok(())
}

async fn check(ws: &str) -> Result<(), String> {
    let stored = moonkale_service::user_state::workspace_state_dir(std::path::Path::new(ws))
        .map_err(|e| e.to_string())?
        .join("changes/1.json");
    let text = std::fs::read_to_string(stored).unwrap_or_default();
    let held = if text.contains("\"intent\"") {
        "intent"
    } else {
        "no intent"
    };
    println!("{held}");
    let host = Host::start(ws).await;
    let (reply, answered) = Responder::new();
    let params = moonkale_service::lsp::message::params(&json!({"set": 1}));
    let request = Request::new(EditorId(1), "moonkale/changes/show", params, reply);
    let _ = host.commands.send(ChangesCommand::Request(request)).await;
    let shown = answered
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.message)?;
    println!("{shown}");
    host.stop().await;
    Ok(())
}
