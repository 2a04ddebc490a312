//! One service terminal: its program in a PTY and its screen, owned by one
//! task.
//!
//! **Invariant:** only this task reads the PTY and changes the screen. The
//! PTY is read as fast as the screen takes it (the screen's memory is
//! bounded by its size and scrollback), and front ends get coalesced updates
//! of the changed rows at most every [`FRAME`] (the first after a quiet
//! spell at once), dropped rather than queued
//! for a front end that stops reading (it can always ask for the screen).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use moonkale_protocol::terminal::{
    self as wire, ExitParams, LinesResult, LinksResult, ScreenResult,
};
use moonkale_protocol::to_json;
use moonkale_protocol::{Empty, Notification};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::keys;
use super::pty::Pty;
use super::screen::Screen;
use crate::hub::{Event, HubHandle, Responder, Topic};
use crate::lsp::message::{ResponseError, code};

/// Shortest time between two updates, and so the longest wait between
/// output and the update that shows it.
pub const FRAME: Duration = Duration::from_millis(16);
/// How often a terminal looks whether a job runs in its foreground.
const FOREGROUND_CHECK: Duration = Duration::from_secs(1);
/// Scrollback lines kept per terminal.
pub const SCROLLBACK: usize = 10_000;
/// Bracketed-paste end marker: never let pasted text end the paste early.
const PASTE_END: &str = "\x1b[201~";
const COMMAND_QUEUE: usize = 256;

pub enum TerminalCommand {
    /// Raw text (typed characters).
    Text {
        text: String,
        reply: Responder,
    },
    /// Key names (`Enter`, `Ctrl+c`, …).
    Keys {
        keys: Vec<String>,
        reply: Responder,
    },
    /// Pasted text: bracketed if the program asked for it.
    Paste {
        text: String,
        reply: Responder,
    },
    Resize {
        rows: u16,
        cols: u16,
        reply: Responder,
    },
    Screen {
        reply: Responder,
    },
    Scrollback {
        offset: usize,
        count: usize,
        reply: Responder,
    },
    Links {
        reply: Responder,
    },
}

pub use moonkale_protocol::terminal::TerminalInfo;

impl TerminalCommand {
    /// Whether it gives the program input (a person typing or pasting).
    fn is_input(&self) -> bool {
        matches!(
            self,
            TerminalCommand::Text { .. }
                | TerminalCommand::Keys { .. }
                | TerminalCommand::Paste { .. }
        )
    }
}

pub struct TerminalHandle {
    pub tx: mpsc::Sender<TerminalCommand>,
    pub info: watch::Receiver<TerminalInfo>,
    /// Ends the terminal: SIGHUP, then SIGKILL after the grace period.
    pub close: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<()>,
}

pub fn spawn(
    id: u64,
    pty: Pty,
    info: TerminalInfo,
    workspace: Arc<PathBuf>,
    hub: HubHandle,
    (grace, idle): (Duration, Duration),
) -> TerminalHandle {
    let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
    let (close_tx, close_rx) = tokio::sync::oneshot::channel();
    let screen = Screen::new(info.rows, info.cols, SCROLLBACK);
    let (info_tx, info_rx) = watch::channel(info);
    let terminal = Terminal {
        id,
        pty: Some(pty),
        screen,
        workspace,
        hub,
        info: info_tx,
        frame_due: None,
        last_flush: None,
        idle,
        active: tokio::time::Instant::now(),
    };
    let task = tokio::spawn(terminal.run(rx, close_rx, grace));
    TerminalHandle {
        tx,
        info: info_rx,
        close: Some(close_tx),
        task,
    }
}

struct Terminal {
    id: u64,
    /// `None` once the program's output has ended.
    pty: Option<Pty>,
    screen: Screen,
    workspace: Arc<PathBuf>,
    hub: HubHandle,
    info: watch::Sender<TerminalInfo>,
    /// When the update showing output not shown yet is due: set by the
    /// first such output, so a steady stream still gets one per frame.
    frame_due: Option<tokio::time::Instant>,
    /// When the last update went out.
    last_flush: Option<tokio::time::Instant>,
    /// How long a shell at its prompt, quiet, keeps the service up.
    idle: Duration,
    /// The program's last output or input.
    active: tokio::time::Instant,
}

impl Terminal {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<TerminalCommand>,
        mut close: tokio::sync::oneshot::Receiver<()>,
        grace: Duration,
    ) {
        let mut ended: Option<Pty> = None;
        // A running program keeps the service up, but for a shell at its
        // prompt with no input or output for the idle period (a service
        // started for the user then ends, and the terminal with it); a
        // terminal whose program ended, left open to be read, does not.
        let mut running = Some(crate::lifetime::Activity::process().busy());
        // A job starts and ends without output of its own: its shell's
        // foreground is looked at now and then.
        let mut foreground = tokio::time::interval(FOREGROUND_CHECK);
        foreground.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let due = self.frame_due;
            let frame = async move {
                match due {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            };
            let quiet_due =
                (running.is_some() && self.pty.is_some()).then_some(self.active + self.idle);
            let quiet = async move {
                match quiet_due {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut close => break,
                _ = foreground.tick() => self.look_at_the_foreground(),
                command = commands.recv() => match command {
                    Some(command) => {
                        if command.is_input() {
                            self.used(&mut running);
                        }
                        self.command(command);
                    }
                    None => break,
                },
                chunk = output(&mut self.pty) => match chunk {
                    Some(bytes) => {
                        self.screen.process(&bytes);
                        self.mark_dirty();
                        self.used(&mut running);
                    }
                    None => {
                        ended = self.pty.take();
                        running = None;
                        self.exited(ended.as_mut()).await;
                    }
                },
                () = frame => self.flush(),
                () = quiet => {
                    if self.at_its_prompt() {
                        tracing::info!(terminal = self.id, "a shell at its prompt, quiet for {:?}: it keeps the service up no more", self.idle);
                        running = None;
                    } else {
                        self.active = tokio::time::Instant::now();
                    }
                }
            }
        }
        if let Some(pty) = self.pty.take().or(ended) {
            pty.close(grace).await;
        }
        drop(running);
    }

    /// Input or output: the terminal is in use (again).
    fn used(&mut self, running: &mut Option<crate::lifetime::Busy>) {
        self.active = tokio::time::Instant::now();
        if running.is_none() && self.pty.is_some() {
            *running = Some(crate::lifetime::Activity::process().busy());
        }
        let now = crate::clock::now_ms();
        // `active_at` alone changes nothing anyone waits on: it is read
        // with the list, not announced.
        self.info.send_if_modified(|i| {
            i.active_at = now;
            false
        });
    }

    /// Whether a program other than the shell runs, as `status` shows it
    /// (every [`FOREGROUND_CHECK`], not at each chunk of output); a running
    /// job counts as use.
    fn look_at_the_foreground(&mut self) {
        let Some(pty) = &self.pty else { return };
        let busy = !self.info.borrow().shell || pty.runs_a_job();
        if busy {
            self.active = tokio::time::Instant::now();
        }
        self.info
            .send_if_modified(|i| std::mem::replace(&mut i.busy, busy) != busy);
    }

    /// A shell with no job in its foreground.
    fn at_its_prompt(&self) -> bool {
        self.info.borrow().shell && !self.pty.as_ref().is_some_and(Pty::runs_a_job)
    }

    fn command(&mut self, command: TerminalCommand) {
        let application_cursor = self.screen.application_cursor();
        match command {
            TerminalCommand::Text { text, reply } => {
                reply.send(self.write(text.as_bytes()));
            }
            TerminalCommand::Keys { keys, reply } => {
                let mut bytes = Vec::new();
                for key in &keys {
                    match keys::encode_with(key, application_cursor) {
                        Ok(b) => bytes.extend(b),
                        Err(e) => {
                            reply.send(Err(ResponseError::invalid_params(e.to_string())));
                            return;
                        }
                    }
                }
                reply.send(self.write(&bytes));
            }
            TerminalCommand::Paste { text, reply } => {
                let bytes = if self.screen.bracketed_paste() {
                    format!("\x1b[200~{}{PASTE_END}", text.replace(PASTE_END, ""))
                } else {
                    text
                };
                reply.send(self.write(bytes.as_bytes()));
            }
            TerminalCommand::Resize { rows, cols, reply } => {
                let result = match &self.pty {
                    Some(pty) => pty
                        .resize(rows, cols)
                        .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string())),
                    None => Ok(()),
                };
                if result.is_ok() {
                    self.screen.resize(rows, cols);
                    self.info.send_modify(|i| {
                        i.rows = rows;
                        i.cols = cols;
                    });
                    self.mark_dirty();
                }
                let size = moonkale_protocol::screen::Size { rows, cols };
                reply.send(result.map(|()| to_json(&size)));
            }
            TerminalCommand::Screen { reply } => {
                let screen = ScreenResult {
                    terminal: self.id,
                    snapshot: self.screen.snapshot(),
                    exited: self.info.borrow().exited,
                };
                reply.send(Ok(to_json(&screen)));
            }
            TerminalCommand::Scrollback {
                offset,
                count,
                reply,
            } => {
                let lines = LinesResult {
                    terminal: self.id,
                    lines: self.screen.scrollback(offset, count.min(SCROLLBACK)),
                };
                reply.send(Ok(to_json(&lines)));
            }
            TerminalCommand::Links { reply } => {
                let cwd = self.info.borrow().cwd.clone();
                let links = LinksResult {
                    terminal: self.id,
                    links: self.links(&cwd),
                };
                reply.send(Ok(to_json(&links)));
            }
        }
    }

    /// Output after a quiet spell shows at once (a keystroke's echo waits
    /// for no frame); more within [`FRAME`] of the last update waits for
    /// the next.
    fn mark_dirty(&mut self) {
        let now = tokio::time::Instant::now();
        let next_frame = self.last_flush.map_or(now, |at| at + FRAME);
        self.frame_due.get_or_insert(next_frame.max(now));
    }

    fn write(&mut self, bytes: &[u8]) -> Result<Value, ResponseError> {
        let Some(pty) = self.pty.as_mut() else {
            return Err(ResponseError::new(
                code::REQUEST_FAILED,
                "the terminal's program has exited",
            ));
        };
        pty.write(bytes)
            .map(|()| to_json(&Empty {}))
            .map_err(|e| ResponseError::new(code::REQUEST_FAILED, e.to_string()))
    }

    /// Sends the changed rows (and cursor, title, …) to subscribers.
    fn flush(&mut self) {
        self.frame_due = None;
        self.last_flush = Some(tokio::time::Instant::now());
        let Some(update) = self.screen.changes() else {
            return;
        };
        if let Some(title) = &update.title {
            self.info.send_modify(|i| i.title = title.clone());
        }
        self.notify::<wire::UpdateNotification>(&wire::UpdateParams {
            terminal: self.id,
            update,
        });
    }

    /// The program's output ended: it is reaped (it exits at about the same
    /// time as it closes the terminal) and subscribers are told its code.
    async fn exited(&mut self, pty: Option<&mut Pty>) {
        self.flush();
        let mut code = None;
        if let Some(pty) = pty {
            for _ in 0..100 {
                code = pty.exit_code();
                if code.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.info.send_modify(|i| {
            i.exited = true;
            i.exit_code = code;
        });
        self.notify::<wire::ExitNotification>(&ExitParams {
            terminal: self.id,
            exit_code: code,
        });
    }

    fn notify<N: Notification>(&self, params: &N::Params) {
        // Never wait: a hub that far behind loses an update, which the
        // next update or `screen` makes good.
        self.hub.try_send(Event::Publish {
            topic: Topic::Terminal(self.id),
            method: N::METHOD,
            params: to_json(params),
        });
    }

    /// `path:line[:col]` on the visible screen that name files inside the
    /// workspace.
    fn links(&self, cwd: &Path) -> Vec<wire::Link> {
        let snapshot = self.screen.snapshot();
        let mut out = Vec::new();
        for row in &snapshot.lines {
            let text: String = row.spans.iter().map(|s| s.text.as_str()).collect();
            for link in find_links(&text) {
                let path = cwd.join(link.path);
                let Ok(path) = path.canonicalize() else {
                    continue;
                };
                if !path.starts_with(&*self.workspace) || !path.is_file() {
                    continue;
                }
                out.push(wire::Link {
                    row: row.index,
                    start: link.start,
                    end: link.end,
                    path,
                    line: link.line,
                    column: link.column,
                });
            }
        }
        out
    }
}

async fn output(pty: &mut Option<Pty>) -> Option<Vec<u8>> {
    match pty {
        Some(pty) => pty.output().await,
        None => std::future::pending().await,
    }
}

/// A `path:line[:col]` in a line of text; `start`/`end` are char columns.
#[derive(Debug, PartialEq, Eq)]
pub struct Link<'a> {
    pub path: &'a str,
    pub line: u32,
    pub column: Option<u32>,
    pub start: usize,
    pub end: usize,
}

/// Finds `path:line[:col]` links (as compilers and grep print them).
pub fn find_links(text: &str) -> Vec<Link<'_>> {
    let mut out = Vec::new();
    let is_path_char = |c: char| c.is_alphanumeric() || "/._-+~@".contains(c);
    let mut offset = 0;
    for word in text.split_inclusive(|c: char| c.is_whitespace() || "()[]<>\"'`,".contains(c)) {
        let token = word.trim_end_matches(|c: char| c.is_whitespace() || "()[]<>\"'`,".contains(c));
        let start = offset;
        offset += word.chars().count();
        let mut parts = token.splitn(4, ':');
        let (Some(path), Some(line)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Ok(line) = line.parse::<u32>() else {
            continue;
        };
        let column = parts.next().and_then(|c| c.parse::<u32>().ok());
        if path.is_empty() || !path.chars().all(is_path_char) || !path.contains(['.', '/']) {
            continue;
        }
        let len = path.chars().count()
            + 1
            + line.to_string().len()
            + column.map_or(0, |c| 1 + c.to_string().len());
        out.push(Link {
            path,
            line,
            column,
            start,
            end: start + len,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn links_as_tools_print_them() {
        let got: Vec<String> = [
            "error[E0308]: mismatched types --> src/main.rs:12:5",
            "./a.txt:3: hello:world",
            "see (lib/x.py:10), not http://example.com:80 or 12:30",
            "tests/it.rs:7:",
        ]
        .iter()
        .flat_map(|t| find_links(t))
        .map(|l| {
            format!(
                "{}:{}:{:?} [{}..{}]",
                l.path, l.line, l.column, l.start, l.end
            )
        })
        .collect();
        expect![[r#"
            [
                "src/main.rs:12:Some(5) [35..51]",
                "./a.txt:3:None [0..9]",
                "lib/x.py:10:None [5..16]",
                "tests/it.rs:7:None [0..13]",
            ]
        "#]]
        .assert_debug_eq(&got);
    }
}
