//! The warm spare: one session started ahead, whose `claude` is already up
//! (initialized, our MCP server's handshake served) with the settings the
//! next `moonkale/agent/start` is predicted to use, so that start skips
//! the CLI's start-up, most of a cold session's wait for its first token
//! (what remains is the CLI's own work on the first prompt of a process:
//! BENCHMARKS.md).
//!
//! - The prediction follows the user: the settings of the latest start
//!   (mode, model; `agent/start`'s defaults before any), under the trust
//!   decision of now. A start that matches adopts the spare; one that does
//!   not starts cold, and the spare is replaced by one with its settings.
//! - It exists only while the workspace is in use: an editor attached, or
//!   the agent used (or the last editor gone) within the idle limit; and
//!   only once the agent was used in this workspace (a session of it in
//!   the user's state, a request, an ACP panel's `prepare`), and while
//!   Claude Code has a login `doctor` accepts: opening a file in an editor
//!   starts no `claude` for a user who never asked for one.
//! - The next spare starts a second after a start, not to slow that
//!   session's first turn.
//! - A spare whose CLI ends on its own (or cannot start: no `claude`, or
//!   one too old for an untrusted workspace) is logged and replaced at most
//!   [`MAX_SPARE_FAILURES`] times for the same settings: never a crash loop,
//!   never an error to an editor.
//!
//! **Invariant:** a spare is invisible until adopted: not listed, nothing
//! published, no transcript on disk. The CLI is the one a cold session
//! would start (same argv, same checks); it is only started earlier.

use std::time::Duration;

use moonkale_claude::launch::PermissionMode;
use moonkale_protocol::agent::SessionState;
use moonkale_protocol::status::SpareStatus;
use tokio::time::Instant;
use uuid::Uuid;

use super::Host;
use crate::agent::SpareConfig;
use crate::agent::log::EventLog;
use crate::agent::session::{self, CliSeen, SessionHandle};
use crate::hub::Event;

/// Spares of the same settings that may end unadopted before no more are
/// started for them.
pub const MAX_SPARE_FAILURES: u32 = 3;
/// How long after a start the next spare waits: its CLI's start (a core's
/// worth of work for about half a second) must not slow the new session's
/// first token.
const FOLLOW_DELAY: Duration = Duration::from_secs(1);
/// Past [`FOLLOW_DELAY`], the next spare also waits while a session's turn
/// runs, looking again every [`FOLLOW_DELAY`], but for at most this long
/// after the latest start: ten sessions started at once must not share two
/// cores with a spare's start, yet a long turn must not keep the spare
/// away for good.
const BUSY_HOLD: Duration = Duration::from_secs(30);
/// How often the spare's memory is read again for `status`.
const RSS_REFRESH: Duration = Duration::from_secs(2);

/// What a spare's CLI was started with; a start must ask for the same.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Settings {
    trusted: bool,
    /// The workspace's default sandbox it runs in: a spare started before
    /// a `sandbox set` (or `clear`) is not the session asked for.
    sandbox: Option<crate::user_state::DefaultSandbox>,
    mode: PermissionMode,
    model: Option<String>,
}

struct Spare {
    id: Uuid,
    settings: Settings,
    handle: SessionHandle,
}

/// The host's spare and what decides it.
pub(super) struct Spares {
    config: SpareConfig,
    current: Option<Spare>,
    /// The mode and model of the latest start.
    predicted: (PermissionMode, Option<String>),
    /// Editors attached, as the hub last said.
    editors: usize,
    /// The agent's last use (or the last editor's detach).
    last_used: Option<Instant>,
    /// The agent was ever used in this workspace.
    ever_used: bool,
    /// Spares of the predicted settings that ended unadopted.
    failures: u32,
    /// No spare starts before then (just after an adoption).
    not_before: Option<Instant>,
    /// The latest start (adopting or not), for [`BUSY_HOLD`].
    last_start: Option<Instant>,
    /// What `status` was last told, and when the spare's memory is read
    /// again.
    published: Option<SpareStatus>,
    rss_due: Instant,
}

impl Spares {
    pub fn new(config: SpareConfig) -> Spares {
        Spares {
            config,
            current: None,
            predicted: (PermissionMode::Plan, None),
            editors: 0,
            last_used: None,
            ever_used: false,
            failures: 0,
            not_before: None,
            last_start: None,
            published: None,
            rss_due: Instant::now(),
        }
    }

    /// The workspace is in use now.
    fn in_use(&self) -> bool {
        self.editors > 0
            || self
                .last_used
                .is_some_and(|at| at.elapsed() < self.config.idle)
    }

    /// When the spare must be looked at again: when it goes idle (no
    /// editor attached), or when a held-back one may start.
    fn deadline(&self) -> Option<Instant> {
        if self.current.is_none() {
            return self.not_before;
        }
        if self.editors > 0 {
            return None;
        }
        Some(
            self.last_used
                .map_or_else(Instant::now, |at| at + self.config.idle),
        )
    }
}

/// What happened to the spare.
pub(super) enum SpareEvent {
    Cli(CliSeen),
    /// Gone idle, or may start now.
    Due,
    RssDue,
}

impl Host {
    /// An agent request arrived: the workspace is in use.
    pub(super) fn agent_used(&mut self) {
        self.spares.last_used = Some(Instant::now());
        self.spares.ever_used = true;
    }

    /// The workspace has sessions from before (in the user's state): the
    /// agent was used in it.
    pub(super) fn used_before(&mut self) {
        self.spares.ever_used = true;
    }

    /// The hub says `attached` editors are attached. The last one leaving
    /// counts as a use, so an editor restarted within the idle limit finds
    /// the spare still warm.
    pub(super) fn editors_attached(&mut self, attached: usize) {
        if attached == 0 && self.spares.editors > 0 {
            self.spares.last_used = Some(Instant::now());
        }
        self.spares.editors = attached;
        self.editors.send_replace(attached);
        self.refresh_spare();
    }

    /// The settings a spare should have now, or `None` for no spare.
    fn wanted_spare(&self) -> Option<Settings> {
        let spares = &self.spares;
        if !spares.config.enabled
            || spares.failures >= MAX_SPARE_FAILURES
            || !spares.ever_used
            || !spares.in_use()
        {
            return None;
        }
        // Read only when a spare may be wanted (this runs at every agent
        // request). A jailed CLI's login is the sandbox's, not this
        // machine's: there a spare without one fails, and failures stop it.
        let sandbox = self.default_sandbox();
        if sandbox.is_none() && !(spares.config.login_found)() {
            return None;
        }
        Some(Settings {
            trusted: self.trusted(),
            sandbox,
            mode: spares.predicted.0,
            model: spares.predicted.1.clone(),
        })
    }

    /// Makes the spare what [`Self::wanted_spare`] says: started, replaced
    /// (other settings) or stopped; `status` hears of it.
    pub(super) fn refresh_spare(&mut self) {
        // A hold that has passed is gone (else its deadline would fire
        // again and again).
        let now = Instant::now();
        let held_by_turns = self.spares.current.is_none()
            && self.turn_running()
            && self
                .spares
                .last_start
                .is_some_and(|at| now < at + BUSY_HOLD);
        let spares = &mut self.spares;
        spares.not_before = spares.not_before.filter(|t| now < *t);
        if held_by_turns && spares.not_before.is_none() {
            spares.not_before = Some(now + FOLLOW_DELAY);
        }
        let wanted = self.wanted_spare();
        let current = self.spares.current.as_ref().map(|s| &s.settings);
        if current != wanted.as_ref() {
            if let Some(old) = self.spares.current.take() {
                // Dropping its handle ends its task, which stops its CLI.
                tracing::info!(spare = %old.id, "warm spare claude stopped");
            }
            if let Some(settings) = wanted.filter(|_| self.spares.not_before.is_none()) {
                self.spares.current = Some(self.spawn_spare(settings));
            }
        }
        self.publish_spare();
    }

    fn spawn_spare(&self, settings: Settings) -> Spare {
        let id = Uuid::new_v4();
        tracing::info!(spare = %id, mode = settings.mode.as_str(), trusted = settings.trusted, "starting a warm spare claude");
        let handle = session::spawn(
            session::Start {
                id,
                workspace: self.root.clone(),
                log: EventLog::in_memory(),
                restored: None,
                damaged: None,
                permission_mode: settings.mode,
                model: settings.model.clone(),
                cwd: None,
                mcp_servers: Default::default(),
                spare: true,
                editors: self.editors.subscribe(),
            },
            self.hub.clone(),
            self.config.clone(),
        );
        Spare {
            id,
            settings,
            handle,
        }
    }

    /// A start asks for `mode` and `model`: the spare, if its settings are
    /// those (the caller adopts it). Either way the next spare is predicted
    /// to have them.
    pub(super) fn take_spare(
        &mut self,
        mode: PermissionMode,
        model: Option<String>,
    ) -> Option<(Uuid, SessionHandle)> {
        let asked = Settings {
            trusted: self.trusted(),
            sandbox: self.default_sandbox(),
            mode,
            model: model.clone(),
        };
        if self.spares.predicted != (mode, model.clone()) {
            self.spares.failures = 0;
            self.spares.predicted = (mode, model);
        }
        if self.spares.config.enabled {
            self.spares.not_before = Some(Instant::now() + FOLLOW_DELAY);
            self.spares.last_start = Some(Instant::now());
        }
        let spare = self
            .spares
            .current
            .take_if(|s| s.settings == asked && *s.handle.cli.borrow() != CliSeen::Ended)?;
        self.spares.failures = 0;
        Some((spare.id, spare.handle))
    }

    /// Whether a live session's CLI is working on a turn now.
    fn turn_running(&self) -> bool {
        self.sessions
            .values()
            .any(|l| l.handle.summary.borrow().state == SessionState::Running)
    }

    /// A front end will start sessions with these settings: the spare is
    /// made for them now (unless one is held back after a start).
    pub(super) fn predict_spare(&mut self, mode: PermissionMode, model: Option<String>) {
        if self.spares.predicted != (mode, model.clone()) {
            self.spares.failures = 0;
            self.spares.predicted = (mode, model);
        }
        self.refresh_spare();
    }

    /// The trust decision changed: the next spare runs under the new one.
    pub(super) fn trust_changed(&mut self) {
        self.spares.failures = 0;
        self.refresh_spare();
    }

    /// Waits for something to happen to the spare (pending without one).
    pub(super) async fn spare_event(&mut self) -> SpareEvent {
        let due = self.spares.deadline();
        let rss_due = self.spares.rss_due;
        let Some(spare) = self.spares.current.as_mut() else {
            super::sleep_until(due).await;
            return SpareEvent::Due;
        };
        let cli = &mut spare.handle.cli;
        tokio::select! {
            changed = cli.changed() => SpareEvent::Cli(match changed {
                Ok(()) => *cli.borrow_and_update(),
                Err(_) => CliSeen::Ended,
            }),
            () = super::sleep_until(due) => SpareEvent::Due,
            () = tokio::time::sleep_until(rss_due) => SpareEvent::RssDue,
        }
    }

    pub(super) fn on_spare_event(&mut self, event: SpareEvent) {
        match event {
            SpareEvent::Cli(CliSeen::Ended) => {
                if let Some(gone) = self.spares.current.take() {
                    self.spares.failures += 1;
                    tracing::warn!(
                        spare = %gone.id,
                        "the warm spare claude ended on its own ({} of {MAX_SPARE_FAILURES} for these settings)",
                        self.spares.failures
                    );
                }
                self.refresh_spare();
            }
            SpareEvent::Cli(_) | SpareEvent::RssDue => self.publish_spare(),
            SpareEvent::Due => self.refresh_spare(),
        }
    }

    /// Tells the hub (for `status`) what the spare is now, if that changed.
    fn publish_spare(&mut self) {
        let now = self.spares.current.as_ref().map(|spare| {
            let pid = match *spare.handle.cli.borrow() {
                CliSeen::Running { pid } => u32::try_from(pid).unwrap_or(0),
                _ => 0,
            };
            SpareStatus {
                pid,
                permission_mode: spare.settings.mode,
                model: spare.settings.model.clone(),
                trusted: spare.settings.trusted,
                jailed: spare.settings.sandbox.is_some(),
                rss_bytes: (pid > 0).then(|| rss_bytes(pid)).flatten(),
            }
        });
        self.spares.rss_due = Instant::now() + RSS_REFRESH;
        if now != self.spares.published {
            self.spares.published = now.clone();
            self.hub.try_send(Event::AgentSpare { spare: now });
        }
    }

    /// Stops the spare (the service is stopping); its task is awaited.
    pub(super) async fn stop_spare(&mut self) {
        if let Some(spare) = self.spares.current.take() {
            drop(spare.handle.tx);
            let _ = spare.handle.task.await;
        }
    }
}

/// The resident memory of process `pid` (`VmRSS` in `/proc/<pid>/status`).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
