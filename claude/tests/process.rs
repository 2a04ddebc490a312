//! Process supervision against scripted stand-ins for the CLI (`sh -c`),
//! for the misbehaviour the real one cannot be made to show: security.md
//! cases 43, 44, 46 and 47.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use moonkale_claude::process::{CliProcess, ProcessConfig};
use moonkale_claude::stream::{CliMessage, DecodeError};

const DEADLINE: Duration = Duration::from_secs(20);

fn stand_in(script: &str) -> CliProcess {
    CliProcess::spawn(ProcessConfig {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        cwd: std::env::temp_dir(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        grace: Duration::from_millis(300),
    })
    .expect("spawn /bin/sh")
}

async fn next(p: &mut CliProcess) -> Option<Result<CliMessage, DecodeError>> {
    tokio::time::timeout(DEADLINE, p.next())
        .await
        .expect("no hang")
}

/// Processes of a process group, from /proc.
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()?
                        .split_whitespace()
                        .nth(2)?
                        .parse::<i32>()
                        .ok()
                })
                == Some(pgid)
        })
        .collect()
}

/// Case 43: torn stream-json and an exit in the middle of a turn end the
/// message stream with an error, not a hang.
#[tokio::test]
async fn hostile_43_torn_output_and_exit_mid_turn() {
    let mut p = stand_in(r#"printf '{"type":"system","subtype":"init"}\n{"type":"assis'; exit 3"#);
    assert!(matches!(
        next(&mut p).await,
        Some(Ok(CliMessage::System { .. }))
    ));
    assert!(matches!(
        next(&mut p).await,
        Some(Err(DecodeError::BadJson(_)))
    ));
    assert!(next(&mut p).await.is_none());
    assert_eq!(p.shutdown().await.unwrap().code(), Some(3));
}

/// Case 43: a 100 MB line is dropped at the cap and the process is killed;
/// plain text and invalid UTF-8 are errors or noise, never a hang.
#[tokio::test]
async fn hostile_43_runaway_line_kills_the_process() {
    let mut p = stand_in(
        r#"printf 'plain text\n{"x":"\377\376"}\n'; printf '{"x":"'; head -c 100000000 /dev/zero | tr '\0' a; sleep 100"#,
    );
    let started = Instant::now();
    assert!(
        matches!(next(&mut p).await, Some(Err(DecodeError::BadJson(_)))),
        "invalid UTF-8 is a bad line"
    );
    assert!(matches!(
        next(&mut p).await,
        Some(Err(DecodeError::LineTooLong { .. }))
    ));
    assert!(
        next(&mut p).await.is_none(),
        "stdout ends: the group was killed"
    );
    let status = p.shutdown().await.unwrap();
    assert!(!status.success());
    assert!(started.elapsed() < DEADLINE);
}

/// Case 46: 4 MiB on stderr, nothing on stdout, stdin never read: no
/// deadlock; the tail of stderr is kept, bounded.
#[tokio::test]
async fn hostile_46_stderr_flood_does_not_deadlock() {
    let mut p =
        stand_in("head -c 4194304 /dev/zero | tr '\\0' e >&2; echo END >&2; exec sleep 100");
    let deadline = Instant::now() + DEADLINE;
    while !p.stderr_tail().ends_with("END\n") {
        assert!(Instant::now() < deadline, "stderr was not drained");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(p.stderr_tail().len() <= moonkale_claude::process::STDERR_TAIL);
    p.send(b"{}\n").await.unwrap();
    p.shutdown().await.unwrap();
}

/// Case 44: grandchildren that ignore SIGTERM are killed with the group
/// after the grace period; the child is reaped and nothing is left.
#[tokio::test]
async fn hostile_44_the_whole_group_goes() {
    let mut p = stand_in(
        r#"trap '' TERM; (trap '' TERM; exec sleep 1000) & (trap '' TERM; exec sleep 1000) & echo '{"type":"system","subtype":"init"}'; wait"#,
    );
    assert!(matches!(next(&mut p).await, Some(Ok(_))));
    let pgid = p.pid();
    assert!(
        group_members(pgid).len() >= 3,
        "the shell and its two sleeps"
    );
    let started = Instant::now();
    p.shutdown().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "grace twice, then SIGKILL"
    );
    let deadline = Instant::now() + DEADLINE;
    while !group_members(pgid).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            group_members(pgid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Case 47: the child gets only fds 0, 1 and 2 (nothing the service holds,
/// not even the test runner's jobserver pipe), its own session, and exactly
/// the environment it was given.
#[tokio::test]
async fn hostile_47_fds_session_and_environment() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap(); // must not leak
    let p = CliProcess::spawn(ProcessConfig {
        program: "/bin/sleep".into(),
        args: vec!["100".into()],
        cwd: PathBuf::from("/"),
        env: vec![("ONLY".into(), "this".into())],
        grace: Duration::from_millis(300),
    })
    .unwrap();
    let pid = p.pid();
    // The process has exec'd once its command line is sleep's.
    let deadline = Instant::now() + DEADLINE;
    while !std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .starts_with(b"/bin/sleep")
    {
        assert!(Instant::now() < deadline, "sleep never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // sleep's own start-up (the C library reading locale files) holds an
    // fd for a moment after exec; a leaked fd never goes away, so the
    // listing is taken again until it is clean or the deadline passes.
    let fds = loop {
        let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        fds.sort();
        if fds == ["0", "1", "2"] || Instant::now() >= deadline {
            break fds;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(fds, ["0", "1", "2"]);
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert_eq!(environ, b"ONLY=this\0");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(fields[3], pid.to_string(), "its own session");
    drop(listener);
    p.shutdown().await.unwrap();
}

/// A program that cannot be started is an error at spawn, not a process
/// that exits at once.
#[tokio::test]
async fn a_missing_program_fails_to_spawn() {
    let err = CliProcess::spawn(ProcessConfig {
        program: "/nonexistent/claude".into(),
        args: vec![],
        cwd: PathBuf::from("/"),
        env: vec![],
        grace: Duration::from_millis(300),
    });
    assert!(err.is_err());
}

/// The death signal follows the thread that forked. A runtime thread that
/// retires (here: a worker turned blocking by `block_in_place`, retired
/// after a short keep-alive) must not take the CLI with it.
#[test]
fn the_cli_outlives_the_thread_that_asked_for_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_keep_alive(Duration::from_millis(50))
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let cli =
            tokio::spawn(async { tokio::task::block_in_place(|| stand_in("exec sleep 1000")) })
                .await
                .unwrap();
        // Long enough for the retired thread to exit many times over.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let status = std::fs::read_to_string(format!("/proc/{}/stat", cli.pid())).unwrap();
        let state = status.rsplit(") ").next().unwrap().chars().next().unwrap();
        assert_ne!(state, 'Z', "the CLI was killed with its forking thread");
        cli.shutdown().await.unwrap();
    });
}
