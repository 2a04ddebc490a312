//! The workspace files the change-set host reads and writes: paths from
//! the sources confined to the workspace, a changed file read back with a
//! cap, and an undo's text written atomically (or the file removed) from
//! the workspace folder's own descriptor.
//!
//! **Invariant:** nothing here follows a symlink or leaves the workspace:
//! every path passes [`crate::ide::paths::confine`] (lexical rules, no
//! symlink on the way, no `.git`) and refuses `.moonkale`, and every open,
//! write, rename and removal is an `*at` call on a folder reached by the
//! `O_NOFOLLOW` walk of [`Root::open_parent_beneath`].

use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::ide::paths::{self, Open, Root, check, stat_at, unlink_at};

/// The suffix of an undo's temporary file beside its target (a fixed name:
/// one service per workspace, and a crash's leftover is found again).
const TEMP_SUFFIX: &str = ".moonkale-undo";

pub struct WorkspaceFiles {
    roots: Vec<PathBuf>,
    /// The workspace folder held open; why not, if it could not be.
    root: Result<Root, String>,
}

impl WorkspaceFiles {
    pub fn new(root: &Path) -> WorkspaceFiles {
        WorkspaceFiles {
            roots: vec![root.to_path_buf()],
            root: Root::open(root).map_err(|e| format!("{}: {e}", root.display())),
        }
    }

    /// `path` if it names a file inside the workspace that we may change.
    pub fn confine(&self, path: &Path) -> Result<PathBuf, String> {
        let raw = path
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", path.display()))?;
        let clean = paths::confine(&self.roots, raw).map_err(|e| e.0)?;
        if clean
            .components()
            .any(|c| c.as_os_str().as_bytes().eq_ignore_ascii_case(b".moonkale"))
        {
            return Err(format!("inside .moonkale: {raw:?}"));
        }
        Ok(clean)
    }

    fn root(&self) -> std::io::Result<&Root> {
        self.root
            .as_ref()
            .map_err(|e| std::io::Error::other(e.clone()))
    }

    /// The file's text (`None`: it does not exist); an error if it is not
    /// a regular UTF-8 file of at most `cap` bytes.
    pub fn read(&self, path: &Path, cap: usize) -> Result<Option<String>, String> {
        let shown = path.display();
        let file = match self.root().and_then(|r| r.open_beneath(path, Open::Read)) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{shown} cannot be read ({e})")),
        };
        let mut bytes = Vec::new();
        file.take(cap as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{shown} cannot be read ({e})"))?;
        if bytes.len() > cap {
            return Err(format!("{shown} is larger than {} MiB", cap >> 20));
        }
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| format!("{shown} is not UTF-8 text"))
    }

    /// The file's bytes, for settling an undo after a crash (`None`: it
    /// does not exist; more than `cap` bytes are not read).
    pub fn read_bytes(&self, path: &Path, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
        let file = match self.root()?.open_beneath(path, Open::Read) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.take(cap as u64 + 1).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// Replaces the file's text atomically: a temporary file beside it,
    /// written and synced, renamed over it, the folder synced. The file
    /// keeps its mode; a file that did not exist is created (with its
    /// missing folders).
    pub fn write(&self, path: &Path, text: &str) -> std::io::Result<()> {
        let (dir, name) = self.root()?.open_parent_beneath(path, true)?;
        let mode = match stat_at(&dir, &name)? {
            Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => {
                return Err(std::io::Error::other("not a regular file"));
            }
            Some(st) => st.st_mode & 0o7777,
            None => 0o644,
        };
        let temp = temp_name(&name);
        let _ = unlink_at(&dir, &temp);
        let fd = paths::openat(
            &dir,
            &temp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )?;
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(mode))
            })
            .and_then(|()| file.sync_all())
            .and_then(|()| rename_at(&dir, &temp, &name));
        if let Err(e) = written {
            let _ = unlink_at(&dir, &temp);
            return Err(e);
        }
        sync_dir(&dir)
    }

    /// Removes the file (an undone creation); gone already is fine.
    pub fn remove(&self, path: &Path) -> std::io::Result<()> {
        let (dir, name) = match self.root()?.open_parent_beneath(path, false) {
            Ok(found) => found,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        match stat_at(&dir, &name)? {
            None => return Ok(()),
            Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => {
                return Err(std::io::Error::other("not a regular file"));
            }
            Some(_) => {}
        }
        unlink_at(&dir, &name)?;
        sync_dir(&dir)
    }

    /// Removes an undo's temporary file that a crash left beside `path`.
    pub fn remove_leftover(&self, path: &Path) {
        if let Ok((dir, name)) = self.root().and_then(|r| r.open_parent_beneath(path, false)) {
            let temp = temp_name(&name);
            if matches!(stat_at(&dir, &temp), Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFREG)
            {
                let _ = unlink_at(&dir, &temp);
            }
        }
    }
}

fn temp_name(name: &CStr) -> CString {
    let mut bytes = b".".to_vec();
    bytes.extend_from_slice(name.to_bytes());
    bytes.extend_from_slice(TEMP_SUFFIX.as_bytes());
    CString::new(bytes).expect("no NUL: built from a C string")
}

fn rename_at(dir: &OwnedFd, from: &CStr, to: &CStr) -> std::io::Result<()> {
    // SAFETY: valid descriptor and NUL-terminated names; `renameat` replaces
    // `to` itself (a symlink there is replaced, never followed).
    check(unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) })
}

fn sync_dir(dir: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: a valid descriptor.
    check(unsafe { libc::fsync(dir.as_raw_fd()) })
}
