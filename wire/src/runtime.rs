//! Where a workspace's service is found: a private runtime directory holding,
//! per workspace, a lock, a unix socket, a token file, an info file and a log.
//!
//! The directory is `$XDG_RUNTIME_DIR/moonkale`, else `/tmp/moonkale-<uid>`;
//! it must be a real directory (not a symlink) owned by us with no group or
//! other permissions, or we refuse to use it. Per-workspace files are named by
//! a hash of the workspace's canonical path, so every process that names the
//! same folder finds the same service.
//!
//! **Invariant:** a service serves a workspace only while it holds that
//! workspace's locks (OS file locks, released by the kernel when the process
//! dies): one on the workspace folder itself, which no cleaner of the runtime
//! directory can delete away, so two services never serve one folder; and
//! one on `ws-<hash>.lock`, so two services never publish under one name.
//! A running service puts back whatever of its files disappear
//! ([`WorkspaceLock::hold_file`], the service's `server::Published`).
//!
//! **Invariant:** editors opened at once on a workspace and on a folder
//! inside it end with one service, the outer one's: a starter (the shim)
//! claims its folder's start (`ws-<hash>.starting`) before it starts a
//! service, and a service does not start inside a folder whose start is
//! claimed by a live process ([`RuntimeDir::enclosing_start`]), as it does
//! not start inside a served one.
//!
//! **Invariant:** one rule says whether a published service is alive: its
//! pid runs and is not a zombie ([`process_alive`]). The service (refusing
//! to start inside a served folder), the shim and the front-end client
//! (finding whom to connect to) all ask [`RuntimeDir::services_for`].

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::error::{IoContext, Result};

/// Largest info or token file we read.
const MAX_SMALL_FILE: u64 = 64 * 1024;

pub struct RuntimeDir {
    path: PathBuf,
}

impl RuntimeDir {
    /// The runtime directory from the environment, created if missing.
    pub fn from_env() -> Result<RuntimeDir> {
        RuntimeDir::at(RuntimeDir::path_from_env())
    }

    /// Where [`RuntimeDir::from_env`] puts the directory, without creating it.
    pub fn path_from_env() -> PathBuf {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_dir())
            .map(|p| p.join("moonkale"))
            .unwrap_or_else(|| std::env::temp_dir().join(format!("moonkale-{}", uid())))
    }

    /// The runtime directory from the environment if it exists and is safe
    /// to use; `None` otherwise. For readers that only look for a service
    /// (a front end), which must not create the directory.
    pub fn existing() -> Option<RuntimeDir> {
        let path = RuntimeDir::path_from_env();
        path.is_dir().then(|| RuntimeDir::at(path).ok()).flatten()
    }

    /// Creates (0700) or checks the directory at `path`.
    pub fn at(path: PathBuf) -> Result<RuntimeDir> {
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::file(format!("creating {}", path.display()), e)),
        }
        let meta =
            std::fs::symlink_metadata(&path).context(|| format!("checking {}", path.display()))?;
        let unsafe_dir = |why: &str| Error::UnsafeRuntimeDir {
            path: path.clone(),
            why: why.into(),
        };
        if !meta.file_type().is_dir() {
            return Err(unsafe_dir(
                "not a directory (a symlink or a file is in its place)",
            ));
        }
        if meta.uid() != uid() {
            return Err(unsafe_dir("owned by another user"));
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
                .context(|| format!("making {} private", path.display()))?;
        }
        Ok(RuntimeDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The live service that serves `root`: that of the outermost folder,
    /// among `root`'s ancestors and `root` itself, for which one runs. A
    /// folder inside a served workspace belongs to that workspace's service
    /// (ARCHITECTURE.md, nested workspaces).
    pub fn service_for(&self, root: &Path) -> Option<ServiceInfo> {
        self.services_for(root).next()
    }

    /// Every live service among `root`'s ancestors and `root` itself,
    /// outermost first: a connecting client takes the first whose socket
    /// answers.
    pub fn services_for<'a>(&'a self, root: &'a Path) -> impl Iterator<Item = ServiceInfo> + 'a {
        self.live_services(root.ancestors())
    }

    /// The outermost of `root`'s ancestors whose service a live starter
    /// is starting now ([`WorkspaceFiles::claim_start`]), and the
    /// starter's pid.
    pub fn enclosing_start(&self, root: &Path) -> Option<(PathBuf, u32)> {
        let folders: Vec<&Path> = root.ancestors().skip(1).collect();
        folders.into_iter().rev().find_map(|folder| {
            let pid = self.workspace(folder).start_claimed()?;
            Some((folder.to_path_buf(), pid))
        })
    }

    /// [`Self::service_for`] among `root`'s ancestors only.
    pub fn enclosing_service(&self, root: &Path) -> Option<ServiceInfo> {
        self.live_services(root.ancestors().skip(1)).next()
    }

    /// The one resolver: the info of each folder's service, outermost
    /// folder first, kept only if it names that folder and its pid is
    /// alive ([`process_alive`]). A socket file proves nothing (a killed
    /// service leaves it behind); a pid that runs and is no zombie does.
    fn live_services<'a>(
        &'a self,
        folders: impl Iterator<Item = &'a Path>,
    ) -> impl Iterator<Item = ServiceInfo> + 'a {
        let folders: Vec<&Path> = folders.collect();
        folders.into_iter().rev().filter_map(move |folder| {
            self.workspace(folder)
                .read_info()
                .filter(|i| i.workspace == folder && process_alive(i.pid))
        })
    }

    pub fn workspace(&self, root: &Path) -> WorkspaceFiles {
        WorkspaceFiles {
            dir: self.path.clone(),
            root: root.to_path_buf(),
            key: format!("ws-{:016x}", path_hash(root)),
        }
    }
}

/// How long a start claim counts: longer than any start takes
/// (`moonkale_client::START_TIMEOUT` is 15 s).
const START_CLAIM_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30);

/// What `ws-<hash>.starting` holds.
#[derive(Serialize, Deserialize)]
struct StartClaimFile {
    pid: u32,
    workspace: PathBuf,
}

/// A claim of a workspace's start ([`WorkspaceFiles::claim_start`]),
/// withdrawn when dropped (if it is still ours).
pub struct StartClaim {
    path: PathBuf,
}

impl Drop for StartClaim {
    fn drop(&mut self) {
        let ours = read_small_private(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice::<StartClaimFile>(&b).ok())
            .is_some_and(|c| c.pid == std::process::id());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The files of one workspace inside the runtime directory.
pub struct WorkspaceFiles {
    dir: PathBuf,
    root: PathBuf,
    key: String,
}

/// What a running service publishes about itself (`ws-<hash>.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceInfo {
    pub pid: u32,
    pub workspace: PathBuf,
    pub socket: PathBuf,
    pub lsp_tcp: Option<String>,
    /// The remote front door's address (`serve --listen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    pub token_file: PathBuf,
    /// The port of Claude Code's IDE server, when it runs.
    pub ide_port: Option<u16>,
    pub version: String,
}

impl WorkspaceFiles {
    fn file(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}{suffix}", self.key))
    }
    pub fn lock_path(&self) -> PathBuf {
        self.file(".lock")
    }
    pub fn info_path(&self) -> PathBuf {
        self.file(".json")
    }
    pub fn token_path(&self) -> PathBuf {
        self.file(".token")
    }
    pub fn log_path(&self) -> PathBuf {
        self.file(".log")
    }
    /// Socket paths to try in order; a later one is used when something that
    /// is not our stale socket sits at an earlier one.
    pub fn socket_candidates(&self) -> impl Iterator<Item = PathBuf> + '_ {
        (0..8).map(|i| {
            if i == 0 {
                self.file(".sock")
            } else {
                self.file(&format!("-{i}.sock"))
            }
        })
    }

    /// The runtime directory these files live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn start_claim_path(&self) -> PathBuf {
        self.file(".starting")
    }

    /// Says that this process is about to start the workspace's service,
    /// until the claim is dropped; a service for a folder inside waits its
    /// turn by refusing to start ([`RuntimeDir::enclosing_start`]).
    pub fn claim_start(&self) -> Result<StartClaim> {
        let claim = StartClaimFile {
            pid: std::process::id(),
            workspace: self.root.clone(),
        };
        let path = self.start_claim_path();
        write_private_atomic(
            &path,
            &serde_json::to_vec(&claim).expect("a claim serializes"),
        )?;
        Ok(StartClaim { path })
    }

    /// The pid of the live process that claimed this workspace's start, if
    /// a claim younger than [`START_CLAIM_LIFETIME`] is there (an older
    /// one's pid may be someone else's by now).
    fn start_claimed(&self) -> Option<u32> {
        let path = self.start_claim_path();
        let young = std::fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < START_CLAIM_LIFETIME));
        if !young {
            return None;
        }
        let claim: StartClaimFile =
            serde_json::from_slice(&read_small_private(&path).ok()?).ok()?;
        (claim.workspace == self.root && process_alive(claim.pid)).then_some(claim.pid)
    }

    /// Takes the workspace's locks (the folder's, then the runtime file's),
    /// or `None` if another process holds either.
    pub fn try_lock(&self) -> Result<Option<WorkspaceLock>> {
        let folder = File::open(&self.root)
            .context(|| format!("opening workspace {}", self.root.display()))?;
        if !try_flock(&folder, &self.root)? {
            return Ok(None);
        }
        let Some(file) = self.try_lock_file()? else {
            return Ok(None);
        };
        Ok(Some(WorkspaceLock {
            _folder: folder,
            file,
        }))
    }

    /// Opens (creating it if needed) and locks `ws-<hash>.lock`.
    fn try_lock_file(&self) -> Result<Option<File>> {
        let path = self.lock_path();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .context(|| format!("opening lock {}", path.display()))?;
        Ok(try_flock(&file, &path)?.then_some(file))
    }

    /// The info of the service that runs now, if one does.
    pub fn read_info(&self) -> Option<ServiceInfo> {
        let bytes = read_small_private(&self.info_path()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn read_token(&self) -> Result<String> {
        let bytes = read_small_private(&self.token_path())?;
        String::from_utf8(bytes)
            .map(|s| s.trim().to_owned())
            .map_err(|_| Error::Invalid("token file is not UTF-8".into()))
    }
}

/// Held while the process serves a workspace; the OS releases it on exit.
pub struct WorkspaceLock {
    /// The workspace folder, locked: deleting the runtime directory cannot
    /// take this one away.
    _folder: File,
    /// `ws-<hash>.lock`, locked; replaced by [`Self::hold_file`] when the
    /// runtime directory lost it.
    file: File,
}

impl WorkspaceLock {
    /// Makes sure the lock file at its path is the one we hold, recreating
    /// and locking it if it was deleted. `false` if another process has
    /// locked a new file there meanwhile (it then owns the file names).
    pub fn hold_file(&mut self, files: &WorkspaceFiles) -> Result<bool> {
        let path = files.lock_path();
        let ours = self
            .file
            .metadata()
            .context(|| format!("checking {}", path.display()))?;
        match std::fs::symlink_metadata(&path) {
            Ok(m) if (m.dev(), m.ino()) == (ours.dev(), ours.ino()) => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::file(format!("checking {}", path.display()), e)),
        }
        match files.try_lock_file()? {
            Some(file) => {
                self.file = file;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// `flock(LOCK_EX | LOCK_NB)`: `false` if another process holds it.
fn try_flock(file: &File, path: &Path) -> Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(Error::file(format!("locking {}", path.display()), e))
        }
    }
}

/// Creates `path` (mode 0600; never an existing file, never through a
/// symlink) holding `bytes`, synced to disk. A failed write removes it.
pub fn write_new_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .context(|| format!("creating {}", path.display()))?;
    if let Err(e) = file.write_all(bytes).and_then(|()| file.sync_all()) {
        let _ = std::fs::remove_file(path);
        return Err(Error::file(format!("writing {}", path.display()), e));
    }
    Ok(())
}

/// Writes `bytes` to `path` with mode 0600, atomically: a new temp file
/// ([`write_new_private`]) renamed over the target.
pub fn write_private_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp); // our own leftover from a crash, if any
    write_new_private(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
        .context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Reads at most `cap` bytes of a regular file, never following a symlink at
/// `path` itself and never blocking on a FIFO: opened `O_NOFOLLOW |
/// O_NONBLOCK`, type checked on the open descriptor, then read.
pub fn read_regular_file(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(cap).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_regular_file`] of a small file that must be ours.
pub fn read_small_private(path: &Path) -> Result<Vec<u8>> {
    let meta =
        std::fs::symlink_metadata(path).context(|| format!("checking {}", path.display()))?;
    if meta.uid() != uid() {
        return Err(Error::Invalid(format!("{} is not ours", path.display())));
    }
    read_regular_file(path, MAX_SMALL_FILE).context(|| format!("reading {}", path.display()))
}

/// The absolute, symlink-free form of a workspace folder, which keys it.
pub fn canonical_workspace(path: &Path) -> Result<PathBuf> {
    let canonical = match std::fs::canonicalize(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Invalid(format!(
                "workspace {} does not exist: give a folder that does (--workspace DIR), or run \
                 the command in one",
                path.display()
            )));
        }
        found => found.context(|| format!("workspace {}", path.display()))?,
    };
    if !canonical.is_dir() {
        return Err(Error::Invalid(format!(
            "workspace {} is not a directory",
            canonical.display()
        )));
    }
    Ok(canonical)
}

/// The folder an editor's `initialize` params name as its workspace: the
/// first workspace folder, else `rootUri`, else `rootPath`; absolute only.
pub fn editor_root(params: &serde_json::Value) -> Option<PathBuf> {
    let from_uri = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| lsp_types::Url::parse(s).ok())
            .and_then(|u| u.to_file_path().ok())
    };
    params
        .pointer("/workspaceFolders/0/uri")
        .and_then(from_uri)
        .or_else(|| params.get("rootUri").and_then(from_uri))
        .or_else(|| {
            params
                .get("rootPath")
                .and_then(serde_json::Value::as_str)
                .map(PathBuf::from)
        })
        .filter(|p| p.is_absolute())
}

/// Whether a process with this pid exists (ours to signal or not), and
/// still runs: the one notion of a live service (or starter) that every
/// reader of the runtime directory uses.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks whether the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    let exists = rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !zombie(pid)
}

/// Whether `pid` has exited and waits for its parent to reap it (state
/// `Z` in `/proc/<pid>/stat`): it no longer runs.
fn zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may
    // itself hold any character.
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
}

pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The hash that names a workspace's files (runtime and user state).
pub fn path_hash(root: &Path) -> u64 {
    moonkale_protocol::path_hash(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Publishes `ws-<hash>.json` for `folder` as a service with `pid` would.
    fn publish(dir: &RuntimeDir, folder: &Path, pid: u32) {
        let info = ServiceInfo {
            pid,
            workspace: folder.to_path_buf(),
            socket: dir.path().join(format!("{pid}.sock")),
            lsp_tcp: None,
            remote: None,
            token_file: dir.path().join("token"),
            ide_port: None,
            version: "test".into(),
        };
        let files = dir.workspace(folder);
        write_private_atomic(&files.info_path(), &serde_json::to_vec(&info).unwrap()).unwrap();
    }

    #[test]
    fn a_service_is_found_only_while_its_pid_runs_and_the_outermost_wins() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RuntimeDir::at(tmp.path().join("run")).unwrap();
        let outer = tmp.path().join("ws");
        let inner = outer.join("sub");
        std::fs::create_dir_all(&inner).unwrap();

        // A service that exited (reaped: its pid is free) is not alive,
        // whatever files it left behind.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        publish(&dir, &outer, gone);
        assert_eq!(dir.service_for(&inner), None);

        // A live one inside is found; a live one outside wins over it.
        publish(&dir, &inner, std::process::id());
        assert_eq!(dir.service_for(&inner).unwrap().workspace, inner);
        assert_eq!(dir.enclosing_service(&inner), None);
        publish(&dir, &outer, std::process::id());
        assert_eq!(dir.service_for(&inner).unwrap().workspace, outer);
        let all: Vec<PathBuf> = dir.services_for(&inner).map(|i| i.workspace).collect();
        assert_eq!(all, [outer.clone(), inner.clone()]);
    }

    #[test]
    fn a_zombie_is_not_alive() {
        // Not waited for, the exited child stays a zombie until reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while process_alive(pid) {
            assert!(std::time::Instant::now() < deadline, "{pid} still alive");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(0));
    }
}
