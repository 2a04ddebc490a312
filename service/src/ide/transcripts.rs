//! Claude's own transcripts, read while Claude Code is connected over the
//! IDE link: the edits a `claude` the user started themselves (or one
//! "Start Claude Code here" started) made without asking, for the
//! change-set host.
//!
//! The CLI appends one JSON line per message to
//! `<config>/projects/<slug>/<session>.jsonl`; its Edit, MultiEdit and Write
//! results carry the file before and the patch (`toolUseResult`, read by
//! [`moonkale_claude::edits`]). While at least one client is connected the
//! folders of the workspace's slug and of its subfolders' slugs are polled,
//! and only what is appended after the first client connected is read
//! (files that appear later are read whole).
//!
//! **Invariant:** a transcript is read, never written, and is not trusted:
//! lines are capped at [`MAX_LINE`], files that are symlinks or not regular
//! are skipped, each poll reads a bounded amount, and the paths records
//! name are confined by the change-set host, not here.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use moonkale_claude::edits::{TranscriptEntry, parse_transcript_line};
use moonkale_claude::sessions::project_slug;
use tokio::sync::watch;

use crate::change_sources::{ChangeSources, KnownSessions};
use crate::clock::now_ms;
use crate::hub::ports::{ChangeRecord, ChangeSource, ChangesCommand};

/// Longest transcript line read; a longer one is skipped whole.
pub const MAX_LINE: usize = 16 << 20;
/// Most bytes read from one file in one poll; the rest waits for the next.
const MAX_READ_PER_POLL: u64 = 64 << 20;
/// Most transcript files followed at once (the newest are kept).
const MAX_FILES: usize = 512;

/// The CLI's projects folder for the service's own environment:
/// `$CLAUDE_CONFIG_DIR/projects`, else `$HOME/.claude/projects`.
pub fn projects_dir_from_env() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let config = var("CLAUDE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".claude")))?;
    Some(config.join("projects"))
}

/// Follows the transcripts of one workspace from where they were.
pub struct Tailer {
    projects: PathBuf,
    slug: String,
    files: HashMap<PathBuf, Tail>,
    /// The open turn of each session.
    turns: HashMap<String, Turn>,
    sessions: KnownSessions,
    /// Names turns whose prompt came before we started reading: when we
    /// started (so a later start names other turns) and a count.
    started: u64,
    unnamed: u64,
}

struct Tail {
    offset: u64,
    /// The start of a line not yet ended by `\n`.
    partial: Vec<u8>,
    /// The current line passed [`MAX_LINE`]: skipped up to its end.
    skipping: bool,
}

struct Turn {
    source: ChangeSource,
    key: String,
    title: Option<String>,
}

impl Tailer {
    /// Starts at the current end of every transcript of `root`'s projects.
    pub fn new(projects: PathBuf, root: &Path, sessions: KnownSessions) -> Tailer {
        let mut tailer = Tailer {
            projects,
            slug: project_slug(root),
            files: HashMap::new(),
            turns: HashMap::new(),
            sessions,
            started: now_ms(),
            unnamed: 0,
        };
        for (path, len) in tailer.transcripts() {
            tailer.files.insert(
                path,
                Tail {
                    offset: len,
                    partial: Vec::new(),
                    skipping: false,
                },
            );
        }
        tailer
    }

    /// The workspace's transcript files with their lengths: regular
    /// `*.jsonl` files (not symlinks) directly in the project folders of
    /// the workspace and its subfolders.
    fn transcripts(&self) -> Vec<(PathBuf, u64)> {
        let Ok(projects) = std::fs::read_dir(&self.projects) else {
            return Vec::new();
        };
        let below = format!("{}-", self.slug);
        let mut found = Vec::new();
        for dir in projects.flatten() {
            let name = dir.file_name();
            let name = name.to_string_lossy();
            if name != self.slug && !name.starts_with(&below) {
                continue;
            }
            if !dir.file_type().is_ok_and(|t| t.is_dir()) {
                continue; // a symlink or a file
            }
            let Ok(entries) = std::fs::read_dir(dir.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_none_or(|e| e != "jsonl") {
                    continue;
                }
                match std::fs::symlink_metadata(&path) {
                    Ok(meta) if meta.file_type().is_file() => {
                        found.push((path, meta.len(), meta.modified().ok()));
                    }
                    _ => {}
                }
            }
        }
        if found.len() > MAX_FILES {
            found.sort_by_key(|f| std::cmp::Reverse(f.2));
            found.truncate(MAX_FILES);
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found.into_iter().map(|(p, len, _)| (p, len)).collect()
    }

    /// Reads what was appended since the last poll: the records and turn
    /// ends it means.
    pub fn poll(&mut self) -> Vec<ChangesCommand> {
        let mut out = Vec::new();
        for (path, len) in self.transcripts() {
            let tail = self.files.entry(path.clone()).or_insert(Tail {
                offset: 0,
                partial: Vec::new(),
                skipping: false,
            });
            if len < tail.offset {
                // Truncated or replaced: what it holds now was not appended.
                tracing::info!(path = %path.display(), "a Claude transcript shrank; following it from its end");
                *tail = Tail {
                    offset: len,
                    partial: Vec::new(),
                    skipping: false,
                };
                continue;
            }
            if len == tail.offset {
                continue;
            }
            let lines = match read_lines(&path, tail, len) {
                Ok(lines) => lines,
                Err(e) => {
                    tracing::debug!(path = %path.display(), "reading a Claude transcript: {e}");
                    continue;
                }
            };
            for line in lines {
                self.line(&line, &mut out);
            }
        }
        out
    }

    fn line(&mut self, line: &str, out: &mut Vec<ChangesCommand>) {
        match parse_transcript_line(line) {
            TranscriptEntry::Prompt {
                session,
                turn,
                text,
            } => {
                self.end_turn(&session, out);
                let Some(source) = self.sessions.source(&session) else {
                    return;
                };
                let turn = Turn {
                    source,
                    key: format!("{session}:{turn}"),
                    title: Some(moonkale_protocol::agent::title_of(&text)),
                };
                self.turns.insert(session, turn);
            }
            TranscriptEntry::Edit { session, edit } => {
                let turn = match self.turns.entry(session.clone()) {
                    Entry::Occupied(turn) => turn.into_mut(),
                    Entry::Vacant(vacant) => {
                        let Some(source) = self.sessions.source(&session) else {
                            return;
                        };
                        self.unnamed += 1;
                        vacant.insert(Turn {
                            source,
                            key: format!("{session}:seen-{}-{}", self.started, self.unnamed),
                            title: None,
                        })
                    }
                };
                out.push(ChangesCommand::Record(ChangeRecord {
                    source: turn.source.clone(),
                    turn: turn.key.clone(),
                    title: turn.title.clone(),
                    path: edit.path,
                    before: edit.before,
                    after: Some(edit.after),
                    at: now_ms(),
                }));
            }
            TranscriptEntry::BadEdit { session, why } => {
                tracing::warn!(%session, "{why}; the edit is not reviewed");
            }
            TranscriptEntry::TurnEnded { session } => self.end_turn(&session, out),
            TranscriptEntry::Other => {}
        }
    }

    fn end_turn(&mut self, session: &str, out: &mut Vec<ChangesCommand>) {
        if let Some(turn) = self.turns.remove(session) {
            out.push(ChangesCommand::TurnEnded {
                source: turn.source,
                turn: turn.key,
            });
        }
    }

    /// Every open turn ends (the last client went away).
    pub fn finish(&mut self) -> Vec<ChangesCommand> {
        let mut out = Vec::new();
        let sessions: Vec<String> = self.turns.keys().cloned().collect();
        for session in sessions {
            self.end_turn(&session, &mut out);
        }
        out
    }
}

/// The complete lines of `path` from `tail.offset` (up to `len`, at most
/// [`MAX_READ_PER_POLL`] bytes), keeping an unfinished line for the next
/// poll and dropping lines longer than [`MAX_LINE`].
fn read_lines(path: &Path, tail: &mut Tail, len: u64) -> std::io::Result<Vec<String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    file.seek(SeekFrom::Start(tail.offset))?;
    let want = (len - tail.offset).min(MAX_READ_PER_POLL);
    let mut bytes = Vec::new();
    file.take(want).read_to_end(&mut bytes)?;
    tail.offset += bytes.len() as u64;
    let mut lines = Vec::new();
    let mut rest = bytes.as_slice();
    while let Some(end) = rest.iter().position(|&b| b == b'\n') {
        let (piece, after) = rest.split_at(end);
        rest = &after[1..];
        if tail.skipping {
            tail.skipping = false;
            continue;
        }
        if tail.partial.len() + piece.len() > MAX_LINE {
            tail.partial.clear();
            tracing::warn!(path = %path.display(), "a Claude transcript line is over {MAX_LINE} bytes; skipped");
            continue;
        }
        tail.partial.extend_from_slice(piece);
        let line = std::mem::take(&mut tail.partial);
        lines.push(String::from_utf8_lossy(&line).into_owned());
    }
    if !tail.skipping {
        if tail.partial.len() + rest.len() > MAX_LINE {
            tail.partial.clear();
            tail.skipping = true;
            tracing::warn!(path = %path.display(), "a Claude transcript line is over {MAX_LINE} bytes; skipped");
        } else {
            tail.partial.extend_from_slice(rest);
        }
    }
    Ok(lines)
}

/// Follows `root`'s transcripts while `connected` (the number of Claude
/// Code clients) is above zero, every `poll`, handing what they record to
/// `changes`; bumps `noted` each time it has noted where they end (the
/// first client waits for that). Ends when the IDE server drops its sender.
pub async fn run(
    root: PathBuf,
    projects: PathBuf,
    poll: Duration,
    sources: ChangeSources,
    mut connected: watch::Receiver<usize>,
    noted: watch::Sender<u64>,
) {
    let Some(changes) = sources.changes else {
        return;
    };
    loop {
        if connected.wait_for(|n| *n > 0).await.is_err() {
            return;
        }
        let (p, r, t) = (projects.clone(), root.clone(), sources.sessions.clone());
        let Ok(mut tailer) = tokio::task::spawn_blocking(move || Tailer::new(p, &r, t)).await
        else {
            return;
        };
        noted.send_modify(|n| *n += 1);
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = false;
        while !last {
            tokio::select! {
                _ = tick.tick() => {}
                changed = connected.changed() => {
                    // The last client left (or the server stopped): read
                    // what it wrote up to now, then stop.
                    last = changed.is_err() || *connected.borrow() == 0;
                }
            }
            let Ok((back, mut commands)) = tokio::task::spawn_blocking(move || {
                let commands = tailer.poll();
                (tailer, commands)
            })
            .await
            else {
                return;
            };
            tailer = back;
            if last {
                commands.extend(tailer.finish());
            }
            for command in commands {
                if changes.send(command).await.is_err() {
                    return; // the change-set host stopped
                }
            }
        }
    }
}

/// A source's command to the change-set host on one line, for tests.
#[cfg(test)]
pub(crate) fn describe_change(command: &ChangesCommand) -> String {
    match command {
        ChangesCommand::Record(r) => format!(
            "record {:?} {} {:?} {} {:?} -> {:?}",
            r.source,
            r.turn,
            r.title,
            r.path.display(),
            r.before,
            r.after
        ),
        ChangesCommand::TurnEnded { source, turn } => format!("ended {source:?} {turn}"),
        _ => "other".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;
    use std::io::Write;

    const S: &str = "11111111-2222-4333-8444-555555555555";

    fn prompt(id: &str, text: &str) -> String {
        format!(
            r#"{{"type":"user","promptId":"{id}","uuid":"u-{id}","sessionId":"{S}","message":{{"role":"user","content":"{text}"}}}}"#
        )
    }
    fn write(path: &str, content: &str) -> String {
        format!(
            r#"{{"type":"user","sessionId":"{S}","message":{{"role":"user","content":[]}},"toolUseResult":{{"type":"create","filePath":"{path}","content":"{content}","structuredPatch":[],"originalFile":null}}}}"#
        )
    }
    fn end() -> String {
        format!(
            r#"{{"type":"assistant","sessionId":"{S}","message":{{"stop_reason":"end_turn","content":[]}}}}"#
        )
    }

    fn describe(commands: &[ChangesCommand]) -> String {
        let lines: Vec<String> = commands.iter().map(describe_change).collect();
        lines.join("\n")
    }

    fn append(path: &Path, lines: &[String]) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    }

    struct Setup {
        _dir: tempfile::TempDir,
        projects: PathBuf,
        root: PathBuf,
        own: PathBuf,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        let projects = dir.path().join("projects");
        let own = projects.join(project_slug(&root));
        std::fs::create_dir_all(&own).unwrap();
        Setup {
            projects,
            root,
            own,
            _dir: dir,
        }
    }

    #[test]
    fn only_what_is_appended_after_the_start_is_read_and_prompts_split_turns() {
        let s = setup();
        let file = s.own.join(format!("{S}.jsonl"));
        append(
            &file,
            &[prompt("old", "before we looked"), write("/ws/old", "x")],
        );
        let mut tailer = Tailer::new(s.projects.clone(), &s.root, KnownSessions::default());
        tailer.started = 0; // as if started at the epoch, for the turn names
        assert!(tailer.poll().is_empty());
        append(&file, &[write("/ws/a", "a")]);
        // A line written in two pieces is read once it ends.
        let second = prompt("p2", "second   prompt");
        let (head, rest) = second.split_at(20);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(head.as_bytes()).unwrap();
        let first = tailer.poll();
        writeln!(f, "{rest}").unwrap();
        append(&file, &[write("/ws/b", "b"), end(), write("/ws/c", "c")]);
        let mut all = first;
        all.extend(tailer.poll());
        all.extend(tailer.finish());
        expect![[r#"
            record Ide { session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:seen-0-1 None /ws/a None -> Some("a")
            ended Ide { session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:seen-0-1
            record Ide { session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:p2 Some("second prompt") /ws/b None -> Some("b")
            ended Ide { session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:p2
            record Ide { session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:seen-0-2 None /ws/c None -> Some("c")
            ended Ide { session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:seen-0-2"#]]
        .assert_eq(&describe(&all));
    }

    #[test]
    fn new_files_subfolders_terminals_and_what_is_skipped() {
        let s = setup();
        let sessions = KnownSessions::default();
        sessions.insert_terminal(S.into(), 7);
        sessions.insert_hosted("hosted-session".into());
        let mut tailer = Tailer::new(s.projects.clone(), &s.root, sessions);
        tailer.started = 0;
        // A session started after we looked, in a subfolder of the workspace.
        let sub = s.projects.join(project_slug(&s.root.join("sub")));
        std::fs::create_dir_all(&sub).unwrap();
        append(
            &sub.join(format!("{S}.jsonl")),
            &[prompt("p", "go"), write("/ws/sub/n", "n")],
        );
        // Not ours: a hosted session's (it reports its own edits), another
        // project, a symlink, a long line, a non-jsonl file.
        append(
            &s.own.join("hosted-session.jsonl"),
            &[
                prompt("h", "hosted").replace(S, "hosted-session"),
                write("/ws/h", "h").replace(S, "hosted-session"),
            ],
        );
        let other = s.projects.join("-elsewhere");
        std::fs::create_dir_all(&other).unwrap();
        append(&other.join("x.jsonl"), &[write("/elsewhere/x", "x")]);
        std::os::unix::fs::symlink(other.join("x.jsonl"), s.own.join("link.jsonl")).unwrap();
        append(&s.own.join("notes.txt"), &[write("/ws/t", "t")]);
        let long = s.own.join("long.jsonl");
        let other_session = write("/ws/after-long", "y").replace(S, "another-session");
        append(&long, &["x".repeat(MAX_LINE + 1), other_session]);
        expect![[r#"
            record Ide { session: "another-session" } another-session:seen-0-1 None /ws/after-long None -> Some("y")
            record Terminal { terminal: 7, session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:p Some("go") /ws/sub/n None -> Some("n")"#]]
        .assert_eq(&describe(&tailer.poll()));
    }

    #[tokio::test(start_paused = true)]
    async fn follows_while_a_client_is_connected() {
        let s = setup();
        let file = s.own.join(format!("{S}.jsonl"));
        let (port, mut records) = crate::hub::ports::changes_channel();
        let (connected, rx) = watch::channel(0usize);
        let (noted, mut baseline) = watch::channel(0u64);
        let sources = ChangeSources {
            changes: Some(port),
            sessions: KnownSessions::default(),
        };
        let task = tokio::spawn(run(
            s.root.clone(),
            s.projects.clone(),
            Duration::from_millis(250),
            sources,
            rx,
            noted,
        ));
        // Nobody connected: nothing is read.
        append(&file, &[prompt("p0", "unseen"), write("/ws/unseen", "u")]);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(records.try_recv().is_err());
        connected.send_replace(1);
        // Where the transcripts end is noted before the client goes on.
        baseline.changed().await.unwrap();
        append(&file, &[prompt("p1", "fix"), write("/ws/a", "a")]);
        let got = tokio::time::timeout(Duration::from_secs(10), records.recv())
            .await
            .expect("a record within the deadline")
            .unwrap();
        expect![[r#"record Ide { session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:p1 Some("fix") /ws/a None -> Some("a")"#]]
            .assert_eq(&describe(&[got]));
        // The last client leaves: the open turn ends.
        connected.send_replace(0);
        let got = tokio::time::timeout(Duration::from_secs(10), records.recv())
            .await
            .expect("the turn ends")
            .unwrap();
        expect![[r#"ended Ide { session: "11111111-2222-4333-8444-555555555555" } 11111111-2222-4333-8444-555555555555:p1"#]]
            .assert_eq(&describe(&[got]));
        drop(connected);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("ends with the server")
            .unwrap();
    }
}
