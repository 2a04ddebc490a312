//! The `moonkale-service` binary: argument parsing and process setup only.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use moonkale_service::agent::AgentConfig;
use moonkale_service::client::{self, LspClient};
use moonkale_service::ide::IdeConfig;
use moonkale_service::runtime::{self, RuntimeDir};
use moonkale_service::terminal::host::{claude_launch, mode_args};
use moonkale_service::{
    Error, acp, agent_client, doctor, hub, lifetime, printable, remote, server, stdout,
};

/// One long-running process per workspace: editors attach to it as a
/// language server; it holds their documents, selections and diagnostics.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve workspaces in the foreground until SIGINT/SIGTERM.
    ///
    /// Each workspace gets a private unix socket (0600, in a 0700 runtime
    /// directory: $XDG_RUNTIME_DIR/moonkale, else /tmp/moonkale-<uid>).
    Serve {
        /// A workspace folder; repeat for several [default: the current
        /// directory].
        #[arg(long = "workspace", value_name = "DIR")]
        workspaces: Vec<PathBuf>,
        /// Also accept editors on this loopback TCP address (e.g.
        /// 127.0.0.1:7555). Such editors must send the token from the
        /// workspace's token file in initializationOptions.moonkaleToken.
        #[arg(long, value_name = "ADDR")]
        lsp_tcp: Option<SocketAddr>,
        #[command(flatten)]
        remote: RemoteArgs,
        /// Do not serve Claude Code's IDE protocol (no lock file in
        /// ~/.claude/ide, no WebSocket port).
        #[arg(long)]
        no_claude_ide: bool,
        /// Exit once nothing has gone on for MOONKALE_AUTOSTART_IDLE_MS
        /// (default 10 minutes): no client connected, no turn running, no
        /// terminal program running. Services started on your behalf (by
        /// the shim, acp, claude, agent) run with this.
        #[arg(long)]
        exit_when_idle: bool,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Serve one editor that started us on stdin/stdout.
    Lsp {
        /// Speak LSP on stdin/stdout (the only transport of this command).
        #[arg(long, required = true)]
        stdio: bool,
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Do not serve Claude Code's IDE protocol.
        #[arg(long)]
        no_claude_ide: bool,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Talk to the agent sessions of the running service for a workspace.
    Agent {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR", global = true)]
        workspace: Option<PathBuf>,
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Review the edits Claude Code made without asking (change sets) in
    /// the running service for a workspace: list, show, undo or keep them.
    Changes {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR", global = true)]
        workspace: Option<PathBuf>,
        #[command(subcommand)]
        command: ChangesVerb,
    },
    /// Be an ACP agent (Agent Client Protocol v1 on stdin/stdout) for an
    /// editor's agent panel (Zed, JetBrains, CodeCompanion, agent-shell,
    /// Toad): its sessions are the workspace service's hosted Claude Code
    /// sessions (the service is started if none runs).
    Acp {
        /// The workspace folder [default: the folder of the client's first
        /// session].
        #[arg(long, value_name = "DIR", conflicts_with = "connect")]
        workspace: Option<PathBuf>,
        #[command(flatten)]
        remote: ConnectArgs,
    },
    /// Run Claude Code in this terminal, connected to the workspace's
    /// service (started if none runs): its selection, diagnostics and diff
    /// review come from your editors.
    ///
    /// With --sandbox, Claude Code runs inside a sandbox (a devcontainer,
    /// bubblewrap, `docker exec`) and keeps its IDE link there: the words
    /// after `--` are the command that runs `claude` in the sandbox, e.g.
    /// `moonkale-service claude --sandbox -- docker exec -it -e
    /// MOONKALE_LINK_TOKEN box claude --model opus`. The sandbox must see
    /// the workspace (at the same path, or where --sandbox-path says), and
    /// this program.
    Claude {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Run Claude Code inside a sandbox, linked to the workspace
        /// through a unix socket in it (see above).
        #[arg(long)]
        sandbox: bool,
        /// Run Claude Code here even when the workspace has a default
        /// sandbox (`moonkale-service sandbox set`).
        #[arg(long, conflicts_with = "sandbox")]
        no_sandbox: bool,
        /// With --sandbox: print the command to run inside a sandbox this
        /// program cannot start, and keep the link open until interrupted
        /// (the arguments are then claude's).
        #[arg(long, requires = "sandbox")]
        print: bool,
        /// With --sandbox: where the sandbox sees moonkale-service
        /// [default: this program's path].
        #[arg(long, value_name = "PATH", requires = "sandbox")]
        link_bin: Option<PathBuf>,
        /// With --sandbox: a folder of this machine and where the sandbox
        /// mounts it (a devcontainer's `$PWD=/workspaces/<name>`); every
        /// path across the link is mapped, and one under no such folder is
        /// refused. Repeat for more folders; the workspace must be under
        /// one. Default: the same paths inside.
        #[arg(long = "sandbox-path", value_name = "HOST=INSIDE", requires = "sandbox",
              value_parser = parse_path_pair)]
        sandbox_paths: Vec<moonkale_service::core::path_map::PathPair>,
        /// Arguments for `claude` (after `--` if they start with `-`); with
        /// --sandbox, the sandbox command and then claude's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Inside a sandbox: link Claude Code to the workspace's service through
    /// SOCKET (what `claude --sandbox` runs there): listens on the sandbox's
    /// loopback, writes the sandbox's lock file, runs the command after
    /// `--`, relays its IDE connection. The token comes from
    /// MOONKALE_LINK_TOKEN.
    SandboxLink {
        /// The link's socket in the workspace.
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// The command (claude and its arguments).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// A Claude Code hook of a `claude` the service started (run by that
    /// CLI, not by people): `permission` asks the service the CLI's
    /// permission question and prints the decision; `done` says a tool ran
    /// or was denied. Without the service's variables it does nothing.
    #[command(hide = true)]
    Hook {
        /// Which hook: the permission question, or a tool done.
        #[arg(value_enum)]
        kind: HookKind,
        /// The user's own hook (`hooks install`): asks the service that
        /// serves the CLI's folder, with the user's secret.
        #[arg(long)]
        user: bool,
    },
    /// Let the `claude` you start by hand (`claude --ide`) ask its
    /// permission questions in the page and the editors too: `install` adds
    /// the service's hooks to your own Claude Code settings
    /// (~/.claude/settings.json, a copy of it kept), `remove` takes them out.
    /// Where no service serves the folder, the hooks do nothing.
    Hooks {
        /// Add the hooks, or take them out.
        #[arg(value_enum)]
        action: HooksAction,
    },
    /// The agent commands against a remote service (`serve --listen`):
    /// `connect ws://host:7000/ list`, `… follow SESSION`, `… answer ID allow`.
    /// The token comes from MOONKALE_TOKEN or --token-file.
    Connect {
        /// `ws://host:port/` or `wss://host:port/`.
        url: String,
        /// The file holding the remote token, when MOONKALE_TOKEN is not
        /// set.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// For wss://: the PEM certificate (or its CA) to trust.
        #[arg(long, value_name = "FILE")]
        ca: Option<PathBuf>,
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Trust a workspace (or stop trusting it): Claude Code sessions the
    /// service runs for a trusted workspace load the repository's own
    /// Claude Code settings (.claude/settings*.json: hooks, permission
    /// rules) and .mcp.json servers. Untrusted, they load only yours. The
    /// decision is kept in your configuration directory, never in the
    /// workspace.
    Trust {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Stop trusting it.
        #[arg(long, conflicts_with = "status")]
        revoke: bool,
        /// Only say whether it is trusted.
        #[arg(long)]
        status: bool,
    },
    /// The sandbox a workspace's Claude Code runs in by default: "Start
    /// Claude Code here" in the editors and `moonkale-service claude` use
    /// it (unless told --no-sandbox). Kept in your configuration
    /// directory, never read from the workspace.
    Sandbox {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR", global = true)]
        workspace: Option<PathBuf>,
        #[command(subcommand)]
        command: SandboxVerb,
    },
    /// Check what a first run needs (the claude CLI and a login, the lock
    /// and runtime directories, moonkale-shim, the editor recipes, a running
    /// service): one line each, `ok` or what to do. Exits 1 when a required
    /// check fails.
    Doctor {
        /// The workspace folder [default: the current directory; inside a
        /// served workspace, that workspace, as `status` finds it].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Print JSON instead of text: {"ok", "checks": [{"name",
        /// "status": "ok"|"warn"|"fail", "message"}]}.
        #[arg(long)]
        json: bool,
    },
    /// The Moonkale shell in a browser or on a phone: sessions, questions,
    /// changes and terminals of a workspace's service (started if none
    /// runs), or of a remote one with --connect. Prints the URL to open
    /// (it holds a login secret) on stdout; runs until Ctrl-C.
    Web {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR", conflicts_with = "connect")]
        workspace: Option<PathBuf>,
        #[command(flatten)]
        remote: ConnectArgs,
        /// Where the page is served [default: 127.0.0.1 on a free port]. A
        /// non-loopback address needs --tls-cert and --tls-key, or
        /// --insecure.
        #[arg(long, value_name = "ADDR", value_parser = listen_address)]
        listen: Option<SocketAddr>,
        /// TLS certificate chain (PEM) for the page.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// TLS private key (PEM) for the page.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Serve a non-loopback address without TLS (something else, such
        /// as a VPN, must protect the connection).
        #[arg(long)]
        insecure: bool,
        /// Run this command (with `sh -c`) when a question of Claude's has
        /// waited --notify-after seconds unanswered; its one-line summary
        /// is in $MOONKALE_QUESTION. E.g. `curl -s -d "$MOONKALE_QUESTION"
        /// ntfy.sh/my-topic`.
        #[arg(long, value_name = "CMD")]
        notify_command: Option<String>,
        /// Seconds a question waits before --notify-command runs.
        #[arg(long, value_name = "SECONDS", default_value_t = moonkale_service::web::notify::NOTIFY_AFTER.as_secs(), requires = "notify_command",
              value_parser = clap::value_parser!(u64).range(0..=86_400))]
        notify_after: u64,
    },
    /// Stop the service of a workspace cleanly: its clients are told, its
    /// sessions' and terminals' programs end, its lock file, socket and
    /// Claude Code lock file are removed.
    Stop {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Print the completion script for SHELL on stdout, e.g.
    /// `moonkale-service completions bash >
    /// ~/.local/share/bash-completion/completions/moonkale-service`.
    Completions {
        /// The shell to complete in.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of this program, or of one of its
    /// commands (`man agent send`), on stdout: `moonkale-service man | man
    /// -l -`.
    Man {
        /// The command whose page to print [default: the program's].
        command: Vec<String>,
    },
    /// List or close the workspace's terminals (the service's own, as the
    /// page and the editors open them).
    Terminal {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR", global = true)]
        workspace: Option<PathBuf>,
        #[command(subcommand)]
        command: TerminalCommand,
    },
    /// Show what the running service for a workspace holds.
    Status {
        /// The workspace folder [default: the current directory].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print the status again whenever an editor or a Claude Code
        /// client comes or goes, or what waits for you changes (with
        /// `--json`, one JSON document a line); until Ctrl-C or the
        /// service stops.
        #[arg(long)]
        watch: bool,
    },
}

async fn run_agent_command(
    target: &agent_client::Target,
    command: AgentCommand,
) -> anyhow::Result<i32> {
    let resolve = async |given: &str| agent_client::resolve_session(target, given).await;
    match command {
        AgentCommand::Send {
            session,
            permission_mode,
            prompt,
        } => {
            let prompt = if prompt == "-" {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .context("reading the prompt from standard input")?;
                text
            } else {
                prompt
            };
            if prompt.trim().is_empty() {
                anyhow::bail!("the prompt is empty: say what Claude should do");
            }
            let session = match session {
                Some(given) => Some(resolve(&given).await?),
                None => None,
            };
            Ok(agent_client::send(target, session, permission_mode, prompt).await?)
        }
        AgentCommand::Close { session } => {
            let session = resolve(&session).await?;
            agent_client::close(target, &session).await?;
            eprintln!("closed session {session}: its claude ended, its transcript is kept");
            Ok(0)
        }
        AgentCommand::Delete { session, failed } => {
            if failed {
                let n = agent_client::delete_failed(target).await?;
                eprintln!("deleted {}", printable::counted(n, "failed session"));
            } else {
                let session = resolve(&session.unwrap_or_default()).await?;
                agent_client::delete(target, &session).await?;
                eprintln!("deleted session {session}");
            }
            Ok(0)
        }
        AgentCommand::List { json } => {
            moonkale_service::out!("{}", agent_client::list(target, json).await?);
            Ok(0)
        }
        AgentCommand::Show { session } => {
            let session = resolve(&session).await?;
            moonkale_service::out!("{}", agent_client::show(target, &session).await?);
            Ok(0)
        }
        AgentCommand::Follow {
            session,
            until_idle,
        } => {
            let session = resolve(&session).await?;
            Ok(agent_client::follow(target, &session, until_idle).await?)
        }
        AgentCommand::Answer {
            approval,
            verdict,
            texts,
            message,
        } => {
            // `SESSION/N`, the session given by any unique prefix, as
            // everywhere else.
            let approval = match approval.split_once('/') {
                Some((session, number)) => format!("{}/{number}", resolve(session).await?),
                None => approval,
            };
            agent_client::answer(target, &approval, &verdict, &texts, message).await?;
            Ok(0)
        }
    }
}

#[derive(Subcommand)]
enum ChangesVerb {
    /// The change sets waiting for review, newest last.
    List {
        /// Every set this service holds, kept and undone ones too.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A set's files and hunks.
    Show {
        /// The change set's number (as `list` prints it), or a unique
        /// prefix of one.
        set: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Undo a set, one file of it, or one hunk of that file (the index
    /// `show` prints). Lines changed since Claude wrote them are left as
    /// they are.
    Undo {
        /// The change set's number, or a unique prefix of one.
        set: String,
        /// Only this file of the set (a path in the workspace).
        file: Option<PathBuf>,
        /// Only this hunk of that file (its index, as `show` prints it).
        hunk: Option<usize>,
        /// Why, for Claude: a hosted session hears it with its next prompt.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Keep (dismiss) a set or one file of it.
    Keep {
        /// The change set's number, or a unique prefix of one.
        set: String,
        /// Only this file of the set (a path in the workspace).
        file: Option<PathBuf>,
    },
}

async fn run_changes_command(
    info: &runtime::ServiceInfo,
    command: ChangesVerb,
) -> anyhow::Result<i32> {
    use moonkale_service::changes_client as changes;
    let (socket, root) = (&info.socket, &info.workspace);
    match command {
        ChangesVerb::List { all, json } => {
            moonkale_service::out!("{}", changes::list(socket, root, all, json).await?)
        }
        ChangesVerb::Show { set, json } => {
            let set = changes::resolve_set(socket, &set).await?;
            moonkale_service::out!("{}", changes::show(socket, root, set, json).await?)
        }
        ChangesVerb::Undo {
            set,
            file,
            hunk,
            reason,
        } => {
            let set = changes::resolve_set(socket, &set).await?;
            let done = changes::undo(socket, set, file.as_deref(), hunk, reason).await?;
            moonkale_service::out!("{done}");
        }
        ChangesVerb::Keep { set, file } => {
            let set = changes::resolve_set(socket, &set).await?;
            changes::keep(socket, set, file.as_deref()).await?
        }
    }
    Ok(0)
}

#[derive(Subcommand)]
enum SandboxVerb {
    /// Make the command after `--` (it runs `claude` in the sandbox) the
    /// workspace's default, e.g. `sandbox set --sandbox-path
    /// "$PWD=/workspaces/proj" -- docker exec -it -e MOONKALE_LINK_TOKEN
    /// -w /workspaces/proj box claude`.
    Set {
        /// A folder of this machine and where the sandbox mounts it
        /// (repeat for more; default: the same paths inside).
        #[arg(long = "sandbox-path", value_name = "HOST=INSIDE", value_parser = parse_path_pair)]
        sandbox_paths: Vec<moonkale_service::core::path_map::PathPair>,
        /// Where the sandbox sees moonkale-service [default: this
        /// program's path].
        #[arg(long, value_name = "PATH")]
        link_bin: Option<PathBuf>,
        /// The command that runs `claude` in the sandbox.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Print the workspace's default sandbox, or say there is none.
    Show,
    /// Run the workspace's Claude Code unjailed again.
    Clear,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum HooksAction {
    /// Add the hooks to your Claude Code settings (a copy kept).
    Install,
    /// Take them out again.
    Remove,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum HookKind {
    /// A permission question (`PermissionRequest`).
    Permission,
    /// A tool ran or was denied (`PostToolUse`, `PermissionDenied`).
    Done,
}

#[derive(Subcommand)]
enum TerminalCommand {
    /// Each terminal: its id, title, program, and whether it is busy or
    /// how long it has been quiet.
    List,
    /// Close a terminal (its program gets SIGHUP, then SIGKILL).
    Close {
        /// The terminal's id (`terminal list`, `status`).
        id: u64,
    },
}

#[derive(Subcommand)]
enum AgentCommand {
    /// Send a prompt (to a new session unless --session) and print the
    /// reply as it streams. Exits 1 if the turn failed.
    Send {
        /// Continue this session.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// For a new session: plan (read-only, the default), default,
        /// acceptEdits or bypassPermissions.
        #[arg(long, value_name = "MODE", value_parser = permission_mode)]
        permission_mode: Option<String>,
        /// What to ask Claude; `-` reads it from standard input.
        prompt: String,
    },
    /// End a session's `claude` (it is started again, resuming the
    /// conversation, by the next prompt); its transcript stays.
    Close {
        /// A session id, or a unique prefix of one.
        session: String,
    },
    /// Remove a session from your state (its transcript), ending its
    /// `claude`; or, with --failed, every session whose last turn failed.
    Delete {
        /// A session id, or a unique prefix of one.
        #[arg(required_unless_present = "failed", conflicts_with = "failed")]
        session: Option<String>,
        /// Every failed session.
        #[arg(long)]
        failed: bool,
    },
    /// List the workspace's sessions, newest first.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's transcript.
    Show {
        /// A session id, or a unique prefix of one.
        session: String,
    },
    /// Print a session's transcript, then follow it live (reconnecting,
    /// without missing or repeating an event, if the connection drops).
    Follow {
        /// A session id, or a unique prefix of one.
        session: String,
        /// Exit once the session is idle (0) or failed (1).
        #[arg(long)]
        until_idle: bool,
    },
    /// Answer a permission question: `allow`, `always` (this tool for the
    /// rest of the session) or `deny`; a plan: `allow` (edits asked),
    /// `accept-edits` or `deny` (keep planning); a question of Claude's:
    /// `answer TEXT…`, one text per question, in order (a label, labels
    /// joined with ", ", or your own words).
    Answer {
        /// The question's id (as the editors, `show` and `follow` print it).
        approval: String,
        /// The answer: allow, always, deny, accept-edits, or answer with
        /// the texts after it.
        #[arg(value_parser = ["allow", "always", "deny", "accept-edits", "answer"])]
        verdict: String,
        /// With `answer`: the answers.
        texts: Vec<String>,
        /// With `deny`: why, for Claude.
        #[arg(long)]
        message: Option<String>,
    },
}

/// How the service runs Claude Code as its agent.
/// A remote service instead of the workspace's own (`acp`, `web`).
#[derive(clap::Args)]
struct ConnectArgs {
    /// A remote service (`serve --listen`) instead: `ws://host:port/` or
    /// `wss://host:port/`; the token comes from MOONKALE_TOKEN or
    /// --token-file.
    #[arg(long, value_name = "URL")]
    connect: Option<String>,
    /// The file holding the remote token, when MOONKALE_TOKEN is not set.
    #[arg(long, value_name = "FILE", requires = "connect")]
    token_file: Option<PathBuf>,
    /// For wss://: the PEM certificate (or its CA) to trust.
    #[arg(long, value_name = "FILE", requires = "connect")]
    ca: Option<PathBuf>,
}

impl ConnectArgs {
    /// The remote service asked for, with its token; `None` without
    /// --connect.
    fn target(self) -> anyhow::Result<Option<remote::client::RemoteTarget>> {
        let Some(url) = self.connect else {
            return Ok(None);
        };
        let token = remote::token_from(
            std::env::var(remote::TOKEN_ENV).ok(),
            self.token_file.as_deref(),
        )?;
        Ok(Some(remote::client::RemoteTarget {
            url,
            token,
            ca: self.ca,
        }))
    }
}

/// The remote front door (`serve --listen`).
#[derive(clap::Args)]
struct RemoteArgs {
    /// Accept remote front ends (the Moonkale shell, `moonkale-service
    /// connect`) on this address: WebSocket, one JSON-RPC message per text
    /// frame, `Authorization: Bearer <token>`. Needs MOONKALE_ROOT (every
    /// file a remote client names must be inside it) and a token
    /// (MOONKALE_TOKEN or --token-file).
    #[arg(long, value_name = "ADDR", value_parser = listen_address)]
    listen: Option<SocketAddr>,
    /// The file holding the remote token (mode 0600), when MOONKALE_TOKEN is
    /// not set.
    #[arg(long, value_name = "FILE", requires = "listen")]
    token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM) for --listen.
    #[arg(long, value_name = "FILE", requires_all = ["listen", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for --listen.
    #[arg(long, value_name = "FILE", requires_all = ["listen", "tls_cert"])]
    tls_key: Option<PathBuf>,
    /// Listen on a non-loopback address without TLS (something else, such
    /// as a VPN or an SSH tunnel, must protect the connection).
    #[arg(long, requires = "listen")]
    insecure: bool,
}

impl RemoteArgs {
    fn config(&self, workspaces: &[PathBuf]) -> anyhow::Result<Option<remote::RemoteConfig>> {
        let Some(listen) = self.listen else {
            return Ok(None);
        };
        let root = remote::root_from(std::env::var_os(remote::ROOT_ENV))?;
        remote::check_workspaces(&root, workspaces)?;
        remote::check_listen(listen, self.tls_cert.is_some(), self.insecure)?;
        let token = remote::token_from(
            std::env::var(remote::TOKEN_ENV).ok(),
            self.token_file.as_deref(),
        )?;
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(remote::tls_from(cert, key)?),
            _ => None,
        };
        Ok(Some(remote::RemoteConfig {
            listen,
            token: std::sync::Arc::new(token),
            tls,
            root,
            limits: remote::RemoteLimits::from_env(),
        }))
    }
}

#[derive(clap::Args)]
struct AgentArgs {
    /// The `claude` executable for agent sessions [default:
    /// $MOONKALE_CLAUDE_BIN, else the first `claude` on PATH outside the
    /// workspace].
    #[arg(long, value_name = "PATH")]
    claude: Option<PathBuf>,
    /// Do not host agent sessions (`moonkale/agent/*` is refused).
    #[arg(long)]
    no_agent: bool,
    /// Keep no warm spare `claude` started ahead for the next new session
    /// (also `MOONKALE_WARM_SPARE=0`).
    #[arg(long)]
    no_warm_spare: bool,
}

impl AgentArgs {
    fn config(self) -> Option<AgentConfig> {
        (!self.no_agent).then(|| {
            let mut config = AgentConfig::from_env(self.claude);
            if self.no_warm_spare {
                config.spare.enabled = false;
            }
            config
        })
    }
}

fn main() {
    // Everything we create (sockets, token and info files) is private.
    // SAFETY: umask has no preconditions; set before any thread exists.
    unsafe { libc::umask(0o077) };
    let cli = Cli::try_parse().unwrap_or_else(|e| exit_on_bad_arguments(&e));
    // Only a service's own stderr is a log (a service started for a
    // command writes it to its log file). Every other command's stderr is a
    // person's terminal, Claude Code's (a sandbox link) or an ACP panel's:
    // warnings only there unless MOONKALE_LOG asks for more.
    let quiet = !matches!(cli.command, Command::Serve { .. } | Command::Lsp { .. });
    let default_level = if quiet { "warn" } else { "info" };
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr) // stdout may carry LSP
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MOONKALE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    let code = match tokio::runtime::Runtime::new() {
        Ok(rt) => {
            let code = rt.block_on(run(cli));
            // Do not wait for blocked stdin readers; the LSP exit code is final.
            rt.shutdown_background();
            code
        }
        Err(e) => Err(anyhow::Error::new(e).context("starting the async runtime")),
    };
    std::process::exit(code.unwrap_or_else(|e| fail(&one_sentence(&e))));
}

/// The error and its causes joined with ": ", each said once. Our errors
/// (and many others) repeat their source's text in their own message
/// (`workspace /x: No such file or directory (os error 2)`) and also return
/// it as their `source()`, so anyhow's `{:#}` would print the OS error
/// twice: a cause whose text is already in the sentence adds nothing.
fn one_sentence(error: &anyhow::Error) -> String {
    let mut sentence = String::new();
    for cause in error.chain() {
        let text = without_os_error_number(&cause.to_string());
        if sentence.contains(&text) {
            continue;
        }
        if !sentence.is_empty() {
            sentence += ": ";
        }
        sentence += &text;
    }
    sentence
}

/// An OS error's text without the ` (os error 2)` Rust adds to it: the
/// number is for programs, the words are the person's.
fn without_os_error_number(text: &str) -> String {
    let mut out = text.to_owned();
    while let Some(at) = out.find(" (os error ") {
        match out[at..].find(')') {
            Some(end) => out.replace_range(at..at + end + 1, ""),
            None => break,
        }
    }
    out
}

/// `hooks install|remove`.
fn hooks_command(action: HooksAction) -> anyhow::Result<i32> {
    use moonkale_service::agent::user_hook;
    let env: Vec<_> = std::env::vars_os().collect();
    let path = user_hook::settings_path(&env)
        .ok_or_else(|| anyhow::anyhow!("no HOME: Claude Code's settings cannot be found"))?;
    let said = match action {
        HooksAction::Install => {
            let me = std::env::current_exe().context("finding this program")?;
            user_hook::install(&path, &me)?
        }
        HooksAction::Remove => user_hook::remove(&path)?,
    };
    eprintln!("moonkale-service: {said}");
    Ok(0)
}

/// `terminal list|close ID`.
async fn terminal_command(
    workspace: Option<PathBuf>,
    command: TerminalCommand,
) -> anyhow::Result<i32> {
    let info = running_service(workspace)?;
    let mut client = observe(&info, "moonkale-terminal").await?;
    match command {
        TerminalCommand::List => {
            let list: moonkale_protocol::terminal::ListResult = serde_json::from_value(
                client
                    .request("moonkale/terminal/list", serde_json::Value::Null)
                    .await?,
            )?;
            if list.terminals.is_empty() {
                moonkale_service::outln!("no terminals in this workspace");
            }
            for terminal in &list.terminals {
                moonkale_service::outln!("{}", hub::status::terminal_line(terminal));
            }
        }
        TerminalCommand::Close { id } => {
            client
                .request(
                    "moonkale/terminal/close",
                    serde_json::json!({"terminal": id}),
                )
                .await?;
            eprintln!("moonkale-service: closed terminal {id}");
        }
    }
    Ok(0)
}

/// The hooks for `claude` (a CLI that takes them) with a secret of the
/// service's; none if either is missing (the CLI then asks in its own
/// terminal only).
async fn hook_wiring(
    info: &runtime::ServiceInfo,
    program: &std::path::Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    me: &std::path::Path,
    root: &std::path::Path,
) -> Option<(Vec<String>, Vec<(std::ffi::OsString, std::ffi::OsString)>)> {
    use moonkale_service::agent::hooks;
    let version = moonkale_claude::binary::version(program, env).await?;
    if version < hooks::MIN_HOOK_CLI {
        return None;
    }
    let client = moonkale_client::Client::observe_socket(&info.socket, "moonkale-claude")
        .await
        .ok()?;
    let secret = client
        .request::<moonkale_protocol::agent::HookSecret>(moonkale_protocol::NoParams)
        .await
        .ok()?;
    Some(hooks::wiring(me, root, &secret.token))
}

/// `hook permission|done`: the hook's input (stdin) to the service the
/// variables name; for `permission`, the decision on stdout as Claude Code
/// reads it. Anything amiss (no service, a refusal) prints nothing and
/// exits 0: the terminal's own dialog decides, as without the service.
async fn hook(kind: HookKind, user: bool) -> i32 {
    use moonkale_protocol::agent::{HookBehavior, HookDone, HookParams, HookPermission};
    use moonkale_service::agent::hooks::{TOKEN_VAR, WORKSPACE_VAR};
    let mut text = Vec::new();
    let read = std::io::Read::read_to_end(
        &mut std::io::Read::take(std::io::stdin(), MAX_HOOK_INPUT),
        &mut text,
    );
    let Some(input) = read
        .ok()
        .and_then(|_| serde_json::from_slice::<serde_json::Value>(&text).ok())
    else {
        return 0;
    };
    let start = (
        std::env::var_os(WORKSPACE_VAR),
        std::env::var(TOKEN_VAR).ok(),
    );
    let (workspace, token) = match (user, start) {
        // A CLI the service started has hooks of its start: the user's
        // own stays out of the way.
        (true, (_, Some(_))) => return 0,
        (false, (Some(workspace), Some(token))) => (PathBuf::from(workspace), token),
        (true, _) => {
            let Some(cwd) = input["cwd"].as_str().map(PathBuf::from) else {
                return 0;
            };
            let Ok(Some(token)) = moonkale_service::agent::user_hook::user_secret(false) else {
                return 0;
            };
            (doctor::workspace_for(&cwd), token)
        }
        (false, _) => return 0,
    };
    let Some(info) = RuntimeDir::from_env()
        .ok()
        .and_then(|dir| dir.service_for(&workspace))
    else {
        return 0;
    };
    let Ok(client) = moonkale_client::Client::observe_socket(&info.socket, "moonkale-hook").await
    else {
        return 0;
    };
    let params = HookParams { token, input };
    match kind {
        HookKind::Done => {
            let _ = client.request::<HookDone>(params).await;
        }
        HookKind::Permission => {
            let Ok(decision) = client.request::<HookPermission>(params).await else {
                return 0;
            };
            let Some(behavior) = decision.behavior else {
                return 0;
            };
            let mut said = serde_json::json!({"behavior": match behavior {
                HookBehavior::Allow => "allow",
                HookBehavior::Deny => "deny",
            }});
            if let Some(message) = decision.message {
                said["message"] = message.into();
            }
            moonkale_service::outln!(
                "{}",
                serde_json::json!({"hookSpecificOutput": {
                    "hookEventName": "PermissionRequest",
                    "decision": said,
                }})
            );
        }
    }
    0
}

/// The largest hook input read (a tool's input with a whole file in it).
const MAX_HOOK_INPUT: u64 = 8 << 20;

/// `--permission-mode`: one the CLI knows (a bad one is a bad command line,
/// exit 2).
fn permission_mode(s: &str) -> Result<String, String> {
    moonkale_protocol::agent::PermissionMode::parse(s)
        .map(|_| s.to_owned())
        .ok_or_else(|| "use plan, default, acceptEdits or bypassPermissions".to_owned())
}

/// `--listen HOST:PORT`: an address, or a host name resolved now
/// (`localhost:8443`), its first address.
fn listen_address(s: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = s.parse() {
        return Ok(address);
    }
    let bad = || format!("{s} is not HOST:PORT (such as 127.0.0.1:8443 or localhost:8443)");
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    std::net::ToSocketAddrs::to_socket_addrs(s)
        .map_err(|e| format!("{host} does not resolve: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))
}

/// `--sandbox-path HOST=INSIDE`, in one sentence when it is not one.
fn parse_path_pair(s: &str) -> Result<moonkale_service::core::path_map::PathPair, String> {
    s.parse()
}

/// `claude --sandbox`: a sandbox link from the workspace's service (started
/// if none runs), held by this process's connection, then the sandbox
/// command with the relay spliced in (or, with `print`, the command to
/// paste into one), until it ends.
async fn claude_in_sandbox(
    root: &std::path::Path,
    me: &std::path::Path,
    link_bin: PathBuf,
    print: bool,
    paths: Vec<moonkale_service::core::path_map::PathPair>,
    args: Vec<String>,
) -> anyhow::Result<i32> {
    use moonkale_service::sandbox_link::{
        claude_word, exit_code, in_sandbox_command, printable_command, with_token,
    };
    if !print {
        claude_word(&args)?; // a wrong command opens no link
    }
    let (stream, _) = client::connect_or_start(root, me).await?;
    let (read, write) = stream.into_split();
    let front = moonkale_client::Client::over(
        read,
        write,
        moonkale_client::Role::Observer,
        "moonkale-claude-sandbox",
    )
    .await?;
    let link = front
        .request::<moonkale_protocol::terminal::SandboxLink>(Some(
            moonkale_protocol::terminal::SandboxLinkParams {
                paths: paths.iter().map(ToString::to_string).collect(),
            },
        ))
        .await?;
    let env: Vec<_> = std::env::vars_os().collect();
    if print {
        let mut args = args;
        args.splice(0..0, mode_args(&env, &args));
        let line = printable_command(&link.token, &link_bin, &link.socket, &args)?;
        let inside = link.socket.parent().unwrap_or(root);
        eprintln!(
            "moonkale: run this inside the sandbox (it must see {} at {}); the link stays open until you stop this command:",
            printable::one_line(&root.display().to_string()),
            printable::one_line(&inside.display().to_string())
        );
        moonkale_service::outln!("{line}");
        let mut notifications = front.notifications().expect("a new client's");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { while notifications.next().await.is_some() {} } => {
                anyhow::bail!("the workspace's service went away; the link is closed")
            }
        }
        return Ok(0);
    }
    let argv = in_sandbox_command(&args, &link_bin, &link.socket, &mode_args(&env, &args))?;
    eprintln!(
        "moonkale: Claude Code starts in the sandbox, linked to {}",
        printable::one_line(&root.display().to_string())
    );
    let mut child = tokio::process::Command::new(&argv[0]);
    child
        .args(&argv[1..])
        .env_clear()
        .envs(with_token(env, &link.token))
        .env_remove("CLAUDECODE");
    let mut child = child.spawn().with_context(|| {
        format!(
            "running the sandbox command {}",
            printable::one_line(&argv[0])
        )
    })?;
    // Ctrl-C reaches the sandbox from the terminal; we stay to close the link.
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            _ = int.recv() => {}
        }
    };
    drop(front);
    Ok(exit_code(status))
}

/// Prints one line, `moonkale-service: <what happened and what to do>`,
/// and exits 1. Never a backtrace (whatever RUST_BACKTRACE says): the
/// message is the whole story for the user.
fn fail(message: &str) -> ! {
    eprintln!("moonkale-service: {}", printable::one_line(message));
    std::process::exit(1);
}

/// Help and version go out as clap writes them; a bad command line is one
/// line naming the fault and where the usage is, exit code 2.
fn exit_on_bad_arguments(e: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let rendered = e.render().to_string();
    // The first paragraph: "error: …", maybe followed by indented names
    // ("the following required arguments were not provided:\n  <SESSION>").
    let fault = rendered
        .lines()
        .take_while(|l| !l.is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    let fault = fault.trim_start_matches("error: ");
    // "Usage: moonkale-service agent show <SESSION>" names the command;
    // an error without that line (a bad value) is named by the arguments.
    let command: Vec<String> = match rendered.lines().find_map(|l| l.strip_prefix("Usage: ")) {
        Some(usage) => usage
            .split_whitespace()
            .take_while(|w| !w.starts_with(['[', '<', '-']) && !w.contains('|'))
            .map(str::to_owned)
            .collect(),
        None => command_named(std::env::args().skip(1)),
    };
    eprintln!(
        "moonkale-service: {}; see `{} --help`",
        printable::one_line(fault),
        command.join(" ")
    );
    std::process::exit(2);
}

/// The command that arguments name (`moonkale-service sandbox set`): each
/// word that is a command of the one before, up to `--`.
fn command_named(args: impl Iterator<Item = String>) -> Vec<String> {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut path = vec!["moonkale-service".to_owned()];
    for arg in args.take_while(|a| a != "--") {
        if let Some(sub) = command.find_subcommand(&arg).cloned() {
            command = sub;
            path.push(arg);
        }
    }
    path
}

/// `man [COMMAND…]`: the page of the program or of one of its commands,
/// rendered from the same definitions as `--help`.
fn manual_page(path: &[String], out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    use clap::CommandFactory;
    // Built, every command knows its full name (`moonkale-service-agent-send`).
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    for name in path {
        command = command.find_subcommand(name).cloned().ok_or_else(|| {
            anyhow::anyhow!(
                "there is no command {}; see `moonkale-service --help`",
                printable::one_line(&path.join(" "))
            )
        })?;
    }
    // A command's own page names the program's version, as the top one does.
    clap_mangen::Man::new(command)
        .source(format!("moonkale-service {}", env!("CARGO_PKG_VERSION")))
        .render(out)
        .context("writing the manual page")
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = Cli::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "moonkale-service", &mut script);
            stdout::write(String::from_utf8_lossy(&script));
            Ok(0)
        }
        Command::Man { command } => {
            let mut page = Vec::new();
            manual_page(&command, &mut page)?;
            stdout::write(String::from_utf8_lossy(&page));
            Ok(0)
        }
        Command::Serve {
            workspaces,
            lsp_tcp,
            remote,
            no_claude_ide,
            exit_when_idle,
            agent,
        } => {
            let workspaces = if workspaces.is_empty() {
                vec![workspace_or_cwd(None)?]
            } else {
                workspaces
            };
            let workspaces = workspaces
                .iter()
                .map(|w| runtime::canonical_workspace(w))
                .collect::<Result<Vec<_>, _>>()?;
            let remote = remote.config(&workspaces)?;
            let ide = ide_config(no_claude_ide)?;
            let cfg = server::ServeConfig {
                workspaces,
                lsp_tcp,
                remote,
                ide,
                agent: agent.config(),
                exit_when_idle: exit_when_idle.then(lifetime::autostart_idle),
            };
            let shutdown = shutdown_signal().context("installing the SIGINT/SIGTERM handlers")?;
            match server::serve(cfg, shutdown).await {
                Ok(()) => Ok(0),
                Err(
                    e @ (Error::AlreadyRunning { .. }
                    | Error::InsideServed { .. }
                    | Error::InsideStarting { .. }),
                ) => {
                    eprintln!("moonkale-service: {e}");
                    Ok(3)
                }
                Err(e) => Err(e.into()),
            }
        }
        Command::Lsp {
            stdio: _,
            workspace,
            no_claude_ide,
            agent,
        } => {
            let root = runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?;
            let ide = ide_config(no_claude_ide)?;
            Ok(server::run_stdio(root, ide, agent.config()).await?)
        }
        // The agent's commands start the service as `acp` and `claude` do:
        // sessions outlive it, and a first `agent send` needs no `serve`.
        Command::Agent { workspace, command } => {
            let root = runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?;
            let me = std::env::current_exe().context("finding this program")?;
            let (_, info) = client::connect_or_start(&root, &me).await?;
            run_agent_command(&agent_client::Target::Local(info.socket), command).await
        }
        Command::Changes { workspace, command } => {
            run_changes_command(&running_service(workspace)?, command).await
        }
        Command::Connect {
            url,
            token_file,
            ca,
            command,
        } => {
            let token =
                remote::token_from(std::env::var(remote::TOKEN_ENV).ok(), token_file.as_deref())?;
            let target = remote::client::RemoteTarget { url, token, ca };
            run_agent_command(&agent_client::Target::Remote(target), command).await
        }
        Command::Acp {
            workspace,
            remote: connect,
        } => {
            let target = match connect.target()? {
                Some(remote) => acp::Target::Remote(remote),
                None => acp::Target::Local {
                    workspace: match workspace {
                        Some(w) => Some(runtime::canonical_workspace(&w)?),
                        None => None,
                    },
                    service_bin: std::env::current_exe().context("finding this program")?,
                },
            };
            acp::run(target).await?;
            Ok(0)
        }
        Command::Web {
            workspace,
            remote: connect,
            listen,
            tls_cert,
            tls_key,
            insecure,
            notify_command,
            notify_after,
        } => {
            let listen = listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
            remote::check_listen(listen, tls_cert.is_some(), insecure)?;
            let tls = match (&tls_cert, &tls_key) {
                (Some(cert), Some(key)) => Some(remote::tls_from(cert, key)?),
                _ => None,
            };
            let target = match connect.target()? {
                Some(remote) => acp::Target::Remote(remote),
                None => acp::Target::Local {
                    workspace: Some(runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?),
                    service_bin: std::env::current_exe().context("finding this program")?,
                },
            };
            let config = moonkale_service::web::WebConfig {
                target,
                listen,
                tls,
                notify: notify_command.map(|command| moonkale_service::web::notify::Notify {
                    command,
                    after: std::time::Duration::from_secs(notify_after),
                }),
            };
            moonkale_service::web::run(config, shutdown_signal()?).await?;
            Ok(0)
        }
        Command::SandboxLink { socket, command } => {
            Ok(moonkale_service::sandbox_link::run(socket, command).await?)
        }
        Command::Claude {
            workspace,
            sandbox: true,
            print,
            link_bin,
            sandbox_paths,
            args,
            ..
        } => {
            let root = runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?;
            let me = std::env::current_exe().context("finding this program")?;
            claude_in_sandbox(
                &root,
                &me,
                link_bin.unwrap_or_else(|| me.clone()),
                print,
                sandbox_paths,
                args,
            )
            .await
        }
        Command::Claude {
            workspace,
            args,
            no_sandbox,
            ..
        } => {
            let root = runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?;
            let me = std::env::current_exe().context("finding this program")?;
            // The workspace's default sandbox, unless told not to.
            let default = if no_sandbox {
                None
            } else {
                moonkale_service::user_state::SandboxStore::from_env()?.get(&root)?
            };
            if let Some(sandbox) = default {
                let paths = sandbox.paths;
                let mut command = sandbox.command;
                command.extend(args);
                return claude_in_sandbox(
                    &root,
                    &me,
                    sandbox.link_bin.unwrap_or_else(|| me.clone()),
                    false,
                    paths,
                    command,
                )
                .await;
            }
            // No `claude` to run starts no service.
            let path = std::env::var_os("PATH");
            let configured = std::env::var_os("MOONKALE_CLAUDE_BIN").map(PathBuf::from);
            let program =
                moonkale_claude::binary::find(configured.as_deref(), path.as_deref(), &root)?;
            let (_, info) = client::connect_or_start(&root, &me).await?;
            let env: Vec<_> = std::env::vars_os().collect();
            let editor_attached = editors_attached(&info).await;
            let mut launch = claude_launch(info.ide_port, &env, args, editor_attached)
                .map_err(anyhow::Error::msg)?;
            eprintln!("moonkale: {}", launch.message);
            // Its permission questions reach every front end too.
            if let Some((args, env)) = hook_wiring(&info, &program, &env, &me, &root).await {
                launch.args.splice(0..0, args);
                launch.env.extend(env.into_iter().map(|(k, v)| {
                    (
                        k.to_string_lossy().into_owned(),
                        v.to_string_lossy().into_owned(),
                    )
                }));
            }
            use std::os::unix::process::CommandExt;
            // Replaces this process: the user's terminal talks to claude directly.
            let err = std::process::Command::new(&program)
                .args(&launch.args)
                .envs(launch.env)
                .env_remove("CLAUDECODE")
                .exec();
            Err(anyhow::anyhow!("running {}: {err}", program.display()))
        }
        Command::Trust {
            workspace,
            revoke,
            status,
        } => {
            let folder = runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?;
            // A folder inside a served workspace belongs to that workspace.
            let service = running_service(Some(folder.clone())).ok();
            let root = service.as_ref().map_or(folder, |s| s.workspace.clone());
            let store = moonkale_service::user_state::TrustStore::from_env()?;
            if status {
                let trusted = store.is_trusted(&root);
                moonkale_service::outln!(
                    "{} is {}trusted",
                    root.display(),
                    if trusted { "" } else { "not " }
                );
                return Ok(if trusted { 0 } else { 1 });
            }
            // A running service keeps the decision itself and tells its
            // editors; without one, it is written here.
            let message = match service {
                Some(info) => agent_client::trust(&info.socket, !revoke).await?,
                None => {
                    store.set(&root, !revoke)?;
                    moonkale_service::agent::host::trust_message(&store, &root, !revoke)
                }
            };
            moonkale_service::outln!("{message}");
            Ok(0)
        }
        Command::Sandbox { workspace, command } => {
            let root = runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?;
            let store = moonkale_service::user_state::SandboxStore::from_env()?;
            let shown = printable::one_line(&root.display().to_string());
            match command {
                SandboxVerb::Set {
                    sandbox_paths,
                    link_bin,
                    command,
                } => {
                    let sandbox = moonkale_service::sandbox_link::default_sandbox(
                        &root,
                        command,
                        sandbox_paths,
                        link_bin,
                    )?;
                    store.set(&root, sandbox.clone())?;
                    moonkale_service::outln!(
                        "Claude Code for {shown} now runs in the sandbox: {}",
                        moonkale_service::sandbox_link::describe(&sandbox)
                    );
                    // Kept as the user said; a command that does not start
                    // is said now, not at the next session's start.
                    if let Err(why) = doctor::sandbox(&doctor::Env::from_process(), &root).await {
                        eprintln!(
                            "moonkale-service: warning: the sandbox does not run: {}; \
                             `moonkale-service sandbox clear` removes it",
                            printable::one_line(&why)
                        );
                    }
                }
                SandboxVerb::Show => match store.get(&root)? {
                    Some(sandbox) => moonkale_service::outln!(
                        "{shown}: {}",
                        moonkale_service::sandbox_link::describe(&sandbox)
                    ),
                    None => moonkale_service::outln!("{shown} has no default sandbox"),
                },
                SandboxVerb::Clear => {
                    if store.clear(&root)? {
                        moonkale_service::outln!("Claude Code for {shown} runs unjailed again");
                    } else {
                        moonkale_service::outln!("{shown} had no default sandbox");
                    }
                }
            }
            Ok(0)
        }
        Command::Doctor { workspace, json } => {
            let folder = runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?;
            let root = doctor::workspace_for(&folder);
            let checks = doctor::run(&doctor::Env::from_process(), &root).await;
            let (report, code) = if json {
                doctor::render_json(&checks)
            } else {
                doctor::render(&checks)
            };
            moonkale_service::out!("{report}");
            Ok(code)
        }
        Command::Hook { kind, user } => Ok(hook(kind, user).await),
        Command::Hooks { action } => hooks_command(action),
        Command::Terminal { workspace, command } => terminal_command(workspace, command).await,
        Command::Stop { workspace } => {
            let info = running_service(workspace)?;
            let mut client = observe(&info, "moonkale-stop").await?;
            client
                .request("moonkale/stop", serde_json::Value::Null)
                .await?;
            // Stopped means gone, with its files: its exit is the event,
            // and another process's exit can only be polled.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while runtime::process_alive(info.pid) {
                if std::time::Instant::now() > deadline {
                    anyhow::bail!(
                        "the service for {} (pid {}) did not stop within 30 s",
                        info.workspace.display(),
                        info.pid
                    );
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            eprintln!(
                "moonkale-service: stopped the service for {}",
                printable::one_line(&info.workspace.display().to_string())
            );
            Ok(0)
        }
        Command::Status {
            workspace,
            json,
            watch,
        } => {
            let info = running_service(workspace)?;
            let mut client = observe(&info, "moonkale-status").await?;
            let method = if watch {
                "moonkale/status/subscribe"
            } else {
                "moonkale/status"
            };
            let mut status =
                serde_json::from_value(client.request(method, serde_json::Value::Null).await?)?;
            loop {
                let report = status_report(&mut client, &info, status).await;
                if !watch {
                    let _ = client.request("shutdown", serde_json::Value::Null).await;
                    let _ = client.notify("exit", serde_json::Value::Null).await;
                    if json {
                        let json = serde_json::to_string_pretty(&report)?;
                        moonkale_service::outln!("{}", printable::json_for_terminal(&json));
                    } else {
                        moonkale_service::out!("{}", hub::render_status(&report));
                    }
                    return Ok(0);
                }
                // A snapshot a line (JSON), or a paragraph (text).
                if json {
                    let line = serde_json::to_string(&report)?;
                    moonkale_service::outln!("{}", printable::json_for_terminal(&line));
                } else {
                    moonkale_service::outln!("{}", hub::render_status(&report));
                }
                status = tokio::select! {
                    _ = tokio::signal::ctrl_c() => return Ok(0),
                    changed = next_status(&mut client) => changed.map_err(|_| {
                        anyhow::anyhow!(
                            "the service for {} stopped",
                            printable::one_line(&info.workspace.display().to_string())
                        )
                    })?,
                };
            }
        }
    }
}

/// The info file of the service running for `workspace` (or the current
/// directory).
fn running_service(workspace: Option<PathBuf>) -> anyhow::Result<runtime::ServiceInfo> {
    let root = runtime::canonical_workspace(&workspace_or_cwd(workspace)?)?;
    Ok(RuntimeDir::from_env()?
        .service_for(&root)
        .ok_or(Error::NotRunning { workspace: root })?)
}

type UnixClient = LspClient<tokio::net::unix::OwnedReadHalf, tokio::net::unix::OwnedWriteHalf>;

/// A status snapshot with what the service published about itself (its
/// IDE port), its `claude` processes, its terminals and the default
/// sandbox.
async fn status_report(
    client: &mut UnixClient,
    info: &runtime::ServiceInfo,
    status: hub::Status,
) -> hub::StatusReport {
    let sessions: moonkale_protocol::agent::ListResult = client
        .request("moonkale/agent/list", serde_json::json!({}))
        .await
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or(moonkale_protocol::agent::ListResult {
            sessions: Vec::new(),
        });
    let terminals: moonkale_protocol::terminal::ListResult = client
        .request("moonkale/terminal/list", serde_json::Value::Null)
        .await
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or(moonkale_protocol::terminal::ListResult {
            terminals: Vec::new(),
        });
    let sandbox = moonkale_service::user_state::SandboxStore::from_env()
        .and_then(|store| store.get(&info.workspace))
        .ok()
        .flatten()
        .map(|sandbox| moonkale_service::sandbox_link::describe(&sandbox));
    hub::StatusReport {
        claudes: claude_processes(info.pid, &sessions.sessions, status.agent_spare.as_ref()),
        status,
        ide_port: info.ide_port,
        sandbox,
        terminals: terminals.terminals,
    }
}

/// The next `moonkale/status/changed` snapshot (one that arrived while a
/// request was answered first); an error once the service is gone.
async fn next_status(client: &mut UnixClient) -> anyhow::Result<hub::Status> {
    use moonkale_protocol::jsonrpc::Message;
    let changed =
        <moonkale_protocol::status::Changed as lsp_types::notification::Notification>::METHOD;
    loop {
        let message = if client.received.is_empty() {
            client.next_message().await?
        } else {
            client.received.remove(0)
        };
        if let Message::Notification { method, params } = message
            && method == changed
        {
            return Ok(serde_json::from_str(params.get())?);
        }
    }
}

async fn observe(info: &runtime::ServiceInfo, name: &str) -> anyhow::Result<UnixClient> {
    let mut client =
        LspClient::connect_unix(&info.socket)
            .await
            .map_err(|_| Error::NotRunning {
                workspace: info.workspace.clone(),
            })?;
    client.initialize_observer(name).await?;
    Ok(client)
}

/// Every `claude` the service runs (its children started with a session
/// id): pid, session, the session's state (`spare` for the warm spare)
/// and resident memory, read from `/proc`.
fn claude_processes(
    service: u32,
    sessions: &[moonkale_protocol::agent::SessionSummary],
    spare: Option<&moonkale_protocol::status::SpareStatus>,
) -> Vec<moonkale_protocol::status::ClaudeProcess> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent != Some(service) {
            continue;
        }
        let argv = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let session = argv.split(|b| *b == 0).find_map(|arg| {
            let arg = std::str::from_utf8(arg).ok()?;
            arg.strip_prefix("--session-id=")
                .or_else(|| arg.strip_prefix("--resume="))
                .map(str::to_owned)
        });
        let Some(session) = session else { continue };
        let rss_bytes = moonkale_service::agent::host::rss_bytes(pid).unwrap_or(0);
        let spare = spare.filter(|spare| spare.pid == pid);
        let listed = sessions.iter().find(|s| s.session == session);
        found.push(moonkale_protocol::status::ClaudeProcess {
            pid,
            session,
            state: listed.map(|s| s.state),
            spare: spare.is_some(),
            rss_bytes,
            jailed: spare.map_or(listed.is_some_and(|s| s.jailed), |s| s.jailed),
        });
    }
    found
}

/// Whether an editor is attached to the service `info` names (it then
/// shows Claude Code's proposed edits); `false` if that cannot be told.
async fn editors_attached(info: &runtime::ServiceInfo) -> bool {
    let Ok(mut client) = observe(info, "moonkale-claude").await else {
        return false;
    };
    let status = client
        .request("moonkale/status", serde_json::Value::Null)
        .await
        .unwrap_or_default();
    let _ = client.request("shutdown", serde_json::Value::Null).await;
    let _ = client.notify("exit", serde_json::Value::Null).await;
    status["editors"].as_array().is_some_and(|e| !e.is_empty())
}

fn ide_config(disabled: bool) -> anyhow::Result<Option<IdeConfig>> {
    if disabled {
        return Ok(None);
    }
    Ok(Some(IdeConfig::from_env()?))
}

fn workspace_or_cwd(workspace: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match workspace {
        Some(w) => Ok(w),
        None => std::env::current_dir().context("reading the current directory"),
    }
}

/// SIGINT or SIGTERM. The handlers are installed here, before `serve`
/// publishes anything: installed when the future is first polled (after
/// the info and lock files are written), a signal in between took the
/// default action and left those files behind.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every command and option says what it is for in `--help` (and so in
    /// the manual page and the completions that show descriptions).
    #[test]
    fn every_argument_and_command_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut command = Cli::command();
        command.build();
        let mut missing = Vec::new();
        walk(&command, "moonkale-service", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }

    #[test]
    fn a_manual_page_for_the_program_and_each_command() {
        let page = |path: &[&str]| {
            let mut out = Vec::new();
            let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
            manual_page(&path, &mut out).map(|()| String::from_utf8(out).unwrap())
        };
        let top = page(&[]).unwrap();
        assert!(top.starts_with(".ie \\n(.g .ds Aq"), "{top}");
        assert!(top.contains(".TH moonkale-service 1"), "{top}");
        for command in ["serve", "doctor", "completions", "man"] {
            assert!(top.contains(command), "no {command} in {top}");
        }
        let send = page(&["agent", "send"]).unwrap();
        assert!(send.contains(".TH moonkale-service-agent-send 1"), "{send}");
        assert!(send.contains("permission\\-mode"), "{send}");
        let err = page(&["nonsense"]).unwrap_err().to_string();
        assert_eq!(
            err,
            "there is no command nonsense; see `moonkale-service --help`"
        );
    }

    #[test]
    fn the_arguments_name_their_command() {
        let named = |args: &[&str]| command_named(args.iter().map(|a| a.to_string())).join(" ");
        assert_eq!(
            named(&[
                "sandbox",
                "set",
                "--sandbox-path",
                "x",
                "--",
                "agent",
                "claude"
            ]),
            "moonkale-service sandbox set"
        );
        assert_eq!(named(&["--bogus"]), "moonkale-service");
        assert_eq!(
            named(&["agent", "send", "--model", "m"]),
            "moonkale-service agent send"
        );
    }

    #[test]
    fn an_os_error_is_said_once() {
        let io = || std::io::Error::from_raw_os_error(libc::ENOENT);
        let ours = anyhow::Error::new(Error::io("workspace /x", io()));
        assert_eq!(
            one_sentence(&ours),
            "workspace /x: No such file or directory"
        );
        // A context over an error that does not repeat its source keeps both.
        let wrapped = anyhow::Error::new(io()).context("reading /etc/x");
        assert_eq!(
            one_sentence(&wrapped.context("starting")),
            "starting: reading /etc/x: No such file or directory"
        );
    }
}
