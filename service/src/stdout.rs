//! What a command prints for a person or a pipe. A reader that went away
//! (`moonkale-service man | head -1`) ends the command quietly, as it ends
//! `ls | head`: Rust's `print!` would panic there, and the service keeps
//! SIGPIPE ignored (a closed socket must not kill it), so the pipe's end
//! is seen here as `BrokenPipe`.

use std::io::Write as _;

/// Writes `text` to stdout and flushes it; exits with 0 when the reader
/// closed the pipe. Another error (a full disk behind a redirect) ends the
/// command with one sentence.
pub fn write(text: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = write!(out, "{text}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("moonkale-service: could not write the output: {e}");
        std::process::exit(1);
    }
}

/// [`write`] with a newline.
pub fn line(text: impl std::fmt::Display) {
    write(format_args!("{text}\n"));
}

/// `println!` through [`line`].
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::stdout::line(format_args!($($arg)*)) };
}

/// `print!` through [`write`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*)) };
}
