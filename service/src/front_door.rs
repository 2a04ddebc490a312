//! A typed client of the service's front door, for Rust front ends (the
//! Moonkale shell): documents and selection, proposals, agent sessions and
//! terminals, over one LSP connection (docs/protocol.md is the contract).
//!
//! Requests wait for their answer; notifications that arrive meanwhile are
//! kept, typed, and handed out by [`FrontDoor::next_notification`] in order.

use std::collections::VecDeque;
use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::agent::SessionSummary;
use crate::client::LspClient;
use crate::error::{Error, Result};
use crate::lsp::message::Message;
use crate::remote::client::{BoxRead, BoxWrite, RemoteTarget};
use crate::terminal::TerminalInfo;
use crate::terminal::screen::{Row, Snapshot, Update};

/// Local (unix socket) or remote (WebSocket bridge), behind one type.
type Client = LspClient<BoxRead, BoxWrite>;

/// One stored event of an agent session.
#[derive(Clone, Debug, Deserialize)]
pub struct AgentEvent {
    pub seq: u64,
    pub at: u64,
    pub kind: String,
    pub data: Value,
}

/// A page of `moonkale/agent/events`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsPage {
    pub session: String,
    pub events: Vec<AgentEvent>,
    /// Ask again from here.
    pub next: u64,
    pub state: crate::agent::SessionState,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub pending_approvals: Vec<Value>,
}

/// What the service pushes to a front end.
#[derive(Clone, Debug)]
pub enum Notification {
    AgentText {
        session: String,
        text: String,
    },
    AgentEvent {
        session: String,
        event: AgentEvent,
    },
    /// `status` is `pending` or `closed`.
    Approval {
        session: String,
        approval: Value,
        status: String,
    },
    TerminalUpdate {
        terminal: u64,
        update: Update,
    },
    TerminalExit {
        terminal: u64,
        exit_code: Option<u32>,
    },
    TerminalClosed {
        terminal: u64,
    },
    /// Anything else (`window/showMessage`, `$/progress`, …), as it came.
    Other {
        method: String,
        params: Value,
    },
}

/// How to open a terminal.
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenTerminal {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub rows: u16,
    pub cols: u16,
    pub keep_alive: bool,
}

pub struct FrontDoor {
    client: Client,
    notifications: VecDeque<Notification>,
}

impl FrontDoor {
    /// Connects to the service of `workspace`, starting `service_bin serve`
    /// if none runs, and introduces itself as `name`.
    pub async fn connect(workspace: &Path, service_bin: &Path, name: &str) -> Result<FrontDoor> {
        let (stream, _) = crate::client::connect_or_start(workspace, service_bin).await?;
        let (read, write) = stream.into_split();
        FrontDoor::over(LspClient::new(Box::new(read), Box::new(write)), name).await
    }

    /// Connects to a service socket as it is.
    pub async fn connect_socket(socket: &Path, name: &str) -> Result<FrontDoor> {
        FrontDoor::over(unix(socket).await?, name).await
    }

    /// Connects to a remote service (`serve --listen`) as a front end.
    pub async fn connect_remote(target: &RemoteTarget, name: &str) -> Result<FrontDoor> {
        let (read, write) = crate::remote::client::connect(target).await?;
        FrontDoor::over(LspClient::new(read, write), name).await
    }

    /// Connects to a remote service as an observer (see [`Self::observe`]).
    pub async fn observe_remote(target: &RemoteTarget, name: &str) -> Result<FrontDoor> {
        let (read, write) = crate::remote::client::connect(target).await?;
        FrontDoor::observing(LspClient::new(read, write), name).await
    }

    /// Connects as an observer: not listed among the editors, never asked
    /// to show documents or buttons (scripts, the `agent` command).
    pub async fn observe(socket: &Path, name: &str) -> Result<FrontDoor> {
        FrontDoor::observing(unix(socket).await?, name).await
    }

    async fn observing(mut client: Client, name: &str) -> Result<FrontDoor> {
        client.initialize_observer(name).await?;
        let mut door = FrontDoor {
            client,
            notifications: VecDeque::new(),
        };
        door.take_received();
        Ok(door)
    }

    async fn over(mut client: Client, name: &str) -> Result<FrontDoor> {
        client
            .request(
                "initialize",
                json!({
                    "processId": std::process::id(),
                    "clientInfo": {"name": name},
                    "capabilities": {
                        "general": {"positionEncodings": ["utf-8"]},
                        "window": {"showMessage": {}, "workDoneProgress": true},
                    },
                }),
            )
            .await?;
        client.notify("initialized", json!({})).await?;
        let mut door = FrontDoor {
            client,
            notifications: VecDeque::new(),
        };
        door.take_received();
        Ok(door)
    }

    async fn call<T: DeserializeOwned>(&mut self, method: &str, params: Value) -> Result<T> {
        let result = self.client.request(method, params).await;
        self.take_received();
        serde_json::from_value(result?)
            .map_err(|e| Error::Invalid(format!("unexpected answer to {method}: {e}")))
    }

    /// The next notification, waiting for one if none is kept.
    pub async fn next_notification(&mut self) -> Result<Notification> {
        loop {
            if let Some(n) = self.notifications.pop_front() {
                return Ok(n);
            }
            let message = self.client.next_message().await?;
            self.keep(message);
        }
    }

    fn take_received(&mut self) {
        for message in std::mem::take(&mut self.client.received) {
            self.keep(message);
        }
    }

    fn keep(&mut self, message: Message) {
        let Message::Notification { method, params } = message else {
            return; // requests to an editor (showDocument, …) are not ours
        };
        let params: Value = serde_json::from_str(params.get()).unwrap_or_default();
        self.notifications.push_back(typed(method, params));
    }

    // ----- documents and selection -----------------------------------------

    pub async fn open_document(&mut self, uri: &str, version: i32, text: &str) -> Result<()> {
        self.client
            .notify(
                "textDocument/didOpen",
                json!({"textDocument": {"uri": uri, "languageId": "", "version": version, "text": text}}),
            )
            .await
    }

    /// Replaces the whole text (UTF-8 positions are negotiated).
    pub async fn replace_document(&mut self, uri: &str, version: i32, text: &str) -> Result<()> {
        self.client
            .notify(
                "textDocument/didChange",
                json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
            )
            .await
    }

    /// The user's selection: `(line, byte column)` pairs, 0-based.
    pub async fn select(
        &mut self,
        uri: &str,
        anchor: (u32, u32),
        cursor: (u32, u32),
    ) -> Result<()> {
        let pos = |(line, character): (u32, u32)| json!({"line": line, "character": character});
        self.client
            .notify(
                "moonkale/selectionChanged",
                json!({"textDocument": {"uri": uri}, "selection": {"start": pos(anchor), "end": pos(cursor)}, "cursor": pos(cursor)}),
            )
            .await
    }

    /// What the service holds of a document (text, version, dirty, inSync).
    pub async fn document(&mut self, uri: &str) -> Result<Value> {
        self.call("moonkale/document", json!({"uri": uri})).await
    }

    pub async fn status(&mut self) -> Result<Value> {
        self.call("moonkale/status", Value::Null).await
    }

    // ----- proposals --------------------------------------------------------

    /// Accepts (or rejects) a proposal by document, target URI or tab name;
    /// `None`: the newest.
    pub async fn decide_proposal(&mut self, proposal: Option<&str>, accept: bool) -> Result<()> {
        let command = if accept {
            crate::hub::ACCEPT_COMMAND
        } else {
            crate::hub::REJECT_COMMAND
        };
        let arguments: Vec<&str> = proposal.into_iter().collect();
        self.call::<Value>(
            "workspace/executeCommand",
            json!({"command": command, "arguments": arguments}),
        )
        .await
        .map(drop)
    }

    // ----- agent ------------------------------------------------------------

    /// Starts a session (permission mode `plan` unless given); returns its id.
    pub async fn agent_start(
        &mut self,
        prompt: Option<&str>,
        permission_mode: Option<&str>,
    ) -> Result<String> {
        #[derive(Deserialize)]
        struct Started {
            session: String,
        }
        let mut params = json!({});
        if let Some(p) = prompt {
            params["prompt"] = json!(p);
        }
        if let Some(m) = permission_mode {
            params["permissionMode"] = json!(m);
        }
        let started: Started = self.call("moonkale/agent/start", params).await?;
        Ok(started.session)
    }

    /// Sends a prompt; returns the `seq` of its stored event.
    pub async fn agent_send(&mut self, session: &str, prompt: &str) -> Result<u64> {
        #[derive(Deserialize)]
        struct Sent {
            seq: u64,
        }
        let sent: Sent = self
            .call(
                "moonkale/agent/send",
                json!({"session": session, "prompt": prompt}),
            )
            .await?;
        Ok(sent.seq)
    }

    /// Follows a session's events and text (a session started or sent to
    /// from this connection is followed already).
    pub async fn agent_subscribe(&mut self, session: &str) -> Result<()> {
        self.call::<Value>("moonkale/agent/subscribe", json!({"session": session}))
            .await
            .map(drop)
    }

    pub async fn agent_events(&mut self, session: &str, since: u64) -> Result<EventsPage> {
        self.call(
            "moonkale/agent/events",
            json!({"session": session, "since": since}),
        )
        .await
    }

    pub async fn agent_list(&mut self) -> Result<Vec<SessionSummary>> {
        #[derive(Deserialize)]
        struct List {
            sessions: Vec<SessionSummary>,
        }
        let list: List = self.call("moonkale/agent/list", Value::Null).await?;
        Ok(list.sessions)
    }

    pub async fn agent_answer(&mut self, approval: &str, allow: bool, always: bool) -> Result<()> {
        self.call::<Value>(
            "moonkale/agent/answer",
            json!({"approval": approval, "allow": allow, "always": always}),
        )
        .await
        .map(drop)
    }

    /// `moonkale/agent/answer` with every field it takes (a plan's `mode`,
    /// a question's `answers`, a denial's `message`).
    pub async fn agent_decide(&mut self, params: Value) -> Result<()> {
        self.call::<Value>("moonkale/agent/answer", params)
            .await
            .map(drop)
    }

    /// The user's trust decision for the workspace; what the service says
    /// it means.
    pub async fn trust(&mut self, trusted: bool) -> Result<String> {
        let answer: Value = self
            .call("moonkale/agent/trust", json!({"trusted": trusted}))
            .await?;
        Ok(answer["message"].as_str().unwrap_or_default().to_owned())
    }

    pub async fn agent_interrupt(&mut self, session: &str) -> Result<()> {
        self.call::<Value>("moonkale/agent/interrupt", json!({"session": session}))
            .await
            .map(drop)
    }

    // ----- terminals --------------------------------------------------------

    pub async fn terminal_open(&mut self, open: &OpenTerminal) -> Result<TerminalInfo> {
        let params = serde_json::to_value(open).expect("serializes");
        self.call("moonkale/terminal/open", params).await
    }

    pub async fn terminal_text(&mut self, terminal: u64, text: &str) -> Result<()> {
        self.call::<Value>(
            "moonkale/terminal/input",
            json!({"terminal": terminal, "text": text}),
        )
        .await
        .map(drop)
    }

    pub async fn terminal_keys(&mut self, terminal: u64, keys: &[&str]) -> Result<()> {
        self.call::<Value>(
            "moonkale/terminal/input",
            json!({"terminal": terminal, "keys": keys}),
        )
        .await
        .map(drop)
    }

    pub async fn terminal_resize(&mut self, terminal: u64, rows: u16, cols: u16) -> Result<()> {
        self.call::<Value>(
            "moonkale/terminal/resize",
            json!({"terminal": terminal, "rows": rows, "cols": cols}),
        )
        .await
        .map(drop)
    }

    pub async fn terminal_screen(&mut self, terminal: u64) -> Result<Snapshot> {
        self.call("moonkale/terminal/screen", json!({"terminal": terminal}))
            .await
    }

    pub async fn terminal_scrollback(
        &mut self,
        terminal: u64,
        offset: usize,
        count: usize,
    ) -> Result<Vec<Row>> {
        #[derive(Deserialize)]
        struct Lines {
            lines: Vec<Row>,
        }
        let lines: Lines = self
            .call(
                "moonkale/terminal/scrollback",
                json!({"terminal": terminal, "offset": offset, "count": count}),
            )
            .await?;
        Ok(lines.lines)
    }

    pub async fn terminal_list(&mut self) -> Result<Vec<TerminalInfo>> {
        #[derive(Deserialize)]
        struct List {
            terminals: Vec<TerminalInfo>,
        }
        let list: List = self.call("moonkale/terminal/list", Value::Null).await?;
        Ok(list.terminals)
    }

    pub async fn terminal_close(&mut self, terminal: u64) -> Result<()> {
        self.call::<Value>("moonkale/terminal/close", json!({"terminal": terminal}))
            .await
            .map(drop)
    }

    /// Claude Code in a service terminal, wired to this workspace.
    pub async fn start_claude(&mut self, args: &[&str]) -> Result<TerminalInfo> {
        self.call("moonkale/terminal/startClaude", json!({"args": args}))
            .await
    }
}

/// A notification's typed form (unknown or malformed ones stay [`Other`]).
///
/// [`Other`]: Notification::Other
fn typed(method: String, params: Value) -> Notification {
    fn field<T: DeserializeOwned>(params: &Value, key: &str) -> Option<T> {
        serde_json::from_value(params.get(key)?.clone()).ok()
    }
    let session = || field::<String>(&params, "session");
    let terminal = || field::<u64>(&params, "terminal");
    let typed = match method.as_str() {
        "moonkale/agent/text" => session()
            .zip(field(&params, "text"))
            .map(|(session, text)| Notification::AgentText { session, text }),
        "moonkale/agent/event" => session()
            .zip(field(&params, "event"))
            .map(|(session, event)| Notification::AgentEvent { session, event }),
        "moonkale/agent/approval" => {
            session()
                .zip(field(&params, "status"))
                .map(|(session, status)| Notification::Approval {
                    session,
                    approval: params["approval"].clone(),
                    status,
                })
        }
        "moonkale/terminal/update" => terminal()
            .zip(serde_json::from_value(params.clone()).ok())
            .map(|(terminal, update)| Notification::TerminalUpdate { terminal, update }),
        "moonkale/terminal/exit" => terminal().map(|terminal| Notification::TerminalExit {
            terminal,
            exit_code: field(&params, "exitCode"),
        }),
        "moonkale/terminal/closed" => {
            terminal().map(|terminal| Notification::TerminalClosed { terminal })
        }
        _ => None,
    };
    typed.unwrap_or(Notification::Other { method, params })
}

async fn unix(socket: &Path) -> Result<Client> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| Error::io(format!("connecting to {}", socket.display()), e))?;
    let (read, write) = stream.into_split();
    Ok(LspClient::new(Box::new(read), Box::new(write)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_are_typed_and_bad_ones_kept_as_they_came() {
        let update = typed(
            "moonkale/terminal/update".into(),
            json!({"terminal": 3, "lines": [{"index": 0, "spans": [{"text": "hi", "fg": "#010203", "bold": true}]}]}),
        );
        let Notification::TerminalUpdate {
            terminal: 3,
            update,
        } = update
        else {
            panic!("{update:?}");
        };
        let span = &update.lines[0].spans[0];
        assert_eq!(span.fg, Some(crate::terminal::screen::Color::Rgb(1, 2, 3)));
        assert!(span.bold && !span.italic);
        assert!(matches!(
            typed(
                "moonkale/agent/text".into(),
                json!({"session": "s", "text": "t"})
            ),
            Notification::AgentText { .. }
        ));
        // A malformed one is not dropped.
        assert!(matches!(
            typed("moonkale/agent/text".into(), json!({"session": 1})),
            Notification::Other { .. }
        ));
    }
}
