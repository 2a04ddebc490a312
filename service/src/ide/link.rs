//! Sandbox links: Claude Code's IDE for a CLI that runs jailed (a
//! devcontainer, bubblewrap, `docker run` with the workspace mounted), whose
//! loopback is not ours and whose `~/.claude` never sees our lock file.
//!
//! A link is a unix socket in the workspace's root folder, which the jail
//! sees because it sees the workspace: `.moonkale-link-<random>.sock`, with
//! a token of its own. Inside the jail, `moonkale-service sandbox-link`
//! ([`crate::sandbox_link`]) listens on the jail's loopback, writes the
//! jail's lock file and relays each connection to the socket. This side
//! serves the socket with the IDE server's own handshake and client
//! ([`super::ws`]): the link's token, any loopback `Host` (the relay's port
//! is the jail's), one linked session at a time (a second gets 409), the
//! IDE tools only, paths confined as for any client. The socket speaks
//! nothing else: no LSP, no front door, no agent, no terminals. What the
//! hub tells a linked CLI is confined likewise ([`IdeScope::Workspace`]):
//! a document an editor holds outside the workspace never reaches it.
//!
//! **Invariant:** the socket is created 0600 (bound under umask 0177 in a
//! thread of its own, never `chmod`ed through a path), by a name relative
//! to the workspace's descriptor (a symlinked root path is never followed,
//! and a long workspace path still fits in `sockaddr_un`); a name already
//! taken (a file, a symlink, a socket the repository planted) is never
//! replaced or followed: another random name is used. At close the name is
//! removed only while it is still the socket we bound.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{Semaphore, watch};

use super::handshake::HostRule;
use super::ws::{self, IdeLimits};
use crate::core::path_map::PathMap;
use crate::error::{Error, IoContext, Result};
use crate::hub::{HubHandle, IdeScope};
use crate::workspace_fs::{self as paths, Root};

/// How a link's socket is named: this, 16 hex digits, [`SOCKET_SUFFIX`].
pub const SOCKET_PREFIX: &str = ".moonkale-link-";
pub const SOCKET_SUFFIX: &str = ".sock";

/// Whether `name` is a link socket's file name as [`Links::open`] makes
/// them (the in-sandbox side checks what it was given).
pub fn is_socket_name(name: &str) -> bool {
    name.strip_prefix(SOCKET_PREFIX)
        .and_then(|rest| rest.strip_suffix(SOCKET_SUFFIX))
        .is_some_and(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Opens links for one workspace (held by the terminal host, which owns
/// the links it opens for editors and for its terminals).
#[derive(Clone)]
pub struct Links {
    hub: HubHandle,
    /// The workspace folder the IDE server holds since it started: links
    /// are bound in it, never in whatever has its path now.
    root: Arc<Root>,
    limits: IdeLimits,
    proposals: Arc<super::proposals::ProposalDir>,
    /// Links open now (each holds a socket, a listener and a task).
    open: Arc<std::sync::atomic::AtomicUsize>,
}

/// Links one workspace may have open at once.
pub const MAX_LINKS: usize = 16;

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links")
            .field("workspace", &self.hub.root())
            .finish()
    }
}

impl Links {
    pub fn new(
        hub: HubHandle,
        root: Root,
        limits: IdeLimits,
        proposals: Arc<super::proposals::ProposalDir>,
    ) -> Links {
        let limits = IdeLimits {
            // As the claude-sandbox bridge: few handshakes at once.
            max_pre_auth: 4,
            ..limits
        };
        Links {
            hub,
            root: Arc::new(root),
            limits,
            proposals,
            open: Arc::default(),
        }
    }

    /// Binds a new link socket in the workspace and serves it until the
    /// returned [`Link`] is dropped; every path across it is mapped by
    /// `paths` (the workspace must be under one of its folders).
    pub fn open(&self, paths: PathMap) -> Result<Link> {
        let workspace_inside = paths
            .to_inside(&self.root.path().display().to_string())
            .map_err(|_| {
                Error::Invalid(format!(
                    "the workspace {} is under none of the sandbox's folders ({})",
                    crate::printable::one_line(&self.root.path().display().to_string()),
                    paths
                        .pairs()
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        use std::sync::atomic::Ordering;
        if self.open.fetch_add(1, Ordering::AcqRel) >= MAX_LINKS {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Invalid(format!(
                "{MAX_LINKS} sandbox links are open in this workspace; close one first"
            )));
        }
        let counted = Counted(self.open.clone());
        let root = self
            .root
            .try_clone()
            .context(|| "opening a sandbox link".into())?;
        let (listener, bound) = bind_in(&root, std::iter::repeat_with(random_name).take(8))?;
        listener
            .set_nonblocking(true)
            .context(|| "preparing the link socket".into())?;
        let listener = tokio::net::UnixListener::from_std(listener)
            .context(|| "preparing the link socket".into())?;
        let token = Arc::new(crate::runtime::new_token()?);
        let (close, closed) = watch::channel(());
        let socket = root
            .path()
            .join(bound.name.to_str().expect("an ASCII name"));
        let shared = Arc::new(ws::Shared {
            host_rule: HostRule::AnyLoopbackPort,
            // A jailed CLI: the editors' documents outside the workspace
            // are not its to learn of, as its tool arguments cannot name
            // them.
            scope: IdeScope::Workspace,
            token: token.clone(),
            hub: self.hub.clone(),
            root,
            limits: self.limits.clone(),
            proposals: self.proposals.clone(),
            connected: watch::channel(0).0,
            baseline: None,
            one_session: Some(Arc::new(Semaphore::new(1))),
            closed: Some(closed),
            paths: Arc::new(paths),
        });
        let accept = tokio::spawn(ws::accept_link_loop(listener, shared)).abort_handle();
        tracing::info!(socket = %socket.display(), "sandbox link open");
        let socket_inside =
            PathBuf::from(workspace_inside).join(bound.name.to_str().expect("an ASCII name"));
        Ok(Link {
            socket,
            socket_inside,
            token,
            bound,
            accept,
            _close: close,
            _counted: counted,
        })
    }
}

/// An open link. Dropping it stops serving, ends the linked session and
/// removes the socket (if it is still ours).
pub struct Link {
    /// The socket's path as this machine sees it.
    pub socket: PathBuf,
    /// The socket's path as the sandbox sees it (the same unless the
    /// sandbox mounts the workspace elsewhere).
    pub socket_inside: PathBuf,
    token: Arc<String>,
    bound: BoundSocket,
    accept: tokio::task::AbortHandle,
    _close: watch::Sender<()>,
    _counted: Counted,
}

/// One of [`Links::open`]'s count, given back when dropped (also when
/// opening fails half-way).
struct Counted(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Link {
    /// The token the linked CLI presents (the jail's lock file holds it).
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Link")
            .field("socket", &self.socket)
            .finish()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accept.abort();
        self.bound.remove();
        tracing::info!(socket = %self.socket.display(), "sandbox link closed");
    }
}

/// Removes the link sockets a killed service left in the workspace root:
/// sockets (never anything else) of ours (our uid) that nobody listens on.
/// Called when a workspace starts being served.
pub fn remove_stale(root: &Root) {
    let Ok(dir) = root.dir() else { return };
    let Ok(entries) = std::fs::read_dir(root.path()) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    for entry in entries.flatten() {
        let Some(name) = entry
            .file_name()
            .to_str()
            .filter(|n| is_socket_name(n))
            .map(str::to_owned)
        else {
            continue;
        };
        let cname = CString::new(name.as_str()).expect("no NUL in a checked name");
        let Ok(Some(st)) = paths::stat_at(&dir, &cname) else {
            continue;
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || st.st_uid != uid {
            continue;
        }
        // Through the folder's descriptor: the name is short whatever the
        // workspace's path, and a replaced root path is not followed.
        let via = format!("/proc/self/fd/{}/{name}", dir.as_raw_fd());
        if let Err(e) = std::os::unix::net::UnixStream::connect(&via)
            && e.kind() == std::io::ErrorKind::ConnectionRefused
        {
            let _ = paths::unlink_at(&dir, &cname);
            tracing::info!(name, "removed a sandbox link socket a stopped service left");
        }
    }
}

fn random_name() -> String {
    let mut raw = [0u8; 8];
    // Without randomness every name is the same, so the bind fails below
    // on the second try rather than reusing a name.
    let _ = getrandom::fill(&mut raw);
    let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    format!("{SOCKET_PREFIX}{id}{SOCKET_SUFFIX}")
}

/// The socket we bound: its folder, name and (device, inode).
#[derive(Debug)]
struct BoundSocket {
    dir: OwnedFd,
    name: CString,
    id: (u64, u64),
}

impl BoundSocket {
    /// Removes the name while it is still our socket; whatever the jail
    /// put there instead is left alone (`unlinkat` never follows it).
    fn remove(&self) {
        match paths::stat_at(&self.dir, &self.name) {
            Ok(Some(st))
                if st.st_mode & libc::S_IFMT == libc::S_IFSOCK
                    && (st.st_dev, st.st_ino) == self.id =>
            {
                let _ = paths::unlink_at(&self.dir, &self.name);
            }
            Ok(None) => {}
            _ => tracing::warn!(
                name = ?self.name,
                "the sandbox link's socket was replaced; leaving what is there alone"
            ),
        }
    }
}

/// Binds a socket in `root`'s folder under the first of `names` that is
/// free.
fn bind_in(
    root: &Root,
    names: impl Iterator<Item = String>,
) -> Result<(std::os::unix::net::UnixListener, BoundSocket)> {
    root.check_still_here()
        .context(|| "opening a sandbox link".into())?;
    let dir = root.dir().context(|| "opening a sandbox link".into())?;
    for name in names {
        let listener = match bind_private(&dir, &name) {
            Ok(listener) => listener,
            // Something is at that name: not ours to replace or follow.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                tracing::info!(
                    name,
                    "a file is already at a link socket's name; taking another"
                );
                continue;
            }
            Err(e) => return Err(Error::io(format!("binding {name}"), e)),
        };
        let name = CString::new(name).expect("no NUL in a generated name");
        let st = paths::stat_at(&dir, &name)
            .context(|| "checking the link socket".into())?
            .ok_or_else(|| Error::Invalid("the link socket vanished as it was bound".into()))?;
        let bound = BoundSocket {
            dir: dir
                .try_clone()
                .context(|| "opening a sandbox link".into())?,
            name,
            id: (st.st_dev, st.st_ino),
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || st.st_mode & 0o777 != 0o600 {
            bound.remove();
            return Err(Error::Invalid(format!(
                "the link socket came out with mode {:o}, not a 0600 socket",
                st.st_mode
            )));
        }
        return Ok((listener, bound));
    }
    Err(Error::Invalid(
        "every name tried for a sandbox link's socket was taken".into(),
    ))
}

/// `bind(name)` relative to `dir` with umask 0177, in a thread that has
/// its own umask and working directory (`unshare(CLONE_FS)`), so no other
/// thread's files are touched by either.
fn bind_private(dir: &OwnedFd, name: &str) -> std::io::Result<std::os::unix::net::UnixListener> {
    let dir = dir.as_raw_fd();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: these calls change only this thread's file-system
                // context once it is unshared; `dir` is a valid descriptor.
                unsafe {
                    paths::check(libc::unshare(libc::CLONE_FS))?;
                    libc::umask(0o177);
                    paths::check(libc::fchdir(dir))?;
                }
                std::os::unix::net::UnixListener::bind(name)
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the bind thread panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    #[test]
    fn socket_names() {
        let name = random_name();
        assert!(is_socket_name(&name), "{name}");
        for bad in [
            ".moonkale-link-.sock",
            ".moonkale-link-0123456789abcdeg.sock",
            ".moonkale-link-0123456789abcdef.sock/x",
            "../.moonkale-link-0123456789abcdef.sock",
            ".moonkale-link-0123456789abcdef0.sock",
            "moonkale-link-0123456789abcdef.sock",
        ] {
            assert!(!is_socket_name(bad), "{bad}");
        }
        assert!(is_socket_name(".moonkale-link-0123456789abcdef.sock"));
    }

    /// A repository that ships a file, a symlink (to a file outside) and a
    /// dangling symlink at the names a link would take: each is left as it
    /// was, nothing outside is touched, and the link takes the next free
    /// name, a 0600 socket. Closing it removes only its own socket.
    #[test]
    fn planted_names_are_passed_over() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, "keep").unwrap();
        let names: Vec<String> = (0..4)
            .map(|i| format!("{SOCKET_PREFIX}000000000000000{i}{SOCKET_SUFFIX}"))
            .collect();
        std::fs::write(ws.path().join(&names[0]), "planted").unwrap();
        std::os::unix::fs::symlink(&secret, ws.path().join(&names[1])).unwrap();
        std::os::unix::fs::symlink(outside.path().join("new"), ws.path().join(&names[2])).unwrap();
        let root = Root::open(ws.path()).unwrap();
        let (listener, bound) = bind_in(&root, names.iter().cloned()).unwrap();
        assert_eq!(bound.name.to_str().unwrap(), names[3]);
        let meta = std::fs::symlink_metadata(ws.path().join(&names[3])).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(ws.path().join(&names[0])).unwrap(),
            "planted"
        );
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
        assert!(!outside.path().join("new").exists());
        // This thread's umask is untouched.
        // SAFETY: umask only reads and sets the process's mask.
        let mask = unsafe { libc::umask(0o022) };
        unsafe { libc::umask(mask) };
        assert_ne!(mask, 0o177);
        drop(listener);
        bound.remove();
        assert!(std::fs::symlink_metadata(ws.path().join(&names[3])).is_err());
        assert!(std::fs::symlink_metadata(ws.path().join(&names[1])).is_ok());
        // Every name taken: one clear error.
        let taken = bind_in(&root, names[..3].iter().cloned()).unwrap_err();
        assert!(taken.to_string().contains("taken"), "{taken}");
    }

    /// At most [`MAX_LINKS`] at once; a closed one makes room.
    #[tokio::test]
    async fn links_are_capped() {
        let ws = tempfile::tempdir().unwrap();
        let (hub, _events) = HubHandle::detached(ws.path().to_path_buf());
        let root = Root::open(ws.path()).unwrap();
        let links = Links::new(hub, root, IdeLimits::default(), Arc::default());
        let mut open: Vec<Link> = (0..MAX_LINKS)
            .map(|_| links.open(PathMap::default()).unwrap())
            .collect();
        let refused = links.open(PathMap::default()).unwrap_err().to_string();
        assert!(refused.contains("sandbox links are open"), "{refused}");
        open.pop();
        open.push(links.open(PathMap::default()).unwrap());
        drop(open);
        assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0);
    }

    /// The workspace moved away and something else took its path: no link
    /// socket is made there.
    #[tokio::test]
    async fn no_link_in_a_folder_that_took_the_workspaces_path() {
        let top = tempfile::tempdir().unwrap();
        let ws = top.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let (hub, _events) = HubHandle::detached(ws.clone());
        let links = Links::new(
            hub,
            Root::open(&ws).unwrap(),
            IdeLimits::default(),
            Arc::default(),
        );
        std::fs::rename(&ws, top.path().join("moved")).unwrap();
        std::fs::create_dir(&ws).unwrap();
        let refused = links.open(PathMap::default()).unwrap_err().to_string();
        assert!(refused.contains("moved or deleted"), "{refused}");
        assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_dir(top.path().join("moved")).unwrap().count(),
            0
        );
    }

    /// A socket left by a killed service goes when the workspace is served
    /// again; a live link's socket, and files or other people's things by
    /// such a name, stay.
    #[test]
    fn stale_sockets_are_cleaned_live_ones_kept() {
        let ws = tempfile::tempdir().unwrap();
        let root = Root::open(ws.path()).unwrap();
        let (stale, _) = bind_in(&root, std::iter::once(random_name())).unwrap();
        drop(stale); // the name stays, nobody listens
        let (_live, live) = bind_in(&root, std::iter::once(random_name())).unwrap();
        let file = format!("{SOCKET_PREFIX}00000000000000ff{SOCKET_SUFFIX}");
        std::fs::write(ws.path().join(&file), "x").unwrap();
        remove_stale(&root);
        let mut left: Vec<String> = std::fs::read_dir(ws.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = vec![file, live.name.to_str().unwrap().to_owned()];
        want.sort();
        assert_eq!(left, want);
    }

    /// The jail replaces the live socket with a symlink to a file of the
    /// user's: closing the link leaves both alone.
    #[test]
    fn a_swapped_socket_is_left_alone_at_close() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, "keep").unwrap();
        let root = Root::open(ws.path()).unwrap();
        let (_listener, bound) = bind_in(&root, std::iter::once(random_name())).unwrap();
        let path = ws.path().join(bound.name.to_str().unwrap());
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&secret, &path).unwrap();
        bound.remove();
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
    }
}
