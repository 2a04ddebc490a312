//! One page's WebSocket as liveview's socket, bounded both ways:
//!
//! - **in**: at most [`RATE`] messages a second after a burst of [`BURST`]
//!   ([`Pace`]); past that the page's messages are read more slowly, not
//!   dropped (a paste or a held key loses nothing, a flood costs the
//!   service no more than the rate). A page that sent nothing for
//!   [`PAGE_IDLE`] (its script pings every 30 s) is gone.
//! - **out**: a page that stops reading (a suspended tab, a stalled
//!   network) holds its own render and nothing else: its edits wait in
//!   its socket's bounded buffer, and a write that cannot go out for
//!   [`WRITE_STALL`] ends the page ([`Deadline`]), freeing its slot and
//!   its connection to the service. The service never waits for a page:
//!   the page's client drops notifications it does not read in time and
//!   reads again what it missed.
//! - **no strings to evaluate**: liveview's queries (scripts the page
//!   would run through `Function()`, which its policy forbids) are never
//!   sent ([`is_query`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_tungstenite::tungstenite::Message;

/// A page that sent nothing for this long is gone: a phone that slept, a
/// tab that was killed.
pub const PAGE_IDLE: Duration = Duration::from_secs(75);
/// Messages a second a page may send, sustained.
pub const RATE: u32 = 50;
/// Messages a page may send at once before [`RATE`] applies.
pub const BURST: u32 = 200;
/// A write to a page that makes no progress for this long ends the page.
pub const WRITE_STALL: Duration = Duration::from_secs(20);

/// A token bucket: [`Pace::take`] says how long to wait before the next
/// message may be read.
#[derive(Debug)]
pub struct Pace {
    tokens: f64,
    at: Instant,
}

impl Pace {
    pub fn new(now: Instant) -> Pace {
        Pace {
            tokens: f64::from(BURST),
            at: now,
        }
    }

    /// Takes one message's token at `now`; the wait before reading it.
    pub fn take(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(RATE)).min(f64::from(BURST));
        self.at = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / f64::from(RATE))
        }
    }
}

/// The page's WebSocket as liveview's socket: text and binary frames in
/// as bytes, paced; edits out as binary frames. The stream ends at the
/// first error, a close, or [`PAGE_IDLE`] without a frame, so liveview's
/// loop (which ignores errors) ends with it.
pub fn socket<S>(ws: tokio_tungstenite::WebSocketStream<S>) -> impl dioxus_liveview::LiveViewSocket
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    let outgoing = sink
        .with(|bytes: Vec<u8>| async move {
            Ok::<_, tokio_tungstenite::tungstenite::Error>(Message::Binary(bytes.into()))
        })
        .sink_map_err(|_| dioxus_liveview::LiveViewError::SendingFailed);
    let pace = Pace::new(Instant::now());
    let incoming = futures_util::stream::unfold((stream, pace), |(mut ws, mut pace)| async move {
        loop {
            let frame = tokio::time::timeout(PAGE_IDLE, ws.next()).await.ok()??;
            let bytes = match frame {
                Ok(Message::Text(text)) => text.as_bytes().to_vec(),
                Ok(Message::Binary(bytes)) => bytes.to_vec(),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            };
            let wait = pace.take(Instant::now());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            return Some((Ok(bytes), (ws, pace)));
        }
    });
    PageSocket {
        outgoing: Box::pin(outgoing),
        incoming: Box::pin(incoming),
    }
}

/// A sink and a stream as one value, which liveview's socket must be.
struct PageSocket<O, I> {
    outgoing: Pin<Box<O>>,
    incoming: Pin<Box<I>>,
}

impl<O, I: futures_util::Stream> futures_util::Stream for PageSocket<O, I> {
    type Item = I::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<I::Item>> {
        self.incoming.as_mut().poll_next(cx)
    }
}

impl<O: futures_util::Sink<Vec<u8>>, I> futures_util::Sink<Vec<u8>> for PageSocket<O, I> {
    type Error = O::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), O::Error>> {
        self.outgoing.as_mut().poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: Vec<u8>) -> Result<(), O::Error> {
        if is_query(&item) {
            return Ok(());
        }
        self.outgoing.as_mut().start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), O::Error>> {
        self.outgoing.as_mut().poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), O::Error>> {
        self.outgoing.as_mut().poll_close(cx)
    }
}

/// Whether a frame for the page is one of liveview's queries: a script
/// the page would evaluate as a string (`Function(…)`), which its policy
/// forbids (no `unsafe-eval`). The shell asks none; liveview's own history
/// asks for the page's location once, and waits for the answer that never
/// comes (it is the only one, and the shell does not use liveview's
/// history: the page's own script keeps its place, `app.js`). Liveview
/// marks a text frame with a leading 0 (edits are binary, marked 1).
fn is_query(frame: &[u8]) -> bool {
    frame
        .strip_prefix(&[0])
        .is_some_and(|text| text.starts_with(br#"{"type":"query""#))
}

/// A connection whose writes fail once one made no progress for
/// [`WRITE_STALL`]: the peer stopped reading.
pub struct Deadline<S> {
    inner: S,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> Deadline<S> {
    pub fn new(inner: S) -> Deadline<S> {
        Deadline {
            inner,
            stalled: None,
        }
    }

    /// After a pending write: fails once the stall lasted too long.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the page stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        done: Poll<std::io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<T>> {
        match done {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Deadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Deadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let done = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progressed(done, cx)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let done = Pin::new(&mut self.inner).poll_flush(cx);
        self.progressed(done, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst goes through at once; a flood is read at the rate, never
    /// dropped; a page that paused has its burst back.
    #[test]
    fn a_flood_is_read_at_the_rate() {
        let t0 = Instant::now();
        let mut pace = Pace::new(t0);
        for _ in 0..BURST {
            assert_eq!(pace.take(t0), Duration::ZERO);
        }
        // 100 more at the same instant: the last waits 100 / RATE seconds.
        let waits: Vec<Duration> = (0..100).map(|_| pace.take(t0)).collect();
        assert_eq!(waits[0], Duration::from_millis(20));
        assert_eq!(waits[99], Duration::from_secs(2));
        // After a long pause, a burst again.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(pace.take(later), Duration::ZERO);
    }

    /// Liveview's queries are strings to evaluate: never sent; its pongs
    /// and edits are.
    #[test]
    fn no_script_is_sent_to_be_evaluated() {
        let query = [&[0u8][..], br#"{"type":"query","data":"return 1;"}"#].concat();
        assert!(is_query(&query));
        assert!(!is_query(b"\0__pong__"));
        let edits = [&[1u8][..], br#"{"type":"query""#].concat();
        assert!(!is_query(&edits));
    }

    /// A peer that never reads: the write fails after the stall, not
    /// before; one that reads again resets it.
    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_ends_the_page() {
        use tokio::io::AsyncWriteExt;
        let (ours, _theirs) = tokio::io::duplex(1024);
        let mut page = Deadline::new(ours);
        let block = vec![b'x'; 1024];
        page.write_all(&block).await.unwrap();
        let started = Instant::now();
        let stuck = page.write_all(&block).await.unwrap_err();
        assert_eq!(stuck.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), WRITE_STALL);
        // Reading makes room: writes go on.
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut page = Deadline::new(ours);
        let reader = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut sink = vec![0; 4096];
            let mut total = 0;
            while total < 8 * 1024 {
                tokio::time::sleep(Duration::from_secs(5)).await;
                total += theirs.read(&mut sink).await.unwrap();
            }
        });
        for _ in 0..8 {
            page.write_all(&block).await.unwrap();
        }
        reader.await.unwrap();
    }
}
