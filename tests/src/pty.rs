//! A program on a pseudo-terminal, read as a person reads it: its output
//! goes through a vt100 parser, and tests wait, with a deadline, until the
//! *screen* shows what they expect. Typing is plain bytes on the pty (`\r`
//! is Enter). The program is its own session leader; [`Pty::kill`] (and
//! drop) kill its whole process group. The real `claude` CLI
//! ([`crate::claude_cli`]) and Neovim's TUI ([`crate::nvim`]) run on one.

use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portable_pty::{Child, CommandBuilder, MasterPty, PtySize};
use tokio::sync::watch;

/// What the reader thread keeps.
struct Term {
    parser: vt100::Parser,
    /// Every byte the program wrote, for failure messages.
    raw: Vec<u8>,
    eof: bool,
}

/// A running program on a pty of its own.
pub struct Pty {
    child: Box<dyn Child + Send + Sync>,
    pid: u32,
    cols: u16,
    writer: Box<dyn Write + Send>,
    _master: Box<dyn MasterPty + Send>,
    term: Arc<Mutex<Term>>,
    changed: watch::Receiver<u64>,
    reader: Option<std::thread::JoinHandle<()>>,
    killed: bool,
}

impl Pty {
    /// Starts `cmd` on a fresh pty of `rows` × `cols`.
    pub fn spawn(cmd: CommandBuilder, rows: u16, cols: u16) -> Pty {
        let pty = portable_pty::native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pty");
        let program = cmd.get_argv().first().cloned().unwrap_or_default();
        let child = pty
            .slave
            .spawn_command(cmd)
            .unwrap_or_else(|e| panic!("spawn {program:?} on a pty: {e}"));
        // Only the child holds the slave now: its exit ends our reads.
        drop(pty.slave);
        let pid = child.process_id().expect("pid");
        let reader = pty.master.try_clone_reader().expect("pty reader");
        let writer = pty.master.take_writer().expect("pty writer");
        let term = Arc::new(Mutex::new(Term {
            parser: vt100::Parser::new(
                NonZeroU16::new(rows).expect("rows"),
                NonZeroU16::new(cols).expect("cols"),
                0,
            ),
            raw: Vec::new(),
            eof: false,
        }));
        let (tx, changed) = watch::channel(0u64);
        let reader = {
            let term = term.clone();
            std::thread::Builder::new()
                .name("pty-reader".into())
                .spawn(move || read_pty(reader, term, tx))
                .expect("pty reader thread")
        };
        Pty {
            child,
            pid,
            cols,
            writer,
            _master: pty.master,
            term,
            changed,
            reader: Some(reader),
            killed: false,
        }
    }

    /// The process id of what was spawned.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The screen as text, one line per row, trailing blanks trimmed.
    pub fn screen(&self) -> String {
        let t = self.term.lock().expect("pty state");
        t.parser
            .screen()
            .rows(0, self.cols)
            .map(|r| r.trim_end().to_owned())
            .collect::<Vec<_>>()
            .join("\n")
            .trim_end()
            .to_owned()
    }

    /// Everything the program printed, escape sequences included.
    pub fn raw_output(&self) -> String {
        String::from_utf8_lossy(&self.term.lock().expect("pty state").raw).into_owned()
    }

    /// Whether the program closed its end (it exited).
    pub fn ended(&self) -> bool {
        self.term.lock().expect("pty state").eof
    }

    /// Waits until `pred` holds for the screen; returns that screen, or
    /// `None` after `timeout` or once the program has exited.
    pub async fn try_wait_screen(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            self.changed.borrow_and_update();
            let screen = self.screen();
            if pred(&screen) {
                return Some(screen);
            }
            let timed_out = self.ended()
                || tokio::time::timeout_at(deadline, self.changed.changed())
                    .await
                    .map_or(true, |r| r.is_err());
            if timed_out {
                // One last look: the change may have come with the end.
                let screen = self.screen();
                return pred(&screen).then_some(screen);
            }
        }
    }

    /// Writes raw bytes to the terminal (keys).
    pub fn send_keys(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write to the pty");
        self.writer.flush().expect("flush the pty");
    }

    /// Kills the program's whole process group (it is a session leader),
    /// reaps it and ends the reader thread.
    pub fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        let pid = self.pid as libc::pid_t;
        // SAFETY: kill has no memory-safety preconditions; the group is the
        // program's own session (portable-pty calls setsid for the child).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::kill(pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            // The reader ends when the last holder of the slave is gone;
            // a grandchild that escaped the group could keep it open, so do
            // not wait for it forever.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !reader.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if reader.is_finished() {
                let _ = reader.join();
            }
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read_pty(mut reader: Box<dyn Read + Send>, term: Arc<Mutex<Term>>, tx: watch::Sender<u64>) {
    let mut buf = [0u8; 16 << 10];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut t = term.lock().expect("pty state");
            t.parser.process(&buf[..n]);
            // Bounded: keep the last 4 MiB.
            t.raw.extend_from_slice(&buf[..n]);
            if t.raw.len() > 4 << 20 {
                let cut = t.raw.len() - (4 << 20);
                t.raw.drain(..cut);
            }
        }
        tx.send_modify(|g| *g += 1);
    }
    term.lock().expect("pty state").eof = true;
    tx.send_modify(|g| *g += 1);
}
