//! The agent host of one workspace: starts sessions, loads them from their
//! transcripts, routes `moonkale/agent/*` requests to them and lists them.
//!
//! **Invariant:** the host only routes; it never waits for a session (its
//! commands are `try_send`), so one busy session cannot stall the others.
//! It owns the set of live session tasks; a session's state belongs to its
//! task.
//!
//! It also keeps the warm spare ([`spare`]): a session started ahead that
//! the next matching `moonkale/agent/start` adopts.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use moonkale_claude::launch::PermissionMode;
use moonkale_protocol::agent::{self, SessionSummary, StartResult, TrustResult};
use moonkale_protocol::dispatch::Dispatch;
use moonkale_protocol::to_json;
use serde_json::Value;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::watch;
use uuid::Uuid;

use self::spare::Spares;
use super::log::EventLog;
use super::session::{self, MAX_EVENTS_PER_PAGE, Restored, SessionCommand, SessionHandle, State};
use super::transcript::{self, Transcript};
use super::{AgentCommand, AgentConfig, Answer};
use crate::hub::ports::Request;
use crate::hub::{EditorId, Event, HubHandle, Responder, Topic};
use crate::lsp::message::{Params, ResponseError, code};
use moonkale_protocol::ApprovalId;

/// Sessions with a task (and maybe a process) at once; the least recently
/// used idle one is closed to make room.
pub const MAX_LIVE_SESSIONS: usize = 16;
/// How often the host looks whether a waiting hook question's hook is
/// gone, while one waits.
const HOOK_LOOK: std::time::Duration = std::time::Duration::from_millis(250);
/// Largest prompt, in bytes.
pub const MAX_PROMPT_BYTES: usize = 4 << 20;

/// Starts the agent host of the workspace `hub` serves. It ends when the
/// hub drops its sender; its sessions end with it.
pub fn spawn(
    hub: HubHandle,
    commands: tokio::sync::mpsc::Receiver<AgentCommand>,
    config: AgentConfig,
) -> tokio::task::JoinHandle<()> {
    let chats = crate::user_state::chats_dir(hub.root()).map_err(|e| e.to_string());
    spawn_in(hub, commands, config, chats)
}

/// [`spawn`], keeping transcripts in `chats` (a test's own folder).
fn spawn_in(
    hub: HubHandle,
    commands: tokio::sync::mpsc::Receiver<AgentCommand>,
    config: AgentConfig,
    chats: Result<PathBuf, String>,
) -> tokio::task::JoinHandle<()> {
    let root = hub.root().to_path_buf();
    let used_before = chats.as_ref().is_ok_and(|dir| has_transcripts(dir));
    let mut host = Host {
        root,
        chats,
        hub,
        spares: Spares::new(config.spare),
        config: Arc::new(config),
        sessions: HashMap::new(),
        clock: 0,
        editors: watch::Sender::new(0),
        hook_questions: Default::default(),
    };
    if used_before {
        host.used_before();
    }
    tokio::spawn(host.run(commands))
}

/// Whether `chats` holds a session's transcript.
fn has_transcripts(chats: &std::path::Path) -> bool {
    std::fs::read_dir(chats)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(".jsonl"))
        })
}

struct Host {
    root: PathBuf,
    /// The workspace's transcripts, in the user's state directory (never in
    /// the workspace, where a repository could plant one); why not, if the
    /// state directory cannot be found.
    chats: Result<PathBuf, String>,
    hub: HubHandle,
    config: Arc<AgentConfig>,
    sessions: HashMap<Uuid, Live>,
    clock: u64,
    spares: Spares,
    /// Editors attached, as the hub last said: sessions offer the CLI the
    /// editor tools only while one is.
    editors: watch::Sender<usize>,
    /// Terminal CLIs' questions waiting for a person.
    hook_questions: crate::agent::hooks::HookQuestions,
}

struct Live {
    handle: SessionHandle,
    last_used: u64,
}

fn session_id(raw: &str) -> Result<Uuid, ResponseError> {
    Uuid::parse_str(raw)
        .map_err(|_| ResponseError::invalid_params(format!("{raw:?} is not a session id")))
}

/// A request, parsed, before it meets its reply.
enum Routed {
    Start {
        mode: PermissionMode,
        model: Option<String>,
        prompt: Option<String>,
        place: Place,
    },
    ToSession {
        session: String,
        command: Box<dyn FnOnce(Responder) -> SessionCommand + Send>,
        /// The asking connection wants the session's stream (it sent a
        /// prompt).
        subscribe: bool,
    },
    List,
    Answer {
        approval: String,
        answer: Answer,
    },
    /// The user trusts the workspace, or stops trusting it.
    Trust {
        trusted: bool,
    },
    /// Sessions with these settings are coming: the spare is made ready.
    Prepare {
        mode: PermissionMode,
        model: Option<String>,
    },
    /// End a session's CLI; with `delete`, remove its transcript too.
    Close {
        session: String,
        delete: bool,
    },
    /// A secret for a CLI's hooks.
    HookSecret,
    /// A terminal CLI's hook: its permission question, or (`done`) its tool
    /// ran or was denied.
    Hook {
        params: agent::HookParams,
        done: bool,
    },
}

/// Parses a request once, into its typed params, and checks what the
/// types cannot say (sizes, model names).
fn route(method: &str, params: &Params) -> Result<Routed, ResponseError> {
    let to = |session: String, command: Box<dyn FnOnce(Responder) -> SessionCommand + Send>| {
        Ok(Routed::ToSession {
            session,
            command,
            subscribe: false,
        })
    };
    Dispatch::new(method, params)
        .on::<agent::Start>(|p| {
            check_model(p.model.as_deref())?;
            if let Some(prompt) = &p.prompt {
                check_prompt(prompt)?;
            }
            check_mcp_servers(&p.mcp_servers)?;
            Ok(Routed::Start {
                mode: p.permission_mode.unwrap_or(PermissionMode::Plan),
                model: p.model,
                prompt: p.prompt,
                place: Place {
                    cwd: p.cwd,
                    mcp_servers: p.mcp_servers,
                },
            })
        })
        .on::<agent::Send>(|p| {
            check_prompt(&p.prompt)?;
            check_images(&p.images)?;
            let (text, images) = (p.prompt, p.images);
            Ok(Routed::ToSession {
                session: p.session,
                command: Box::new(|reply| SessionCommand::Prompt {
                    text,
                    images,
                    reply,
                }),
                subscribe: true,
            })
        })
        .on::<agent::Events>(|p| {
            let since = usize::try_from(p.since).unwrap_or(usize::MAX);
            let limit = p.limit.map_or(MAX_EVENTS_PER_PAGE, |l| {
                usize::try_from(l).unwrap_or(usize::MAX)
            });
            to(
                p.session,
                Box::new(move |reply| SessionCommand::Events {
                    since,
                    limit,
                    reply,
                }),
            )
        })
        .on::<agent::Preview>(|p| {
            let Some(id) = ApprovalId::parse(&p.approval) else {
                return Err(ResponseError::invalid_params(format!(
                    "{:?} is not an approval id (session/number)",
                    p.approval
                )));
            };
            let session = id.session().to_owned();
            to(
                session,
                Box::new(move |reply| SessionCommand::Preview {
                    approval: p.approval,
                    reply,
                }),
            )
        })
        .on::<agent::List>(|_| Ok(Routed::List))
        .on::<agent::Close>(|p| {
            Ok(Routed::Close {
                session: p.session,
                delete: false,
            })
        })
        .on::<agent::Delete>(|p| {
            Ok(Routed::Close {
                session: p.session,
                delete: true,
            })
        })
        .on::<agent::Trust>(|p| Ok(Routed::Trust { trusted: p.trusted }))
        .on::<agent::HookPermission>(|params| {
            Ok(Routed::Hook {
                params,
                done: false,
            })
        })
        .on::<agent::HookDone>(|params| Ok(Routed::Hook { params, done: true }))
        .on::<agent::HookSecret>(|_| Ok(Routed::HookSecret))
        .on::<agent::Prepare>(|p| {
            check_model(p.model.as_deref())?;
            Ok(Routed::Prepare {
                mode: p.permission_mode.unwrap_or(PermissionMode::Plan),
                model: p.model,
            })
        })
        .on::<agent::Interrupt>(|p| {
            to(
                p.session,
                Box::new(|reply| SessionCommand::Interrupt { reply }),
            )
        })
        .on::<agent::SetPermissionMode>(|p| {
            let mode = p.mode;
            to(
                p.session,
                Box::new(move |reply| SessionCommand::SetPermissionMode { mode, reply }),
            )
        })
        .on::<agent::SetModel>(|p| {
            check_model(p.model.as_deref())?;
            let model = p.model;
            to(
                p.session,
                Box::new(|reply| SessionCommand::SetModel { model, reply }),
            )
        })
        .on::<agent::Answer>(|p| {
            Ok(Routed::Answer {
                approval: p.approval,
                answer: Answer {
                    allow: p.allow,
                    always: p.always,
                    message: p.message,
                    by: "api",
                    mode: p.mode,
                    answers: p.answers,
                },
            })
        })
        .finish()
}

fn check_prompt(prompt: &str) -> Result<(), ResponseError> {
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(ResponseError::invalid_params(format!(
            "the prompt has {} bytes; at most {MAX_PROMPT_BYTES} are accepted",
            prompt.len()
        )));
    }
    Ok(())
}

/// Most images a prompt takes, and their base64 size each (the API's
/// limit for one image is 5 MB).
const MAX_IMAGES: usize = 20;
const MAX_IMAGE_BYTES: usize = 7 * 1024 * 1024;

/// A prompt's images: of a type the API takes, base64, not too many or
/// too large.
fn check_images(images: &[agent::Image]) -> Result<(), ResponseError> {
    let refuse = |why: String| Err(ResponseError::invalid_params(why));
    if images.len() > MAX_IMAGES {
        return refuse(format!("at most {MAX_IMAGES} images per prompt"));
    }
    for image in images {
        if !matches!(
            image.media_type.as_str(),
            "image/png" | "image/jpeg" | "image/gif" | "image/webp"
        ) {
            return refuse(format!(
                "{:?} images are not taken (png, jpeg, gif or webp)",
                crate::printable::one_line(&image.media_type)
            ));
        }
        if image.data.len() > MAX_IMAGE_BYTES {
            return refuse(format!(
                "an image is at most {MAX_IMAGE_BYTES} bytes of base64"
            ));
        }
        if image.data.is_empty()
            || !image
                .data
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        {
            return refuse("an image's data is base64".into());
        }
    }
    Ok(())
}

/// Where a new session runs and what the front end adds to it.
struct Place {
    cwd: Option<PathBuf>,
    mcp_servers: serde_json::Map<String, Value>,
}

/// Most MCP servers a front end may add to a session, and their size as
/// JSON (they go into the CLI's argv).
const MAX_MCP_SERVERS: usize = 32;
const MAX_MCP_CONFIG_BYTES: usize = 64 * 1024;

/// A front end's MCP servers: named plainly, not ours, each an object of a
/// transport the CLI knows.
fn check_mcp_servers(servers: &serde_json::Map<String, Value>) -> Result<(), ResponseError> {
    let refuse = |why: String| Err(ResponseError::invalid_params(why));
    if servers.len() > MAX_MCP_SERVERS {
        return refuse(format!("at most {MAX_MCP_SERVERS} MCP servers per session"));
    }
    if serde_json::to_vec(servers).map_or(usize::MAX, |v| v.len()) > MAX_MCP_CONFIG_BYTES {
        return refuse(format!(
            "the MCP servers' configuration is over {MAX_MCP_CONFIG_BYTES} bytes"
        ));
    }
    for (name, config) in servers {
        if name.is_empty()
            || name.len() > 100
            || name == session::MCP_SERVER
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return refuse(format!(
                "{:?} cannot name an MCP server (letters, digits, '-', '_', '.'; not {:?})",
                crate::printable::one_line(name),
                session::MCP_SERVER
            ));
        }
        if !matches!(config["type"].as_str(), Some("stdio" | "http" | "sse")) {
            return refuse(format!(
                "MCP server {name:?}: type must be stdio, http or sse"
            ));
        }
    }
    Ok(())
}

/// A model name goes into argv: short, one line, no flag.
fn check_model(model: Option<&str>) -> Result<(), ResponseError> {
    match model {
        Some(m)
            if m.is_empty()
                || m.len() > 200
                || m.starts_with('-')
                || m.chars().any(|c| c.is_control() || c.is_whitespace()) =>
        {
            Err(ResponseError::invalid_params(format!(
                "{m:?} is not a model name"
            )))
        }
        _ => Ok(()),
    }
}

impl SessionCommand {
    /// The reply of a command the session did not take.
    fn into_reply(self) -> Option<Responder> {
        match self {
            SessionCommand::Prompt { reply, .. }
            | SessionCommand::Events { reply, .. }
            | SessionCommand::Preview { reply, .. }
            | SessionCommand::Interrupt { reply }
            | SessionCommand::SetPermissionMode { reply, .. }
            | SessionCommand::SetModel { reply, .. } => Some(reply),
            SessionCommand::Answer { reply, .. } => reply,
            SessionCommand::TellClaude { .. } | SessionCommand::Adopt { .. } => None,
        }
    }
}

impl Host {
    async fn run(mut self, mut commands: tokio::sync::mpsc::Receiver<AgentCommand>) {
        self.hub.try_send(Event::WorkspaceTrust {
            trusted: self.trusted(),
            message: None,
        });
        loop {
            let hooks_wait = self.hook_questions.any();
            let command = tokio::select! {
                command = commands.recv() => command,
                event = self.spare_event() => {
                    self.on_spare_event(event);
                    continue;
                }
                // A hook's process may end without a later hook saying so
                // (its CLI answered in the terminal and ended it, or quit).
                () = tokio::time::sleep(HOOK_LOOK), if hooks_wait => {
                    self.withdraw_gone_hook_questions();
                    continue;
                }
            };
            let Some(command) = command else { break };
            match command {
                AgentCommand::Request(Request {
                    editor,
                    method,
                    params,
                    reply,
                }) => {
                    // Reading the sessions (`status`, a listing) is not
                    // using the agent.
                    // Nor is a terminal CLI's hook.
                    let hook = [
                        <agent::HookPermission as moonkale_protocol::Request>::METHOD,
                        <agent::HookDone as moonkale_protocol::Request>::METHOD,
                        <agent::HookSecret as moonkale_protocol::Request>::METHOD,
                    ];
                    if method != <agent::List as moonkale_protocol::Request>::METHOD
                        && !hook.contains(&method.as_str())
                    {
                        self.agent_used();
                    }
                    self.request(editor, &method, &params, reply);
                    self.refresh_spare();
                }
                AgentCommand::Editors { attached } => self.editors_attached(attached),
                AgentCommand::Answer {
                    approval,
                    answer,
                    reply,
                } => self.answer(approval, answer, reply),
                // The session prepends it to its next prompt.
                AgentCommand::TellClaude { session, text } => {
                    self.forward(&session, SessionCommand::TellClaude { text }, None);
                }
                AgentCommand::Shutdown => break,
            }
        }
        // The service is stopping: every session closes its process.
        self.stop_spare().await;
        let tasks: Vec<_> = self.sessions.drain().map(|(_, l)| l.handle).collect();
        for handle in tasks {
            drop(handle.tx);
            let _ = handle.task.await;
        }
    }

    fn request(&mut self, editor: EditorId, method: &str, params: &Params, reply: Responder) {
        let routed = match route(method, params) {
            Ok(routed) => routed,
            Err(e) => {
                reply.send(Err(e));
                return;
            }
        };
        match routed {
            Routed::Start {
                mode,
                model,
                prompt,
                place,
            } => {
                let id = match self.start(mode, model, place) {
                    Ok(id) => id,
                    Err(e) => {
                        reply.send(Err(e));
                        return;
                    }
                };
                let session = id.to_string();
                self.hub.try_send(Event::Subscribe {
                    editor,
                    topic: Topic::Session(session.clone()),
                });
                match prompt {
                    Some(text) => self.forward(
                        &session,
                        SessionCommand::Prompt {
                            text,
                            images: Vec::new(),
                            reply,
                        },
                        Some(editor),
                    ),
                    None => {
                        let started = StartResult {
                            session,
                            state: State::Idle,
                            seq: None,
                        };
                        reply.send(Ok(to_json(&started)));
                    }
                }
            }
            Routed::ToSession {
                session,
                command,
                subscribe,
            } => {
                if subscribe && session_id(&session).is_ok() {
                    self.hub.try_send(Event::Subscribe {
                        editor,
                        topic: Topic::Session(session.clone()),
                    });
                }
                self.forward(&session, command(reply), Some(editor))
            }
            Routed::List => {
                reply.send(Ok(self.list()));
            }
            Routed::Answer { approval, answer } => self.answer(approval, answer, Some(reply)),
            Routed::Trust { trusted } => {
                reply.send(self.set_trust(trusted));
            }
            Routed::Prepare { mode, model } => {
                self.predict_spare(mode, model);
                reply.send(Ok(to_json(&moonkale_protocol::Empty {})));
            }
            Routed::Close { session, delete } => reply.send(self.close(&session, delete)),
            Routed::Hook { params, done } => self.hook(params, done, reply),
            Routed::HookSecret => reply.send(
                self.config
                    .hook_secrets
                    .issue()
                    .map(|token| to_json(&agent::HookSecretResult { token }))
                    .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string())),
            ),
        }
    }

    /// The workspace's default sandbox now (an unreadable store: none
    /// here; the session's own start then fails with the reason).
    fn default_sandbox(&self) -> Option<crate::user_state::DefaultSandbox> {
        self.config.sandbox(&self.root).ok().flatten()
    }

    fn trusted(&self) -> bool {
        self.config
            .trust
            .as_ref()
            .is_some_and(|t| t.is_trusted(&self.root))
    }

    /// Keeps the user's trust decision (outside the workspace) and tells
    /// every editor what it means. Sessions take it at their next turn.
    fn set_trust(&mut self, trusted: bool) -> Result<Value, ResponseError> {
        let failed = |why: String| ResponseError::new(code::REQUEST_FAILED, why);
        let store = self
            .config
            .trust
            .as_ref()
            .ok_or_else(|| failed("the trust store cannot be found (no $HOME?)".into()))?;
        let changed = store
            .set(&self.root, trusted)
            .map_err(|e| failed(e.to_string()))?;
        let message = trust_message(store, &self.root, trusted);
        let now = self.trusted();
        self.hub.try_send(Event::WorkspaceTrust {
            trusted: now,
            message: Some(message.clone()),
        });
        self.trust_changed();
        Ok(to_json(&TrustResult {
            trusted: now,
            changed,
            message,
        }))
    }

    /// A terminal CLI's hook ([`crate::agent::hooks`]), if its secret is
    /// one the service gave: its question goes to every front end (the
    /// reply waits for a person), or a question its terminal answered is
    /// withdrawn.
    fn hook(&mut self, params: agent::HookParams, done: bool, reply: Responder) {
        let users_own = || {
            crate::agent::user_hook::user_secret(false)
                .ok()
                .flatten()
                .is_some_and(|secret| {
                    constant_time_eq::constant_time_eq(secret.as_bytes(), params.token.as_bytes())
                })
        };
        if !self.config.hook_secrets.knows(&params.token) && !users_own() {
            reply.send(Err(ResponseError::new(
                code::REQUEST_FAILED,
                "this hook's secret is not one this service gave",
            )));
            return;
        }
        if done {
            for approval in self.hook_questions.done(&params.input) {
                self.hook_question_closed(&approval);
            }
            reply.send(Ok(to_json(&moonkale_protocol::Empty {})));
            return;
        }
        match self.hook_questions.ask(&params.input, &self.root, reply) {
            Ok(approval) => {
                tracing::info!(approval = %approval.approval, "a terminal's claude asks");
                self.hub.try_send(Event::AgentApproval { approval });
            }
            Err((reply, e)) => reply.send(Err(e)),
        }
    }

    /// Questions whose hook is gone are withdrawn everywhere: no card
    /// outlives the question.
    fn withdraw_gone_hook_questions(&mut self) {
        for approval in self.hook_questions.gone() {
            self.hook_question_closed(&approval);
        }
    }

    fn hook_question_closed(&self, approval: &agent::Approval) {
        self.hub.try_send(Event::AgentApprovalClosed {
            session: approval.session.clone(),
            approval: approval.approval.clone(),
        });
    }

    fn answer(&mut self, approval: String, answer: Answer, reply: Option<Responder>) {
        if let Some(asked) = self.hook_questions.answer(&approval, &answer) {
            self.hook_question_closed(&asked);
            if let Some(reply) = reply {
                reply.send(Ok(to_json(&moonkale_protocol::Empty {})));
            }
            return;
        }
        let Some(id) = ApprovalId::parse(&approval) else {
            if let Some(reply) = reply {
                reply.send(Err(ResponseError::invalid_params(format!(
                    "{approval:?} is not an approval id (session/number)"
                ))));
            }
            return;
        };
        let command = SessionCommand::Answer {
            approval,
            answer,
            reply,
        };
        self.forward(id.session(), command, None);
    }

    /// Hands `command` to its session (loading it from disk if needed);
    /// errors go to the command's reply.
    fn forward(&mut self, session: &str, command: SessionCommand, editor: Option<EditorId>) {
        let command = match self.started_outside(session, command, editor) {
            Some(command) => command,
            None => return,
        };
        if let SessionCommand::Prompt { .. } = command
            && let Ok(id) = session_id(session)
        {
            self.limit_live_clis(id);
        }
        let failed = match self.live(session) {
            Ok(live) => match live.handle.tx.try_send(command) {
                Ok(()) => return,
                Err(TrySendError::Full(command)) => (
                    command,
                    ResponseError::new(code::REQUEST_FAILED, "the session is busy; try again"),
                ),
                Err(TrySendError::Closed(command)) => (
                    command,
                    ResponseError::new(code::REQUEST_FAILED, "the session has ended"),
                ),
            },
            Err(e) => (command, e),
        };
        let (command, error) = failed;
        if let Some(reply) = command.into_reply() {
            reply.send(Err(error));
        }
    }

    /// A command for a session Claude Code started outside the service
    /// ([`outside`]): its events are read from the CLI's transcript; a
    /// prompt continues it as a hosted session of the same id (the command
    /// is handed back to go to it), unless a running `claude` holds it.
    /// Any other command, or one for any other session, is handed back.
    fn started_outside(
        &mut self,
        raw: &str,
        command: SessionCommand,
        editor: Option<EditorId>,
    ) -> Option<SessionCommand> {
        let Ok(id) = session_id(raw) else {
            return Some(command);
        };
        let hosted = self.sessions.contains_key(&id)
            || self
                .transcript_path(raw)
                .is_ok_and(|p| std::fs::symlink_metadata(p).is_ok());
        let config_dir = outside::config_dir(&self.config.env);
        // A prompt for the `claude` of a service terminal, while it runs.
        if let (false, SessionCommand::Prompt { .. }, Some(dir), Some(editor)) =
            (hosted, &command, &config_dir, editor)
            && let Some(crate::hub::ports::ChangeSource::Terminal { terminal, .. }) =
                self.config.sources.sessions.source(raw)
            && outside::holder(dir, raw).is_some()
            && let SessionCommand::Prompt { text, reply, .. } = command
        {
            self.type_into_terminal(editor, raw, terminal, text, reply);
            return None;
        }
        let found = config_dir
            .as_ref()
            .filter(|_| !hosted)
            .and_then(|dir| outside::find(dir, &self.root, raw));
        let (Some(found), Some(config_dir)) = (found, config_dir) else {
            return Some(command);
        };
        match command {
            SessionCommand::Events {
                since,
                limit,
                reply,
            } => {
                reply.send(outside::events_page(&found, since, limit));
                None
            }
            SessionCommand::Prompt { .. } => match outside::holder(&config_dir, raw) {
                Some(pid) => {
                    let why = format!(
                        "session {raw} is open in a running Claude Code (pid {pid}): go on there, or \
                         close it first and send again (two CLIs must not write one conversation)"
                    );
                    if let Some(reply) = command.into_reply() {
                        reply.send(Err(ResponseError::new(code::REQUEST_FAILED, why)));
                    }
                    None
                }
                None => match self.continue_outside(id) {
                    Ok(()) => Some(command),
                    Err(e) => {
                        if let Some(reply) = command.into_reply() {
                            reply.send(Err(e));
                        }
                        None
                    }
                },
            },
            other => Some(other),
        }
    }

    /// A prompt for the `claude` running in service terminal `terminal`
    /// (Start Claude Code here): typed into it, as the person at that
    /// terminal would (pasted, then Enter), so the CLI's own conversation
    /// takes it; the sender sees it arrive there and in its transcript.
    fn type_into_terminal(
        &self,
        editor: EditorId,
        session: &str,
        terminal: u64,
        text: String,
        reply: Responder,
    ) {
        let hub = self.hub.clone();
        // Its conversation is the CLI's own: no event of ours holds the
        // prompt (seq 0).
        let sent = agent::SendResult {
            session: session.to_owned(),
            seq: 0,
            state: State::Running,
        };
        tokio::spawn(async move {
            let input = |params: Value| {
                let (typed, done) = Responder::new();
                let request = Event::Request {
                    // As the sender's own input.
                    editor,
                    method:
                        <moonkale_protocol::terminal::Input as moonkale_protocol::Request>::METHOD
                            .to_owned(),
                    params: crate::lsp::message::params(&params),
                    reply: typed,
                };
                (request, done)
            };
            for params in [
                serde_json::json!({"terminal": terminal, "paste": text}),
                serde_json::json!({"terminal": terminal, "keys": ["Enter"]}),
            ] {
                let (request, done) = input(params);
                if !hub.send(request).await {
                    return;
                }
                match done.await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return reply.send(Err(e)),
                    Err(_) => return,
                }
            }
            reply.send(Ok(to_json(&sent)));
        });
    }

    /// A hosted session of the same id as the CLI's own, whose first
    /// prompt resumes the CLI's conversation (`--resume`, with its history).
    fn continue_outside(&mut self, id: Uuid) -> Result<(), ResponseError> {
        self.make_room()?;
        let raw = id.to_string();
        let path = self.transcript_path(&raw)?;
        let failed = |e: String| ResponseError::new(code::REQUEST_FAILED, e);
        if let Some(dir) = path.parent() {
            crate::user_state::ensure_private_dir(dir).map_err(|e| failed(e.to_string()))?;
        }
        let transcript = Transcript::open(&path).map_err(|e| failed(e.to_string()))?;
        let log = EventLog::load(transcript, |_| {}).map_err(|e| failed(e.to_string()))?;
        let mut restored = Restored::new(&raw);
        restored.view.has_conversation = true;
        let handle = session::spawn(
            session::Start {
                id,
                workspace: self.root.clone(),
                log,
                restored: Some(restored),
                damaged: None,
                permission_mode: PermissionMode::Default,
                model: None,
                cwd: None,
                mcp_servers: Default::default(),
                spare: false,
                editors: self.editors.subscribe(),
            },
            self.hub.clone(),
            self.config.clone(),
        );
        self.keep_live(id, handle);
        tracing::info!(session = %id, "a session started outside the service is continued here");
        Ok(())
    }

    /// `agent/close` (and `agent/delete`): the session's task ends, which
    /// stops its CLI; its transcript stays (or is removed).
    fn close(&mut self, raw: &str, delete: bool) -> Result<Value, ResponseError> {
        let id = session_id(raw)?;
        let path = self.transcript_path(raw)?;
        let live = self.sessions.remove(&id);
        if live.is_none() && std::fs::symlink_metadata(&path).is_err() {
            return Err(ResponseError::invalid_params(format!(
                "no session {raw} in this workspace"
            )));
        }
        drop(live);
        if delete && let Err(e) = std::fs::remove_file(&path) {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                format!("{} cannot be removed: {e}", path.display()),
            ));
        }
        Ok(to_json(&moonkale_protocol::Empty {}))
    }

    /// Where session `id`'s transcript is kept.
    fn transcript_path(&self, id: &str) -> Result<PathBuf, ResponseError> {
        let chats = self.chats.as_ref().map_err(|why| {
            ResponseError::new(
                code::REQUEST_FAILED,
                format!("sessions cannot be kept: {why}"),
            )
        })?;
        transcript::path_for(chats, id).map_err(|e| ResponseError::invalid_params(e.to_string()))
    }

    /// The live session `raw`, loaded from its transcript if it has no task.
    fn live(&mut self, raw: &str) -> Result<&mut Live, ResponseError> {
        let id = session_id(raw)?;
        self.clock += 1;
        let clock = self.clock;
        if !self.sessions.contains_key(&id) {
            let path = self.transcript_path(raw)?;
            if std::fs::symlink_metadata(&path).is_err() {
                return Err(ResponseError::invalid_params(format!(
                    "no session {raw} in this workspace"
                )));
            }
            self.make_room()?;
            let failed = |e: transcript::TranscriptError| {
                ResponseError::new(code::REQUEST_FAILED, e.to_string())
            };
            let transcript = Transcript::open(&path).map_err(failed)?;
            let damaged = transcript.read_only().map(|c| {
                format!(
                    "line {} of the transcript is damaged ({}); a copy is at {}",
                    c.line,
                    c.reason,
                    c.quarantine.display()
                )
            });
            let mut restored = Restored::new(raw);
            let log = EventLog::load(transcript, |event| restored.feed(event)).map_err(failed)?;
            let handle = session::spawn(
                session::Start {
                    id,
                    workspace: self.root.clone(),
                    log,
                    restored: Some(restored),
                    damaged,
                    permission_mode: PermissionMode::Plan,
                    model: None,
                    cwd: None,
                    mcp_servers: Default::default(),
                    spare: false,
                    editors: self.editors.subscribe(),
                },
                self.hub.clone(),
                self.config.clone(),
            );
            self.sessions.insert(
                id,
                Live {
                    handle,
                    last_used: 0,
                },
            );
        }
        let live = self.sessions.get_mut(&id).expect("inserted above");
        live.last_used = clock;
        Ok(live)
    }

    /// A new session: the warm spare if its settings are these, else one
    /// whose CLI starts at its first prompt.
    fn start(
        &mut self,
        mode: PermissionMode,
        model: Option<String>,
        place: Place,
    ) -> Result<Uuid, ResponseError> {
        let cwd = self.session_cwd(place.cwd)?;
        self.make_room()?;
        // The spare runs in the workspace with no servers of a front end.
        let spare = if cwd.is_none() && place.mcp_servers.is_empty() {
            self.take_spare(mode, model.clone())
        } else {
            None
        };
        let warm = spare.is_some();
        let id = spare.as_ref().map_or_else(Uuid::new_v4, |(id, _)| *id);
        let path = self.transcript_path(&id.to_string())?;
        if let Some(dir) = path.parent() {
            crate::user_state::ensure_private_dir(dir)
                .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string()))?;
        }
        let failed = |e: transcript::TranscriptError| {
            ResponseError::new(code::REQUEST_FAILED, e.to_string())
        };
        let transcript = Transcript::open(&path).map_err(failed)?;
        let handle = match spare {
            Some((_, handle)) => {
                // A spare takes no other command, and its task lives until
                // its handle is dropped: the queue has room.
                let _ = handle.tx.try_send(SessionCommand::Adopt { transcript });
                handle
            }
            None => session::spawn(
                session::Start {
                    id,
                    workspace: self.root.clone(),
                    log: EventLog::load(transcript, |_| {}).map_err(failed)?,
                    restored: None,
                    damaged: None,
                    permission_mode: mode,
                    model,
                    cwd,
                    mcp_servers: place.mcp_servers,
                    spare: false,
                    editors: self.editors.subscribe(),
                },
                self.hub.clone(),
                self.config.clone(),
            ),
        };
        self.keep_live(id, handle);
        tracing::info!(session = %id, mode = mode.as_str(), warm, "agent session started");
        Ok(id)
    }

    /// A session task of `id` the host now owns, just used.
    fn keep_live(&mut self, id: Uuid, handle: SessionHandle) {
        self.clock += 1;
        let last_used = self.clock;
        self.sessions.insert(id, Live { handle, last_used });
    }

    /// The folder a new session's CLI runs in, `None` for the workspace
    /// itself: an absolute folder inside it, by its real path, and not
    /// under `.git` or `.moonkale`.
    fn session_cwd(&self, cwd: Option<PathBuf>) -> Result<Option<PathBuf>, ResponseError> {
        let Some(cwd) = cwd else { return Ok(None) };
        let outside = || {
            ResponseError::invalid_params(format!(
                "{} is not a folder inside the workspace {}: start the session in the workspace or \
                 one of its folders",
                crate::printable::one_line(&cwd.display().to_string()),
                self.root.display()
            ))
        };
        if !cwd.is_absolute() {
            return Err(outside());
        }
        let real = std::fs::canonicalize(&cwd).map_err(|_| outside())?;
        let inside = real
            .strip_prefix(&self.root)
            .map_err(|_| outside())?
            .components()
            .all(|c| !matches!(c.as_os_str().to_str(), Some(".git" | ".moonkale")));
        if !inside || !real.is_dir() {
            return Err(outside());
        }
        Ok((real != self.root).then_some(real))
    }

    /// Closes the least recently used idle session when the host is full.
    fn make_room(&mut self) -> Result<(), ResponseError> {
        if self.sessions.len() < MAX_LIVE_SESSIONS {
            return Ok(());
        }
        let idle = self
            .sessions
            .iter()
            .filter(|(_, l)| matches!(l.handle.summary.borrow().state, State::Idle | State::Failed))
            .min_by_key(|(_, l)| l.last_used)
            .map(|(id, _)| *id);
        match idle {
            Some(id) => {
                self.sessions.remove(&id); // its task shuts its process down
                Ok(())
            }
            None => Err(ResponseError::new(
                code::REQUEST_FAILED,
                format!("{MAX_LIVE_SESSIONS} sessions are busy; wait for one to finish"),
            )),
        }
    }

    /// Before `next`'s CLI may start for a prompt: while
    /// `max_live_clis` other sessions' CLIs run, the least recently used
    /// of those with nothing to do is closed (its task stops the CLI; the
    /// session stays listed from its transcript, and its next prompt
    /// resumes the conversation in a new CLI). A CLI in a turn or waiting
    /// for an answer is never stopped for this.
    fn limit_live_clis(&mut self, next: Uuid) {
        let max = self.config.max_live_clis;
        let running = |l: &Live| matches!(*l.handle.cli.borrow(), session::CliSeen::Running { .. });
        loop {
            let others = self
                .sessions
                .iter()
                .filter(|(id, l)| **id != next && running(l));
            if others.clone().count() < max {
                return;
            }
            let least_used = others
                .filter(|(_, l)| {
                    matches!(l.handle.summary.borrow().state, State::Idle | State::Failed)
                })
                .min_by_key(|(_, l)| l.last_used)
                .map(|(id, _)| *id);
            let Some(id) = least_used else { return };
            tracing::info!(session = %id, "claude stopped: {max} sessions' CLIs run in this workspace (MOONKALE_MAX_LIVE_SESSIONS)");
            self.sessions.remove(&id);
        }
    }

    /// Every session of the workspace: live ones from their tasks, the
    /// others from the start and size of their transcripts.
    fn list(&self) -> Value {
        let mut sessions: Vec<SessionSummary> = self
            .sessions
            .values()
            .map(|l| {
                let mut summary = l.handle.summary.borrow().clone();
                if let session::CliSeen::Running { pid } = *l.handle.cli.borrow() {
                    let pid = u32::try_from(pid).unwrap_or(0);
                    summary.cli = Some(agent::LiveCli {
                        pid,
                        rss_bytes: rss_bytes(pid),
                    });
                }
                summary
            })
            .collect();
        if let Ok(chats) = &self.chats
            && let Ok(entries) = std::fs::read_dir(chats)
        {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
                    continue;
                };
                let Ok(id) = Uuid::parse_str(stem) else {
                    continue;
                };
                if self.sessions.contains_key(&id) {
                    continue;
                }
                if let Some(summary) = summary_from_disk(&entry.path(), stem) {
                    sessions.push(summary);
                }
            }
        }
        if let Some(config_dir) = outside::config_dir(&self.config.env) {
            let hosted = |id: &str| sessions.iter().any(|s| s.session == id);
            let started_outside: Vec<SessionSummary> =
                outside::sessions(&config_dir, &self.root, hosted)
                    .iter()
                    .map(outside::summary)
                    .collect();
            sessions.extend(started_outside);
        }
        sessions.sort_by_key(|s| std::cmp::Reverse(s.updated));
        to_json(&agent::ListResult { sessions })
    }
}

/// What the user is told after a trust decision on `root`.
pub fn trust_message(store: &crate::user_state::TrustStore, root: &Path, trusted: bool) -> String {
    let shown = root.display();
    if trusted {
        format!(
            "Trusted {shown}: {}. Claude Code sessions of this workspace pick it up at their next turn. \
             Undo with `moonkale-service trust --revoke`.",
            crate::user_state::TRUST_ENABLES
        )
    } else if let Some(parent) = store.trusted_by(root) {
        format!(
            "{shown} is still trusted, because {} is: revoke that folder's trust to stop it.",
            parent.display()
        )
    } else {
        format!(
            "{shown} is not trusted: Claude Code sessions of this workspace load only your own \
             settings (not the repository's .claude settings, hooks or .mcp.json) from their next turn."
        )
    }
}

/// Bytes read from the start of a transcript to find its settings and
/// title.
const SUMMARY_HEAD: u64 = 256 * 1024;

/// What `list` shows of a session that has no task: what the events at the
/// start of its transcript say, and its file's time.
fn summary_from_disk(path: &Path, id: &str) -> Option<SessionSummary> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let file = std::fs::File::open(path).ok()?;
    let mut head = Vec::new();
    file.take(SUMMARY_HEAD).read_to_end(&mut head).ok()?;
    let mut restored = Restored::new(id);
    head.split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .for_each(|event| restored.feed(&event));
    let mut summary = restored.summary();
    if let Ok(modified) = meta.modified()
        && let Ok(since) = modified.duration_since(std::time::UNIX_EPOCH)
    {
        summary.updated = since.as_millis() as u64;
    }
    if meta.len() > SUMMARY_HEAD {
        summary.events = None;
    }
    Some(summary)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

mod outside;
mod spare;
pub use spare::rss_bytes;
#[cfg(test)]
mod tests;
