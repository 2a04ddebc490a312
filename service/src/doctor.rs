//! `moonkale-service doctor`: what a first run needs, checked one line at a
//! time, each `ok` or what to do. Required checks (the `claude` CLI, a
//! login, the lock and runtime directories, the shim) decide the exit code;
//! the editor recipes and a running service are reported for information
//! (`warn` in `--json`).
//!
//! It only looks: nothing is created or changed, no secret is read beyond
//! whether it is there, and every program it runs (`--version`) has a
//! deadline. Whatever it prints of files or programs goes through
//! [`one_line`].

use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::printable::one_line;
use crate::runtime::{self, RuntimeDir};

/// How long a program may take to say its version.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// One line of the report.
pub struct Check {
    pub name: &'static str,
    /// A failed required check makes `doctor` exit 1.
    pub required: bool,
    /// `Ok(what was found)` or `Err(what is wrong and what to do)`.
    pub outcome: Result<String, String>,
}

impl Check {
    fn required(name: &'static str, outcome: Result<String, String>) -> Check {
        Check {
            name,
            required: true,
            outcome,
        }
    }

    fn optional(name: &'static str, outcome: Result<String, String>) -> Check {
        Check {
            name,
            required: false,
            outcome,
        }
    }
}

/// What the checks read from the environment.
pub struct Env {
    pub home: Option<PathBuf>,
    pub path: Option<OsString>,
    pub claude_config_dir: Option<PathBuf>,
    pub claude_bin: Option<PathBuf>,
    pub service_bin: Option<PathBuf>,
    pub api_key_set: bool,
    pub xdg_config_home: Option<PathBuf>,
    pub xdg_data_home: Option<PathBuf>,
}

impl Env {
    pub fn from_process() -> Env {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        Env {
            home: var("HOME").map(PathBuf::from),
            path: var("PATH"),
            claude_config_dir: var("CLAUDE_CONFIG_DIR").map(PathBuf::from),
            claude_bin: var("MOONKALE_CLAUDE_BIN").map(PathBuf::from),
            service_bin: var("MOONKALE_SERVICE_BIN").map(PathBuf::from),
            api_key_set: var("ANTHROPIC_API_KEY").is_some(),
            xdg_config_home: var("XDG_CONFIG_HOME").map(PathBuf::from),
            xdg_data_home: var("XDG_DATA_HOME").map(PathBuf::from),
        }
    }

    /// `~/.claude`, or `$CLAUDE_CONFIG_DIR`.
    fn claude_dir(&self) -> Option<PathBuf> {
        self.claude_config_dir
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".claude")))
    }

    /// The first executable `name` on an absolute `PATH` entry.
    fn on_path(&self, name: &str) -> Option<PathBuf> {
        std::env::split_paths(self.path.as_deref()?)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    }
}

/// Every check, in the order they are printed.
pub async fn run(env: &Env, workspace: &Path) -> Vec<Check> {
    vec![
        Check::required("claude", claude(env, workspace).await),
        Check::required("login", login(env)),
        Check::required("lock dir", lock_dir(env)),
        Check::required("runtime dir", runtime_dir()),
        Check::required("moonkale-shim", shim(env)),
        Check::optional("neovim", neovim(env).await),
        Check::optional("helix", helix(env).await),
        Check::optional("vs code", vscode(env)),
        Check::optional("service", service(workspace)),
        Check::optional("trust", trust(workspace)),
        Check::required("sandbox", sandbox(env, workspace).await),
    ]
}

/// The workspace's default sandbox, if the user set one: its command runs
/// and sees the relay (`moonkale-service --version` run through it in the
/// place of `claude`).
/// The workspace's default sandbox, if the user set one, runs: its command
/// starts and the sandbox sees `moonkale-service`. A broken one fails every
/// hosted session, so it is a required check (and `sandbox set` warns).
pub async fn sandbox(env: &Env, workspace: &Path) -> Result<String, String> {
    let store = crate::user_state::SandboxStore::from_env().map_err(|e| e.to_string())?;
    let Some(sandbox) = store.get(workspace).map_err(|e| e.to_string())? else {
        return Ok(
            "none: Claude Code runs unjailed (`moonkale-service sandbox set` to jail it)".into(),
        );
    };
    let at = crate::sandbox_link::claude_word(&sandbox.command).map_err(|e| e.to_string())?;
    let link_bin = sandbox
        .link_bin
        .clone()
        .or_else(|| env.service_bin.clone())
        .or_else(|| std::env::current_exe().ok())
        .unwrap_or_else(|| PathBuf::from("moonkale-service"));
    let (program, before) = sandbox.command[..at]
        .split_first()
        .ok_or("the sandbox command is only `claude`")?;
    let mut args: Vec<String> = before.to_vec();
    args.extend([link_bin.display().to_string(), "--version".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let described = crate::sandbox_link::describe(&sandbox);
    match version_of(Path::new(program), &args).await {
        Ok(version) if version.starts_with("moonkale-service") => {
            Ok(format!("{described}: runs, and sees {version}"))
        }
        Ok(other) => Err(format!(
            "{described}: ran, but {} inside answered {other:?}; pass --link-bin to `sandbox set`",
            one_line(&link_bin.display().to_string())
        )),
        Err(why) => Err(format!(
            "{described}: running it with {} --version inside failed ({why}); check the command, \
             and that the sandbox sees moonkale-service (--link-bin)",
            one_line(&link_bin.display().to_string())
        )),
    }
}

/// Whether the user trusts the workspace: not a fault either way, but what
/// the hosted sessions load depends on it.
fn trust(workspace: &Path) -> Result<String, String> {
    let store = crate::user_state::TrustStore::from_env().map_err(|e| e.to_string())?;
    if store.is_trusted(workspace) {
        Ok(format!(
            "{} is trusted: hosted Claude Code sessions load its own .claude settings and .mcp.json",
            workspace.display()
        ))
    } else {
        Err(format!(
            "{} is not trusted: hosted sessions load only your own Claude Code settings \
             (`moonkale-service trust` once you trust whoever wrote it)",
            workspace.display()
        ))
    }
}

/// The folder `doctor` checks for `folder`: the served workspace that
/// contains it, as `status` finds it, else the folder itself.
pub fn workspace_for(folder: &Path) -> PathBuf {
    // Only looks: a runtime directory that is not there is not created.
    RuntimeDir::path_from_env()
        .is_dir()
        .then(RuntimeDir::from_env)
        .and_then(Result::ok)
        .and_then(|dir| dir.service_for(folder))
        .map_or_else(|| folder.to_path_buf(), |info| info.workspace)
}

impl Check {
    /// `ok`, `warn` (an optional check that is not in place) or `fail` (a
    /// required one).
    fn status(&self) -> &'static str {
        match (&self.outcome, self.required) {
            (Ok(_), _) => "ok",
            (Err(_), false) => "warn",
            (Err(_), true) => "fail",
        }
    }
}

/// `doctor --json`: `{"ok": bool, "checks": [{"name", "status",
/// "message"}]}` (status `ok`, `warn` or `fail`), one check per line of
/// [`render`], and the same exit code.
pub fn render_json(checks: &[Check]) -> (String, i32) {
    let failed = checks.iter().any(|c| c.status() == "fail");
    let checks: Vec<_> = checks
        .iter()
        .map(|c| {
            let (Ok(message) | Err(message)) = &c.outcome;
            serde_json::json!({"name": c.name, "status": c.status(), "message": message})
        })
        .collect();
    let report = serde_json::json!({"ok": !failed, "checks": checks});
    let text = serde_json::to_string_pretty(&report).expect("JSON serializes");
    (
        crate::printable::json_for_terminal(&text) + "\n",
        i32::from(failed),
    )
}

/// The report and the exit code: 0 when no required check failed, else 1.
pub fn render(checks: &[Check]) -> (String, i32) {
    let mut out = String::new();
    let mut failed = 0;
    for check in checks {
        let (mark, text) = match &check.outcome {
            Ok(found) => ("ok  ", found),
            Err(todo) if check.required => {
                failed += 1;
                ("FAIL", todo)
            }
            Err(todo) => ("--  ", todo),
        };
        let _ = writeln!(out, "{mark}  {:<14} {}", check.name, one_line(text));
    }
    if failed == 0 {
        out += "everything a first run needs is in place\n";
        (out, 0)
    } else {
        let _ = writeln!(
            out,
            "{} failed: do what the FAIL lines say, then run doctor again",
            crate::printable::counted(failed, "required check")
        );
        (out, 1)
    }
}

async fn claude(env: &Env, workspace: &Path) -> Result<String, String> {
    // The same discovery as the agent's sessions.
    let bin =
        moonkale_claude::binary::find(env.claude_bin.as_deref(), env.path.as_deref(), workspace)
            .map_err(|e| match e {
                moonkale_claude::Error::NotFound { looked } => format!(
                    "claude is not on PATH ({looked}): \
             install Claude Code (`npm install -g @anthropic-ai/claude-code`), or set \
             MOONKALE_CLAUDE_BIN to it"
                ),
                moonkale_claude::Error::NotExecutable(path) => format!(
                    "{} is not an executable file: fix MOONKALE_CLAUDE_BIN",
                    path.display()
                ),
                e => e.to_string(),
            })?;
    let version = version_of(&bin, &["--version"]).await.map_err(|e| {
        format!(
            "{} does not run ({e}): reinstall Claude Code",
            bin.display()
        )
    })?;
    Ok(format!("{version} at {}", bin.display()))
}

/// Whether Claude Code has a login here that `doctor` accepts (the warm
/// spare waits for one: a CLI without a login only writes its files and
/// fails).
pub fn login_found() -> bool {
    login(&Env::from_process()).is_ok()
}

fn login(env: &Env) -> Result<String, String> {
    let claude_dir = env.claude_dir();
    let credentials = claude_dir.as_ref().map(|d| d.join(".credentials.json"));
    if let Some(file) = credentials.filter(|f| f.is_file()) {
        return Ok(format!("Claude Code credentials in {}", file.display()));
    }
    // The CLI's global config holds the OAuth account once logged in.
    let configs = [
        env.claude_config_dir
            .as_ref()
            .map(|d| d.join(".claude.json")),
        env.home.as_ref().map(|h| h.join(".claude.json")),
    ];
    for config in configs.into_iter().flatten() {
        if read_json(&config).is_some_and(|v| v["oauthAccount"].is_object()) {
            return Ok(format!("a Claude Code account in {}", config.display()));
        }
    }
    let settings = claude_dir.map(|d| d.join("settings.json"));
    if let Some(settings) = settings
        && read_json(&settings).is_some_and(|v| v["apiKeyHelper"].is_string())
    {
        return Ok(format!("an apiKeyHelper in {}", settings.display()));
    }
    if env.api_key_set {
        return Ok(
            "ANTHROPIC_API_KEY is set (for `moonkale-service claude`; agent sessions \
                   use your `claude` login, never the variable)"
                .into(),
        );
    }
    Err(
        "no Claude Code login found: run `claude` once and log in (or set \
         ANTHROPIC_API_KEY)"
            .into(),
    )
}

fn lock_dir(env: &Env) -> Result<String, String> {
    let dir = match &env.claude_config_dir {
        Some(d) => d.join("ide"),
        None => env
            .home
            .as_ref()
            .ok_or("HOME is not set: set it (Claude Code finds its IDEs under ~/.claude/ide)")?
            .join(".claude/ide"),
    };
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) if meta.is_dir() => {
            if meta.uid() != runtime::uid() {
                Err(format!(
                    "{} belongs to another user: remove it (the service recreates it)",
                    dir.display()
                ))
            } else if !writable(&dir) {
                Err(format!(
                    "{} is not writable: run `chmod u+w {}`",
                    dir.display(),
                    dir.display()
                ))
            } else {
                Ok(format!("{} is writable", dir.display()))
            }
        }
        Ok(_) => Err(format!(
            "{} is not a folder: remove it (the service creates the folder)",
            dir.display()
        )),
        Err(_) => {
            // Created by the first `serve`: the nearest existing parent must
            // let us.
            let parent = dir.ancestors().skip(1).find(|p| p.exists());
            match parent {
                Some(p) if writable(p) => Ok(format!(
                    "{} will be created by the first serve",
                    dir.display()
                )),
                _ => Err(format!(
                    "{} cannot be created: make its parent writable, or set CLAUDE_CONFIG_DIR",
                    dir.display()
                )),
            }
        }
    }
}

fn runtime_dir() -> Result<String, String> {
    let dir = RuntimeDir::path_from_env();
    let shown = dir.display();
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) if !meta.is_dir() => Err(format!(
            "{shown} is not a folder (a symlink or a file is in its place): remove it"
        )),
        Ok(meta) if meta.uid() != runtime::uid() => Err(format!(
            "{shown} belongs to another user: set XDG_RUNTIME_DIR to a folder of yours"
        )),
        Ok(meta) if meta.mode() & 0o077 != 0 => Err(format!(
            "{shown} is mode {:04o}: run `chmod 700 {shown}`",
            meta.mode() & 0o7777
        )),
        Ok(_) if !writable(&dir) => {
            Err(format!("{shown} is not writable: run `chmod 700 {shown}`"))
        }
        Ok(_) => Ok(format!("{shown} is private (0700, ours)")),
        Err(_) => match dir.parent() {
            Some(p) if writable(p) => {
                Ok(format!("{shown} will be created (0700) by the first serve"))
            }
            _ => Err(format!(
                "{shown} cannot be created: set XDG_RUNTIME_DIR to a folder of yours"
            )),
        },
    }
}

fn shim(env: &Env) -> Result<String, String> {
    let shim = env.on_path("moonkale-shim").ok_or(
        "moonkale-shim is not on PATH: `cargo install --path editor-shim`, and put ~/.cargo/bin \
         on PATH",
    )?;
    // The shim starts $MOONKALE_SERVICE_BIN, else the service next to its
    // own executable (links resolved), else the one on PATH.
    let real = std::fs::canonicalize(&shim).unwrap_or_else(|_| shim.clone());
    let found = env.service_bin.as_deref().is_some_and(is_executable)
        || is_executable(&real.with_file_name("moonkale-service"))
        || env.on_path("moonkale-service").is_some();
    if !found {
        return Err(format!(
            "{} cannot start the service: `cargo install --path service` (or set \
             MOONKALE_SERVICE_BIN)",
            shim.display()
        ));
    }
    Ok(format!("{}", shim.display()))
}

async fn neovim(env: &Env) -> Result<String, String> {
    let nvim = env
        .on_path("nvim")
        .ok_or("nvim is not on PATH (the Neovim recipe needs 0.10+)")?;
    let version = version_of(&nvim, &["--version"])
        .await
        .map_err(|e| format!("{} does not run: {e}", nvim.display()))?;
    let numbers: Vec<u32> = version
        .trim_start_matches("NVIM v")
        .split(['.', '-'])
        .take(2)
        .filter_map(|n| n.parse().ok())
        .collect();
    if numbers.len() == 2 && (numbers[0], numbers[1]) < (0, 10) {
        return Err(format!("{version}: the plugin needs Neovim 0.10+"));
    }
    // Whether the user's configuration puts the plugin on the runtimepath.
    let probe =
        "lua io.stdout:write(#vim.api.nvim_get_runtime_file('lua/moonkale/init.lua', false))";
    let found = version_of(&nvim, &["--headless", "-c", probe, "-c", "qa!"]).await;
    match found.as_deref() {
        Ok("0") | Ok("") => Err(format!(
            "{version}, but the plugin is not on its runtimepath: install editors/neovim \
             (see editors/neovim/README.md)"
        )),
        Ok(_) => Ok(format!("{version} with the moonkale plugin")),
        Err(e) => Err(format!("{version}; could not ask it for the plugin: {e}")),
    }
}

async fn helix(env: &Env) -> Result<String, String> {
    let hx = env
        .on_path("hx")
        .ok_or("hx is not on PATH (the Helix recipe)")?;
    let version = version_of(&hx, &["--version"])
        .await
        .map_err(|e| format!("{} does not run: {e}", hx.display()))?;
    let config = env
        .xdg_config_home
        .clone()
        .or_else(|| env.home.as_ref().map(|h| h.join(".config")))
        .map(|c| c.join("helix/languages.toml"))
        .ok_or("HOME is not set")?;
    let text = std::fs::read_to_string(&config).map_err(|_| {
        format!(
            "{version}, but there is no {}: add the Helix recipe of README.md",
            config.display()
        )
    })?;
    helix_languages(&text)
        .map(|languages| format!("{version}; languages.toml runs moonkale-shim for {languages}"))
        .map_err(|why| format!("{version}, but {} {why}", config.display()))
}

/// Whether a Helix `languages.toml` runs moonkale-shim, read as Helix reads
/// it (TOML, so a commented-out line is no entry): the languages whose
/// `language-servers` name a `[language-server.*]` whose command is the
/// shim, or what is wrong and what to do.
fn helix_languages(text: &str) -> Result<String, String> {
    let config: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map(|span| text[..span.start].lines().count().max(1))
            .unwrap_or(1);
        format!(
            "is not valid TOML (line {line}: {}), so Helix ignores it: fix it",
            e.message().trim()
        )
    })?;
    let shim_servers: Vec<&str> = config
        .get("language-server")
        .and_then(toml::Value::as_table)
        .into_iter()
        .flatten()
        .filter(|(_, server)| {
            server
                .get("command")
                .and_then(toml::Value::as_str)
                .is_some_and(|c| Path::new(c).file_name() == Some("moonkale-shim".as_ref()))
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if shim_servers.is_empty() {
        return Err(
            "has no [language-server.*] entry with command = \"moonkale-shim\" (a commented-out \
             line does not count): add the Helix recipe of README.md"
                .into(),
        );
    }
    // `language-servers` items are names or `{ name = "…", … }`.
    let uses_shim = |language: &toml::Value| {
        language
            .get("language-servers")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().or_else(|| s.get("name")?.as_str()))
            .any(|name| shim_servers.contains(&name))
    };
    let languages: Vec<&str> = config
        .get("language")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter(|language| uses_shim(language))
        .filter_map(|language| language.get("name")?.as_str())
        .collect();
    if languages.is_empty() {
        return Err(format!(
            "runs moonkale-shim as [language-server.{0}], but no [[language]] lists {0:?} in its \
             language-servers: add it there (see the Helix recipe of README.md)",
            shim_servers[0]
        ));
    }
    Ok(languages.join(", "))
}

/// The extension's id: `<publisher>.<name>` of its package.json.
const VSCODE_EXTENSION: &str = "moonkale.moonkale-vscode";

fn vscode(env: &Env) -> Result<String, String> {
    let editor = ["code", "code-server"]
        .into_iter()
        .find(|name| env.on_path(name).is_some())
        .ok_or("neither code nor code-server is on PATH (the VS Code recipe)")?;
    let home = env.home.as_ref().ok_or("HOME is not set")?;
    let data = env
        .xdg_data_home
        .clone()
        .unwrap_or_else(|| home.join(".local/share"));
    let folders = [
        home.join(".vscode/extensions"),
        data.join("code-server/extensions"),
    ];
    let mut unlisted = None;
    for folder in &folders {
        match installed_extension(folder) {
            Ok(Some(path)) => {
                let version = std::fs::read(path.join("package.json"))
                    .ok()
                    .and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok())
                    .and_then(|manifest| manifest["version"].as_str().map(one_line));
                let version = version.map(|v| format!(" {v}")).unwrap_or_default();
                return Ok(format!(
                    "{editor}; the extension{version} is in {}",
                    one_line(&path.display().to_string())
                ));
            }
            Ok(None) => {}
            Err(why) => {
                unlisted.get_or_insert(why);
            }
        }
    }
    Err(unlisted.unwrap_or_else(|| {
        format!(
            "{editor}, but the moonkale extension is not installed: follow the VS Code recipe \
             of README.md"
        )
    }))
}

/// The folder VS Code loads the extension from in its extensions folder
/// `folder`, if it does. Where VS Code keeps its list of installed
/// extensions (`extensions.json`, written by `--install-extension` and on
/// its first start), that list decides: an extension folder it does not
/// name (a link made once the list existed) is not loaded, and one it
/// uninstalled may stay on disk, no longer named. Without the list, VS Code
/// takes each folder it finds there on its next start. Folders marked in
/// `.obsolete` are being removed.
fn installed_extension(folder: &Path) -> Result<Option<PathBuf>, String> {
    let read_json = |name: &str| {
        std::fs::read(folder.join(name))
            .ok()
            .map(|text| serde_json::from_slice::<serde_json::Value>(&text))
    };
    let obsolete = match read_json(".obsolete") {
        Some(Ok(serde_json::Value::Object(marked))) => marked
            .into_iter()
            .filter(|(_, v)| v == &serde_json::Value::Bool(true))
            .map(|(k, _)| k)
            .collect(),
        _ => Vec::new(),
    };
    let loadable = |path: &Path| {
        path.join("package.json").is_file()
            && !path
                .file_name()
                .is_some_and(|n| obsolete.iter().any(|o| n.to_string_lossy() == *o))
    };
    // The folders named after the extension (`<id>-<version>`).
    let found = std::fs::read_dir(folder)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy()
                    .to_lowercase()
                    .starts_with(&format!("{VSCODE_EXTENSION}-"))
            }) && loadable(p)
        });
    let listed = match read_json("extensions.json") {
        None => return Ok(found),
        Some(Ok(serde_json::Value::Array(listed))) => listed,
        Some(_) => {
            return Err(format!(
                "{} is not a list of extensions (VS Code rewrites it on its next start)",
                one_line(&folder.join("extensions.json").display().to_string())
            ));
        }
    };
    let named = listed.iter().find_map(|entry| {
        let id = entry["identifier"]["id"].as_str()?;
        if !id.eq_ignore_ascii_case(VSCODE_EXTENSION) {
            return None;
        }
        let path = match entry["relativeLocation"].as_str() {
            Some(relative) => folder.join(relative),
            None => PathBuf::from(
                entry["location"]["path"]
                    .as_str()
                    .or(entry["location"]["fsPath"].as_str())?,
            ),
        };
        loadable(&path).then_some(path)
    });
    match (named, found) {
        (Some(path), _) => Ok(Some(path)),
        (None, Some(path)) => Err(format!(
            "{} is there, but VS Code's list of installed extensions ({}) does not name it, so \
             VS Code does not load it: install the .vsix (the VS Code recipe of README.md)",
            one_line(&path.display().to_string()),
            one_line(&folder.join("extensions.json").display().to_string())
        )),
        (None, None) => Ok(None),
    }
}

fn service(workspace: &Path) -> Result<String, String> {
    let not_running = || {
        format!(
            "no service runs for {}: an editor's moonkale-shim starts one, or run \
             `moonkale-service serve --workspace {}`",
            workspace.display(),
            workspace.display()
        )
    };
    if !RuntimeDir::path_from_env().is_dir() {
        return Err(not_running());
    }
    let files = RuntimeDir::from_env()
        .map_err(|e| e.to_string())?
        .workspace(workspace);
    match files.read_info() {
        Some(info) if std::os::unix::net::UnixStream::connect(&info.socket).is_ok() => {
            let ide = info
                .ide_port
                .map(|p| format!(", Claude Code IDE on port {p}"))
                .unwrap_or_default();
            Ok(format!(
                "running for {} (pid {}{ide})",
                workspace.display(),
                info.pid
            ))
        }
        _ => Err(not_running()),
    }
}

/// The first line a program prints for `args`, within [`VERSION_TIMEOUT`].
async fn version_of(program: &Path, args: &[&str]) -> Result<String, String> {
    let run = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(VERSION_TIMEOUT, run)
        .await
        .map_err(|_| format!("no answer within {} s", VERSION_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("it exited with {}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(one_line(text.lines().next().unwrap_or_default().trim()))
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    // A config file, not a log: anything bigger is not what we look for.
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > 16 << 20 {
        return None;
    }
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_required_check_fails_the_report() {
        let checks = [
            Check::required("claude", Ok("2.1.332 (Claude Code) at /bin/claude".into())),
            Check::optional("helix", Err("hx is not on PATH".into())),
        ];
        let (text, code) = render(&checks);
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("--    helix"), "{text}");
        let checks = [Check::required("login", Err("no login\x1b[2J".into()))];
        let (text, code) = render(&checks);
        assert_eq!(code, 1);
        assert!(
            text.starts_with("FAIL  login          no login^[[2J\n"),
            "{text}"
        );
    }

    #[test]
    fn json_says_each_checks_status() {
        let checks = [
            Check::required("claude", Ok("2.1.332".into())),
            Check::optional("helix", Err("hx is not on PATH".into())),
            Check::required("login", Err("no login".into())),
        ];
        let (text, code) = render_json(&checks);
        assert_eq!(code, 1);
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            report,
            serde_json::json!({"ok": false, "checks": [
                {"name": "claude", "status": "ok", "message": "2.1.332"},
                {"name": "helix", "status": "warn", "message": "hx is not on PATH"},
                {"name": "login", "status": "fail", "message": "no login"},
            ]})
        );
    }

    /// VS Code's extensions folder as `--install-extension` leaves it: the
    /// folder `<id>-<version>` and its entry in extensions.json.
    fn installed_by_vscode(folder: &Path, version: &str) -> PathBuf {
        let name = format!("{VSCODE_EXTENSION}-{version}");
        let path = folder.join(&name);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("package.json"), "{}").unwrap();
        let entry = serde_json::json!({
            "identifier": {"id": VSCODE_EXTENSION},
            "version": version,
            "location": {"$mid": 1, "path": path, "scheme": "file"},
            "relativeLocation": name,
            "metadata": {"source": "vsix"},
        });
        std::fs::write(
            folder.join("extensions.json"),
            serde_json::json!([entry]).to_string(),
        )
        .unwrap();
        path
    }

    #[test]
    fn vscode_extension_is_found_as_vscode_loads_it() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path();
        assert_eq!(installed_extension(&folder.join("none")), Ok(None));

        // Installed from the vsix: listed, in its own folder.
        let installed = installed_by_vscode(folder, "0.1.0");
        assert_eq!(installed_extension(folder), Ok(Some(installed.clone())));

        // Uninstalled: VS Code empties the list and may leave the folder.
        std::fs::write(folder.join("extensions.json"), "[]").unwrap();
        let err = installed_extension(folder).unwrap_err();
        assert!(err.contains("does not name it"), "{err}");
        assert!(err.contains("install the .vsix"), "{err}");

        // A newer version installed, the old one marked obsolete.
        std::fs::remove_dir_all(&installed).unwrap();
        let newer = installed_by_vscode(folder, "0.2.0");
        assert_eq!(installed_extension(folder), Ok(Some(newer.clone())));
        std::fs::write(
            folder.join(".obsolete"),
            serde_json::json!({format!("{VSCODE_EXTENSION}-0.2.0"): true}).to_string(),
        )
        .unwrap();
        assert_eq!(installed_extension(folder), Ok(None));

        // No list yet (a fresh folder with a link in it, the developer's
        // way): VS Code takes the folder on its next start.
        std::fs::remove_file(folder.join(".obsolete")).unwrap();
        std::fs::remove_file(folder.join("extensions.json")).unwrap();
        assert_eq!(installed_extension(folder), Ok(Some(newer)));
    }

    #[test]
    fn helix_languages_toml_is_read_as_toml() {
        let recipe = "[language-server.moonkale]\ncommand = \"moonkale-shim\"\n\n\
                      [[language]]\nname = \"rust\"\nlanguage-servers = [\"rust-analyzer\", \"moonkale\"]\n";
        assert_eq!(helix_languages(recipe).as_deref(), Ok("rust"));
        // Wrapping a server, named in a table, by its full path.
        let wrapped = "[language-server.w]\ncommand = \"/usr/local/bin/moonkale-shim\"\n\
                       args = [\"--\", \"pylsp\"]\n[[language]]\nname = \"python\"\n\
                       language-servers = [{ name = \"w\" }]\n";
        assert_eq!(helix_languages(wrapped).as_deref(), Ok("python"));
        let commented = recipe.replace("command =", "# command =");
        let err = helix_languages(&commented).unwrap_err();
        assert!(err.contains("commented-out line does not count"), "{err}");
        let broken = recipe.replace("[[language]]", "[[language]");
        let err = helix_languages(&broken).unwrap_err();
        assert!(err.contains("not valid TOML (line 4"), "{err}");
        let unused = recipe.replace("\"moonkale\"]", "\"other\"]");
        let err = helix_languages(&unused).unwrap_err();
        assert!(err.contains("no [[language]] lists \"moonkale\""), "{err}");
    }
}
