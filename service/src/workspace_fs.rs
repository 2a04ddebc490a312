//! The workspace's file system, confined: the paths named by Claude Code's
//! tool calls, a transcript's records, a hosted session's tools and a remote
//! client's URIs checked against the workspace folders, and files opened or
//! changed only beneath the workspace's own descriptor.
//!
//! It is a top-level module, under `ide`, `lsp`, `agent` and `changes`,
//! because all of them confine paths the same way; it depends on nothing of
//! the service but the core's lexical rules.
//!
//! Every path from the wire is untrusted (security.md 31–37). A path is
//! accepted only if it passes the lexical rules of
//! [`crate::core::confine`] (absolute, no `..`, inside a workspace folder by
//! whole components, not the folder itself, no `.git` component in any
//! letter case) and reaches its target without passing through a symlink
//! (checked with `lstat` from the folder down). Components that do not exist
//! yet are allowed: a proposal may create a new file.
//!
//! A check followed by an open can be raced: a folder swapped for a symlink
//! after the check would lead the open outside (security.md 34). So files
//! are opened with [`open_beneath`]: a walk from the workspace folder's own
//! descriptor, one `openat(O_NOFOLLOW)` per component, which refuses a
//! symlink at any step whenever it appears.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub use crate::core::confine::Refused;

/// A path that passed [`confine`]: absolute and clean, strictly inside a
/// workspace folder by whole components, with no `.git` component, and
/// reached from the folder without a symlink when it was checked.
///
/// The constructor is the proof: the field is private and [`confine`] is
/// the only way to get one, so a function that takes a `ConfinedPath` needs
/// no check of its own, and one that needs a confined path says so in its
/// signature. **Invariant:** only [`confine`] makes a `ConfinedPath`.
///
/// It says what was true when it was checked: the disk may change after,
/// which is why files are still opened by the `O_NOFOLLOW` walk of
/// [`Root::open_beneath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinedPath(PathBuf);

impl ConfinedPath {
    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// The path, for a type outside the service (the wire, the hub's
    /// events) that holds a plain one.
    pub fn into_path_buf(self) -> PathBuf {
        self.0
    }
}

impl std::ops::Deref for ConfinedPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ConfinedPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl From<ConfinedPath> for PathBuf {
    fn from(path: ConfinedPath) -> PathBuf {
        path.0
    }
}

/// [`confine_lexically`](crate::core::confine::confine_lexically), then a
/// walk from the root that refuses any symlink on the way; the only
/// constructor of a [`ConfinedPath`].
pub fn confine(roots: &[PathBuf], raw: &str) -> Result<ConfinedPath, Refused> {
    let refuse = |why: &str| Err(Refused(format!("{why}: {raw:?}")));
    let (clean, root) = crate::core::confine::confine_lexically(roots, raw)?;
    let inside = clean.strip_prefix(root).expect("confined to root");
    let mut at = root.to_path_buf();
    for part in inside.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => return refuse("goes through a symlink"),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(_) => return refuse("cannot be checked"),
        }
    }
    Ok(ConfinedPath(clean))
}

/// How [`open_beneath`] opens the last component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// An existing regular file, for reading (never blocks on a FIFO).
    Read,
    /// A new file (mode 0600), creating missing folders on the way.
    CreateNew,
}

/// A workspace folder held open since the service started serving it.
/// Files are opened from this descriptor, never from the folder's path: a
/// folder moved or deleted under the service must not be re-created at its
/// old path, and whatever later takes that name (a new clone, another
/// project) is not the workspace. So [`Root::open_beneath`] first checks
/// that the path still names the folder we hold, and fails cleanly if not.
pub struct Root {
    path: PathBuf,
    dir: std::os::fd::OwnedFd,
    /// (device, inode) of the folder.
    id: (u64, u64),
}

impl Root {
    pub fn open(path: &Path) -> std::io::Result<Root> {
        let dir = std::fs::File::open(path)?;
        let meta = dir.metadata()?;
        if !meta.is_dir() {
            return Err(std::io::Error::other("not a directory"));
        }
        use std::os::unix::fs::MetadataExt;
        Ok(Root {
            path: path.to_path_buf(),
            id: (meta.dev(), meta.ino()),
            dir: dir.into(),
        })
    }

    pub fn path(&self) -> &PathBuf {
        &self.path
    }

    /// The same folder, held by a descriptor of its own.
    pub fn try_clone(&self) -> std::io::Result<Root> {
        Ok(Root {
            path: self.path.clone(),
            dir: self.dir.try_clone()?,
            id: self.id,
        })
    }

    /// A descriptor of the folder, for `*at` calls that never follow a
    /// symlink.
    pub(crate) fn dir(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.dir.try_clone()
    }

    /// An error if the path no longer names the folder we hold.
    pub(crate) fn check_still_here(&self) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let here = std::fs::symlink_metadata(&self.path).ok();
        if here.is_none_or(|m| (m.dev(), m.ino()) != self.id) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "the workspace folder {} was moved or deleted",
                    self.path.display()
                ),
            ));
        }
        Ok(())
    }

    /// Opens `path`, which must lie under the workspace (else an error),
    /// walking from the folder's descriptor one component at a time without
    /// following any symlink; an error if the workspace is no longer at its
    /// path.
    pub fn open_beneath(&self, path: &ConfinedPath, how: Open) -> std::io::Result<std::fs::File> {
        self.check_still_here()?;
        walk_beneath(self.dir.try_clone()?, &self.path, path, how)
    }

    /// The folder holding `path` (which must lie under the workspace),
    /// opened by the same walk as [`Root::open_beneath`] (creating missing
    /// folders when `create`), and the file's name in it: for writing and
    /// removing a file by `*at` calls that never follow a symlink.
    pub fn open_parent_beneath(
        &self,
        path: &ConfinedPath,
        create: bool,
    ) -> std::io::Result<(std::os::fd::OwnedFd, std::ffi::CString)> {
        self.check_still_here()?;
        let (dir, last) = walk_dirs(self.dir.try_clone()?, &self.path, path, create)?;
        Ok((dir, cstr(last)?))
    }
}

/// Opens `path`, which must lie under `root` (else an error), walking from
/// `root` one component at a time without following any symlink.
pub fn open_beneath(root: &Path, path: &ConfinedPath, how: Open) -> std::io::Result<std::fs::File> {
    Root::open(root)?.open_beneath(path, how)
}

fn cstr(p: &OsStr) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_bytes()).map_err(|_| std::io::Error::other("NUL in path"))
}

/// `openat(dir, name, flags | O_CLOEXEC | O_NOFOLLOW, mode)`.
pub fn openat(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::CStr,
    flags: i32,
    mode: u32,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: a valid directory descriptor and a NUL-terminated name; on
    // success we own the returned descriptor.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode,
        )
    };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// Walks from `dir`, the descriptor of `root`, to the folder holding
/// `path`, one `openat(O_NOFOLLOW)` per component (creating missing ones
/// when `create`); that folder and the last component.
fn walk_dirs<'p>(
    mut dir: std::os::fd::OwnedFd,
    root: &Path,
    path: &'p Path,
    create: bool,
) -> std::io::Result<(std::os::fd::OwnedFd, &'p OsStr)> {
    use std::os::fd::AsRawFd;
    let rel = path
        .strip_prefix(root)
        .map_err(|_| std::io::Error::other("not under the workspace"))?;
    let parts: Vec<&OsStr> = rel.components().map(|c| c.as_os_str()).collect();
    let Some((last, dirs)) = parts.split_last() else {
        return Err(std::io::Error::other("no file name"));
    };
    for part in dirs {
        let name = cstr(part)?;
        if create {
            // SAFETY: valid descriptor and name; EEXIST is fine.
            let made = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o700) };
            if made < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                return Err(std::io::Error::last_os_error());
            }
        }
        dir = openat(&dir, &name, libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
    }
    Ok((dir, last))
}

/// The walk of [`Root::open_beneath`] from `dir`, the descriptor of `root`.
fn walk_beneath(
    dir: std::os::fd::OwnedFd,
    root: &Path,
    path: &Path,
    how: Open,
) -> std::io::Result<std::fs::File> {
    let (dir, last) = walk_dirs(dir, root, path, how == Open::CreateNew)?;
    let name = cstr(last)?;
    let fd = match how {
        Open::Read => openat(&dir, &name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?,
        Open::CreateNew => openat(
            &dir,
            &name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )?,
    };
    let file = std::fs::File::from(fd);
    if how == Open::Read {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        // A hard link may share its contents with a file outside the
        // workspace (security.md 35): such files are not read.
        if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
            return Err(std::io::Error::other("the file has other hard links"));
        }
    }
    Ok(file)
}

pub(crate) fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `lstat` of `name` in `dir`; `None` if there is nothing by that name.
pub(crate) fn stat_at(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::CStr,
) -> std::io::Result<Option<libc::stat>> {
    // SAFETY: a zeroed `stat` is a valid out-buffer; valid descriptor and
    // NUL-terminated name.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::fstatat(
            std::os::fd::AsRawFd::as_raw_fd(dir),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    match check(rc) {
        Ok(()) => Ok(Some(st)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

pub(crate) fn unlink_at(dir: &std::os::fd::OwnedFd, name: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: valid descriptor and NUL-terminated name.
    check(unsafe { libc::unlinkat(std::os::fd::AsRawFd::as_raw_fd(dir), name.as_ptr(), 0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Security cases 31–33 and 37 against a fixture tree.
    #[test]
    fn escapes_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("proj");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(base.join("project-secrets")).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("link.md")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("outdir")).unwrap();
        std::os::unix::fs::symlink("../outside/new", root.join("dangling")).unwrap();
        let roots = vec![root.clone()];
        let r = root.display().to_string();
        let ok = |p: &str| confine(&roots, p).map(|p| p.display().to_string());
        assert_eq!(ok(&format!("{r}/a.txt")), Ok(format!("{r}/a.txt")));
        assert_eq!(
            ok(&format!("{r}/./sub/new.rs")),
            Ok(format!("{r}/sub/new.rs"))
        );
        assert_eq!(
            ok(&format!("{r}/brand/new/dir/file")),
            Ok(format!("{r}/brand/new/dir/file"))
        );
        for bad in [
            "/etc/passwd".to_owned(),
            format!("{r}/../outside/secret"),
            format!("{r}/sub/../../outside/secret"),
            "a.txt".to_owned(),
            r.clone(),
            format!("{r}/a\0b"),
            String::new(),
            format!("{}/project-secrets/x", base.display()),
            format!("{r}/link.md"),
            format!("{r}/outdir/secret"),
            format!("{r}/dangling"),
            format!("{r}/.git/hooks/pre-commit"),
            format!("{r}/.GIT/config"),
            format!("{r}/sub/.Git"),
        ] {
            assert!(confine(&roots, &bad).is_err(), "{bad:?} was accepted");
        }
    }

    /// A `ConfinedPath` comes only from `confine`: none for a path outside
    /// the roots, through `..` or through a symlink out; one that is made
    /// is the clean path, usable as a `Path`.
    #[test]
    fn a_confined_path_is_made_only_by_confine() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("proj");
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), root.join("out")).unwrap();
        let roots = vec![root.clone()];
        let r = root.display();
        let b = base.display();
        for bad in [
            format!("{b}/outside/a.rs"),
            format!("{r}/../outside/a.rs"),
            format!("{r}/out/a.rs"),
        ] {
            let made: Result<ConfinedPath, Refused> = confine(&roots, &bad);
            assert!(made.is_err(), "{bad:?} was confined");
        }
        let path = confine(&roots, &format!("{r}/./src/a.rs")).unwrap();
        assert_eq!(path.as_path(), root.join("src/a.rs"));
        assert_eq!(path.file_name(), Some(OsStr::new("a.rs")), "a Path");
        assert_eq!(PathBuf::from(path.clone()), path.into_path_buf());
    }

    /// Security case 34: a folder swapped for a symlink after the check and
    /// before the open (deterministically, between `confine` and
    /// `open_beneath`) is refused; nothing is read or created outside.
    #[test]
    fn hostile_34_swap_after_the_check_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("proj");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("sub/a.txt"), "inside").unwrap();
        std::fs::write(outside.join("a.txt"), "SECRET").unwrap();
        let roots = vec![root.clone()];
        let target = confine(&roots, &format!("{}/sub/a.txt", root.display())).unwrap();
        let created = confine(&roots, &format!("{}/sub/new.txt", root.display())).unwrap();
        assert!(open_beneath(&root, &target, Open::Read).is_ok());
        // The swap.
        std::fs::rename(root.join("sub"), base.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
        assert!(open_beneath(&root, &target, Open::Read).is_err());
        assert!(open_beneath(&root, &created, Open::CreateNew).is_err());
        assert!(!outside.join("new.txt").exists());
        // A symlink as the file itself (put there after the check), and
        // special files.
        std::fs::remove_file(root.join("sub")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let link = confine(&roots, &format!("{}/sub/link", root.display())).unwrap();
        std::os::unix::fs::symlink(outside.join("a.txt"), root.join("sub/link")).unwrap();
        assert!(open_beneath(&root, &link, Open::Read).is_err());
        let folder = confine(&roots, &format!("{}/sub", root.display())).unwrap();
        assert!(
            open_beneath(&root, &folder, Open::Read).is_err(),
            "a folder is not a file"
        );
    }
}
