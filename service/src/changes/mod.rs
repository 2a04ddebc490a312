//! The change-set host of one workspace: takes the edits Claude made
//! without asking (from the sources: hosted sessions, terminals, the IDE
//! link's transcripts) and the hub's `moonkale/changes/*` requests, keeps
//! the sets ([`moonkale_hub::core::changes`], the pure model) in the user's
//! state directory, and does an undo's IO: the file read back, the new
//! text written atomically inside the workspace, the hub told.
//!
//! **Invariant:** the host alone writes workspace files for an undo, only
//! through [`disk::WorkspaceFiles`] (confined, no symlink followed), and
//! writes down an undo's intent before the file and settles it after; a
//! service killed in between settles it at start by what the file holds.
//!
//! **Invariant:** an undo never overwrites unsaved work: a file an editor
//! holds dirty with a text other than the disk's is refused, and a hunk
//! someone changed since Claude wrote it is refused by the model; a save
//! that lands between the read and the write refuses the file too (the
//! write looks at the file a last time, [`disk`]).

mod disk;
mod store;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use lsp_types::Url;
use moonkale_hub::core::changes::{self as model, ChangeBook, FileEdit, UndoPlan};
use moonkale_protocol::changes::{self as wire, Refusal, UndoParams, UndoResult};
use moonkale_protocol::dispatch::Dispatch;
use moonkale_protocol::{Empty, to_json};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::now_ms;
use crate::hub::ports::{
    AgentCommand, AgentPort, ChangeRecord, ChangeSource, ChangesCommand, OpenBuffer, Request,
};
use crate::hub::{Event, HubHandle};
use crate::lsp::message::ResponseError;
use disk::{Seen, WorkspaceFiles, Written};
use store::Store;

/// Largest text of a file, before or after, kept in a set.
pub const MAX_FILE_BYTES: usize = 8 << 20;
/// Largest set (every file's texts together).
pub const MAX_SET_BYTES: usize = 64 << 20;
/// Sets kept; the oldest go beyond that.
pub const MAX_SETS: usize = 200;
/// Sets older than this go.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Records taken together before the sets are stored and the hub told.
const MAX_BATCH: usize = 256;
/// A set of a source that shows no turns ends this long after its last edit.
pub const BURST_END: Duration = Duration::from_secs(2);

/// Starts the change-set host of the workspace `hub` serves; `agent` hears
/// the reasons the user gives for undoing a hosted session's change.
pub fn spawn(
    hub: HubHandle,
    commands: mpsc::Receiver<ChangesCommand>,
    agent: Option<AgentPort>,
) -> tokio::task::JoinHandle<()> {
    let dir = crate::user_state::workspace_state_dir(hub.root())
        .map(|d| d.join("changes"))
        .map_err(|e| e.to_string());
    spawn_in(hub, commands, agent, dir)
}

/// [`spawn`], keeping the sets in `dir` (a test's or a benchmark's own
/// folder).
pub fn spawn_in(
    hub: HubHandle,
    commands: mpsc::Receiver<ChangesCommand>,
    agent: Option<AgentPort>,
    dir: Result<PathBuf, String>,
) -> tokio::task::JoinHandle<()> {
    let files = WorkspaceFiles::new(hub.root());
    spawn_with(hub, commands, agent, dir, files)
}

/// [`spawn_in`], with the workspace's files reached through `files`.
fn spawn_with(
    hub: HubHandle,
    commands: mpsc::Receiver<ChangesCommand>,
    agent: Option<AgentPort>,
    dir: Result<PathBuf, String>,
    files: WorkspaceFiles,
) -> tokio::task::JoinHandle<()> {
    let store = dir.and_then(|d| Store::open(d).map_err(|e| e.to_string()));
    let host = Host {
        files,
        hub,
        agent,
        book: ChangeBook::new(),
        store: store
            .map_err(|e| tracing::warn!("change sets are kept in memory only: {e}"))
            .ok(),
        bursts: HashMap::new(),
    };
    tokio::spawn(host.run(commands))
}

struct Host {
    hub: HubHandle,
    agent: Option<AgentPort>,
    files: WorkspaceFiles,
    book: ChangeBook,
    /// `None`: the state directory is unusable; sets live in memory only.
    store: Option<Store>,
    /// Open sets of sources without turns, and when their burst ends.
    bursts: HashMap<u64, Instant>,
}

impl Host {
    async fn run(mut self, mut commands: mpsc::Receiver<ChangesCommand>) {
        self.load();
        self.updated(None).await;
        // A command taken from the queue while gathering records.
        let mut next: Option<ChangesCommand> = None;
        loop {
            let next_end = self.bursts.values().min().copied();
            let burst_over = async {
                match next_end {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let command = match next.take() {
                Some(command) => Some(command),
                None => tokio::select! {
                    command = commands.recv() => command,
                    () = burst_over => {
                        self.end_bursts().await;
                        continue;
                    }
                },
            };
            match command {
                None | Some(ChangesCommand::Shutdown) => break,
                Some(ChangesCommand::Record(record)) => {
                    next = self.record_all(record, &mut commands).await;
                }
                Some(ChangesCommand::TurnEnded { source, turn }) => {
                    if let Some(id) = self.book.end_turn(&source, &turn) {
                        self.persist(id);
                        self.updated(Some(id)).await;
                    }
                }
                Some(ChangesCommand::Request(request)) => self.request(request).await,
                Some(ChangesCommand::Undo {
                    params,
                    buffers,
                    strict,
                    reply,
                }) => {
                    let answer = self.undo(params, &buffers, strict).await;
                    reply.send(answer.map(|r| to_json(&r)));
                }
            }
        }
    }

    /// Takes `first` and every record already queued behind it (at most
    /// [`MAX_BATCH`]), then stores each set they touched once and tells the
    /// hub once: a burst of edits costs in proportion to its bytes, not to
    /// their square. The command that ended the batch, if any.
    async fn record_all(
        &mut self,
        first: ChangeRecord,
        commands: &mut mpsc::Receiver<ChangesCommand>,
    ) -> Option<ChangesCommand> {
        let mut touched = Vec::new();
        let mut announce = None;
        let mut next = None;
        let mut record = Some(first);
        for _ in 0..MAX_BATCH {
            let Some(r) = record.take() else { break };
            if let Some(recorded) = self.record(r) {
                announce = recorded.closed.last().copied().or(announce);
                touched.extend(recorded.closed);
                touched.push(recorded.set);
            }
            match commands.try_recv() {
                Ok(ChangesCommand::Record(r)) => record = Some(r),
                Ok(other) => {
                    next = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        if let Some(r) = record {
            next = Some(ChangesCommand::Record(r));
        }
        if touched.is_empty() {
            return next;
        }
        touched.sort_unstable();
        touched.dedup();
        for id in touched {
            self.persist(id);
        }
        self.prune();
        self.updated(announce).await;
        next
    }

    /// The stored sets, each undo under way settled by its file, every set
    /// closed (its turn went with the service that recorded it).
    fn load(&mut self) {
        let Some(store) = &self.store else {
            return;
        };
        self.book = ChangeBook::from_sets(store.load());
        let ids: Vec<u64> = self.book.sets().iter().map(|s| s.id).collect();
        for id in ids {
            let set = self.book.set(id).expect("listed above");
            let was_open = set.open;
            if let Some(intent) = set.intent.clone() {
                let path = intent.uri.to_file_path().ok();
                let path = path.and_then(|p| self.files.confine(&p).ok());
                let now = path
                    .as_ref()
                    .map(|p| self.files.read_bytes(p, MAX_FILE_BYTES));
                // A file that cannot be read is not taken for the new text.
                let done = match now {
                    Some(Ok(now)) => self.book.resolve_intent(id, now.as_deref()),
                    _ => {
                        self.book.abandon_undo(id);
                        false
                    }
                };
                if let Some(path) = &path {
                    self.files.remove_leftover(path);
                }
                tracing::info!(set = id, done, "settled an undo a stop interrupted");
            } else if !was_open {
                continue;
            }
            self.book.close(id);
            self.persist(id);
        }
        self.prune();
    }

    /// Writes set `id` down; a settled set's file goes instead.
    fn persist(&mut self, id: u64) {
        let (Some(store), Some(set)) = (&self.store, self.book.set(id)) else {
            return;
        };
        if set.is_settled() {
            store.remove(id);
        } else if let Err(e) = store.save(set) {
            tracing::warn!("cannot store change set {id}: {e}");
        }
    }

    fn prune(&mut self) {
        let cutoff = now_ms().saturating_sub(MAX_AGE.as_millis() as u64);
        for id in self.book.prune(cutoff, MAX_SETS) {
            self.bursts.remove(&id);
            if let Some(store) = &self.store {
                store.remove(id);
            }
        }
    }

    /// Tells the hub: every pending set and file, and the set to announce.
    async fn updated(&self, announce: Option<u64>) {
        self.hub
            .send(Event::ChangesUpdated {
                sets: self.book.list(false),
                pending: self.book.pending_files(),
                announce,
            })
            .await;
    }

    /// One record into the book (not stored yet); `None` if dropped.
    fn record(&mut self, record: ChangeRecord) -> Option<model::Recorded> {
        let path = match self.files.confine(&record.path) {
            Ok(path) => path,
            Err(why) => {
                tracing::debug!("an edit not recorded: {why}");
                return None;
            }
        };
        let Some(uri) = moonkale_hub::core::uri::from_path(&path)
            .ok()
            .and_then(|u| u.to_url())
        else {
            tracing::debug!("an edit not recorded: no URI for {}", path.display());
            return None;
        };
        let text_len = |t: &Option<String>| t.as_ref().map_or(0, String::len);
        if text_len(&record.before) > MAX_FILE_BYTES || text_len(&record.after) > MAX_FILE_BYTES {
            tracing::warn!(
                "an edit of {} not recorded: larger than {} MiB",
                path.display(),
                MAX_FILE_BYTES >> 20
            );
            return None;
        }
        if let Some(set) = self.book.open_set_for(&record.source, &record.turn) {
            let old = set.file(&uri);
            let grows = text_len(&record.after)
                + old.map_or(text_len(&record.before), |f| {
                    f.before.as_ref().map_or(0, String::len)
                });
            let shrinks = old.map_or(0, |f| f.bytes());
            if set.bytes() - shrinks + grows > MAX_SET_BYTES {
                tracing::warn!(
                    "an edit of {} not recorded: change set {} would pass {} MiB",
                    path.display(),
                    set.id,
                    MAX_SET_BYTES >> 20
                );
                return None;
            }
        }
        let burst = !model::shows_turns(&record.source, &record.turn);
        let recorded = self.book.record(FileEdit {
            source: record.source,
            turn: record.turn,
            title: record.title,
            uri,
            before: record.before,
            after: record.after,
            at: record.at,
        });
        for id in &recorded.closed {
            self.bursts.remove(id);
        }
        if burst {
            self.bursts.insert(recorded.set, Instant::now() + BURST_END);
        }
        Some(recorded)
    }

    /// Closes the sets whose burst is over, and announces the last.
    async fn end_bursts(&mut self) {
        let now = Instant::now();
        let over: Vec<u64> = self
            .bursts
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in &over {
            self.bursts.remove(id);
            self.book.close(*id);
            self.persist(*id);
        }
        if let Some(last) = over.into_iter().max() {
            self.updated(Some(last)).await;
        }
    }

    async fn request(&mut self, request: Request) {
        let Request {
            method,
            params,
            reply,
            ..
        } = request;
        let mut kept = None;
        let answer: Result<Value, ResponseError> = Dispatch::new(&method, &params)
            .on::<wire::List>(|p| {
                Ok(to_json(&wire::ListResult {
                    sets: self.book.list(p.unwrap_or_default().all),
                }))
            })
            .on::<wire::Show>(|p| self.book.show(p.set).map(|r| to_json(&r)))
            .on::<wire::Keep>(|p| {
                if self.book.keep(&p)? {
                    kept = Some(p.set);
                }
                Ok(to_json(&Empty {}))
            })
            .finish();
        reply.send(answer);
        if let Some(id) = kept {
            self.persist(id);
            self.updated(None).await;
        }
    }

    /// Undoes what `params` names, file by file; each file is one intent,
    /// one write and one event. A refusal is an error with `hunk` given
    /// (nothing changed then) or `strict` (what could be undone was).
    async fn undo(
        &mut self,
        params: UndoParams,
        buffers: &[OpenBuffer],
        strict: bool,
    ) -> Result<UndoResult, ResponseError> {
        if params.hunk.is_some() && params.uri.is_none() {
            return Err(ResponseError::invalid_params(
                "a hunk is undone by its file: give `uri` too",
            ));
        }
        let targets = self.book.undo_targets(params.set, params.uri.as_ref())?;
        let mut result = UndoResult::default();
        let mut undone_files = Vec::new();
        for uri in targets {
            match self.undo_file(params.set, &uri, params.hunk, buffers) {
                Ok((undone, refused)) => {
                    if undone > 0 {
                        undone_files.push(model::display(&uri));
                    }
                    result.undone += undone;
                    result.refused.extend(refused);
                }
                Err(e) if params.hunk.is_some() => return Err(e),
                Err(e) => result.refused.push(Refusal {
                    uri,
                    hunk: None,
                    message: e.message,
                }),
            }
        }
        if result.undone > 0 {
            self.tell_claude(params.set, &undone_files, params.reason.as_deref());
            self.updated(None).await;
        }
        match result.refused.first() {
            Some(refusal) if strict || params.hunk.is_some() => {
                let done = match result.undone {
                    0 => String::new(),
                    1 => "1 change was undone; ".to_owned(),
                    n => format!("{n} changes were undone; "),
                };
                Err(ResponseError::invalid_params(format!(
                    "{done}{}",
                    refusal.message
                )))
            }
            _ => Ok(result),
        }
    }

    /// Undoes `hunk` (else every pending hunk) of one file: the hunks
    /// undone and those refused.
    fn undo_file(
        &mut self,
        set: u64,
        uri: &Url,
        hunk: Option<usize>,
        buffers: &[OpenBuffer],
    ) -> Result<(usize, Vec<Refusal>), ResponseError> {
        let refuse = |why: String| ResponseError::invalid_params(why);
        let path = uri
            .to_file_path()
            .map_err(|()| refuse(format!("{uri} is not a file")))?;
        let path = self.files.confine(&path).map_err(refuse)?;
        let seen = self.files.read(&path, MAX_FILE_BYTES).map_err(refuse)?;
        let current = seen.text.as_deref();
        let unsaved = buffers
            .iter()
            .any(|b| b.uri == *uri && b.dirty && Some(b.text.as_str()) != current);
        if unsaved {
            return Err(refuse(format!(
                "{} has unsaved changes in an editor; save or revert them, then undo again",
                model::display(uri)
            )));
        }
        let plan = self.book.plan_undo(set, uri, hunk, current)?;
        if plan.undone.is_empty() {
            return Ok((0, plan.refused));
        }
        match self.write_undo(&path, &plan, &seen)? {
            Written::Done => {}
            // A save landed after the read: the plan was made against a
            // text the file no longer holds.
            Written::Changed => return Ok((0, plan.changed_meanwhile())),
        }
        self.hub.try_send(Event::FileRewritten {
            uri: uri.clone(),
            text: plan.text.clone(),
        });
        Ok((plan.undone.len(), plan.refused))
    }

    /// The intent stored, the file written (or removed) if it is still
    /// what `seen` read, the intent settled. A failed write, or a file
    /// changed since it was read, undoes nothing; a crash before the
    /// intent is settled is settled at start by what the file holds
    /// (`resolve_intent`: a save that landed is not the undo's text).
    fn write_undo(
        &mut self,
        path: &crate::workspace_fs::ConfinedPath,
        plan: &UndoPlan,
        seen: &Seen,
    ) -> Result<Written, ResponseError> {
        self.book.begin_undo(plan)?;
        if let (Some(store), Some(set)) = (&self.store, self.book.set(plan.set))
            && let Err(e) = store.save(set)
        {
            self.book.abandon_undo(plan.set);
            return Err(ResponseError::invalid_params(format!(
                "nothing was undone: the change set cannot be stored ({e})"
            )));
        }
        let written = match &plan.text {
            Some(text) => self.files.write(path, text, seen),
            None => self.files.remove(path, seen),
        };
        match written {
            Ok(Written::Done) => {
                self.book.finish_undo(plan.set);
                self.persist(plan.set);
                Ok(Written::Done)
            }
            Ok(Written::Changed) => {
                self.book.abandon_undo(plan.set);
                self.persist(plan.set);
                Ok(Written::Changed)
            }
            Err(e) => {
                self.book.abandon_undo(plan.set);
                self.persist(plan.set);
                Err(ResponseError::invalid_params(format!(
                    "{} was not changed: {e}",
                    model::display(&plan.uri)
                )))
            }
        }
    }

    /// A hosted session hears why the user undid its change.
    fn tell_claude(&self, set: u64, files: &[String], reason: Option<&str>) {
        let (Some(agent), Some(reason)) = (&self.agent, reason) else {
            return;
        };
        let Some(ChangeSource::Agent { session }) = self.book.set(set).map(|s| &s.source) else {
            return;
        };
        let text = format!(
            "I undid your change to {}. My reason: {reason}",
            files.join(", ")
        );
        let command = AgentCommand::TellClaude {
            session: session.clone(),
            text,
        };
        if agent.try_send(command).is_err() {
            tracing::warn!("the agent host is busy; the reason for an undo was not passed on");
        }
    }
}
