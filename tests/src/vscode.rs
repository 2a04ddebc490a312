//! VS Code for the end-to-end tests (tests/tests/vscode.rs): code-server
//! 4.100.3 (VS Code 1.100.3 served to a browser) in a sandbox with only the
//! extension of `vscode-test-harness/extension`, installed from its .vsix,
//! and headless Chromium driven by `vscode-test-harness/driver/drive.js` one
//! JSON command at a time.
//!
//! Everything comes from `vscode-test-harness/install.sh` (called by
//! `scripts/install-test-peers.sh`); `$MOONKALE_CODE_SERVER` names another
//! code-server executable.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

use crate::{Sandbox, bin};

pub const CODE_SERVER_VERSION: &str = "4.100.3";

/// How long one browser step may take: loading the workbench in a headless
/// Chromium on a busy 2-core machine is the slowest.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// VS Code's workbench in headless Chromium takes most of a core while it
/// loads; on 2 cores, several at once miss their deadlines. The tests of a
/// binary take turns: hold this for the whole test.
pub async fn take_turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

fn harness_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .join("vscode-test-harness")
}

/// `$MOONKALE_CODE_SERVER`, else the one the install script puts in .peers/.
pub fn code_server_bin() -> PathBuf {
    crate::peer_bin(
        "MOONKALE_CODE_SERVER",
        &format!("code-server-{CODE_SERVER_VERSION}/node_modules/.bin/code-server"),
    )
}

/// A code-server serving the sandbox's workspace; killed when dropped, with
/// every process it started.
pub struct CodeServer {
    _group: ProcessGroup,
    pub port: u16,
    /// code-server's extensions folder (`--extensions-dir`).
    pub extensions: PathBuf,
    /// Where the extension was installed from its .vsix, inside `extensions`.
    pub installed: PathBuf,
    /// code-server's own output, for failure reports.
    pub log: PathBuf,
}

impl CodeServer {
    /// Starts code-server with the extension installed from its .vsix
    /// (`code-server --install-extension`, as a user installs it, into the
    /// test's own extensions folder) and user settings
    /// that keep welcome pages and update checks out of the way; returns once
    /// it listens. VS Code's terminals inherit `env`. The extension's LSP
    /// traffic is traced into its output channel (for failure reports).
    pub async fn start(sandbox: &Sandbox, env: &[(String, String)]) -> CodeServer {
        CodeServer::start_traced(sandbox, env, true).await
    }

    /// [`CodeServer::start`] with the extension at its defaults (no trace:
    /// each traced message is more work for VS Code's page), for the bench.
    pub async fn start_untraced(sandbox: &Sandbox, env: &[(String, String)]) -> CodeServer {
        CodeServer::start_traced(sandbox, env, false).await
    }

    async fn start_traced(sandbox: &Sandbox, env: &[(String, String)], trace: bool) -> CodeServer {
        let dir = sandbox.root.join("vscode");
        let extensions = dir.join("extensions");
        let user = dir.join("user-data/User");
        std::fs::create_dir_all(&extensions).expect("mkdir extensions");
        std::fs::create_dir_all(&user).expect("mkdir user data");
        let installed = install_extension(&dir, &extensions, &sandbox.home).await;
        let mut settings = json!({
            "workbench.startupEditor": "none",
            "workbench.tips.enabled": false,
            "workbench.enableExperiments": false,
            "security.workspace.trust.enabled": false,
            "extensions.autoCheckUpdates": false,
            "extensions.autoUpdate": false,
            "extensions.ignoreRecommendations": true,
            "telemetry.telemetryLevel": "off",
            "update.mode": "none",
            "files.autoSave": "off",
            "editor.minimap.enabled": false,
            // The DOM renderer: the terminal's text can be read from the page.
            "terminal.integrated.gpuAcceleration": "off",
        });
        if trace {
            settings["moonkale.trace.server"] = json!("verbose");
        }
        std::fs::write(user.join("settings.json"), settings.to_string())
            .expect("write settings.json");

        let log = dir.join("code-server.log");
        let mut cmd = tokio::process::Command::new(code_server_bin());
        cmd.args(["--auth", "none", "--bind-addr", "127.0.0.1:0"])
            .args([
                "--disable-telemetry",
                "--disable-update-check",
                "--disable-workspace-trust",
                "--disable-getting-started-override",
            ])
            .arg("--user-data-dir")
            .arg(dir.join("user-data"))
            .arg("--extensions-dir")
            .arg(&extensions)
            .arg(&sandbox.workspace)
            .current_dir(&sandbox.workspace)
            .env("HOME", &sandbox.home)
            .env("XDG_CONFIG_HOME", sandbox.home.join(".config"))
            .env("XDG_DATA_HOME", sandbox.home.join(".local/share"))
            .env("XDG_RUNTIME_DIR", &sandbox.runtime)
            .env("MOONKALE_SHIM", bin("moonkale-shim"))
            .env("MOONKALE_SERVICE_BIN", bin("moonkale-service"))
            .env("MOONKALE_LOG", "warn")
            .env_remove("VSCODE_IPC_HOOK_CLI")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("code-server log"))
            .process_group(0);
        let mut child = cmd.spawn().expect("start code-server");
        let group = ProcessGroup(child.id().expect("pid") as i32);
        let stdout = child.stdout.take().expect("stdout");
        let port = tokio::time::timeout(STEP_TIMEOUT, listening_port(stdout, log.clone()))
            .await
            .unwrap_or_else(|_| panic!("code-server did not start; see {}", log.display()));
        CodeServer {
            _group: group,
            port,
            extensions,
            installed,
            log,
        }
    }

    /// The page that opens `folder` in VS Code.
    pub fn url(&self, folder: &Path) -> String {
        format!(
            "http://127.0.0.1:{}/?folder={}",
            self.port,
            folder.display()
        )
    }
}

/// The extension's manifest (`vscode-test-harness/extension/package.json`).
pub fn extension_manifest() -> Value {
    let path = harness_dir().join("extension/package.json");
    serde_json::from_slice(&std::fs::read(&path).expect("the extension's package.json"))
        .expect("package.json is JSON")
}

/// The extension's id and the folder VS Code installs it into:
/// `<publisher>.<name>` and `<publisher>.<name>-<version>`, lower case.
pub fn extension_id() -> (String, String) {
    let manifest = extension_manifest();
    let field = |name: &str| manifest[name].as_str().expect(name).to_lowercase();
    let id = format!("{}.{}", field("publisher"), field("name"));
    let folder = format!("{id}-{}", field("version"));
    (id, folder)
}

/// The extension's package as `vscode-test-harness/install.sh` builds it
/// (`npm run package`: `<name>-<version>.vsix` beside its package.json),
/// checked to be newer than what it is built from.
pub fn extension_vsix() -> PathBuf {
    let extension = harness_dir().join("extension");
    let manifest = extension_manifest();
    let vsix = extension.join(format!(
        "{}-{}.vsix",
        manifest["name"].as_str().expect("name"),
        manifest["version"].as_str().expect("version")
    ));
    let built = std::fs::metadata(&vsix)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: run vscode-test-harness/install.sh",
                vsix.display()
            )
        });
    let sources = std::fs::read_dir(extension.join("src"))
        .expect("the extension's src/")
        .flatten()
        .map(|e| e.path())
        .chain(
            [
                "package.json",
                "package-lock.json",
                ".vscodeignore",
                "tsconfig.json",
            ]
            .map(|f| extension.join(f)),
        );
    for source in sources {
        let changed = std::fs::metadata(&source)
            .and_then(|m| m.modified())
            .unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        assert!(
            changed <= built,
            "{} changed after {} was built: run vscode-test-harness/install.sh",
            source.display(),
            vsix.display()
        );
    }
    vsix
}

/// Runs code-server's command line (`--install-extension`,
/// `--list-extensions` …) on the extensions folder `extensions`, with
/// `user_data` and `home`, within a VS Code step; fails the test unless it
/// succeeds, and returns what it printed.
pub async fn code_server_cli(
    args: &[&std::ffi::OsStr],
    extensions: &Path,
    user_data: &Path,
    home: &Path,
) -> String {
    let run = tokio::process::Command::new(code_server_bin())
        .args(args)
        .arg("--extensions-dir")
        .arg(extensions)
        .arg("--user-data-dir")
        .arg(user_data)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env_remove("VSCODE_IPC_HOOK_CLI")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(STEP_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| panic!("code-server {args:?} took over a VS Code step"))
        .unwrap_or_else(|e| panic!("run code-server {args:?}: {e}"));
    assert!(
        out.status.success(),
        "code-server {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Installs the extension's .vsix into `extensions` with code-server's own
/// `--install-extension` (its user data in `dir/user-data`); returns the
/// folder it was unpacked into.
async fn install_extension(dir: &Path, extensions: &Path, home: &Path) -> PathBuf {
    let vsix = extension_vsix();
    let said = code_server_cli(
        &["--install-extension".as_ref(), vsix.as_os_str()],
        extensions,
        &dir.join("user-data"),
        home,
    )
    .await;
    let installed = extensions.join(extension_id().1);
    assert!(
        installed.join("package.json").is_file(),
        "code-server said {said:?} but {} holds no extension",
        installed.display()
    );
    installed
}

/// A process group of our own (the leader was spawned with
/// `process_group(0)`): code-server's real server and VS Code's extension
/// host, and the driver's Chromium, are children that killing the leader
/// alone would orphan, still running.
struct ProcessGroup(i32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(-self.0, libc::SIGKILL) };
    }
}

/// Reads code-server's stdout until it says where it listens; the rest is
/// copied to `log`.
async fn listening_port(stdout: ChildStdout, log: PathBuf) -> u16 {
    const SAYS: &str = "HTTP server listening on http://127.0.0.1:";
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(rest) = line.split(SAYS).nth(1) {
            let port = rest
                .trim_end_matches('/')
                .parse()
                .unwrap_or_else(|_| panic!("port in {line:?}"));
            // Keep draining, so code-server never blocks on a full pipe.
            tokio::spawn(async move {
                let mut out = tokio::fs::OpenOptions::new()
                    .append(true)
                    .open(log)
                    .await
                    .expect("open log");
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = out.write_all(format!("{line}\n").as_bytes()).await;
                }
            });
            return port;
        }
    }
    panic!("code-server exited before listening");
}

/// One request of a page's reload, as the browser made it.
#[derive(Debug)]
pub struct Reloaded {
    pub path: String,
    /// The entity tag the browser said it holds (`If-None-Match`).
    pub offered: Option<String>,
    /// The body bytes that came back (none for a 304).
    pub body_bytes: u64,
}

/// Headless Chromium driven by drive.js; killed when dropped, Chromium too.
pub struct Browser {
    _group: ProcessGroup,
    stdin: ChildStdin,
    replies: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Where screenshots go (of failures, and those a test takes): outside
    /// the sandbox, which is removed when the test ends.
    pub shots: PathBuf,
}

impl Browser {
    pub fn start(sandbox: &Sandbox) -> Browser {
        let driver = harness_dir().join("driver/drive.js");
        let log = sandbox.root.join("driver.log");
        let mut child = tokio::process::Command::new("node")
            .arg(&driver)
            .current_dir(harness_dir().join("driver"))
            .env("HOME", &sandbox.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // The page's console errors and the driver's own; kept with the
            // sandbox (MOONKALE_KEEP_SANDBOX=1).
            .stderr(std::fs::File::create(log).expect("driver log"))
            .process_group(0)
            .spawn()
            .expect("start node drive.js");
        Browser {
            _group: ProcessGroup(child.id().expect("pid") as i32),
            stdin: child.stdin.take().expect("stdin"),
            replies: BufReader::new(child.stdout.take().expect("stdout")).lines(),
            next_id: 0,
            shots: std::env::temp_dir()
                .join("moonkale-vscode-shots")
                .join(sandbox.root.file_name().expect("sandbox name")),
        }
    }

    /// Runs one driver command; a failure takes a screenshot and fails the
    /// test with both.
    pub async fn run(&mut self, command: Value) -> Value {
        match self.try_run(command.clone()).await {
            Ok(value) => value,
            Err(error) => {
                let _ = std::fs::create_dir_all(&self.shots);
                let shot = self.shots.join(format!("failure-{}.png", self.next_id));
                let _ = self
                    .try_run(json!({"op": "screenshot", "path": shot}))
                    .await;
                panic!(
                    "browser step {command} failed: {error}\n(screenshot: {})",
                    shot.display()
                );
            }
        }
    }

    pub async fn try_run(&mut self, mut command: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        command["id"] = json!(id);
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(|e| format!("driver stdin: {e}"))?;
        let line = tokio::time::timeout(STEP_TIMEOUT, self.replies.next_line())
            .await
            .map_err(|_| "no answer from the driver".to_owned())?
            .map_err(|e| format!("driver stdout: {e}"))?
            .ok_or("the driver exited")?;
        let reply: Value =
            serde_json::from_str(&line).map_err(|e| format!("driver said {line:?}: {e}"))?;
        assert_eq!(reply["id"], json!(id), "answers come in order");
        match reply.get("error") {
            Some(error) => Err(error.as_str().unwrap_or_default().to_owned()),
            None => Ok(reply["value"].clone()),
        }
    }

    /// Saves what the page shows as `<name>.png` and says where (the test's
    /// output), for a person to look at.
    pub async fn screenshot(&mut self, name: &str) -> PathBuf {
        std::fs::create_dir_all(&self.shots).expect("mkdir screenshots");
        let shot = self.shots.join(format!("{name}.png"));
        self.run(json!({"op": "screenshot", "path": shot})).await;
        eprintln!("screenshot: {}", shot.display());
        shot
    }

    /// Reloads the page until `ready` shows again: each request on the
    /// way, its path, the tag the browser offered and the body bytes it
    /// received.
    pub async fn reload(&mut self, ready: &str) -> Vec<Reloaded> {
        let seen = self.run(json!({"op": "reload", "ready": ready})).await;
        let seen = seen.as_array().expect("the requests of a reload");
        seen.iter()
            .map(|r| Reloaded {
                path: r["path"].as_str().unwrap_or_default().to_owned(),
                offered: r["offered"].as_str().map(str::to_owned),
                body_bytes: r["bodyBytes"].as_u64().expect("a body size"),
            })
            .collect()
    }

    pub async fn press(&mut self, keys: &[&str]) {
        self.run(json!({"op": "press", "keys": keys})).await;
    }

    pub async fn type_text(&mut self, text: &str) {
        self.run(json!({"op": "type", "text": text})).await;
    }

    /// Clicks the first element with this ARIA role and exact name, waiting
    /// for it to appear.
    pub async fn click(&mut self, role: &str, name: &str) {
        self.run(json!({"op": "click", "role": role, "name": name}))
            .await;
    }

    pub async fn wait_for(&mut self, selector: &str) {
        self.run(json!({"op": "waitFor", "selector": selector}))
            .await;
    }

    /// Waits until nothing matching `selector` is visible.
    pub async fn wait_gone(&mut self, selector: &str) {
        self.run(json!({"op": "waitFor", "selector": selector, "state": "hidden"}))
            .await;
    }

    /// The inner texts of what matches `selector`, polled until `ok` holds
    /// for them.
    pub async fn texts_until(
        &mut self,
        selector: &str,
        what: &str,
        ok: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + crate::TIMEOUT;
        loop {
            let shown = self.run(json!({"op": "text", "selector": selector})).await;
            let texts: Vec<String> = serde_json::from_value(shown).unwrap_or_default();
            if ok(&texts) {
                return texts;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {texts:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Opens a file of the workspace with Quick Open (Ctrl+P).
    pub async fn quick_open(&mut self, name: &str) {
        self.pick("Control+p", name).await;
        // Keys typed before the editor has the focus would go elsewhere.
        self.wait_for(&format!(".tab.active[aria-label^=\"{name}\"]"))
            .await;
        self.wait_for(".editor-group-container.active .monaco-editor.focused")
            .await;
    }

    /// Runs a command by its palette title (F1).
    pub async fn palette(&mut self, title: &str) {
        self.pick("F1", title).await;
    }

    /// Opens the quick input with `key`, types `label` and picks its entry.
    async fn pick(&mut self, key: &str, label: &str) {
        self.press(&[key]).await;
        self.wait_for(".quick-input-widget input").await;
        self.type_text(label).await;
        // The entry must be listed before Enter picks it.
        self.wait_for(&format!(
            ".quick-input-list .monaco-list-row[aria-label*=\"{label}\"]"
        ))
        .await;
        self.press(&["Enter"]).await;
    }
}
