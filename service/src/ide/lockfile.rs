//! The lock file through which Claude Code finds us:
//! `$CLAUDE_CONFIG_DIR/ide/<port>.lock`, else `~/.claude/ide/<port>.lock`.
//!
//! The CLI takes the port from the file name and reads `pid`,
//! `workspaceFolders`, `ideName`, `transport`, `runningInWindows` and
//! `authToken` from the JSON. The file holds a secret, so it is written the
//! careful way: directory 0700, file 0600, an exclusive-create temp file that
//! never follows a link, moved into place without clobbering anything we did
//! not write, and removed on exit only while it still holds exactly what we
//! wrote. A running service puts a deleted lock file back ([`LockFile::restore`]).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::runtime::{process_alive, uid};

/// The name Claude Code shows for us, and how we recognise our own locks.
pub const IDE_NAME: &str = "Moonkale";

const MAX_LOCK_FILE: u64 = 64 * 1024;

/// The JSON of a lock file, as the CLI reads it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LockContents {
    pub pid: u32,
    pub workspace_folders: Vec<PathBuf>,
    pub ide_name: String,
    pub transport: String,
    pub running_in_windows: bool,
    pub auth_token: String,
}

impl LockContents {
    /// Our lock for `folders`, held by this process, with `token`.
    pub fn ours(folders: Vec<PathBuf>, token: &str) -> LockContents {
        LockContents {
            pid: std::process::id(),
            workspace_folders: folders,
            ide_name: IDE_NAME.into(),
            transport: "ws".into(),
            running_in_windows: false,
            auth_token: token.to_owned(),
        }
    }
}

/// The lock directory: `$CLAUDE_CONFIG_DIR/ide`, else `~/.claude/ide`.
pub fn lock_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("ide"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            Error::Invalid("HOME is not set; cannot place the Claude Code lock file".into())
        })?;
    Ok(PathBuf::from(home).join(".claude").join("ide"))
}

/// A lock file we wrote. Dropping it removes the file if it is still ours.
pub struct LockFile {
    path: PathBuf,
    written: Vec<u8>,
}

impl LockFile {
    /// Writes `<dir>/<port>.lock`. Fails if anything is already at that
    /// name: it is not ours (we hold the port), so it is left alone.
    pub fn create(dir: &Path, port: u16, contents: &LockContents) -> Result<LockFile> {
        let lock = LockFile::new(dir, port, contents);
        lock.place()?;
        Ok(lock)
    }

    /// The lock file `<dir>/<port>.lock`, not written yet ([`Self::place`]).
    pub fn new(dir: &Path, port: u16, contents: &LockContents) -> LockFile {
        LockFile {
            path: dir.join(format!("{port}.lock")),
            written: serde_json::to_vec(contents).expect("lock contents serialize"),
        }
    }

    /// Removes the file while it is ours; `true` if it did.
    pub fn withdraw(&self) -> bool {
        self.is_ours() && std::fs::remove_file(&self.path).is_ok()
    }

    /// Writes the file again if it was deleted (a user's cleanup, a removed
    /// `~/.claude`), with the same contents, so new `claude --ide` sessions
    /// still find us. Whatever else is at the name is left alone. `true` if
    /// it was put back.
    pub fn restore(&self) -> Result<bool> {
        match std::fs::symlink_metadata(&self.path) {
            Ok(_) => Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.place().map(|()| true),
            Err(e) => Err(Error::io(format!("checking {}", self.path.display()), e)),
        }
    }

    /// Places the file through a private temp file, never replacing a name
    /// that exists.
    pub fn place(&self) -> Result<()> {
        let dir = self.path.parent().expect("a lock file has a directory");
        ensure_private_dir(dir)?;
        let tmp = write_temp(dir, &self.written)?;
        // link() never replaces an existing name, unlike rename().
        let linked = std::fs::hard_link(&tmp, &self.path);
        let _ = std::fs::remove_file(&tmp);
        linked.context(|| format!("placing {}", self.path.display()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn is_ours(&self) -> bool {
        read_small(&self.path).is_ok_and(|b| b == self.written)
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        if self.is_ours() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Removes lock files that we left behind when a service crashed: ours by
/// `ideName`, with a `pid` that no longer runs. Other IDEs' locks are theirs.
pub fn remove_stale_own_locks(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "lock") {
            continue;
        }
        let Ok(bytes) = read_small(&path) else {
            continue;
        };
        let Ok(lock) = serde_json::from_slice::<LockContents>(&bytes) else {
            continue;
        };
        if lock.ide_name == IDE_NAME && !process_alive(lock.pid) {
            tracing::info!(path = %path.display(), pid = lock.pid, "removing our stale Claude Code lock file");
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Another live IDE's lock file (ours or any IDE's) in `dir` whose
/// `workspaceFolders` strictly contain `root`. A `claude` started in `root`
/// would match both that lock and ours, and the CLI connects only when
/// exactly one lock contains its cwd (ide-protocol.md §1.5): so while one
/// exists, the enclosing workspace's IDE serves `root` and ours stays out.
pub fn enclosing_lock(dir: &Path, root: &Path, ours: &Path) -> Option<PathBuf> {
    /// The two fields every IDE's lock file has.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Folders {
        pid: u32,
        workspace_folders: Vec<PathBuf>,
    }
    std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
        let path = entry.path();
        if path == ours || path.extension().is_none_or(|e| e != "lock") {
            return None;
        }
        let lock: Folders = serde_json::from_slice(&read_small(&path).ok()?).ok()?;
        let encloses = lock
            .workspace_folders
            .iter()
            .any(|f| root.starts_with(f) && root != f.as_path());
        (encloses && process_alive(lock.pid)).then_some(path)
    })
}

/// Creates `dir` (0700) or makes an existing one of ours private.
fn ensure_private_dir(dir: &Path) -> Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(Error::io(format!("creating {}", dir.display()), e)),
    }
    let meta = std::fs::symlink_metadata(dir).context(|| format!("checking {}", dir.display()))?;
    if !meta.is_dir() {
        return Err(Error::UnsafeRuntimeDir {
            path: dir.into(),
            why: "not a directory".into(),
        });
    }
    if meta.uid() != uid() {
        return Err(Error::UnsafeRuntimeDir {
            path: dir.into(),
            why: "owned by another user".into(),
        });
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .context(|| format!("making {} private", dir.display()))?;
    }
    Ok(())
}

/// A new 0600 file in `dir` holding `bytes`, created exclusively.
fn write_temp(dir: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw).map_err(|e| Error::Invalid(format!("no OS randomness: {e}")))?;
    let suffix: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!(".moonkale-{}-{suffix}.tmp", std::process::id()));
    crate::runtime::write_new_private(&tmp, bytes)?;
    Ok(tmp)
}

fn read_small(path: &Path) -> std::io::Result<Vec<u8>> {
    crate::runtime::read_regular_file(path, MAX_LOCK_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(pid: u32) -> LockContents {
        LockContents {
            pid,
            workspace_folders: vec!["/w".into()],
            ide_name: IDE_NAME.into(),
            transport: "ws".into(),
            running_in_windows: false,
            auth_token: "t".repeat(64),
        }
    }

    /// Conformance L1/L2: 0600 file in a 0700 directory with the fields the
    /// CLI reads; removed on drop while it is ours.
    #[test]
    fn lock_file_is_private_and_removed_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ide");
        let lock = LockFile::create(&dir, 4242, &contents(std::process::id())).unwrap();
        let meta = std::fs::metadata(lock.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(lock.path()).unwrap()).unwrap();
        assert_eq!(json["transport"], "ws");
        assert_eq!(json["ideName"], "Moonkale");
        assert_eq!(json["runningInWindows"], false);
        assert_eq!(json["workspaceFolders"], serde_json::json!(["/w"]));
        let path = lock.path().to_owned();
        drop(lock);
        assert!(!path.exists());
    }

    /// A planted file or symlink at the lock path is neither followed nor
    /// replaced; a lock someone else rewrote is not removed.
    #[test]
    fn planted_and_foreign_files_are_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ide");
        std::fs::create_dir_all(&dir).unwrap();
        let target = tmp.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("1.lock")).unwrap();
        assert!(LockFile::create(&dir, 1, &contents(1)).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");

        let lock = LockFile::create(&dir, 2, &contents(2)).unwrap();
        std::fs::write(lock.path(), "someone else's").unwrap();
        let path = lock.path().to_owned();
        drop(lock);
        assert_eq!(std::fs::read_to_string(path).unwrap(), "someone else's");
    }

    /// A deleted lock file (or its whole directory) is put back with the
    /// same bytes; a file someone else put at the name is not replaced.
    #[test]
    fn a_deleted_lock_file_is_restored() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ide");
        let lock = LockFile::create(&dir, 7, &contents(std::process::id())).unwrap();
        let bytes = std::fs::read(lock.path()).unwrap();
        assert!(!lock.restore().unwrap(), "nothing to do while it is there");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(lock.restore().unwrap());
        assert_eq!(std::fs::read(lock.path()).unwrap(), bytes);
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::write(lock.path(), "someone else's").unwrap();
        assert!(!lock.restore().unwrap());
        assert_eq!(
            std::fs::read_to_string(lock.path()).unwrap(),
            "someone else's"
        );
    }

    /// Our locks with a dead pid go at start; live ones and other IDEs' stay.
    #[test]
    fn stale_own_locks_are_cleaned() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let dead = i32::MAX as u32; // no such process
        std::fs::write(
            dir.join("1.lock"),
            serde_json::to_vec(&contents(dead)).unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.join("2.lock"),
            serde_json::to_vec(&contents(std::process::id())).unwrap(),
        )
        .unwrap();
        let mut other = contents(dead);
        other.ide_name = "Neovim".into();
        std::fs::write(dir.join("3.lock"), serde_json::to_vec(&other).unwrap()).unwrap();
        remove_stale_own_locks(dir);
        assert!(!dir.join("1.lock").exists());
        assert!(dir.join("2.lock").exists());
        assert!(dir.join("3.lock").exists());
    }
}
