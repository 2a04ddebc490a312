//! Headless Neovim for the end-to-end tests (tests/tests/neovim.rs with the
//! test config, tests/tests/neovim_plugin.rs with the plugin): started in a
//! sandbox with only the variables we set, driven with real keystrokes over
//! its `--listen` socket (`nvim --server S --remote-send KEYS`) and read back
//! with `--remote-expr`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use crate::{Sandbox, TIMEOUT, bin, wait_until};

/// `$MOONKALE_NVIM`, else the one `scripts/install-test-peers.sh` installs.
pub fn nvim_bin() -> PathBuf {
    crate::peer_bin("MOONKALE_NVIM", "nvim-venv/bin/nvim")
}

/// How Neovim's client reaches the service; the init reads
/// `MOONKALE_TEST_SHIM` or `MOONKALE_TEST_SOCKET`.
pub enum Attach<'a> {
    /// Stdio through the real `moonkale-shim`.
    Shim,
    /// `vim.lsp.rpc.connect(socket)`: straight to the service.
    Socket(&'a Path),
}

/// A running headless Neovim: its process and how to reach it.
pub struct Headless {
    pub child: tokio::process::Child,
    pub remote: Remote,
    /// Neovim's stdout and stderr, for failure reports.
    pub output: PathBuf,
    /// `$XDG_STATE_HOME/nvim/lsp.log`.
    pub lsp_log: PathBuf,
}

/// Starts `nvim --headless --clean -u INIT --listen SOCK FILE` in the
/// sandbox's workspace with XDG folders, HOME and the runtime directory of
/// the sandbox (so the shim finds the sandbox's service), plus `extra_env`.
pub fn start_headless(
    sandbox: &Sandbox,
    init: &Path,
    attach: Attach<'_>,
    file: &str,
    extra_env: Vec<(&'static str, OsString)>,
) -> Headless {
    let dir = sandbox.root.join("nvim");
    let dirs = [
        "config",
        "config-dirs",
        "data",
        "data-dirs",
        "state",
        "cache",
    ];
    for d in dirs {
        std::fs::create_dir_all(dir.join(d)).expect("mkdir");
    }
    let mut env: Vec<(&'static str, OsString)> = vec![
        ("XDG_RUNTIME_DIR", sandbox.runtime.clone().into()),
        ("HOME", sandbox.home.clone().into()),
        ("XDG_CONFIG_HOME", dir.join("config").into()),
        ("XDG_CONFIG_DIRS", dir.join("config-dirs").into()),
        ("XDG_DATA_HOME", dir.join("data").into()),
        ("XDG_DATA_DIRS", dir.join("data-dirs").into()),
        ("XDG_STATE_HOME", dir.join("state").into()),
        ("XDG_CACHE_HOME", dir.join("cache").into()),
        ("MOONKALE_SERVICE_BIN", bin("moonkale-service").into()),
    ];
    env.extend(extra_env);
    match attach {
        Attach::Shim => env.push(("MOONKALE_TEST_SHIM", bin("moonkale-shim").into())),
        Attach::Socket(socket) => env.push(("MOONKALE_TEST_SOCKET", socket.into())),
    }
    let listen = sandbox.root.join("nvim.sock");
    let output = dir.join("nvim.out");
    let out = std::fs::File::create(&output).expect("create nvim.out");
    let nvim_bin = nvim_bin();
    let mut cmd = tokio::process::Command::new(&nvim_bin);
    cmd.arg("--headless")
        .arg("--clean")
        .arg("-u")
        .arg(init)
        .arg("--listen")
        .arg(&listen)
        .arg(sandbox.workspace.join(file))
        .current_dir(&sandbox.workspace)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup"))
        .stderr(out)
        .kill_on_drop(true);
    scrub_env(&mut cmd, &env);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", nvim_bin.display()));
    Headless {
        child,
        remote: Remote {
            bin: nvim_bin,
            listen,
            env,
        },
        output,
        lsp_log: dir.join("state/nvim/lsp.log"),
    }
}

/// Only the variables we set, so no user config or plugin leaks in.
pub fn scrub_env(cmd: &mut tokio::process::Command, env: &[(&'static str, OsString)]) {
    for var in [
        "NVIM",
        "NVIM_APPNAME",
        "NVIM_LOG_FILE",
        "VIMINIT",
        "VIMRUNTIME",
        "VIM",
        "MYVIMRC",
        "MOONKALE_TEST_SHIM",
        "MOONKALE_TEST_SOCKET",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
}

/// The way to a running Neovim's `--listen` socket.
pub struct Remote {
    pub bin: PathBuf,
    pub listen: PathBuf,
    pub env: Vec<(&'static str, OsString)>,
}

impl Remote {
    /// A `nvim --server SOCK ARGS...` client of this Neovim.
    pub async fn remote(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.arg("--server")
            .arg(&self.listen)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        scrub_env(&mut cmd, &self.env);
        tokio::time::timeout(TIMEOUT, cmd.output())
            .await
            .expect("nvim --server timed out")
            .expect("run nvim --server")
    }

    /// Types `keys` (Neovim key notation) as if at the keyboard.
    pub async fn send_keys(&self, keys: &str) {
        let out = self.remote(&["--remote-send", keys]).await;
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "--remote-send {keys:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Evaluates a Vimscript expression in Neovim; its value as JSON.
    pub async fn eval(&self, expr: &str) -> Value {
        match self.try_eval(expr).await {
            Ok(v) => v,
            Err(why) => panic!("--remote-expr {expr}: {why}"),
        }
    }

    /// [`Remote::eval`], or why Neovim could not answer (yet).
    pub async fn try_eval(&self, expr: &str) -> Result<Value, String> {
        let out = self
            .remote(&["--remote-expr", &format!("json_encode({expr})")])
            .await;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("printed {:?} ({e})", String::from_utf8_lossy(&out.stdout)))
    }

    /// Waits until `expr` evaluates to something `ok` accepts.
    pub async fn wait_for(&self, what: &str, expr: &str, ok: impl Fn(&Value) -> bool) -> Value {
        wait_until(what, || async {
            let v = self.eval(expr).await;
            ok(&v).then_some(v)
        })
        .await
    }
}
