//! One running `claude` process: spawned in its own process group, its
//! stdout decoded into messages, its stderr drained, and shut down whole.
//!
//! - Own session and process group (`setsid`), so a shutdown reaches every
//!   grandchild the CLI started (shell commands, MCP servers), and
//!   `PR_SET_PDEATHSIG`, so the CLI dies with the service instead of being
//!   orphaned. The death signal follows the *thread* that forked, not the
//!   process, and async runtimes retire threads (tokio's `block_in_place`
//!   turns a worker into a blocking-pool thread that exits after 10 idle
//!   seconds, killing every child it forked). So every fork happens on one
//!   thread of our own that lives as long as the process.
//! - stdout and stderr are read concurrently by their own tasks, so a CLI
//!   that floods stderr while writing nothing to stdout cannot deadlock us;
//!   only the last [`STDERR_TAIL`] bytes of stderr are kept, for error
//!   messages.
//! - A stdout line over the cap kills the process group: a turn must fail,
//!   never hang on a runaway line.
//! - Shutdown: close stdin, wait; then SIGTERM to the group, wait; then
//!   SIGKILL to the group; the child is always reaped.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::stream::{CliMessage, DecodeError, Decoder};

/// Bytes of stderr kept.
pub const STDERR_TAIL: usize = 64 * 1024;
/// Decoded messages waiting to be taken; a full queue stops reading stdout,
/// which stops the CLI.
const MESSAGE_QUEUE: usize = 1024;

pub struct ProcessConfig {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// The whole environment (see [`crate::launch::child_env`]).
    pub env: Vec<(OsString, OsString)>,
    /// How long each shutdown step waits.
    pub grace: Duration,
}

pub struct CliProcess {
    child: Child,
    pgid: i32,
    stdin: Option<ChildStdin>,
    messages: mpsc::Receiver<Result<CliMessage, DecodeError>>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
    grace: Duration,
}

impl CliProcess {
    pub fn spawn(cfg: ProcessConfig) -> std::io::Result<CliProcess> {
        let mut cmd = tokio::process::Command::new(&cfg.program);
        cmd.args(&cfg.args)
            .current_dir(&cfg.cwd)
            .env_clear()
            .envs(cfg.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the death signal was set.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                close_inherited_fds();
                Ok(())
            });
        }
        let runtime = tokio::runtime::Handle::current();
        let mut child = on_spawner_thread(move || {
            let _entered = runtime.enter(); // the pipes join the caller's runtime
            cmd.spawn()
        })?;
        let pgid = child.id().map_or(0, |id| id as i32);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let (tx, messages) = mpsc::channel(MESSAGE_QUEUE);
        tokio::spawn(read_stdout(stdout, tx, pgid));
        let stderr = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let stderr_reader = Some(tokio::spawn(drain_stderr(stderr_pipe, stderr.clone())));
        Ok(CliProcess {
            child,
            pgid,
            stdin,
            messages,
            stderr,
            stderr_reader,
            grace: cfg.grace,
        })
    }

    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// Writes one stdin line (from [`crate::control`]).
    pub async fn send(&mut self, line: &[u8]) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin is closed"))?;
        stdin.write_all(line).await?;
        stdin.flush().await
    }

    /// The next message; `None` once stdout has ended.
    pub async fn next(&mut self) -> Option<Result<CliMessage, DecodeError>> {
        self.messages.recv().await
    }

    /// Kills the whole process group now; the end of stdout follows.
    pub fn kill(&self) {
        kill_group(self.pgid, libc::SIGKILL);
    }

    /// The end of what the CLI wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().expect("stderr lock");
        String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>()).into_owned()
    }

    /// [`Self::shutdown`], then the end of its stderr, read to the end
    /// (within a second: a grandchild may hold the pipe open).
    pub async fn finish(mut self) -> (std::io::Result<ExitStatus>, String) {
        let reader = self.stderr_reader.take();
        let stderr = self.stderr.clone();
        let status = self.shutdown().await;
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
        }
        let tail = stderr.lock().expect("stderr lock");
        let text = String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>()).into_owned();
        (status, text)
    }

    /// Stops the process and everything it started; returns its exit status.
    pub async fn shutdown(mut self) -> std::io::Result<ExitStatus> {
        drop(self.stdin.take()); // EOF: the CLI's own way to finish
        if let Ok(status) = tokio::time::timeout(self.grace, self.child.wait()).await {
            kill_group(self.pgid, libc::SIGKILL); // grandchildren it left behind
            return status;
        }
        kill_group(self.pgid, libc::SIGTERM);
        if let Ok(status) = tokio::time::timeout(self.grace, self.child.wait()).await {
            kill_group(self.pgid, libc::SIGKILL);
            return status;
        }
        kill_group(self.pgid, libc::SIGKILL);
        self.child.wait().await
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        // kill_on_drop ends the CLI; its group goes with it.
        kill_group(self.pgid, libc::SIGKILL);
    }
}

/// Runs `f` (a fork) on the process's spawner thread, which never exits, so
/// `PR_SET_PDEATHSIG` fires only when the process dies.
fn on_spawner_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    type Job = Box<dyn FnOnce() + Send>;
    static SPAWNER: std::sync::OnceLock<std::sync::mpsc::Sender<Job>> = std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("claude-spawner".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .expect("starting the spawner thread");
        tx
    });
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _ = done_tx.send(f());
    });
    spawner
        .send(job)
        .expect("the spawner thread lives as long as the process");
    done_rx
        .recv()
        .expect("the spawner thread answers every job")
}

/// Marks every descriptor above stderr close-on-exec: whatever the service
/// itself inherited without it (an editor's pipes, a jobserver) must not
/// reach the CLI. Marked rather than closed, so the pipe through which the
/// standard library reports a failed exec still works. Runs between fork
/// and exec, so only raw syscalls.
fn close_inherited_fds() {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range and fcntl take plain integers.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
            for fd in 3..4096 {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
}

fn kill_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: kill has no memory-safety preconditions; a negative pid
        // names the process group.
        unsafe { libc::kill(-pgid, signal) };
    }
}

async fn read_stdout(
    mut stdout: tokio::process::ChildStdout,
    tx: mpsc::Sender<Result<CliMessage, DecodeError>>,
    pgid: i32,
) {
    let mut decoder = Decoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for message in decoder.push(&buf[..n]) {
            let too_long = matches!(message, Err(DecodeError::LineTooLong { .. }));
            if tx.send(message).await.is_err() {
                return;
            }
            if too_long {
                kill_group(pgid, libc::SIGKILL);
                return;
            }
        }
    }
    if let Some(torn) = decoder.finish() {
        let _ = tx.send(torn).await;
    }
}

async fn drain_stderr(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<VecDeque<u8>>>) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut tail = tail.lock().expect("stderr lock");
        tail.extend(&buf[..n]);
        let excess = tail.len().saturating_sub(STDERR_TAIL);
        tail.drain(..excess);
    }
}
