//! The hosted agent's questions answered in a real editor: Neovim 0.11.4
//! with the plugin, attached to a service that runs the real CLI against
//! the fake API. The user starts a turn from the command line, as they
//! would from a terminal beside the editor, and answers in Neovim.

use std::process::Stdio;

use moonkale_tests::STEP;
use moonkale_tests::agent::{bash_writes, plan_then_write_script};
use moonkale_tests::fakeapi::{Reply, Script};
use moonkale_tests::nvim::{Attach, Headless, start_headless};
use moonkale_tests::world::World;
use serde_json::{Value, json};

/// The plugin, and a `vim.ui.select` that answers LSP questions as the user
/// would: the first choice whose title is next in `PluginTest.answers`.
/// Every prompt shown is recorded.
const INIT: &str = r#"
vim.opt.rtp:prepend(vim.env.MOONKALE_PLUGIN_DIR)
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
PluginTest = { asked = {}, answers = {} }
vim.ui.select = function(items, opts, on_choice)
  table.insert(PluginTest.asked, opts.prompt or '')
  local want = table.remove(PluginTest.answers, 1)
  for _, item in ipairs(items) do
    if want and item.title == want then
      return on_choice(item)
    end
  end
  on_choice(nil)
end
require('moonkale').setup({ socket = vim.env.MOONKALE_TEST_SOCKET })
"#;

async fn nvim(w: &World, file: &str) -> Headless {
    let init = w.sb.root.join("agent-init.lua");
    std::fs::write(&init, INIT).expect("write init.lua");
    let extra = vec![(
        "MOONKALE_PLUGIN_DIR",
        moonkale_tests::repo_root().join("editors/neovim").into(),
    )];
    let h = start_headless(
        &w.sb,
        &init,
        Attach::Socket(&w.svc().info.socket),
        file,
        extra,
    );
    h.remote.wait_plugin_initialized().await;
    h
}

/// The user plans in a session started with `agent send`, approves the
/// plan in Neovim with "ask before edits", is asked in Neovim about the
/// Write that follows, allows it, and the file is written; `agent send`
/// ends with the model's last words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_approves_a_plan_then_the_edit_and_the_file_is_written() {
    let mut w = World::builder()
        .agent()
        .file("notes.txt", "notes\n")
        .start()
        .await;
    let path = w.path("plan.txt");
    w.fake
        .set_script(plan_then_write_script("make a plan", &path));
    let nv = nvim(&w, "notes.txt").await;
    nv.remote
        .eval(r#"luaeval('(function() PluginTest.answers = {"Approve; ask before edits", "Allow"} return 1 end)()')"#)
        .await;

    let ws = w.sb.workspace.display().to_string();
    let send = w
        .command(&["agent", "send", "--workspace", &ws, "make a plan"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output();
    let out = tokio::time::timeout(STEP * 3, send)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "agent send did not end; Neovim was asked {:?}\n{}",
                std::fs::read_to_string(&nv.output).unwrap_or_default(),
                w.diag().context()
            )
        })
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "agent send failed: {stdout}\n{stderr}"
    );
    assert!(stdout.contains("PLAN_CARRIED_OUT"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(&path).ok().as_deref(),
        Some("DONE\n")
    );

    let asked: Value = nv.remote.eval("luaeval('PluginTest.asked')").await;
    let asked: Vec<&str> = asked
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        asked
            .iter()
            .any(|p| p.contains("Claude's plan is ready") && p.contains("1. Write plan.txt")),
        "{asked:?}"
    );
    assert!(
        asked.iter().any(|p| p.contains("Write plan.txt")),
        "{asked:?}"
    );
    // The session left plan mode: the CLI's and the session's mode agree.
    let list = w.ed.call("moonkale/agent/list", Value::Null).await;
    assert_eq!(list["sessions"][0]["permissionMode"], "default", "{list}");
}

/// Claude asks a multiple-choice question in plan mode; Neovim shows the
/// question with its options (not "allow AskUserQuestion?"), the user picks
/// one, and the model gets that label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_answers_claudes_question_with_one_of_its_options() {
    let questions = json!([{
        "question": "Which database should the tests use?",
        "header": "Database",
        "options": [{"label": "SQLite", "description": "in memory"}, {"label": "Postgres", "description": "a server"}],
        "multiSelect": false,
    }]);
    let mut w = World::builder()
        .agent()
        .script(
            Script::new()
                .on_prompt(
                    "ask me",
                    Reply::tool_use("AskUserQuestion", json!({"questions": questions})),
                )
                .after_tool("AskUserQuestion", Reply::text("NOTED")),
        )
        .file("notes.txt", "notes\n")
        .start()
        .await;
    let nv = nvim(&w, "notes.txt").await;
    nv.remote
        .eval(r#"luaeval('(function() PluginTest.answers = {"Postgres"} return 1 end)()')"#)
        .await;
    let session = w.ed.start_session(json!({"prompt": "ask me"})).await;
    let (_, result) = w.fake.wait_tool_result("AskUserQuestion", STEP).await;
    assert!(
        !result.is_error && result.text.contains("Postgres"),
        "{}",
        result.text
    );
    let seq = w.ed.last_prompt_seq(&session).await;
    w.ed.turn_idle(&session, seq).await;
    let asked: Value = nv.remote.eval("luaeval('PluginTest.asked')").await;
    assert!(
        asked.as_array().unwrap().iter().any(|p| p
            .as_str()
            .is_some_and(|p| p.contains("Which database should the tests use?"))),
        "{asked}"
    );
}

/// The Claude Code a person runs in a terminal of the service asks to run
/// a command: Neovim is asked too (its `PermissionRequest` hook reaches
/// every editor), the person allows it there, and the command runs in
/// that terminal's CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_answers_a_terminal_claudes_question() {
    let mut w = World::builder()
        .claude_in_terminals()
        .file("notes.txt", "notes\n")
        .start()
        .await;
    let target = w.path("allowed-in-neovim.txt");
    w.fake.set_script(
        Script::new()
            .on_prompt("write it", bash_writes(&target, "FROM_NEOVIM"))
            .after_tool("Bash", Reply::text("NEOVIM_ALLOWED_IT")),
    );
    let nv = nvim(&w, "notes.txt").await;
    nv.remote
        .eval(r#"luaeval('(function() PluginTest.answers = {"Allow"} return 1 end)()')"#)
        .await;
    let (id, _) = w.ed.start_claude_here().await;
    w.ed.submit_in_terminal(id, "write it").await;
    w.ed.terminal_shows(id, "the turn's end", |t| t.contains("NEOVIM_ALLOWED_IT"))
        .await;
    assert_eq!(
        std::fs::read_to_string(&target).unwrap_or_default(),
        "FROM_NEOVIM\n"
    );
    let asked: Value = nv.remote.eval("luaeval('PluginTest.asked')").await;
    assert!(
        asked
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.contains("echo FROM_NEOVIM"))),
        "{asked}"
    );
}
