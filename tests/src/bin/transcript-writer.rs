//! `transcript-writer`: the writer child of the transcript crash tests
//! (`tests/tests/transcript_crash.rs`, security cases 53 and 55).
//!
//! `transcript-writer <path>` opens the transcript and appends records
//! `{"seq": n, "pid": …, "pad": …}` forever, printing `n` on its own line
//! (flushed) only after `append` returned it, so every printed number is an
//! acknowledged record. Just before each `write` it prints `w <bytes>`, so
//! the parent can aim a kill into a write of a big record. Pads vary in
//! size (now and then hundreds of KiB) and hold multi-byte characters and
//! characters JSON escapes, so a torn tail can end inside a code point.
//!
//! `transcript-writer --fsize-limit <bytes> <path>` lowers `RLIMIT_FSIZE`
//! so the kernel itself cuts a write short (then refuses with `EFBIG`),
//! appends until an append fails, prints `ack <n>` per record, `error
//! <message>` and `len <bytes on disk>`, then lifts the limit and appends
//! once more (`ack <n>`): a real short write, without root or a tiny tmpfs.

use std::io::Write;
use std::process::ExitCode;

use std::fs::File;

use moonkale_service::agent::transcript::{AppendIo, OsIo, Transcript};
use serde_json::json;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [path] => forever(path),
        [flag, limit, path] if flag == "--fsize-limit" => match limit.parse() {
            Ok(limit) => until_full(path, limit),
            Err(_) => Err(format!("bad limit {limit:?}")),
        },
        _ => Err("usage: transcript-writer [--fsize-limit <bytes>] <transcript.jsonl>".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("transcript-writer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn forever(path: &str) -> Result<(), String> {
    let mut transcript =
        Transcript::open_with(path, Box::new(Announce)).map_err(|e| e.to_string())?;
    let mut rng = Rng::seeded();
    loop {
        let seq = transcript.next_seq();
        let record = json!({"seq": seq, "pid": std::process::id(), "pad": pad(&mut rng)});
        let acked = transcript.append(&record).map_err(|e| e.to_string())?;
        if acked != seq {
            return Err(format!("expected sequence number {seq}, got {acked}"));
        }
        say(&acked.to_string()).map_err(|e| format!("stdout: {e}"))?;
    }
}

fn say(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// The real file operations, each write announced first.
struct Announce;

impl AppendIo for Announce {
    fn write(&mut self, file: &File, line: &[u8]) -> std::io::Result<usize> {
        say(&format!("w {}", line.len()))?;
        OsIo.write(file, line)
    }

    fn sync(&mut self, file: &File) -> std::io::Result<()> {
        OsIo.sync(file)
    }

    fn truncate(&mut self, file: &File, len: u64) -> std::io::Result<()> {
        OsIo.truncate(file, len)
    }
}

fn until_full(path: &str, limit: u64) -> Result<(), String> {
    // Without this the kernel kills us with SIGXFSZ instead of returning
    // the error.
    // SAFETY: ignoring a signal has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let mut transcript = Transcript::open(path).map_err(|e| e.to_string())?;
    set_fsize_limit(limit)?;
    let mut out = std::io::stdout().lock();
    loop {
        let seq = transcript.next_seq();
        let record = json!({"seq": seq, "pad": "é".repeat(300)});
        match transcript.append(&record) {
            Ok(n) => writeln!(out, "ack {n}").map_err(|e| e.to_string())?,
            Err(e) => {
                writeln!(out, "error {e}").map_err(|e| e.to_string())?;
                break;
            }
        }
    }
    let on_disk = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    writeln!(out, "len {on_disk}").map_err(|e| e.to_string())?;
    set_fsize_limit(libc::RLIM_INFINITY)?;
    let n = transcript
        .append(&json!({"after": "limit lifted"}))
        .map_err(|e| e.to_string())?;
    writeln!(out, "ack {n}").map_err(|e| e.to_string())
}

fn set_fsize_limit(limit: libc::rlim_t) -> Result<(), String> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid rlimit the calls read or fill.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_FSIZE, &mut rl) != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        rl.rlim_cur = limit.min(rl.rlim_max);
        if libc::setrlimit(libc::RLIMIT_FSIZE, &rl) != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
    }
    Ok(())
}

/// Mostly short pads, one in eight between 16 and 256 KiB.
fn pad(rng: &mut Rng) -> String {
    const PIECES: [&str; 6] = ["x", "é", "🌙", "\"", "\\", "\n"];
    let len = if rng.next().is_multiple_of(8) {
        16 * 1024 + rng.next() % (240 * 1024)
    } else {
        rng.next() % 200
    };
    let mut pad = String::new();
    while (pad.len() as u64) < len {
        // Runs of one piece keep this cheap in a debug build.
        let piece = PIECES[(rng.next() % PIECES.len() as u64) as usize];
        pad.push_str(&piece.repeat(1 + (rng.next() % 64) as usize));
    }
    pad
}

/// xorshift64*: enough to vary sizes, no dependency.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Rng((nanos ^ u64::from(std::process::id()).rotate_left(32)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
