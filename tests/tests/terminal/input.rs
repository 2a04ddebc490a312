//! Input: pastes (bracketed or not), keys, and file links opened in the
//! editor.

use std::path::Path;

use moonkale_tests::poll_until;
use serde_json::json;

use crate::{
    STEP, children, count_lines, has_line, keys, open, open_sh, pid_of, rows, run, screen, start,
    text, wait_line, wait_prompt, wait_screen,
};

/// (9) Bracketed paste: wrapped in 200~/201~ when the program asked for
/// it; an end marker inside the pasted text is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bracketed_paste_is_wrapped_and_end_marker_stripped() {
    let mut w = start().await;
    let (id, _) = open(
        &mut w.ed,
        json!({"argv": ["/bin/sh", "-c",
              r"stty -icanon -echo; printf '\033[?2004hREADY\n'; exec cat -v"],
               "cols": 120}),
    )
    .await;
    wait_line(&mut w.ed, id, "READY").await;
    w.ed.call(
        "moonkale/terminal/input",
        json!({"terminal": id, "paste": "abc\u{1b}[201~def|"}),
    )
    .await;
    let s = wait_screen(&mut w.ed, id, "the pasted text", |s| {
        rows(s).iter().any(|r| r.contains('|'))
    })
    .await;
    let row = rows(&s).into_iter().find(|r| r.contains('|')).unwrap();
    assert_eq!(
        row, "^[[200~abcdef|^[[201~",
        "the paste as the program got it (cat -v)"
    );
}

/// (9b) Without bracketed-paste mode a paste is sent as is (no markers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paste_without_bracketed_mode_is_plain() {
    let mut w = start().await;
    let (id, _) = open(
        &mut w.ed,
        json!({"argv": ["/bin/sh", "-c", r"stty -icanon -echo; echo READY; exec cat -v"]}),
    )
    .await;
    wait_line(&mut w.ed, id, "READY").await;
    w.ed.call(
        "moonkale/terminal/input",
        json!({"terminal": id, "paste": "plain|"}),
    )
    .await;
    let s = wait_screen(&mut w.ed, id, "the pasted text", |s| {
        rows(s).iter().any(|r| r.contains('|'))
    })
    .await;
    assert!(has_line(&s, "plain|"), "{}", text(&s));
}

/// (10) Keys: Ctrl+c interrupts `sleep 100`; Up recalls history in bash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_interrupt_and_history() {
    let mut w = start().await;
    let (id, info) = open_sh(&mut w.ed, 24, 80).await;
    let sh_pid = pid_of(&info);
    wait_prompt(&mut w.ed, id).await;
    run(&mut w.ed, id, "sleep 100").await;
    assert!(
        poll_until(STEP, async || (children(sh_pid)
            .iter()
            .any(|(_, c)| c == "sleep"))
        .then_some(()))
        .await
        .is_some(),
        "sleep did not start"
    );
    keys(&mut w.ed, id, &["Ctrl+c"]).await;
    assert!(
        poll_until(STEP, async || (!children(sh_pid)
            .iter()
            .any(|(_, c)| c == "sleep"))
        .then_some(()))
        .await
        .is_some(),
        "Ctrl+c did not interrupt sleep"
    );
    run(&mut w.ed, id, "echo after-$((1+2))").await;
    wait_line(&mut w.ed, id, "after-3").await;

    // Unknown key names are refused.
    let resp =
        w.ed.request(
            "moonkale/terminal/input",
            json!({"terminal": id, "keys": ["Ctrl+NoSuchKey"]}),
        )
        .await;
    assert!(resp.get("error").is_some(), "{resp}");

    if !Path::new("/bin/bash").is_file() {
        eprintln!("no /bin/bash: history part skipped");
        return;
    }
    let (b, _) = open(
        &mut w.ed,
        json!({"argv": ["/bin/bash", "--norc", "--noprofile"], "env": {"PS1": "bash$ "}}),
    )
    .await;
    wait_prompt(&mut w.ed, b).await;
    run(&mut w.ed, b, "echo hist-$((4+5))").await;
    wait_line(&mut w.ed, b, "hist-9").await;
    keys(&mut w.ed, b, &["Up"]).await;
    wait_screen(&mut w.ed, b, "the recalled command", |s| {
        rows(s)
            .iter()
            .filter(|r| r.ends_with("echo hist-$((4+5))"))
            .count()
            == 2
    })
    .await;
    keys(&mut w.ed, b, &["Enter"]).await;
    wait_screen(&mut w.ed, b, "a second hist-9", |s| {
        count_lines(s, "hist-9") == 2
    })
    .await;
    // Ctrl+Left/Home/End etc. are accepted (bash reads them).
    keys(
        &mut w.ed,
        b,
        &["Home", "End", "Ctrl+Left", "Alt+b", "F5", "Escape"],
    )
    .await;
}

/// (11) `path:line:col` of a workspace file is a link; a path outside the
/// workspace is not; opening a link shows the file in the editor (0-based).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_links_and_open_link() {
    let mut w = start().await;
    let file = w.sb.workspace.join("src/a.rs");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "fn a() {}\nfn b() {}\nfn c() {}\n").unwrap();
    let (id, _) = open_sh(&mut w.ed, 24, 80).await;
    wait_prompt(&mut w.ed, id).await;
    run(
        &mut w.ed,
        id,
        "echo src/a.rs:3:2; echo /etc/passwd:1; echo src/none.rs:1",
    )
    .await;
    wait_line(&mut w.ed, id, "src/none.rs:1").await;
    let links =
        w.ed.call("moonkale/terminal/links", json!({"terminal": id}))
            .await;
    let all = links["links"].as_array().expect("links");
    let out_row = rows(&screen(&mut w.ed, id).await)
        .iter()
        .position(|r| r == "src/a.rs:3:2")
        .expect("the output row");
    let link = all
        .iter()
        .find(|l| l["row"] == out_row)
        .unwrap_or_else(|| panic!("no link on row {out_row}: {links}"));
    assert_eq!(link["path"], json!(file), "{link}");
    assert_eq!(
        (&link["line"], &link["column"]),
        (&json!(3), &json!(2)),
        "{link}"
    );
    assert_eq!(
        (&link["start"], &link["end"]),
        (&json!(0), &json!(12)),
        "{link}"
    );
    for l in all {
        assert_eq!(l["path"], json!(file), "only a.rs is a link: {links}");
    }

    w.ed.call(
        "moonkale/terminal/openLink",
        json!({"path": link["path"], "line": 3, "column": 2}),
    )
    .await;
    let show = w.ed.server_request("window/showDocument", STEP).await;
    let p = &show["params"];
    assert_eq!(
        p["uri"],
        json!(format!("file://{}", file.display())),
        "{show}"
    );
    assert_eq!(
        p["selection"]["start"],
        json!({"line": 2, "character": 1}),
        "{show}"
    );
    w.ed.respond(&show["id"], json!({"success": true})).await;
    let resp =
        w.ed.request(
            "moonkale/terminal/openLink",
            json!({"path": "/etc/passwd", "line": 1}),
        )
        .await;
    assert!(resp.get("error").is_some(), "{resp}");
}
