//! `moonkale-shim`: the stdio language server an editor starts, which
//! connects it to the running moonkale-service of its workspace (starting
//! one if none runs).
//!
//! The shim is a validating pipe. Editor → service: frames are checked
//! (framing, UTF-8, JSON) and forwarded byte for byte; bad ones get a
//! JSON-RPC error from the shim, as a stdio server should answer, and never
//! reach the service's socket, which would close on them. Service → editor:
//! whole frames, so the shim's own error replies never interleave with them.
//!
//! Starting the service is race-free: every shim that finds no service
//! starts one, but a service serves a workspace only while holding its lock
//! (see `moonkale_wire::runtime`), so all but one exit at once and every
//! shim connects to the survivor.
//!
//! `moonkale-shim -- <server> <args…>` wraps a real language server for
//! editors that start only stdio servers; see [`wrap`] for its routing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use moonkale_protocol::jsonrpc::{self as message, Message, ResponseError, code};
use moonkale_wire::framing::{FrameError, FrameReader, write_frame};
use moonkale_wire::runtime::{self, editor_root};
use moonkale_wire::stdio;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

mod wrap;

/// Stdio language server that connects an editor to moonkale-service.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    /// The workspace folder [default: the root the editor sends in initialize,
    /// else the current directory].
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// A real language server to wrap (`moonkale-shim -- pylsp`): the
    /// editor gets its features and Moonkale's through one stdio server.
    #[arg(last = true, value_name = "SERVER")]
    server: Vec<String>,
}

fn main() {
    // SAFETY: umask has no preconditions; set before any thread exists.
    unsafe { libc::umask(0o077) };
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr) // stdout carries LSP
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MOONKALE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // One thread: the shim only moves bytes, and waking tasks on the same
    // thread is what keeps its added latency low.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("starting the async runtime");
    let code = match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("moonkale-shim: {e:#}");
            1
        }
    };
    rt.shutdown_background();
    std::process::exit(code);
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    let (stdout, stdout_rx) = mpsc::channel::<Vec<u8>>(1024);
    let stdout_task = tokio::spawn(write_stdout(stdout_rx));
    let mut stdin = FrameReader::new(stdio::stdin());

    // Until `initialize` we do not know the workspace, so we answer alone.
    let (init_body, params) = loop {
        let Some(body) = read_editor_frame(&mut stdin, &stdout).await? else {
            return Ok(0);
        };
        match message::parse(&body) {
            Ok(Message::Request { method, params, .. }) if method == "initialize" => {
                break (body, params);
            }
            Ok(Message::Request { id, .. }) => {
                let err = ResponseError::new(code::SERVER_NOT_INITIALIZED, "initialize first");
                let _ = stdout.send(message::response(&id, &Err(err))).await;
            }
            Ok(Message::Notification { method, .. }) if method == "exit" => return Ok(1),
            Ok(_) => {}
            Err(err) => {
                let _ = stdout.send(err.to_response()).await;
            }
        }
    };
    let params: serde_json::Value = serde_json::from_str(params.get()).unwrap_or_default();
    let root = match cli.workspace.or_else(|| editor_root(&params)) {
        Some(root) => root,
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let root = runtime::canonical_workspace(&root)?;
    if !cli.server.is_empty() {
        let code = wrap::run(cli.server, root, init_body, params, stdin, stdout).await?;
        let _ = tokio::time::timeout(Duration::from_secs(2), stdout_task).await;
        return Ok(code);
    }
    let socket = connect_or_start(&root).await?;
    let (sock_read, mut sock_write) = socket.into_split();
    write_frame(&mut sock_write, &init_body)
        .await
        .context("sending initialize to the service")?;

    // Service → editor.
    let to_editor = stdout.clone();
    let mut service_task = tokio::spawn(async move {
        let mut from_service = FrameReader::new(sock_read);
        loop {
            match from_service.read_frame().await {
                Ok(Some(body)) => {
                    if to_editor.send(body).await.is_err() {
                        return;
                    }
                }
                Ok(None) | Err(_) => return,
            }
        }
    });

    // Editor → service.
    let mut shutdown_seen = false;
    let mut service_gone = false;
    let code = loop {
        let body = tokio::select! {
            frame = read_editor_frame(&mut stdin, &stdout) => frame?,
            _ = &mut service_task => {
                service_gone = true;
                let lost = json!({"type": 1, "message": "moonkale: lost the connection to moonkale-service"});
                let _ = stdout.send(message::notification("window/showMessage", lost)).await;
                break 1;
            }
        };
        let Some(body) = body else { break 0 };
        let exit = match message::parse(&body) {
            Ok(Message::Request { method, .. }) => {
                shutdown_seen |= method == "shutdown";
                false
            }
            Ok(Message::Notification { method, .. }) => method == "exit",
            Ok(Message::Response { .. }) => false,
            Err(err) => {
                let _ = stdout.send(err.to_response()).await;
                continue;
            }
        };
        if write_frame(&mut sock_write, &body).await.is_err() {
            break 1;
        }
        if exit {
            break if shutdown_seen { 0 } else { 1 };
        }
    };
    let _ = sock_write.shutdown().await;
    drop(stdout);
    // Give the service a moment to answer what is in flight (e.g. shutdown).
    // A finished JoinHandle must not be polled again: it panics.
    if !service_gone {
        let _ = tokio::time::timeout(Duration::from_secs(2), service_task).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), stdout_task).await;
    Ok(code)
}

/// The next frame from the editor; framing errors are answered with -32700
/// and skipped (stdio recovery). `None` at end of input.
async fn read_editor_frame(
    stdin: &mut FrameReader<stdio::BoxRead>,
    stdout: &mpsc::Sender<Vec<u8>>,
) -> anyhow::Result<Option<Vec<u8>>> {
    loop {
        match stdin.read_frame().await {
            Ok(frame) => return Ok(frame),
            Err(FrameError::BadHeader(why)) => {
                tracing::warn!("framing error from the editor: {why}");
                let err = ResponseError::new(code::PARSE_ERROR, format!("framing error: {why}"));
                let _ = stdout.send(message::error_response(None, &err)).await;
                if !stdin.resync().await? {
                    return Ok(None);
                }
            }
            Err(FrameError::UnexpectedEof) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

async fn write_stdout(mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut out = stdio::stdout();
    while let Some(body) = rx.recv().await {
        if write_frame(&mut out, &body).await.is_err() {
            return;
        }
    }
}

/// Connects to the workspace's service, starting one if none answers.
async fn connect_or_start(root: &Path) -> anyhow::Result<UnixStream> {
    let (stream, _) = moonkale_client::connect_or_start(root, &service_binary()).await?;
    Ok(stream)
}

/// `$MOONKALE_SERVICE_BIN`, else `moonkale-service` next to this binary,
/// else `moonkale-service` from `PATH`.
fn service_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("MOONKALE_SERVICE_BIN") {
        return bin.into();
    }
    if let Ok(exe) = std::env::current_exe() {
        let sibling = exe.with_file_name("moonkale-service");
        if sibling.is_file() {
            return sibling;
        }
    }
    PathBuf::from("moonkale-service")
}
