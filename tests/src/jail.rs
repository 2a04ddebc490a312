//! A real sandbox for end-to-end tests: a holder process in its own network
//! namespace (a loopback of its own: its 127.0.0.1 is not the host's) and its
//! own mount namespace, in which the test's host HOME ([`Sandbox::home`]) and
//! the service's runtime directory ([`Sandbox::runtime`], where the
//! service's socket lives) are empty tmpfs mounts. Everything else (the
//! workspace, the sandbox's root, `.peers`, `target/`, `/usr`) stays visible
//! at the same paths. The jail's own HOME is a new folder,
//! `<sandbox root>/jail-home`, visible on both sides.
//!
//! Programs run inside through [`Jail::enter`] (nsenter into the holder's
//! namespaces, keeping the caller's working directory and environment);
//! [`Jail::bind_tcp`] binds a listener on the jail's loopback (the fake API's
//! [`crate::fakeapi::FakeApi::start_in`]).
//!
//! Needs root (or CAP_SYS_ADMIN), util-linux's `unshare` and `nsenter` and
//! iproute2's `ip` (`scripts/install-test-peers.sh`). It is a test fixture,
//! not a security boundary: a root process inside could unmount the tmpfs.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::{Sandbox, TIMEOUT};

/// The holder: brings `lo` up, hides `$1` and `$2` under empty tmpfs
/// mounts, says `ready` on stdout and sleeps until killed. The paths are
/// positional arguments, never part of the script.
///
/// With `$3` (a new root), `$4` (the workspace) and `$5` (where the jail
/// sees it), it builds a root of its own as a devcontainer does: a tmpfs at
/// `$3` holding every top-level folder of the host's (bound) and its
/// symlinks, the workspace bound at `$5`, its own path hidden under an
/// empty tmpfs; then it sleeps chrooted there, so [`Jail::enter`] enters
/// that root. Nothing is made on the host's `/`.
const HOLDER: &str = r#"set -e
ip link set lo up
mount -t tmpfs -o mode=0700 moonkale-jail "$1"
mount -t tmpfs -o mode=0700 moonkale-jail "$2"
if [ -z "$3" ]; then
  echo ready
  exec sleep infinity
fi
new=$3 ws=$4 inside=$5
mount -t tmpfs -o mode=0755 moonkale-root "$new"
for d in /*; do
  name=${d#/}
  if [ -L "$d" ]; then
    ln -s "$(readlink "$d")" "$new/$name"
  elif [ -d "$d" ]; then
    mkdir "$new/$name"
    mount --rbind "$d" "$new/$name"
  fi
done
mkdir -p "$new$inside"
mount --bind "$ws" "$new$inside"
mount -t tmpfs -o mode=0700 moonkale-hidden "$new$ws"
echo ready
exec chroot "$new" sleep infinity"#;

/// [`Jail::enter`]'s prefix in a jail with a root of its own: `$1`
/// nsenter, `$2` the holder's pid, `$3` the working directory inside,
/// then the program and its arguments (the holder's root is the jail's).
const ENTER_ROOTED: &str = r#"nsenter=$1 pid=$2 wd=$3
shift 3
exec "$nsenter" --target "$pid" --net --mount --root -- /bin/sh -c 'cd "$0" || exit 125; exec "$@"' "$wd" "$@""#;

/// [`Jail::enter`]'s prefix: `$1` nsenter, `$2` the holder's pid, then the
/// program and its arguments. Entering a mount namespace resets the working
/// directory to its root; the caller's is passed on by path (the same paths
/// hold inside). The `.` keeps a trailing newline of the path.
const ENTER: &str = r#"nsenter=$1 pid=$2
shift 2
wd=$(pwd -P && echo .) || exit 125
wd=${wd%??}
exec "$nsenter" --target "$pid" --net --mount --wd="$wd" -- "$@""#;

/// The search path for the holder and the tools.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A running jail; its holder is killed on drop (a program still inside
/// keeps the namespaces alive until it ends).
pub struct Jail {
    holder: Child,
    pid: u32,
    nsenter: PathBuf,
    home: PathBuf,
    /// Where the jail sees the workspace, when not at its own path.
    workspace_inside: Option<PathBuf>,
}

/// The absolute path of a system tool.
fn tool(name: &str) -> PathBuf {
    std::env::split_paths(PATH)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is missing (util-linux, iproute2); run scripts/install-test-peers.sh")
        })
}

impl Jail {
    /// Starts the holder and waits (with a deadline) until its namespaces
    /// are set up: `sb.home` and `sb.runtime` hidden, `lo` up, the jail's
    /// HOME `<sb.root>/jail-home` created.
    pub fn new(sb: &Sandbox) -> Jail {
        Jail::start(sb, None)
    }

    /// A jail that sees the workspace only at `inside` (a devcontainer's
    /// `/workspaces/<name>`), in a root of its own; programs start there.
    pub fn with_workspace_at(sb: &Sandbox, inside: &Path) -> Jail {
        Jail::start(sb, Some(inside))
    }

    fn start(sb: &Sandbox, inside: Option<&Path>) -> Jail {
        let home = sb.root.join("jail-home");
        std::fs::create_dir_all(&home).expect("create the jail's HOME");
        let log_path = sb.root.join("jail.log");
        let log = std::fs::File::create(&log_path).expect("jail log");
        let mut holder = Command::new(tool("unshare"))
            .args(["--net", "--mount", "--propagation", "private", "sh", "-c"])
            .arg(HOLDER)
            .arg("moonkale-jail")
            .arg(&sb.home)
            .arg(&sb.runtime)
            .args(
                inside
                    .map(|inside| {
                        let root = sb.root.join("jail-root");
                        std::fs::create_dir_all(&root).expect("the jail's root folder");
                        [
                            root.into_os_string(),
                            sb.workspace.clone().into_os_string(),
                            inside.into(),
                        ]
                    })
                    .into_iter()
                    .flatten(),
            )
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn unshare");
        // unshare (without --fork) execs the shell, which execs sleep: one pid.
        let pid = holder.id();
        let stdout = holder.stdout.take().expect("holder stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        // The line comes, or the holder's end closes the pipe.
        let line = rx.recv_timeout(TIMEOUT).unwrap_or_default();
        if line.trim() != "ready" {
            let _ = holder.kill();
            let _ = holder.wait();
            panic!(
                "the jail did not start (it needs root, unshare, ip): {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        Jail {
            holder,
            pid,
            nsenter: tool("nsenter"),
            home,
            workspace_inside: inside.map(Path::to_path_buf),
        }
    }

    /// The jail's HOME (`<sandbox root>/jail-home`), the same path inside
    /// and out.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Where the jail sees the workspace, when not at its own path.
    pub fn workspace_inside(&self) -> Option<&Path> {
        self.workspace_inside.as_deref()
    }

    /// The holder's pid (its namespaces are the jail's).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The jail's network namespace, `/proc/<holder>/ns/net`.
    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.pid))
    }

    /// The argv prefix that runs a program inside the jail: append the
    /// program and its arguments. It keeps the caller's working directory
    /// (by path; in a jail with a root of its own, the workspace as the
    /// jail sees it) and environment; the program's pid is the launched one (no
    /// fork). Only `/bin/sh` is looked up, at an absolute path.
    pub fn enter(&self) -> Vec<String> {
        if let Some(inside) = &self.workspace_inside {
            return vec![
                "/bin/sh".into(),
                "-c".into(),
                ENTER_ROOTED.into(),
                "moonkale-jail-enter".into(),
                self.nsenter.display().to_string(),
                self.pid.to_string(),
                inside.display().to_string(),
            ];
        }
        vec![
            "/bin/sh".into(),
            "-c".into(),
            ENTER.into(),
            "moonkale-jail-enter".into(),
            self.nsenter.display().to_string(),
            self.pid.to_string(),
        ]
    }

    /// The sandbox command a user would give for this jail: enter it and
    /// run the pinned `claude` with the jail's HOME (the host's is hidden
    /// inside).
    pub fn claude_command(&self) -> Vec<String> {
        let mut argv = self.enter();
        argv.extend([
            "/usr/bin/env".to_owned(),
            format!("HOME={}", self.home.display()),
            crate::claude_cli::claude_bin().display().to_string(),
        ]);
        argv
    }

    /// A command that runs `program` inside the jail (add its arguments,
    /// working directory and environment as for [`Command::new`]).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let enter = self.enter();
        let mut cmd = Command::new(&enter[0]);
        cmd.args(&enter[1..]).arg(program);
        cmd
    }

    /// Runs `argv` inside the jail (in the test's working directory and
    /// environment) and returns its output.
    pub fn run(&self, argv: &[&str]) -> Output {
        let (program, args) = argv.split_first().expect("a program to run");
        self.command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run a command in the jail")
    }

    /// A listener on the jail's `127.0.0.1:port` (0: any free port), bound
    /// by a short-lived thread that entered the jail's network namespace (a
    /// socket stays in the namespace it was made in).
    pub fn bind_tcp(&self, port: u16) -> std::io::Result<std::net::TcpListener> {
        let netns = std::fs::File::open(self.netns_path())?;
        std::thread::spawn(move || {
            // SAFETY: setns has no memory-safety preconditions; it moves only
            // this thread, which ends right after the bind.
            if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            std::net::TcpListener::bind(("127.0.0.1", port))
        })
        .join()
        .expect("the bind thread")
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
