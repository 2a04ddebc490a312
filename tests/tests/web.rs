//! The Moonkale shell in a browser (`moonkale-service web`): real Chromium
//! (playwright-core, as the VS Code tests drive it) at a phone's 390×844
//! and at 1280×800, the real CLI against the fake API, an LSP editor
//! attached beside the page. Screenshots of what a person sees go to
//! `$TMPDIR/moonkale-web-shots/`.

use moonkale_tests::agent::{PERMISSION_DIALOG, bash_writes, plan_then_write_script, write_script};
use moonkale_tests::claude_cli::{edit_result, edit_script};
use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::remote::{TOKEN, make_certificate};
use moonkale_tests::review;
use moonkale_tests::web::{
    DESKTOP, PHONE, Web, browser, no_page_problems, no_sideways_scrolling, read, screenshot_at,
    wait_route,
};
use moonkale_tests::world::World;
use moonkale_tests::{STEP, TIMEOUT};
use serde_json::{Value, json};

/// A session an LSP editor started asks to Write; the question shows on a
/// phone, is allowed there, the editor's own question is withdrawn, the
/// file is written, and the transcript shows the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_asked_in_an_editors_session_is_allowed_from_a_phone() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("from-phone.txt");
    let more = w.path("more-from-phone.txt");
    w.fake.set_script(
        write_script("write it", &path, "FROM THE PHONE\n", "WROTE_IT").on_prompt(
            "write more",
            Reply::tool_use(
                "Write",
                json!({"file_path": more.display().to_string(), "content": "MORE\n"}),
            ),
        ),
    );
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, PHONE).await;
    b.wait_for("text=Nothing waits for you.").await;
    b.screenshot("phone-questions-empty").await;

    let session =
        w.ed.start_session(json!({"prompt": "write it", "permissionMode": "default"}))
            .await;
    let ask = w.ed.server_request("window/showMessageRequest", STEP).await;
    b.wait_for("article.card.question").await;
    let card = b
        .run(json!({"op": "text", "selector": "article.card.question"}))
        .await;
    let card = card.to_string();
    assert!(card.contains("+ FROM THE PHONE"), "the diff: {card}");
    b.wait_for("text=(new file)").await;
    no_sideways_scrolling(&mut b, "the question").await;
    let title = b.run(json!({"op": "title"})).await;
    assert!(
        title.as_str().is_some_and(|t| t.starts_with("(1) ")),
        "the title counts the question: {title}"
    );
    b.screenshot("phone-question").await;

    b.click("button", "Allow").await;
    w.ed.take("the editor's question withdrawn", STEP, |m| {
        m["method"] == "$/cancelRequest" && m["params"]["id"] == ask["id"]
    })
    .await;
    b.wait_gone("article.card.question").await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path).as_deref(), Some("FROM THE PHONE\n"));

    b.click("button", "Sessions").await;
    b.click("button", "write it (idle)").await;
    b.texts_until(".lines", "the reply", |t| t.concat().contains("WROTE_IT"))
        .await;
    let lines = b.run(json!({"op": "text", "selector": ".lines"})).await;
    assert!(
        lines.to_string().contains("▸ Write from-phone.txt"),
        "the tool call as a line, its path from the workspace: {lines}"
    );
    assert!(
        lines.to_string().contains("+ FROM THE PHONE"),
        "the edit as its diff: {lines}"
    );
    no_sideways_scrolling(&mut b, "the transcript").await;
    b.screenshot("phone-transcript").await;

    // The session goes on from the phone, its edits accepted from now on.
    b.run(json!({"op": "select", "name": "Permission mode", "value": "acceptEdits"}))
        .await;
    b.click("textbox", "Prompt").await;
    b.type_text("write more").await;
    b.click("button", "Send").await;
    b.texts_until(".lines", "the second turn", |t| {
        t.concat().contains("▸ Write more-from-phone.txt")
    })
    .await;
    let left = b
        .run(json!({"op": "value", "selector": ".prompt-box textarea"}))
        .await;
    assert_eq!(left, json!(""), "the prompt box is emptied once sent");
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(
        read(&more).as_deref(),
        Some("MORE\n"),
        "written without a question"
    );
    screenshot_at(&mut b, DESKTOP, "desktop-transcript").await;

    // Back to the page later: its files are asked again, not sent again,
    // and the shell shows as before, at the same transcript.
    let requests = b.reload(".transcript .lines").await;
    b.texts_until(".lines", "the transcript after a reload", |t| {
        t.concat().contains("▸ Write more-from-phone.txt")
    })
    .await;
    for file in ["/app.js", "/app.css", "/liveview.js"] {
        assert!(
            requests
                .iter()
                .any(|r| r.path == file && r.offered.is_some() && r.body_bytes == 0),
            "{file} is asked with its tag and not sent again: {requests:?}"
        );
    }
    let page = requests.iter().find(|r| r.path == "/");
    assert!(page.is_some_and(|p| p.body_bytes > 0), "{requests:?}");
    no_page_problems(&mut b, "the questions, the transcript and a reload").await;
}

/// At desktop size the card shows the Write against the file on disk,
/// and a Deny from the page refuses it: the file stays as it was, and the
/// session goes on (the model is told).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_denied_in_the_page_is_not_written() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("denied.txt");
    let before: String = (1..=12).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&path, &before).unwrap();
    let after = before.replace("line 6\n", "NO\n");
    // The CLI writes over a file only once it read it.
    let file = path.display().to_string();
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "write it",
                Reply::tool_use("Read", json!({"file_path": file})),
            )
            .after_tool(
                "Read",
                Reply::tool_use("Write", json!({"file_path": file, "content": after})),
            )
            .after_tool("Write", Reply::text("WROTE_IT")),
    );
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, DESKTOP).await;
    let session =
        w.ed.start_session(json!({"prompt": "write it", "permissionMode": "default"}))
            .await;
    // The one line the Write changes, in context, not the whole file.
    b.wait_for("text=- line 6").await;
    let card = b
        .run(json!({"op": "text", "selector": "article.card.question"}))
        .await
        .to_string();
    assert!(card.contains("+ NO") && card.contains("  line 3"), "{card}");
    assert!(
        card.contains("2 unchanged lines") && !card.contains("line 1\\n"),
        "{card}"
    );
    b.screenshot("desktop-question").await;
    b.click("button", "Deny").await;
    b.wait_gone("article.card.question").await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path), Some(before), "a denied Write wrote the file");
    b.click("button", "Sessions").await;
    b.screenshot("desktop-sessions").await;
    screenshot_at(&mut b, PHONE, "phone-sessions").await;
    no_page_problems(&mut b, "a denied Write").await;
}

/// Nothing without the secret, under another host name, or from another
/// site's page; a model reply full of markup and escapes shows as text
/// and runs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_refuses_strangers_and_shows_hostile_text_inert() {
    let hostile = "<script>document.title='pwned'</script>\
        <img src=x onerror=\"document.title='pwned'\">\
        \u{202e}txt.exe\u{202c} \u{1b}]52;c;cHduZWQ=\u{7} END_OF_REPLY";
    let w = World::agent(Script::new().on_prompt("say it", Reply::text(hostile))).await;
    let web = Web::start(&w).await;
    let host = format!("Host: {}\r\n", web.addr);
    let secret = web.url.split("token=").nth(1).expect("a secret");

    let (status, answer) = web.get("/", &host).await;
    assert_eq!(status, 401, "{answer}");
    assert!(!answer.contains(&w.sb.workspace.display().to_string()));
    assert_eq!(web.get("/?token=wrong", &host).await.0, 401);
    let rebinding = web
        .get(&format!("/?token={secret}"), "Host: evil.example\r\n")
        .await;
    assert_eq!(rebinding.0, 403, "{}", rebinding.1);
    let cookie = web.login().await;
    let (status, index) = web.get("/", &format!("{host}Cookie: {cookie}\r\n")).await;
    assert_eq!(status, 200);
    assert!(index.contains("Content-Security-Policy: default-src 'none'; script-src 'self'"));
    let upgrade = |origin: &str| {
        format!(
            "{host}Cookie: {cookie}\r\nOrigin: {origin}\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        )
    };
    assert_eq!(web.get("/ws", &upgrade("http://evil.example")).await.0, 403);
    let ours = format!("http://{}", web.addr);
    assert_eq!(web.get("/ws", &upgrade(&ours)).await.0, 101);

    let mut b = browser(&w, &web, DESKTOP).await;
    let mut ed = w
        .client("editor-b", moonkale_tests::lsp::plain_caps())
        .await;
    let session = ed.start_session(json!({"prompt": "say it"})).await;
    let seq = ed.last_prompt_seq(&session).await;
    ed.turn_idle(&session, seq).await;
    b.click("button", "Sessions").await;
    b.click("button", "say it (idle)").await;
    let shown = b
        .texts_until(".lines", "the hostile reply", |t| {
            t.concat().contains("END_OF_REPLY")
        })
        .await
        .concat();
    assert!(
        shown.contains("<script>document.title='pwned'</script>"),
        "{shown}"
    );
    assert!(shown.contains("<img src=x onerror="), "{shown}");
    // Bidi controls and escapes show as what they are, reordering nothing.
    assert!(shown.contains("⟨U+202E⟩txt.exe⟨U+202C⟩"), "{shown}");
    assert!(shown.contains("␛]52;c;cHduZWQ=␇"), "{shown}");
    let title = b.run(json!({"op": "title"})).await;
    assert_ne!(title, json!("pwned"));
    let imgs = b.run(json!({"op": "text", "selector": "img"})).await;
    assert_eq!(imgs, json!([]), "markup became elements");
    b.screenshot("desktop-hostile-reply").await;
    no_page_problems(&mut b, "a hostile reply").await;
    let _: Value = title;
}

/// A question asked while the person is away: the hidden page raises a
/// notification, and once it waited `--notify-after`, the user's
/// `--notify-command` runs with its summary in the environment, never in
/// the command (a file name that is a shell command stays a name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_left_waiting_reaches_the_person_away() {
    let mut w = World::agent(Script::new()).await;
    let path = w.path("a$(touch PWNED).txt");
    w.fake
        .set_script(write_script("write it", &path, "AWAY\n", "WROTE_IT"));
    let heard = w.sb.root.join("heard.txt");
    let command = format!("printf '%s' \"$MOONKALE_QUESTION\" > '{}'", heard.display());
    let ws = w.sb.workspace.display().to_string();
    let web = Web::start_with(
        &w,
        &[
            "--workspace",
            &ws,
            "--notify-command",
            &command,
            "--notify-after",
            "1",
        ],
    )
    .await;
    let mut b = browser(&w, &web, PHONE).await;
    b.run(json!({"op": "pretendHidden"})).await;
    let session =
        w.ed.start_session(json!({"prompt": "write it", "permissionMode": "default"}))
            .await;
    b.wait_for("article.card.question").await;
    let raised = b.run(json!({"op": "notifications"})).await;
    assert_eq!(raised[0]["title"], "Claude asks for you", "{raised}");
    let deadline = tokio::time::Instant::now() + STEP;
    let summary = loop {
        if let Some(text) = read(&heard).filter(|t| !t.is_empty()) {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the notify command did not run"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(summary, "Claude asks: Write a$(touch PWNED).txt");
    b.click("button", "Allow").await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path).as_deref(), Some("AWAY\n"));
    for dir in [&w.sb.root, &w.sb.workspace] {
        assert!(!dir.join("PWNED").exists(), "the summary ran as a command");
    }
    no_page_problems(&mut b, "a question left waiting").await;
}

/// A page that floods the front door with messages and never reads what
/// it is sent holds up nobody: another page, opened after it, answers a
/// question at once and the file is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_page_that_never_reads_holds_up_nobody() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let mut w = World::agent(Script::new()).await;
    let path = w.path("still-works.txt");
    w.fake
        .set_script(write_script("write it", &path, "FINE\n", "WROTE_IT"));
    let web = Web::start(&w).await;
    let mut flood = web.page_socket().await;
    // Each ping asks for a pong the flooder never reads.
    for _ in 0..5_000 {
        flood
            .feed(Message::text("__ping__"))
            .await
            .expect("the front door takes the flood's frames");
    }
    flood.flush().await.expect("flushed");
    let mut b = browser(&w, &web, PHONE).await;
    let session =
        w.ed.start_session(json!({"prompt": "write it", "permissionMode": "default"}))
            .await;
    b.wait_for("article.card.question").await;
    b.click("button", "Allow").await;
    b.wait_gone("article.card.question").await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path).as_deref(), Some("FINE\n"));
    drop(flood);
    no_page_problems(&mut b, "beside a flooding page").await;
}

/// In the page: a plan approved with one of its choices, the Write that
/// follows allowed there and written; then Claude's question answered with
/// one of its options, which reaches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_and_a_question_are_answered_in_the_page() {
    let questions = json!([{
        "question": "Which database should the tests use?",
        "header": "Database",
        "options": [{"label": "SQLite", "description": "in memory"},
                    {"label": "Postgres", "description": "a server"}],
        "multiSelect": false,
    }]);
    let mut w = World::agent(Script::new()).await;
    let path = w.path("plan.txt");
    w.fake.set_script(
        plan_then_write_script("make a plan", &path)
            .on_prompt(
                "ask me",
                Reply::tool_use("AskUserQuestion", json!({"questions": questions})),
            )
            .after_tool("AskUserQuestion", Reply::text("NOTED")),
    );
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, PHONE).await;
    let session =
        w.ed.start_session(json!({"prompt": "make a plan", "permissionMode": "plan"}))
            .await;
    b.wait_for("text=1. Write plan.txt saying DONE").await;
    no_sideways_scrolling(&mut b, "the plan").await;
    b.screenshot("phone-plan").await;
    b.click("button", "Approve the plan; ask before each edit")
        .await;
    b.wait_for("text=+ DONE").await;
    b.click("button", "Allow").await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path).as_deref(), Some("DONE\n"));

    let asked = w.ed.start_session(json!({"prompt": "ask me"})).await;
    b.wait_for("text=Which database should the tests use?")
        .await;
    b.screenshot("phone-ask-user-question").await;
    // The session waiting shows the same card where its turn is read, and
    // it is answered there.
    b.click("button", "Sessions").await;
    b.click("button", "ask me (waiting for you)").await;
    b.wait_for(".transcript article.card.question >> text=Which database should the tests use?")
        .await;
    no_sideways_scrolling(&mut b, "a question in its transcript").await;
    b.screenshot("phone-transcript-question").await;
    screenshot_at(&mut b, DESKTOP, "desktop-transcript-question").await;
    b.click("button", "Postgres").await;
    let (_, result) = w.fake.wait_tool_result("AskUserQuestion", STEP).await;
    assert!(
        !result.is_error && result.text.contains("Postgres"),
        "{}",
        result.text
    );
    let seq = w.ed.last_prompt_seq(&asked).await;
    w.ed.turn_idle(&asked, seq).await;
    no_page_problems(&mut b, "a plan and a question").await;
}

/// The real CLI, started beside an editor and linked to the service,
/// proposes an Edit (`openDiff`): the page shows the proposal with its
/// diff, **Accept** there writes it, and the CLI tells the model so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_of_the_cli_is_accepted_in_the_page() {
    let mut w = World::start(
        &[("hello.txt", "hello world\nsecond line\n")],
        Script::new(),
    )
    .await;
    let path = w.path("hello.txt");
    w.fake.set_script(edit_script(
        "edit hello",
        &path,
        "hello world",
        "hello EDITED",
        "EDIT_DONE",
    ));
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, PHONE).await;
    let uri = w.open("hello.txt").await;
    let mut cli = w.claude(&w.sb.workspace, |c| c).await;
    w.show_in_cli(&mut cli, &uri, (0, 0), (0, 0), "⧉ In hello.txt")
        .await;
    cli.submit("edit hello", STEP).await;
    w.ed.server_request("window/showDocument", TIMEOUT).await;
    b.wait_for("article.card.proposal").await;
    b.wait_for("text=+ hello EDITED").await;
    // The header follows who came (`moonkale/status/changed`).
    b.wait_for("text=Claude Code clients: 1").await;
    // It holds the CLI up as a question does: counted with them.
    b.wait_for("button:text-is('Questions (1)')").await;
    let card = b
        .run(json!({"op": "text", "selector": "article.card.proposal"}))
        .await
        .to_string();
    assert!(
        card.contains("hello.txt") && card.contains("- hello world"),
        "{card}"
    );
    no_sideways_scrolling(&mut b, "the proposal").await;
    b.screenshot("phone-proposal").await;
    b.click("button", "Accept").await;
    b.wait_gone("article.card.proposal").await;
    let result = edit_result(&w.fake).await;
    assert!(
        result.text.contains("has been updated successfully"),
        "{}",
        result.text
    );
    cli.wait_for_text("EDIT_DONE", STEP).await;
    assert_eq!(read(&path).as_deref(), Some("hello EDITED\nsecond line\n"));
    no_page_problems(&mut b, "a proposal").await;
}

/// Claude asks two questions at once, one of several choices: both are
/// answered in one card and reach the model; then a question answered in
/// the person's own words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_choices_and_own_words_answer_claudes_questions() {
    let two = json!([
        {"question": "Which checks should run?", "header": "Checks",
         "options": [{"label": "Lint", "description": ""}, {"label": "Format", "description": ""},
                     {"label": "Test", "description": ""}],
         "multiSelect": true},
        {"question": "Deploy afterwards?", "header": "Deploy",
         "options": [{"label": "Yes", "description": ""}, {"label": "No", "description": ""}],
         "multiSelect": false},
    ]);
    let one = json!([{"question": "Which database?", "header": "Database",
        "options": [{"label": "SQLite", "description": ""}, {"label": "Postgres", "description": ""}],
        "multiSelect": false}]);
    let mut w = World::agent(
        Script::new()
            .on_prompt(
                "ask two",
                Reply::tool_use("AskUserQuestion", json!({"questions": two})),
            )
            .on_prompt(
                "ask one",
                Reply::tool_use("AskUserQuestion", json!({"questions": one})),
            )
            .after_tool("AskUserQuestion", Reply::text("NOTED")),
    )
    .await;
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, PHONE).await;
    let first = w.ed.start_session(json!({"prompt": "ask two"})).await;
    b.wait_for("text=Which checks should run?").await;
    for label in ["Lint", "Test", "Format", "No"] {
        b.click("button", label).await;
    }
    // A second press takes a choice back.
    b.click("button", "Format").await;
    no_sideways_scrolling(&mut b, "two questions").await;
    b.screenshot("phone-two-questions").await;
    b.click("button", "Answer").await;
    let answered = |needle: &'static str| {
        move |log: &[moonkale_tests::fakeapi::Recorded]| {
            log.iter()
                .flat_map(|r| r.tool_results())
                .find(|t| t.text.contains(needle))
        }
    };
    let result = w.fake.wait_for("the choices", STEP, answered("Lint")).await;
    assert!(!result.is_error, "{}", result.text);
    assert!(
        result.text.contains("Test")
            && result.text.contains("No")
            && !result.text.contains("Format"),
        "{}",
        result.text
    );
    let seq = w.ed.last_prompt_seq(&first).await;
    w.ed.turn_idle(&first, seq).await;

    let second = w.ed.start_session(json!({"prompt": "ask one"})).await;
    b.wait_for("text=Which database?").await;
    b.click("textbox", "Your own answer").await;
    b.type_text("DuckDB, in memory").await;
    b.click("button", "Answer").await;
    let result = w.fake.wait_for("own words", STEP, answered("DuckDB")).await;
    assert!(!result.is_error, "{}", result.text);
    let seq = w.ed.last_prompt_seq(&second).await;
    w.ed.turn_idle(&second, seq).await;
    no_page_problems(&mut b, "questions of several choices").await;
}

/// Claude's change set from the real CLI in `acceptEdits`: one hunk undone
/// from the page restores exactly those lines; the other stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hunk_undone_from_the_page_restores_exactly_its_lines() {
    let mut w = review::world(review::Source::Hosted).await;
    let root = w.sb.workspace.clone();
    let session =
        w.ed.start_session(json!({"permissionMode": "acceptEdits"}))
            .await;
    let seq = w.ed.send_prompt(&session, review::PROMPT).await;
    w.ed.turn_idle(&session, seq).await;
    review::assert_applied(&root);
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, PHONE).await;
    // A change set waits for nobody: counted on its tab, not by the badge
    // or the title.
    b.wait_for("button:text-is('Changes (1)')").await;
    b.wait_for("text=Nothing waits for you.").await;
    let badge = b.run(json!({"op": "text", "selector": ".badge"})).await;
    assert_eq!(badge, json!([]), "the badge counts a change set");
    let title = b.run(json!({"op": "title"})).await;
    assert!(
        title.as_str().is_some_and(|t| !t.starts_with('(')),
        "the title counts a change set: {title}"
    );
    b.screenshot("phone-changes-waiting").await;
    screenshot_at(&mut b, DESKTOP, "desktop-changes-waiting").await;
    screenshot_at(&mut b, PHONE, "phone-changes-waiting-again").await;
    b.click("button", "Changes (1)").await;
    b.click("button", "Show hunks").await;
    b.wait_for("text=+ ONE").await;
    // Files named from the workspace, hunks by their lines.
    b.wait_for("h3:text-is('review.txt')").await;
    b.wait_for("text=line 1").await;
    b.screenshot("phone-changes").await;
    // The first "Undo hunk" is review.txt's first: ONE back to one.
    b.click("button", "Undo hunk").await;
    // The page shows the hunk undone once the service answered the undo.
    b.wait_for("text=undone").await;
    let file = root.join(review::FILE);
    assert_eq!(
        read(&file).as_deref(),
        Some(review::AFTER.replace("ONE", "one").as_str())
    );
    b.screenshot("phone-changes-undone").await;
    screenshot_at(&mut b, DESKTOP, "desktop-changes").await;
    no_page_problems(&mut b, "a change set").await;
}

/// A terminal opened from the page: `echo` typed there and its output
/// seen; it takes the page's size; Start Claude Code here shows the
/// CLI's prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_in_the_page_runs_what_is_typed_and_starts_claude() {
    let w = World::builder()
        .claude_in_terminals()
        .script(Script::new())
        .start()
        .await;
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, DESKTOP).await;
    b.click("button", "Terminals").await;
    b.click("button", "New terminal").await;
    b.wait_for(".terminal .row").await;
    // The new terminal has the keys, in its input named for them: typed
    // into at once, with no click.
    b.wait_for("input.keys:focus").await;
    let focused = b.run(json!({"op": "focused"})).await;
    assert_eq!(focused["label"], "Terminal input", "{focused}");
    b.type_text("echo web-ok-$((40+2))").await;
    b.press(&["Enter"]).await;
    b.texts_until(".terminal", "the echo", |t| {
        t.concat().contains("web-ok-42")
    })
    .await;
    b.screenshot("desktop-terminal").await;
    // Tab reaches the terminal instead of leaving the input (seen by
    // `cat -A` as `^I`, whatever the shell and its completion), and
    // Ctrl+C ends the program. What is typed waits until the shell ran the
    // line (its `echo` shows): keys typed while the shell still reads
    // its line editor's input may go to the shell instead of `cat`.
    b.type_text("echo cat-reads; cat -A").await;
    b.press(&["Enter"]).await;
    b.texts_until(".terminal", "the shell running cat", |t| {
        t.concat().contains("\ncat-reads\n")
    })
    .await;
    b.type_text("tab").await;
    b.press(&["Tab"]).await;
    b.type_text("in").await;
    b.press(&["Enter"]).await;
    b.texts_until(".terminal", "the tab as cat -A shows it", |t| {
        t.concat().contains("tab^Iin$")
    })
    .await;
    b.press(&["Control+c"]).await;
    // The screen's colours reach the page, as Claude Code's diff draws
    // them: true colour and the 256-colour palette, behind and in front.
    b.type_text(
        r"printf '\e[48;2;34;92;43mADDED\e[0m \e[48;5;52mREMOVED\e[0m \e[38;5;214mORANGE\e[0m\n'",
    )
    .await;
    b.press(&["Enter"]).await;
    for (text, key, css) in [
        ("ADDED", "background", "rgb(34, 92, 43)"),
        ("REMOVED", "background", "rgb(95, 0, 0)"),
        ("ORANGE", "color", "rgb(255, 175, 0)"),
    ] {
        let colours = b
            .run(json!({"op": "colours", "selector": ".terminal .s", "text": text}))
            .await;
        assert_eq!(colours[key], css, "{text}: {colours}");
    }
    b.screenshot("desktop-terminal-colours").await;
    // What scrolled off the screen is there on asking.
    b.type_text("seq 1001 1300").await;
    b.press(&["Enter"]).await;
    b.texts_until(".terminal", "the last number", |t| {
        t.concat().contains("1300")
    })
    .await;
    b.click("button", "Earlier lines").await;
    b.texts_until(".terminal.history", "the lines above the screen", |t| {
        t.concat().contains("\n1200\n")
    })
    .await;
    // A page of them at a time: more on asking again.
    b.click("button", "Earlier lines").await;
    b.texts_until(".terminal.history", "more lines above the screen", |t| {
        let text = t.concat();
        text.contains("\n1001\n") && text.contains("web-ok-42")
    })
    .await;
    // Still showing the newest of them, next to the screen: the lines
    // came in on top.
    let from_end = b
        .run(json!({"op": "scrollFromEnd", "selector": ".terminal.history"}))
        .await;
    assert!(
        from_end.as_f64().is_some_and(|px| px < 2.0),
        "the earlier lines kept their place: {from_end} px from their end"
    );
    b.screenshot("desktop-terminal-history").await;
    let mut ed = w
        .client("editor-b", moonkale_tests::lsp::plain_caps())
        .await;
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let list = ed.call("moonkale/terminal/list", json!({})).await;
        let cols = list["terminals"][0]["cols"].as_u64().unwrap_or(0);
        if cols > 80 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the terminal did not take the page's size: {list}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    b.click("button", "Terminals").await;
    b.click("button", "Start Claude Code here").await;
    b.wait_for("input.keys:focus").await;
    b.texts_until(".terminal", "the CLI's prompt", |t| {
        t.concat().contains("? for shortcuts")
    })
    .await;
    b.screenshot("desktop-terminal-claude").await;
    screenshot_at(&mut b, PHONE, "phone-terminal-claude").await;
    // The key bar is one row on a phone.
    let keys = b
        .run(json!({"op": "boxes", "selector": ".keybar button"}))
        .await;
    let tops: Vec<f64> = keys
        .as_array()
        .expect("the keys")
        .iter()
        .map(|k| k["y"].as_f64().expect("a top"))
        .collect();
    assert!(
        tops.len() == 6 && tops.iter().all(|y| (y - tops[0]).abs() < 1.0),
        "the key bar wraps: {keys}"
    );
    // Close ends the terminal in the service, and the page shows the list.
    b.click("button", "Close").await;
    b.wait_for("section.terminals").await;
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let list = ed.call("moonkale/terminal/list", json!({})).await;
        if list["terminals"].as_array().is_some_and(|t| t.len() == 1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed terminal is still in the service: {list}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    screenshot_at(&mut b, PHONE, "phone-terminals").await;
    screenshot_at(&mut b, DESKTOP, "desktop-terminals").await;
    no_page_problems(&mut b, "terminals").await;
}

/// The page's tabs and a transcript are entries of the browser's history:
/// Back returns to the list and then to the tab before, a reload keeps
/// the place, and the transcript's own back control is Back. Its model
/// menu names each model once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_returns_to_the_list_and_a_reload_keeps_the_place() {
    let mut w = World::agent(Script::new().on_prompt("say hi", Reply::text("HI_THERE"))).await;
    let session = w.ed.start_session(json!({"prompt": "say hi"})).await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, PHONE).await;
    b.wait_for("text=Nothing waits for you.").await;
    wait_route(&mut b, "#questions").await;
    let transcript = format!("#session/{session}");
    let open_transcript = async |b: &mut moonkale_tests::vscode::Browser| {
        b.click("button", "Sessions").await;
        wait_route(b, "#sessions").await;
        b.click("button", "say hi (idle)").await;
        b.texts_until(".lines", "the reply", |t| t.concat().contains("HI_THERE"))
            .await;
        wait_route(b, &transcript).await;
    };
    open_transcript(&mut b).await;
    let models = b.run(json!({"op": "options", "name": "Model"})).await;
    let option = |label: &str, value: &str, selected: bool| json!({"label": label, "value": value, "disabled": false, "selected": selected});
    assert_eq!(
        models,
        json!([
            option("Default model", "default", true),
            option("Opus", "opus", false),
            option("Sonnet", "sonnet", false),
            option("Haiku", "haiku", false),
        ]),
        "the model menu"
    );
    b.screenshot("phone-transcript-back").await;
    screenshot_at(&mut b, DESKTOP, "desktop-transcript-back").await;
    screenshot_at(&mut b, PHONE, "phone-transcript-back-again").await;

    b.reload(".lines").await;
    b.texts_until(".lines", "the reply after a reload", |t| {
        t.concat().contains("HI_THERE")
    })
    .await;
    wait_route(&mut b, &transcript).await;
    b.run(json!({"op": "back"})).await;
    b.wait_for("section.sessions").await;
    wait_route(&mut b, "#sessions").await;
    b.run(json!({"op": "back"})).await;
    b.wait_for("text=Nothing waits for you.").await;
    wait_route(&mut b, "#questions").await;

    // The back control goes back as Back does: one more Back is the tab
    // before the list, not the transcript again.
    open_transcript(&mut b).await;
    b.click("button", "Back to Sessions").await;
    b.wait_for("section.sessions").await;
    wait_route(&mut b, "#sessions").await;
    b.run(json!({"op": "back"})).await;
    b.wait_for("text=Nothing waits for you.").await;
    wait_route(&mut b, "#questions").await;
    no_page_problems(&mut b, "Back and a reload").await;
}

/// Once `web` stopped, the page says so and how to get a new URL, instead
/// of reconnecting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_web_says_how_to_get_a_new_url() {
    let w = World::agent(Script::new()).await;
    let mut web = Web::start(&w).await;
    let mut b = browser(&w, &web, PHONE).await;
    b.wait_for("text=Nothing waits for you.").await;
    no_page_problems(&mut b, "before web stopped").await;
    web.stop().await;
    b.wait_for("text=The page's server stopped").await;
    let said = b
        .run(json!({"op": "text", "selector": "#offline"}))
        .await
        .to_string();
    assert!(
        said.contains("run moonkale-service web again") && !said.contains("reconnecting"),
        "{said}"
    );
    b.screenshot("phone-web-stopped").await;
    screenshot_at(&mut b, DESKTOP, "desktop-web-stopped").await;
}

/// The phone case: the service runs elsewhere behind `serve --listen` with
/// TLS and a token; `web --connect wss://…` serves the page; a Write an
/// editor's session asks is allowed from the phone and written there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_reaches_a_remote_service_over_tls() {
    let certs = moonkale_tests::Sandbox::new();
    let (ca, cert, key) = make_certificate(&certs.root).await;
    let mut w = World::builder()
        .agent()
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--tls-cert")
        .arg(cert.display().to_string())
        .arg("--tls-key")
        .arg(key.display().to_string())
        // The sandbox lives under /tmp.
        .env("MOONKALE_ROOT", "/tmp")
        .env("MOONKALE_TOKEN", TOKEN)
        .start()
        .await;
    let path = w.path("remote.txt");
    w.fake
        .set_script(write_script("write it", &path, "FAR AWAY\n", "WROTE_IT"));
    let remote = w.svc().info.remote.clone().expect("a remote address");
    let port = remote.rsplit(':').next().expect("a port");
    let url = format!("wss://localhost:{port}/");
    let web = Web::start_with(&w, &["--connect", &url, "--ca", ca.to_str().unwrap()]).await;
    let mut b = browser(&w, &web, PHONE).await;
    let session =
        w.ed.start_session(json!({"prompt": "write it", "permissionMode": "default"}))
            .await;
    b.wait_for("article.card.question").await;
    b.click("button", "Allow").await;
    b.wait_gone("article.card.question").await;
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    assert_eq!(read(&path).as_deref(), Some("FAR AWAY\n"));
    no_page_problems(&mut b, "a remote service").await;
}

/// The Claude Code a person runs in a terminal of the service (Start
/// Claude Code here) asks to run a command while its own dialog shows:
/// the question is a card on the phone, Allow there runs the command and
/// the dialog goes; a second question answered in the terminal leaves no
/// card behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_claudes_question_is_answered_from_a_phone() {
    let mut w = World::builder()
        .claude_in_terminals()
        .script(Script::new())
        .start()
        .await;
    let first = w.path("from-the-phone.txt");
    let second = w.path("in-the-terminal.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt("first file", bash_writes(&first, "FROM_THE_PHONE"))
            .on_prompt("second file", bash_writes(&second, "IN_THE_TERMINAL"))
            .on_prompt("third file", bash_writes(&w.path("never.txt"), "NEVER"))
            .after_tool("Bash", Reply::text("BASH_TURN_DONE")),
    );
    let (id, _) = w.ed.start_claude_here().await;
    let web = Web::start(&w).await;
    let mut b = browser(&w, &web, PHONE).await;
    b.wait_for("text=Nothing waits for you.").await;

    let prompt = async |ed: &mut moonkale_tests::lsp::Client, text: &str| {
        ed.submit_in_terminal(id, text).await;
        ed.terminal_shows(id, "its dialog", |t| t.contains(PERMISSION_DIALOG))
            .await;
    };
    prompt(&mut w.ed, "first file").await;
    b.wait_for("article.card.question").await;
    let card = b
        .run(json!({"op": "text", "selector": "article.card.question"}))
        .await
        .to_string();
    assert!(card.contains("echo FROM_THE_PHONE"), "the card: {card}");
    b.screenshot("phone-terminal-claude-question").await;
    b.click("button", "Allow").await;
    b.wait_gone("article.card.question").await;
    w.ed.terminal_shows(id, "the turn's end", |t| {
        t.contains("BASH_TURN_DONE") && !t.contains(PERMISSION_DIALOG)
    })
    .await;
    assert_eq!(read(&first).as_deref(), Some("FROM_THE_PHONE\n"));

    prompt(&mut w.ed, "second file").await;
    b.wait_for("article.card.question").await;
    w.ed.answer_dialog_in_terminal(id, "1").await; // "1. Yes"
    b.wait_gone("article.card.question").await;
    b.wait_for("text=Nothing waits for you.").await;
    b.screenshot("phone-terminal-claude-answered-there").await;
    assert_eq!(read(&second).as_deref(), Some("IN_THE_TERMINAL\n"));
    // Denied on the phone with words: the model hears them.
    prompt(&mut w.ed, "third file").await;
    b.wait_for("article.card.question").await;
    b.click("textbox", "Why not (for Claude, with Deny)").await;
    b.type_text("use pathlib instead").await;
    b.screenshot("phone-terminal-claude-deny-with-words").await;
    b.click("button", "Deny").await;
    b.wait_gone("article.card.question").await;
    let heard = moonkale_tests::poll_until(STEP, async || {
        w.fake.requests().into_iter().rev().find_map(|r| {
            r.tool_result("Bash")
                .filter(|t| t.is_error && t.text.contains("use pathlib instead"))
        })
    })
    .await;
    assert!(
        heard.is_some(),
        "the model did not hear the words:\n{}",
        w.fake.summary()
    );
    assert!(read(&w.path("never.txt")).is_none());
    no_page_problems(&mut b, "a terminal's question").await;
}
