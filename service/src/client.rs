//! A small LSP client: used by `moonkale-service status`, the shim's
//! start-up, tests and benchmarks. It speaks the same framing as the server.

use std::path::Path;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::error::{Error, IoContext, Result};
use crate::lsp::connection::ROLE_OPTION;
use crate::lsp::framing::{FrameReader, write_frame};
use crate::lsp::message::{self, Message, RequestId};

pub struct LspClient<R, W> {
    reader: FrameReader<R>,
    writer: W,
    next_id: i64,
    /// Notifications and server requests that arrived while waiting for a
    /// response, oldest first.
    pub received: Vec<Message>,
}

impl LspClient<OwnedReadHalf, OwnedWriteHalf> {
    pub async fn connect_unix(path: &Path) -> Result<Self> {
        let stream = UnixStream::connect(path)
            .await
            .context(|| format!("connecting to {}", path.display()))?;
        let (r, w) = stream.into_split();
        Ok(LspClient::new(r, w))
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LspClient<R, W> {
    pub fn new(read: R, write: W) -> Self {
        LspClient {
            reader: FrameReader::new(read),
            writer: write,
            next_id: 1,
            received: Vec::new(),
        }
    }

    /// Sends a request and waits for its response.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = RequestId::Number(self.next_id);
        self.next_id += 1;
        self.send_raw(&message::request(&id, method, params))
            .await?;
        loop {
            match self.next_message().await? {
                Message::Response {
                    id: Some(got),
                    result,
                } if got == id => {
                    // The code is for programs; the message is what a
                    // person reads (status, stop and changes print it).
                    return result.map_err(|e| Error::Remote(e.message));
                }
                other => self.received.push(other),
            }
        }
    }

    pub async fn notify(&mut self, method: &str, params: Value) -> Result<()> {
        self.send_raw(&message::notification(method, params)).await
    }

    pub async fn send_raw(&mut self, body: &[u8]) -> Result<()> {
        write_frame(&mut self.writer, body)
            .await
            .context(|| "sending to the service".into())
    }

    pub async fn next_message(&mut self) -> Result<Message> {
        let body = self.reader.read_frame().await?.ok_or(Error::Closed)?;
        message::parse(&body)
            .map_err(|e| Error::Invalid(format!("bad message from the service: {e:?}")))
    }

    /// `initialize` + `initialized` as an observer: a connection that is not
    /// listed among the editors.
    pub async fn initialize_observer(&mut self, name: &str) -> Result<Value> {
        let result = self
            .request(
                "initialize",
                json!({
                    "processId": std::process::id(),
                    "clientInfo": {"name": name},
                    "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]}},
                    "initializationOptions": {ROLE_OPTION: "observer"},
                }),
            )
            .await?;
        self.notify("initialized", json!({})).await?;
        Ok(result)
    }
}

/// How long to wait for a service we started to accept connections.
pub const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Connects to the service of the workspace at `root`, starting
/// `service_bin serve` for it if none answers; returns the connection and
/// the service's info.
///
/// Race-free: every caller that finds no service starts one, but a service
/// serves a workspace only while holding its lock (see [`crate::runtime`]),
/// so all but one exit at once and every caller connects to the survivor.
///
/// A folder inside a served workspace is served by that workspace's service
/// (the outermost one that answers), so nested folders never get a second
/// service and a second Claude Code lock file over them.
pub async fn connect_or_start(
    root: &Path,
    service_bin: &Path,
) -> Result<(UnixStream, crate::runtime::ServiceInfo)> {
    let dir = crate::runtime::RuntimeDir::from_env()?;
    if let Some(found) = try_connect(&dir, root).await {
        return Ok(found);
    }
    let files = dir.workspace(root);
    // Held until we are connected: a service for a folder inside `root`
    // started at this instant (another editor's) yields to ours.
    let _claim = files.claim_start()?;
    start_service(&files, root, service_bin)?;
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    loop {
        // The service is another process; its info file appearing is the
        // event, and polling it is the portable way to wait for it.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        if let Some(found) = try_connect(&dir, root).await {
            return Ok(found);
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Invalid(format!(
                "moonkale-service did not start for {} within {:?}; see {}",
                root.display(),
                START_TIMEOUT,
                files.log_path().display()
            )));
        }
    }
}

/// Connects to the service of the outermost folder among `root`'s
/// ancestors and `root` itself whose socket answers.
async fn try_connect(
    dir: &crate::runtime::RuntimeDir,
    root: &Path,
) -> Option<(UnixStream, crate::runtime::ServiceInfo)> {
    let folders: Vec<&Path> = root.ancestors().collect();
    for folder in folders.into_iter().rev() {
        let Some(info) = dir.workspace(folder).read_info() else {
            continue;
        };
        if let Ok(stream) = UnixStream::connect(&info.socket).await {
            return Some((stream, info));
        }
    }
    None
}

/// Starts `service_bin serve` for `root` in its own session, so it outlives
/// its starter, with its log in the runtime directory.
fn start_service(
    files: &crate::runtime::WorkspaceFiles,
    root: &Path,
    service_bin: &Path,
) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(files.log_path())
        .context(|| format!("opening {}", files.log_path().display()))?;
    let mut cmd = std::process::Command::new(service_bin);
    cmd.arg("serve")
        .arg("--exit-when-idle")
        .arg("--workspace")
        .arg(root)
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    // SAFETY: setsid is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .context(|| format!("starting {}", service_bin.display()))?;
    tracing::info!(
        pid = child.id(),
        "started moonkale-service for {}",
        root.display()
    );
    // Reap it whenever it exits (a service that lost the start race exits at once).
    std::thread::spawn(move || child.wait());
    Ok(())
}
