//! Stdin and stdout for LSP over stdio, without tokio's blocking thread pool.
//!
//! `tokio::io::stdin()` reads on a blocking thread and hands bytes over, which
//! costs a thread hop per read: tens of microseconds per message. Editors give
//! us pipes (or socket pairs), which epoll can watch directly, so those are
//! registered with the reactor; anything else (a file, a terminal) falls back
//! to tokio's portable stdin/stdout.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

pub type BoxRead = Pin<Box<dyn AsyncRead + Send>>;
pub type BoxWrite = Pin<Box<dyn AsyncWrite + Send>>;

/// Must be called inside a tokio runtime with IO enabled.
pub fn stdin() -> BoxRead {
    match reactor_fd(libc::STDIN_FILENO) {
        Some(Registered::Pipe(fd)) => match pipe::Receiver::from_owned_fd(fd) {
            Ok(rx) => return Box::pin(rx),
            Err(e) => tracing::debug!("stdin pipe not registrable: {e}"),
        },
        Some(Registered::Socket(s)) => return Box::pin(s),
        None => {}
    }
    Box::pin(tokio::io::stdin())
}

/// Must be called inside a tokio runtime with IO enabled.
pub fn stdout() -> BoxWrite {
    match reactor_fd(libc::STDOUT_FILENO) {
        Some(Registered::Pipe(fd)) => match pipe::Sender::from_owned_fd(fd) {
            Ok(tx) => return Box::pin(tx),
            Err(e) => tracing::debug!("stdout pipe not registrable: {e}"),
        },
        Some(Registered::Socket(s)) => return Box::pin(s),
        None => {}
    }
    Box::pin(tokio::io::stdout())
}

enum Registered {
    Pipe(OwnedFd),
    Socket(tokio::net::UnixStream),
}

/// A duplicate of `fd` that the reactor can watch, if it is a pipe or a unix
/// socket. Duplicating keeps fds 0 and 1 themselves open for the process.
fn reactor_fd(fd: RawFd) -> Option<Registered> {
    // SAFETY: F_DUPFD_CLOEXEC on a possibly-closed fd fails with EBADF and
    // returns -1; on success we own the new descriptor.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return None;
    }
    // SAFETY: `dup` is a fresh descriptor that nothing else owns.
    let file = unsafe { File::from_raw_fd(dup) };
    let kind = file.metadata().ok()?.file_type();
    if kind.is_fifo() {
        Some(Registered::Pipe(OwnedFd::from(file)))
    } else if kind.is_socket() {
        let std = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        std.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(std)
            .ok()
            .map(Registered::Socket)
    } else {
        None
    }
}
