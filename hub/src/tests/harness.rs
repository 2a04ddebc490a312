//! A workspace, every channel around it, and a transcript of what came out
//! of them.
//!
//! Each step of a script is written to the transcript as `> what happened`,
//! followed by everything the hub sent because of it, indented:
//! `ed1 <- method {params}` (a notification to an editor), `ed1 <- request
//! moonkale-5 method {params}` (a request to an editor), `ide9 <- …` (a
//! Claude Code connection), `agent <- …` / `terminals <- …` (the ports),
//! `#3 <- Ok …` / `#3 <- Err …` (the answer to the script's third request;
//! `#3 waits` while it is parked) and `selection = …` (the watch Claude Code
//! connections follow). JSON is printed with its keys sorted, so the
//! transcript says what is on the wire, not in which order a struct wrote it.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::core::PositionEncoding;
use crate::ports::{self, AgentCommand, Answered, ChangesCommand, Request, TerminalHostCommand};
use crate::workspace::{Limits, Workspace};
use crate::{
    AgentProgress, EditorId, EditorInfo, Event, IdeClientId, IdeScope, Responder, Role, Topic,
    Transport,
};
use moonkale_protocol::ide::{
    EditorTool, EditorToolCall, IdeTool, IdeToolCall, OpenDiff, OpenFile,
};
use moonkale_protocol::jsonrpc::{self as message, RequestId};

/// The workspace root every script runs in.
pub const ROOT: &str = "/w";

/// Longer step labels (a whole document's text) are cut.
const MAX_LABEL: usize = 300;

/// What an editor advertises at `initialize`.
#[derive(Clone, Copy)]
pub struct Caps {
    pub buttons: bool,
    pub progress: bool,
    /// `window.showDocument.support`.
    pub documents: bool,
    /// Registers `textDocument/inlayHint` dynamically.
    pub hints: bool,
    pub encoding: PositionEncoding,
    pub role: Role,
    /// A Moonkale plugin (`moonkaleReview`, `moonkaleProposals`).
    pub plugin: bool,
}

impl Caps {
    /// VS Code, Neovim: message buttons, `$/progress`, UTF-16.
    pub const BUTTONS: Caps = Caps {
        buttons: true,
        progress: true,
        documents: true,
        hints: true,
        encoding: PositionEncoding::Utf16,
        role: Role::Editor,
        plugin: false,
    };
    /// Neovim or VS Code with the Moonkale plugin: [`Caps::BUTTONS`] and a
    /// proposal view of its own.
    pub const PLUGIN: Caps = Caps {
        plugin: true,
        ..Caps::BUTTONS
    };
    /// Helix: no buttons, no progress; columns in chars.
    pub const PLAIN: Caps = Caps {
        buttons: false,
        progress: false,
        documents: true,
        hints: false,
        encoding: PositionEncoding::Utf32,
        role: Role::Editor,
        plugin: false,
    };
    /// `moonkale-service status`, tests: never listed, never active.
    pub const OBSERVER: Caps = Caps {
        buttons: false,
        progress: false,
        documents: false,
        hints: false,
        encoding: PositionEncoding::Utf16,
        role: Role::Observer,
        plugin: false,
    };
}

/// Which host ports the workspace gets: none, roomy ones, or full ones
/// (hosts that stopped reading: every command is refused as busy).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    None,
    Roomy,
    Full,
}

pub struct World {
    pub ws: Workspace,
    editors: BTreeMap<u64, mpsc::Receiver<Vec<u8>>>,
    ides: BTreeMap<u64, mpsc::Receiver<String>>,
    /// The Claude Code connections that came through a sandbox link.
    linked: std::collections::BTreeSet<u64>,
    agent: Option<mpsc::Receiver<AgentCommand>>,
    terminals: Option<mpsc::Receiver<TerminalHostCommand>>,
    /// [`Ports::Full`]'s receivers, which nobody reads.
    #[allow(dead_code)]
    stalled_hosts: Option<(
        mpsc::Receiver<AgentCommand>,
        mpsc::Receiver<TerminalHostCommand>,
    )>,
    selection: watch::Receiver<Option<crate::SelectionNotification>>,
    /// The script's requests not answered yet, by number.
    pending: BTreeMap<usize, Answered>,
    requests: usize,
    /// Requests the ports received, oldest first, for [`World::host_answers`].
    at_hosts: Vec<Request>,
    /// `window/showMessageRequest`s sent to each editor, oldest first.
    asked: BTreeMap<u64, Vec<(RequestId, Value)>>,
    /// Every request sent to each editor, by method, oldest first.
    sent: BTreeMap<u64, Vec<(RequestId, String)>>,
    /// The change-set host's port.
    changes: Option<mpsc::Receiver<ChangesCommand>>,
    /// Every `AgentCommand::Editors` count the agent port received.
    pub editor_counts: Vec<usize>,
    log: String,
    /// The hub's clock, which only the script moves.
    now: tokio::time::Instant,
    /// How far the clock moves before each step: by default longer than
    /// the selection's pacing interval, so each step's selection goes out
    /// at once; a pacing script shortens it.
    pub step_gap: std::time::Duration,
}

impl World {
    /// A workspace at [`ROOT`] with both host ports.
    pub fn new() -> World {
        World::build(Ports::Roomy, Limits::default())
    }

    pub fn build(ports: Ports, limits: Limits) -> World {
        let (selection_tx, selection) = watch::channel(None);
        let mut ws = Workspace::new(ROOT.into(), limits, selection_tx);
        let (mut agent, mut terminals, mut stalled_hosts) = (None, None, None);
        let mut changes = None;
        match ports {
            Ports::None => {}
            Ports::Roomy => {
                let (atx, arx) = ports::agent_channel();
                let (ttx, trx) = ports::terminal_channel();
                let (ctx, crx) = ports::changes_channel();
                ws.set_agent(Some(atx));
                ws.set_terminals(Some(ttx));
                ws.set_changes(Some(ctx));
                (agent, terminals, changes) = (Some(arx), Some(trx), Some(crx));
            }
            Ports::Full => {
                // One slot each, taken by a command nobody reads: the
                // receivers are kept but never drained.
                let (atx, arx) = mpsc::channel(1);
                let (ttx, trx) = mpsc::channel(1);
                atx.try_send(AgentCommand::Shutdown).expect("room for one");
                ttx.try_send(TerminalHostCommand::Shutdown)
                    .expect("room for one");
                ws.set_agent(Some(atx));
                ws.set_terminals(Some(ttx));
                stalled_hosts = Some((arx, trx));
            }
        }
        World {
            ws,
            editors: BTreeMap::new(),
            ides: BTreeMap::new(),
            linked: Default::default(),
            agent,
            terminals,
            stalled_hosts,
            selection,
            pending: BTreeMap::new(),
            requests: 0,
            at_hosts: Vec::new(),
            asked: BTreeMap::new(),
            sent: BTreeMap::new(),
            changes,
            editor_counts: Vec::new(),
            log: String::new(),
            now: tokio::time::Instant::now(),
            step_gap: std::time::Duration::from_secs(1),
        }
    }

    /// The notifications `method` sent to editor `id` since the transcript
    /// last started, their params in order; for checks of what a
    /// transcript line would be too long to show.
    pub fn notified(&self, id: u64, method: &str) -> Vec<Value> {
        let head = format!("  ed{id} <- {method} ");
        self.log
            .lines()
            .filter_map(|l| l.strip_prefix(&head))
            .map(|params| serde_json::from_str(params).expect("params are JSON"))
            .collect()
    }

    /// Forgets the transcript so far.
    pub fn forget(&mut self) {
        self.log.clear();
    }

    /// Compares the transcript so far with `expected` and starts a new one.
    pub fn check(&mut self, expected: expect_test::Expect) {
        expected.assert_eq(&std::mem::take(&mut self.log));
    }

    /// Runs one event, labelled `what` in the transcript, and records what
    /// came out.
    pub fn step(&mut self, what: impl AsRef<str>, event: Event) {
        let what = what.as_ref();
        match what.char_indices().nth(MAX_LABEL) {
            Some((cut, _)) => self.log.push_str(&format!("> {}…\n", &what[..cut])),
            None => self.log.push_str(&format!("> {what}\n")),
        }
        self.now += self.step_gap;
        self.ws.handle(event, self.now);
        self.settle();
    }

    /// Lets `ms` milliseconds pass, firing the hub's timers (the
    /// selection's pacing, proposals not shown in time) when they are due
    /// on the way.
    pub fn wait_ms(&mut self, ms: u64) {
        self.log.push_str(&format!("> {ms} ms pass\n"));
        let until = self.now + std::time::Duration::from_millis(ms);
        while let Some(due) = self.ws.due().filter(|due| *due <= until) {
            self.now = due;
            self.ws.timers_fired(due);
            self.settle();
        }
        self.now = until;
    }

    // ----- editors -------------------------------------------------------

    pub fn attach(&mut self, id: u64, caps: Caps) {
        let (outbox, rx) = mpsc::channel(256);
        self.editors.insert(id, rx);
        let info = EditorInfo {
            client_name: format!("ed{id}"),
            client_version: None,
            process_id: None,
            transport: Transport::Unix,
            encoding: caps.encoding,
            role: caps.role,
            shows_message_buttons: caps.buttons,
            shows_progress: caps.progress,
            announces_changes: caps.plugin,
            reviews_proposals: caps.plugin,
            shows_documents: caps.documents,
            registers_inlay_hints: caps.hints,
        };
        let what = format!(
            "ed{id} attaches ({:?}{}{}{}, {})",
            caps.role,
            if caps.buttons { ", buttons" } else { "" },
            if caps.progress { ", progress" } else { "" },
            if caps.plugin { ", plugin" } else { "" },
            caps.encoding.as_lsp_str()
        );
        let editor = EditorId(id);
        self.step(
            what,
            Event::Attach {
                editor,
                info,
                outbox,
            },
        );
    }

    pub fn detach(&mut self, id: u64) {
        self.step(
            format!("ed{id} detaches"),
            Event::Detach {
                editor: EditorId(id),
            },
        );
    }

    pub fn notify(&mut self, id: u64, method: &str, params: Value) {
        self.step(
            format!("ed{id} {method} {}", compact(&params)),
            Event::Notification {
                editor: EditorId(id),
                method: method.into(),
                params: message::params(&params),
            },
        );
    }

    /// A request from editor `id`; its answer shows as `#n <- …`.
    pub fn request(&mut self, id: u64, method: &str, params: Value) -> usize {
        let what = format!("{method} {}", compact(&params));
        self.ask_hub(format!("ed{id} {what}"), |reply| Event::Request {
            editor: EditorId(id),
            method: method.into(),
            params: message::params(&params),
            reply,
        })
    }

    pub fn did_open(&mut self, id: u64, uri: &str, version: i32, text: &str) {
        self.notify(
            id,
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "rust", "version": version, "text": text}}),
        );
    }

    /// A `didOpen` the adapter found reached through a symlink.
    pub fn did_open_through_symlink(&mut self, id: u64, uri: &str, text: &str) {
        let params =
            json!({"textDocument": {"uri": uri, "languageId": "rust", "version": 1, "text": text}});
        self.step(
            format!("ed{id} textDocument/didOpen through a symlink {uri}"),
            Event::DidOpen {
                editor: EditorId(id),
                params: message::params(&params),
                through_symlink: true,
            },
        );
    }

    /// A full-text `didChange`.
    pub fn did_change(&mut self, id: u64, uri: &str, version: i32, text: &str) {
        self.notify(
            id,
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
        );
    }

    pub fn execute(&mut self, id: u64, command: &str, arguments: Value) -> usize {
        self.request(
            id,
            "workspace/executeCommand",
            json!({"command": command, "arguments": arguments}),
        )
    }

    /// `textDocument/codeAction` over `[start, end]` (line, character).
    pub fn code_actions(&mut self, id: u64, uri: &str, start: (u32, u32), end: (u32, u32)) {
        self.request(
            id,
            "textDocument/codeAction",
            json!({
                "textDocument": {"uri": uri},
                "range": {"start": {"line": start.0, "character": start.1}, "end": {"line": end.0, "character": end.1}},
                "context": {"diagnostics": []},
            }),
        );
    }

    /// Editor `id` answers its newest `window/showMessageRequest` offering
    /// `title` by pressing it.
    pub fn press(&mut self, id: u64, title: &str) {
        let asked = self.asked.get(&id).into_iter().flatten().rev();
        let request = asked
            .filter(|(_, params)| {
                params["actions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| a["title"] == title)
            })
            .map(|(id, _)| id.clone())
            .next()
            .unwrap_or_else(|| panic!("ed{id} was offered no button {title:?}"));
        self.respond(id, &request, Ok(json!({"title": title})), title);
    }

    /// Editor `id` answers its newest request of `method` with `result`.
    pub fn answer(&mut self, id: u64, method: &str, result: Value) {
        let request = self
            .sent
            .get(&id)
            .into_iter()
            .flatten()
            .rev()
            .find(|(_, m)| m == method)
            .map(|(r, _)| r.clone())
            .unwrap_or_else(|| panic!("ed{id} was sent no {method}"));
        let shown = compact(&result);
        self.respond(id, &request, Ok(result), &shown);
    }

    /// The change-set host tells the hub what it holds now.
    pub fn changes_updated(&mut self, update: Event) {
        self.step("the change-set host updates", update);
    }

    /// Editor `id` closes its newest message box without pressing anything.
    pub fn dismiss(&mut self, id: u64) {
        let (request, _) = self.asked[&id].last().cloned().expect("a question");
        self.respond(id, &request, Ok(Value::Null), "nothing");
    }

    fn respond(
        &mut self,
        id: u64,
        request: &RequestId,
        result: Result<Value, message::ResponseError>,
        pressed: &str,
    ) {
        self.step(
            format!("ed{id} answers {} with {pressed}", request.to_json()),
            Event::EditorResponse {
                editor: EditorId(id),
                id: request.clone(),
                result,
            },
        );
    }

    // ----- Claude Code connections ---------------------------------------

    pub fn ide_attach(&mut self, client: u64) {
        let (outbox, rx) = mpsc::channel(64);
        self.ides.insert(client, rx);
        let scope = self.scope(client);
        let linked = if scope == IdeScope::Workspace {
            " through a sandbox link"
        } else {
            ""
        };
        self.step(
            format!("ide{client} attaches{linked}"),
            Event::IdeAttach {
                client: IdeClientId(client),
                scope,
                outbox,
            },
        );
    }

    /// Claude Code connection `client` comes through a sandbox link: it
    /// attaches, and its tool calls are, confined to the workspace.
    pub fn ide_link_attach(&mut self, client: u64) {
        self.linked.insert(client);
        self.ide_attach(client);
    }

    fn scope(&self, client: u64) -> IdeScope {
        if self.linked.contains(&client) {
            IdeScope::Workspace
        } else {
            IdeScope::Host
        }
    }

    pub fn ide_detach(&mut self, client: u64) {
        self.step(
            format!("ide{client} detaches"),
            Event::IdeDetach {
                client: IdeClientId(client),
            },
        );
    }

    /// A `tools/call` from a Claude Code connection, its arguments as the
    /// CLI sends them (`openDiff` is [`World::open_diff`]).
    pub fn ide_tool(&mut self, client: u64, tool: &str, arguments: Value) -> usize {
        let what = format!("ide{client} {tool} {}", compact(&arguments));
        self.ide_call(client, what, ide_call(tool, &arguments, ""))
    }

    /// `openFile` of a file no editor holds, whose text on disk (which the
    /// adapter reads for the hub) is `on_disk`.
    pub fn open_file_on_disk(&mut self, client: u64, arguments: Value, on_disk: &str) -> usize {
        let what = format!(
            "ide{client} openFile {} on disk {on_disk:?}",
            compact(&arguments)
        );
        self.ide_call(client, what, ide_call("openFile", &arguments, on_disk))
    }

    /// `openDiff` from a Claude Code connection, as the adapter passes it
    /// on: with the file's text and the proposal document it wrote.
    pub fn open_diff(&mut self, client: u64, diff: OpenDiff) -> usize {
        let what = format!(
            "ide{client} openDiff {:?} {} (proposal {}) old {:?} new {:?}",
            diff.tab_name,
            diff.new_file_path.display(),
            diff.proposal_path.display(),
            diff.old_text,
            diff.new_file_contents,
        );
        self.ide_call(client, what, IdeToolCall::OpenDiff(diff))
    }

    fn ide_call(&mut self, client: u64, what: String, call: IdeToolCall) -> usize {
        let scope = self.scope(client);
        self.ask_hub(what, |reply| Event::IdeToolCall {
            client: IdeClientId(client),
            scope,
            call,
            reply,
        })
    }

    // ----- the agent and terminal hosts ----------------------------------

    /// An editor tool of the agent's MCP server.
    pub fn agent_tool(&mut self, tool: &str, arguments: Value) -> usize {
        let what = format!("agent tool {tool} {}", compact(&arguments));
        let call = editor_call(tool, &arguments);
        self.ask_hub(what, |reply| Event::AgentToolCall { call, reply })
    }

    /// Runs an event that carries a reply, numbered `#n` in the
    /// transcript; `#n waits` if it is not answered at once.
    fn ask_hub(&mut self, what: String, event: impl FnOnce(Responder) -> Event) -> usize {
        let (reply, answered) = Responder::new();
        self.requests += 1;
        let n = self.requests;
        self.pending.insert(n, answered);
        self.step(format!("#{n} {what}"), event(reply));
        if self.pending.contains_key(&n) {
            self.log.push_str(&format!("  #{n} waits\n"));
        }
        n
    }

    /// The agent asks; fields `object` leaves out take neutral values.
    pub fn approval(&mut self, object: Value) {
        let mut full = serde_json::json!({
            "session": "s1", "kind": "tool", "tool": "", "input": {}, "title": "",
            "destructive": false,
        });
        match object["kind"].as_str() {
            Some("plan") => full.as_object_mut().unwrap().extend([
                ("plan".to_owned(), serde_json::json!("")),
                ("choices".to_owned(), serde_json::json!([])),
            ]),
            Some("question") => full
                .as_object_mut()
                .unwrap()
                .extend([("questions".to_owned(), serde_json::json!([]))]),
            _ => {}
        }
        full.as_object_mut()
            .unwrap()
            .extend(object.as_object().expect("an object").clone());
        let approval = serde_json::from_value(full).expect("an approval object");
        self.step(
            format!("agent asks {}", compact(&object)),
            Event::AgentApproval { approval },
        );
    }

    pub fn approval_closed(&mut self, session: &str, approval: &str) {
        self.step(
            format!("agent closes {approval}"),
            Event::AgentApprovalClosed {
                session: session.into(),
                approval: approval.into(),
            },
        );
    }

    pub fn progress(&mut self, session: &str, progress: AgentProgress) {
        self.step(
            format!("agent progress {session} {progress:?}"),
            Event::AgentProgress {
                session: session.into(),
                progress,
            },
        );
    }

    pub fn publish(&mut self, topic: Topic, method: &'static str, params: Value) {
        self.step(
            format!("publish {topic:?} {method} {}", compact(&params)),
            Event::Publish {
                topic,
                method,
                params,
            },
        );
    }

    /// The host answers the oldest request it holds.
    pub fn host_answers(&mut self, answer: Value) {
        let request = self.at_hosts.remove(0);
        self.log
            .push_str(&format!("> the host answers {}\n", request.method));
        request.reply.send(Ok(answer));
        self.settle();
    }

    // ----- the transcript ------------------------------------------------

    /// Writes out everything the channels hold now.
    fn settle(&mut self) {
        for (id, rx) in &mut self.editors {
            while let Ok(body) = rx.try_recv() {
                let v: Value = serde_json::from_slice(&body).expect("the hub writes JSON");
                let method = v["method"].as_str().unwrap_or("(no method)");
                let params = compact(&v["params"]);
                match v.get("id") {
                    Some(rid) => {
                        let rid = RequestId::String(rid.as_str().unwrap_or_default().into());
                        self.log.push_str(&format!(
                            "  ed{id} <- request {} {method} {params}\n",
                            rid.to_json()
                        ));
                        if method == "window/showMessageRequest" {
                            self.asked
                                .entry(*id)
                                .or_default()
                                .push((rid.clone(), v["params"].clone()));
                        }
                        self.sent
                            .entry(*id)
                            .or_default()
                            .push((rid, method.to_owned()));
                    }
                    None if method == "moonkale/status/changed" => self.log.push_str(&format!(
                        "  ed{id} <- {method} {}\n",
                        roster_of(&v["params"])
                    )),
                    None => self
                        .log
                        .push_str(&format!("  ed{id} <- {method} {params}\n")),
                }
            }
        }
        for (id, rx) in &mut self.ides {
            while let Ok(text) = rx.try_recv() {
                let v: Value = serde_json::from_str(&text).expect("the hub writes JSON");
                self.log.push_str(&format!(
                    "  ide{id} <- {} {}\n",
                    v["method"].as_str().unwrap_or("?"),
                    compact(&v["params"])
                ));
            }
        }
        while let Some(command) = self.agent.as_mut().and_then(|rx| rx.try_recv().ok()) {
            match command {
                AgentCommand::Request(r) => {
                    self.log
                        .push_str(&format!("  agent <- {}\n", request_line(&r)));
                    self.at_hosts.push(r);
                }
                AgentCommand::Answer {
                    approval,
                    answer,
                    reply,
                } => {
                    self.log
                        .push_str(&format!("  agent <- Answer {approval} {answer:?}\n"));
                    // The session takes it (its judgement is its own spec).
                    if let Some(reply) = reply {
                        reply.send(Ok(serde_json::json!({})));
                    }
                }
                AgentCommand::TellClaude { session, text } => self
                    .log
                    .push_str(&format!("  agent <- TellClaude {session} {text:?}\n")),
                // Kept apart: it follows every attach and detach.
                AgentCommand::Editors { attached } => self.editor_counts.push(attached),
                AgentCommand::Shutdown => self.log.push_str("  agent <- Shutdown\n"),
            }
        }
        while let Some(command) = self.terminals.as_mut().and_then(|rx| rx.try_recv().ok()) {
            match command {
                TerminalHostCommand::Request(r) => {
                    self.log
                        .push_str(&format!("  terminals <- {}\n", request_line(&r)));
                    self.at_hosts.push(r);
                }
                TerminalHostCommand::Detach { editor } => {
                    self.log
                        .push_str(&format!("  terminals <- Detach ed{}\n", editor.0));
                }
                TerminalHostCommand::Shutdown => self.log.push_str("  terminals <- Shutdown\n"),
            }
        }
        while let Some(command) = self.changes.as_mut().and_then(|rx| rx.try_recv().ok()) {
            match command {
                ChangesCommand::Request(r) => {
                    self.log
                        .push_str(&format!("  changes <- {}\n", request_line(&r)));
                    self.at_hosts.push(r);
                }
                ChangesCommand::Undo {
                    params,
                    buffers,
                    strict,
                    reply,
                } => {
                    let buffers: Vec<String> = buffers
                        .iter()
                        .map(|b| {
                            format!(
                                "{} {:?}{}",
                                b.uri,
                                b.text,
                                if b.dirty { " dirty" } else { "" }
                            )
                        })
                        .collect();
                    self.log.push_str(&format!(
                        "  changes <- Undo{} {} buffers {buffers:?}\n",
                        if strict { " (strict)" } else { "" },
                        compact(&serde_json::to_value(&params).expect("serializes"))
                    ));
                    reply.send(Ok(json!({"undone": 1, "refused": []})));
                }
                other => self.log.push_str(&format!("  changes <- {other:?}\n")),
            }
        }
        let mut answered = Vec::new();
        for (n, rx) in &mut self.pending {
            if let Ok(answer) = rx.try_recv() {
                answered.push(*n);
                let text = match answer {
                    Ok(v) if v.get("pid").is_some() && v.get("workspace").is_some() => {
                        format!("Ok status {}", roster_of(&v))
                    }
                    Ok(v) => format!("Ok{}", render_result(&v)),
                    Err(e) => format!("Err {} {}", e.code, e.message),
                };
                self.log.push_str(&format!("  #{n} <- {text}\n"));
            }
        }
        for n in answered {
            self.pending.remove(&n);
        }
        if self.selection.has_changed().unwrap_or(false) {
            let now = self.selection.borrow_and_update().clone();
            let text = now.as_ref().map_or("none".into(), |now| {
                let params = compact(&serde_json::to_value(&now.params).expect("serializes"));
                match now.in_workspace {
                    true => params,
                    false => format!("{params} (outside the workspace)"),
                }
            });
            self.log.push_str(&format!("  selection = {text}\n"));
        }
    }

    /// The workspace's status as `moonkale-service status` shows it (its
    /// pid left out), and what that leaves out: the bytes held, the Claude
    /// Code connections and the pending proposals.
    pub fn status(&mut self) {
        let status = self.ws.status();
        let shown = crate::StatusReport {
            status: crate::Status {
                pid: 0,
                ..status.clone()
            },
            ide_port: None,
            claudes: Vec::new(),
            sandbox: None,
            terminals: Vec::new(),
        };
        self.log.push_str("> status\n");
        for line in crate::render_status(&shown).lines() {
            self.log.push_str(&format!("  {line}\n"));
        }
        self.log
            .push_str(&format!("  {} bytes held\n", status.total_bytes));
        for c in &status.claude_clients {
            self.log
                .push_str(&format!("  claude client {} pid {:?}\n", c.id, c.pid));
        }
        for p in &status.pending_proposals {
            self.log.push_str(&format!(
                "  proposal {:?}: {} in {}\n",
                p.tab_name, p.target, p.document
            ));
        }
    }
}

fn request_line(r: &Request) -> String {
    format!(
        "Request ed{} {} {}",
        r.editor.0,
        r.method,
        compact(&serde_json::from_str::<Value>(r.params.get()).unwrap_or(Value::Null))
    )
}

/// One line of JSON, keys sorted.
/// `openDiff` of `path` (`/w/…`) from `old` to `new`, its proposal
/// document where the adapter writes one.
pub fn diff(tab: &str, path: &str, old: &str, new: &str) -> OpenDiff {
    let name = std::path::Path::new(path).file_name().expect("a file name");
    OpenDiff {
        old_file_path: path.into(),
        new_file_path: path.into(),
        new_file_contents: new.into(),
        tab_name: tab.into(),
        old_text: old.into(),
        proposal_path: std::path::Path::new("/run/user/1000/moonkale/proposals/1-ab").join(name),
    }
}

/// A call as the IDE adapter types it, from the CLI's arguments (and, for
/// `openFile`, the file's text the adapter read).
fn ide_call(tool: &str, args: &Value, file_text: &str) -> IdeToolCall {
    let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    let path = |k: &str| text(k).expect("a path argument").into();
    let flag = |k: &str| args.get(k).and_then(Value::as_bool);
    match IdeTool::parse(tool).expect("an IDE tool") {
        IdeTool::CloseTab => IdeToolCall::CloseTab {
            tab_name: text("tab_name").expect("tab_name"),
        },
        IdeTool::CloseAllDiffTabs => IdeToolCall::CloseAllDiffTabs,
        IdeTool::GetDiagnostics => IdeToolCall::GetDiagnostics { uri: text("uri") },
        IdeTool::OpenFile => IdeToolCall::OpenFile(OpenFile {
            file_path: path("filePath"),
            start_text: text("startText"),
            end_text: text("endText"),
            select_to_end_of_line: flag("selectToEndOfLine").unwrap_or(false),
            make_frontmost: flag("makeFrontmost").unwrap_or(true),
            file_text: file_text.into(),
        }),
        IdeTool::GetCurrentSelection => IdeToolCall::GetCurrentSelection,
        IdeTool::GetLatestSelection => IdeToolCall::GetLatestSelection,
        IdeTool::GetOpenEditors => IdeToolCall::GetOpenEditors,
        IdeTool::GetWorkspaceFolders => IdeToolCall::GetWorkspaceFolders,
        IdeTool::CheckDocumentDirty => IdeToolCall::CheckDocumentDirty {
            file_path: path("filePath"),
        },
        IdeTool::SaveDocument => IdeToolCall::SaveDocument {
            file_path: path("filePath"),
        },
        tool @ (IdeTool::OpenDiff | IdeTool::ExecuteCode) => {
            panic!("{tool} does not reach the hub this way")
        }
    }
}

/// A call as the session types it, from the CLI's arguments.
fn editor_call(tool: &str, args: &Value) -> EditorToolCall {
    let path = |k: &str| args[k].as_str().expect("a path argument").into();
    let line = |k: &str| args.get(k).and_then(Value::as_u64);
    match EditorTool::parse(tool).expect("an editor tool") {
        EditorTool::GetOpenEditors => EditorToolCall::GetOpenEditors,
        EditorTool::GetCurrentSelection => EditorToolCall::GetCurrentSelection,
        EditorTool::GetLatestSelection => EditorToolCall::GetLatestSelection,
        EditorTool::GetDiagnostics => EditorToolCall::GetDiagnostics {
            uri: args.get("uri").and_then(Value::as_str).map(str::to_owned),
        },
        EditorTool::GetWorkspaceFolders => EditorToolCall::GetWorkspaceFolders,
        EditorTool::ReadBuffer => EditorToolCall::ReadBuffer {
            file_path: path("filePath"),
        },
        EditorTool::OpenFile => EditorToolCall::OpenFile {
            file_path: path("filePath"),
            start_line: line("startLine"),
            end_line: line("endLine"),
        },
    }
}

pub fn compact(v: &Value) -> String {
    serde_json::to_string(v).expect("JSON serializes")
}

/// A status snapshot as `moonkale/status/changed` follows it: who is in
/// the workspace and what waits (the snapshot's pid is the test's own).
pub fn roster_of(status: &Value) -> String {
    let list = |key: &str, item: &dyn Fn(&Value) -> String| {
        let items: Vec<String> = status[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(item)
            .collect();
        items.join(", ")
    };
    format!(
        "editors [{}] claude [{}] proposals [{}] trusted {} sets {} files {} spare {}",
        list("editors", &|e| format!("ed{} {}", e["id"], e["client"])),
        list("claudeClients", &|c| format!(
            "ide{} pid {}",
            c["id"], c["pid"]
        )),
        list("pendingProposals", &|p| p["tabName"]
            .as_str()
            .unwrap_or("?")
            .to_owned()),
        status["trusted"],
        status["pendingChangeSets"],
        status["pendingChangedFiles"],
        status["agentSpare"]["pid"],
    )
}

/// An answer after a space: arrays one element a line, MCP tool results as
/// their text items (each on its own lines, as the model reads them).
fn render_result(v: &Value) -> String {
    if let Some(items) = v.as_array().filter(|a| !a.is_empty()) {
        return items
            .iter()
            .map(|i| format!("\n      {}", compact(i)))
            .collect();
    }
    let Some(content) = v.get("content").and_then(Value::as_array) else {
        return format!(" {}", compact(v));
    };
    let mut out = String::from(" tool result");
    if v.get("isError") == Some(&json!(true)) {
        out.push_str(" (isError)");
    }
    let extra: Vec<&String> = v
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .filter(|k| *k != "content" && *k != "isError")
        .collect();
    assert!(extra.is_empty(), "unexpected result fields {extra:?}");
    for item in content {
        assert_eq!(item["type"], "text", "{item}");
        let text = sorted_json_text(item["text"].as_str().unwrap_or_default());
        out.push_str("\n      text:");
        for line in text.lines() {
            out.push_str(&format!("\n        {line}"));
        }
    }
    out
}

/// A text item that is JSON with its keys sorted (pretty or compact, as it
/// was written); any other text as it is.
fn sorted_json_text(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) if text.contains('\n') => {
            serde_json::to_string_pretty(&v).expect("JSON serializes")
        }
        Ok(v @ (Value::Object(_) | Value::Array(_))) => compact(&v),
        _ => text.to_owned(),
    }
}
