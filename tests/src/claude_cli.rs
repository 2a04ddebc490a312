//! The real `claude` CLI in interactive (TTY) mode, under a pseudo-terminal,
//! offline: pointed at the fake API ([`crate::fakeapi`]), in a throwaway
//! HOME with the pre-seeded `~/.claude.json` of shared/docs/real-cli.md §2,
//! with an environment built from nothing (so nothing of the test process,
//! the service or the developer's own Claude setup leaks in).
//!
//! The process runs on a [`Pty`], so tests wait for text on the *screen*,
//! with a deadline; [`Claude::kill`] (and drop) kill its whole process
//! group.
//!
//! Only the interactive mode connects to an IDE from a lock file or
//! `CLAUDE_CODE_SSE_PORT`; `-p` never does (real-cli.md §5).

use std::path::{Path, PathBuf};
use std::time::Duration;

use portable_pty::CommandBuilder;
use serde_json::{Value, json};

use crate::STEP;
use crate::fakeapi::{FakeApi, Reply, Script, ToolResult};
use crate::pty::Pty;
use crate::world::World;

/// The API key the CLI sends; the fake accepts anything. Short keys are
/// approved whole in `customApiKeyResponses` (it keeps the last 20 chars).
const API_KEY: &str = "sk-test-dummy";

const ROWS: u16 = 50;
const COLS: u16 = 140;

/// The `claude` executable: `$MOONKALE_CLAUDE`, else the one
/// `scripts/install-test-peers.sh` put into `<repo>/.peers/claude`.
pub fn claude_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MOONKALE_CLAUDE").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "MOONKALE_CLAUDE={} is not a file", p.display());
        return p;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root");
    let peer = repo.join(".peers/claude/node_modules");
    let candidates = [
        peer.join(".bin/claude"),
        peer.join("@anthropic-ai/claude-code-linux-x64/claude"),
        peer.join("@anthropic-ai/claude-code/bin/claude.exe"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the claude CLI is not installed (looked for {}); run scripts/install-test-peers.sh \
                 or set MOONKALE_CLAUDE to a claude executable",
                candidates[0].display()
            )
        })
}

/// Writes `home/.claude.json` so that the TTY starts straight at the prompt:
/// onboarding done, the API key approved, each of `trusted` (the CLI's
/// working directory) trusted, and `diffTool: "auto"` (edits go to the
/// IDE's `openDiff`). A project entry also carries `allowedTools: []` (its
/// default in every generation): 1.0.x iterates it at startup and dies with
/// "B.allowedTools is not iterable" when the entry lacks it.
pub fn seed_home(home: &Path, trusted: &[&Path]) {
    std::fs::create_dir_all(home).expect("create the CLI's HOME");
    let projects: serde_json::Map<String, Value> = trusted
        .iter()
        .map(|p| {
            (
                p.display().to_string(),
                json!({"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true,
                        "allowedTools": []}),
            )
        })
        .collect();
    let seed = json!({
        "hasCompletedOnboarding": true,
        "theme": "dark",
        "diffTool": "auto",
        "autoInstallIdeExtension": false,
        "customApiKeyResponses": {"approved": [API_KEY], "rejected": []},
        "projects": projects,
    });
    std::fs::write(
        home.join(".claude.json"),
        serde_json::to_vec_pretty(&seed).unwrap(),
    )
    .expect("write ~/.claude.json");
}

/// How the CLI is told to write its debug log to [`ClaudeConfig::debug_file`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugLog {
    /// `--debug-file <path>` (2.1.x).
    FileFlag,
    /// `CLAUDE_CODE_DEBUG_LOGS_DIR=<path>`: 2.0.x has no `--debug-file` but
    /// always logs, to that variable's value (a file, despite the name).
    /// (1.0.x prints its debug log on the terminal: no file for it.)
    Env,
}

/// How to start the CLI.
#[derive(Clone, Debug)]
pub struct ClaudeConfig {
    /// The executable; `None`: [`claude_bin`] (2.1.332). Older generations
    /// (tests/tests/claude_cli_generations.rs) set their own.
    pub bin: Option<PathBuf>,
    /// Words run before the executable (empty: the executable is run
    /// directly): the argv is `launcher… <bin> [--debug-file X] args…`,
    /// e.g. [`crate::jail::Jail::enter`].
    pub launcher: Vec<String>,
    /// The CLI's HOME; seeded by [`Claude::spawn`]. Use the sandbox's home
    /// so that the CLI finds the lock file the service wrote there.
    pub home: PathBuf,
    /// Working directory (inside the workspace for lock-file discovery).
    pub cwd: PathBuf,
    /// Folders trusted in the seeded home besides `cwd` (where a jail sees
    /// the workspace).
    pub also_trusted: Vec<PathBuf>,
    /// Where temporary files go (`TMPDIR`); created if missing.
    pub tmp: PathBuf,
    /// The fake API's port (base URL and proxy).
    pub api_port: u16,
    /// Sets `CLAUDE_CODE_SSE_PORT` (the IDE's port, as an IDE terminal does).
    pub sse_port: Option<u16>,
    /// Extra command-line arguments.
    pub args: Vec<String>,
    /// Extra environment variables (after the defaults, so they win).
    pub env: Vec<(String, String)>,
    /// Writes the CLI's debug log here (`--debug-file`), shown on failures.
    pub debug_file: Option<PathBuf>,
    /// How `debug_file` is passed to the CLI.
    pub debug_log: DebugLog,
}

impl ClaudeConfig {
    /// 2.1.332's TTY defaults to "auto" permission mode, in which edits
    /// skip `openDiff` (cli-matrix.md §5): start it in `default` mode.
    pub fn new(home: &Path, cwd: &Path, api_port: u16) -> ClaudeConfig {
        let root = home.parent().unwrap_or(home);
        ClaudeConfig {
            bin: None,
            launcher: Vec::new(),
            home: home.to_owned(),
            cwd: cwd.to_owned(),
            also_trusted: Vec::new(),
            tmp: root.join("claude-tmp"),
            api_port,
            sse_port: None,
            args: vec!["--permission-mode".into(), "default".into()],
            env: Vec::new(),
            debug_file: Some(root.join("claude-debug.log")),
            debug_log: DebugLog::FileFlag,
        }
    }

    /// The CLI's own default mode ("auto" in 2.1.332's TTY: edits are
    /// written without asking and without `openDiff`), without the
    /// `--permission-mode default` of [`ClaudeConfig::new`].
    pub fn auto_mode(mut self) -> ClaudeConfig {
        if let Some(i) = self
            .args
            .windows(2)
            .position(|w| w[0] == "--permission-mode" && w[1] == "default")
        {
            self.args.drain(i..i + 2);
        }
        self
    }

    /// Starts the executable through `words` (see [`ClaudeConfig::launcher`]).
    pub fn launcher(mut self, words: Vec<String>) -> ClaudeConfig {
        self.launcher = words;
        self
    }

    /// Sets `CLAUDE_CODE_SSE_PORT` (as the editor's terminal would).
    pub fn sse_port(mut self, port: u16) -> ClaudeConfig {
        self.sse_port = Some(port);
        self
    }

    /// One more argument for the CLI.
    pub fn arg(mut self, arg: impl Into<String>) -> ClaudeConfig {
        self.args.push(arg.into());
        self
    }

    /// One more environment variable for the CLI.
    pub fn env(mut self, key: &str, value: &str) -> ClaudeConfig {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The whole environment the CLI gets: nothing inherited.
    pub fn environment(&self) -> Vec<(String, String)> {
        let api = format!("http://127.0.0.1:{}", self.api_port);
        let mut env: Vec<(String, String)> = [
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("TERM", "xterm-256color"),
            ("COLORTERM", "truecolor"),
            ("LANG", "C.UTF-8"),
            ("ANTHROPIC_API_KEY", API_KEY),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
            ("CLAUDE_CODE_MAX_RETRIES", "2"),
            ("CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL", "true"),
            // Else it git-clones the plugin marketplace from GitHub, over
            // HTTPS (refused by the proxy) and then over ssh (not proxied).
            ("CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL", "1"),
            ("GIT_SSH_COMMAND", "/bin/false"),
            ("NO_PROXY", "127.0.0.1,localhost"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        env.push(("HOME".into(), self.home.display().to_string()));
        env.push(("TMPDIR".into(), self.tmp.display().to_string()));
        env.push(("ANTHROPIC_BASE_URL".into(), api.clone()));
        // The fake refuses (and records) every CONNECT: nothing leaves.
        env.push(("HTTPS_PROXY".into(), api.clone()));
        env.push(("HTTP_PROXY".into(), api));
        if let Some(port) = self.sse_port {
            env.push(("CLAUDE_CODE_SSE_PORT".into(), port.to_string()));
        }
        if let (Some(debug), DebugLog::Env) = (&self.debug_file, self.debug_log) {
            env.push((
                "CLAUDE_CODE_DEBUG_LOGS_DIR".into(),
                debug.display().to_string(),
            ));
        }
        env.extend(self.env.iter().cloned());
        env
    }
}

/// A running CLI on a pty.
pub struct Claude {
    pub config: ClaudeConfig,
    pty: Pty,
}

impl Claude {
    /// Seeds the home and starts `claude <args>` (after the config's
    /// launcher words) on a fresh pty.
    pub fn spawn(config: ClaudeConfig) -> Claude {
        let trusted: Vec<&Path> = std::iter::once(config.cwd.as_path())
            .chain(config.also_trusted.iter().map(PathBuf::as_path))
            .collect();
        seed_home(&config.home, &trusted);
        std::fs::create_dir_all(&config.tmp).expect("create TMPDIR");
        let bin = config.bin.clone().unwrap_or_else(claude_bin);
        let mut cmd = match config.launcher.split_first() {
            Some((first, rest)) => {
                let mut cmd = CommandBuilder::new(first);
                cmd.args(rest);
                cmd.arg(bin);
                cmd
            }
            None => CommandBuilder::new(bin),
        };
        cmd.env_clear();
        for (k, v) in config.environment() {
            cmd.env(k, v);
        }
        cmd.cwd(&config.cwd);
        if let (Some(debug), DebugLog::FileFlag) = (&config.debug_file, config.debug_log) {
            cmd.arg("--debug-file");
            cmd.arg(debug);
        }
        cmd.args(&config.args);
        Claude {
            config,
            pty: Pty::spawn(cmd, ROWS, COLS),
        }
    }

    /// The process id of what was spawned: the CLI's, unless a launcher
    /// stays in between ([`crate::jail::Jail::enter`] execs the CLI in
    /// place).
    pub fn pid(&self) -> u32 {
        self.pty.pid()
    }

    /// The screen as text, one line per row, trailing blanks trimmed.
    pub fn screen(&self) -> String {
        self.pty.screen()
    }

    /// Everything the CLI printed, escape sequences included.
    pub fn raw_output(&self) -> String {
        self.pty.raw_output()
    }

    /// The tail of the `--debug-file` log, for failure messages.
    pub fn debug_tail(&self, lines: usize) -> String {
        let Some(path) = &self.config.debug_file else {
            return String::new();
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Waits until `pred` holds for the screen; returns that screen, or
    /// `None` after `timeout` or once the CLI has exited.
    pub async fn try_wait_screen(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        self.pty.try_wait_screen(timeout, pred).await
    }

    /// Waits until `pred` holds for the screen; returns that screen. Panics
    /// after `timeout` with the screen and the debug log's tail.
    pub async fn wait_screen(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        if let Some(screen) = self.try_wait_screen(timeout, pred).await {
            return screen;
        }
        panic!(
            "claude: {} waiting for {what} after {timeout:?}.\n--- screen ---\n{}\n\
             --- debug log (tail) ---\n{}",
            if self.pty.ended() {
                "exited"
            } else {
                "timed out"
            },
            self.screen(),
            self.debug_tail(40)
        );
    }
    /// True once `needle` is on the screen, false after `timeout`.
    pub async fn shows(&mut self, needle: &str, timeout: Duration) -> bool {
        self.try_wait_screen(timeout, |s| s.contains(needle))
            .await
            .is_some()
    }

    /// Waits until `needle` is on the screen.
    pub async fn wait_for_text(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_screen(&format!("{needle:?} on the screen"), timeout, |s| {
            s.contains(needle)
        })
        .await
    }

    /// Waits until the prompt input is ready for typing.
    pub async fn wait_ready(&mut self, timeout: Duration) -> String {
        // In auto mode the mode's banner takes the shortcuts hint's place.
        self.wait_screen("the prompt", timeout, |s| {
            (s.contains("? for shortcuts") || s.contains("auto mode on")) && s.contains('❯')
        })
        .await
    }

    /// Writes raw bytes to the terminal (keys).
    pub fn send_keys(&mut self, bytes: &[u8]) {
        self.pty.send_keys(bytes);
    }

    /// Types `text` (its bytes, as they are).
    pub fn type_text(&mut self, text: &str) {
        self.send_keys(text.as_bytes());
    }

    fn press_enter(&mut self) {
        self.send_keys(b"\r");
    }

    /// Types `prompt`, waits until the screen shows it once more than before
    /// (the input box echoing it, so Enter is not taken as part of a paste),
    /// and presses Enter.
    pub async fn submit(&mut self, prompt: &str, timeout: Duration) {
        let before = self.screen().matches(prompt).count();
        self.type_text(prompt);
        self.wait_screen(&format!("{prompt:?} in the input box"), timeout, |s| {
            s.matches(prompt).count() > before
        })
        .await;
        self.press_enter();
    }

    /// The CLI process's environment, from /proc.
    pub fn process_env(&self) -> Vec<(String, String)> {
        let raw = std::fs::read(format!("/proc/{}/environ", self.pid())).unwrap_or_default();
        raw.split(|b| *b == 0)
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                match kv.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (kv.into_owned(), String::new()),
                }
            })
            .collect()
    }

    /// Kills the CLI's whole process group (it is a session leader), reaps
    /// it and ends the reader thread.
    pub fn kill(&mut self) {
        self.pty.kill();
    }
}

/// The service's environment for a CLI that must reach the fake API:
/// [`ClaudeConfig::environment`] (minus TERM, which the service sets) plus
/// `MOONKALE_CLAUDE_BIN`.
pub fn claude_env(sb: &crate::Sandbox, fake: &FakeApi) -> (ClaudeConfig, Vec<(String, String)>) {
    let config = ClaudeConfig::new(&sb.home, &sb.workspace, fake.port);
    seed_home(&sb.home, &[&sb.workspace]);
    std::fs::create_dir_all(&config.tmp).unwrap();
    let mut env: Vec<(String, String)> = config
        .environment()
        .into_iter()
        .filter(|(k, _)| k != "TERM")
        .collect();
    env.push((
        "MOONKALE_CLAUDE_BIN".into(),
        claude_bin().display().to_string(),
    ));
    (config, env)
}

// ---------------------------------------------------------------------------
// The CLI in the world of a test

/// The CLI's own permission question for an edit (shown while `openDiff`
/// waits).
pub const EDIT_QUESTION: &str = "Do you want to make this edit to";
/// What the CLI shows after the IDE answered `DIFF_REJECTED`.
pub const REJECTED_TEXT: &str = "Rejected update to";

/// The world's side of a test with the real CLI in a pty: the editor's
/// selection shown in the CLI, the CLI started with the world's settings,
/// and the user's side of a proposed edit.
impl World {
    /// Selects `[start, end)` in `uri` (start = end: the cursor) and makes
    /// sure the CLI got it: waits until its prompt box shows `shown`
    /// (`⧉ N lines selected`, `⧉ In <file>`), which also proves that the CLI
    /// is connected and will use the IDE in the next turn.
    ///
    /// The service pushes the selection 100 ms after the CLI's
    /// `initialized`, again 500 ms after its `tools/list` (CLI 2.1.332 only
    /// listens once its UI has taken in the connection, which under load
    /// can miss the first push), and on every change. Should the CLI still
    /// not show it, the cursor goes elsewhere and back (two real changes,
    /// each pushed), up to [`STEP`].
    pub async fn show_in_cli(
        &mut self,
        cli: &mut Claude,
        uri: &str,
        start: (u32, u32),
        end: (u32, u32),
        shown: &str,
    ) {
        let deadline = tokio::time::Instant::now() + STEP;
        let elsewhere = if start == (0, 0) && end == (0, 0) {
            (1, 0)
        } else {
            (0, 0)
        };
        let retry = Duration::from_millis(1000);
        loop {
            self.select(uri, start, end).await;
            if cli.shows(shown, retry).await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the CLI never showed {shown:?}:\n{}",
                cli.screen()
            );
            eprintln!(
                "the CLI does not show {shown:?} yet: moving the cursor to push the selection again"
            );
            self.cursor(uri, elsewhere).await;
            cli.shows("⧉ In ", retry).await;
        }
    }

    /// The default CLI setup for this world: HOME is the sandbox's home (where
    /// the service put its lock file), the fake API, `--permission-mode
    /// default`, and `CLAUDE_CODE_SSE_PORT` (as the editor's terminal would
    /// set it) unless `configure` removes it.
    pub fn config(&self, cwd: &Path) -> ClaudeConfig {
        ClaudeConfig::new(&self.sb.home, cwd, self.fake.port).sse_port(self.ide_port())
    }

    /// Starts the CLI in `cwd`, waits for its prompt, and checks that its
    /// environment carries none of the service's secrets.
    pub async fn claude(
        &self,
        cwd: &Path,
        configure: impl FnOnce(ClaudeConfig) -> ClaudeConfig,
    ) -> Claude {
        let mut cli = Claude::spawn(configure(self.config(cwd)));
        // After the prompt shows, the process has surely exec'd (before that
        // /proc may still show the forked copy of our own environment).
        cli.wait_ready(STEP).await;
        self.assert_env_clean(&cli);
        cli
    }

    /// The CLI in the world's jail ([`crate::world::WorldBuilder::jailed`]),
    /// started as a user of a sandbox does: `moonkale-service claude
    /// --sandbox -- <enter the jail> claude <args>`, its HOME the jail's, in
    /// `cwd`; returns once its prompt shows. Its IDE link can only be the
    /// sandbox link: the jail's loopback has no IDE port.
    pub async fn jailed_claude(
        &self,
        cwd: &Path,
        configure: impl FnOnce(ClaudeConfig) -> ClaudeConfig,
    ) -> Claude {
        let jail = self.jail();
        let mut launcher = vec![
            crate::bin("moonkale-service").display().to_string(),
            "claude".into(),
            "--sandbox".into(),
        ];
        if let Some(inside) = jail.workspace_inside() {
            launcher.push("--sandbox-path".into());
            launcher.push(format!(
                "{}={}",
                self.sb.workspace.display(),
                inside.display()
            ));
        }
        launcher.push("--".into());
        launcher.extend(jail.enter());
        let mut config = ClaudeConfig::new(jail.home(), cwd, self.fake.port)
            .launcher(launcher)
            .env("XDG_RUNTIME_DIR", &self.sb.runtime.display().to_string());
        config
            .also_trusted
            .extend(jail.workspace_inside().map(Path::to_path_buf));
        let mut cli = Claude::spawn(configure(config));
        cli.wait_ready(STEP).await;
        cli
    }

    /// The CLI got only what [`ClaudeConfig::environment`] built: no lock
    /// token, no service token, no `MOONKALE_*`, nothing of ours.
    fn assert_env_clean(&self, cli: &Claude) {
        let env = cli.process_env();
        let ide_token = self.ide_token();
        assert!(!env.is_empty(), "cannot read the CLI's environment");
        let service_token = std::fs::read_to_string(&self.svc().info.token_file).unwrap();
        let service_token = service_token.trim();
        for (k, v) in &env {
            assert!(
                !k.starts_with("MOONKALE") && k != "XDG_RUNTIME_DIR",
                "the CLI inherited {k}"
            );
            assert!(
                !v.contains(&ide_token) && (service_token.is_empty() || !v.contains(service_token)),
                "a service token leaked into the CLI's {k}"
            );
        }
    }

    /// The user's side of an accepted edit: opens the proposal the editor
    /// was shown (`show`, a `window/showDocument` request), checks it holds
    /// the model's `hello EDITED` edit, tweaks "EDITED" into "TWEAKED" and
    /// accepts it with `moonkale.acceptProposal`.
    pub async fn tweak_and_accept(&mut self, show: &Value) {
        let proposal = show["params"]["uri"].as_str().unwrap().to_owned();
        assert!(proposal.contains(crate::PROPOSALS), "{proposal}");
        let proposed = std::fs::read_to_string(proposal.strip_prefix("file://").unwrap()).unwrap();
        assert_eq!(proposed, "hello EDITED\nsecond line\n");
        self.ed.did_open(&proposal, 1, &proposed).await;
        self.ed
            .notify(
                "textDocument/didChange",
                json!({"textDocument": {"uri": proposal, "version": 2}, "contentChanges": [{
                    "range": {"start": {"line": 0, "character": 6}, "end": {"line": 0, "character": 12}},
                    "text": "TWEAKED"}]}),
            )
            .await;
        self.ed
            .call(
                "workspace/executeCommand",
                json!({"command": "moonkale.acceptProposal", "arguments": [proposal]}),
            )
            .await;
    }

    /// The tweaked edit landed: the Edit's result says `updated` and that
    /// the user modified the change, the model finished, and `path` holds
    /// the tweaked text.
    pub async fn assert_tweak_landed(&self, cli: &mut Claude, path: &Path, updated: &str) {
        let result =
            assert_modified_edit_landed(&self.fake, cli, path, "hello TWEAKED\nsecond line\n")
                .await;
        assert!(result.text.contains(updated), "{}", result.text);
    }
}

/// An edit the user changed before accepting it landed: the Edit's result
/// says the user modified the change, the model said `EDIT_DONE`, and
/// `path` holds `text`. The Edit's result, for more checks.
pub async fn assert_modified_edit_landed(
    fake: &FakeApi,
    cli: &mut Claude,
    path: &Path,
    text: &str,
) -> ToolResult {
    let result = edit_result(fake).await;
    assert!(!result.is_error, "{}", result.text);
    assert!(
        result
            .text
            .contains("The user modified your proposed changes"),
        "{}",
        result.text
    );
    cli.wait_for_text("EDIT_DONE", STEP).await;
    assert_eq!(std::fs::read_to_string(path).unwrap(), text);
    result
}

/// A script in which the model answers `prompt` by reading `path` (the CLI
/// refuses an Edit of a file not read in the session), then proposes
/// replacing `old` with `new` there, then says `done`.
pub fn edit_script(prompt: &str, path: &Path, old: &str, new: &str, done: &str) -> Script {
    let file = path.display().to_string();
    Script::new()
        .on_prompt(prompt, Reply::tool_use("Read", json!({"file_path": file})))
        .after_tool(
            "Read",
            Reply::tool_use(
                "Edit",
                json!({"file_path": file, "old_string": old, "new_string": new, "replace_all": false}),
            ),
        )
        .after_tool("Edit", Reply::text(done))
}

/// The result of the model's Edit, as the CLI sent it back to the model.
pub async fn edit_result(fake: &FakeApi) -> ToolResult {
    fake.wait_tool_result("Edit", STEP).await.1
}
