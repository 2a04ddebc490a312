//! The world of an end-to-end test with the real CLI: the service, a
//! scripted LSP editor attached to it, the fake API, and the helpers the
//! tests share (see tests/tests/claude_cli.rs for how they fit together).

#![allow(dead_code)] // each test file uses a different part of the support code

use std::path::{Path, PathBuf};
use std::time::Duration;

use moonkale_tests::{RawLsp, Sandbox, Service, ide_lock};
use serde_json::{Value, json};

use super::claude_cli::{Claude, ClaudeConfig};
use super::fakeapi::{FakeApi, Reply, Script, ToolResult};

/// The longest any single step may take (each test stays well under 30 s;
/// a step normally takes well under a second once the CLI is up).
pub const STEP: Duration = Duration::from_secs(15);

/// The CLI's own permission question for an edit (shown while `openDiff`
/// waits).
pub const EDIT_QUESTION: &str = "Do you want to make this edit to";
/// What the CLI shows after the IDE answered `DIFF_REJECTED`.
pub const REJECTED_TEXT: &str = "Rejected update to";

/// The service, a scripted LSP editor attached to it, and the fake API.
/// Fields drop in order: the editor, the service, the fake, and last the
/// sandbox's folders.
pub struct World {
    pub ed: RawLsp,
    pub svc: Service,
    pub fake: FakeApi,
    /// The IDE WebSocket port (the lock file's name).
    pub ide_port: u16,
    /// The lock file's token: must never reach the CLI's environment.
    pub ide_token: String,
    pub sb: Sandbox,
}

impl World {
    /// The last `lines` of the service's log, for failure messages.
    pub fn service_log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.sb.root.join("service.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Writes `files` (paths relative to the workspace) and starts the
    /// service, the editor (utf-16, like VS Code) and the fake API.
    pub async fn start(files: &[(&str, &str)], script: Script) -> World {
        let sb = Sandbox::new();
        for (rel, text) in files {
            let path = sb.workspace.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let svc = sb.start_service(&[]).await;
        let (ide_port, lock) = ide_lock(&sb, &svc);
        let ide_token = lock["authToken"].as_str().expect("token").to_owned();
        let mut ed = svc.connect().await;
        ed.initialize("scripted-editor", &["utf-16"], Value::Null)
            .await;
        let fake = FakeApi::start(script).await;
        World {
            sb,
            svc,
            ed,
            fake,
            ide_port,
            ide_token,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.sb.workspace.join(rel)
    }

    /// Opens a workspace file in the editor with its text on disk; returns
    /// its URI.
    pub async fn open(&mut self, rel: &str) -> String {
        let uri = self.sb.uri(rel);
        let text = std::fs::read_to_string(self.path(rel)).unwrap();
        self.ed.did_open(&uri, 1, &text).await;
        self.ed.barrier().await;
        uri
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
        ClaudeConfig::new(&self.sb.home, cwd, self.fake.port).sse_port(self.ide_port)
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

    /// The CLI got only what [`ClaudeConfig::environment`] built: no lock
    /// token, no service token, no `MOONKALE_*`, nothing of ours.
    pub fn assert_env_clean(&self, cli: &Claude) {
        let env = cli.process_env();
        assert!(!env.is_empty(), "cannot read the CLI's environment");
        let service_token = std::fs::read_to_string(&self.svc.info.token_file).unwrap();
        let service_token = service_token.trim();
        for (k, v) in &env {
            assert!(
                !k.starts_with("MOONKALE") && k != "XDG_RUNTIME_DIR",
                "the CLI inherited {k}"
            );
            assert!(
                !v.contains(&self.ide_token)
                    && (service_token.is_empty() || !v.contains(service_token)),
                "a service token leaked into the CLI's {k}"
            );
        }
    }
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

/// The next request the service sends the editor with `method` (other
/// messages are kept in `ed.notifications`). Times out after the harness's
/// TIMEOUT.
pub async fn editor_request(ed: &mut RawLsp, method: &str) -> Value {
    if let Some(i) = ed
        .notifications
        .iter()
        .position(|m| m["method"] == method && m.get("id").is_some())
    {
        return ed.notifications.remove(i);
    }
    loop {
        let msg = ed.recv().await;
        if msg["method"] == method && msg.get("id").is_some() {
            return msg;
        }
        ed.notifications.push(msg);
    }
}

impl World {
    /// The user's side of an accepted edit: opens the proposal the editor
    /// was shown (`show`, a `window/showDocument` request), checks it holds
    /// the model's `hello EDITED` edit, tweaks "EDITED" into "TWEAKED" and
    /// accepts it with `moonkale.acceptProposal`.
    pub async fn tweak_and_accept(&mut self, show: &Value) {
        let proposal = show["params"]["uri"].as_str().unwrap().to_owned();
        assert!(proposal.contains("/.moonkale/proposals/"), "{proposal}");
        let proposed = std::fs::read_to_string(proposal.strip_prefix("file://").unwrap()).unwrap();
        assert_eq!(proposed, "hello EDITED\nsecond line\n");
        self.ed.did_open(&proposal, 1, &proposed).await;
        self.ed
            .did_change(&proposal, 2, [0, 6, 0, 12], "TWEAKED")
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
        let result = edit_result(&self.fake).await;
        assert!(!result.is_error, "{}", result.text);
        assert!(result.text.contains(updated), "{}", result.text);
        assert!(
            result
                .text
                .contains("The user modified your proposed changes"),
            "{}",
            result.text
        );
        cli.wait_for_text("EDIT_DONE", STEP).await;
        assert_eq!(
            std::fs::read_to_string(path).unwrap(),
            "hello TWEAKED\nsecond line\n"
        );
    }
}
