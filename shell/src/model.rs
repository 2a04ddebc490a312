//! What one page of the shell knows of the workspace, as plain data: the
//! service's answers and notifications go in ([`Model::apply`] and the
//! `load_*` setters), the views read it. No IO and no Dioxus here, so the
//! rules (which questions are open, what a transcript line says) are unit
//! tests, not browser tests.

use std::collections::BTreeMap;

pub use crate::text::inert;
use moonkale_client::Notification;
use moonkale_client::moonkale_protocol::agent::DecisionData;
use moonkale_client::moonkale_protocol::agent::{
    Approval, ApprovalKind, ApprovalStatus, Event, PermissionMode, PreviewResult, SessionEvent,
    SessionState, SessionSummary, SessionView,
};
use moonkale_client::moonkale_protocol::changes::{ChangeSetSummary, ShowResult};
use moonkale_client::moonkale_protocol::lsp_types::Url;
use moonkale_client::moonkale_protocol::proposal::ProposalInfo;
use moonkale_client::moonkale_protocol::screen::{Row, Snapshot, Update};
use moonkale_client::moonkale_protocol::status::Status;
use moonkale_client::moonkale_protocol::terminal::{TerminalId, TerminalInfo};
use serde_json::Value;

/// The most transcript lines a page keeps of one session (older ones are
/// dropped from the page, not from the service).
pub const MAX_LINES: usize = 2000;
/// The most characters of one line's text a page keeps.
pub const MAX_LINE_CHARS: usize = 16 * 1024;

/// Which view the page shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum View {
    #[default]
    Questions,
    Sessions,
    /// One session's transcript.
    Session(String),
    Changes,
    Terminals,
    /// One terminal's screen.
    Terminal(TerminalId),
}

impl View {
    /// The view's place in the page's address (its URL's fragment): the
    /// page's script keeps it in the browser's history, so Back and a
    /// reload come back to it.
    pub fn route(&self) -> String {
        match self {
            View::Questions => "#questions".into(),
            View::Sessions => "#sessions".into(),
            View::Session(id) => format!("#session/{id}"),
            View::Changes => "#changes".into(),
            View::Terminals => "#terminals".into(),
            View::Terminal(id) => format!("#terminal/{id}"),
        }
    }

    /// The view a page's address names; the questions for an empty or
    /// unknown one (the page's start). A session's id is the service's
    /// (letters, digits, `-`, `_`); anything else names no session.
    pub fn from_route(route: &str) -> View {
        let route = route.strip_prefix('#').unwrap_or(route);
        let (name, id) = route.split_once('/').unwrap_or((route, ""));
        let plain = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        match (name, id) {
            ("sessions", "") => View::Sessions,
            ("session", id) if plain => View::Session(id.to_owned()),
            ("changes", "") => View::Changes,
            ("terminals", "") => View::Terminals,
            ("terminal", id) => id.parse().map_or(View::Terminals, View::Terminal),
            _ => View::Questions,
        }
    }
}

/// One line of a transcript as a person reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Prompt(String),
    /// The model's answer (all of a message's text blocks).
    Reply(String),
    /// A tool call, compact: `▸ Read src/main.rs`.
    Tool(String),
    /// What an editing tool wrote (Write, Edit, MultiEdit), as diff lines.
    Diff(Vec<crate::diff::DiffLine>),
    /// The session told something (a failure, a notice, a decision).
    Note(String),
}

/// A session as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionEntry {
    pub id: String,
    pub title: String,
    pub state: SessionState,
    pub updated: u64,
    pub lines: Vec<Line>,
    /// What the model is writing now (streamed, not stored yet).
    pub streaming: String,
    /// The next event this page has not seen.
    pub next_seq: u64,
    /// Folded from every event seen (settings, state, title).
    pub view: SessionView,
}

impl SessionEntry {
    fn new(id: &str) -> SessionEntry {
        SessionEntry {
            id: id.to_owned(),
            title: String::new(),
            state: SessionState::Idle,
            updated: 0,
            lines: Vec::new(),
            streaming: String::new(),
            next_seq: 0,
            view: SessionView::new(PermissionMode::Default, None),
        }
    }

    /// The title a list shows: the first prompt, else the id.
    pub fn label(&self) -> &str {
        if self.title.is_empty() {
            &self.id
        } else {
            &self.title
        }
    }
}

/// A terminal as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct TerminalEntry {
    pub info: TerminalInfo,
    pub screen: Option<Snapshot>,
    pub exited: Option<Option<u32>>,
    /// The lines above the screen, oldest first, once the person asked
    /// for them (up to [`MAX_HISTORY`]).
    pub history: Option<Vec<Row>>,
    /// The screen changed since `history` was read: the lines above it may
    /// have moved.
    pub history_stale: bool,
}

/// The most lines of a terminal's history a page shows.
pub const MAX_HISTORY: usize = 2000;

/// Everything one page shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Model {
    pub view: View,
    /// The view the person opened with a click (a tab, a session, a
    /// terminal): while it shows, it is a new entry in the browser's
    /// history. Any other view (the page's own address after a load or
    /// Back, a terminal that closed) replaces the entry it is on.
    pub opened: Option<View>,
    /// The page told its address: until then the page keeps its own
    /// (a reload must not lose the place to the start view).
    pub route_known: bool,
    pub status: Option<Status>,
    pub sessions: BTreeMap<String, SessionEntry>,
    /// Questions waiting for the user, oldest first.
    pub questions: Vec<Approval>,
    /// What an editing tool's question would do to its file, by approval
    /// (`None` while the service is asked).
    pub previews: BTreeMap<String, Option<PreviewResult>>,
    /// Claude Code's pending `openDiff` proposals with their hunks.
    pub proposals: Vec<ProposalInfo>,
    pub change_sets: Vec<ChangeSetSummary>,
    /// The hunks of the sets the person opened.
    pub change_details: BTreeMap<u64, ShowResult>,
    pub terminals: BTreeMap<TerminalId, TerminalEntry>,
    /// The last error a click met, shown until the next action.
    pub error: Option<String>,
    /// The connection to the service is gone.
    pub disconnected: bool,
}

impl Model {
    /// What waits for the person: open questions and pending proposals,
    /// which hold a CLI up until the person decides (the badge, the
    /// page's title and the Questions tab's count). Change sets wait for
    /// nobody: they are counted on their own tab only.
    pub fn waiting(&self) -> usize {
        self.questions.len() + self.proposals.len()
    }

    /// Pending change sets (the Changes tab's count).
    pub fn pending_changes(&self) -> usize {
        self.change_sets
            .iter()
            .filter(|s| {
                s.state == moonkale_client::moonkale_protocol::changes::ReviewState::Pending
            })
            .count()
    }

    /// The person opened `view` (a new entry in the browser's history).
    pub fn open(&mut self, view: View) {
        self.opened = Some(view.clone());
        self.view = view;
    }

    /// The page is at `route` (loaded there, or Back or Forward went
    /// there): its view, in place of the history entry it is on.
    pub fn arrive(&mut self, route: &str) -> &View {
        self.route_known = true;
        self.opened = None;
        self.view = View::from_route(route);
        &self.view
    }

    /// Back to `view` without the browser's history (the page has no entry
    /// of its own before this one): in place of the entry it is on.
    pub fn back_to(&mut self, view: View) {
        self.opened = None;
        self.view = view;
    }

    /// Whether the view shown is a new entry in the browser's history
    /// (else it replaces the current one).
    pub fn view_is_opened(&self) -> bool {
        self.opened.as_ref() == Some(&self.view)
    }

    /// A terminal was closed (here or anywhere else): its view goes back
    /// to the list.
    pub fn terminal_closed(&mut self, terminal: TerminalId) {
        self.terminals.remove(&terminal);
        if self.view == View::Terminal(terminal) {
            self.view = View::Terminals;
        }
    }

    /// The questions one session waits on, oldest first.
    pub fn questions_of(&self, session: &str) -> Vec<Approval> {
        self.questions
            .iter()
            .filter(|q| q.session == session)
            .cloned()
            .collect()
    }

    /// The workspace's folder name, for the header.
    pub fn workspace_name(&self) -> String {
        self.status.as_ref().map_or_else(String::new, |s| {
            s.workspace.file_name().map_or_else(
                || s.workspace.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
    }

    /// `text` with the workspace's own folder left out of the paths in it
    /// (`▸ Read /home/me/ws/src/main.rs` reads `▸ Read src/main.rs`).
    pub fn relative(&self, text: &str) -> String {
        match &self.status {
            Some(s) if !s.workspace.as_os_str().is_empty() => {
                let root = format!("{}/", s.workspace.display());
                text.replace(&root, "")
            }
            _ => text.to_owned(),
        }
    }

    /// A file's path as the person knows it: inside the workspace, from
    /// the workspace's folder.
    pub fn file_name(&self, uri: &Url) -> String {
        match uri.to_file_path() {
            Ok(path) => self.relative(&path.display().to_string()),
            Err(()) => uri.to_string(),
        }
    }

    /// Whether the status lists other proposals than those the page
    /// holds (their hunks are to be read).
    pub fn proposals_changed(&self) -> bool {
        let listed = self.status.as_ref().map(|s| &s.pending_proposals);
        let listed: Vec<&str> = listed
            .into_iter()
            .flatten()
            .map(|p| p.document.as_str())
            .collect();
        let held: Vec<&str> = self.proposals.iter().map(|p| p.document.as_str()).collect();
        listed != held
    }

    /// The session list, newest activity first.
    pub fn session_list(&self) -> Vec<&SessionEntry> {
        let mut list: Vec<_> = self.sessions.values().collect();
        list.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| a.id.cmp(&b.id)));
        list
    }

    /// The pending change sets as the service lists them. Returns the
    /// sets the person opened whose hunks changed (to be read again); the
    /// details of a set no longer listed are dropped.
    pub fn load_change_sets(&mut self, sets: Vec<ChangeSetSummary>) -> Vec<u64> {
        if self.change_sets == sets {
            return Vec::new();
        }
        self.change_details
            .retain(|id, _| sets.iter().any(|s| s.id == *id));
        let stale = sets
            .iter()
            .filter(|set| {
                self.change_details.contains_key(&set.id)
                    && self.change_sets.iter().find(|old| old.id == set.id) != Some(*set)
            })
            .map(|set| set.id)
            .collect();
        self.change_sets = sets;
        stale
    }

    pub fn load_sessions(&mut self, summaries: Vec<SessionSummary>) {
        for s in summaries {
            let entry = self
                .sessions
                .entry(s.session.clone())
                .or_insert_with(|| SessionEntry::new(&s.session));
            entry.title = s.title;
            entry.state = s.state;
            entry.updated = entry.updated.max(s.updated);
        }
    }

    /// Events of a session read from the service (from `next_seq` on).
    pub fn load_events(&mut self, session: &str, events: &[Event], pending: Vec<Approval>) {
        for event in events {
            self.event(session, event);
        }
        for approval in pending {
            self.ask(approval);
        }
    }

    /// Takes one notification of the service in.
    pub fn apply(&mut self, notification: Notification) {
        match notification {
            Notification::AgentText {
                session,
                text,
                thinking: false,
                offset,
            } => {
                let entry = self.session(&session);
                // A stream restarts at offset 0 with each message.
                if offset == 0 {
                    entry.streaming.clear();
                }
                if entry.streaming.len() < MAX_LINE_CHARS {
                    entry.streaming.push_str(&inert(&text));
                }
            }
            Notification::AgentText { .. } => {}
            Notification::AgentEvent { session, event } => self.event(&session, &event),
            Notification::Approval {
                approval, status, ..
            } => match status {
                ApprovalStatus::Pending => self.ask(*approval),
                ApprovalStatus::Closed => self.close(&approval.approval),
            },
            Notification::TerminalUpdate { terminal, update } => {
                if let Some(entry) = self.terminals.get_mut(&terminal)
                    && let Some(screen) = &mut entry.screen
                {
                    apply_update(screen, update);
                    entry.history_stale = entry.history.is_some();
                }
            }
            Notification::TerminalExit {
                terminal,
                exit_code,
            } => {
                if let Some(entry) = self.terminals.get_mut(&terminal) {
                    entry.exited = Some(exit_code);
                }
            }
            Notification::TerminalClosed { terminal } => self.terminal_closed(terminal),
            Notification::ChangesChanged(changed) => {
                self.load_change_sets(changed.sets);
            }
            Notification::ProposalClosed(closed) => {
                self.proposals.retain(|p| p.document != closed.uri);
            }
            Notification::StatusChanged(status) => self.status = Some(*status),
            Notification::Lagged { .. } | Notification::Other { .. } => {}
        }
    }

    fn session(&mut self, id: &str) -> &mut SessionEntry {
        self.sessions
            .entry(id.to_owned())
            .or_insert_with(|| SessionEntry::new(id))
    }

    fn event(&mut self, session: &str, event: &Event) {
        let entry = self.session(session);
        if event.seq < entry.next_seq {
            return;
        }
        entry.next_seq = event.seq + 1;
        entry.view.fold(event);
        entry.updated = entry.updated.max(event.at);
        entry.state = entry.view.state;
        if entry.title.is_empty() {
            entry.title.clone_from(&entry.view.title);
        }
        let lines = lines_of(&event.event);
        if matches!(&event.event, SessionEvent::Cli(v) if v["type"] == "assistant") {
            entry.streaming.clear();
        }
        entry.lines.extend(lines);
        if entry.lines.len() > MAX_LINES {
            let cut = entry.lines.len() - MAX_LINES;
            entry.lines.drain(..cut);
        }
        match &event.event {
            SessionEvent::Approval(a) => self.ask(a.clone()),
            SessionEvent::Decision(DecisionData::Answered(d)) => self.close(&d.approval),
            _ => {}
        }
    }

    fn ask(&mut self, approval: Approval) {
        if !self
            .questions
            .iter()
            .any(|q| q.approval == approval.approval)
        {
            self.questions.push(approval);
        }
    }

    /// A question was answered (here or anywhere else): its card goes.
    pub fn close(&mut self, approval: &str) {
        self.questions.retain(|q| q.approval != approval);
        self.previews.remove(approval);
    }

    /// Questions of an editing tool whose preview was not asked for yet;
    /// marks them asked.
    pub fn previews_to_read(&mut self) -> Vec<String> {
        let wanted: Vec<String> = self
            .questions
            .iter()
            .filter(|q| {
                matches!(q.kind, ApprovalKind::Tool)
                    && ["Write", "Edit", "MultiEdit"].contains(&q.tool.as_str())
                    && !self.previews.contains_key(&q.approval)
            })
            .map(|q| q.approval.clone())
            .collect();
        for id in &wanted {
            self.previews.insert(id.clone(), None);
        }
        wanted
    }

    pub fn load_terminals(&mut self, list: Vec<TerminalInfo>) {
        let mut kept = BTreeMap::new();
        for info in list {
            let old = self.terminals.remove(&info.terminal);
            kept.insert(
                info.terminal,
                TerminalEntry {
                    screen: old.as_ref().and_then(|o| o.screen.clone()),
                    history: old.as_ref().and_then(|o| o.history.clone()),
                    history_stale: old.as_ref().is_some_and(|o| o.history_stale),
                    exited: old.and_then(|o| o.exited),
                    info,
                },
            );
        }
        self.terminals = kept;
    }
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How long ago `then` was, in words a list shows (`now`, `5 min ago`).
pub fn ago(now: u64, then: u64) -> String {
    let seconds = now.saturating_sub(then) / 1000;
    match seconds {
        0..60 => "now".into(),
        60..3600 => format!("{} min ago", seconds / 60),
        3600..86_400 => format!("{} h ago", seconds / 3600),
        _ => format!("{} d ago", seconds / 86_400),
    }
}

/// What a stored event shows in a transcript.
pub fn lines_of(event: &SessionEvent) -> Vec<Line> {
    match event {
        SessionEvent::Prompt(p) => vec![Line::Prompt(clip(&p.text))],
        SessionEvent::Notice(n) => vec![Line::Note(clip(&n.message))],
        SessionEvent::State(s) => s
            .error
            .as_deref()
            .map(|e| vec![Line::Note(clip(e))])
            .unwrap_or_default(),
        SessionEvent::Cli(message) => cli_lines(message),
        _ => Vec::new(),
    }
}

/// The lines of one CLI message: an assistant's text and tool calls.
fn cli_lines(message: &Value) -> Vec<Line> {
    if message["type"] != "assistant" {
        return Vec::new();
    }
    let Some(blocks) = message["message"]["content"].as_array() else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let mut text = String::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => {
                let tool = block["name"].as_str().unwrap_or("a tool");
                lines.push(Line::Tool(tool_line(tool, &block["input"])));
                // An edit shows as its diff (the heading is the tool line's).
                if let Some(diff) = crate::diff::tool_diff(tool, &block["input"]) {
                    lines.push(Line::Diff(diff.into_iter().skip(1).collect()));
                }
            }
            _ => {}
        }
    }
    if !text.trim().is_empty() {
        lines.insert(0, Line::Reply(clip(&text)));
    }
    lines
}

/// `▸ Read src/main.rs`, `▸ Plan ready`: a tool as a person reads it
/// ([`moonkale_client::moonkale_protocol::agent::tool_summary`]).
pub fn tool_line(tool: &str, input: &Value) -> String {
    format!(
        "▸ {}",
        moonkale_client::moonkale_protocol::agent::tool_summary(tool, input)
    )
}

/// `text` cut to [`MAX_LINE_CHARS`] and made [`inert`].
fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((at, _)) => format!("{}…", inert(&text[..at])),
        None => inert(text),
    }
}

/// Brings a terminal's snapshot up to date with one update: replaced rows
/// by index, and whichever of size, cursor, screen and title changed.
pub fn apply_update(screen: &mut Snapshot, update: Update) {
    if let Some(size) = update.size {
        screen.rows = size.rows;
        screen.cols = size.cols;
        screen.lines.truncate(usize::from(size.rows));
    }
    for row in update.lines {
        let at = usize::from(row.index);
        if at >= usize::from(screen.rows) {
            continue;
        }
        while screen.lines.len() <= at {
            let index = u16::try_from(screen.lines.len()).unwrap_or(u16::MAX);
            screen.lines.push(Row {
                index,
                spans: Vec::new(),
            });
        }
        screen.lines[at] = row;
    }
    if let Some(cursor) = update.cursor {
        screen.cursor = cursor;
    }
    if let Some(alternate) = update.alternate_screen {
        screen.alternate_screen = alternate;
    }
    if let Some(title) = update.title {
        screen.title = title;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moonkale_client::moonkale_protocol::agent::ApprovalKind;
    use serde_json::json;

    fn approval(id: &str) -> Approval {
        Approval {
            approval: id.into(),
            session: "s1".into(),
            kind: ApprovalKind::Tool,
            tool: "Write".into(),
            input: json!({"file_path": "/w/a.txt", "content": "hi\n"}),
            title: "Write a.txt".into(),
            destructive: false,
        }
    }

    fn event(seq: u64, event: SessionEvent) -> Event {
        Event {
            seq,
            at: 1000 + seq,
            event,
        }
    }

    #[test]
    fn a_question_shows_until_it_is_answered_anywhere() {
        let mut m = Model::default();
        let asked = |status| Notification::Approval {
            session: "s1".into(),
            approval: Box::new(approval("s1/1")),
            status,
        };
        m.apply(asked(ApprovalStatus::Pending));
        m.apply(asked(ApprovalStatus::Pending));
        assert_eq!(m.questions.len(), 1, "asked once, shown once");
        assert_eq!(m.waiting(), 1);
        m.apply(asked(ApprovalStatus::Closed));
        assert!(m.questions.is_empty());
        // Read from the stored events too (a page opened later).
        m.load_events(
            "s1",
            &[event(0, SessionEvent::Approval(approval("s1/2")))],
            vec![],
        );
        assert_eq!(m.questions.len(), 1);
        let decided: DecisionData = serde_json::from_value(json!({
            "approval": "s1/2", "tool": "Write", "allow": true, "always": false, "by": "editor"
        }))
        .unwrap();
        m.load_events("s1", &[event(1, SessionEvent::Decision(decided))], vec![]);
        assert!(m.questions.is_empty());
    }

    #[test]
    fn a_transcript_reads_prompts_replies_and_tool_calls_once() {
        let mut m = Model::default();
        let prompt = serde_json::from_value(json!({"text": "fix it"})).unwrap();
        let reply = json!({"type": "assistant", "message": {"content": [
            {"type": "text", "text": "On it."},
            {"type": "tool_use", "name": "Read", "input": {"file_path": "src/main.rs"}},
        ]}});
        let events = [
            event(0, SessionEvent::Prompt(prompt)),
            event(1, SessionEvent::Cli(reply)),
        ];
        m.apply(Notification::AgentText {
            session: "s1".into(),
            text: "On".into(),
            thinking: false,
            offset: 0,
        });
        assert_eq!(m.sessions["s1"].streaming, "On");
        m.load_events("s1", &events, vec![]);
        // The same events again (a notification after a read) add nothing.
        m.load_events("s1", &events, vec![]);
        let s = &m.sessions["s1"];
        assert_eq!(
            s.lines,
            [
                Line::Prompt("fix it".into()),
                Line::Reply("On it.".into()),
                Line::Tool("▸ Read src/main.rs".into()),
            ]
        );
        assert_eq!(s.streaming, "", "the stored message replaces the stream");
        assert_eq!(s.label(), "fix it");
    }

    /// A pending change set the watcher saw, of `files`.
    fn pending_set(
        id: u64,
        files: Vec<moonkale_client::moonkale_protocol::changes::FileSummary>,
    ) -> ChangeSetSummary {
        use moonkale_client::moonkale_protocol::changes::{ChangeSource, ReviewState};
        ChangeSetSummary {
            id,
            source: ChangeSource::Watcher,
            title: String::new(),
            started: 1,
            updated: 1,
            state: ReviewState::Pending,
            open: false,
            files,
        }
    }

    #[test]
    fn change_sets_follow_the_service_and_opened_ones_are_read_again() {
        use moonkale_client::moonkale_protocol::changes::{FileChangeKind, FileSummary};
        let set = |id, pending| {
            pending_set(
                id,
                vec![FileSummary {
                    uri: "file:///w/a.rs".parse().unwrap(),
                    kind: FileChangeKind::Modified,
                    hunks: 2,
                    pending,
                }],
            )
        };
        let shown = |s: ChangeSetSummary| ShowResult {
            set: s,
            files: Vec::new(),
        };
        let mut m = Model::default();
        assert_eq!(
            m.load_change_sets(vec![set(1, 2), set(2, 2)]),
            Vec::<u64>::new()
        );
        m.change_details.insert(1, shown(set(1, 2)));
        m.change_details.insert(2, shown(set(2, 2)));
        // A hunk of set 1 undone elsewhere: its hunks are read again; set
        // 2, unchanged, is not.
        assert_eq!(m.load_change_sets(vec![set(1, 1), set(2, 2)]), vec![1]);
        assert_eq!(
            m.load_change_sets(vec![set(1, 1), set(2, 2)]),
            Vec::<u64>::new()
        );
        // Set 2 kept: gone, with its hunks.
        assert_eq!(m.load_change_sets(vec![set(1, 1)]), Vec::<u64>::new());
        assert!(!m.change_details.contains_key(&2));
        assert_eq!(m.pending_changes(), 1);
    }

    /// Every view has an address that names it again; a session's id
    /// that is not the service's kind, or an unknown address, is the
    /// start view.
    #[test]
    fn a_views_address_names_it_again() {
        for view in [
            View::Questions,
            View::Sessions,
            View::Session("s-1_a".into()),
            View::Changes,
            View::Terminals,
            View::Terminal(7),
        ] {
            assert_eq!(View::from_route(&view.route()), view);
        }
        assert_eq!(View::from_route(""), View::Questions);
        assert_eq!(View::from_route("#nowhere"), View::Questions);
        assert_eq!(View::from_route("#session/a%22b"), View::Questions);
        assert_eq!(View::from_route("#terminal/x"), View::Terminals);
    }

    /// What the badge counts: questions and proposals, never change sets.
    /// Tool lines read as the CLI's own: never a tool's internal name or
    /// its input as JSON.
    #[test]
    fn tool_lines_are_in_a_persons_words() {
        let lines: Vec<String> = [
            ("ExitPlanMode", json!({"plan": "1. Write a.rs"})),
            (
                "Write",
                json!({"file_path": "src/a.rs", "content": "fn a() {}"}),
            ),
            ("Bash", json!({"command": "cargo test\necho done"})),
            ("mcp__ide__getDiagnostics", json!({"uri": "file:///w/a.rs"})),
            ("TodoWrite", json!({"todos": []})),
        ]
        .iter()
        .map(|(tool, input)| tool_line(tool, input))
        .collect();
        assert_eq!(
            lines,
            [
                "▸ Plan ready",
                "▸ Write src/a.rs",
                "▸ Bash cargo test",
                "▸ getDiagnostics (ide)",
                "▸ Update the to-do list",
            ]
        );
    }

    #[test]
    fn change_sets_wait_for_nobody() {
        let mut m = Model::default();
        m.load_change_sets(vec![pending_set(1, Vec::new())]);
        assert_eq!((m.waiting(), m.pending_changes()), (0, 1));
        m.apply(Notification::Approval {
            session: "s1".into(),
            approval: Box::new(approval("s1/1")),
            status: ApprovalStatus::Pending,
        });
        assert_eq!((m.waiting(), m.pending_changes()), (1, 1));
    }

    #[test]
    fn a_terminal_update_replaces_its_rows() {
        use moonkale_client::moonkale_protocol::screen::{Cursor, Size, Span};
        let row = |index: u16, text: &str| Row {
            index,
            spans: vec![Span {
                text: text.into(),
                fg: None,
                bg: None,
                bold: false,
                dim: false,
                italic: false,
                underline: false,
                inverse: false,
            }],
        };
        let mut screen = Snapshot {
            rows: 3,
            cols: 10,
            lines: vec![row(0, "a")],
            cursor: Cursor {
                row: 0,
                col: 1,
                visible: true,
            },
            alternate_screen: false,
            title: String::new(),
        };
        apply_update(
            &mut screen,
            Update {
                lines: vec![row(2, "c"), row(7, "beyond")],
                ..Default::default()
            },
        );
        assert_eq!(screen.lines.len(), 3);
        assert_eq!(screen.lines[2], row(2, "c"));
        apply_update(
            &mut screen,
            Update {
                size: Some(Size { rows: 1, cols: 10 }),
                ..Default::default()
            },
        );
        assert_eq!(screen.lines, [row(0, "a")]);
    }
}
