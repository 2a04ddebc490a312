//! moonkale-client: the front door of moonkale-service for Rust front ends
//! (the Moonkale shell), over one LSP connection (docs/protocol.md is the
//! contract).
//!
//! A [`Client`] is a cheap, cloneable handle (`Clone + Send + Sync`): a GUI
//! keeps one in a signal and calls it from any component. Its calls take
//! `&self`, return `'static` futures and may run at once: a writer task
//! sends requests in the order they were made, a reader task owns the
//! stream and matches each response to its request by id. So dropping a
//! call's future (in `select!`, on a timeout) never tears a frame; its
//! answer is just thrown away. Notifications go, typed and in order, to
//! the one [`Notifications`] receiver ([`Client::notifications`]); it
//! holds [`notification::QUEUE`] of them, and a front end that falls
//! further behind is told how many it missed ([`Notification::Lagged`])
//! instead of stalling the connection.
//!
//! Transports: a running service's unix socket ([`Client::connect_socket`],
//! [`Client::find_socket`]) or any reader/writer pair ([`Client::over`]:
//! the service's remote WebSocket bridge, a test's in-memory pipe).
//!
//! Starting: [`connect_or_start`] connects to a folder's service, starting
//! one first if none runs (the shim, `moonkale-service acp`).
//!
//! **Invariant:** this crate depends on the protocol and wire crates, never
//! on the service: a front end builds without the server's PTY, vt100 or
//! rustls.

mod calls;
mod discover;
mod error;
pub mod notification;
mod start;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use lsp_types::{Position, Range, TextDocumentIdentifier, Url};
use moonkale_protocol::agent::{
    self, AnswerParams, EventsPage, PermissionMode, SessionSummary, StartParams, StartResult,
    TrustResult,
};
use moonkale_protocol::changes;
use moonkale_protocol::document::{self, DocumentState, SelectionChangedParams};
use moonkale_protocol::screen::{Row, Size};
use moonkale_protocol::status::{Status, StatusRequest};
use moonkale_protocol::terminal::{
    self, InputParams, Link, OpenParams, ScreenResult, StartClaudeResult, TerminalId, TerminalInfo,
    TerminalParams,
};
use moonkale_protocol::{Command, NoParams, Request};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};

pub use error::{Error, Result};
pub use moonkale_protocol;
pub use notification::{Notification, Notifications};
pub use start::{START_TIMEOUT, connect_or_start};

/// Who the connection is, for the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Listed among the editors; may become the active editor; is shown
    /// documents and questions (the Moonkale shell).
    Editor,
    /// An editor's agent panel (an ACP client through `moonkale-service
    /// acp`): listed among the editors, so the service keeps a warm CLI for
    /// it, but shown approvals only as `moonkale/agent/approval`, never as
    /// message boxes.
    AgentPanel,
    /// May use every request but is not listed as an editor and never
    /// becomes the active one (scripts, the `agent` command).
    Observer,
}

/// A handle on one connection to the service. Clones share it; the
/// connection closes when the last clone is dropped.
#[derive(Clone)]
pub struct Client {
    calls: Arc<calls::Calls>,
}

impl Client {
    /// Connects to a service's unix socket as an editor named `name`.
    pub async fn connect_socket(socket: &Path, name: &str) -> Result<Client> {
        Client::socket(socket, Role::Editor, name).await
    }

    /// Connects to a service's unix socket as an observer named `name`.
    pub async fn observe_socket(socket: &Path, name: &str) -> Result<Client> {
        Client::socket(socket, Role::Observer, name).await
    }

    /// The socket of the service that serves `folder` (the outermost served
    /// folder among it and its ancestors), from the info files in the
    /// runtime directory; `None` if no service published one.
    pub fn find_socket(folder: &Path) -> Option<std::path::PathBuf> {
        discover::find_socket(folder)
    }

    async fn socket(socket: &Path, role: Role, name: &str) -> Result<Client> {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|source| Error::Connect {
                path: socket.to_path_buf(),
                source,
            })?;
        let (read, write) = stream.into_split();
        Client::over(read, write, role, name).await
    }

    /// Runs the front door over `read`/`write` (LSP frames both ways) and
    /// introduces itself (`initialize`, `initialized`) as `name` in `role`.
    pub async fn over<R, W>(read: R, write: W, role: Role, name: &str) -> Result<Client>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let client = Client {
            calls: calls::Calls::start(read, write),
        };
        let capabilities = match role {
            Role::Editor => json!({
                "general": {"positionEncodings": ["utf-8"]},
                "window": {"showMessage": {}, "workDoneProgress": true},
            }),
            Role::AgentPanel | Role::Observer => {
                json!({"general": {"positionEncodings": ["utf-8", "utf-16"]}})
            }
        };
        let mut params = json!({
            "processId": std::process::id(),
            "clientInfo": {"name": name},
            "capabilities": capabilities,
        });
        if role == Role::Observer {
            params["initializationOptions"] = json!({"moonkaleRole": "observer"});
        }
        client.calls.call("initialize", params).await?;
        client.calls.notify("initialized", json!({})).await?;
        Ok(client)
    }

    /// The service's notifications, in order. Handed out once: `None` when
    /// taken already.
    pub fn notifications(&self) -> Option<Notifications> {
        self.calls.take_notifications()
    }

    /// Any request, typed by its method.
    pub fn request<R>(
        &self,
        params: R::Params,
    ) -> impl Future<Output = Result<R::Result>> + Send + 'static
    where
        R: Request,
    {
        let calls = self.calls.clone();
        let params = serde_json::to_value(&params);
        async move {
            let params = params.map_err(|e| Error::Invalid(e.to_string()))?;
            let result = calls.call(R::METHOD, params).await?;
            serde_json::from_value(result).map_err(|e| Error::Decode {
                method: R::METHOD,
                why: e.to_string(),
            })
        }
    }

    /// Any notification, typed by its method.
    pub fn notify<N>(&self, params: N::Params) -> impl Future<Output = Result<()>> + Send + 'static
    where
        N: moonkale_protocol::Notification,
    {
        let calls = self.calls.clone();
        let params = serde_json::to_value(&params);
        async move {
            let params = params.map_err(|e| Error::Invalid(e.to_string()))?;
            calls.notify(N::METHOD, params).await
        }
    }

    /// A request without a type of its own (plain LSP), answered as JSON.
    pub fn request_json(
        &self,
        method: &str,
        params: Value,
    ) -> impl Future<Output = Result<Value>> + Send + 'static {
        let calls = self.calls.clone();
        let method = method.to_owned();
        async move { calls.call(&method, params).await }
    }

    fn notify_json(
        &self,
        method: &'static str,
        params: Value,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let calls = self.calls.clone();
        async move { calls.notify(method, params).await }
    }

    // ----- documents and selection -----------------------------------------

    /// `textDocument/didOpen` (the language id is left empty).
    pub fn open_document(
        &self,
        uri: &str,
        version: i32,
        text: &str,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let params = json!({"textDocument": {"uri": uri, "languageId": "", "version": version, "text": text}});
        self.notify_json("textDocument/didOpen", params)
    }

    /// Replaces the whole text (`textDocument/didChange`).
    pub fn replace_document(
        &self,
        uri: &str,
        version: i32,
        text: &str,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let params = json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]});
        self.notify_json("textDocument/didChange", params)
    }

    /// `textDocument/didClose`.
    pub fn close_document(&self, uri: &str) -> impl Future<Output = Result<()>> + Send + 'static {
        self.notify_json(
            "textDocument/didClose",
            json!({"textDocument": {"uri": uri}}),
        )
    }

    /// The user's selection: `(line, byte column)` pairs, 0-based (the
    /// connection negotiates UTF-8).
    pub fn select(
        &self,
        uri: &str,
        anchor: (u32, u32),
        cursor: (u32, u32),
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let uri = parse_uri(uri);
        let client = self.clone();
        async move {
            let pos = |(line, character)| Position { line, character };
            let params = SelectionChangedParams {
                text_document: TextDocumentIdentifier { uri: uri? },
                selection: Some(Range {
                    start: pos(anchor),
                    end: pos(cursor),
                }),
                cursor: Some(pos(cursor)),
            };
            client.notify::<document::SelectionChanged>(params).await
        }
    }

    /// What the service holds of a document (text, version, dirty, inSync).
    pub fn document(
        &self,
        uri: &str,
    ) -> impl Future<Output = Result<DocumentState>> + Send + 'static {
        let uri = parse_uri(uri);
        let client = self.clone();
        async move {
            let params = document::UriParams { uri: uri? };
            client.request::<document::DocumentText>(params).await
        }
    }

    /// Answers once the latest buffer of `uri` has at least `version`.
    pub fn wait_for_version(
        &self,
        uri: &str,
        version: i32,
    ) -> impl Future<Output = Result<i32>> + Send + 'static {
        let uri = parse_uri(uri);
        let client = self.clone();
        async move {
            let params = document::VersionParams { uri: uri?, version };
            let got = client.request::<document::WaitForVersion>(params).await?;
            Ok(got.version)
        }
    }

    pub fn status(&self) -> impl Future<Output = Result<Status>> + Send + 'static {
        self.request::<StatusRequest>(NoParams)
    }

    /// The status now; [`Notification::StatusChanged`] whenever who is in
    /// the workspace or what waits changes.
    pub fn status_subscribe(&self) -> impl Future<Output = Result<Status>> + Send + 'static {
        self.request::<moonkale_protocol::status::Subscribe>(NoParams)
    }

    // ----- proposals --------------------------------------------------------

    /// The pending `openDiff` proposals with their hunks.
    pub fn proposals(
        &self,
    ) -> impl Future<Output = Result<Vec<moonkale_protocol::proposal::ProposalInfo>>> + Send + 'static
    {
        let list = self.request::<moonkale_protocol::proposal::List>(NoParams);
        async move { Ok(list.await?.proposals) }
    }

    /// Accepts a proposal by document, target URI or tab name; `None`: the
    /// newest.
    pub fn accept_proposal(
        &self,
        proposal: Option<&str>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.decide_proposal(Command::AcceptProposal, proposal)
    }

    /// Rejects a proposal (as [`Self::accept_proposal`] names it).
    pub fn reject_proposal(
        &self,
        proposal: Option<&str>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.decide_proposal(Command::RejectProposal, proposal)
    }

    fn decide_proposal(
        &self,
        command: Command,
        proposal: Option<&str>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let arguments: Vec<&str> = proposal.into_iter().collect();
        let answer = self.request_json(
            "workspace/executeCommand",
            json!({"command": command.name(), "arguments": arguments}),
        );
        async move { answer.await.map(drop) }
    }

    // ----- change sets ------------------------------------------------------

    /// The change sets (Claude's edits made without asking), newest last:
    /// the pending ones, or every one with `all`.
    pub fn changes(
        &self,
        all: bool,
    ) -> impl Future<Output = Result<Vec<changes::ChangeSetSummary>>> + Send + 'static {
        let list = self.request::<changes::List>(Some(changes::ListParams { all }));
        async move { Ok(list.await?.sets) }
    }

    /// One change set with every file's texts and hunks.
    pub fn change_set(
        &self,
        set: u64,
    ) -> impl Future<Output = Result<changes::ShowResult>> + Send + 'static {
        self.request::<changes::Show>(changes::ShowParams { set })
    }

    /// Undoes a set, a file of it or one hunk; what was undone and refused.
    pub fn undo_change(
        &self,
        params: changes::UndoParams,
    ) -> impl Future<Output = Result<changes::UndoResult>> + Send + 'static {
        self.request::<changes::Undo>(params)
    }

    /// Keeps (dismisses) a set, a file of it or one hunk.
    pub fn keep_change(
        &self,
        params: changes::KeepParams,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<changes::Keep>(params);
        async move { done.await.map(drop) }
    }

    // ----- agent ------------------------------------------------------------

    /// Starts a session (in `plan` mode unless given); the connection
    /// follows it.
    pub fn agent_start(
        &self,
        prompt: Option<&str>,
        mode: Option<PermissionMode>,
    ) -> impl Future<Output = Result<StartResult>> + Send + 'static {
        self.request::<agent::Start>(StartParams {
            prompt: prompt.map(str::to_owned),
            permission_mode: mode,
            ..Default::default()
        })
    }

    /// Sends a prompt; the `seq` of its stored event.
    pub fn agent_send(
        &self,
        session: &str,
        prompt: &str,
    ) -> impl Future<Output = Result<u64>> + Send + 'static {
        self.agent_send_with_images(session, prompt, Vec::new())
    }

    /// Sends a prompt with images before its text; the `seq` of its
    /// stored event.
    pub fn agent_send_with_images(
        &self,
        session: &str,
        prompt: &str,
        images: Vec<agent::Image>,
    ) -> impl Future<Output = Result<u64>> + Send + 'static {
        let sent = self.request::<agent::Send>(agent::SendParams {
            session: session.to_owned(),
            prompt: prompt.to_owned(),
            images,
        });
        async move { Ok(sent.await?.seq) }
    }

    /// Follows a session's events, text and approvals (`None`: every
    /// session). A session started or sent to from this connection is
    /// followed already.
    pub fn agent_subscribe(
        &self,
        session: Option<&str>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<agent::Subscribe>(agent::SubscriptionParams {
            session: session.map(str::to_owned),
        });
        async move { done.await.map(drop) }
    }

    pub fn agent_unsubscribe(
        &self,
        session: Option<&str>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<agent::Unsubscribe>(agent::SubscriptionParams {
            session: session.map(str::to_owned),
        });
        async move { done.await.map(drop) }
    }

    /// The stored events with `seq ≥ since` (a page: ask again from `next`).
    pub fn agent_events(
        &self,
        session: &str,
        since: u64,
    ) -> impl Future<Output = Result<EventsPage>> + Send + 'static {
        self.request::<agent::Events>(agent::EventsParams {
            session: session.to_owned(),
            since,
            limit: None,
        })
    }

    pub fn agent_list(&self) -> impl Future<Output = Result<Vec<SessionSummary>>> + Send + 'static {
        let list = self.request::<agent::List>(NoParams);
        async move { Ok(list.await?.sessions) }
    }

    /// Answers an approval (`AnswerParams::allow(id)`, `::deny(id)`, with a
    /// plan's mode or a question's answers).
    pub fn agent_answer(
        &self,
        answer: AnswerParams,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<agent::Answer>(answer);
        async move { done.await.map(drop) }
    }

    /// Ends a session's CLI, keeping its transcript.
    pub fn agent_close(&self, session: &str) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<agent::Close>(agent::SessionParams {
            session: session.to_owned(),
        });
        async move { done.await.map(drop) }
    }

    /// Ends a session's CLI and removes its transcript.
    pub fn agent_delete(&self, session: &str) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<agent::Delete>(agent::SessionParams {
            session: session.to_owned(),
        });
        async move { done.await.map(drop) }
    }

    pub fn agent_interrupt(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<agent::Interrupt>(agent::SessionParams {
            session: session.to_owned(),
        });
        async move { done.await.map(drop) }
    }

    /// The session's permission mode from now on; the mode it is in.
    pub fn agent_set_permission_mode(
        &self,
        session: &str,
        mode: PermissionMode,
    ) -> impl Future<Output = Result<PermissionMode>> + Send + 'static {
        let set = self.request::<agent::SetPermissionMode>(agent::SetPermissionModeParams {
            session: session.to_owned(),
            mode,
        });
        async move { Ok(set.await?.mode) }
    }

    /// The session's model from now on (`None`: the CLI's default).
    pub fn agent_set_model(
        &self,
        session: &str,
        model: Option<&str>,
    ) -> impl Future<Output = Result<Option<String>>> + Send + 'static {
        let set = self.request::<agent::SetModel>(agent::SetModelParams {
            session: session.to_owned(),
            model: model.map(str::to_owned),
        });
        async move { Ok(set.await?.model) }
    }

    /// The user's trust decision for the workspace, and what it means.
    pub fn trust(
        &self,
        trusted: bool,
    ) -> impl Future<Output = Result<TrustResult>> + Send + 'static {
        self.request::<agent::Trust>(agent::TrustParams { trusted })
    }

    // ----- terminals --------------------------------------------------------

    /// Opens a terminal; this connection follows it.
    pub fn terminal_open(
        &self,
        open: &OpenParams,
    ) -> impl Future<Output = Result<TerminalInfo>> + Send + 'static {
        self.request::<terminal::Open>(open.clone())
    }

    /// Typed characters, as they are.
    pub fn terminal_text(
        &self,
        terminal: TerminalId,
        text: &str,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.terminal_input(InputParams::text(terminal, text))
    }

    /// Key names (`Enter`, `Ctrl+c`, …).
    pub fn terminal_keys(
        &self,
        terminal: TerminalId,
        keys: &[&str],
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.terminal_input(InputParams::keys(terminal, keys.iter().copied()))
    }

    /// Pasted text: bracketed when the program asked for it.
    pub fn terminal_paste(
        &self,
        terminal: TerminalId,
        text: &str,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.terminal_input(InputParams::paste(terminal, text))
    }

    fn terminal_input(
        &self,
        input: InputParams,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<terminal::Input>(input);
        async move { done.await.map(drop) }
    }

    pub fn terminal_resize(
        &self,
        terminal: TerminalId,
        rows: u16,
        cols: u16,
    ) -> impl Future<Output = Result<Size>> + Send + 'static {
        self.request::<terminal::Resize>(terminal::ResizeParams {
            terminal,
            rows,
            cols,
        })
    }

    pub fn terminal_screen(
        &self,
        terminal: TerminalId,
    ) -> impl Future<Output = Result<ScreenResult>> + Send + 'static {
        self.request::<terminal::Screen>(TerminalParams { terminal })
    }

    /// History above the screen: `count` lines ending `offset` above its top.
    pub fn terminal_scrollback(
        &self,
        terminal: TerminalId,
        offset: usize,
        count: usize,
    ) -> impl Future<Output = Result<Vec<Row>>> + Send + 'static {
        let lines = self.request::<terminal::Scrollback>(terminal::ScrollbackParams {
            terminal,
            offset,
            count,
        });
        async move { Ok(lines.await?.lines) }
    }

    /// `path:line[:col]` links on the screen.
    pub fn terminal_links(
        &self,
        terminal: TerminalId,
    ) -> impl Future<Output = Result<Vec<Link>>> + Send + 'static {
        let links = self.request::<terminal::Links>(TerminalParams { terminal });
        async move { Ok(links.await?.links) }
    }

    /// Shows a link's file in the active editor.
    pub fn terminal_open_link(
        &self,
        link: &Link,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<terminal::OpenLink>(terminal::OpenLinkParams {
            path: link.path.clone(),
            line: link.line,
            column: link.column,
        });
        async move { done.await.map(drop) }
    }

    pub fn terminal_list(
        &self,
    ) -> impl Future<Output = Result<Vec<TerminalInfo>>> + Send + 'static {
        let list = self.request::<terminal::List>(NoParams);
        async move { Ok(list.await?.terminals) }
    }

    pub fn terminal_subscribe(
        &self,
        terminal: TerminalId,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<terminal::Subscribe>(TerminalParams { terminal });
        async move { done.await.map(drop) }
    }

    pub fn terminal_unsubscribe(
        &self,
        terminal: TerminalId,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<terminal::Unsubscribe>(TerminalParams { terminal });
        async move { done.await.map(drop) }
    }

    pub fn terminal_close(
        &self,
        terminal: TerminalId,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let done = self.request::<terminal::Close>(TerminalParams { terminal });
        async move { done.await.map(drop) }
    }

    /// Claude Code in a service terminal, wired to this workspace.
    pub fn start_claude(
        &self,
        args: &[&str],
    ) -> impl Future<Output = Result<StartClaudeResult>> + Send + 'static {
        self.request::<terminal::StartClaude>(Some(terminal::StartClaudeParams {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        }))
    }
}

fn parse_uri(uri: &str) -> Result<Url> {
    Url::parse(uri).map_err(|e| Error::Invalid(format!("{uri:?} is not a URI: {e}")))
}

/// A screen's rows as plain text, one line each (styles dropped).
pub fn screen_text(rows: &[Row]) -> String {
    rows.iter()
        .map(|row| {
            row.spans
                .iter()
                .map(|s| s.text.as_str())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    //! The handle against a scripted service over an in-memory pipe.

    use super::*;
    use moonkale_protocol::jsonrpc::{self, Message, ResponseError, code};
    use moonkale_wire::framing::{FrameReader, write_frame};
    use tokio::io::{DuplexStream, ReadHalf, WriteHalf};

    fn assert_shell_friendly<T: Clone + Send + Sync + 'static>() {}

    #[test]
    fn a_handle_can_live_in_a_gui_signal() {
        assert_shell_friendly::<Client>();
        fn static_send<F: Future + Send + 'static>(_: F) {}
        let never = |c: &Client| {
            static_send(c.status());
            static_send(c.agent_send("s", "p"));
        };
        let _ = never;
    }

    /// The service's end of the pipe.
    struct Service {
        read: FrameReader<ReadHalf<DuplexStream>>,
        write: WriteHalf<DuplexStream>,
    }

    impl Service {
        /// The next message the client sent: (id, method).
        async fn next(&mut self) -> (Option<jsonrpc::RequestId>, String) {
            let body = self.read.read_frame().await.unwrap().expect("a frame");
            match jsonrpc::parse(&body).unwrap() {
                Message::Request { id, method, .. } => (Some(id), method),
                Message::Notification { method, .. } => (None, method),
                other => panic!("{other:?}"),
            }
        }

        async fn send(&mut self, body: Vec<u8>) {
            write_frame(&mut self.write, &body).await.unwrap();
        }

        async fn answer(&mut self, id: &jsonrpc::RequestId, result: Result<Value, ResponseError>) {
            self.send(jsonrpc::response(id, &result)).await;
        }
    }

    /// A client that went through `initialize`, and the service's end.
    async fn connected() -> (Client, Service) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(ours);
        let (their_read, their_write) = tokio::io::split(theirs);
        let mut service = Service {
            read: FrameReader::new(their_read),
            write: their_write,
        };
        let connecting = tokio::spawn(Client::over(read, write, Role::Editor, "test"));
        let (id, method) = service.next().await;
        assert_eq!(method, "initialize");
        service
            .answer(&id.unwrap(), Ok(json!({"capabilities": {}})))
            .await;
        assert_eq!(service.next().await, (None, "initialized".into()));
        (connecting.await.unwrap().unwrap(), service)
    }

    #[tokio::test]
    async fn concurrent_calls_are_matched_to_their_answers_by_id() {
        let (client, mut service) = connected().await;
        let trust = tokio::spawn(client.trust(true));
        let (trust_id, method) = service.next().await;
        assert_eq!(method, "moonkale/agent/trust");
        let list = tokio::spawn(client.terminal_list());
        let (list_id, method) = service.next().await;
        assert_eq!(method, "moonkale/terminal/list");
        // Answered out of order.
        service
            .answer(&list_id.unwrap(), Ok(json!({"terminals": []})))
            .await;
        let message = json!({"trusted": true, "changed": true, "message": "ok"});
        service.answer(&trust_id.unwrap(), Ok(message)).await;
        assert!(list.await.unwrap().unwrap().is_empty());
        assert_eq!(trust.await.unwrap().unwrap().message, "ok");
    }

    #[tokio::test]
    async fn a_dropped_call_loses_nothing_else_and_errors_keep_their_code() {
        let (client, mut service) = connected().await;
        let mut notes = client.notifications().expect("handed out once");
        assert!(client.notifications().is_none());
        // A call given up in `select!` while its answer is on the way.
        tokio::select! {
            biased;
            _ = client.status() => panic!("not answered yet"),
            () = std::future::ready(()) => {}
        }
        let (dropped, _) = service.next().await;
        let notify = |method: &str, params: Value| jsonrpc::notification(method, params);
        service
            .send(notify("moonkale/terminal/closed", json!({"terminal": 1})))
            .await;
        service.answer(&dropped.unwrap(), Ok(json!({}))).await;
        let resize = tokio::spawn(client.terminal_resize(1, 0, 0));
        let (id, _) = service.next().await;
        let refused = ResponseError::new(code::INVALID_PARAMS, "size 0x0 refused");
        service.answer(&id.unwrap(), Err(refused)).await;
        let error = resize.await.unwrap().unwrap_err();
        assert_eq!(error.code(), Some(code::INVALID_PARAMS));
        assert!(!error.is_retryable());
        assert_eq!(
            notes.next().await,
            Some(Notification::TerminalClosed { terminal: 1 })
        );
    }

    #[tokio::test]
    async fn a_closed_connection_ends_every_call_and_the_notifications() {
        let (client, mut service) = connected().await;
        let mut notes = client.notifications().unwrap();
        let waiting = tokio::spawn(client.status());
        let _ = service.next().await;
        drop(service);
        assert!(matches!(waiting.await.unwrap(), Err(Error::Closed)));
        assert_eq!(notes.next().await, None);
        assert!(matches!(client.status().await, Err(Error::Closed)));
        let text = client.terminal_text(1, "x").await;
        assert!(matches!(text, Err(Error::Closed)), "{text:?}");
    }
}
