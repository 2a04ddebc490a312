//! Where the service of a folder listens: asked of the runtime directory
//! (`moonkale_wire::runtime`), with the same rule of which service is alive
//! as the service and the shim use.

use std::path::{Path, PathBuf};

use moonkale_wire::runtime::RuntimeDir;

/// The socket of the outermost folder among `folder` and its ancestors
/// whose service is alive (a folder inside a served workspace belongs to
/// that service). Never creates the runtime directory.
pub fn find_socket(folder: &Path) -> Option<PathBuf> {
    let folder = folder.canonicalize().ok()?;
    let dir = RuntimeDir::existing()?;
    dir.service_for(&folder).map(|info| info.socket)
}
