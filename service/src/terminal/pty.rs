//! One program in a pseudo-terminal: started by argv (never through an extra
//! shell) in its own session with the PTY as its controlling terminal, its
//! output read on a thread of its own into a bounded queue, and ended with
//! SIGHUP, then SIGKILL.
//!
//! **Invariant:** output is read only as fast as it is taken. When the
//! queue is full the reader thread blocks, the kernel's PTY buffer fills and
//! the program blocks in `write`: a front end that stops reading costs a
//! bounded amount of memory, never more.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use portable_pty::{Child, CommandBuilder, MasterPty, PtySize, native_pty_system};
use tokio::sync::mpsc;

/// Output chunks waiting to be taken (each at most [`READ_CHUNK`] bytes):
/// with the kernel's own buffer, at most ~1 MiB is in flight.
const OUTPUT_QUEUE: usize = 64;
const READ_CHUNK: usize = 16 * 1024;
/// Input writes waiting for a program that does not read them; more are
/// refused rather than queued without end.
const INPUT_QUEUE: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum PtyError {
    #[error("opening a pseudo-terminal: {0}")]
    Open(String),
    #[error("starting {program}: {why}")]
    Spawn { program: String, why: String },
    #[error("the terminal's input is closed")]
    Closed,
    #[error("the program does not read its input; {INPUT_QUEUE} writes are waiting")]
    InputFull,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Spawn {
    /// argv[0] and its arguments.
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// The whole environment (the caller scrubs it).
    pub env: Vec<(OsString, OsString)>,
    pub rows: u16,
    pub cols: u16,
}

/// A running program in a PTY.
pub struct Pty {
    master: Box<dyn MasterPty + Send>,
    /// To the writer thread: a program that does not read its input blocks
    /// that thread, never the caller.
    input: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    child: Box<dyn Child + Send + Sync>,
    pid: Option<u32>,
    output: mpsc::Receiver<Vec<u8>>,
}

/// Variables of ours that a terminal's programs never see.
pub fn scrubbed_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    parent
        .into_iter()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            !k.starts_with("MOONKALE") && k != "CLAUDECODE"
        })
        .collect()
}

impl Pty {
    pub fn spawn(spec: &Spawn) -> Result<Pty, PtyError> {
        let Some(program) = spec.argv.first() else {
            return Err(PtyError::Spawn {
                program: String::new(),
                why: "no program given".into(),
            });
        };
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: spec.rows.max(1),
                cols: spec.cols.max(1),
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| PtyError::Open(e.to_string()))?;
        let mut cmd = CommandBuilder::new(program);
        cmd.args(&spec.argv[1..]);
        cmd.cwd(&spec.cwd);
        cmd.env_clear();
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).map_err(|e| PtyError::Spawn {
            program: program.clone(),
            why: e.to_string(),
        })?;
        // Our copy of the slave would keep the PTY open after the program
        // exits, and its end of output would never come.
        drop(pair.slave);
        let reader = pair
            .master
            .try_clone_reader()
            .map_err(|e| PtyError::Open(e.to_string()))?;
        let writer = pair
            .master
            .take_writer()
            .map_err(|e| PtyError::Open(e.to_string()))?;
        let (tx, output) = mpsc::channel(OUTPUT_QUEUE);
        std::thread::Builder::new()
            .name("pty-reader".into())
            .spawn(move || read_output(reader, tx))?;
        let (input, inputs) = std::sync::mpsc::sync_channel(INPUT_QUEUE);
        std::thread::Builder::new()
            .name("pty-writer".into())
            .spawn(move || write_input(writer, inputs))?;
        let pid = child.process_id();
        Ok(Pty {
            master: pair.master,
            input: Some(input),
            child,
            pid,
            output,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether a process group other than the program's own holds the
    /// terminal's foreground: a job its shell started (`vim`, `claude`).
    pub fn runs_a_job(&self) -> bool {
        match (self.master.process_group_leader(), self.pid) {
            (Some(group), Some(pid)) => i64::from(group) != i64::from(pid),
            _ => false,
        }
    }

    /// The next chunk of output; `None` once the program and every process
    /// holding the terminal are gone.
    pub async fn output(&mut self) -> Option<Vec<u8>> {
        self.output.recv().await
    }

    /// Queues input bytes (keystrokes, pastes) for the program, in order;
    /// never blocks.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), PtyError> {
        let input = self.input.as_ref().ok_or(PtyError::Closed)?;
        input.try_send(bytes.to_vec()).map_err(|e| match e {
            std::sync::mpsc::TrySendError::Full(_) => PtyError::InputFull,
            std::sync::mpsc::TrySendError::Disconnected(_) => PtyError::Closed,
        })
    }

    pub fn resize(&self, rows: u16, cols: u16) -> Result<(), PtyError> {
        self.master
            .resize(PtySize {
                rows: rows.max(1),
                cols: cols.max(1),
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| PtyError::Open(e.to_string()))
    }

    /// The exit code once the program has ended (reaps it).
    pub fn exit_code(&mut self) -> Option<u32> {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .map(|status| status.exit_code())
    }

    /// Ends the program's whole session: SIGHUP (what closing a terminal
    /// means), then SIGKILL after `grace`; the program is always reaped.
    /// The whole session, not one process group: a shell gives each
    /// background job a group of its own.
    pub async fn close(mut self, grace: Duration) {
        self.input = None;
        let Some(sid) = self.pid.map(|p| p as i32) else {
            let _ = self.child.kill();
            return;
        };
        signal_session(sid, libc::SIGHUP);
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline {
            if self.exit_code().is_some() {
                signal_session(sid, libc::SIGKILL); // what it left behind
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        signal_session(sid, libc::SIGKILL);
        let _ = tokio::task::spawn_blocking(move || self.child.wait()).await;
    }
}

/// Sends `signal` to every process of session `sid` (the program leads its
/// own session, so its pid names it), found in /proc.
fn signal_session(sid: i32, signal: i32) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me || session_of(pid) != Some(sid) {
            continue;
        }
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, signal) };
    }
}

/// The session id of `pid`, from /proc/<pid>/stat (the 6th field; the
/// command name before it may hold spaces and parentheses).
fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(3)?.parse().ok()
}

fn write_input(mut writer: Box<dyn Write + Send>, inputs: std::sync::mpsc::Receiver<Vec<u8>>) {
    for bytes in inputs {
        if writer
            .write_all(&bytes)
            .and_then(|()| writer.flush())
            .is_err()
        {
            return; // the program is gone
        }
    }
}

fn read_output(mut reader: Box<dyn Read + Send>, tx: mpsc::Sender<Vec<u8>>) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf) {
            // EIO: the last holder of the slave side is gone.
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.blocking_send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_secs(10);

    fn sh(script: &str, rows: u16, cols: u16) -> Pty {
        Pty::spawn(&Spawn {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("TERM".into(), "xterm-256color".into()),
            ],
            rows,
            cols,
        })
        .expect("spawn /bin/sh in a pty")
    }

    /// Output until `want` appears (or the deadline fails the test).
    async fn read_until(pty: &mut Pty, want: &str) -> String {
        let mut seen = Vec::new();
        let found = tokio::time::timeout(DEADLINE, async {
            while let Some(chunk) = pty.output().await {
                seen.extend_from_slice(&chunk);
                if String::from_utf8_lossy(&seen).contains(want) {
                    return true;
                }
            }
            false
        })
        .await;
        let text = String::from_utf8_lossy(&seen).into_owned();
        assert_eq!(found, Ok(true), "{want:?} never came; got {text:?}");
        text
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, r)| !r.starts_with('Z'))
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn input_echoes_back_through_the_terminal() {
        let mut pty = sh("read line; echo \"got:$line\"; sleep 5", 24, 80);
        pty.write(b"hello\r").unwrap();
        read_until(&mut pty, "got:hello").await;
        pty.close(Duration::from_millis(500)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_program_sees_resizes() {
        let mut pty = sh("stty size; read x; stty size; sleep 5", 24, 80);
        read_until(&mut pty, "24 80").await;
        pty.resize(40, 132).unwrap();
        pty.write(b"\r").unwrap();
        read_until(&mut pty, "40 132").await;
        pty.close(Duration::from_millis(500)).await;
    }

    /// Security case 49: a flood to a reader that stops reading blocks the
    /// program (bounded buffers) instead of piling up in memory; once read,
    /// every byte arrives.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hostile_49_a_flood_waits_for_its_reader() {
        let mut pty = sh(
            "head -c 50000000 /dev/zero | tr '\\0' a; echo FLOOD-END",
            24,
            80,
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let shell = pty.pid().unwrap();
        assert!(
            alive(shell),
            "the flood finished without a reader: nothing bounded it"
        );
        let mut total = 0usize;
        let mut tail = Vec::new();
        let done = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(chunk) = pty.output().await {
                total += chunk.len();
                tail.extend_from_slice(&chunk);
                let keep = tail.len().saturating_sub(64);
                tail.drain(..keep);
                if String::from_utf8_lossy(&tail).contains("FLOOD-END") {
                    return;
                }
            }
        })
        .await;
        assert!(done.is_ok(), "the flood never ended ({total} bytes read)");
        assert!(total >= 50_000_000, "{total} bytes");
        pty.close(Duration::from_millis(300)).await;
    }

    /// Closing ends the program and what it started, even a child that
    /// ignores SIGHUP, within the grace period.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closing_leaves_no_process_behind() {
        // `set -m`: the job gets a process group of its own, as in an
        // interactive shell.
        let mut pty = sh(
            "set -m; trap '' HUP; sleep 1000 & echo child:$! end; wait",
            24,
            80,
        );
        let text = read_until(&mut pty, " end").await;
        let child: u32 = text
            .split("child:")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .expect("the child's pid");
        let shell = pty.pid().unwrap();
        let started = std::time::Instant::now();
        pty.close(Duration::from_millis(300)).await;
        assert!(started.elapsed() < Duration::from_secs(3));
        for _ in 0..100 {
            if !alive(shell) && !alive(child) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "left behind: shell alive {}, child alive {}",
            alive(shell),
            alive(child)
        );
    }
}
