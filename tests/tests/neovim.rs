//! Neovim 0.11.4 as a real front end: a headless `nvim` with the config in
//! `tests/nvim/init.lua`, driven with real keystrokes over its `--listen`
//! socket (`nvim --server S --remote-send KEYS`), and read back with
//! `--remote-expr`.
//!
//! Neovim comes from `scripts/install-test-peers.sh` (or `$MOONKALE_NVIM`).
//! It batches keystrokes into one `didChange` per ~150 ms, so every check
//! first waits (deadline-bound) for Neovim's own buffer to show the keys'
//! effect and then for the service to catch up to exactly that version.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use moonkale_service::runtime::{ServiceInfo, WorkspaceFiles};
use moonkale_tests::nvim::{Attach, Headless, Remote, start_headless};
use moonkale_tests::{RawLsp, Sandbox, TIMEOUT, editor, wait_until};
use serde_json::{Value, json};

fn init_lua() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("nvim/init.lua")
}

/// Neovim's side of the current buffer at one moment.
#[derive(Debug)]
struct Buffer {
    /// The lines joined with "\n", plus "\n" when 'eol' is set: the text
    /// Neovim's LSP client sends for the buffer.
    text: String,
    /// `vim.lsp.util.buf_versions[buf]`: the version of the latest change,
    /// which its (possibly still debounced) `didChange` carries.
    version: i64,
    mode: String,
    /// `MoonkaleTest.state()` from init.lua: client attached/initialized,
    /// offset encoding, messages and errors from the LSP client.
    lsp: Value,
}

/// A headless Neovim in a sandbox; killed when dropped.
struct Nvim {
    h: Headless,
    /// The service's log when the shim started it.
    service_log: Option<PathBuf>,
}

/// `nvim --server` requests go straight to [`Remote`].
impl std::ops::Deref for Nvim {
    type Target = Remote;

    fn deref(&self) -> &Remote {
        &self.h.remote
    }
}

impl Nvim {
    /// Starts `nvim --headless --clean -u init.lua --listen SOCK FILE` in the
    /// workspace and waits until its client for FILE has initialized.
    async fn start(sandbox: &Sandbox, attach: Attach<'_>, file: &str) -> Nvim {
        let service_log = matches!(attach, Attach::Shim).then(|| sandbox.files().log_path());
        let extra = vec![
            ("MOONKALE_LOG", "debug".into()),
            ("MOONKALE_TEST_ROOT", sandbox.workspace.clone().into()),
        ];
        let h = start_headless(sandbox, &init_lua(), attach, file, extra);
        let nvim = Nvim { h, service_log };
        let this = &nvim;
        let buf = wait_until("Neovim's LSP client to initialize", || async move {
            // Fails until the --listen socket is up and init.lua has run.
            let b = this.try_buffer().await?;
            assert_eq!(b.lsp["errors"], json!([]), "the LSP client failed: {b:#?}");
            (b.lsp["initialized"] == true).then_some(b)
        })
        .await;
        assert_eq!(buf.lsp["uri"], json!(sandbox.uri(file)));
        nvim
    }

    /// The current buffer's text and LSP version, read in one evaluation.
    async fn buffer(&self) -> Buffer {
        Self::parse_buffer(self.eval(Self::BUFFER).await)
    }

    /// [`Nvim::buffer`], or `None` while Neovim cannot answer yet.
    async fn try_buffer(&self) -> Option<Buffer> {
        self.try_eval(Self::BUFFER)
            .await
            .ok()
            .map(Self::parse_buffer)
    }

    /// One line: --remote-expr takes no line breaks.
    const BUFFER: &str = concat!(
        r#"{'text': join(getline(1, '$'), "\n") .. (&eol ? "\n" : ''), "#,
        r#"'version': luaeval('vim.lsp.util.buf_versions[vim.api.nvim_get_current_buf()]'), "#,
        r#"'mode': mode(), "#,
        r#"'lsp': luaeval('MoonkaleTest.state()')}"#,
    );

    fn parse_buffer(v: Value) -> Buffer {
        Buffer {
            text: v["text"].as_str().expect("text").to_owned(),
            version: v["version"].as_i64().expect("version"),
            mode: v["mode"].as_str().expect("mode").to_owned(),
            lsp: v["lsp"].clone(),
        }
    }

    /// Sends `keys`, then waits until Neovim is back in normal mode with
    /// exactly `expected` in the buffer (so the keys did what the test says).
    async fn type_keys(&self, keys: &str, expected: &str) -> Buffer {
        self.send_keys(keys).await;
        wait_until(
            &format!("Neovim to show the effect of {keys:?}"),
            || async move {
                let b = self.buffer().await;
                (b.mode == "n" && b.text == expected).then_some(b)
            },
        )
        .await
    }

    /// `:qa!` and wait for Neovim to exit.
    async fn quit(mut self) {
        // Neovim may exit before answering, so the client's result is moot.
        let _ = self.remote(&["--remote-send", "<Esc>:qa!<CR>"]).await;
        let status = tokio::time::timeout(TIMEOUT, self.h.child.wait())
            .await
            .expect("Neovim did not exit after :qa!")
            .expect("wait for nvim");
        assert!(status.success(), "nvim exited with {status}");
    }
}

impl Nvim {
    /// The buffer's lines and mode, for the failure report (no async in
    /// Drop; gives up after a few seconds if Neovim is stuck).
    fn buffer_blocking(&self) -> String {
        let mut cmd = std::process::Command::new(&self.bin);
        cmd.arg("--server")
            .arg(&self.listen)
            .args([
                "--remote-expr",
                "json_encode({'lines': getline(1, '$'), 'mode': mode()})",
            ])
            .env_remove("NVIM")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let Ok(mut child) = cmd.spawn() else {
            return "(could not run nvim --server)".into();
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                let mut out = String::new();
                let _ = std::io::Read::read_to_string(
                    &mut child.stdout.take().expect("piped"),
                    &mut out,
                );
                return out;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        "(Neovim did not answer)".into()
    }
}

impl Drop for Nvim {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let tail = |path: &Path| {
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})"));
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(60)..].join("\n")
        };
        eprintln!("----- nvim buffer\n{}", self.buffer_blocking());
        eprintln!(
            "----- nvim output ({})\n{}",
            self.h.output.display(),
            tail(&self.h.output)
        );
        eprintln!(
            "----- nvim lsp.log ({})\n{}",
            self.h.lsp_log.display(),
            tail(&self.h.lsp_log)
        );
        if let Some(log) = &self.service_log {
            eprintln!("----- service log ({})\n{}", log.display(), tail(log));
        }
    }
}

/// The service the shim starts for the sandbox's workspace. It outlives the
/// editor by design, so the test stops it (SIGTERM to the pid in the info
/// file) at the end, or from `Drop` when the test fails at any point after
/// Neovim was started.
struct AutoStarted {
    files: WorkspaceFiles,
}

impl AutoStarted {
    /// Made before Neovim starts, when no service runs for the workspace.
    fn expect(files: WorkspaceFiles) -> AutoStarted {
        assert!(
            files.read_info().is_none(),
            "no service runs before Neovim starts"
        );
        AutoStarted { files }
    }

    /// The info file of the service the shim started.
    fn info(&self) -> ServiceInfo {
        self.files
            .read_info()
            .expect("the shim started a service, so its info file exists")
    }

    /// SIGTERM, then wait until the process has let go of the workspace
    /// lock (the kernel releases it when the process exits; the process is
    /// not our child, so we cannot wait for it).
    async fn stop(self) {
        let pid = self.info().pid as i32;
        // SAFETY: kill has no memory-safety preconditions.
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGTERM) },
            0,
            "SIGTERM to the service"
        );
        let files = &self.files;
        wait_until("the auto-started service to exit", || {
            let gone =
                files.read_info().is_none() && files.try_lock().expect("lock file").is_some();
            async move { gone.then_some(()) }
        })
        .await;
    }
}

impl Drop for AutoStarted {
    fn drop(&mut self) {
        // After stop() the info file is gone and this does nothing.
        if let Some(info) = self.files.read_info() {
            // SAFETY: as above.
            unsafe { libc::kill(info.pid as i32, libc::SIGTERM) };
        }
    }
}

/// An observer on the service's socket: not an editor, may ask anything.
async fn observer(socket: &Path) -> RawLsp {
    let mut lsp = RawLsp::connect_unix(socket).await;
    lsp.initialize(
        "neovim-test-observer",
        &["utf-8"],
        json!({"moonkaleRole": "observer"}),
    )
    .await;
    lsp
}

/// Waits until the service holds exactly Neovim's `buf` (same version, same
/// text, in sync) for `uri`, as the document last touched.
async fn assert_service_has(obs: &mut RawLsp, uri: &str, buf: &Buffer) -> Value {
    let version = i32::try_from(buf.version).expect("version fits i32");
    // Pushed by the service when the version arrives; no polling needed.
    obs.wait_for_version(uri, version).await;
    let doc = obs.document(uri).await;
    assert_eq!(
        doc["version"],
        json!(buf.version),
        "service version vs Neovim's buf_versions: {doc:#}"
    );
    assert_eq!(
        doc["text"].as_str(),
        Some(buf.text.as_str()),
        "service text vs Neovim's buffer"
    );
    assert_eq!(doc["inSync"], true, "{doc:#}");
    doc
}

/// Waits until `status --json` shows `client`'s (only) document at `version`.
async fn status_at_version(sandbox: &Sandbox, client: &str, version: i64) -> Value {
    wait_until(
        &format!("{client}'s version {version} in status"),
        || async move {
            let status = sandbox.status().await;
            let docs = &editor(&status, client)["documents"];
            (docs[0]["version"] == json!(version)).then_some(status)
        },
    )
    .await
}

/// Neovim 0.11.4 starts `moonkale-shim` as a stdio language server, the shim
/// starts the service for the workspace (none ran before), and real
/// keystrokes (multi-line insert with emoji and CJK, `dd`, `o`, `J`, `x` on
/// an emoji, deleting and undoing the last line, `:s` with multibyte text)
/// reach the service as Neovim's incremental `didChange`s in UTF-8
/// positions: after every step the service's text and version equal the
/// buffer's text and Neovim's LSP version for it.
#[tokio::test]
async fn neovim_edits_through_the_shim_reach_the_service() {
    let sandbox = Sandbox::new();
    std::fs::write(
        sandbox.workspace.join("notes.txt"),
        "alpha\nbravo\ncharlie\n",
    )
    .expect("write file");
    let uri = sandbox.uri("notes.txt");
    let service = AutoStarted::expect(sandbox.files());

    let nvim = Nvim::start(&sandbox, Attach::Shim, "notes.txt").await;
    let info = service.info();
    let mut obs = observer(&info.socket).await;

    // didOpen: the file as Neovim read it, at version 0.
    let opened = nvim.buffer().await;
    assert_eq!(opened.version, 0);
    let doc = assert_service_has(&mut obs, &uri, &opened).await;
    assert_eq!(doc["dirty"], false);
    // Neovim offers its default encodings (utf-8 first) and the service picks utf-8.
    assert_eq!(opened.lsp["offset_encoding"], "utf-8");
    let status = sandbox.status().await;
    let ed = editor(&status, "Neovim");
    assert_eq!(ed["positionEncoding"], "utf-8", "{status:#}");
    assert_eq!(ed["clientVersion"], "0.11.4+v0.11.4");
    assert_eq!(ed["documents"][0]["languageId"], "text");

    let steps: &[(&str, &str)] = &[
        // Insert three lines above the first, without leaving insert mode.
        (
            "ggOhéllo 😀 wörld<CR>日本語のテキスト<CR>third 🎉 line<Esc>",
            "héllo 😀 wörld\n日本語のテキスト\nthird 🎉 line\nalpha\nbravo\ncharlie\n",
        ),
        // Delete the line below the cursor, open one below the next.
        (
            "jddo中文 🦀 crab<Esc>",
            "héllo 😀 wörld\n日本語のテキスト\nthird 🎉 line\nbravo\n中文 🦀 crab\ncharlie\n",
        ),
        // Join two lines; delete an emoji (4 UTF-8 bytes, 2 UTF-16 units).
        // (`0`: Neovim defaults to 'nostartofline', so `2G` keeps the column.)
        (
            "ggJ2G0f🎉x",
            "héllo 😀 wörld 日本語のテキスト\nthird  line\nbravo\n中文 🦀 crab\ncharlie\n",
        ),
        // Delete the last line (a change that ends past the last newline)...
        (
            "Gdd",
            "héllo 😀 wörld 日本語のテキスト\nthird  line\nbravo\n中文 🦀 crab\n",
        ),
        // ...and undo it.
        (
            "u",
            "héllo 😀 wörld 日本語のテキスト\nthird  line\nbravo\n中文 🦀 crab\ncharlie\n",
        ),
        // One command changing several lines.
        (
            ":%s/a/ä/g<CR>",
            "héllo 😀 wörld 日本語のテキスト\nthird  line\nbrävo\n中文 🦀 cräb\nchärlie\n",
        ),
    ];
    let mut last_version = opened.version;
    for (keys, expected) in steps {
        let buf = nvim.type_keys(keys, expected).await;
        assert!(
            buf.version > last_version,
            "{keys:?} made a new LSP version: {buf:#?}"
        );
        last_version = buf.version;
        let doc = assert_service_has(&mut obs, &uri, &buf).await;
        assert_eq!(doc["dirty"], true);
    }

    // Nothing was refused on the way: the service reports refusals as logMessage.
    let end = nvim.buffer().await;
    assert_eq!(
        end.lsp["messages"],
        json!([]),
        "the service complained: {end:#?}"
    );
    assert_eq!(end.lsp["errors"], json!([]));

    nvim.quit().await;
    service.stop().await;
}

/// Neovim connects straight to the service's unix socket
/// (`vim.lsp.rpc.connect(path)`, no shim), while a scripted client attaches
/// as a second editor and opens the same file with other text and its own
/// version. Both edit it, Neovim in UTF-8 and the script in UTF-16
/// positions; `status --json` then lists both editors, each with its own
/// buffer of the file (its own version and size), and `moonkale/document`
/// answers from whichever editor touched the file last.
#[tokio::test]
async fn neovim_over_the_socket_and_a_scripted_editor_keep_separate_buffers() {
    let sandbox = Sandbox::new();
    std::fs::write(sandbox.workspace.join("shared.txt"), "on disk\n").expect("write file");
    let uri = sandbox.uri("shared.txt");
    let service = sandbox.start_service(&[]).await;

    let nvim = Nvim::start(&sandbox, Attach::Socket(&service.info.socket), "shared.txt").await;

    let mut script = service.connect().await;
    let init = script
        .initialize("scripted-editor", &["utf-16"], json!({}))
        .await;
    assert_eq!(init["capabilities"]["positionEncoding"], "utf-16");
    script.did_open(&uri, 7, "scripted 🦀 text\n").await;

    // Interleaved edits: Neovim, then the script, then Neovim again; each
    // waits until the service has the other's edit, so "last" is well defined.
    let nv = nvim
        .type_keys("ggOneovim 日本 😀<Esc>", "neovim 日本 😀\non disk\n")
        .await;
    status_at_version(&sandbox, "Neovim", nv.version).await;
    // After the crab (2 UTF-16 units): column 11, not 10 (chars) or 13 (bytes).
    script.did_change(&uri, 8, [0, 11, 0, 11], "!").await;
    script.did_change(&uri, 9, [0, 0, 0, 0], "the ").await;
    let script_text = "the scripted 🦀! text\n";
    // Our own requests are handled after our own notifications.
    let doc = script.document(&uri).await;
    assert_eq!(
        doc["text"], script_text,
        "the script touched the file last: {doc:#}"
    );
    assert_eq!(doc["version"], 9);

    let nv = nvim
        .type_keys("jddo改 🎉<Esc>", "neovim 日本 😀\n改 🎉\n")
        .await;

    let status = status_at_version(&sandbox, "Neovim", nv.version).await;
    let neovim = editor(&status, "Neovim");
    let scripted = editor(&status, "scripted-editor");
    assert_ne!(neovim["id"], scripted["id"]);
    assert_eq!(neovim["transport"], "unix");
    assert_eq!(neovim["positionEncoding"], "utf-8");
    assert_eq!(scripted["positionEncoding"], "utf-16");
    let nd = &neovim["documents"];
    let sd = &scripted["documents"];
    assert_eq!(nd.as_array().map(Vec::len), Some(1), "{status:#}");
    assert_eq!(sd.as_array().map(Vec::len), Some(1), "{status:#}");
    assert_eq!(nd[0]["uri"], json!(uri));
    assert_eq!(sd[0]["uri"], json!(uri));
    assert_eq!(nd[0]["bytes"], json!(nv.text.len()));
    assert_eq!(sd[0]["bytes"], json!(script_text.len()));
    assert_eq!(sd[0]["version"], 9);
    assert_ne!(nd[0]["version"], sd[0]["version"]);
    assert_ne!(nd[0]["bytes"], sd[0]["bytes"]);
    for d in [&nd[0], &sd[0]] {
        assert_eq!(d["inSync"], true, "{status:#}");
        assert_eq!(d["dirty"], true, "{status:#}");
    }
    // Each buffer holds its text, URI, language id and bookkeeping.
    let held = |d: &Value| {
        d["bytes"].as_u64().unwrap()
            + d["uri"].as_str().unwrap().len() as u64
            + d["languageId"].as_str().unwrap().len() as u64
            + moonkale_service::hub::DOCUMENT_OVERHEAD as u64
    };
    assert_eq!(status["totalBytes"], json!(held(&nd[0]) + held(&sd[0])));

    // Neovim touched it last now, so the document is Neovim's text.
    let doc = script.document(&uri).await;
    assert_eq!(doc["editor"], neovim["id"]);
    assert_eq!(doc["text"].as_str(), Some(nv.text.as_str()));
    assert_eq!(doc["version"], json!(nv.version));

    let end = nvim.buffer().await;
    assert_eq!(
        end.lsp["messages"],
        json!([]),
        "the service complained: {end:#?}"
    );
    nvim.quit().await;
    // The socket editor is gone from the service once Neovim has exited.
    let sb = &sandbox;
    wait_until("Neovim to leave the status", || async move {
        let status = sb.status().await;
        let eds = status["editors"].as_array().expect("editors").clone();
        (eds.len() == 1 && eds[0]["client"] == "scripted-editor").then_some(())
    })
    .await;
    drop(service);
}

/// Saving, reverting, closing and quitting in Neovim reach the service
/// through the shim: `:w` sends didSave with the text (the service's copy is
/// clean and equals the file on disk), `:e!` reopens the document at
/// version 0 with the text from disk, `:bd` sends didClose (the document
/// leaves the status), `:qa!` detaches the editor, and the auto-started
/// service keeps running after its only editor has gone.
#[tokio::test]
async fn neovim_save_close_and_quit_through_the_shim() {
    let sandbox = Sandbox::new();
    let path = sandbox.workspace.join("saved.txt");
    std::fs::write(&path, "one\ntwo\n").expect("write file");
    let uri = sandbox.uri("saved.txt");

    let service = AutoStarted::expect(sandbox.files());
    let nvim = Nvim::start(&sandbox, Attach::Shim, "saved.txt").await;
    let info = service.info();
    let mut obs = observer(&info.socket).await;

    let buf = nvim.type_keys("Go三 🐉<Esc>", "one\ntwo\n三 🐉\n").await;
    let doc = assert_service_has(&mut obs, &uri, &buf).await;
    assert_eq!(doc["dirty"], true);

    // :w bumps b:changedtick but not the LSP version: no didChange follows.
    nvim.send_keys(":w<CR>").await;
    let sb = &sandbox;
    wait_until("the service to see the save", || async move {
        let status = sb.status().await;
        let d = &editor(&status, "Neovim")["documents"][0];
        (d["dirty"] == false).then_some(())
    })
    .await;
    assert_eq!(std::fs::read_to_string(&path).expect("read file"), buf.text);
    let doc = obs.document(&uri).await;
    assert_eq!(doc["text"].as_str(), Some(buf.text.as_str()));
    assert_eq!(doc["version"], json!(buf.version));
    assert_eq!(nvim.buffer().await.version, buf.version);
    let tick = nvim.eval("b:changedtick").await;
    assert!(
        tick.as_i64() > Some(buf.version),
        "changedtick {tick} after :w"
    );

    // Revert an edit with `:e!`: Neovim sends didClose and a new didOpen,
    // so its LSP version starts again at 0 and the service takes the text
    // from disk.
    let edited = nvim.type_keys("ggdd", "two\n三 🐉\n").await;
    assert_service_has(&mut obs, &uri, &edited).await;
    nvim.send_keys(":e!<CR>").await;
    let this = &nvim;
    let saved = buf.text.as_str();
    let reverted = wait_until("Neovim to reload the file", || async move {
        let b = this.buffer().await;
        (b.version == 0 && b.text == saved).then_some(b)
    })
    .await;
    status_at_version(&sandbox, "Neovim", 0).await;
    let doc = obs.document(&uri).await;
    assert_eq!(doc["text"].as_str(), Some(reverted.text.as_str()));
    assert_eq!((&doc["version"], &doc["dirty"]), (&json!(0), &json!(false)));

    nvim.send_keys(":bd<CR>").await;
    wait_until("the service to see the close", || async move {
        let status = sb.status().await;
        let docs = editor(&status, "Neovim")["documents"]
            .as_array()
            .expect("documents")
            .clone();
        docs.is_empty().then_some(())
    })
    .await;
    let gone = obs.request("moonkale/document", json!({"uri": uri})).await;
    assert!(
        gone.get("error").is_some(),
        "closed everywhere, so no document: {gone}"
    );

    nvim.quit().await;
    wait_until("Neovim to leave the status", || async move {
        let status = sb.status().await;
        status["editors"]
            .as_array()
            .is_some_and(Vec::is_empty)
            .then_some(())
    })
    .await;
    // The service outlives the editor that started it (the observer is still served).
    assert_eq!(sandbox.files().read_info().map(|i| i.pid), Some(info.pid));
    assert_eq!(
        obs.call("moonkale/status", json!({})).await["editors"],
        json!([])
    );
    service.stop().await;
}
