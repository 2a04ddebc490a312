//! `Content-Length` framing with hard caps, for hostile peers.
//!
//! Every byte source is treated as hostile: a header line is at most
//! [`MAX_HEADER_LINE`] bytes, a header block at most [`MAX_HEADERS`] lines,
//! a body at most [`MAX_BODY`] bytes, and nothing is allocated for a body
//! before its bytes arrive. Only `Content-Length` and `Content-Type` headers
//! are accepted, in the strict `Name: value\r\n` form, so an HTTP request sent
//! to an LSP socket fails on its first line.
//!
//! What happens after a framing error is the caller's choice
//! ([`FrameReader::resync`]): on stdio, where the peer is the editor that
//! started us, skipping ahead to the next `Content-Length` is friendly; on a
//! socket it would let a smuggled frame inside garbage be executed, so socket
//! connections close instead.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const MAX_HEADER_LINE: usize = 8 * 1024;
pub const MAX_HEADERS: usize = 8;
pub const MAX_BODY: usize = 64 << 20;

const READ_CHUNK: usize = 64 * 1024;
const RESYNC_MARKER: &[u8] = b"Content-Length:";

/// The errors of reading frames: [`Error::BadHeader`],
/// [`Error::UnexpectedEof`] and [`Error::Io`] of the crate's one error type.
pub use crate::Error as FrameError;

/// Reads LSP frames from a byte stream.
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    pos: usize,
    /// Where the frame being read (or the scan of [`Self::resync`]) began;
    /// bytes from here on are kept in `buf`.
    frame_start: usize,
    /// During [`Self::resync`]: the end of the header lines of the frame
    /// that failed.
    failed_block_end: usize,
    eof: bool,
    max_body: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader::with_max_body(inner, MAX_BODY)
    }

    pub fn with_max_body(inner: R, max_body: usize) -> FrameReader<R> {
        FrameReader {
            inner,
            buf: Vec::new(),
            pos: 0,
            frame_start: 0,
            failed_block_end: 0,
            eof: false,
            max_body,
        }
    }

    /// The next frame's body, or `None` on a clean end of stream between
    /// frames.
    pub async fn read_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        self.frame_start = self.pos;
        let mut content_length: Option<usize> = None;
        let mut headers = 0;
        loop {
            let Some(line) = self.read_header_line(headers == 0).await? else {
                return Ok(None);
            };
            if line.is_empty() {
                break;
            }
            headers += 1;
            if headers > MAX_HEADERS {
                return Err(bad(format!("more than {MAX_HEADERS} header lines")));
            }
            let (name, value) = split_header(&line)?;
            if name.eq_ignore_ascii_case("content-length") {
                if content_length.is_some() {
                    return Err(bad("Content-Length given twice".into()));
                }
                content_length = Some(parse_content_length(value, self.max_body)?);
            } else if !name.eq_ignore_ascii_case("content-type") {
                return Err(bad(format!("unknown header {:?}", truncate(name))));
            }
        }
        let len = content_length.ok_or_else(|| bad("missing Content-Length".into()))?;
        while self.buf.len() - self.pos < len {
            if self.eof || self.fill().await? == 0 {
                return Err(FrameError::UnexpectedEof);
            }
        }
        let body = self.buf[self.pos..self.pos + len].to_vec();
        self.pos += len;
        Ok(Some(body))
    }

    /// Skips ahead to the next `Content-Length:` (stdio recovery only).
    /// The search starts just after the start of the frame that failed, so
    /// every recovery makes progress, and skips header lines of the failed
    /// block itself (a duplicated `Content-Length` line is not a new frame),
    /// but not a marker in the middle of a line (a body shorter than its
    /// `Content-Length` glues the next frame to its tail). Returns `false`
    /// when the stream ends first.
    pub async fn resync(&mut self) -> Result<bool, FrameError> {
        self.failed_block_end = self.pos;
        self.pos = (self.frame_start + 1).min(self.buf.len());
        loop {
            self.frame_start = self.pos;
            let window = &self.buf[self.pos..];
            let found = find_all(window, RESYNC_MARKER)
                .map(|at| self.pos + at)
                .find(|&at| {
                    let starts_failed_line =
                        at > 0 && at < self.failed_block_end && self.buf[at - 1] == b'\n';
                    !starts_failed_line
                });
            if let Some(at) = found {
                self.pos = at;
                return Ok(true);
            }
            // Keep a tail that could be the start of a split marker.
            self.pos += window.len().saturating_sub(RESYNC_MARKER.len() - 1);
            if self.eof || self.fill().await? == 0 {
                return Ok(false);
            }
        }
    }

    /// One header line without its `\r\n`; `None` on a clean EOF before the
    /// first byte of a frame.
    async fn read_header_line(&mut self, frame_start: bool) -> Result<Option<String>, FrameError> {
        loop {
            let window = &self.buf[self.pos..];
            if let Some(nl) = window.iter().position(|&b| b == b'\n') {
                if nl > MAX_HEADER_LINE {
                    return Err(bad(format!("header line over {MAX_HEADER_LINE} bytes")));
                }
                if nl == 0 || window[nl - 1] != b'\r' {
                    return Err(bad("header line does not end with \\r\\n".into()));
                }
                let line = std::str::from_utf8(&window[..nl - 1])
                    .map_err(|_| bad("header line is not UTF-8".into()))?
                    .to_owned();
                self.pos += nl + 1;
                return Ok(Some(line));
            }
            if window.len() > MAX_HEADER_LINE {
                return Err(bad(format!("header line over {MAX_HEADER_LINE} bytes")));
            }
            if self.eof || self.fill().await? == 0 {
                return if frame_start && self.buf.len() == self.pos {
                    Ok(None)
                } else {
                    Err(FrameError::UnexpectedEof)
                };
            }
        }
    }

    /// Reads more bytes; returns how many (0 at EOF).
    async fn fill(&mut self) -> std::io::Result<usize> {
        let keep_from = self.frame_start.min(self.pos);
        if keep_from > 0 && (keep_from == self.buf.len() || keep_from >= self.buf.len() / 2) {
            self.buf.drain(..keep_from);
            self.pos -= keep_from;
            self.frame_start -= keep_from;
            self.failed_block_end = self.failed_block_end.saturating_sub(keep_from);
        }
        let old = self.buf.len();
        self.buf.resize(old + READ_CHUNK, 0);
        let n = self.inner.read(&mut self.buf[old..]).await;
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                self.buf.truncate(old);
                return Err(e);
            }
        };
        self.buf.truncate(old + n);
        if n == 0 {
            self.eof = true;
        }
        Ok(n)
    }
}

fn bad(why: String) -> FrameError {
    FrameError::BadHeader(why)
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

fn split_header(line: &str) -> Result<(&str, &str), FrameError> {
    let Some((name, value)) = line.split_once(": ") else {
        return Err(bad(format!(
            "not a `Name: value` header: {:?}",
            truncate(line)
        )));
    };
    let is_token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !is_token {
        return Err(bad(format!("not a header name: {:?}", truncate(name))));
    }
    Ok((name, value.trim_end_matches(' ')))
}

fn parse_content_length(value: &str, max_body: usize) -> Result<usize, FrameError> {
    // Digits only: no sign, no hex, no exponent; 20 digits cannot overflow u64
    // checks below, longer strings are refused before parsing.
    if value.is_empty() || value.len() > 20 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(format!(
            "Content-Length is not a decimal number: {:?}",
            truncate(value)
        )));
    }
    let len: u64 = value
        .parse()
        .map_err(|_| bad("Content-Length out of range".into()))?;
    if len > max_body as u64 {
        return Err(bad(format!(
            "Content-Length {len} is over the {max_body}-byte cap"
        )));
    }
    Ok(len as usize)
}

fn find_all<'a>(haystack: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(move |(_, w)| *w == needle)
        .map(|(i, _)| i)
}

/// Frames `body` with a `Content-Length` header.
pub fn encode_frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> std::io::Result<()> {
    w.write_all(&encode_frame(body)).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    /// Reads frames from `input` until EOF or an error (resyncing when
    /// `resync`), printing one line per outcome.
    #[track_caller]
    fn check_with(input: &[u8], resync: bool, expect: Expect) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let out = rt.block_on(async {
            let mut r = FrameReader::with_max_body(input, 1000);
            let mut out = String::new();
            loop {
                match r.read_frame().await {
                    Ok(Some(body)) => {
                        out += &format!("frame {:?}\n", String::from_utf8_lossy(&body))
                    }
                    Ok(None) => {
                        out += "eof\n";
                        break;
                    }
                    Err(e) => {
                        out += &format!("error: {e}\n");
                        if !resync || !r.resync().await.unwrap() {
                            break;
                        }
                    }
                }
            }
            out
        });
        expect.assert_eq(&out);
    }

    #[track_caller]
    fn check(input: &[u8], expect: Expect) {
        check_with(input, false, expect)
    }

    #[test]
    fn two_frames_then_eof() {
        check(
            b"Content-Length: 2\r\n\r\n{}Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: 3\r\n\r\n[1]",
            expect![[r#"
                frame "{}"
                frame "[1]"
                eof
            "#]],
        );
    }

    #[test]
    fn content_length_forms_that_are_refused() {
        for value in [
            "-1",
            "+5",
            "0x10",
            "1e3",
            &"9".repeat(400),
            "1001",
            " 5",
            "",
        ] {
            let input = format!("Content-Length: {value}\r\n\r\n{{}}");
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let got = rt.block_on(FrameReader::with_max_body(input.as_bytes(), 1000).read_frame());
            assert!(
                matches!(got, Err(FrameError::BadHeader(_))),
                "{value:?} gave {got:?}"
            );
        }
    }

    #[test]
    fn header_violations() {
        check(
            b"Content-Length:5\r\n\r\nhello",
            expect![[r#"
            error: bad header: not a `Name: value` header: "Content-Length:5"
        "#]],
        );
        check(
            b"Content-Length: 2\n\n{}",
            expect![[r#"
            error: bad header: header line does not end with \r\n
        "#]],
        );
        check(
            b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            expect![[r#"
            error: bad header: Content-Length given twice
        "#]],
        );
        check(
            b"Content-Type: x\r\n\r\n{}",
            expect![[r#"
            error: bad header: missing Content-Length
        "#]],
        );
        check(
            b"Content-Length: 10\r\n\r\n{}",
            expect![[r#"
            error: stream ended inside a frame
        "#]],
        );
        check(
            b"Content-Len",
            expect![[r#"
            error: stream ended inside a frame
        "#]],
        );
    }

    #[test]
    fn http_request_fails_on_its_first_line() {
        check(
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nContent-Length: 2\r\n\r\n{}",
            expect![[r#"
                error: bad header: not a `Name: value` header: "POST / HTTP/1.1"
            "#]],
        );
    }

    #[test]
    fn stdio_recovery_skips_to_the_next_content_length() {
        check_with(
            b"garbage\r\n\r\nContent-Length: 2\r\n\r\n{}Content-Length: x\r\n\r\nContent-Length: 1\r\n\r\n1",
            true,
            expect![[r#"
                error: bad header: not a `Name: value` header: "garbage"
                frame "{}"
                error: bad header: Content-Length is not a decimal number: "x"
                frame "1"
                eof
            "#]],
        );
    }

    #[test]
    fn stdio_recovery_always_makes_progress() {
        check_with(
            b"Content-Length: 2\n\n{}Content-Type: x\r\n\r\nContent-Length: 1\r\n\r\n1",
            true,
            expect![[r#"
                error: bad header: header line does not end with \r\n
                frame "1"
                eof
            "#]],
        );
    }

    #[test]
    fn header_line_and_count_caps() {
        let mut long = b"Content-Type: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 1 << 20));
        check(
            &long,
            expect![[r#"
            error: bad header: header line over 8192 bytes
        "#]],
        );
        let many = "Content-Type: x\r\n".repeat(10_000);
        check(
            many.as_bytes(),
            expect![[r#"
            error: bad header: more than 8 header lines
        "#]],
        );
    }

    /// Yields its bytes in the given pieces, one piece per read.
    struct Pieces(std::collections::VecDeque<Vec<u8>>);

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(mut piece) = self.0.pop_front() {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                if n < piece.len() {
                    self.0.push_front(piece.split_off(n));
                }
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn frames_of(pieces: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            // An empty read means end of stream, so empty pieces are left out.
            let pieces = pieces.into_iter().filter(|p| !p.is_empty()).collect();
            let mut r = FrameReader::new(Pieces(pieces));
            let mut out = Vec::new();
            while let Some(f) = r.read_frame().await.unwrap() {
                out.push(f);
            }
            out
        })
    }

    /// Security case 21: the same stream split at every byte boundary (and
    /// at every pair of boundaries) gives the same frames in order.
    #[test]
    fn hostile_21_partial_reads_at_every_split() {
        let bodies: Vec<&[u8]> = vec![b"{\"a\":\"\xf0\x9f\x98\x80\"}", b"[]", b"{}"];
        let mut stream = Vec::new();
        for b in &bodies {
            stream.extend(encode_frame(b));
        }
        let want: Vec<Vec<u8>> = bodies.iter().map(|b| b.to_vec()).collect();
        for i in 0..=stream.len() {
            assert_eq!(
                frames_of(vec![stream[..i].to_vec(), stream[i..].to_vec()]),
                want,
                "split at {i}"
            );
            for j in i..=stream.len() {
                let pieces = vec![
                    stream[..i].to_vec(),
                    stream[i..j].to_vec(),
                    stream[j..].to_vec(),
                ];
                assert_eq!(frames_of(pieces), want, "split at {i} and {j}");
            }
        }
        let bytewise = stream.iter().map(|&b| vec![b]).collect();
        assert_eq!(frames_of(bytewise), want);
    }
}
