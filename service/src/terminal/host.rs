//! The terminals of one workspace: opens them (programs by argv, in a
//! folder inside the workspace, with a scrubbed environment), routes
//! `moonkale/terminal/*` requests to them, closes them with their client or
//! the service, and starts Claude Code wired to this service, also inside
//! a sandbox through a sandbox link ([`crate::ide::link`]), of which it
//! owns every one: a terminal's until the terminal's program exits, a
//! front end's (`moonkale/terminal/sandboxLink`) until it disconnects.
//!
//! **Invariant:** the host never waits for a terminal (commands are
//! `try_send`); a terminal's screen and PTY belong to its task.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use moonkale_protocol::dispatch::Dispatch;
use moonkale_protocol::terminal::{self as wire, OpenParams, StartClaudeParams};
use moonkale_protocol::to_json;
use moonkale_protocol::{Empty, Notification};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::pty::{Pty, Spawn, scrubbed_env};
use super::session::{self, TerminalCommand, TerminalHandle, TerminalInfo};
use crate::change_sources::KnownSessions;
use crate::core::path_map::PathMap;
use crate::hub::ports::{Request, TerminalHostCommand};
use crate::hub::{EditorId, Event, HubHandle, Responder, Topic};
use crate::ide::link::{Link, Links};
use crate::lsp::message::{Params, ResponseError, code};

/// Terminals one workspace may have open.
pub const MAX_TERMINALS: usize = 64;
/// Largest accepted size; larger (or zero) sizes are refused.
pub const MAX_ROWS: u16 = 1000;
pub const MAX_COLS: u16 = 4000;
/// Largest input of one request, in bytes.
pub const MAX_INPUT: usize = 1 << 20;

/// How long a shell at its prompt keeps the service up by default: an
/// hour.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(3600);

/// `MOONKALE_TERMINAL_IDLE_MS`, else [`DEFAULT_IDLE`].
pub fn idle_from_env() -> Duration {
    std::env::var("MOONKALE_TERMINAL_IDLE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(DEFAULT_IDLE, Duration::from_millis)
}

/// How terminals are started.
#[derive(Clone, Debug)]
pub struct TerminalConfig {
    /// The environment programs inherit, before scrubbing.
    pub env: Vec<(OsString, OsString)>,
    /// SIGHUP → SIGKILL.
    pub grace: Duration,
    /// How long a shell at its prompt, with no input or output, keeps the
    /// service up (`MOONKALE_TERMINAL_IDLE_MS`).
    pub idle: Duration,
    /// The `claude` for "Start Claude Code here" (else `PATH`).
    pub claude_bin: Option<PathBuf>,
    /// This service's IDE port, for `CLAUDE_CODE_SSE_PORT`.
    pub ide_port: Option<u16>,
    /// Where "Start Claude Code here" notes the session id it chose, so its
    /// transcript's edits are this terminal's.
    pub sessions: KnownSessions,
    /// Opens sandbox links (`None`: no IDE server, so none).
    pub links: Option<Links>,
    /// Where a sandbox sees `moonkale-service` unless told otherwise: this
    /// program's own path.
    pub link_bin: PathBuf,
    /// The user's default sandbox per workspace (read at each start).
    pub sandboxes: Option<crate::user_state::SandboxStore>,
    /// The secrets for the hooks of the `claude` it starts (their
    /// permission questions then reach every front end); none without an
    /// agent.
    pub hook_secrets: Option<crate::agent::hooks::HookSecrets>,
}

pub fn spawn(
    hub: HubHandle,
    commands: mpsc::Receiver<TerminalHostCommand>,
    config: TerminalConfig,
) -> tokio::task::JoinHandle<()> {
    let host = Host {
        workspace: Arc::new(hub.root().to_path_buf()),
        hub,
        config,
        terminals: BTreeMap::new(),
        next_id: 1,
        editor_links: HashMap::new(),
    };
    tokio::spawn(host.run(commands))
}

struct Host {
    workspace: Arc<PathBuf>,
    hub: HubHandle,
    config: TerminalConfig,
    terminals: BTreeMap<u64, Live>,
    next_id: u64,
    /// Front ends' sandbox links, closed when they disconnect.
    editor_links: HashMap<EditorId, Vec<Link>>,
}

struct Live {
    handle: TerminalHandle,
    /// Closed when this connection goes away (unless kept alive).
    owner: Option<EditorId>,
}

fn check_size(rows: u16, cols: u16) -> Result<(), ResponseError> {
    if rows == 0 || cols == 0 || rows > MAX_ROWS || cols > MAX_COLS {
        return Err(ResponseError::invalid_params(format!(
            "size {rows}x{cols} refused: 1..={MAX_ROWS} rows and 1..={MAX_COLS} columns"
        )));
    }
    Ok(())
}

impl Host {
    async fn run(mut self, mut commands: mpsc::Receiver<TerminalHostCommand>) {
        while let Some(command) = commands.recv().await {
            match command {
                TerminalHostCommand::Request(Request {
                    editor,
                    method,
                    params,
                    reply,
                }) => match self.request(editor, &method, &params) {
                    Ok(Routed::Now(value)) => reply.send(Ok(value)),
                    Ok(Routed::To(id, make)) => self.forward(id, make(reply)),
                    Err(e) => reply.send(Err(e)),
                },
                TerminalHostCommand::Detach { editor } => {
                    self.editor_links.remove(&editor);
                    let gone: Vec<u64> = self
                        .terminals
                        .iter()
                        .filter(|(_, l)| l.owner == Some(editor))
                        .map(|(id, _)| *id)
                        .collect();
                    for id in gone {
                        self.close(id);
                    }
                }
                TerminalHostCommand::Shutdown => break,
            }
        }
        let ids: Vec<u64> = self.terminals.keys().copied().collect();
        let mut tasks = Vec::new();
        for id in ids {
            if let Some(task) = self.close(id) {
                tasks.push(task);
            }
        }
        for task in tasks {
            let _ = task.await;
        }
    }

    /// Parses a request once, into its typed params, and answers it or
    /// says which terminal command answers it.
    fn request(
        &mut self,
        editor: EditorId,
        method: &str,
        params: &Params,
    ) -> Result<Routed, ResponseError> {
        let to = |id: u64, make: Box<dyn FnOnce(Responder) -> TerminalCommand + Send>| {
            Ok(Routed::To(id, make))
        };
        Dispatch::new(method, params)
            .on::<wire::Open>(|p| {
                let id = self.open(editor, p)?;
                Ok(Routed::Now(self.info(id)))
            })
            .on::<wire::StartClaude>(|p| {
                let (id, message) = self.start_claude(editor, p.unwrap_or_default())?;
                // The opener (subscribed by `open`) is told how it runs.
                self.hub.try_send(Event::Publish {
                    topic: Topic::Terminal(id),
                    method: "window/showMessage",
                    params: json!({"type": 3, "message": message}),
                });
                let info = self.terminals[&id].handle.info.borrow().clone();
                Ok(Routed::Now(to_json(&wire::StartClaudeResult {
                    info,
                    message,
                })))
            })
            .on::<wire::SandboxLink>(|p| {
                let paths = path_map(&p.unwrap_or_default().paths)?;
                let link = self.open_link(paths)?;
                let result = wire::SandboxLinkResult {
                    socket: link.socket_inside.clone(),
                    token: link.token().to_owned(),
                };
                self.editor_links.entry(editor).or_default().push(link);
                Ok(Routed::Now(to_json(&result)))
            })
            .on::<wire::List>(|_| {
                let terminals = self
                    .terminals
                    .values()
                    .map(|l| l.handle.info.borrow().clone())
                    .collect();
                Ok(Routed::Now(to_json(&wire::ListResult { terminals })))
            })
            .on::<wire::Close>(|p| {
                self.close(p.terminal).ok_or_else(|| {
                    ResponseError::invalid_params(format!("no terminal {}", p.terminal))
                })?;
                Ok(Routed::Now(to_json(&Empty {})))
            })
            .on::<wire::Input>(|p| {
                let size = p.text.as_ref().map_or(0, String::len)
                    + p.paste.as_ref().map_or(0, String::len)
                    + p.keys
                        .as_ref()
                        .map_or(0, |k| k.iter().map(String::len).sum());
                if size > MAX_INPUT {
                    return Err(ResponseError::invalid_params(format!(
                        "input over {MAX_INPUT} bytes"
                    )));
                }
                match (p.text, p.keys, p.paste) {
                    (Some(text), None, None) => to(
                        p.terminal,
                        Box::new(|reply| TerminalCommand::Text { text, reply }),
                    ),
                    (None, Some(keys), None) => to(
                        p.terminal,
                        Box::new(|reply| TerminalCommand::Keys { keys, reply }),
                    ),
                    (None, None, Some(text)) => to(
                        p.terminal,
                        Box::new(|reply| TerminalCommand::Paste { text, reply }),
                    ),
                    _ => Err(ResponseError::invalid_params(
                        "give exactly one of text, keys or paste",
                    )),
                }
            })
            .on::<wire::Resize>(|p| {
                check_size(p.rows, p.cols)?;
                let (rows, cols) = (p.rows, p.cols);
                to(
                    p.terminal,
                    Box::new(move |reply| TerminalCommand::Resize { rows, cols, reply }),
                )
            })
            .on::<wire::Screen>(|p| {
                to(
                    p.terminal,
                    Box::new(|reply| TerminalCommand::Screen { reply }),
                )
            })
            .on::<wire::Scrollback>(|p| {
                let (offset, count) = (p.offset, p.count);
                to(
                    p.terminal,
                    Box::new(move |reply| TerminalCommand::Scrollback {
                        offset,
                        count,
                        reply,
                    }),
                )
            })
            .on::<wire::Links>(|p| {
                to(
                    p.terminal,
                    Box::new(|reply| TerminalCommand::Links { reply }),
                )
            })
            .finish()
    }

    /// Hands `command` to its terminal; errors go to the command's reply.
    fn forward(&mut self, id: u64, command: TerminalCommand) {
        let (command, error) = match self.terminals.get(&id) {
            None => (
                command,
                ResponseError::invalid_params(format!("no terminal {id}")),
            ),
            Some(live) => match live.handle.tx.try_send(command) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(c) | mpsc::error::TrySendError::Closed(c)) => (
                    c,
                    ResponseError::new(code::REQUEST_FAILED, "the terminal is busy; try again"),
                ),
            },
        };
        command.into_reply().send(Err(error));
    }

    fn open(&mut self, editor: EditorId, spec: OpenParams) -> Result<u64, ResponseError> {
        self.open_with(editor, spec, Vec::new(), None)
    }

    /// [`Host::open`], with variables of ours that the program must see
    /// (a sandbox link's token), set after the scrubbing, and a title (else
    /// the program's name).
    fn open_with(
        &mut self,
        editor: EditorId,
        spec: OpenParams,
        ours: Vec<(OsString, OsString)>,
        title: Option<String>,
    ) -> Result<u64, ResponseError> {
        let OpenParams {
            argv,
            cwd,
            env: extra_env,
            rows,
            cols,
            keep_alive,
        } = spec;
        let argv = argv.unwrap_or_else(default_shell);
        let extra_env: Vec<(OsString, OsString)> = extra_env
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        check_size(rows, cols)?;
        if self.terminals.len() >= MAX_TERMINALS {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                format!("{MAX_TERMINALS} terminals are open; close one first"),
            ));
        }
        if argv.is_empty() || argv.iter().any(|a| a.contains('\0')) {
            return Err(ResponseError::invalid_params(
                "argv must name a program (and contain no NUL)",
            ));
        }
        let cwd = self.confined_cwd(cwd)?;
        let mut env = scrubbed_env(self.config.env.iter().cloned());
        env.retain(|(k, _)| !extra_env.iter().any(|(e, _)| e == k));
        env.extend(scrubbed_env(extra_env));
        env.extend(ours);
        env.retain(|(k, _)| k != "TERM");
        env.push(("TERM".into(), "xterm-256color".into()));
        let pty = Pty::spawn(&Spawn {
            argv: argv.clone(),
            cwd: cwd.clone(),
            env,
            rows,
            cols,
        })
        .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string()))?;
        let id = self.next_id;
        self.next_id += 1;
        let shell = is_shell(&argv[0]);
        let info = TerminalInfo {
            terminal: id,
            title: title.unwrap_or_else(|| program_name(&argv[0]).to_owned()),
            pid: pty.pid(),
            argv,
            cwd,
            rows,
            cols,
            exit_code: None,
            exited: false,
            shell,
            busy: !shell,
            active_at: crate::clock::now_ms(),
        };
        let handle = session::spawn(
            id,
            pty,
            info,
            self.workspace.clone(),
            self.hub.clone(),
            (self.config.grace, self.config.idle),
        );
        self.terminals.insert(
            id,
            Live {
                handle,
                owner: (!keep_alive).then_some(editor),
            },
        );
        // The opener sees its terminal's updates from the first one.
        self.hub.try_send(Event::Subscribe {
            editor,
            topic: Topic::Terminal(id),
        });
        tracing::info!(terminal = id, "terminal opened");
        Ok(id)
    }

    /// A working folder inside the workspace (default: the workspace).
    fn confined_cwd(&self, cwd: Option<PathBuf>) -> Result<PathBuf, ResponseError> {
        let Some(cwd) = cwd else {
            return Ok(self.workspace.to_path_buf());
        };
        let joined = self.workspace.join(cwd);
        let real = joined
            .canonicalize()
            .map_err(|e| ResponseError::invalid_params(format!("{}: {e}", joined.display())))?;
        if !real.starts_with(&*self.workspace) || !real.is_dir() {
            return Err(ResponseError::invalid_params(format!(
                "{} is not a folder inside the workspace",
                joined.display()
            )));
        }
        Ok(real)
    }

    /// Ends a terminal; its task's handle, to wait for it.
    fn close(&mut self, id: u64) -> Option<tokio::task::JoinHandle<()>> {
        let mut live = self.terminals.remove(&id)?;
        if let Some(close) = live.handle.close.take() {
            let _ = close.send(());
        }
        self.hub.try_send(Event::Publish {
            topic: Topic::Terminal(id),
            method: <wire::ClosedNotification as Notification>::METHOD,
            params: to_json(&wire::TerminalParams { terminal: id }),
        });
        self.hub.try_send(Event::TopicEnded {
            topic: Topic::Terminal(id),
        });
        Some(live.handle.task)
    }

    fn info(&self, id: u64) -> Value {
        self.terminals
            .get(&id)
            .map(|l| serde_json::to_value(&*l.handle.info.borrow()).expect("serializes"))
            .unwrap_or(Value::Null)
    }

    /// "Start Claude Code here": `claude` in a terminal of its own in the
    /// workspace, told this service's IDE port so it connects at once.
    fn start_claude(
        &mut self,
        editor: EditorId,
        p: StartClaudeParams,
    ) -> Result<(u64, String), ResponseError> {
        let mut args = p.args;
        let session = choose_session_id(&mut args);
        let size = (
            p.rows.unwrap_or(wire::default_rows()),
            p.cols.unwrap_or(wire::default_cols()),
        );
        // Without a sandbox named, the workspace's default one (the user's
        // `sandbox set`, never a file of the workspace's).
        let (sandbox, paths, link_bin) = if p.sandbox.is_empty() {
            match self.default_sandbox()? {
                Some(d) => (d.command, PathMap::new(d.paths), d.link_bin),
                None => (Vec::new(), PathMap::default(), None),
            }
        } else {
            (p.sandbox, path_map(&p.sandbox_paths)?, p.link_bin)
        };
        let (id, message) = if sandbox.is_empty() {
            self.claude_here(editor, args, size)?
        } else {
            self.claude_in_sandbox(editor, &sandbox, link_bin, paths, args, size)?
        };
        if let Some(session) = session {
            self.config.sessions.insert_terminal(session, id);
        }
        Ok((id, message))
    }

    /// `claude` itself in the terminal, told this service's IDE port.
    fn claude_here(
        &mut self,
        editor: EditorId,
        args: Vec<String>,
        (rows, cols): (u16, u16),
    ) -> Result<(u64, String), ResponseError> {
        let program = moonkale_claude::binary::find_in_env(
            self.config.claude_bin.as_deref(),
            &self.config.env,
            &self.workspace,
        )
        .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string()))?;
        let launch = claude_launch(self.config.ide_port, &self.config.env, args, true)
            .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e))?;
        let mut argv = vec![program.display().to_string()];
        let mut ours = Vec::new();
        if let Some(secrets) = &self.config.hook_secrets
            && takes_hooks(&program, &self.config.env)
        {
            let token = secrets
                .issue()
                .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string()))?;
            let (args, env) =
                crate::agent::hooks::wiring(&self.config.link_bin, &self.workspace, &token);
            argv.extend(args);
            ours = env;
        }
        argv.extend(launch.args);
        let spec = OpenParams {
            argv: Some(argv),
            cwd: None,
            env: launch.env,
            rows,
            cols,
            keep_alive: true,
        };
        let id = self.open_with(editor, spec, ours, Some(CLAUDE_TITLE.to_owned()))?;
        Ok((id, launch.message))
    }

    /// The sandbox command, with the relay spliced in and a sandbox link of
    /// the terminal's own, which lives until its program exits or the
    /// terminal closes.
    fn claude_in_sandbox(
        &mut self,
        editor: EditorId,
        sandbox: &[String],
        link_bin: Option<PathBuf>,
        paths: PathMap,
        mut args: Vec<String>,
        (rows, cols): (u16, u16),
    ) -> Result<(u64, String), ResponseError> {
        let invalid = |e: crate::Error| ResponseError::invalid_params(e.to_string());
        crate::sandbox_link::claude_word(sandbox).map_err(invalid)?;
        args.splice(0..0, mode_args(&self.config.env, &args));
        let link = self.open_link(paths)?;
        let bin = link_bin.as_ref().unwrap_or(&self.config.link_bin);
        let argv =
            crate::sandbox_link::in_sandbox_command(sandbox, bin, &link.socket_inside, &args)
                .map_err(invalid)?;
        let spec = OpenParams {
            argv: Some(argv),
            cwd: None,
            env: BTreeMap::new(),
            rows,
            cols,
            keep_alive: true,
        };
        let token = crate::sandbox_link::with_token(Vec::new(), link.token());
        let id = self.open_with(editor, spec, token, Some(CLAUDE_TITLE.to_owned()))?;
        let mut info = self.terminals[&id].handle.info.clone();
        tokio::spawn(async move {
            while !info.borrow_and_update().exited {
                if info.changed().await.is_err() {
                    break;
                }
            }
            drop(link);
        });
        let message = format!(
            "Claude Code starts in the sandbox, linked to this workspace through {}.",
            crate::printable::one_line(&self.workspace.display().to_string())
        );
        Ok((id, message))
    }

    /// The user's default sandbox for this workspace; an unreadable store
    /// is an error (starting unjailed is not the user's choice).
    fn default_sandbox(&self) -> Result<Option<crate::user_state::DefaultSandbox>, ResponseError> {
        match &self.config.sandboxes {
            Some(store) => store
                .get(&self.workspace)
                .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string())),
            None => Ok(None),
        }
    }

    fn open_link(&self, paths: PathMap) -> Result<Link, ResponseError> {
        let links = self.config.links.as_ref().ok_or_else(|| {
            ResponseError::new(
                code::REQUEST_FAILED,
                "this service does not serve Claude Code's IDE protocol (--no-claude-ide)",
            )
        })?;
        links
            .open(paths)
            .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string()))
    }
}

/// `HOST=INSIDE` folders of a request, parsed once here.
fn path_map(pairs: &[String]) -> Result<PathMap, ResponseError> {
    pairs
        .iter()
        .map(|p| p.parse().map_err(ResponseError::invalid_params))
        .collect::<Result<Vec<_>, _>>()
        .map(PathMap::new)
}

/// A request, parsed, before it meets its reply.
enum Routed {
    Now(Value),
    To(u64, Box<dyn FnOnce(Responder) -> TerminalCommand + Send>),
}

impl TerminalCommand {
    fn into_reply(self) -> Responder {
        match self {
            TerminalCommand::Text { reply, .. }
            | TerminalCommand::Keys { reply, .. }
            | TerminalCommand::Paste { reply, .. }
            | TerminalCommand::Resize { reply, .. }
            | TerminalCommand::Screen { reply }
            | TerminalCommand::Scrollback { reply, .. }
            | TerminalCommand::Links { reply } => reply,
        }
    }
}

/// The user's shell: `$SHELL`, else their login shell from the password
/// database (a service started by systemd or cron has no `$SHELL`), else
/// `/bin/sh`.
/// Whether `program` takes the service's hooks. Its version is asked once
/// per executable (cached); the terminal host waits for that answer on a
/// thread of its own, not the runtime's.
fn takes_hooks(program: &std::path::Path, env: &[(OsString, OsString)]) -> bool {
    let asked = moonkale_claude::binary::version(program, env);
    let version = match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(asked))
        }
        _ => None,
    };
    version.is_some_and(|v| v >= crate::agent::hooks::MIN_HOOK_CLI)
}

/// What a terminal running Claude Code is called until Claude Code names
/// it itself (not its whole command line).
const CLAUDE_TITLE: &str = "Claude Code";

/// A program's name as a person calls it: the last part of its path.
fn program_name(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// Whether `program` is a shell: a terminal left at its prompt is idle.
fn is_shell(program: &str) -> bool {
    matches!(
        program_name(program).trim_start_matches('-'),
        "sh" | "bash" | "dash" | "zsh" | "fish" | "ksh" | "mksh" | "tcsh" | "csh" | "nu" | "elvish"
    )
}

fn default_shell() -> Vec<String> {
    let shell = std::env::var("SHELL")
        .ok()
        .filter(|s| s.starts_with('/'))
        .or_else(login_shell)
        .unwrap_or_else(|| "/bin/sh".into());
    vec![shell]
}

/// The login shell of the user this process runs as, if the password
/// database names an absolute one.
fn login_shell() -> Option<String> {
    // SAFETY: `passwd` is plain data (integers and pointers): all zeros
    // is a valid value, overwritten by getpwuid_r.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: getpwuid_r writes only into `entry` and `buf` (of the length
    // given) and sets `found` to `&entry` or null; the strings it points
    // at live in `buf`, read before `buf` is dropped.
    let shell = unsafe {
        let rc = libc::getpwuid_r(
            libc::getuid(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() || entry.pw_shell.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(entry.pw_shell)
            .to_str()
            .ok()?
            .to_owned()
    };
    shell.starts_with('/').then_some(shell)
}

/// Gives the CLI a session id of ours (`--session-id`), so its transcript,
/// and the edits it records, are known to be this terminal's. Not when the
/// user chose the conversation themselves (`--resume`, `--continue`, their
/// own `--session-id`): those are still seen, as an IDE client's.
fn choose_session_id(args: &mut Vec<String>) -> Option<String> {
    let chose = args.iter().any(|a| {
        let flag = a.split('=').next().unwrap_or_default();
        matches!(
            flag,
            "--session-id" | "--resume" | "-r" | "--continue" | "-c" | "--fork-session"
        )
    });
    if chose {
        return None;
    }
    let session = uuid::Uuid::new_v4().to_string();
    args.extend(["--session-id".to_owned(), session.clone()]);
    Some(session)
}

/// How `claude` is started wired to this service.
pub struct ClaudeLaunch {
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Variables set on top of the user's environment.
    pub env: BTreeMap<String, String>,
    /// What to tell the user.
    pub message: String,
}

/// The arguments and variables that make every CLI generation connect to
/// the IDE server on `ide_port` at once (cli-matrix.md): the port, plus the
/// auto-connect switches older generations need. Unless the user chose a
/// permission mode (an argument, or `permissions.defaultMode` in their
/// settings), `--permission-mode default`: current CLIs otherwise start in
/// "auto", where edits never reach the editor for review.
pub fn claude_launch(
    ide_port: Option<u16>,
    env: &[(OsString, OsString)],
    mut args: Vec<String>,
    editor_attached: bool,
) -> Result<ClaudeLaunch, String> {
    let Some(port) = ide_port else {
        return Err(
            "this service does not serve Claude Code's IDE protocol (--no-claude-ide)".into(),
        );
    };
    let mode = mode_args(env, &args);
    let message = if mode.is_empty() {
        format!(
            "Claude Code starts connected to this workspace (IDE port {port}), in the permission mode you chose."
        )
    } else {
        args.splice(0..0, mode);
        let review = if editor_attached {
            "every edit comes to your editor for review"
        } else {
            "no editor is attached, so it asks about each edit here; `moonkale-service changes` lists what it changed"
        };
        format!(
            "Claude Code starts connected to this workspace (IDE port {port}) in permission mode \"default\": {review}. Pass --permission-mode or set permissions.defaultMode to choose another."
        )
    };
    Ok(ClaudeLaunch {
        args,
        env: crate::ide::cli_env(port).into_iter().collect(),
        message,
    })
}

/// `--permission-mode default`, unless the user chose a mode (in `args` or
/// as `permissions.defaultMode` in their settings): current CLIs otherwise
/// start in "auto", where edits never reach the editor for review.
pub fn mode_args(env: &[(OsString, OsString)], args: &[String]) -> Vec<String> {
    let chose_mode = args.iter().any(|a| {
        a == "--permission-mode"
            || a.starts_with("--permission-mode=")
            || a == "--dangerously-skip-permissions"
    }) || user_default_mode(env).is_some();
    if chose_mode {
        Vec::new()
    } else {
        vec!["--permission-mode".to_owned(), "default".to_owned()]
    }
}

/// `permissions.defaultMode` from the user's Claude Code settings.
fn user_default_mode(env: &[(OsString, OsString)]) -> Option<String> {
    let var = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| PathBuf::from(v))
    };
    let dir = var("CLAUDE_CONFIG_DIR").or_else(|| var("HOME").map(|h| h.join(".claude")))?;
    let text = std::fs::read_to_string(dir.join("settings.json")).ok()?;
    let settings: Value = serde_json::from_str(&text).ok()?;
    settings["permissions"]["defaultMode"]
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::ports::terminal_channel;

    #[test]
    fn the_login_shell_is_the_password_databases() {
        let uid = unsafe { libc::getuid() }.to_string();
        let out = std::process::Command::new("getent")
            .args(["passwd", &uid])
            .output()
            .unwrap();
        let line = String::from_utf8(out.stdout).unwrap();
        let want = line.trim_end().rsplit(':').next().unwrap().to_owned();
        assert!(want.starts_with('/'), "{line}");
        assert_eq!(login_shell(), Some(want));
    }

    #[test]
    fn claude_is_wired_to_the_ide_and_reviews_edits() {
        let home = tempfile::tempdir().unwrap();
        let env = vec![(OsString::from("HOME"), home.path().as_os_str().to_owned())];
        let launch =
            claude_launch(Some(4242), &env, vec!["--model".into(), "x".into()], true).unwrap();
        assert_eq!(
            launch.args,
            ["--permission-mode", "default", "--model", "x"]
        );
        assert_eq!(launch.env["CLAUDE_CODE_SSE_PORT"], "4242");
        assert!(launch.message.contains("review"));
        // The user's own choice wins: an argument, or their settings.
        let own =
            claude_launch(Some(1), &env, vec!["--permission-mode=plan".into()], true).unwrap();
        assert_eq!(own.args, ["--permission-mode=plan"]);
        std::fs::create_dir_all(home.path().join(".claude")).unwrap();
        std::fs::write(
            home.path().join(".claude/settings.json"),
            r#"{"permissions": {"defaultMode": "acceptEdits"}}"#,
        )
        .unwrap();
        assert!(
            claude_launch(Some(1), &env, vec![], true)
                .unwrap()
                .args
                .is_empty()
        );
        assert!(claude_launch(None, &env, vec![], true).is_err());
    }

    #[test]
    fn claude_gets_a_session_id_unless_the_user_chose_the_conversation() {
        let mut args = vec!["--model".to_owned(), "x".to_owned()];
        let session = choose_session_id(&mut args).unwrap();
        assert!(uuid::Uuid::parse_str(&session).is_ok());
        assert_eq!(args, ["--model", "x", "--session-id", &session]);
        for own in ["--resume", "-c", "--session-id=abc", "--continue"] {
            let mut args = vec![own.to_owned()];
            assert_eq!(choose_session_id(&mut args), None, "{own}");
            assert_eq!(args, [own]);
        }
    }

    #[test]
    fn hostile_51_sizes_outside_the_range_are_refused() {
        for (rows, cols) in [(0, 0), (0, 80), (24, 0), (65535, 65535), (1001, 80)] {
            assert!(check_size(rows, cols).is_err(), "{rows}x{cols}");
        }
        assert!(check_size(1, 1).is_ok());
        assert!(check_size(MAX_ROWS, MAX_COLS).is_ok());
    }

    fn test_config(links: Option<Links>) -> TerminalConfig {
        TerminalConfig {
            env: Vec::new(),
            grace: Duration::from_millis(100),
            idle: DEFAULT_IDLE,
            claude_bin: None,
            ide_port: None,
            sessions: Default::default(),
            links,
            link_bin: PathBuf::from("/usr/bin/moonkale-service"),
            sandboxes: None,
            hook_secrets: None,
        }
    }

    async fn ask(tx: &mpsc::Sender<TerminalHostCommand>, method: &str, params: Value) -> String {
        let (reply, answered) = Responder::new();
        let params = crate::lsp::message::params(&params);
        let request = Request::new(EditorId(1), method, params, reply);
        tx.send(TerminalHostCommand::Request(request))
            .await
            .unwrap();
        match answered.await.expect("a responder always answers") {
            Ok(v) => format!("Ok {v}"),
            Err(e) => format!("Err {} {}", e.code, e.message),
        }
    }

    #[tokio::test]
    async fn refusals_name_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let (hub, _events) = HubHandle::detached(dir.path().to_path_buf());
        let (tx, rx) = terminal_channel();
        let config = test_config(None);
        let host = spawn(hub, rx, config);
        let answers = [
            ask(&tx, "moonkale/terminal/list", json!({})).await,
            ask(&tx, "moonkale/terminal/close", json!({"terminal": 7})).await,
            ask(
                &tx,
                "moonkale/terminal/input",
                json!({"terminal": 7, "text": "ls\n"}),
            )
            .await,
            ask(
                &tx,
                "moonkale/terminal/open",
                json!({"rows": 0, "cols": 80}),
            )
            .await,
            ask(&tx, "moonkale/terminal/open", json!({"cwd": "/etc"})).await,
            ask(&tx, "moonkale/terminal/open", json!({"argv": []})).await,
            ask(&tx, "moonkale/terminal/reopen", json!({})).await,
            ask(&tx, "moonkale/terminal/sandboxLink", json!(null)).await,
        ];
        let text = answers
            .join("\n")
            .replace(&dir.path().display().to_string(), "W");
        expect_test::expect![[r#"
            Ok {"terminals":[]}
            Err -32602 no terminal 7
            Err -32602 no terminal 7
            Err -32602 size 0x80 refused: 1..=1000 rows and 1..=4000 columns
            Err -32602 /etc is not a folder inside the workspace
            Err -32602 argv must name a program (and contain no NUL)
            Err -32601 unknown method moonkale/terminal/reopen
            Err -32803 this service does not serve Claude Code's IDE protocol (--no-claude-ide)"#]]
        .assert_eq(&text);
        tx.send(TerminalHostCommand::Shutdown).await.unwrap();
        host.await.unwrap();
    }

    /// A front end's sandbox link lives while the front end does; a
    /// sandbox command without `claude` is refused before any link opens.
    #[tokio::test]
    async fn sandbox_links_go_with_their_owner() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (hub, _events) = HubHandle::detached(root.clone());
        let (tx, rx) = terminal_channel();
        let config = test_config(Some(Links::new(
            hub.clone(),
            crate::workspace_fs::Root::open(&root).unwrap(),
            crate::ide::IdeLimits::default(),
            std::sync::Arc::default(),
        )));
        let host = spawn(hub, rx, config);
        let sockets = || {
            std::fs::read_dir(&root)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().into_string().unwrap())
                .collect::<Vec<_>>()
        };
        let refused = ask(
            &tx,
            "moonkale/terminal/startClaude",
            json!({"sandbox": ["docker", "exec", "box", "sh"]}),
        )
        .await;
        assert!(
            refused.starts_with("Err -32602 the sandbox command must run `claude`"),
            "{refused}"
        );
        assert!(sockets().is_empty());
        let link = ask(&tx, "moonkale/terminal/sandboxLink", json!(null)).await;
        let link: Value = serde_json::from_str(link.strip_prefix("Ok ").unwrap()).unwrap();
        let name = sockets();
        assert_eq!(name.len(), 1);
        assert!(crate::ide::link::is_socket_name(&name[0]), "{name:?}");
        assert_eq!(link["socket"], json!(root.join(&name[0])));
        assert_eq!(link["token"].as_str().unwrap().len(), 64);
        tx.send(TerminalHostCommand::Detach {
            editor: EditorId(1),
        })
        .await
        .unwrap();
        // Commands are handled in order: once this is answered, the
        // detach was handled.
        ask(&tx, "moonkale/terminal/list", json!({})).await;
        assert!(sockets().is_empty());
        tx.send(TerminalHostCommand::Shutdown).await.unwrap();
        host.await.unwrap();
    }
}
