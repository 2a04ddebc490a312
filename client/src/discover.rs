//! Where the service of a folder listens, as the service publishes it: an
//! info file `ws-<hash>.json` per served workspace in the runtime
//! directory (`$XDG_RUNTIME_DIR/moonkale`, else `/tmp/moonkale-<uid>`),
//! `<hash>` the FNV-1a 64 hash of the workspace's canonical path.

use std::path::{Path, PathBuf};

#[derive(serde::Deserialize)]
struct Info {
    workspace: PathBuf,
    socket: PathBuf,
}

/// The socket of the outermost served folder among `folder` and its
/// ancestors (a folder inside a served workspace belongs to that service).
pub fn find_socket(folder: &Path) -> Option<PathBuf> {
    let folder = folder.canonicalize().ok()?;
    let dir = runtime_dir()?;
    let ancestors: Vec<&Path> = folder.ancestors().collect();
    ancestors.into_iter().rev().find_map(|root| {
        let name = format!("ws-{:016x}.json", moonkale_protocol::path_hash(root));
        let text = std::fs::read(dir.join(name)).ok()?;
        let info: Info = serde_json::from_slice(&text).ok()?;
        (info.workspace == root && info.socket.exists()).then_some(info.socket)
    })
}

fn runtime_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
    {
        return Some(dir.join("moonkale"));
    }
    // Our uid without libc: the owner of our own /proc entry.
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").ok()?);
    Some(std::env::temp_dir().join(format!("moonkale-{uid}")))
}
