//! A session's CLI as one state, and the seam between the session and the
//! process: the real `claude`, or (in tests) a script on channels, so the
//! session's state machine runs without a process.

use std::path::Path;

use moonkale_claude::launch::child_env;
use moonkale_claude::process::{CliProcess, ProcessConfig};
use moonkale_claude::stream::{CliMessage, DecodeError};

use crate::agent::AgentConfig;

/// Where the session's CLI processes come from.
#[derive(Clone, Debug, Default)]
pub enum Launcher {
    /// `claude`, found as configured.
    #[default]
    Claude,
    /// Each launch hands the test a [`script::Launched`].
    #[cfg(test)]
    Script(tokio::sync::mpsc::UnboundedSender<script::Launched>),
}

impl Launcher {
    /// Starts a CLI with `args` in `cwd`, a folder of `workspace` (whose
    /// `PATH` entries never name the `claude` to run, wherever in it the
    /// CLI runs). In a workspace the user does not trust, a `claude` too
    /// old to honour `--setting-sources` is refused: the error says what
    /// to do.
    pub(super) async fn start(
        &self,
        config: &AgentConfig,
        workspace: &Path,
        cwd: &Path,
        args: Vec<String>,
        trusted: bool,
        sandbox: Option<&crate::user_state::DefaultSandbox>,
    ) -> Result<CliLink, String> {
        match self {
            // The user's sandbox command runs `claude` (and what follows
            // its claude word); the stream-json pipes, the approvals and
            // the editor tools (an `sdk` MCP server on the same pipes) go
            // through it as they are.
            Launcher::Claude if let Some(sandbox) = sandbox => {
                let env = cli_env(config, trusted);
                if !trusted {
                    check_sandboxed_honours_setting_sources(&sandbox.command, cwd, &env).await?;
                }
                let (program, before) = sandbox
                    .command
                    .split_first()
                    .ok_or("the default sandbox has no command")?;
                let mut all = before.to_vec();
                all.extend(args);
                CliProcess::spawn(ProcessConfig {
                    program: program.into(),
                    args: all,
                    cwd: cwd.to_owned(),
                    env,
                    grace: config.shutdown_grace,
                })
                .map(CliLink::Process)
                .map_err(|e| format!("could not start the sandbox command {program}: {e}"))
            }
            Launcher::Claude => {
                let program = moonkale_claude::binary::find_in_env(
                    config.claude_bin.as_deref(),
                    &config.env,
                    workspace,
                )
                .map_err(|e| e.to_string())?;
                let env = cli_env(config, trusted);
                if !trusted {
                    check_honours_setting_sources(&program, &env).await?;
                }
                CliProcess::spawn(ProcessConfig {
                    program: program.clone(),
                    args,
                    cwd: cwd.to_owned(),
                    env,
                    grace: config.shutdown_grace,
                })
                .map(CliLink::Process)
                .map_err(|e| format!("could not start {}: {e}", program.display()))
            }
            #[cfg(test)]
            Launcher::Script(tests) => Ok(CliLink::Script(script::launch(tests, args))),
        }
    }
}

/// The CLI's environment; in a workspace the user does not trust, one in
/// which git sees no repository, so nothing of the repository's git
/// configuration runs (`moonkale_claude::launch::without_repository`).
fn cli_env(config: &AgentConfig, trusted: bool) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env = child_env(config.env.iter().cloned(), None);
    if !trusted {
        moonkale_claude::launch::without_repository(&mut env);
    }
    env
}

/// The first CLI generation seen to honour `--setting-sources` for hooks,
/// permission rules and MCP servers (2.0.50 accepts the flag and still runs
/// a repository's hooks: tests/tests/agent_trust.rs).
const MIN_UNTRUSTED_CLI: moonkale_claude::binary::Version =
    moonkale_claude::binary::Version(2, 1, 0);

/// [`check_honours_setting_sources`] for the `claude` a sandbox command
/// runs: its `--version`, asked through the sandbox from where the CLI
/// will start (a sandbox command may depend on it, as `docker compose
/// exec` does).
async fn check_sandboxed_honours_setting_sources(
    command: &[String],
    cwd: &Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Result<(), String> {
    let Some((program, rest)) = command.split_first() else {
        return Err("the default sandbox has no command".into());
    };
    let found = moonkale_claude::binary::ask_version(Path::new(program), rest, cwd, env).await;
    match found {
        Ok(v) if v >= MIN_UNTRUSTED_CLI => Ok(()),
        Ok(v) => Err(format!(
            "the Claude Code in the default sandbox ({v}) is too old, and this workspace is not \
             trusted: use Claude Code {MIN_UNTRUSTED_CLI} or newer there, or run \
             `moonkale-service trust` if you trust the repository's .claude settings and .mcp.json"
        )),
        // The real cause first: a sandbox that does not run is no version
        // question.
        Err(why) => Err(format!(
            "the default sandbox did not run Claude Code: {why}; fix it with `moonkale-service \
             sandbox set`, or remove it with `moonkale-service sandbox clear`"
        )),
    }
}

/// An untrusted workspace needs a CLI that leaves the repository's own
/// settings alone; an older (or unknown) one is refused with what to do.
async fn check_honours_setting_sources(
    program: &std::path::Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Result<(), String> {
    match moonkale_claude::binary::version(program, env).await {
        Some(v) if v >= MIN_UNTRUSTED_CLI => Ok(()),
        found => Err(format!(
            "Claude Code {} is too old to be kept from this repository's own settings (its hooks \
             and permission rules would run), and this workspace is not trusted: use Claude Code \
             {MIN_UNTRUSTED_CLI} or newer, or run `moonkale-service trust` if you trust the \
             repository's .claude settings and .mcp.json",
            found.map_or("of unknown version".to_owned(), |v| v.to_string())
        )),
    }
}

/// One running CLI.
#[cfg_attr(test, allow(clippy::large_enum_variant))]
pub(super) enum CliLink {
    Process(CliProcess),
    #[cfg(test)]
    Script(script::Script),
}

impl CliLink {
    pub fn pid(&self) -> i32 {
        match self {
            CliLink::Process(p) => p.pid(),
            #[cfg(test)]
            CliLink::Script(_) => 0,
        }
    }

    pub async fn send(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            CliLink::Process(p) => p.send(line).await,
            #[cfg(test)]
            CliLink::Script(s) => s.send(line),
        }
    }

    /// The next message; `None` once the CLI's output ended.
    pub async fn next(&mut self) -> Option<Result<CliMessage, DecodeError>> {
        match self {
            CliLink::Process(p) => p.next().await,
            #[cfg(test)]
            CliLink::Script(s) => s.next().await.map(Ok),
        }
    }

    /// Ends it now (it does not read its stdin).
    pub fn kill(&mut self) {
        match self {
            CliLink::Process(p) => p.kill(),
            #[cfg(test)]
            CliLink::Script(s) => s.kill(),
        }
    }

    /// How it ended and the end of its stderr, once its output ended.
    pub async fn finish(self) -> (String, String) {
        match self {
            CliLink::Process(p) => {
                let (status, stderr) = p.finish().await;
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                (status, stderr)
            }
            #[cfg(test)]
            CliLink::Script(s) => s.finish(),
        }
    }

    /// Closes its stdin, then ends it (bounded by the grace period).
    pub async fn shutdown(self) {
        match self {
            CliLink::Process(p) => {
                let _ = p.shutdown().await;
            }
            #[cfg(test)]
            CliLink::Script(_) => {}
        }
    }
}

/// The session's CLI: none, or one process and how it was started. One
/// state instead of flags that could disagree.
pub(super) enum CliState {
    /// No process: the next prompt starts one.
    Stopped,
    Running(Box<Running>),
}

pub(super) struct Running {
    pub link: CliLink,
    /// Started with the repository's own settings (the workspace was
    /// trusted then).
    pub trusted: bool,
    /// Started with `--resume` and no `system/init` seen yet: a failure now
    /// may mean the CLI lost the conversation.
    pub resuming: bool,
    /// This process is the one retry after a lost (or already used)
    /// conversation: it is not retried again.
    pub retry: bool,
    /// Offered our MCP server (the editor tools).
    pub editor_tools: bool,
}

impl CliState {
    pub fn running(&mut self) -> Option<&mut Running> {
        match self {
            CliState::Running(r) => Some(r),
            CliState::Stopped => None,
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self, CliState::Running(_))
    }

    pub fn is_resuming(&self) -> bool {
        matches!(self, CliState::Running(r) if r.resuming)
    }

    pub fn take(&mut self) -> Option<Running> {
        match std::mem::replace(self, CliState::Stopped) {
            CliState::Running(r) => Some(*r),
            CliState::Stopped => None,
        }
    }

    /// The next message of the running CLI; pending forever without one.
    pub async fn next(&mut self) -> Option<Result<CliMessage, DecodeError>> {
        match self {
            CliState::Running(r) => r.link.next().await,
            CliState::Stopped => std::future::pending().await,
        }
    }
}

#[cfg(test)]
pub(crate) mod script {
    //! A CLI played by a test: what the session writes arrives on `lines`,
    //! what the test sends on `messages` is the CLI's output.

    use moonkale_claude::stream::CliMessage;
    use tokio::sync::mpsc;

    /// What a test gets for each CLI the session starts.
    pub struct Launched {
        pub args: Vec<String>,
        /// Every line the session writes to the CLI's stdin, parsed.
        pub lines: mpsc::UnboundedReceiver<serde_json::Value>,
        /// The CLI's output; [`Output::Exit`] (or dropping it) ends it.
        pub output: mpsc::UnboundedSender<Output>,
    }

    pub enum Output {
        Message(CliMessage),
        Exit { stderr: String },
    }

    impl Launched {
        /// The CLI writes `line`, one stream-json message.
        pub fn say(&self, line: serde_json::Value) {
            let mut decoder = moonkale_claude::stream::Decoder::new();
            let message = decoder
                .push(format!("{line}\n").as_bytes())
                .remove(0)
                .expect("a valid CLI message");
            let _ = self.output.send(Output::Message(message));
        }
    }

    pub struct Script {
        lines: mpsc::UnboundedSender<serde_json::Value>,
        output: mpsc::UnboundedReceiver<Output>,
        stderr: String,
        killed: bool,
    }

    pub(super) fn launch(tests: &mpsc::UnboundedSender<Launched>, args: Vec<String>) -> Script {
        let (lines_tx, lines) = mpsc::unbounded_channel();
        let (output, output_rx) = mpsc::unbounded_channel();
        let _ = tests.send(Launched {
            args,
            lines,
            output,
        });
        Script {
            lines: lines_tx,
            output: output_rx,
            stderr: String::new(),
            killed: false,
        }
    }

    impl Script {
        pub(super) fn send(&mut self, line: &[u8]) -> std::io::Result<()> {
            let value = serde_json::from_slice(line).expect("the session writes JSON lines");
            self.lines
                .send(value)
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }

        pub(super) async fn next(&mut self) -> Option<CliMessage> {
            if self.killed {
                return None;
            }
            match self.output.recv().await? {
                Output::Message(m) => Some(m),
                Output::Exit { stderr } => {
                    self.stderr = stderr;
                    None
                }
            }
        }

        pub(super) fn kill(&mut self) {
            self.killed = true;
        }

        pub(super) fn finish(self) -> (String, String) {
            ("exit status: 1".into(), self.stderr)
        }
    }
}
