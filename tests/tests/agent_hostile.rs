//! The agent host against a hostile or dying world, with a scripted
//! stand-in for the `claude` CLI (a shell script the test writes): what the
//! real CLI cannot be made to do on cue.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use moonkale_tests::{Sandbox, wait_until};
use serde_json::json;

/// Writes an executable stand-in for `claude` that keeps its pipes open and
/// says nothing.
fn stand_in(sb: &Sandbox) -> PathBuf {
    let path = sb.root.join("claude");
    // It says its version (the service asks before running it in an
    // untrusted workspace), then nothing more.
    std::fs::write(
        &path,
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo '2.1.332 (Claude Code)'; exit 0; }\nexec sleep 1000\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Children of `parent`, from /proc.
fn children(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) =
            std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
        else {
            continue;
        };
        // pid (comm) state ppid …; comm may hold spaces, so split after ')'.
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

fn alive(pid: i32) -> bool {
    // A zombie still has a /proc entry; it is dead for our purpose.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, r)| !r.starts_with('Z'))
    })
}

/// Security case 45: the service is SIGKILLed mid-turn; its `claude`
/// process dies with it (PR_SET_PDEATHSIG) instead of being orphaned.
#[tokio::test]
async fn hostile_45_claude_dies_with_a_killed_service() {
    let sb = Sandbox::new();
    let claude = stand_in(&sb);
    let svc = sb
        .start_service_with_env(&[], &[("MOONKALE_CLAUDE_BIN", claude.to_str().unwrap())])
        .await;
    let mut ed = svc.connect().await;
    ed.initialize("hostile-45", &["utf-8"], json!(null)).await;
    let started = ed
        .call("moonkale/agent/start", json!({"prompt": "hello"}))
        .await;
    assert_eq!(started["state"], "running", "{started}");
    let service_pid = svc.pid();
    let cli = wait_until("the service to start claude", || {
        let kids = children(service_pid);
        async move { kids.first().copied() }
    })
    .await;
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(service_pid, libc::SIGKILL) };
    wait_until("claude to die with the service", || {
        let gone = !alive(cli);
        async move { gone.then_some(()) }
    })
    .await;
}

/// A session whose `claude` cannot be found fails with the finder's error
/// (where it looked, how to install it), not a hang.
#[tokio::test]
async fn a_missing_claude_is_a_clear_error() {
    let sb = Sandbox::new();
    let svc = sb
        .start_service_with_env(
            &[],
            &[(
                "MOONKALE_CLAUDE_BIN",
                sb.root.join("no-such-claude").to_str().unwrap(),
            )],
        )
        .await;
    let mut ed = svc.connect().await;
    ed.initialize("missing", &["utf-8"], json!(null)).await;
    let reply = ed
        .request("moonkale/agent/start", json!({"prompt": "hello"}))
        .await;
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no-such-claude"), "{reply}");
    let list = ed.call("moonkale/agent/list", json!({})).await;
    assert_eq!(list["sessions"][0]["state"], "failed", "{list}");
}
