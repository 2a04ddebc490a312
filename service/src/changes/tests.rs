//! The change-set host's specification: records and requests in, answers,
//! files on disk and hub events out, with the hub played by a channel and
//! the state directory a test's own folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use expect_test::expect;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::hub::ports::{
    AgentCommand, ChangeRecord, ChangeSource, ChangesCommand, OpenBuffer, Request, agent_channel,
    changes_channel,
};
use crate::hub::{EditorId, Event, HubHandle, Responder};
use crate::lsp::message;

const DEADLINE: Duration = Duration::from_secs(60);

/// The save [`World::with_save`]'s host runs during its next undo.
type NextSave = std::sync::Arc<std::sync::Mutex<Option<Box<dyn FnOnce(&Path) + Send>>>>;

struct World {
    commands: mpsc::Sender<ChangesCommand>,
    hub: mpsc::Receiver<Event>,
    agent: mpsc::Receiver<AgentCommand>,
    host: tokio::task::JoinHandle<()>,
    /// The workspace (canonical).
    ws: PathBuf,
    dir: tempfile::TempDir,
}

fn agent_source() -> ChangeSource {
    ChangeSource::Agent {
        session: "s1".into(),
    }
}

impl World {
    async fn new() -> World {
        World::in_dir(tempfile::tempdir().unwrap()).await
    }

    /// A host over `dir`'s workspace and state (what a restarted service
    /// finds); waits for its first report.
    async fn in_dir(dir: tempfile::TempDir) -> World {
        World::in_dir_with(dir, None).await
    }

    /// A host whose undos call `save` (when it holds one) with the file's
    /// path just before their last look at the file: a user's save landing
    /// while the undo is under way, at the worst moment.
    async fn with_save(save: NextSave) -> World {
        let hook = move |path: &Path| {
            if let Some(save) = save.lock().unwrap().take() {
                save(path);
            }
        };
        World::in_dir_with(tempfile::tempdir().unwrap(), Some(Box::new(hook))).await
    }

    async fn in_dir_with(
        dir: tempfile::TempDir,
        before_last_look: Option<super::disk::LastLookHook>,
    ) -> World {
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("w");
        let _ = std::fs::create_dir(&ws);
        let (hub, events) = HubHandle::detached(ws.clone());
        let (commands, rx) = changes_channel();
        let (agent_tx, agent) = agent_channel();
        let mut files = super::disk::WorkspaceFiles::new(&ws);
        files.before_last_look = before_last_look;
        let state = Ok(base.join("state/changes"));
        let host = super::spawn_with(hub, rx, Some(agent_tx), state, files);
        let mut world = World {
            commands,
            hub: events,
            agent,
            host,
            ws,
            dir,
        };
        world.changes_event().await;
        world
    }

    fn path(&self, name: &str) -> PathBuf {
        self.ws.join(name)
    }

    fn uri(&self, name: &str) -> String {
        format!("file://{}", self.path(name).display())
    }

    fn scrub(&self, text: &str) -> String {
        text.replace(&self.ws.display().to_string(), "<ws>")
    }

    /// Claude wrote `after` to `name` (on disk too), in `turn`.
    async fn claude_writes(&self, turn: &str, name: &str, after: Option<&str>) {
        let path = self.path(name);
        let before = std::fs::read_to_string(&path).ok();
        match after {
            Some(text) => std::fs::write(&path, text).unwrap(),
            None => std::fs::remove_file(&path).unwrap(),
        }
        self.record(ChangeRecord {
            source: agent_source(),
            turn: turn.into(),
            title: Some("fix the bug".into()),
            path,
            before,
            after: after.map(str::to_owned),
            at: super::now_ms(),
        })
        .await;
    }

    async fn record(&self, record: ChangeRecord) {
        self.commands
            .send(ChangesCommand::Record(record))
            .await
            .unwrap();
    }

    /// The next `ChangesUpdated` (other events skipped), as a line.
    async fn changes_event(&mut self) -> String {
        loop {
            let event = tokio::time::timeout(DEADLINE, self.hub.recv())
                .await
                .expect("an event in time")
                .expect("the host runs");
            if let Event::ChangesUpdated {
                sets,
                pending,
                announce,
            } = event
            {
                let files: Vec<String> = pending
                    .iter()
                    .map(|f| {
                        let hunks: Vec<String> = f
                            .hunks
                            .iter()
                            .map(|h| format!("{}@{}..{}", h.index, h.after.start, h.after.end))
                            .collect();
                        format!("{}#{} [{}]", f.uri.path(), f.set, hunks.join(" "))
                    })
                    .collect();
                let ids: Vec<u64> = sets.iter().map(|s| s.id).collect();
                return self.scrub(&format!(
                    "sets {ids:?} announce {announce:?} pending {files:?}"
                ));
            }
        }
    }

    /// Every event already sent, as lines.
    fn drain(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(event) = self.hub.try_recv() {
            out.push(match event {
                Event::FileRewritten { uri, text } => format!("rewritten {} {text:?}", uri.path()),
                Event::ChangesUpdated { sets, .. } => format!("updated {} sets", sets.len()),
                other => format!("{other:?}"),
            });
        }
        out.into_iter().map(|l| self.scrub(&l)).collect()
    }

    /// A front-door request; its answer, as a line.
    async fn ask(&mut self, method: &str, params: Value) -> String {
        let (reply, answered) = Responder::new();
        let request = Request::new(EditorId(1), method, message::params(&params), reply);
        self.commands
            .send(ChangesCommand::Request(request))
            .await
            .unwrap();
        self.answer(answered).await
    }

    async fn undo(&mut self, params: Value, buffers: Vec<OpenBuffer>, strict: bool) -> String {
        let (reply, answered) = Responder::new();
        self.commands
            .send(ChangesCommand::Undo {
                params: serde_json::from_value(params).unwrap(),
                buffers,
                strict,
                reply,
            })
            .await
            .unwrap();
        self.answer(answered).await
    }

    async fn answer(&self, answered: crate::hub::ports::Answered) -> String {
        let answer = tokio::time::timeout(DEADLINE, answered)
            .await
            .expect("an answer in time")
            .unwrap();
        self.scrub(&match answer {
            Ok(mut v) => {
                zero_times(&mut v);
                format!("Ok {v}")
            }
            Err(e) => format!("Err {} {}", e.code, e.message),
        })
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.path(name)).ok()
    }

    /// The host stopped; its folder, for a restart.
    async fn stop(self) -> tempfile::TempDir {
        self.commands.send(ChangesCommand::Shutdown).await.unwrap();
        self.host.await.unwrap();
        self.dir
    }
}

/// Times in answers are the clock's: shown as 0.
fn zero_times(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "started" || key == "updated" {
                    *value = json!(0);
                } else {
                    zero_times(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(zero_times),
        _ => {}
    }
}

fn state_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("state/changes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_turn_is_recorded_listed_shown_undone_and_kept() {
    let mut w = World::new().await;
    std::fs::write(w.path("a.txt"), "1\n2\n3\n4\n5\n").unwrap();
    w.claude_writes("t1", "a.txt", Some("1\ntwo\n3\n4\nfive\n"))
        .await;
    assert_eq!(
        w.changes_event().await,
        r#"sets [1] announce None pending ["<ws>/a.txt#1 [0@1..2 1@4..5]"]"#
    );
    w.claude_writes("t1", "new.txt", Some("hello\n")).await;
    w.changes_event().await;
    w.commands
        .send(ChangesCommand::TurnEnded {
            source: agent_source(),
            turn: "t1".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        w.changes_event().await,
        r#"sets [1] announce Some(1) pending ["<ws>/a.txt#1 [0@1..2 1@4..5]", "<ws>/new.txt#1 [0@0..1]"]"#
    );
    expect![[r#"Ok {"sets":[{"files":[{"hunks":2,"kind":"modified","pending":2,"uri":"file://<ws>/a.txt"},{"hunks":1,"kind":"created","pending":1,"uri":"file://<ws>/new.txt"}],"id":1,"open":false,"source":{"kind":"agent","session":"s1"},"started":0,"state":"pending","title":"fix the bug","updated":0}]}"#]].assert_eq(&w.ask("moonkale/changes/list", json!(null)).await);
    expect![[r#"Ok {"files":[{"after":"1\ntwo\n3\n4\nfive\n","before":"1\n2\n3\n4\n5\n","hunks":[{"added":"two\n","after":{"end":2,"start":1},"before":{"end":2,"start":1},"index":0,"removed":"2\n","state":"pending"},{"added":"five\n","after":{"end":5,"start":4},"before":{"end":5,"start":4},"index":1,"removed":"5\n","state":"pending"}],"kind":"modified","uri":"file://<ws>/a.txt"},{"after":"hello\n","before":null,"hunks":[{"added":"hello\n","after":{"end":1,"start":0},"before":{"end":0,"start":0},"index":0,"removed":"","state":"pending"}],"kind":"created","uri":"file://<ws>/new.txt"}],"set":{"files":[{"hunks":2,"kind":"modified","pending":2,"uri":"file://<ws>/a.txt"},{"hunks":1,"kind":"created","pending":1,"uri":"file://<ws>/new.txt"}],"id":1,"open":false,"source":{"kind":"agent","session":"s1"},"started":0,"state":"pending","title":"fix the bug","updated":0}}"#]].assert_eq(&w.ask("moonkale/changes/show", json!({"set": 1})).await);
    assert_eq!(state_files(w.dir.path()), ["1.json"]);

    // An editor holds a.txt with unsaved changes: refused, nothing written.
    let a = w.uri("a.txt");
    let dirty = OpenBuffer {
        uri: a.parse().unwrap(),
        text: "1\ntwo\n3\n4\nfive\nmine\n".into(),
        dirty: true,
    };
    let undo_hunk = json!({"set": 1, "uri": a, "hunk": 1, "reason": "keep five as 5"});
    expect!["Err -32602 <ws>/a.txt has unsaved changes in an editor; save or revert them, then undo again"].assert_eq(&w.undo(undo_hunk.clone(), vec![dirty.clone()], false).await);
    assert_eq!(w.read("a.txt").unwrap(), "1\ntwo\n3\n4\nfive\n");
    // Dirty but the same text as the disk: nothing to lose.
    let same = OpenBuffer {
        text: "1\ntwo\n3\n4\nfive\n".into(),
        ..dirty
    };
    expect![[r#"Ok {"refused":[],"undone":1}"#]]
        .assert_eq(&w.undo(undo_hunk, vec![same], false).await);
    assert_eq!(w.read("a.txt").unwrap(), "1\ntwo\n3\n4\n5\n");
    expect![[r#"
        rewritten <ws>/a.txt Some("1\ntwo\n3\n4\n5\n")
        updated 1 sets"#]]
    .assert_eq(&w.drain().join("\n"));
    match w.agent.try_recv() {
        Ok(AgentCommand::TellClaude { session, text }) => {
            assert_eq!(session, "s1");
            assert_eq!(
                w.scrub(&text),
                "I undid your change to <ws>/a.txt. My reason: keep five as 5"
            );
        }
        other => panic!("no note for Claude: {other:?}"),
    }

    // The user changes the line of hunk 0; undoing the whole set undoes
    // the rest (new.txt is removed) and lists the refusal.
    std::fs::write(w.path("a.txt"), "1\nTWO\n3\n4\n5\n").unwrap();
    expect![[r#"Ok {"refused":[{"hunk":0,"message":"Line 2 of <ws>/a.txt changed after Claude Code's edit; not undone","uri":"file://<ws>/a.txt"}],"undone":1}"#]].assert_eq(&w.undo(json!({"set": 1}), vec![], false).await);
    assert_eq!(w.read("new.txt"), None);
    expect![[r#"
        rewritten <ws>/new.txt None
        updated 1 sets"#]]
    .assert_eq(&w.drain().join("\n"));
    // Kept: the set is settled, its file goes, `all` still lists it.
    expect!["Ok {}"].assert_eq(&w.ask("moonkale/changes/keep", json!({"set": 1})).await);
    assert_eq!(w.changes_event().await, "sets [] announce None pending []");
    assert!(state_files(w.dir.path()).is_empty());
    expect![[r#"Ok {"sets":[{"files":[{"hunks":2,"kind":"modified","pending":0,"uri":"file://<ws>/a.txt"},{"hunks":1,"kind":"created","pending":0,"uri":"file://<ws>/new.txt"}],"id":1,"open":false,"source":{"kind":"agent","session":"s1"},"started":0,"state":"undone","title":"fix the bug","updated":0}]}"#]].assert_eq(&w.ask("moonkale/changes/list", json!({"all": true})).await);
    expect!["Err -32602 there is no change set 7"]
        .assert_eq(&w.ask("moonkale/changes/keep", json!({"set": 7})).await);
}

#[tokio::test]
async fn a_strict_undo_reports_a_refusal_as_an_error() {
    let mut w = World::new().await;
    std::fs::write(w.path("a.txt"), "1\n2\n").unwrap();
    w.claude_writes("t1", "a.txt", Some("one\n2\n")).await;
    w.changes_event().await;
    w.claude_writes("t1", "b.txt", Some("b\n")).await;
    w.changes_event().await;
    std::fs::write(w.path("a.txt"), "ONE\n2\n").unwrap();
    expect!["Err -32602 1 change was undone; Line 1 of <ws>/a.txt changed after Claude Code's edit; not undone"].assert_eq(&w.undo(json!({"set": 1}), vec![], true).await);
    assert_eq!(w.read("b.txt"), None);
    assert_eq!(w.read("a.txt").unwrap(), "ONE\n2\n");
}

#[tokio::test]
async fn edits_outside_the_workspace_or_in_git_are_dropped_and_moonkale_is_an_ordinary_folder() {
    let mut w = World::new().await;
    let outside = w.dir.path().join("outside.txt");
    std::fs::create_dir_all(w.path(".git")).unwrap();
    std::fs::create_dir_all(w.path("sub/.moonkale")).unwrap();
    std::os::unix::fs::symlink(w.dir.path(), w.path("link")).unwrap();
    let record = |path: PathBuf| ChangeRecord {
        source: agent_source(),
        turn: "t".into(),
        title: None,
        path,
        before: None,
        after: Some("x\n".into()),
        at: super::now_ms(),
    };
    for path in [
        outside,
        w.path(".git/config"),
        w.path("link/outside.txt"),
        w.path("../w/a"),
        PathBuf::from("relative.txt"),
    ] {
        w.record(record(path)).await;
    }
    w.record(record(w.path("sub/.moonkale/x"))).await;
    // Only the last one makes a set: the service keeps nothing under
    // `.moonkale` in the workspace, so an edit there is the repository's.
    assert_eq!(
        w.changes_event().await,
        r#"sets [1] announce None pending ["<ws>/sub/.moonkale/x#1 [0@0..1]"]"#
    );
}

#[tokio::test]
async fn sets_survive_a_restart_and_a_damaged_file_is_skipped() {
    let mut w = World::new().await;
    w.claude_writes("t1", "a.txt", Some("new\n")).await;
    w.changes_event().await;
    let dir = w.stop().await;
    let changes = std::fs::canonicalize(dir.path())
        .unwrap()
        .join("state/changes");
    std::fs::write(changes.join("9.json"), "{not json").unwrap();
    std::fs::write(changes.join("notes.txt"), "not a set").unwrap();
    let mut w = World::in_dir(dir).await;
    // The stored set, closed (its turn went with the service that
    // recorded it).
    expect![[r#"Ok {"sets":[{"files":[{"hunks":1,"kind":"created","pending":1,"uri":"file://<ws>/a.txt"}],"id":1,"open":false,"source":{"kind":"agent","session":"s1"},"started":0,"state":"pending","title":"fix the bug","updated":0}]}"#]].assert_eq(&w.ask("moonkale/changes/list", json!(null)).await);
    // New sets get new ids.
    w.claude_writes("t2", "b.txt", Some("b\n")).await;
    assert_eq!(
        w.changes_event().await,
        r#"sets [1, 2] announce None pending ["<ws>/a.txt#1 [0@0..1]", "<ws>/b.txt#2 [0@0..1]"]"#
    );
}

#[tokio::test(start_paused = true)]
async fn a_burst_without_turns_ends_after_two_quiet_seconds() {
    let mut w = World::new().await;
    let watcher = |w: &World, name: &str| ChangeRecord {
        source: ChangeSource::Watcher,
        turn: String::new(),
        title: None,
        path: w.path(name),
        before: Some("a\n".into()),
        after: Some("b\n".into()),
        at: super::now_ms(),
    };
    w.record(watcher(&w, "a.txt")).await;
    w.changes_event().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    w.record(watcher(&w, "b.txt")).await;
    w.changes_event().await;
    // 1.5 s after the second edit: still open.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(w.hub.try_recv().is_err());
    let ended = w.changes_event().await;
    assert!(ended.contains("announce Some(1)"), "{ended}");
    expect![[r#"Ok {"sets":[{"files":[{"hunks":1,"kind":"modified","pending":1,"uri":"file://<ws>/a.txt"},{"hunks":1,"kind":"modified","pending":1,"uri":"file://<ws>/b.txt"}],"id":1,"open":false,"source":{"kind":"watcher"},"started":0,"state":"pending","title":"","updated":0}]}"#]].assert_eq(&w.ask("moonkale/changes/list", json!(null)).await);
}

#[tokio::test]
async fn an_undo_a_crash_interrupted_is_settled_by_the_file_at_start() {
    for written in [true, false] {
        let mut w = World::new().await;
        w.claude_writes("t1", "a.txt", Some("new\n")).await;
        w.changes_event().await;
        let dir = w.stop().await;
        // What a service killed between the intent and the rename left.
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let stored = base.join("state/changes/1.json");
        let mut set: moonkale_hub::core::changes::ChangeSet =
            serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
        set.restore().unwrap();
        let mut book = moonkale_hub::core::changes::ChangeBook::from_sets(vec![set]);
        let uri = book.set(1).unwrap().files[0].uri.clone();
        let plan = book.plan_undo(1, &uri, None, Some("new\n")).unwrap();
        book.begin_undo(&plan).unwrap();
        std::fs::write(&stored, serde_json::to_vec(book.set(1).unwrap()).unwrap()).unwrap();
        std::fs::write(base.join("w/.a.txt.moonkale-undo"), "half").unwrap();
        if written {
            std::fs::remove_file(base.join("w/a.txt")).unwrap();
        }
        let mut w = World::in_dir(dir).await;
        let list = w.ask("moonkale/changes/list", json!({"all": true})).await;
        let state = if written { "undone" } else { "pending" };
        assert!(list.contains(&format!(r#""state":"{state}""#)), "{list}");
        assert_eq!(w.read(".a.txt.moonkale-undo"), None, "the leftover goes");
        assert_eq!(w.read("a.txt").is_none(), written);
    }
}

/// A folder swapped for a symlink after Claude's edit: the undo refuses
/// the file and writes nothing outside the workspace.
#[tokio::test]
async fn an_undo_never_writes_through_a_symlink() {
    let mut w = World::new().await;
    std::fs::create_dir(w.path("sub")).unwrap();
    std::fs::write(w.path("sub/a.txt"), "old\n").unwrap();
    w.claude_writes("t1", "sub/a.txt", Some("new\n")).await;
    w.changes_event().await;
    let outside = w.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("a.txt"), "new\n").unwrap();
    std::fs::rename(w.path("sub"), w.dir.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&outside, w.path("sub")).unwrap();
    let answer = w.undo(json!({"set": 1}), vec![], false).await;
    assert!(
        answer.contains(r#""undone":0"#) && answer.contains("symlink"),
        "{answer}"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("a.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
}

/// A save landing between an undo's read of the file and its write (here
/// at the worst moment: just before the undo's last look) is kept, and the
/// file is refused as a save before the undo is: for a modified file saved
/// in place, a file Claude created that the user saved anew (a new inode,
/// as editors that save by rename make), and a file Claude deleted that
/// the user made again. The sets stay as they were, with no undo under way
/// left stored and no temporary file left behind.
#[tokio::test]
async fn a_save_landing_during_an_undo_is_kept_and_the_file_refused() {
    let save = NextSave::default();
    let mut w = World::with_save(save.clone()).await;
    let saves = |text: &'static str, by_rename: bool| -> Box<dyn FnOnce(&Path) + Send> {
        Box::new(move |path: &Path| user_saves(path, text, by_rename))
    };

    std::fs::write(w.path("a.txt"), "1\n2\n3\n").unwrap();
    w.claude_writes("t1", "a.txt", Some("1\ntwo\n3\n")).await;
    w.changes_event().await;
    *save.lock().unwrap() = Some(saves("1\nTWO, mine\n3\n", false));
    expect![[r#"Ok {"refused":[{"hunk":0,"message":"<ws>/a.txt changed while it was being undone; nothing was undone","uri":"file://<ws>/a.txt"}],"undone":0}"#]].assert_eq(&w.undo(json!({"set": 1}), vec![], false).await);
    assert_eq!(w.read("a.txt").unwrap(), "1\nTWO, mine\n3\n");

    w.claude_writes("t2", "new.txt", Some("hello\n")).await;
    w.changes_event().await;
    *save.lock().unwrap() = Some(saves("hello, mine\n", true));
    expect![[r#"Ok {"refused":[{"hunk":0,"message":"<ws>/new.txt changed while it was being undone; nothing was undone","uri":"file://<ws>/new.txt"}],"undone":0}"#]].assert_eq(&w.undo(json!({"set": 2}), vec![], false).await);
    assert_eq!(w.read("new.txt").unwrap(), "hello, mine\n");

    std::fs::write(w.path("gone.txt"), "old\n").unwrap();
    w.claude_writes("t3", "gone.txt", None).await;
    w.changes_event().await;
    *save.lock().unwrap() = Some(saves("made again\n", false));
    let answer = w
        .undo(
            json!({"set": 3, "uri": w.uri("gone.txt"), "hunk": 0}),
            vec![],
            false,
        )
        .await;
    expect!["Err -32602 <ws>/gone.txt changed while it was being undone; nothing was undone"]
        .assert_eq(&answer);
    assert_eq!(w.read("gone.txt").unwrap(), "made again\n");

    // Nothing was written, so editors were told of nothing; every hunk is
    // still pending, and nothing of an undo is left stored or on disk.
    expect![[""]].assert_eq(&w.drain().join("\n"));
    let list = w.ask("moonkale/changes/list", json!(null)).await;
    assert_eq!(list.matches(r#""state":"pending""#).count(), 3, "{list}");
    for name in state_files(w.dir.path()) {
        let stored = std::fs::read_to_string(w.dir.path().join("state/changes").join(&name));
        assert!(
            !stored.unwrap().contains("\"intent\""),
            "{name} holds an intent"
        );
    }
    let mut left: Vec<String> = std::fs::read_dir(&w.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["a.txt", "gone.txt", "new.txt"]);
    // The same undo again sees the save first: the model's own refusal.
    expect![[r#"Ok {"refused":[{"hunk":0,"message":"Line 2 of <ws>/a.txt changed after Claude Code's edit; not undone","uri":"file://<ws>/a.txt"}],"undone":0}"#]].assert_eq(&w.undo(json!({"set": 1}), vec![], false).await);
}

/// A real race, many times: a thread saves a file Claude changed or
/// created (in place, or by rename) as soon as the undo has stored its
/// intent (inotify tells it), that is after the undo read the file, while
/// the undo goes on to write; the test seam only notes when the undo's
/// last look at the file began. A save done before that is kept and the
/// file refused, whatever the timing; a save landing during the last look
/// (the window that stays open, `disk::unchanged`) or after the undo may
/// come second.
#[tokio::test]
async fn a_save_racing_an_undo_is_never_lost() {
    const ROUNDS: usize = 16;
    const MINE: &str = "the user's whole new text\n";
    // Long enough that writing and syncing the undo's text takes a while.
    let numbered = |second: &str| -> String {
        (0..2_000)
            .map(|i| match i {
                1 => format!("{second}\n"),
                _ => format!("line {i} of a long file, long enough to take a while to write\n"),
            })
            .collect()
    };
    let (before, after) = (numbered("2"), numbered("Claude's line"));
    let looked = std::sync::Arc::new(std::sync::Mutex::new(None));
    let note = {
        let looked = looked.clone();
        move |_: &Path| {
            looked
                .lock()
                .unwrap()
                .get_or_insert_with(std::time::Instant::now);
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let mut w = World::in_dir_with(dir, Some(Box::new(note))).await;
    let state = std::fs::canonicalize(w.dir.path())
        .unwrap()
        .join("state/changes");
    let (mut raced, mut later) = (0, 0);
    for round in 0..ROUNDS {
        let name = format!("r{round}.txt");
        // Rounds 2 and 3 of every 4: a file Claude created, which the
        // undo removes; odd rounds: saved by rename.
        if round % 4 < 2 {
            std::fs::write(w.path(&name), &before).unwrap();
        }
        w.claude_writes(&format!("t{round}"), &name, Some(&after))
            .await;
        w.changes_event().await;
        *looked.lock().unwrap() = None;
        // Watched before the undo starts: the set's next store is its
        // intent.
        let intent = Appears::watch(&state, format!("{}.json", round + 1));
        let saver = std::thread::spawn({
            let path = w.path(&name);
            move || {
                intent.wait();
                user_saves(&path, MINE, round % 2 == 1);
                std::time::Instant::now()
            }
        });
        let answer = w.undo(json!({"set": round + 1}), vec![], false).await;
        // What the undo told the hub (before it answered): not to be taken
        // for the next round's record.
        w.drain();
        let saved = saver.join().unwrap();
        let last_look = looked
            .lock()
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: no last look; {answer}"));
        let kept = w.read(&name).as_deref() == Some(MINE);
        if saved < last_look {
            assert!(
                kept && answer.contains("changed while it was being undone"),
                "round {round}: a save done before the undo's last look was lost; the undo \
                 answered {answer}"
            );
            raced += 1;
        } else {
            assert!(
                kept || answer.contains(r#""undone":1"#),
                "round {round}: {answer}"
            );
            later += 1;
        }
    }
    eprintln!("{ROUNDS} rounds: {raced} saves before the undo's last look, {later} later");
    assert!(raced > 0, "no save landed before an undo's last look");
}

/// A name appearing in a folder (created, or renamed into place), watched
/// with inotify.
struct Appears {
    fd: std::os::fd::OwnedFd,
    name: String,
}

impl Appears {
    fn watch(dir: &Path, name: String) -> Appears {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: no preconditions; the descriptor is checked and owned.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify: {}", std::io::Error::last_os_error());
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let dir = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid descriptor and a NUL-terminated path.
        let watch = unsafe {
            libc::inotify_add_watch(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                dir.as_ptr(),
                libc::IN_CREATE | libc::IN_MOVED_TO,
            )
        };
        assert!(watch >= 0, "inotify: {}", std::io::Error::last_os_error());
        Appears { fd, name }
    }

    /// Blocks until the name appeared (at most [`DEADLINE`]).
    fn wait(&self) {
        use std::os::fd::AsRawFd;
        let deadline = std::time::Instant::now() + DEADLINE;
        let mut buf = [0u64; 512];
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut poll = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut poll, 1, left.as_millis() as i32) };
            assert!(ready > 0, "{} did not appear in time", self.name);
            // SAFETY: the buffer is valid for its length (u64s: aligned for
            // `inotify_event`).
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    size_of_val(&buf),
                )
            };
            assert!(n > 0, "inotify: {}", std::io::Error::last_os_error());
            // Each event: `wd`, `mask`, `cookie`, `len` (four 32-bit
            // fields), then `len` bytes of NUL-padded name.
            const HEADER: usize = size_of::<libc::inotify_event>();
            let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
            let mut at = 0;
            while at + HEADER <= n as usize {
                let len = &bytes[at + HEADER - 4..at + HEADER];
                let len = u32::from_ne_bytes(len.try_into().unwrap()) as usize;
                let name = &bytes[at + HEADER..at + HEADER + len];
                let name = name.split(|b| *b == 0).next().unwrap_or_default();
                if name == self.name.as_bytes() {
                    return;
                }
                at += HEADER + len;
            }
        }
    }
}

/// The user's save of `path`: in place (truncate and write, as `:w` with
/// `nobackup` does) or a new file renamed over it (as editors that save
/// atomically do).
fn user_saves(path: &Path, text: &str, by_rename: bool) {
    if by_rename {
        let temp = path.with_extension("user-save");
        std::fs::write(&temp, text).unwrap();
        std::fs::rename(&temp, path).unwrap();
    } else {
        std::fs::write(path, text).unwrap();
    }
}
