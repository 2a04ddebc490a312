//! The programs' processes (security cases 48, 52): how they are spawned,
//! and how they end when they exit, their opener goes or the service stops.

use std::time::{Duration, Instant};

use moonkale_tests::lsp::plain_caps;
use moonkale_tests::poll_until;
use serde_json::{Value, json};

use crate::{
    STEP, count_lines, live_in_session, open, open_sh, pid_of, proc_stat, run, screen, start,
    wait_line, wait_prompt, wait_screen, world, zombie_children,
};

/// Hostile 48 (a): the shell exits → `exit` with its code, and the service
/// reaps it (no zombie child).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_48a_shell_exit_is_reported_and_reaped() {
    let mut w = start().await;
    let (id, info) = open_sh(&mut w.ed, 24, 80).await;
    let pid = pid_of(&info);
    wait_prompt(&mut w.ed, id).await;
    run(&mut w.ed, id, "exit 3").await;
    let exit =
        w.ed.take("moonkale/terminal/exit", STEP, |m| {
            m["method"] == "moonkale/terminal/exit" && m["params"]["terminal"] == id
        })
        .await;
    assert_eq!(exit["params"]["exitCode"], json!(3), "{exit}");
    assert!(
        poll_until(STEP, async || (proc_stat(pid).is_none()).then_some(()))
            .await
            .is_some(),
        "the exited shell {pid} was not reaped: {:?}",
        proc_stat(pid)
    );
    let zombies = zombie_children(w.svc().pid());
    assert!(
        zombies.is_empty(),
        "zombie children of the service: {zombies:?}"
    );
    let list = w.ed.call("moonkale/terminal/list", Value::Null).await;
    let t = list["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["terminal"] == id)
        .cloned();
    if let Some(t) = t {
        assert_eq!(
            (&t["exited"], &t["exitCode"]),
            (&json!(true), &json!(3)),
            "{t}"
        );
    }
    let s = screen(&mut w.ed, id).await;
    assert_eq!(s["exited"], json!(true), "{s}");
    // Input to an exited program is refused, not lost silently.
    let resp =
        w.ed.request(
            "moonkale/terminal/input",
            json!({"terminal": id, "text": "x"}),
        )
        .await;
    assert!(resp.get("error").is_some(), "{resp}");
}

/// Hostile 48 (b): the opener disconnects → its terminals' programs get
/// SIGHUP (gone at once) or SIGKILL 3 s later (one that ignores SIGHUP);
/// a `keepAlive` terminal survives, is listed to a new client and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_48b_opener_disconnect_hangs_up() {
    // The first editor comes later; the opener is a second one.
    let mut w = world().editor("later", plain_caps()).start().await;
    let mut a = w.client("opener", plain_caps()).await;
    let (plain, info) = open_sh(&mut a, 24, 80).await;
    let plain_pid = pid_of(&info);
    let (stubborn, info) = open(
        &mut a,
        json!({"argv": ["/bin/sh", "-c", "trap '' HUP; echo ignoring-hup; while :; do sleep 1; done"]}),
    )
    .await;
    let stubborn_pid = pid_of(&info);
    let (kept, info) = open(&mut a, json!({"argv": ["/bin/sh"], "keepAlive": true})).await;
    let kept_pid = pid_of(&info);
    wait_prompt(&mut a, plain).await;
    wait_line(&mut a, stubborn, "ignoring-hup").await;
    wait_prompt(&mut a, kept).await;

    drop(a);
    let gone = Instant::now();
    assert!(
        poll_until(Duration::from_secs(3), async || (live_in_session(
            plain_pid
        )
        .is_empty())
        .then_some(()))
        .await
        .is_some(),
        "the shell {plain_pid} outlived its opener by 3 s: {:?}\n{}",
        live_in_session(plain_pid),
        w.service_log_tail(40)
    );
    assert!(
        poll_until(Duration::from_secs(6), async || (live_in_session(
            stubborn_pid
        )
        .is_empty())
        .then_some(()))
        .await
        .is_some(),
        "the SIGHUP-ignoring program {stubborn_pid} outlived its opener by 6 s: {:?}\n{}",
        live_in_session(stubborn_pid),
        w.service_log_tail(40)
    );
    let stubborn_took = gone.elapsed();
    assert!(
        stubborn_took >= Duration::from_millis(2500),
        "the SIGHUP-ignoring program was gone after {stubborn_took:?}: no 3 s grace?"
    );
    assert!(
        poll_until(STEP, async || (proc_stat(plain_pid).is_none()
            && proc_stat(stubborn_pid).is_none())
        .then_some(()))
        .await
        .is_some(),
        "not reaped: {:?} {:?}",
        proc_stat(plain_pid),
        proc_stat(stubborn_pid)
    );
    assert!(proc_stat(kept_pid).is_some_and(|(st, ..)| st != 'Z'));

    let b = &mut w.ed;
    let list = b.call("moonkale/terminal/list", Value::Null).await;
    let ids: Vec<u64> = list["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["terminal"].as_u64())
        .collect();
    assert_eq!(ids, vec![kept], "{list}");
    b.call("moonkale/terminal/subscribe", json!({"terminal": kept}))
        .await;
    run(b, kept, "echo alive-$((1+6))").await;
    wait_line(b, kept, "alive-7").await;
    b.call("moonkale/terminal/close", json!({"terminal": kept}))
        .await;
    b.take("moonkale/terminal/closed", STEP, |m| {
        m["method"] == "moonkale/terminal/closed" && m["params"]["terminal"] == kept
    })
    .await;
    assert!(
        poll_until(Duration::from_secs(4), async || (live_in_session(kept_pid)
            .is_empty())
        .then_some(()))
        .await
        .is_some(),
        "the closed terminal's shell survived"
    );
}

/// Hostile 48 (c): service shutdown (SIGTERM) leaves no PTY program
/// running: not the shells, not a background job, not a SIGHUP-ignorer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_48c_service_shutdown_leaves_no_pty_child() {
    let mut w = start().await;
    let (sh, info) = open(&mut w.ed, json!({"argv": ["/bin/sh"], "keepAlive": true})).await;
    let sh_pid = pid_of(&info);
    let (stubborn, info) = open(
        &mut w.ed,
        json!({"argv": ["/bin/sh", "-c", "trap '' HUP TERM; echo ignoring-hup; while :; do sleep 1; done"]}),
    )
    .await;
    let stubborn_pid = pid_of(&info);
    wait_prompt(&mut w.ed, sh).await;
    run(&mut w.ed, sh, "sleep 300 & echo bg-$((2*4))").await;
    wait_line(&mut w.ed, sh, "bg-8").await;
    wait_line(&mut w.ed, stubborn, "ignoring-hup").await;
    assert!(live_in_session(sh_pid).len() >= 2, "no background job");

    let pid = w.svc().pid();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(10), w.svc_mut().child.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the service did not stop within 10 s of SIGTERM\n{}",
                w.service_log_tail(40)
            )
        })
        .expect("wait for the service");
    eprintln!("service exited: {status}");
    // Orphans go to a parent that may not reap them: zombies are dead.
    let clean = poll_until(Duration::from_secs(2), async || {
        ({ live_in_session(sh_pid).is_empty() && live_in_session(stubborn_pid).is_empty() })
            .then_some(())
    })
    .await
    .is_some();
    let survivors = (live_in_session(sh_pid), live_in_session(stubborn_pid));
    // Whatever survived was started by this test: gone before failing.
    for pid in survivors.0.iter().chain(&survivors.1) {
        // SAFETY: as above.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        clean,
        "PTY programs survived the service (pgrep -s): session {sh_pid}: {:?}, session \
         {stubborn_pid}: {:?} (a background job has a process group of its own)\n{}",
        survivors.0,
        survivors.1,
        w.service_log_tail(40)
    );
}

/// Hostile 52: started by argv (no shell in between), in its own session
/// with the PTY as controlling terminal, fds 0–2 only, no `MOONKALE_*` or
/// `CLAUDECODE` in its environment (not even through `env`), `TERM` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_52_spawn_session_fds_environment() {
    let mut w = world()
        .env("MOONKALE_SECRET_TEST", "x")
        .env("CLAUDECODE", "1")
        .env("KEEP_ME_TEST", "kept")
        .env("TERM", "dumb")
        .start()
        .await;
    let sub = w.sb.workspace.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let (id, info) = open(
        &mut w.ed,
        json!({"argv": ["/bin/sh", "-c", "echo started; exec /bin/cat"], "cwd": "sub",
               "env": {"MOONKALE_INJECTED": "y", "EXTRA_TEST": "e"}}),
    )
    .await;
    wait_line(&mut w.ed, id, "started").await;
    // cat opens locale files while it starts; once it has echoed a line it
    // is past that and blocked reading the PTY (the line shows twice: the
    // terminal's echo, then cat's).
    run(&mut w.ed, id, "ping").await;
    wait_screen(&mut w.ed, id, "cat echoing a line", |s| {
        count_lines(s, "ping") == 2
    })
    .await;
    let pid = pid_of(&info);
    assert_eq!(info["cwd"], json!(sub), "{info}");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert_eq!(cmdline, b"/bin/cat\0", "argv of {pid}");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), sub);
    let (_, ppid, sid, tty) = proc_stat(pid).expect("stat");
    assert_eq!(
        ppid,
        w.svc().pid(),
        "the program is not the service's own child"
    );
    assert_eq!(sid, pid, "the program is not a session leader");
    assert_ne!(tty, 0, "the program has no controlling terminal");
    let fd0 = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap();
    assert!(fd0.starts_with("/dev/pts/"), "{}", fd0.display());
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort();
    let links: Vec<String> = fds
        .iter()
        .map(|fd| {
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(fds, vec![0, 1, 2], "open fds: {links:?}");
    for fd in 1..3 {
        assert_eq!(
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap(),
            fd0
        );
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<(String, String)> = environ
        .split(|b| *b == 0)
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=').unwrap_or((&kv, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect();
    let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let leaked: Vec<&String> = vars
        .iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("MOONKALE") || *k == "CLAUDECODE")
        .collect();
    assert!(leaked.is_empty(), "the program inherited {leaked:?}");
    assert_eq!(get("TERM"), Some("xterm-256color"));
    assert_eq!(get("KEEP_ME_TEST"), Some("kept"));
    assert_eq!(get("EXTRA_TEST"), Some("e"));
    // The service's token never reaches the program.
    let token = std::fs::read_to_string(&w.svc().info.token_file).unwrap_or_default();
    let token = token.trim();
    if !token.is_empty() {
        assert!(
            !vars.iter().any(|(_, v)| v.contains(token)),
            "the service token leaked into the program's environment"
        );
    }
    // A cwd outside the workspace is refused.
    for bad in [json!("/tmp"), json!(".."), json!("../home")] {
        let resp =
            w.ed.request(
                "moonkale/terminal/open",
                json!({"argv": ["/bin/true"], "cwd": bad}),
            )
            .await;
        assert!(resp.get("error").is_some(), "cwd {bad} accepted: {resp}");
    }
}
