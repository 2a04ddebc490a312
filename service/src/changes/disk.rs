//! The workspace files the change-set host reads and writes: paths from
//! the sources confined to the workspace, a changed file read back with a
//! cap, and an undo's text written atomically (or the file removed) from
//! the workspace folder's own descriptor, only while the file is still the
//! one the undo read.
//!
//! **Invariant:** nothing here follows a symlink or leaves the workspace:
//! every path passes [`crate::workspace_fs::confine`] (lexical rules, no
//! symlink on the way, no `.git`): every method takes the
//! [`ConfinedPath`] only it makes. And every open,
//! write, rename and removal is an `*at` call on a folder reached by the
//! `O_NOFOLLOW` walk of [`Root::open_parent_beneath`].
//!
//! **Invariant:** an undo never replaces or removes a file someone saved
//! after the undo read it: right before the rename (or unlink) the name
//! must still be the file read (device and inode) with the bytes read, or
//! still be absent, else nothing is written ([`Written::Changed`]).

use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::workspace_fs::{self as paths, ConfinedPath, Open, Root, check, stat_at, unlink_at};

/// The suffix of an undo's temporary file beside its target (a fixed name:
/// one service per workspace, and a crash's leftover is found again).
const TEMP_SUFFIX: &str = ".moonkale-undo";

pub struct WorkspaceFiles {
    roots: Vec<PathBuf>,
    /// The workspace folder held open; why not, if it could not be.
    root: Result<Root, String>,
    /// Runs just before the last look at the file in [`WorkspaceFiles::write`]
    /// and [`WorkspaceFiles::remove`]: a test saves the file there, as a
    /// user whose save lands while the undo is under way.
    #[cfg(test)]
    pub(super) before_last_look: Option<LastLookHook>,
}

/// What a test runs just before an undo's last look at the file.
#[cfg(test)]
pub(super) type LastLookHook = Box<dyn Fn(&Path) + Send + Sync>;

/// A file as an undo read it: what it held, and which file it was.
pub struct Seen {
    /// Its text (`None`: there was no file).
    pub text: Option<String>,
    /// Its (device, inode), when there was a file.
    id: Option<(u64, u64)>,
}

/// What [`WorkspaceFiles::write`] and [`WorkspaceFiles::remove`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Done,
    /// The file is no longer the one the undo read (someone saved,
    /// replaced, created or removed it since): it was left as it is.
    Changed,
}

impl WorkspaceFiles {
    pub fn new(root: &Path) -> WorkspaceFiles {
        WorkspaceFiles {
            roots: vec![root.to_path_buf()],
            root: Root::open(root).map_err(|e| format!("{}: {e}", root.display())),
            #[cfg(test)]
            before_last_look: None,
        }
    }

    /// `path` if it names a file inside the workspace that we may change
    /// ([`paths::confine`], whose [`ConfinedPath`] every method below takes).
    pub fn confine(&self, path: &Path) -> Result<ConfinedPath, String> {
        let raw = path
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", path.display()))?;
        // `.moonkale` is an ordinary folder here: the service keeps
        // nothing in the workspace (proposals live in the runtime folder),
        // so Claude's edits there are reviewed like any other.
        paths::confine(&self.roots, raw).map_err(|e| e.0)
    }

    fn root(&self) -> std::io::Result<&Root> {
        self.root
            .as_ref()
            .map_err(|e| std::io::Error::other(e.clone()))
    }

    /// The file as it is now (its text `None`: it does not exist); an
    /// error if it is not a regular UTF-8 file of at most `cap` bytes.
    pub fn read(&self, path: &ConfinedPath, cap: usize) -> Result<Seen, String> {
        let shown = path.display();
        let cannot = |e: std::io::Error| format!("{shown} cannot be read ({e})");
        let file = match self.root().and_then(|r| r.open_beneath(path, Open::Read)) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Seen {
                    text: None,
                    id: None,
                });
            }
            Err(e) => return Err(cannot(e)),
        };
        // Which file, taken before its bytes: a save by rename after this
        // shows as another inode, a save in place as other bytes.
        let meta = file.metadata().map_err(cannot)?;
        let mut bytes = Vec::new();
        file.take(cap as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        if bytes.len() > cap {
            return Err(format!("{shown} is larger than {} MiB", cap >> 20));
        }
        let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
        Ok(Seen {
            text: Some(text),
            id: Some((meta.dev(), meta.ino())),
        })
    }

    /// The file's bytes, for settling an undo after a crash (`None`: it
    /// does not exist; more than `cap` bytes are not read).
    pub fn read_bytes(&self, path: &ConfinedPath, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
        let file = match self.root()?.open_beneath(path, Open::Read) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.take(cap as u64 + 1).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// Replaces the file's text atomically, if it is still the file
    /// `seen` read: a temporary file beside it, written and synced, the
    /// file looked at a last time, the temporary renamed over it, the
    /// folder synced. The file keeps its mode; a file that did not exist
    /// is created (with its missing folders).
    pub fn write(&self, path: &ConfinedPath, text: &str, seen: &Seen) -> std::io::Result<Written> {
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
        // Everything slow (the write, the fsync) comes before the last
        // look, so that only the rename follows it.
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(mode))
            })
            .and_then(|()| file.sync_all())
            .and_then(|()| {
                self.last_look_hook(path);
                match seen.id {
                    // Created only where there is still no file.
                    None => rename_new(&dir, &temp, &name),
                    Some(_) if !unchanged(&dir, &name, seen)? => Ok(Written::Changed),
                    Some(_) => rename_at(&dir, &temp, &name).map(|()| Written::Done),
                }
            });
        if !matches!(written, Ok(Written::Done)) {
            let _ = unlink_at(&dir, &temp);
        }
        if written? == Written::Changed {
            return Ok(Written::Changed);
        }
        sync_dir(&dir).map(|()| Written::Done)
    }

    /// Removes the file (an undone creation) if it is still the file
    /// `seen` read; gone already is fine.
    pub fn remove(&self, path: &ConfinedPath, seen: &Seen) -> std::io::Result<Written> {
        let (dir, name) = match self.root()?.open_parent_beneath(path, false) {
            Ok(found) => found,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Written::Done),
            Err(e) => return Err(e),
        };
        match stat_at(&dir, &name)? {
            None => return Ok(Written::Done),
            Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => {
                return Err(std::io::Error::other("not a regular file"));
            }
            Some(_) => {}
        }
        self.last_look_hook(path);
        if !unchanged(&dir, &name, seen)? {
            return Ok(Written::Changed);
        }
        unlink_at(&dir, &name)?;
        sync_dir(&dir).map(|()| Written::Done)
    }

    #[cfg(test)]
    fn last_look_hook(&self, path: &Path) {
        if let Some(hook) = &self.before_last_look {
            hook(path);
        }
    }

    #[cfg(not(test))]
    fn last_look_hook(&self, _: &Path) {}

    /// Removes an undo's temporary file that a crash left beside `path`.
    pub fn remove_leftover(&self, path: &ConfinedPath) {
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

/// Whether `name` in `dir` is still the file `seen` read: the same device
/// and inode, holding the same bytes. The descriptor's `fstat` is taken
/// before the bytes are compared and the name's `fstatat` after, and the
/// two must agree (size, mtime, ctime): a write in place during the
/// comparison shows there.
///
/// What remains open: a save that lands after the final `fstatat` and
/// before the caller's `renameat`/`unlinkat` (two system calls back to
/// back, microseconds), and an editor that opened the file before the look
/// and writes into it after the rename (its bytes go to the replaced
/// inode). Editors take no lock an undo could wait on, so the window is
/// made as short as it can be rather than closed.
fn unchanged(dir: &OwnedFd, name: &CStr, seen: &Seen) -> std::io::Result<bool> {
    let (Some(id), Some(text)) = (seen.id, &seen.text) else {
        return Ok(stat_at(dir, name)?.is_none());
    };
    let fd = match paths::openat(dir, name, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
        Ok(fd) => fd,
        // Gone, or a symlink put in its place.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ELOOP)) => {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let file = std::fs::File::from(fd);
    let before = file.metadata()?;
    if !before.is_file() || (before.dev(), before.ino()) != id {
        return Ok(false);
    }
    let expected = text.as_bytes();
    let mut bytes = Vec::with_capacity(expected.len() + 1);
    (&file)
        .take(expected.len() as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes != expected {
        return Ok(false);
    }
    // Closed now, not between the last look and the caller's rename.
    drop(file);
    let Some(now) = stat_at(dir, name)? else {
        return Ok(false);
    };
    Ok((now.st_dev, now.st_ino) == id
        && u64::try_from(now.st_size) == Ok(before.size())
        && (now.st_mtime, now.st_mtime_nsec) == (before.mtime(), before.mtime_nsec())
        && (now.st_ctime, now.st_ctime_nsec) == (before.ctime(), before.ctime_nsec()))
}

/// Renames `from` to `to` only if nothing has the name `to`: atomically
/// with `RENAME_NOREPLACE`, or, on a file system without it, with a look
/// just before.
fn rename_new(dir: &OwnedFd, from: &CStr, to: &CStr) -> std::io::Result<Written> {
    // SAFETY: valid descriptor and NUL-terminated names.
    let rc = unsafe {
        libc::renameat2(
            dir.as_raw_fd(),
            from.as_ptr(),
            dir.as_raw_fd(),
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    match check(rc) {
        Ok(()) => Ok(Written::Done),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(Written::Changed),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
            if stat_at(dir, to)?.is_some() {
                return Ok(Written::Changed);
            }
            rename_at(dir, from, to).map(|()| Written::Done)
        }
        Err(e) => Err(e),
    }
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
