//! The world of an end-to-end test: a sandbox, the service, the fake
//! Anthropic API and a first editor connected to the service, built by one
//! [`WorldBuilder`].
//!
//! With [`WorldBuilder::agent`] the service runs the `claude` CLI headless
//! (the real one, or a stand-in) against the fake: the CLI is spawned with
//! a scrubbed environment, so it finds the fake through
//! `<home>/.claude/settings.json` ([`crate::agent::write_claude_settings`]).
//! Without it, the fake is there for a CLI the test starts itself
//! ([`crate::claude_cli`]).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::{processes_in, write_claude_settings};
use crate::claude_cli::{claude_bin, claude_env};
use crate::fakeapi::{FakeApi, Script};
use crate::jail::Jail;
use crate::lsp::{Client, Diag, buttons_caps, plain_caps};
use crate::{STEP, Sandbox, Service};

/// How to build a [`World`]: the files of the workspace, the fake's script,
/// the service's arguments and environment, and the first editor.
pub struct WorldBuilder {
    sandbox: Option<Sandbox>,
    files: Vec<(String, String)>,
    script: Script,
    agent: bool,
    claude: Option<PathBuf>,
    claude_in_terminals: bool,
    env: Vec<(String, String)>,
    args: Vec<String>,
    editor: String,
    caps: Value,
    /// The first client's `initializationOptions`.
    options: Value,
    jailed: bool,
    /// Where the jail sees the workspace, when not at its own path.
    workspace_inside: Option<PathBuf>,
}

impl WorldBuilder {
    /// The service runs the `claude` CLI (the real one, [`claude_bin`],
    /// unless [`WorldBuilder::claude`] names another) against the fake.
    pub fn agent(mut self) -> WorldBuilder {
        self.agent = true;
        self
    }

    /// [`WorldBuilder::agent`] with `bin` as the CLI (`None`: the real
    /// one).
    pub fn claude(mut self, bin: impl Into<Option<PathBuf>>) -> WorldBuilder {
        self.claude = bin.into();
        self.agent()
    }

    /// The service's terminals can run the real CLI against the fake: its
    /// HOME is seeded and the service gets the CLI's environment
    /// ([`claude_env`]).
    pub fn claude_in_terminals(mut self) -> WorldBuilder {
        self.claude_in_terminals = true;
        self
    }

    /// What the fake API answers (default: an empty [`Script`]).
    pub fn script(mut self, script: Script) -> WorldBuilder {
        self.script = script;
        self
    }

    /// A file (relative to the workspace) written before the start.
    pub fn file(mut self, rel: impl Into<String>, text: impl Into<String>) -> WorldBuilder {
        self.files.push((rel.into(), text.into()));
        self
    }

    /// [`WorldBuilder::file`] for each of `files`.
    pub fn files(mut self, files: impl IntoIterator<Item = (String, String)>) -> WorldBuilder {
        self.files.extend(files);
        self
    }

    /// More environment for the service (and so, scrubbed, for its CLIs and
    /// terminals).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> WorldBuilder {
        self.env.push((key.into(), value.into()));
        self
    }

    /// `MOONKALE_APPROVAL_TIMEOUT_MS`.
    pub fn approval_timeout_ms(self, ms: u64) -> WorldBuilder {
        self.env("MOONKALE_APPROVAL_TIMEOUT_MS", ms.to_string())
    }

    /// More arguments for `serve`.
    pub fn arg(mut self, arg: impl Into<String>) -> WorldBuilder {
        self.args.push(arg.into());
        self
    }

    /// The first editor's name and capabilities (default: `editor-a`, with
    /// buttons).
    pub fn editor(mut self, name: &str, caps: Value) -> WorldBuilder {
        self.editor = name.to_owned();
        self.caps = caps;
        self
    }

    /// The first client is an observer (a front end, not an editor): the
    /// workspace has no editor attached.
    pub fn observer(mut self) -> WorldBuilder {
        self.options = json!({"moonkaleRole": "observer"});
        self
    }

    /// The first editor does not show buttons.
    pub fn without_buttons(mut self) -> WorldBuilder {
        self.caps = plain_caps();
        self
    }

    /// A [`Jail`] beside the world (its own loopback and HOME; the host's
    /// HOME and runtime directory hidden), with the fake API listening on
    /// the jail's loopback: a CLI started inside reaches the model, and
    /// reaches the service only through a sandbox link.
    pub fn jailed(mut self) -> WorldBuilder {
        self.jailed = true;
        self
    }

    /// As [`Self::jailed`], in a jail that sees the workspace only at
    /// `inside` ([`Jail::with_workspace_at`]).
    pub fn jailed_with_workspace_at(mut self, inside: &str) -> WorldBuilder {
        self.jailed = true;
        self.workspace_inside = Some(PathBuf::from(inside));
        self
    }

    /// Builds the world in `sb`, which the test prepared (the default is a
    /// fresh sandbox).
    pub fn in_sandbox(mut self, sb: Sandbox) -> WorldBuilder {
        self.sandbox = Some(sb);
        self
    }

    /// Writes the files, starts the fake API and the service, and connects
    /// the first editor.
    pub async fn start(self) -> World {
        let sb = self.sandbox.unwrap_or_default();
        for (rel, text) in &self.files {
            let path = sb.workspace.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let jail = self.jailed.then(|| match &self.workspace_inside {
            Some(inside) => Jail::with_workspace_at(&sb, inside),
            None => Jail::new(&sb),
        });
        let fake = match &jail {
            Some(jail) => FakeApi::start_in(self.script, jail).await,
            None => FakeApi::start(self.script).await,
        };
        let mut env = Vec::new();
        if self.agent {
            write_claude_settings(&sb.home, fake.port);
            let claude = self.claude.unwrap_or_else(claude_bin);
            env.push((
                "MOONKALE_CLAUDE_BIN".to_owned(),
                claude.display().to_string(),
            ));
        }
        if self.claude_in_terminals {
            env.extend(claude_env(&sb, &fake).1);
        }
        env.extend(self.env);
        let svc = start_service(&sb, &self.args, &env).await;
        let diag = diag(&sb, &fake);
        let ed = Client::connect_with(
            &svc,
            &self.editor,
            self.caps.clone(),
            self.options.clone(),
            diag,
        )
        .await;
        World {
            jail,
            ed,
            svc: Some(svc),
            fake,
            env,
            args: self.args,
            editor: (self.editor, self.caps, self.options),
            sb,
        }
    }
}

/// Starts the service in `sb` with `args` and `env`.
async fn start_service(sb: &Sandbox, args: &[String], env: &[(String, String)]) -> Service {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sb.start_service_with_env(&args, &env).await
}

/// What failure messages show: the service's log and the fake's requests.
fn diag(sb: &Sandbox, fake: &FakeApi) -> Diag {
    Diag {
        service_log: sb.root.join("service.log"),
        fake: Some(fake.log_handle()),
    }
}

/// The service, the fake API and a first editor. Fields drop in order: the
/// editor, the service, the fake, the sandbox.
pub struct World {
    /// The first editor.
    pub ed: Client,
    svc: Option<Service>,
    pub fake: FakeApi,
    /// The service's extra environment.
    env: Vec<(String, String)>,
    args: Vec<String>,
    /// The first editor's name and capabilities.
    editor: (String, Value, Value),
    /// The jail of a [`WorldBuilder::jailed`] world.
    pub jail: Option<Jail>,
    pub sb: Sandbox,
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(mut svc) = self.svc.take() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(svc.pid(), libc::SIGTERM) };
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                if !matches!(svc.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // `MOONKALE_TEST_KEEP_LOGS=DIR` keeps each test's service logs.
        if let Some(dir) = std::env::var_os("MOONKALE_TEST_KEEP_LOGS") {
            let test = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .replace("::", "-");
            let dir = PathBuf::from(dir).join(test);
            let _ = std::fs::create_dir_all(&dir);
            for e in std::fs::read_dir(&self.sb.root)
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = e.file_name();
                if name.to_string_lossy().starts_with("service.log") {
                    let _ = std::fs::copy(e.path(), dir.join(name));
                }
            }
        }
        // Whatever the service left running in our sandbox (its CLIs): gone.
        for pid in processes_in(&self.sb.root) {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl World {
    /// The jail of a [`WorldBuilder::jailed`] world.
    pub fn jail(&self) -> &Jail {
        self.jail.as_ref().expect("a jailed world")
    }

    /// `moonkale-service sandbox set [--sandbox-path PAIR…] -- <the jail's
    /// claude command>` for the workspace, as a user would; what it printed.
    pub async fn set_jail_as_default_sandbox(&self, paths: &[&str]) -> String {
        let ws = self.sb.workspace.display().to_string();
        let mut set = vec!["sandbox", "set", "--workspace", &ws];
        for pair in paths {
            set.extend(["--sandbox-path", pair]);
        }
        set.push("--");
        let sandbox = self.jail().claude_command();
        set.extend(sandbox.iter().map(String::as_str));
        let out = self.command(&set).output().await.expect("sandbox set");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// How to build a world: nothing in the workspace, an empty script, no
    /// agent, `editor-a` with buttons.
    pub fn builder() -> WorldBuilder {
        WorldBuilder {
            sandbox: None,
            files: Vec::new(),
            script: Script::new(),
            agent: false,
            claude: None,
            claude_in_terminals: false,
            env: Vec::new(),
            args: Vec::new(),
            editor: "editor-a".to_owned(),
            caps: buttons_caps(),
            options: Value::Null,
            jailed: false,
            workspace_inside: None,
        }
    }

    /// The world of an agent test: the service runs the real CLI against
    /// the fake answering from `script`.
    pub async fn agent(script: Script) -> World {
        World::builder().agent().script(script).start().await
    }

    /// The world of a test with the real CLI in a pty: `files` in the
    /// workspace, the fake answering from `script`, and a scripted editor
    /// (utf-16, like VS Code).
    pub async fn start(files: &[(&str, &str)], script: Script) -> World {
        World::builder()
            .files(files.iter().map(|(r, t)| (r.to_string(), t.to_string())))
            .script(script)
            .editor("scripted-editor", plain_caps())
            .start()
            .await
    }

    /// The running service.
    pub fn svc(&self) -> &Service {
        self.svc.as_ref().expect("the service is running")
    }

    /// The running service, to wait for it or signal it.
    pub fn svc_mut(&mut self) -> &mut Service {
        self.svc.as_mut().expect("the service is running")
    }

    /// What failure messages show: the service's log and the fake's
    /// requests.
    pub fn diag(&self) -> Diag {
        diag(&self.sb, &self.fake)
    }

    /// Another editor on the service.
    pub async fn client(&self, name: &str, caps: Value) -> Client {
        Client::connect(self.svc(), name, caps, self.diag()).await
    }

    /// The path of `rel` in the workspace.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.sb.workspace.join(rel)
    }

    /// The IDE WebSocket port (the lock file's name).
    pub fn ide_port(&self) -> u16 {
        self.svc()
            .info
            .ide_port
            .expect("the service runs an IDE server")
    }

    /// The token of the service's lock file for Claude Code.
    pub fn ide_token(&self) -> String {
        let (_, lock) = crate::ide_lock(&self.sb, self.svc());
        lock["authToken"].as_str().expect("token").to_owned()
    }

    /// The service's whole log so far.
    pub fn service_log(&self) -> String {
        std::fs::read_to_string(self.sb.root.join("service.log")).unwrap_or_default()
    }

    /// The last `lines` of the service's log, for failure messages.
    pub fn service_log_tail(&self, lines: usize) -> String {
        let text = self.service_log();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Pids of the CLIs the service started, from its log.
    pub fn cli_pids(&self) -> Vec<i32> {
        self.service_log()
            .lines()
            .filter(|l| l.contains("started claude"))
            .filter_map(|l| {
                l.split("pid=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    }

    /// Stops the service with SIGTERM and waits until its process is gone.
    pub async fn stop_service(&mut self) {
        let mut svc = self.svc.take().expect("the service is running");
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(svc.pid(), libc::SIGTERM) };
        let status = tokio::time::timeout(STEP, svc.child.wait()).await;
        assert!(
            status.is_ok(),
            "the service did not exit within {STEP:?} of SIGTERM\n{}",
            self.diag().context()
        );
    }

    /// Starts the service again (same sandbox, arguments and environment);
    /// the old log is kept as `service.log.<n>`. Connects a fresh first
    /// editor.
    pub async fn restart_service(&mut self) {
        assert!(self.svc.is_none(), "stop the service first");
        let log = self.sb.root.join("service.log");
        for n in 1.. {
            let old = self.sb.root.join(format!("service.log.{n}"));
            if !old.exists() {
                let _ = std::fs::rename(&log, old);
                break;
            }
        }
        self.svc = Some(start_service(&self.sb, &self.args, &self.env).await);
        let (name, caps, options) = self.editor.clone();
        self.ed = Client::connect_with(self.svc(), &name, caps, options, self.diag()).await;
    }

    /// `moonkale-service <args>` pointed at this sandbox, with the
    /// service's environment.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = self.sb.command("moonkale-service");
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd.args(args);
        cmd
    }

    /// Opens a workspace file in the first editor with its text on disk;
    /// returns its URI.
    pub async fn open(&mut self, rel: &str) -> String {
        let uri = self.sb.uri(rel);
        let text = std::fs::read_to_string(self.path(rel)).unwrap();
        self.ed.did_open(&uri, 1, &text).await;
        self.ed.barrier().await;
        uri
    }

    /// The first editor forwards one diagnostic of source `lint` on line 2,
    /// columns 0–6 of `uri` (`moonkale/publishDiagnostics`).
    pub async fn publish_diagnostic(&mut self, uri: &str, severity: u32, message: &str) {
        self.ed
            .notify(
                "moonkale/publishDiagnostics",
                json!({"uri": uri, "source": "lint", "diagnostics": [
                    {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 6}},
                     "severity": severity, "message": message, "source": "lint"}]}),
            )
            .await;
    }

    /// Selects `[start, end)` (0-based line, utf-16 column) in `uri`.
    pub async fn select(&mut self, uri: &str, start: (u32, u32), end: (u32, u32)) {
        self.ed
            .notify(
                "moonkale/selectionChanged",
                json!({"textDocument": {"uri": uri}, "selection": {
                    "start": {"line": start.0, "character": start.1},
                    "end": {"line": end.0, "character": end.1}}}),
            )
            .await;
        self.ed.barrier().await;
    }

    /// Puts the editor's cursor at `at` in `uri` (an empty selection): the
    /// connected CLI then shows `⧉ In <file name>` in its prompt box.
    pub async fn cursor(&mut self, uri: &str, at: (u32, u32)) {
        self.select(uri, at, at).await;
    }
}
