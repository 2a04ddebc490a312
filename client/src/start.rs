//! Connecting to a workspace's service, starting it first if none runs:
//! what the shim, `moonkale-service acp` and the command line do before they
//! speak to it.

use std::path::Path;

use moonkale_wire::runtime::{RuntimeDir, ServiceInfo, WorkspaceFiles};
use tokio::net::UnixStream;

use crate::error::{Error, Result};

/// How long to wait for a service we started to accept connections.
pub const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Connects to the service of the workspace at `root`, starting
/// `service_bin serve` for it if none answers; returns the connection and
/// the service's info.
///
/// Race-free: every caller that finds no service starts one, but a service
/// serves a workspace only while holding its lock (see
/// [`moonkale_wire::runtime`]), so all but one exit at once and every caller
/// connects to the survivor.
///
/// A folder inside a served workspace is served by that workspace's service
/// (the outermost one that answers), so nested folders never get a second
/// service and a second Claude Code lock file over them.
pub async fn connect_or_start(
    root: &Path,
    service_bin: &Path,
) -> Result<(UnixStream, ServiceInfo)> {
    let dir = RuntimeDir::from_env()?;
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
/// ancestors and `root` itself that is alive and whose socket answers.
async fn try_connect(dir: &RuntimeDir, root: &Path) -> Option<(UnixStream, ServiceInfo)> {
    for info in dir.services_for(root) {
        if let Ok(stream) = UnixStream::connect(&info.socket).await {
            return Some((stream, info));
        }
    }
    None
}

/// Starts `service_bin serve` for `root` in its own session, so it outlives
/// its starter, with its log in the runtime directory.
fn start_service(files: &WorkspaceFiles, root: &Path, service_bin: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(files.log_path())
        .map_err(|source| Error::Io {
            context: format!("opening {}", files.log_path().display()),
            source,
        })?;
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
    let mut child = cmd.spawn().map_err(|source| Error::Io {
        context: format!("starting {}", service_bin.display()),
        source,
    })?;
    tracing::info!(
        pid = child.id(),
        "started moonkale-service for {}",
        root.display()
    );
    // Reap it whenever it exits (a service that lost the start race exits at once).
    std::thread::spawn(move || child.wait());
    Ok(())
}
