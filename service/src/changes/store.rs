//! Change sets on disk: one JSON file per set, `<id>.json`, in the
//! workspace's folder of the user's state directory (never in the
//! workspace), 0600 in a 0700 folder, each written whole and atomically.
//!
//! **Invariant:** a set file is either the old or the new version of the
//! set (temp file, fsync, rename, fsync of the folder; a crash's temporary
//! file is removed at load); a file that does not read as a set is
//! skipped with a warning, never fatal.

use std::path::{Path, PathBuf};

use moonkale_hub::core::changes::ChangeSet;

use crate::error::{IoContext, Result};
use crate::runtime;
use crate::user_state::ensure_private_dir;

/// Largest set file read back: a set's texts are capped at 64 MiB, and
/// JSON escapes can make them longer.
const MAX_SET_FILE: u64 = 256 << 20;

pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store in `dir`, created (0700) if missing.
    pub fn open(dir: PathBuf) -> Result<Store> {
        ensure_private_dir(&dir)?;
        Ok(Store { dir })
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Every set that reads back whole, in no order.
    pub fn load(&self) -> Vec<ChangeSet> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!("cannot list {}: {e}", self.dir.display());
                return Vec::new();
            }
        };
        let mut sets = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if is_leftover(&path) {
                // A write a crash interrupted: the set file beside it is whole.
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let Some(id) = set_id(&path) else {
                continue;
            };
            match read_set(&path, id) {
                Ok(set) => sets.push(set),
                Err(why) => tracing::warn!("skipping change set {}: {why}", path.display()),
            }
        }
        sets
    }

    pub fn save(&self, set: &ChangeSet) -> Result<()> {
        let path = self.path(set.id);
        let bytes = serde_json::to_vec(set).expect("a set serializes");
        runtime::write_private_atomic(&path, &bytes)?;
        std::fs::File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .context(|| format!("syncing {}", self.dir.display()))
    }

    pub fn remove(&self, id: u64) {
        match std::fs::remove_file(self.path(id)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove change set {id}: {e}"),
        }
    }
}

/// The id a set file's name gives (`<id>.json`); `None` for other files
/// (a temporary file a crash left is not a set).
fn set_id(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".json")?.parse().ok()
}

/// A temporary file of [`runtime::write_private_atomic`] (`<id>.tmp<pid>`).
fn is_leftover(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split_once(".tmp"))
        .is_some_and(|(id, pid)| {
            id.parse::<u64>().is_ok() && pid.bytes().all(|b| b.is_ascii_digit())
        })
}

fn read_set(path: &Path, id: u64) -> std::result::Result<ChangeSet, String> {
    let bytes = runtime::read_regular_file(path, MAX_SET_FILE + 1).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_SET_FILE {
        return Err("too large".into());
    }
    let mut set: ChangeSet = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if set.id != id {
        return Err(format!("it holds set {}", set.id));
    }
    set.restore()?;
    Ok(set)
}
