//! Neovim for the end-to-end tests (tests/tests/neovim.rs with the test
//! config, tests/tests/neovim_plugin.rs with the plugin): started in a
//! sandbox with only the variables we set, headless or with its user
//! interface on a pseudo-terminal (whose screen the tests read), driven
//! with real keystrokes over its `--listen` socket (`nvim --server S
//! --remote-send KEYS`) and read back with `--remote-expr`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use crate::pty::Pty;
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

/// What a Neovim of the sandbox runs with: XDG folders, HOME and the
/// runtime directory of the sandbox (so the shim finds the sandbox's
/// service), how to attach, plus `extra_env`; and where its own files go.
fn sandbox_env(
    sandbox: &Sandbox,
    attach: Attach<'_>,
    extra_env: Vec<(&'static str, OsString)>,
) -> (Vec<(&'static str, OsString)>, PathBuf) {
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
    (env, dir)
}

/// `--clean -u INIT --listen SOCK FILE` (in the workspace).
fn nvim_args(sandbox: &Sandbox, init: &Path, listen: &Path, file: &str) -> Vec<OsString> {
    vec![
        "--clean".into(),
        "-u".into(),
        init.into(),
        "--listen".into(),
        listen.into(),
        sandbox.workspace.join(file).into(),
    ]
}

/// Starts `nvim --headless --clean -u INIT --listen SOCK FILE` in the
/// sandbox's workspace with the sandbox's environment ([`sandbox_env`]).
pub fn start_headless(
    sandbox: &Sandbox,
    init: &Path,
    attach: Attach<'_>,
    file: &str,
    extra_env: Vec<(&'static str, OsString)>,
) -> Headless {
    let (env, dir) = sandbox_env(sandbox, attach, extra_env);
    let listen = sandbox.root.join("nvim.sock");
    let output = dir.join("nvim.out");
    let out = std::fs::File::create(&output).expect("create nvim.out");
    let nvim_bin = nvim_bin();
    let mut cmd = tokio::process::Command::new(&nvim_bin);
    cmd.arg("--headless")
        .args(nvim_args(sandbox, init, &listen, file))
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

/// The size of the terminal Neovim's TUI draws on: what a user's window
/// of it often is.
pub const TUI_ROWS: u16 = 40;
pub const TUI_COLS: u16 = 140;

/// Neovim with its real user interface on a pseudo-terminal of
/// [`TUI_ROWS`] × [`TUI_COLS`]: what it draws is read back as a screen
/// ([`Pty::screen`]), as the user sees it, prompts and all; it is still
/// reached over its `--listen` socket ([`Tui::remote`]). Killed when dropped.
pub struct Tui {
    pub pty: Pty,
    pub remote: Remote,
}

/// Starts `nvim --clean -u INIT --listen SOCK FILE` on a pty in the
/// sandbox's workspace, with the sandbox's environment and nothing else
/// ([`sandbox_env`], plus `TERM` and `PATH`).
pub fn start_tui(
    sandbox: &Sandbox,
    init: &Path,
    attach: Attach<'_>,
    file: &str,
    extra_env: Vec<(&'static str, OsString)>,
) -> Tui {
    let (mut env, _) = sandbox_env(sandbox, attach, extra_env);
    env.push(("TERM", "xterm-256color".into()));
    env.push(("PATH", std::env::var_os("PATH").unwrap_or_default()));
    let listen = sandbox.root.join("nvim.sock");
    let nvim_bin = nvim_bin();
    let mut cmd = portable_pty::CommandBuilder::new(&nvim_bin);
    cmd.args(nvim_args(sandbox, init, &listen, file));
    cmd.cwd(&sandbox.workspace);
    cmd.env_clear();
    for (k, v) in &env {
        cmd.env(k, v);
    }
    Tui {
        pty: Pty::spawn(cmd, TUI_ROWS, TUI_COLS),
        remote: Remote {
            bin: nvim_bin,
            listen,
            env,
        },
    }
}

impl Tui {
    /// Waits until `pred` holds for the screen; returns it. Panics after
    /// [`TIMEOUT`] with the screen as it is, for the failure output.
    pub async fn wait_screen(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        if let Some(screen) = self.pty.try_wait_screen(TIMEOUT, pred).await {
            return screen;
        }
        panic!(
            "Neovim's screen never showed {what} in {TIMEOUT:?}:\n{}",
            framed(&self.pty.screen())
        );
    }
}

/// A screen between rules, so its blank rows show in a failure message.
pub fn framed(screen: &str) -> String {
    let rule = "-".repeat(TUI_COLS as usize);
    format!("{rule}\n{screen}\n{rule}")
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

    /// Waits until the Moonkale plugin's client of the current buffer has
    /// initialized (the `--listen` socket may not be up yet at first).
    pub async fn wait_plugin_initialized(&self) {
        wait_until("the plugin's client to initialize", || async {
            let s = self
                .try_eval("luaeval('require(\"moonkale\").status()')")
                .await
                .ok()?;
            (s["initialized"] == true).then_some(())
        })
        .await
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

/// A msgpack-RPC connection to a Neovim's `--listen` socket, as a UI or a
/// remote plugin holds one: [`NvimRpc::input`] is `nvim_input`, the way a
/// user's keystrokes reach Neovim, without a process start per key (the
/// bench times keystrokes with it; `--remote-send` spawns a client each).
pub struct NvimRpc {
    stream: tokio::net::UnixStream,
    next_id: u32,
    /// Bytes read past the last complete response.
    buf: Vec<u8>,
}

impl NvimRpc {
    pub async fn connect(listen: &Path) -> NvimRpc {
        let stream = tokio::net::UnixStream::connect(listen)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", listen.display()));
        NvimRpc {
            stream,
            next_id: 0,
            buf: Vec::new(),
        }
    }

    /// Writes `nvim_input(keys)` (Neovim key notation) and returns at once;
    /// its response is read by [`NvimRpc::answered`].
    pub async fn send_input(&mut self, keys: &str) {
        use tokio::io::AsyncWriteExt;
        self.next_id += 1;
        let mut req = vec![0x94, 0x00, 0xce];
        req.extend_from_slice(&self.next_id.to_be_bytes());
        msgpack_str(&mut req, "nvim_input");
        req.push(0x91);
        msgpack_str(&mut req, keys);
        self.stream.write_all(&req).await.expect("write nvim_input");
    }

    /// Waits for the responses to every request sent so far; panics on an
    /// error response.
    pub async fn answered(&mut self, mut outstanding: u32) {
        use tokio::io::AsyncReadExt;
        while outstanding > 0 {
            // [1, msgid, error, result]: an error other than nil fails.
            if let Some(end) = msgpack_skip(&self.buf, 0) {
                let response: Vec<u8> = self.buf.drain(..end).collect();
                let error_at = msgpack_skip(&response, 2).expect("msgid");
                assert_eq!(response[error_at], 0xc0, "nvim_input failed: {response:?}");
                outstanding -= 1;
                continue;
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(TIMEOUT, self.stream.read(&mut chunk))
                .await
                .expect("Neovim did not answer nvim_input")
                .expect("read from Neovim");
            assert!(n > 0, "Neovim closed the RPC socket");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// `nvim_input(keys)`, answered.
    pub async fn input(&mut self, keys: &str) {
        self.send_input(keys).await;
        self.answered(1).await;
    }
}

fn msgpack_str(out: &mut Vec<u8>, s: &str) {
    out.push(0xdb);
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Where the msgpack value starting at `buf[at]` ends, or `None` while it is
/// incomplete.
fn msgpack_skip(buf: &[u8], at: usize) -> Option<usize> {
    let tag = *buf.get(at)?;
    let be = |from: usize, n: usize| -> Option<usize> {
        let bytes = buf.get(from..from + n)?;
        Some(bytes.iter().fold(0usize, |v, b| (v << 8) | *b as usize))
    };
    let items = |from: usize, n: usize| (0..n).try_fold(from, |pos, _| msgpack_skip(buf, pos));
    let end = match tag {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => at + 1,
        0x80..=0x8f => items(at + 1, 2 * (tag & 0x0f) as usize)?,
        0x90..=0x9f => items(at + 1, (tag & 0x0f) as usize)?,
        0xa0..=0xbf => at + 1 + (tag & 0x1f) as usize,
        0xcc | 0xd0 => at + 2,
        0xcd | 0xd1 => at + 3,
        0xce | 0xd2 | 0xca => at + 5,
        0xcf | 0xd3 | 0xcb => at + 9,
        0xd4..=0xd8 => at + 2 + (1 << (tag - 0xd4)),
        0xc4 | 0xd9 => at + 2 + be(at + 1, 1)?,
        0xc5 | 0xda => at + 3 + be(at + 1, 2)?,
        0xc6 | 0xdb => at + 5 + be(at + 1, 4)?,
        0xc7 => at + 3 + be(at + 1, 1)?,
        0xc8 => at + 4 + be(at + 1, 2)?,
        0xc9 => at + 6 + be(at + 1, 4)?,
        0xdc => items(at + 3, be(at + 1, 2)?)?,
        0xdd => items(at + 5, be(at + 1, 4)?)?,
        0xde => items(at + 3, 2 * be(at + 1, 2)?)?,
        0xdf => items(at + 5, 2 * be(at + 1, 4)?)?,
        0xc1 => panic!("msgpack 0xc1 is never used"),
    };
    (end <= buf.len()).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::msgpack_skip;

    /// `nvim_input`'s answer `[1, 7, nil, 1]`, an error answer
    /// `[1, 300, [0, "bad"], nil]` and a map: complete values end where
    /// they end; a cut one is incomplete at every length.
    #[test]
    fn msgpack_values_end_where_they_end() {
        let answer = [0x94, 0x01, 0x07, 0xc0, 0x01];
        let error = [
            0x94, 0x01, 0xcd, 0x01, 0x2c, 0x92, 0x00, 0xa3, b'b', b'a', b'd', 0xc0,
        ];
        let map = [0x81, 0xa1, b'k', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0];
        for value in [&answer[..], &error[..], &map[..]] {
            assert_eq!(msgpack_skip(value, 0), Some(value.len()), "{value:?}");
            for cut in 0..value.len() {
                assert_eq!(
                    msgpack_skip(&value[..cut], 0),
                    None,
                    "{value:?} cut at {cut}"
                );
            }
        }
        // The error of the answer starts after its msgid.
        assert_eq!(msgpack_skip(&error, 2), Some(5));
    }
}
