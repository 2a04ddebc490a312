//! The HTTP pieces both WebSocket listeners (Claude Code's IDE server and
//! the remote front door) need before tungstenite takes over: reading a
//! bounded request head, parsing it ([`head`]), replaying it, and refusing
//! with a status.
//!
//! It is a top-level module under `ide` and `remote` because both stand on
//! it; it depends on nothing of the service.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

pub mod head;

pub use head::{Head, MAX_HEAD, MAX_HEADER_LINES, Refusal, TOO_LARGE, parse_head, plain_upgrade};

/// Reads up to the blank line that ends a request head: the bytes read
/// (possibly more than the head) and the head's length. `None` when the
/// client went away; 431 past [`MAX_HEAD`].
pub async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Option<Result<(Vec<u8>, usize), Refusal>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_len = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        // Only the new bytes (and 3 before) can complete the terminator, so
        // a head sent a byte at a time costs linear, not quadratic, work.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            break from + end + 4;
        }
        if head.len() > MAX_HEAD {
            return Some(Err(TOO_LARGE));
        }
    };
    if head_len > MAX_HEAD {
        return Some(Err(TOO_LARGE));
    }
    Some(Ok((head, head_len)))
}

/// Answers `refusal` and closes the stream.
pub async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S, refusal: Refusal) {
    let _ = stream.write_all(&refusal.response()).await;
    let _ = stream.shutdown().await;
}

/// A stream that first replays bytes already read (the request head).
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.prefix.len() {
            let n = (this.prefix.len() - this.pos).min(buf.remaining());
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S> Prefixed<S> {
    pub fn new(prefix: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed {
            prefix,
            pos: 0,
            inner,
        }
    }
}
