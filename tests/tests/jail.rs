//! The test sandbox of `moonkale_tests::jail` with real parts: its loopback
//! is its own (in both directions), the host's HOME and the runtime
//! directory look empty inside while the workspace is shared, and the real
//! `claude` CLI (2.1.332) runs inside it against a fake API on the jail's
//! loopback.
//!
//! Needs root (unshare, nsenter, ip), `scripts/install-test-peers.sh` for the
//! CLI (or `MOONKALE_CLAUDE`).

use std::process::Output;

use moonkale_tests::claude_cli::{Claude, ClaudeConfig};
use moonkale_tests::fakeapi::{FakeApi, Reply, Script};
use moonkale_tests::jail::Jail;
use moonkale_tests::{STEP, Sandbox, TIMEOUT};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// bash: `GET $2` from `127.0.0.1:$1`; prints the status line.
const GET: &str = r#"exec 3<>"/dev/tcp/127.0.0.1/$1"
printf 'GET %s HTTP/1.1\r\nHost: jail\r\n\r\n' "$2" >&3
IFS= read -r line <&3
printf '%s\n' "$line""#;

/// bash: connects to `127.0.0.1:$1`.
const CONNECT: &str = r#"exec 3<>"/dev/tcp/127.0.0.1/$1""#;

/// Runs `argv` inside `jail` without blocking the runtime.
async fn run_inside(jail: &Jail, argv: &[&str]) -> Output {
    let mut cmd = jail.command(argv[0]);
    cmd.args(&argv[1..]);
    tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("run in the jail")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The host holds a port on its 127.0.0.1 and the fake API binds the same
/// port on the jail's: inside, that port is the fake (and the host's
/// listener hears nothing); on the host, it is the host's listener (never
/// the fake). A port only the host listens on is refused inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jail_has_a_loopback_of_its_own() {
    let sb = Sandbox::new();
    let jail = Jail::new(&sb);
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();
    let inside = jail
        .bind_tcp(port)
        .expect("the host's port is free on the jail's loopback");
    let fake = FakeApi::with_listener(Script::new(), inside);
    assert_eq!(fake.port, port);

    let out = run_inside(
        &jail,
        &["bash", "-c", GET, "get", &port.to_string(), "/from-inside"],
    )
    .await;
    assert!(
        out.status.success() && text(&out.stdout).starts_with("HTTP/1.1 200"),
        "GET inside: {out:?}"
    );
    fake.wait_for("the GET from inside", TIMEOUT, |log| {
        log.iter().find(|r| r.path == "/from-inside").cloned()
    })
    .await;
    // That connection was answered by the fake: none waits at the host's.
    assert_eq!(
        host.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the host's listener got a connection from inside the jail"
    );

    let host = tokio::net::TcpListener::from_std(host).unwrap();
    let mut from_host = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("the host's listener");
    from_host.write_all(b"from the host\n").await.unwrap();
    let (accepted, _) = tokio::time::timeout(TIMEOUT, host.accept())
        .await
        .expect("the host's connection arrives")
        .unwrap();
    let mut line = String::new();
    BufReader::new(accepted).read_line(&mut line).await.unwrap();
    assert_eq!(line, "from the host\n");

    let only_host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let only_host_port = only_host.local_addr().unwrap().port().to_string();
    let out = run_inside(&jail, &["bash", "-c", CONNECT, "connect", &only_host_port]).await;
    assert!(
        !out.status.success() && text(&out.stderr).contains("Connection refused"),
        "a host-only port from inside: {out:?}"
    );
    assert_eq!(fake.requests().len(), 1, "{}", fake.summary());
}

/// Inside, the host HOME and the runtime directory are empty (and what is
/// written there stays inside); the workspace and the jail's HOME are the
/// same folders on both sides; a program inside keeps the caller's working
/// directory and environment.
#[test]
fn the_host_home_and_runtime_are_hidden_and_the_workspace_is_shared() {
    let sb = Sandbox::new();
    std::fs::write(sb.home.join(".claude.json"), "host secret").unwrap();
    std::fs::create_dir_all(sb.runtime.join("moonkale")).unwrap();
    std::fs::write(sb.runtime.join("moonkale/service.json"), "{}").unwrap();
    std::fs::create_dir_all(sb.workspace.join("src")).unwrap();
    std::fs::write(sb.workspace.join("src/lib.rs"), "pub fn shared() {}\n").unwrap();
    let jail = Jail::new(&sb);
    std::fs::write(jail.home().join("seed"), "jail home\n").unwrap();

    for dir in [&sb.home, &sb.runtime] {
        let out = jail.run(&["ls", "-A", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(text(&out.stdout), "", "{} inside", dir.display());
        assert!(std::fs::read_dir(dir).unwrap().next().is_some());
    }
    let hidden = sb.home.join("written-inside");
    let out = jail.run(&["touch", hidden.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        !hidden.exists(),
        "a write to the hidden HOME reached the host"
    );

    let out = jail.run(&["cat", sb.workspace.join("src/lib.rs").to_str().unwrap()]);
    assert_eq!(text(&out.stdout), "pub fn shared() {}\n", "{out:?}");
    let out = jail.run(&["cat", jail.home().join("seed").to_str().unwrap()]);
    assert_eq!(text(&out.stdout), "jail home\n", "{out:?}");

    let out = jail
        .command("sh")
        .args(["-c", r#"pwd; printf '%s\n' "$JAIL_PROBE" > made-inside"#])
        .current_dir(sb.workspace.join("src"))
        .env("JAIL_PROBE", "kept")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!("{}\n", sb.workspace.join("src").display())
    );
    assert_eq!(
        std::fs::read_to_string(sb.workspace.join("src/made-inside")).unwrap(),
        "kept\n"
    );
}

/// The real CLI, started through [`Jail::enter`] with the jail's HOME,
/// answers a prompt from the fake API on the jail's loopback; it runs in
/// the jail's network namespace and leaves the host's HOME untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_cli_answers_from_inside_the_jail() {
    let sb = Sandbox::new();
    let jail = Jail::new(&sb);
    let fake = FakeApi::start_in(
        Script::new().on_prompt("hello from the jail", Reply::text("JAILED_REPLY")),
        &jail,
    )
    .await;
    let config = ClaudeConfig::new(jail.home(), &sb.workspace, fake.port).launcher(jail.enter());
    let mut cli = Claude::spawn(config);
    cli.wait_ready(STEP).await;
    let netns = |path: String| std::fs::read_link(path).expect("a network namespace");
    let cli_netns = netns(format!("/proc/{}/ns/net", cli.pid()));
    assert_eq!(cli_netns, netns(jail.netns_path().display().to_string()));
    assert_ne!(cli_netns, netns("/proc/self/ns/net".into()));

    cli.submit("hello from the jail", STEP).await;
    fake.wait_prompt("hello from the jail", STEP).await;
    cli.wait_for_text("JAILED_REPLY", STEP).await;
    assert!(jail.home().join(".claude").is_dir());
    assert!(
        std::fs::read_dir(&sb.home).unwrap().next().is_none(),
        "the CLI wrote into the host's HOME"
    );
}
