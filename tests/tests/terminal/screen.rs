//! The screen: output, styles, sizes, the alternate screen and the
//! scrollback.

use moonkale_tests::short;
use serde_json::{Value, json};

use crate::{
    STEP, count_lines, has_line, is_update, keys, open_sh, row_text, rows, run, saw_update, screen,
    start, text, wait_line, wait_prompt, wait_screen,
};

/// (1) Text and Enter reach `/bin/sh`; its output shows in an update and on
/// the screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_round_trip() {
    let mut w = start().await;
    let (id, info) = open_sh(&mut w.ed, 24, 80).await;
    assert_eq!(info["argv"], json!(["/bin/sh"]), "{info}");
    assert_eq!((&info["rows"], &info["cols"]), (&json!(24), &json!(80)));
    assert_eq!(info["cwd"], json!(w.sb.workspace), "{info}");
    assert!(info["pid"].as_u64().is_some_and(|p| p > 1), "{info}");
    wait_prompt(&mut w.ed, id).await;
    run(&mut w.ed, id, "echo hi-$((1+1))").await;
    // The opener is subscribed: an update carries the output row.
    let update =
        w.ed.take("an update with hi-2", STEP, |m| {
            is_update(m, id)
                && m["params"]["lines"]
                    .as_array()
                    .is_some_and(|ls| ls.iter().any(|r| row_text(r).trim_end() == "hi-2"))
        })
        .await;
    assert!(update["params"]["lines"][0]["index"].is_u64(), "{update}");
    let s = wait_line(&mut w.ed, id, "hi-2").await;
    assert_eq!((&s["rows"], &s["cols"]), (&json!(24), &json!(80)), "{s}");
    assert_eq!(s["exited"], json!(false));
    assert_eq!(s["alternateScreen"], json!(false));
}

/// (2) SGR colours and attributes land as styled spans: bold + palette 1,
/// 256-colour 123, truecolour #010203.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colours_and_attributes_are_spans() {
    let mut w = start().await;
    let (id, _) = open_sh(&mut w.ed, 24, 100).await;
    wait_prompt(&mut w.ed, id).await;
    run(
        &mut w.ed,
        id,
        r"printf '\033[1;31mred\033[0m \033[38;5;123mx\033[0m \033[38;2;1;2;3my\033[0m \033[4;7mul\033[0m\n'",
    )
    .await;
    let s = wait_line(&mut w.ed, id, "red x y ul").await;
    let row = s["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| row_text(r).trim_end() == "red x y ul")
        .unwrap()
        .clone();
    let span = |t: &str| {
        row["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|sp| sp["text"] == t)
            .cloned()
            .unwrap_or_else(|| panic!("no span {t:?} in {row}"))
    };
    let red = span("red");
    assert_eq!(
        (&red["bold"], &red["fg"]),
        (&json!(true), &json!("1")),
        "{row}"
    );
    assert_eq!(span("x")["fg"], json!("123"), "{row}");
    assert!(span("x").get("bold").is_none(), "{row}");
    assert_eq!(span("y")["fg"], json!("#010203"), "{row}");
    let ul = span("ul");
    assert_eq!(
        (&ul["underline"], &ul["inverse"]),
        (&json!(true), &json!(true)),
        "{row}"
    );
    // Default-style blanks between them carry no style fields.
    let blank = span(" ");
    assert!(
        blank.get("fg").is_none() && blank.get("bold").is_none(),
        "{row}"
    );
}

/// (3) + hostile 51: resizing reaches the program (`stty size`); garbage
/// sizes are refused with -32602 and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_and_hostile_51_garbage_sizes() {
    let mut w = start().await;
    let (id, _) = open_sh(&mut w.ed, 24, 80).await;
    wait_prompt(&mut w.ed, id).await;
    run(&mut w.ed, id, "stty size").await;
    wait_line(&mut w.ed, id, "24 80").await;

    let r =
        w.ed.call(
            "moonkale/terminal/resize",
            json!({"terminal": id, "rows": 40, "cols": 132}),
        )
        .await;
    assert_eq!(r, json!({"rows": 40, "cols": 132}));
    // After a resize every row is sent, with the size.
    w.ed.take("an update with the new size", STEP, |m| {
        is_update(m, id) && m["params"]["size"]["rows"] == 40 && m["params"]["size"]["cols"] == 132
    })
    .await;
    run(&mut w.ed, id, "stty size").await;
    wait_line(&mut w.ed, id, "40 132").await;

    for bad in [
        json!({"terminal": id, "rows": 0, "cols": 0}),
        json!({"terminal": id, "rows": 65535, "cols": 65535}),
        json!({"terminal": id, "rows": -1, "cols": 80}),
        json!({"terminal": id, "rows": 24, "cols": -80}),
        json!({"terminal": id, "rows": 1001, "cols": 80}),
        json!({"terminal": id, "rows": 24, "cols": 4001}),
        json!({"terminal": id, "rows": 0, "cols": 80}),
        json!({"terminal": id, "rows": "24", "cols": 80}),
        json!({"terminal": id, "rows": 24.5, "cols": 80}),
        json!({"terminal": id, "rows": 99999999999u64, "cols": 80}),
        json!({"terminal": id}),
        json!(null),
    ] {
        let resp = w.ed.request("moonkale/terminal/resize", bad.clone()).await;
        assert_eq!(
            resp["error"]["code"],
            json!(-32602),
            "resize {bad} was not refused as invalid params: {resp}"
        );
    }
    let s = screen(&mut w.ed, id).await;
    assert_eq!((&s["rows"], &s["cols"]), (&json!(40), &json!(132)), "{s}");
    let list = w.ed.call("moonkale/terminal/list", Value::Null).await;
    let info = &list["terminals"][0];
    assert_eq!(
        (&info["rows"], &info["cols"]),
        (&json!(40), &json!(132)),
        "{list}"
    );
    // The program saw no size change either.
    run(&mut w.ed, id, "stty size").await;
    wait_screen(&mut w.ed, id, "a second `40 132`", |s| {
        count_lines(s, "40 132") == 2
    })
    .await;
}

/// (4) A program on the alternate screen: reported, then left, and the
/// primary screen's content is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternate_screen_comes_and_goes() {
    let mut w = start().await;
    let (id, _) = open_sh(&mut w.ed, 24, 80).await;
    wait_prompt(&mut w.ed, id).await;
    run(&mut w.ed, id, "echo primary-$((3*3))").await;
    wait_line(&mut w.ed, id, "primary-9").await;
    run(
        &mut w.ed,
        id,
        r"printf '\033[?1049h\033[H\033[2JALT-%s\n' SCREEN; read x; printf '\033[?1049l'",
    )
    .await;
    let s = wait_screen(&mut w.ed, id, "the alternate screen", |s| {
        s["alternateScreen"] == true && has_line(s, "ALT-SCREEN")
    })
    .await;
    assert!(!has_line(&s, "primary-9"), "{}", text(&s));
    let entered = saw_update(&mut w.ed, id, 0, "alternateScreen: true", |p| {
        p["alternateScreen"] == true
    })
    .await;
    keys(&mut w.ed, id, &["Enter"]).await;
    let s = wait_screen(&mut w.ed, id, "the primary screen back", |s| {
        s["alternateScreen"] == false && has_line(s, "primary-9")
    })
    .await;
    assert!(!has_line(&s, "ALT-SCREEN"), "{}", text(&s));
    saw_update(&mut w.ed, id, entered + 1, "alternateScreen: false", |p| {
        p["alternateScreen"] == false
    })
    .await;
}

/// (12) 200 lines through a 10-row terminal: the earlier ones are in the
/// scrollback, oldest first, `offset` pages further up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrollback_keeps_earlier_lines() {
    let mut w = start().await;
    let (id, _) = open_sh(&mut w.ed, 10, 80).await;
    wait_prompt(&mut w.ed, id).await;
    run(
        &mut w.ed,
        id,
        "i=1; while [ $i -le 200 ]; do echo row-$i; i=$((i+1)); done",
    )
    .await;
    let s = wait_line(&mut w.ed, id, "row-200").await;
    assert!(!has_line(&s, "row-100"));
    let page =
        w.ed.call(
            "moonkale/terminal/scrollback",
            json!({"terminal": id, "count": 1000}),
        )
        .await;
    let back = rows(&page);
    let pos = |l: &str| back.iter().position(|r| r == l);
    let (p1, p100, p190) = (pos("row-1"), pos("row-100"), pos("row-190"));
    assert!(
        p1.is_some() && p100.is_some() && p190.is_some(),
        "scrollback lacks rows: {back:?}"
    );
    assert!(p1 < p100 && p100 < p190, "not oldest first: {back:?}");
    // The last one is just above the screen: index 1.
    let lines = page["lines"].as_array().unwrap();
    assert_eq!(
        lines.last().unwrap()["index"],
        json!(1),
        "{}",
        short(&page.to_string(), 500)
    );
    // A page ending 50 lines above the top, 5 long.
    let page2 =
        w.ed.call(
            "moonkale/terminal/scrollback",
            json!({"terminal": id, "offset": 50, "count": 5}),
        )
        .await;
    let back2 = rows(&page2);
    assert_eq!(back2.len(), 5, "{page2}");
    let last = page2["lines"][4]["index"].as_u64().unwrap();
    assert_eq!(last, 51, "{page2}");
    // Row `index` n of the first page is row `index` n of this one.
    let by_index = |p: &Value, i: u64| {
        p["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["index"] == i)
            .map(row_text)
    };
    assert_eq!(by_index(&page2, 51), by_index(&page, 51));
    assert_eq!(by_index(&page2, 55), by_index(&page, 55));
}
