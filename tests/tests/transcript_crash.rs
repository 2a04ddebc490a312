//! Crash tests of the transcript store (security.md cases 53 and 55) with a
//! real writer process, `transcript-writer`.
//!
//! Case 53, the SIGKILL loop: the writer appends records and prints the
//! sequence number of each one `append` acknowledged; after a random number
//! of acknowledgements we SIGKILL it, either at once (it is then in the
//! next append, mostly syncing) or when it announces the write of a big
//! line (often tearing it), reopen the transcript here and check the
//! invariant:
//! every acknowledged record is present, at most one unacknowledged record
//! follows them, every line is one whole record in order (nothing glued, no
//! damage mid-file), and the next append lands on a fresh line. The next
//! round restarts the writer on the same file, so recovery is exercised on
//! files that earlier rounds recovered.
//!
//! A SIGKILL loses no page cache, so this covers process crashes; power loss
//! is out of reach of a test (security.md A11 names ALICE, CrashMonkey and
//! dm-log-writes for that).
//!
//! Every wait has a deadline; nothing sleeps.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use moonkale_service::agent::transcript::{Recovery, Transcript};
use moonkale_tests::TIMEOUT;
use serde_json::{Value, json};

/// Rounds per run: 100 per PR (security case 53); `MOONKALE_CRASH_ROUNDS`
/// raises it for the nightly 1 000.
const ROUNDS: usize = 100;
/// Rounds on one file before starting a new one, so the file (reread on
/// every open) stays small and the loop fast.
const ROUNDS_PER_FILE: usize = 10;
/// The writer is killed after 1 to this many acknowledgements.
const MAX_ACKS: u64 = 12;

#[test]
fn hostile_53_sigkill_loop_loses_no_acknowledged_record() {
    let (rounds, mut rng) = moonkale_tests::crash_rounds(ROUNDS);
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let writer = moonkale_tests::bin("transcript-writer");
    let started = Instant::now();

    let mut records_in_file = 0;
    let (mut cut_back, mut newline_added, mut extra_tail) = (0, 0, 0);
    for round in 0..rounds {
        let path = dir
            .path()
            .join("chats")
            .join(format!("s{}.jsonl", round / ROUNDS_PER_FILE));
        if round % ROUNDS_PER_FILE == 0 {
            records_in_file = 0;
        }
        let acks_first = 1 + rng.next() % MAX_ACKS;
        let kill_at = if rng.next().is_multiple_of(2) {
            KillAt::Ack(acks_first)
        } else {
            KillAt::BigWrite(acks_first)
        };
        let acks = run_and_kill(&writer, &path, kill_at);

        // Acknowledged records are numbered on from what the file held.
        let expected: Vec<u64> = (records_in_file..records_in_file + acks.len() as u64).collect();
        assert_eq!(
            acks, expected,
            "round {round}: acknowledgements out of order"
        );
        let last_ack = *acks.last().expect("at least one acknowledgement");

        let mut transcript = Transcript::open(&path).expect("reopen after SIGKILL");
        assert!(
            transcript.read_only().is_none(),
            "round {round}: {:?}",
            transcript.read_only()
        );
        match transcript.recovery() {
            Recovery::Clean => {}
            Recovery::CutBack { .. } => cut_back += 1,
            Recovery::NewlineAdded => newline_added += 1,
            Recovery::Untouched => panic!("round {round}: recovery left the file untouched"),
        }
        let records = transcript.records().expect("read records");
        assert!(
            records.bad.is_empty(),
            "round {round}: damaged lines {:?}",
            records.bad
        );
        for (i, record) in records.records.iter().enumerate() {
            assert_eq!(record.seq, i as u64, "round {round}");
            assert_eq!(
                record.value["seq"],
                json!(i),
                "round {round}: line {} holds another record",
                i + 1
            );
        }
        let held = records.records.len() as u64;
        assert!(
            held > last_ack,
            "round {round}: acknowledged record {last_ack} is missing ({held} records)"
        );
        assert!(
            held <= last_ack + 2,
            "round {round}: {held} records after acknowledgement {last_ack}: more than one unacknowledged"
        );
        if held == last_ack + 2 {
            extra_tail += 1;
        }

        // The next append starts on a fresh line: the file is exactly the
        // records before it plus this one line.
        let check = json!({"seq": held, "by": "checker", "round": round});
        assert_eq!(
            transcript.append(&check).expect("append after recovery"),
            held
        );
        drop(transcript);
        let bytes = std::fs::read(&path).expect("read transcript");
        assert_eq!(bytes.last(), Some(&b'\n'), "round {round}");
        let lines: Vec<&[u8]> = bytes[..bytes.len() - 1].split(|&b| b == b'\n').collect();
        assert_eq!(lines.len() as u64, held + 1, "round {round}");
        let last: Value = serde_json::from_slice(lines[lines.len() - 1]).expect("last line");
        assert_eq!(last, check, "round {round}");
        records_in_file = held + 1;
    }
    eprintln!(
        "{rounds} rounds in {:?}: torn tail cut back {cut_back}×, newline added {newline_added}×, \
         whole unacknowledged record kept {extra_tail}×",
        started.elapsed()
    );
}

/// When to SIGKILL the writer.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// Right after its nth acknowledgement, mostly during the next sync.
    Ack(u64),
    /// After n acknowledgements, as soon as it announces the write of a
    /// line of at least [`BIG_WRITE`] bytes: often inside that write, which
    /// tears the line.
    BigWrite(u64),
}

const BIG_WRITE: usize = 64 * 1024;

/// Starts the writer on `path`, SIGKILLs it at `kill_at`, and returns every
/// acknowledgement it printed (some may be read after the kill; they count).
fn run_and_kill(writer: &Path, path: &Path, kill_at: KillAt) -> Vec<u64> {
    let mut child = Command::new(writer)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start transcript-writer");
    let pid = child.id() as libc::pid_t;
    let stdout = child.stdout.take().expect("stdout");
    // The reader kills as soon as it sees the moment: no hop through
    // another thread between the writer's line and the signal.
    let (done_tx, done_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acks = Vec::new();
        let mut killed = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let now = match (line.strip_prefix("w "), kill_at) {
                (Some(len), KillAt::BigWrite(n)) => {
                    acks.len() as u64 >= n
                        && len.parse::<usize>().expect("write length") >= BIG_WRITE
                }
                (Some(_), KillAt::Ack(_)) => false,
                (None, _) => {
                    let ack = line
                        .parse()
                        .unwrap_or_else(|_| panic!("writer printed {line:?}"));
                    acks.push(ack);
                    matches!(kill_at, KillAt::Ack(n) if acks.len() as u64 == n)
                }
            };
            if now && !killed {
                // SAFETY: kill has no memory-safety preconditions; `pid` is
                // our unreaped child, so it names no other process.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed = true;
            }
        }
        let _ = done_tx.send(killed);
        acks
    });

    // The pipe ends when the writer dies.
    match done_rx.recv_timeout(TIMEOUT) {
        Ok(true) => {}
        outcome => {
            let _ = child.kill();
            let _ = child.wait();
            let mut stderr = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
            panic!("the writer did not reach {kill_at:?} ({outcome:?}): {stderr}");
        }
    }
    let status = child.wait().expect("reap the writer");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the writer ended on its own: {status}"
    );
    reader.join().expect("stdout reader")
}

/// Security case 55 against the kernel rather than a fault-injecting
/// writer: `RLIMIT_FSIZE` makes a real write come back short (then fail
/// with `EFBIG`), as a full file system would.
#[test]
fn hostile_55_a_real_short_write_is_rolled_back_and_appends_resume() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let path = dir.path().join("full.jsonl");
    let limit = 8 * 1024;
    let out = Command::new(moonkale_tests::bin("transcript-writer"))
        .args(["--fsize-limit", &limit.to_string()])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .expect("run transcript-writer");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let acks: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("ack "))
        .map(|n| n.parse().expect("ack number"))
        .collect();
    let error = lines
        .iter()
        .find_map(|l| l.strip_prefix("error "))
        .expect("an append failed at the limit");
    assert!(
        error.contains("short write") || error.contains("too large"),
        "{error}"
    );
    let len_at_error: u64 = lines
        .iter()
        .find_map(|l| l.strip_prefix("len "))
        .expect("length after the failure")
        .parse()
        .expect("length");
    assert!(len_at_error <= limit, "{len_at_error}");

    // The acknowledged records, then the one after the limit was lifted, and
    // not a byte of the failed one.
    let expected: Vec<u64> = (0..acks.len() as u64).collect();
    assert_eq!(acks, expected);
    let bytes = std::fs::read(&path).expect("read transcript");
    let before_lift = &bytes[..len_at_error as usize];
    assert_eq!(before_lift.last(), Some(&b'\n'));
    assert_eq!(
        before_lift.iter().filter(|&&b| b == b'\n').count(),
        acks.len() - 1
    );
    let last: Value = serde_json::from_slice(&bytes[len_at_error as usize..]).expect("last line");
    assert_eq!(last, json!({"after": "limit lifted"}));
    let transcript = Transcript::open(&path).expect("reopen");
    assert_eq!(transcript.recovery(), &Recovery::Clean);
    assert!(transcript.records().expect("records").bad.is_empty());
}
