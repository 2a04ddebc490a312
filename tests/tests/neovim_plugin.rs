//! The Neovim plugin in `editors/neovim/` end to end: Neovim 0.11.4 headless
//! with only the plugin on the runtimepath (`require('moonkale').setup{}` in
//! a tiny init written into the sandbox), driven with real keystrokes over
//! its `--listen` socket, against the real service, with a Claude Code
//! stand-in on the IDE WebSocket checking what arrives there.
//!
//! Neovim is started and driven with the harness's `moonkale_tests::nvim`.
//! Neovim comes from `scripts/install-test-peers.sh` (or `$MOONKALE_NVIM`).

use std::path::PathBuf;

use moonkale_tests::PlantedMoonkale;
use moonkale_tests::nvim::{
    Attach, Headless, NvimRpc, Remote, Tui, framed, start_headless, start_tui,
};
use moonkale_tests::review;
use moonkale_tests::{
    Sandbox, bin, next_selection_in, selection_with_text, service_and_claude,
    service_with_env_and_claude, tool_json, wait_until,
};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    moonkale_tests::repo_root()
}

/// The user's config: the plugin and its setup, nothing else. What Neovim
/// asks with `vim.ui.select` is recorded and left unanswered, as by a user
/// who decides with the commands instead; when a test sets
/// `PluginTest.choose`, the user picks the first item whose text holds it
/// (a code action menu).
const INIT: &str = r#"
vim.opt.rtp:prepend(vim.env.MOONKALE_PLUGIN_DIR)
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
PluginTest = { asked = {}, told = {} }
vim.ui.select = function(items, opts, on_choice)
  table.insert(PluginTest.asked, opts.prompt or '')
  local want = PluginTest.choose
  if not want then return end
  for i, item in ipairs(items) do
    local text = opts.format_item and opts.format_item(item) or tostring(item)
    if text:find(want, 1, true) then
      PluginTest.choose = nil
      return on_choice(item, i)
    end
  end
end
-- What the plugin told the user (vim.notify), as a user would read it.
local notify = vim.notify
vim.notify = function(msg, level, opts)
  table.insert(PluginTest.told, msg)
  return notify(msg, level, opts)
end
-- The current tab as the user sees it: its windows left to right.
function PluginTest.view()
  local windows = {}
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    local buf = vim.api.nvim_win_get_buf(win)
    local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    table.insert(windows, {
      name = vim.api.nvim_buf_get_name(buf),
      text = table.concat(lines, '\n') .. '\n',
      diff = vim.wo[win].diff,
      buftype = vim.bo[buf].buftype,
      modifiable = vim.bo[buf].modifiable,
      current = win == vim.api.nvim_get_current_win(),
    })
  end
  return { tabs = #vim.api.nvim_list_tabpages(), windows = windows }
end
local shim = vim.env.MOONKALE_TEST_SHIM
require('moonkale').setup({
  socket = vim.env.MOONKALE_TEST_SOCKET,
  cmd = shim and { shim } or nil,
})
"#;

/// A headless Neovim in a sandbox; killed when dropped.
struct Nvim {
    h: Headless,
}

/// `nvim --server` requests go straight to [`Remote`].
impl std::ops::Deref for Nvim {
    type Target = Remote;

    fn deref(&self) -> &Remote {
        &self.h.remote
    }
}

impl Nvim {
    /// `nvim --headless --clean -u INIT --listen SOCK FILE` in the
    /// workspace; returns once the plugin's client for FILE has initialized.
    async fn start(sandbox: &Sandbox, attach: Attach<'_>, file: &str) -> Nvim {
        let init = sandbox.root.join("plugin-init.lua");
        std::fs::write(&init, INIT).expect("write init.lua");
        let extra = vec![("MOONKALE_PLUGIN_DIR", repo().join("editors/neovim").into())];
        let nvim = Nvim {
            h: start_headless(sandbox, &init, attach, file, extra),
        };
        nvim.wait_plugin_initialized().await;
        nvim
    }

    /// The current buffer's lines joined with "\n" (plus the final newline).
    async fn text(&self) -> String {
        let v = self
            .eval(r#"join(getline(1, '$'), "\n") .. (&eol ? "\n" : '')"#)
            .await;
        v.as_str().expect("text").to_owned()
    }
}

impl Drop for Nvim {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let out = std::fs::read_to_string(&self.h.output).unwrap_or_default();
            eprintln!("----- nvim output ({})\n{out}", self.h.output.display());
        }
    }
}

/// Waits for a tab of two windows side by side (a diff view the plugin
/// opened); what `PluginTest.view()` says of it.
async fn diff_tab(nvim: &Nvim, what: &str) -> Value {
    nvim.wait_for(what, r#"luaeval('PluginTest.view()')"#, |v| {
        v["windows"].as_array().is_some_and(|w| w.len() == 2)
    })
    .await
}

/// Every window of the diff tab has `diff` set.
fn assert_all_in_diff_mode(view: &Value) {
    assert!(
        view["windows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["diff"] == true),
        "{view}"
    );
}

/// 1. A selection made with real keystrokes in Neovim reaches Claude Code as
/// `selection_changed`: charwise `v` (inclusive in Neovim, end-exclusive on
/// the wire) over multibyte text, in UTF-16 columns there although Neovim
/// and the service talk UTF-8; then linewise `V` as whole lines.
#[tokio::test]
async fn plugin_sends_the_visual_selection_to_claude_code() {
    let sb = Sandbox::new();
    std::fs::write(
        sb.workspace.join("sel.txt"),
        "alpha\nbravo\n日本😀語 tail\ncharlie\n",
    )
    .expect("write file");
    let (svc, mut c) = service_and_claude(&sb).await;
    let nvim = Nvim::start(&sb, Attach::Socket(&svc.info.socket), "sel.txt").await;
    let path = sb.workspace.join("sel.txt").display().to_string();

    nvim.send_keys("ggjvlll").await;
    let sel = selection_with_text(&mut c, "brav").await;
    assert_eq!(sel["filePath"], path.as_str());
    assert_eq!(
        sel["selection"],
        json!({"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 4}, "isEmpty": false})
    );

    // 日, 本, 😀 (4 UTF-8 bytes, 2 UTF-16 units): ends at UTF-16 column 4.
    nvim.send_keys("<Esc>j0vll").await;
    let sel = selection_with_text(&mut c, "日本😀").await;
    assert_eq!(
        sel["selection"],
        json!({"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 4}, "isEmpty": false})
    );

    // Selected backwards from the end of a line: same range.
    nvim.send_keys("<Esc>gg$vh").await;
    let sel = selection_with_text(&mut c, "ha").await;
    assert_eq!(
        sel["selection"],
        json!({"start": {"line": 0, "character": 3}, "end": {"line": 0, "character": 5}, "isEmpty": false})
    );

    nvim.send_keys("<Esc>ggjVj").await;
    let sel = selection_with_text(&mut c, "bravo\n日本😀語 tail\n").await;
    assert_eq!(
        sel["selection"],
        json!({"start": {"line": 1, "character": 0}, "end": {"line": 3, "character": 0}, "isEmpty": false})
    );

    // Back in normal mode: the cursor alone.
    nvim.send_keys("<Esc>").await;
    let sel = selection_with_text(&mut c, "").await;
    assert_eq!(sel["selection"]["isEmpty"], true);
    assert_eq!(sel["selection"]["start"]["line"], 2);
}

/// `lines` lines, `line 1` … `line N`.
fn numbered_lines(lines: usize) -> String {
    (1..=lines).map(|i| format!("line {i}\n")).collect()
}

/// 1b. The plugin sends a cursor move at once (no debounce of its own):
/// one `j` reaches Claude Code as `selection_changed` with the new line.
#[tokio::test]
async fn plugin_sends_a_single_cursor_move() {
    let sb = Sandbox::new();
    std::fs::write(sb.workspace.join("moves.txt"), numbered_lines(10)).expect("write file");
    let (svc, mut c) = service_and_claude(&sb).await;
    let nvim = Nvim::start(&sb, Attach::Socket(&svc.info.socket), "moves.txt").await;
    let path = sb.workspace.join("moves.txt");
    // Attached: the cursor where Neovim opened the file.
    let (line, _) = next_selection_in(&mut c, &path).await;
    assert_eq!(line, 0);

    let mut keys = NvimRpc::connect(&nvim.listen).await;
    keys.input("j").await;
    let (line, sel) = next_selection_in(&mut c, &path).await;
    assert_eq!((line, sel["text"].as_str()), (1, Some("")), "{sel}");
    assert_eq!(sel["selection"]["isEmpty"], true);
}

/// 1c. A held `j` (one key every 10 ms, as a keyboard repeats it) over 40
/// lines, the service at its defaults (one update per 50 ms while the
/// cursor keeps moving): the updates Claude Code gets move down and never
/// repeat or go back (each the newest position when sent), and the last one
/// is where the cursor stopped. One `k` after it arrives next: nothing was left
/// over, no second copy of the final position.
#[tokio::test]
async fn plugin_follows_a_held_key_to_the_final_line() {
    let sb = Sandbox::new();
    std::fs::write(sb.workspace.join("moves.txt"), numbered_lines(60)).expect("write file");
    let (svc, mut c) = service_with_env_and_claude(&sb, &[]).await;
    let nvim = Nvim::start(&sb, Attach::Socket(&svc.info.socket), "moves.txt").await;
    let path = sb.workspace.join("moves.txt");
    let (line, _) = next_selection_in(&mut c, &path).await;
    assert_eq!(line, 0);

    const MOVES: u64 = 40;
    let mut keys = NvimRpc::connect(&nvim.listen).await;
    let mut repeat = tokio::time::interval(std::time::Duration::from_millis(10));
    for _ in 0..MOVES {
        repeat.tick().await;
        keys.send_input("j").await;
    }
    keys.answered(MOVES as u32).await;
    let mut seen = vec![0];
    while *seen.last().unwrap() != MOVES {
        let (line, sel) = next_selection_in(&mut c, &path).await;
        assert!(
            line > *seen.last().unwrap(),
            "an update repeated or went back: {seen:?} then {sel}"
        );
        seen.push(line);
    }
    keys.input("k").await;
    let (line, sel) = next_selection_in(&mut c, &path).await;
    assert_eq!(line, MOVES - 1, "after {seen:?}: {sel}");
}

/// 1d. The whole flow with the real CLI (2.1.332, against the fake API):
/// the user holds `j` through a file, goes back up with a held `k`, stops,
/// selects lines with `V` and a held `j`, sees the CLI show the selection
/// and asks about it. The request Claude Code sends to the model carries
/// the final selection (its lines and text), not one passed on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_final_selection_reaches_the_model_after_moving_through_a_file() {
    use moonkale_tests::STEP;
    use moonkale_tests::fakeapi::{Reply, Script};
    use moonkale_tests::world::World;
    let text = numbered_lines(80);
    let mut w = World::start(
        &[("walk.txt", text.as_str()), ("other.txt", "elsewhere\n")],
        Script::new().on_prompt("what do these lines say", Reply::text("LINES_EXPLAINED")),
    )
    .await;
    let nvim = Nvim::start(&w.sb, Attach::Socket(&w.svc().info.socket), "walk.txt").await;
    let mut cli = w.claude(&w.sb.workspace, |c| c).await;
    // The CLI is connected (and so uses the IDE in its next turn) once it
    // shows a selection; the scripted editor's, in another file.
    let other = w.open("other.txt").await;
    w.show_in_cli(&mut cli, &other, (0, 0), (0, 0), "⧉ In other.txt")
        .await;

    let mut keys = NvimRpc::connect(&nvim.listen).await;
    let mut repeat = tokio::time::interval(std::time::Duration::from_millis(10));
    let mut sent = 0;
    // Down to line 61, up to line 41, then lines 41..=45 selected.
    for key in std::iter::repeat_n("j", 60)
        .chain(std::iter::repeat_n("k", 20))
        .chain(["V"])
        .chain(std::iter::repeat_n("j", 4))
    {
        repeat.tick().await;
        keys.send_input(key).await;
        sent += 1;
    }
    keys.answered(sent).await;
    cli.wait_for_text("⧉ 5 lines selected", STEP).await;

    cli.submit("what do these lines say", STEP).await;
    let req = w.fake.wait_prompt("what do these lines say", STEP).await;
    let turn = req.latest_turn_text();
    let path = w.path("walk.txt").display().to_string();
    let selected = "line 41\nline 42\nline 43\nline 44\nline 45";
    assert!(
        turn.contains(&format!("lines 41 to 45 from {path}")) && turn.contains(selected),
        "the final selection is not in the request: {turn}"
    );
    assert!(!turn.contains("line 46"), "more than the selection: {turn}");
    cli.wait_for_text("LINES_EXPLAINED", STEP).await;
}

/// 2. Claude Code proposes an edit (`openDiff`); the service shows the
/// proposal in Neovim, the user tweaks it with keystrokes and runs
/// `:MoonkaleAccept`: Claude Code gets `FILE_SAVED` with the buffer's text.
#[tokio::test]
async fn plugin_accepts_a_proposal_with_moonkale_accept() {
    accept_a_tweaked_proposal("main.txt", None).await;
}

/// A repository that ships `.moonkale` as a file (or a FIFO) once made
/// every `openDiff` fail; proposals now live outside the workspace, and
/// the user decides in Neovim as usual.
#[tokio::test]
async fn plugin_accepts_a_proposal_in_a_repository_that_plants_moonkale() {
    for kind in [PlantedMoonkale::File, PlantedMoonkale::Fifo] {
        accept_a_tweaked_proposal("main.txt", Some(kind)).await;
    }
}

/// Defect (issue 12, names): Neovim names `[id].tsx` `%5Bid%5D.tsx`, and the
/// service compared URIs byte for byte, so the tweak made in Neovim's
/// proposal buffer was not the proposal the service accepted.
#[tokio::test]
async fn plugin_accepts_a_tweaked_proposal_for_a_bracketed_name() {
    accept_a_tweaked_proposal("pages/posts/[id].tsx", None).await;
}

/// Proposes `one\nTWO\n` for `name` (in the workspace, which has `planted`
/// at `.moonkale`), tweaks the proposal in Neovim and accepts it with
/// `:MoonkaleAccept`.
async fn accept_a_tweaked_proposal(name: &str, planted: Option<PlantedMoonkale>) {
    let sb = Sandbox::new();
    let outside = tempfile::tempdir().unwrap();
    if let Some(kind) = planted {
        kind.plant(&sb.workspace, outside.path());
    }
    let target = sb.workspace.join(name);
    std::fs::create_dir_all(target.parent().unwrap()).expect("mkdir");
    std::fs::write(&target, "one\ntwo\n").expect("write file");
    std::fs::write(sb.workspace.join("main.txt"), "one\ntwo\n").expect("write file");
    let (svc, mut c) = service_and_claude(&sb).await;
    let nvim = Nvim::start(&sb, Attach::Socket(&svc.info.socket), "main.txt").await;

    let args = json!({"old_file_path": target, "new_file_path": target,
                      "new_file_contents": "one\nTWO\n", "tab_name": "tab-nvim"});
    // Not awaited: openDiff answers only when the user decides.
    c.send(json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
                  "params": {"name": "openDiff", "arguments": args}}))
        .await;

    // The service's window/showDocument opened the proposal, and the plugin
    // attached its buffer.
    nvim.wait_for(
        "Neovim to show the attached proposal",
        r#"{'name': expand('%:p'), 'lsp': luaeval('require("moonkale").status()')}"#,
        |v| {
            v["name"]
                .as_str()
                .is_some_and(|n| n.contains(moonkale_tests::PROPOSALS))
                && v["lsp"]["initialized"] == true
        },
    )
    .await;
    assert_eq!(nvim.text().await, "one\nTWO\n");
    // The diff's window bars name the ways to decide; nothing is asked.
    nvim.wait_for("the keys in the proposal's window bar", "&winbar", |v| {
        v.as_str().is_some_and(|bar| bar.contains("accept"))
    })
    .await;
    assert_eq!(
        nvim.eval("luaeval('PluginTest.asked')").await,
        json!([]),
        "Neovim asked something"
    );

    nvim.send_keys("GA!<Esc>").await;
    nvim.wait_for("the tweak", r#"join(getline(1, '$'), "\n")"#, |v| {
        v == "one\nTWO!"
    })
    .await;
    nvim.send_keys(":MoonkaleAccept<CR>").await;

    let answer = loop {
        let msg = c.recv().await;
        if msg["id"] == 50 {
            break msg;
        }
    };
    let texts: Vec<&str> = answer["result"]["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|t| t["text"].as_str().expect("text"))
        .collect();
    assert_eq!(texts, ["FILE_SAVED", "one\nTWO!\n"], "{answer}");
    // The decided proposal's buffer goes (`moonkale/proposalClosed`).
    nvim.wait_for(
        "the proposal's buffer to be wiped",
        r#"len(filter(getbufinfo(), {_, b -> b.name =~ '/moonkale/proposals/'}))"#,
        |v| v == 0,
    )
    .await;
    let errors = nvim.eval("v:errmsg").await;
    assert_eq!(errors, "", "no error in Neovim");
}

/// 2b. A proposal with two hunks opens as a diff in a tab of its own: on
/// the left the target's original text (a readonly scratch buffer), on the
/// right the proposal, both windows in diff mode. The user reverts the
/// second hunk and keeps the first with the plugin's keymaps, on the lines
/// where they are: Claude Code gets exactly the kept hunk, and the tab goes.
#[tokio::test]
async fn plugin_reviews_a_proposal_hunk_by_hunk_in_a_diff_tab() {
    let sb = Sandbox::new();
    let target = sb.workspace.join("main.txt");
    let original = "a\nb\nc\nd\ne\nf\ng\nh\n";
    std::fs::write(&target, original).expect("write file");
    let (svc, mut c) = service_and_claude(&sb).await;
    let nvim = Nvim::start(&sb, Attach::Socket(&svc.info.socket), "main.txt").await;

    let args = json!({"old_file_path": target, "new_file_path": target,
                      "new_file_contents": "a\nB\nc\nd\ne\nf\nG\nh\n", "tab_name": "tab-hunks"});
    c.send(json!({"jsonrpc": "2.0", "id": 60, "method": "tools/call",
                  "params": {"name": "openDiff", "arguments": args}}))
        .await;

    // What the user sees: a second tab, two windows side by side in diff
    // mode, the original on the left and the proposal (with the cursor) on
    // the right.
    let view = diff_tab(&nvim, "the proposal's diff tab").await;
    assert_eq!(view["tabs"], 2, "{view}");
    let (left, right) = (&view["windows"][0], &view["windows"][1]);
    assert_eq!(left["name"], "moonkale://original/main.txt", "{view}");
    assert_eq!(left["text"], original, "{view}");
    assert_eq!(
        (&left["diff"], &left["buftype"], &left["modifiable"]),
        (&json!(true), &json!("nofile"), &json!(false)),
        "{view}"
    );
    assert!(
        right["name"]
            .as_str()
            .is_some_and(|n| n.contains(moonkale_tests::PROPOSALS)),
        "{view}"
    );
    assert_eq!(right["text"], "a\nB\nc\nd\ne\nf\nG\nh\n", "{view}");
    assert_eq!(
        (&right["diff"], &right["current"]),
        (&json!(true), &json!(true)),
        "{view}"
    );

    // `]c` is Neovim's own: the first change, then the second.
    nvim.send_keys("gg]c").await;
    nvim.wait_for("]c to the first hunk", "line('.')", |v| v == 2)
        .await;
    nvim.send_keys("]c").await;
    nvim.wait_for("]c to the second hunk", "line('.')", |v| v == 7)
        .await;

    // Revert the second (the service puts `g` back into the proposal with
    // workspace/applyEdit), then keep the first: every hunk left is kept,
    // so the proposal is accepted.
    nvim.send_keys("<Bslash>mu").await;
    nvim.wait_for("the reverted hunk", "getline(7)", |v| v == "g")
        .await;
    nvim.send_keys("2G<Bslash>mk").await;
    let answer = c.response(60).await;
    assert_eq!(
        answer["result"]["content"],
        json!([{"type": "text", "text": "FILE_SAVED"},
               {"type": "text", "text": "a\nB\nc\nd\ne\nf\ng\nh\n"}]),
        "{answer}"
    );
    // `moonkale/proposalClosed` closed the tab and wiped both buffers.
    nvim.wait_for(
        "the proposal's tab to close",
        r#"[tabpagenr('$'), len(filter(getbufinfo(), {_, b -> b.name =~ 'moonkale://\|/moonkale/proposals/'}))]"#,
        |v| v == &json!([1, 0]),
    )
    .await;
    assert_eq!(nvim.eval("v:errmsg").await, "", "no error in Neovim");
}

/// 2c. `:MoonkaleReject reason` from the original's side of the diff: the
/// proposal shown there is rejected (`DIFF_REJECTED`), Claude Code is
/// pointed at the rejected lines (`at_mentioned`, where the user's next
/// prompt says why), the file is untouched and the tab closes.
#[tokio::test]
async fn plugin_rejects_a_proposal_with_a_reason() {
    let sb = Sandbox::new();
    let target = sb.workspace.join("main.txt");
    std::fs::write(&target, "one\ntwo\n").expect("write file");
    let (svc, mut c) = service_and_claude(&sb).await;
    let nvim = Nvim::start(&sb, Attach::Socket(&svc.info.socket), "main.txt").await;
    let args = json!({"old_file_path": target, "new_file_path": target,
                      "new_file_contents": "one\nTWO\n", "tab_name": "tab-reason"});
    c.send(json!({"jsonrpc": "2.0", "id": 62, "method": "tools/call",
                  "params": {"name": "openDiff", "arguments": args}}))
        .await;
    diff_tab(&nvim, "the proposal's diff tab").await;

    nvim.send_keys("<C-w>h").await;
    nvim.wait_for("the original's window", "bufname()", |v| {
        v == "moonkale://original/main.txt"
    })
    .await;
    nvim.send_keys(":MoonkaleReject two stays lowercase<CR>")
        .await;
    let answer = c.response(62).await;
    assert_eq!(
        answer["result"]["content"],
        json!([{"type": "text", "text": "DIFF_REJECTED"}, {"type": "text", "text": "tab-reason"}]),
        "{answer}"
    );
    let mention = c.notification("at_mentioned").await;
    assert_eq!(mention["params"]["filePath"], json!(target), "{mention}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "one\ntwo\n");
    nvim.wait_for("the proposal's tab to close", "tabpagenr('$')", |v| v == 1)
        .await;
    assert_eq!(nvim.eval("v:errmsg").await, "", "no error in Neovim");
}

/// 2b'. The same with the real CLI (2.1.332 in `--permission-mode
/// default`, against the fake API): the model's Edit of two separate lines
/// reaches Neovim as a diff tab through `openDiff`; the user reverts the
/// second hunk and keeps the first with the keymaps; the CLI writes exactly
/// the kept hunk and tells the model the user modified its change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_decides_a_real_claude_edit_hunk_by_hunk() {
    use moonkale_tests::STEP;
    use moonkale_tests::claude_cli::edit_script;
    use moonkale_tests::world::World;
    let mut w = World::start(
        &[("hunks.txt", "a\nb\nc\nd\ne\nf\ng\nh\n")],
        Default::default(),
    )
    .await;
    let path = w.path("hunks.txt");
    w.fake.set_script(edit_script(
        "edit the hunks",
        &path,
        "b\nc\nd\ne\nf\ng\n",
        "B\nc\nd\ne\nf\nG\n",
        "EDIT_DONE",
    ));
    let uri = w.open("hunks.txt").await;
    let nvim = Nvim::start(&w.sb, Attach::Socket(&w.svc().info.socket), "hunks.txt").await;
    let mut cli = w.claude(&w.sb.workspace, |c| c).await;
    w.show_in_cli(&mut cli, &uri, (0, 0), (0, 0), "⧉ In hunks.txt")
        .await;
    cli.submit("edit the hunks", STEP).await;

    let view = diff_tab(&nvim, "the proposal's diff tab").await;
    assert_eq!(
        view["windows"][0]["name"], "moonkale://original/hunks.txt",
        "{view}"
    );
    keep_the_first_hunk_revert_the_second(&nvim, &view, &w, &mut cli, &path).await;
}

/// The user's side of the two-hunk proposal of `hunks.txt` shown in `view`:
/// reverts the second hunk (line 7) and keeps the first (line 2) with the
/// keymaps; the CLI writes exactly the kept hunk, tells the model the user
/// modified its change, and the tab goes.
async fn keep_the_first_hunk_revert_the_second(
    nvim: &Nvim,
    view: &Value,
    w: &moonkale_tests::world::World,
    cli: &mut moonkale_tests::claude_cli::Claude,
    path: &std::path::Path,
) {
    use moonkale_tests::claude_cli::assert_modified_edit_landed;
    assert_eq!(
        view["windows"][1]["text"], "a\nB\nc\nd\ne\nf\nG\nh\n",
        "{view}"
    );
    assert_all_in_diff_mode(view);
    nvim.send_keys("7G<Bslash>mu").await;
    nvim.wait_for("the reverted hunk", "getline(7)", |v| v == "g")
        .await;
    nvim.send_keys("2G<Bslash>mk").await;
    assert_modified_edit_landed(&w.fake, cli, path, "a\nB\nc\nd\ne\nf\ng\nh\n").await;
    nvim.wait_for("the proposal's tab to close", "tabpagenr('$')", |v| v == 1)
        .await;
}

/// 2b''. The same from inside a sandbox, as a user who runs Claude Code
/// jailed (its own loopback and HOME) and Neovim outside: started with
/// `moonkale-service claude --sandbox`, the CLI is linked through the
/// workspace's link socket. Two lines selected in Neovim with `V` show in
/// the jailed CLI's prompt box and reach the model; its Edit opens as a
/// diff tab in Neovim, where the user keeps one hunk and reverts the other;
/// the CLI in the jail writes exactly the kept hunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_decides_an_edit_of_claude_in_a_sandbox() {
    use moonkale_tests::STEP;
    use moonkale_tests::claude_cli::edit_script;
    use moonkale_tests::world::World;
    let w = World::builder()
        .jailed()
        .file("hunks.txt", "a\nb\nc\nd\ne\nf\ng\nh\n")
        .start()
        .await;
    let path = w.path("hunks.txt");
    w.fake.set_script(edit_script(
        "edit the hunks",
        &path,
        "b\nc\nd\ne\nf\ng\n",
        "B\nc\nd\ne\nf\nG\n",
        "EDIT_DONE",
    ));
    let nvim = Nvim::start(&w.sb, Attach::Socket(&w.svc().info.socket), "hunks.txt").await;
    let mut cli = w.jailed_claude(&w.sb.workspace, |c| c).await;
    // Lines 2 and 3, selected with real keys. (The CLI may take the first
    // push in before its UI listens: the selection is made again.)
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        nvim.send_keys("<Esc>2GVj").await;
        if cli
            .shows("⧉ 2 lines selected", std::time::Duration::from_secs(1))
            .await
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the jailed CLI never showed Neovim's selection:\n{}",
            cli.screen()
        );
        nvim.send_keys("<Esc>G").await;
    }
    cli.submit("edit the hunks", STEP).await;
    let turn = w
        .fake
        .wait_prompt("edit the hunks", STEP)
        .await
        .latest_turn_text();
    assert!(
        turn.contains(&format!("lines 2 to 3 from {}:\nb\nc", path.display())),
        "Neovim's selection did not reach the model: {turn}"
    );

    let view = diff_tab(&nvim, "the proposal's diff tab").await;
    keep_the_first_hunk_revert_the_second(&nvim, &view, &w, &mut cli, &path).await;
}

/// Waits until the plugin told the user something containing `needle`
/// (with vim.notify); returns all it said.
async fn told(nvim: &Nvim, needle: &str) -> Value {
    nvim.wait_for(
        &format!("Neovim to say {needle:?}"),
        "luaeval('PluginTest.told')",
        |v| {
            v.as_array().is_some_and(|t| {
                t.iter()
                    .any(|m| m.as_str().is_some_and(|m| m.contains(needle)))
            })
        },
    )
    .await
}

/// 2c. Review after the fact: the real CLI, without asking (auto mode,
/// `acceptEdits`), edits two places of `review.txt` and writes `added.txt`. In
/// Neovim the user is told when the turn ends, lists the changes in the
/// quickfix list, opens `review.txt` from there as a diff against its text
/// before, undoes the last line's change with the keymap (the first stays,
/// the buffer shows the restored line), edits and saves the first line and
/// is refused its undo (their text stays), then steps to `added.txt` and
/// undoes the whole file: it is removed, and its view closes.
/// The same for each Claude the user may run: a plain `claude --ide` of
/// their own, "Start Claude Code here", the hosted agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_reviews_a_user_claudes_changes() {
    plugin_reviews_changes_of(review::Source::UserCli).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_reviews_changes_of_claude_started_here() {
    plugin_reviews_changes_of(review::Source::Terminal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_reviews_the_hosted_agents_changes() {
    plugin_reviews_changes_of(review::Source::Hosted).await;
}

async fn plugin_reviews_changes_of(source: review::Source) {
    let mut w = review::world(source).await;
    let root = w.sb.workspace.clone();
    let nvim = Nvim::start(&w.sb, Attach::Socket(&w.svc().info.socket), review::FILE).await;

    let _claude = review::turn(&mut w, source).await;
    told(&nvim, "Claude changed 2 files: review.txt, added.txt").await;
    // The buffer, clean, shows what Claude wrote.
    nvim.wait_for("Claude's text in the buffer", "getline(1)", |v| v == "ONE")
        .await;

    nvim.send_keys(":MoonkaleChanges<CR>").await;
    let qf = nvim
        .wait_for(
            "the quickfix list",
            r#"map(getqflist(), {_, e -> [fnamemodify(bufname(e.bufnr), ':t'), e.lnum, e.text]})"#,
            |v| v.as_array().is_some_and(|l| !l.is_empty()),
        )
        .await;
    assert_eq!(
        qf,
        json!([
            ["review.txt", 1, "modified -1 +1: ONE"],
            ["review.txt", 10, "modified -1 +1: TEN"],
            ["added.txt", 1, "created -0 +1: written by Claude"]
        ])
    );
    assert_eq!(
        nvim.eval("&buftype").await,
        "quickfix",
        "the list has the focus"
    );

    // The second entry: review.txt's diff, in a tab of its own.
    nvim.send_keys("2G:MoonkaleChangeDiff<CR>").await;
    let view = diff_tab(&nvim, "the change's diff tab").await;
    assert_eq!(
        view["windows"][0]["name"], "moonkale://before/review.txt",
        "{view}"
    );
    assert_eq!(view["windows"][0]["text"], review::BEFORE, "{view}");
    assert_eq!(view["windows"][1]["text"], review::AFTER, "{view}");
    assert_all_in_diff_mode(&view);

    // Undo the last line's change (the cursor on it): the file and the
    // buffer get `ten` back, `ONE` stays.
    nvim.send_keys("10G<Bslash>mu").await;
    nvim.wait_for(
        "the restored line",
        "[getline(10), getline(1), &modified]",
        |v| v == &json!(["ten", "ONE", 0]),
    )
    .await;
    let file = root.join(review::FILE);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        review::AFTER.replace("TEN", "ten")
    );

    // The user rewrites Claude's first line and saves; its undo is refused
    // and their text stays.
    nvim.send_keys("1GccOne<Esc>:w<CR>").await;
    nvim.wait_for("the saved edit", "&modified", |v| v == 0)
        .await;
    nvim.send_keys("1G<Bslash>mu").await;
    told(&nvim, "changed after Claude Code's edit").await;
    assert_eq!(nvim.eval("getline(1)").await, "One");
    assert!(std::fs::read_to_string(&file).unwrap().starts_with("One\n"));

    // The next file, added.txt, undone as a whole: Claude created it, so it
    // is removed, and its view goes.
    nvim.send_keys(":MoonkaleChangeNext<CR>").await;
    nvim.wait_for("added.txt's diff", "expand('%:t')", |v| v == "added.txt")
        .await;
    nvim.send_keys("<Bslash>mU").await;
    nvim.wait_for(
        "added.txt's view to close",
        r#"len(filter(getbufinfo(), {_, b -> b.name =~ 'added.txt'}))"#,
        |v| v == 0,
    )
    .await;
    assert!(!root.join(review::NEW_FILE).exists());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        review::AFTER.replace("ONE", "One").replace("TEN", "ten")
    );
}

/// 3. `:'<,'>MoonkaleSendToClaude` from a linewise visual selection, and
/// `:MoonkaleSendToClaude` on the current line, through the shim: Claude
/// Code gets `at_mentioned` with 0-based inclusive lines.
#[tokio::test]
async fn plugin_sends_lines_to_claude_code_through_the_shim() {
    let sb = Sandbox::new();
    std::fs::write(sb.workspace.join("m.txt"), "a\nb\nc\nd\ne\n").expect("write file");
    let (_svc, mut c) = service_and_claude(&sb).await;
    let nvim = Nvim::start(&sb, Attach::Shim, "m.txt").await;
    let path = sb.workspace.join("m.txt");

    // `:` in visual mode types the `'<,'>` range itself.
    nvim.send_keys("ggjVjj:MoonkaleSendToClaude<CR>").await;
    let n = c.notification("at_mentioned").await;
    assert_eq!(
        n["params"],
        json!({"filePath": path, "lineStart": 1, "lineEnd": 3})
    );

    nvim.send_keys("<Esc>G:MoonkaleSendToClaude<CR>").await;
    let n = c.notification("at_mentioned").await;
    assert_eq!(
        n["params"],
        json!({"filePath": path, "lineStart": 4, "lineEnd": 4})
    );
    assert_eq!(nvim.eval("v:errmsg").await, "");
}

/// 3b. `:MoonkaleSendToClaude` with no Claude Code connected says so, and
/// that the mention waits; the next Claude Code to connect gets it.
#[tokio::test]
async fn plugin_says_a_mention_waits_for_claude_code() {
    let sb = Sandbox::new();
    std::fs::write(sb.workspace.join("q.txt"), "a\nb\nc\n").expect("write file");
    let svc = sb.start_service(&[]).await;
    let nvim = Nvim::start(&sb, Attach::Socket(&svc.info.socket), "q.txt").await;

    nvim.send_keys("gg:MoonkaleSendToClaude<CR>").await;
    let said = told(&nvim, "no Claude Code is connected").await;
    let said = said.to_string();
    assert!(
        said.contains("the mention waits for the next one that connects"),
        "{said}"
    );

    let (port, lock) = moonkale_tests::ide_lock(&sb, &svc);
    let mut c =
        moonkale_tests::IdeClient::connect(port, lock["authToken"].as_str().expect("token")).await;
    c.initialize("2025-11-25").await;
    let n = c.notification("at_mentioned").await;
    assert_eq!(
        n["params"],
        json!({"filePath": sb.workspace.join("q.txt"), "lineStart": 0, "lineEnd": 0})
    );
    // Connected, a mention is sent, and nothing more is said.
    nvim.send_keys(":MoonkaleSendToClaude<CR>").await;
    c.notification("at_mentioned").await;
    let said = nvim.eval("luaeval('PluginTest.told')").await;
    let waits = said
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.as_str().is_some_and(|m| m.contains("no Claude Code")))
        .count();
    assert_eq!(waits, 1, "{said}");
}

/// Every file and folder `editors/neovim/README.md` names (links and
/// backquoted paths) exists, and it points at no snippet elsewhere that is
/// gone: what it tells a user to find is there.
#[test]
fn plugin_readme_names_only_what_exists() {
    let plugin = repo().join("editors/neovim");
    let readme = std::fs::read_to_string(plugin.join("README.md")).expect("README");
    let mut named = Vec::new();
    for link in readme.split("](").skip(1) {
        let target = &link[..link.find(')').expect("a link's end")];
        if !target.contains("://") {
            named.push(target.split('#').next().unwrap().to_owned());
        }
    }
    // Prose only: the code blocks are examples (`/path/to/…`).
    let prose: String = readme.split("```").step_by(2).collect();
    for (i, quoted) in prose.split('`').enumerate() {
        // Odd pieces are inside backquotes. A file or folder has a slash
        // and ends like one (`moonkale/selectionChanged` is a method);
        // placeholders and variables are not paths.
        let file_or_folder = quoted.ends_with('/')
            || [".md", ".rs", ".sh", ".lua"]
                .iter()
                .any(|e| quoted.ends_with(e));
        let path_like = quoted.contains('/')
            && file_or_folder
            && !quoted.contains(['<', '$', ' ', '*'])
            && !quoted.contains("://");
        if i % 2 == 1 && path_like {
            named.push(quoted.to_owned());
        }
    }
    assert!(
        named.iter().any(|n| n == "tests/tests/neovim_plugin.rs"),
        "{named:?}"
    );
    for name in &named {
        // Relative to the README, or to the repository (as its prose does).
        let found = plugin.join(name).exists() || repo().join(name).exists();
        assert!(
            found,
            "editors/neovim/README.md names {name}, which does not exist"
        );
    }
    let main = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    if readme.contains("main README") {
        let snippet = "vim.lsp.start(";
        assert!(
            !readme.contains(snippet) || main.contains(snippet),
            "editors/neovim/README.md points at a {snippet} snippet in README.md, which has none"
        );
    }
}

/// 4. `:checkhealth moonkale` runs clean: it names the shim it found and the
/// attached client.
#[tokio::test]
async fn plugin_checkhealth() {
    let sb = Sandbox::new();
    std::fs::write(sb.workspace.join("h.txt"), "x\n").expect("write file");
    let _svc = sb.start_service(&[]).await;
    let nvim = Nvim::start(&sb, Attach::Shim, "h.txt").await;

    nvim.send_keys(":checkhealth moonkale<CR>").await;
    let text = nvim
        .wait_for(
            "the health report",
            r#"&filetype ==# 'checkhealth' ? join(getline(1, '$'), "\n") : ''"#,
            |v| v.as_str().is_some_and(|t| t.contains("moonkale: client")),
        )
        .await;
    let text = text.as_str().expect("text");
    let shim = bin("moonkale-shim").display().to_string();
    assert!(
        text.contains(&format!("shim: {shim} found at {shim}")),
        "{text}"
    );
    assert!(text.contains("Neovim 0.11.4"), "{text}");
    assert!(
        text.contains("initialized, 1 buffer attached, utf-8"),
        "{text}"
    );
    assert!(
        text.contains("proposals as diffs: the service answers moonkale/proposals"),
        "{text}"
    );
    assert!(!text.contains("ERROR"), "{text}");
}

/// 5. Diagnostics of another source in Neovim (a namespace named `ruff`,
/// set as a linter plugin would) are forwarded as
/// `moonkale/publishDiagnostics`: the status counts them, a second editor
/// pulls them in its own encoding (UTF-16 columns from Neovim's bytes), and
/// clearing them in Neovim removes them from the service.
#[tokio::test]
async fn plugin_forwards_other_diagnostics() {
    let sb = Sandbox::new();
    std::fs::write(sb.workspace.join("d.py"), "x = 1\n日本😀語 = 2\n").expect("write file");
    let uri = sb.uri("d.py");
    let svc = sb.start_service(&[]).await;
    let nvim = Nvim::start(&sb, Attach::Socket(&svc.info.socket), "d.py").await;
    let mut other = svc.connect().await;
    other
        .initialize("other-editor", &["utf-16"], json!({}))
        .await;
    other.did_open(&uri, 1, "x = 1\n日本😀語 = 2\n").await;

    // Bytes 3..10 of line 1 are 本😀: UTF-16 columns 1..4.
    nvim.send_keys(concat!(
        ":lua vim.diagnostic.set(vim.api.nvim_create_namespace('ruff'), 0, {",
        "{lnum = 1, col = 3, end_lnum = 1, end_col = 10, severity = 2, message = 'w', source = 'ruff'},",
        "{lnum = 0, col = 0, end_lnum = 0, end_col = 1, severity = 1, message = 'e', code = 'E1'}})<CR>"
    ))
    .await;
    let sb_ = &sb;
    let status = wait_until("the forwarded diagnostics", || async move {
        let st = sb_.status().await;
        (st["diagnostics"].as_array().is_some_and(|d| !d.is_empty())).then_some(st)
    })
    .await;
    assert_eq!(
        status["diagnostics"],
        json!([{"uri": uri, "source": "ruff", "errors": 1, "warnings": 1, "information": 0, "hints": 0}])
    );
    let pulled = other
        .call(
            "textDocument/diagnostic",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    let items = pulled["items"].as_array().expect("items");
    let warn = items
        .iter()
        .find(|d| d["message"] == "w")
        .unwrap_or_else(|| panic!("{pulled}"));
    assert_eq!(
        warn["range"],
        json!({"start": {"line": 1, "character": 1}, "end": {"line": 1, "character": 4}})
    );
    assert_eq!(warn["severity"], 2);
    let err = items.iter().find(|d| d["message"] == "e").expect("error");
    assert_eq!((&err["severity"], &err["code"]), (&json!(1), &json!("E1")));

    nvim.send_keys(":lua vim.diagnostic.reset(vim.api.nvim_create_namespace('ruff'), 0)<CR>")
        .await;
    wait_until("the diagnostics to be cleared", || async move {
        let st = sb_.status().await;
        (st["diagnostics"].as_array().is_some_and(|d| d.is_empty())).then_some(())
    })
    .await;
    assert_eq!(nvim.eval("v:errmsg").await, "");
}

/// An ACP panel (an editor's agent panel through `moonkale-service acp`)
/// shows Claude's question to write a file; the user answers it in Neovim
/// instead, from the code action menu ("Claude: allow …"). The file is
/// written, the panel's question is withdrawn (`$/cancel_request`), and the
/// panel's turn ends with the model's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_answers_the_question_an_acp_panel_shows() {
    use moonkale_tests::acp::AcpAgent;
    use moonkale_tests::fakeapi::{Reply, Script};
    let w = moonkale_tests::world::World::builder()
        .agent()
        .file("README.md", "readme\n")
        .start()
        .await;
    let path = w.path("notes.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt(
                "write the notes",
                Reply::tool_use(
                    "Write",
                    json!({"file_path": path.display().to_string(), "content": "FROM NEOVIM\n"}),
                ),
            )
            .after_tool("Write", Reply::text("NOTES_WRITTEN")),
    );
    let nvim = Nvim::start(&w.sb, Attach::Socket(&w.svc().info.socket), "README.md").await;
    let mut cmd = w.command(&["acp", "--workspace"]);
    cmd.arg(&w.sb.workspace);
    let mut acp = AcpAgent::spawn(cmd, &w.sb.root.join("acp.log"));
    acp.initialize().await;
    let session = acp.new_session(&w.sb.workspace).await;
    let prompt = acp.prompt(&session, "write the notes").await;
    let ask = acp.permission("the panel's question").await;
    assert_eq!(ask["params"]["toolCall"]["title"], "Write notes.txt");

    // What the user will pick from the menu.
    nvim.send_keys(":lua PluginTest.choose = 'Claude: allow Write notes.txt'<CR>")
        .await;
    nvim.send_keys(":lua vim.lsp.buf.code_action()<CR>").await;
    let withdrawn = acp
        .wait_for("the panel's question withdrawn", |m| {
            m["method"] == "$/cancel_request"
        })
        .await;
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    let reply = acp
        .response(prompt, moonkale_tests::STEP)
        .await
        .expect("the prompt's reply");
    assert_eq!(reply["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "FROM NEOVIM\n");
    assert!(
        acp.chunks(&session, "agent_message_chunk")
            .contains("NOTES_WRITTEN")
    );
}

/// The user's config for Neovim with its user interface: the plugin and
/// its setup, nothing else (Neovim's own prompts, as a user gets them).
const TUI_INIT: &str = r#"
vim.opt.rtp:prepend(vim.env.MOONKALE_PLUGIN_DIR)
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
local shim = vim.env.MOONKALE_TEST_SHIM
require('moonkale').setup({
  socket = vim.env.MOONKALE_TEST_SOCKET,
  cmd = shim and { shim } or nil,
})
"#;

/// Neovim's TUI in a 140×40 pseudo-terminal with the plugin, attached to
/// the sandbox's service; returns once the plugin's client for `file` has
/// initialized and the screen shows `shows` (a line of the file).
async fn tui(sb: &Sandbox, socket: &std::path::Path, file: &str, shows: &str) -> Tui {
    let init = sb.root.join("tui-init.lua");
    std::fs::write(&init, TUI_INIT).expect("write init.lua");
    let extra = vec![("MOONKALE_PLUGIN_DIR", repo().join("editors/neovim").into())];
    let mut tui = start_tui(sb, &init, Attach::Socket(socket), file, extra);
    tui.remote.wait_plugin_initialized().await;
    tui.wait_screen(&format!("{file} with {shows:?}"), |s| s.contains(shows))
        .await;
    tui
}

/// What a person looks for on Neovim's screen when told something is up:
/// a prompt that blocks the editor until answered, or a warning.
const PROMPTS: [&str; 5] = [
    "Type number and <Enter>",
    "Press ENTER",
    "W12",
    "[O]K, (L)oad File",
    "has changed",
];

fn assert_no_prompt(screen: &str, when: &str) {
    for prompt in PROMPTS {
        assert!(
            !screen.contains(prompt),
            "{when}, the screen shows {prompt:?}:\n{}",
            framed(screen)
        );
    }
}

/// `app.py`: ten lines; Claude Code's proposal changes the eighth.
const APP: &str = "import sys\n\n\ndef greet(name):\n    print('hello', name)\n\n\ndef main():\n    greet(sys.argv[1])\n    return 0\n";
const APP_PROPOSED: &str = "import sys\n\n\ndef greet(name):\n    print('hello', name)\n\n\ndef main() -> int:\n    greet(sys.argv[1])\n    return 0\n";

/// Sends Claude Code's `openDiff` of `APP_PROPOSED` for `target` as request
/// `id` (not awaited: it answers only when the user decides).
async fn propose_app(c: &mut moonkale_tests::IdeClient, target: &std::path::Path, id: i64) {
    let args = json!({"old_file_path": target, "new_file_path": target,
                      "new_file_contents": APP_PROPOSED, "tab_name": "tab-app"});
    c.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                  "params": {"name": "openDiff", "arguments": args}}))
        .await;
}

/// The answer's texts (`["FILE_SAVED", text]` or `["DIFF_REJECTED", tab]`).
fn answer_texts(answer: &Value) -> Vec<String> {
    answer["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {answer}"))
        .iter()
        .map(|t| t["text"].as_str().expect("text").to_owned())
        .collect()
}

/// The user accepts proposal `id` of `target` on the screen with
/// `:MoonkaleAccept`; Claude Code's stand-in is answered `FILE_SAVED` with
/// [`APP_PROPOSED`] and writes it, as the CLI does. Once the screen shows
/// `what` (`shows` holds) with no prompt, a `:checktime`, as when the
/// terminal regains focus, asks nothing either; returns `expr` evaluated
/// after it (Neovim answers once the command has run), and the screen.
async fn accept_write_and_check(
    nvim: &mut Tui,
    c: &mut moonkale_tests::IdeClient,
    (target, id): (&std::path::Path, i64),
    (what, shows): (&str, impl Fn(&str) -> bool),
    expr: &str,
) -> (Value, String) {
    nvim.pty.send_keys(b":MoonkaleAccept\r");
    let answer = c.response(id).await;
    assert_eq!(answer_texts(&answer), ["FILE_SAVED", APP_PROPOSED]);
    std::fs::write(target, APP_PROPOSED).expect("write as the CLI does");
    let screen = nvim.wait_screen(what, shows).await;
    assert_no_prompt(&screen, "after the accept");
    nvim.pty.send_keys(b":checktime\r");
    let state = nvim.remote.eval(expr).await;
    let screen = nvim.pty.screen();
    assert_no_prompt(&screen, "after :checktime");
    (state, screen)
}

/// Defect (issue 25): a proposal arriving in Neovim (the real TUI, 140×40)
/// put the service's Accept/Reject question up first, a blocking prompt
/// over the window that still showed the untouched file; the diff came
/// only once it was answered. Now the screen shows the diff at once, the
/// original beside the proposal, with the keys that decide it named in its
/// window bars, and no prompt. The user accepts with `:MoonkaleAccept`;
/// Claude Code (its stand-in) writes the file, as it does after
/// `FILE_SAVED`: `app.py` shows the accepted line, unmodified (no `[+]`),
/// the same as the disk, and a `:checktime` (as when the terminal regains
/// focus) raises no W12 "changed in Vim as well".
#[tokio::test]
async fn tui_shows_the_diff_first_and_an_accepted_file_ends_saved() {
    let sb = Sandbox::new();
    let target = sb.workspace.join("app.py");
    std::fs::write(&target, APP).expect("write file");
    let (svc, mut c) = service_and_claude(&sb).await;
    let mut nvim = tui(&sb, &svc.info.socket, "app.py", "def main():").await;

    propose_app(&mut c, &target, 70).await;
    let screen = nvim
        .wait_screen(
            "the proposal's diff (the original and the proposed line) with its keys",
            |s| {
                s.contains("def main():")
                    && s.contains("def main() -> int:")
                    && s.contains(":MoonkaleAccept")
            },
        )
        .await;
    assert_no_prompt(&screen, "when the proposal arrived");
    for key in ["\\ma", "\\mr", "\\mk", "\\mu", ":MoonkaleReject"] {
        assert!(
            screen.contains(key),
            "the keys are not named: {key}\n{}",
            framed(&screen)
        );
    }
    eprintln!("Neovim when the proposal arrived:\n{}", framed(&screen));

    let (state, screen) = accept_write_and_check(
        &mut nvim,
        &mut c,
        (&target, 70),
        ("app.py alone with the accepted line", |s: &str| {
            s.contains("def main() -> int:") && !s.contains("def main():") && !s.contains("[+]")
        }),
        r#"[&modified, join(getline(1, '$'), "\n") .. "\n", tabpagenr('$')]"#,
    )
    .await;
    assert_eq!(state, json!([0, APP_PROPOSED, 1]), "modified, text, tabs");
    assert!(!screen.contains("[+]"), "modified:\n{}", framed(&screen));
    eprintln!(
        "Neovim after the accept and the write:\n{}",
        framed(&screen)
    );
}

/// Defect (issue 25): an unsaved edit of the user's elsewhere in the file
/// made the service leave the buffer alone at an accept; Claude Code's
/// write then met a modified buffer, and Neovim asked (W12) which to keep.
/// Now the accepted change is merged into the buffer beside the user's
/// edit: after Claude Code writes the file the buffer shows both, still
/// modified (the user's edit is unsaved), and `:checktime` asks nothing;
/// `:w` writes both.
#[tokio::test]
async fn tui_keeps_an_unsaved_edit_made_elsewhere_when_a_proposal_is_accepted() {
    let sb = Sandbox::new();
    let target = sb.workspace.join("app.py");
    std::fs::write(&target, APP).expect("write file");
    let (svc, mut c) = service_and_claude(&sb).await;
    let mut nvim = tui(&sb, &svc.info.socket, "app.py", "def main():").await;

    nvim.pty.send_keys(b"ggA  # mine\x1b");
    nvim.wait_screen("the user's unsaved edit", |s| {
        s.contains("import sys  # mine") && s.contains("app.py [+]")
    })
    .await;
    // The service knows the buffer is modified (Neovim sends it a moment
    // after the keys).
    wait_until("the service to see the buffer modified", async || {
        let dirty = tool_json(
            &c.tool("checkDocumentDirty", json!({"filePath": target}))
                .await,
        );
        (dirty["isDirty"] == true).then_some(())
    })
    .await;

    propose_app(&mut c, &target, 71).await;
    let screen = nvim
        .wait_screen("the proposal's diff", |s| {
            s.contains("def main() -> int:") && s.contains(":MoonkaleAccept")
        })
        .await;
    assert_no_prompt(&screen, "when the proposal arrived");
    let (state, screen) = accept_write_and_check(
        &mut nvim,
        &mut c,
        (&target, 71),
        (
            "app.py with the user's edit and Claude Code's",
            |s: &str| {
                s.contains("import sys  # mine")
                    && s.contains("def main() -> int:")
                    && s.contains("app.py [+]")
                    && !s.contains("│")
            },
        ),
        r#"[&modified, join(getline(1, '$'), "\n") .. "\n", getcurpos()[1:2]]"#,
    )
    .await;
    let both = APP_PROPOSED.replace("import sys\n", "import sys  # mine\n");
    // The cursor stayed where the user left it (at the end of their edit).
    assert_eq!(state, json!([1, both, [1, 18]]), "modified, text, cursor");
    eprintln!(
        "Neovim after the accept, the write and :checktime:\n{}",
        framed(&screen)
    );

    nvim.pty.send_keys(b":w\r");
    nvim.wait_screen("the buffer saved", |s| {
        s.contains("written") && !s.contains("[+]")
    })
    .await;
    assert_eq!(std::fs::read_to_string(&target).unwrap(), both);
    assert_no_prompt(&nvim.pty.screen(), "after :w");
}
