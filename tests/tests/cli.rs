//! The command line as a user meets it: every failure is one line saying
//! what happened and what to do, never a backtrace.

use std::process::Output;

use moonkale_tests::remote::{TOKEN, make_certificate};
use moonkale_tests::{Sandbox, TIMEOUT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    let mut tcp = TcpStream::connect(&addr).await.expect("connect");
    let head = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {WRONG}\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut answer = vec![0u8; 64];
    let n = tokio::time::timeout(TIMEOUT, tcp.read(&mut answer))
        .await
        .expect("an answer")
        .expect("read");
    String::from_utf8_lossy(&answer[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status")
}

/// `connect` with a wrong token, while throttled, against a port nobody
/// listens on, over TLS with a certificate it does not trust, to a host that
/// does not exist; `agent` with no service running; a bad argument: each is
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

    // Fill the slowed attempts' slots: once one attempt is answered 429 at
    // once, the slowest ones still wait for up to 2 s.
    let mut attempts: Vec<_> = (0..20)
        .map(|_| tokio::spawn(wrong_attempt(addr.clone())))
        .collect();
    let mut throttled = false;
    while !throttled && !attempts.is_empty() {
        let (status, _, rest) = futures_util::future::select_all(attempts).await;
        throttled = status.expect("attempt") == 429;
        attempts = rest;
    }
    assert!(throttled, "no attempt was answered 429");
    let out = run(
        &sb,
        &["connect", &url, "list"],
        &[("MOONKALE_TOKEN", WRONG)],
    )
    .await;
    assert_one_line_error(&out, "throttled", &["429", "try again in a minute"]);
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
        &["agent", "--workspace", ws.to_str().unwrap(), "list"],
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
}
