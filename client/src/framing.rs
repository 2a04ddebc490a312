//! `Content-Length` framing, as the service speaks it, with the service's
//! own caps, so a broken or hostile peer costs a bounded amount of memory.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest body accepted (the service's own cap).
pub const MAX_BODY: usize = 64 << 20;
/// Longest header line.
const MAX_HEADER_LINE: u64 = 8 << 10;
/// Most header lines of one frame.
const MAX_HEADER_LINES: usize = 8;

/// Reads one frame's body; `None` at a clean end of the stream (before a
/// frame began).
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Vec<u8>>, String> {
    let mut length = None;
    let mut line = Vec::new();
    for index in 0.. {
        if index > MAX_HEADER_LINES {
            return Err("too many header lines".into());
        }
        line.clear();
        let read = (&mut *reader)
            .take(MAX_HEADER_LINE)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| e.to_string())?;
        if read == 0 {
            return if index == 0 {
                Ok(None)
            } else {
                Err("the stream ended inside a header".into())
            };
        }
        if !line.ends_with(b"\n") {
            return Err("a header line is too long".into());
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| "a header line is not UTF-8".to_owned())?
            .trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| format!("a header line without a colon: {text:?}"))?;
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .trim()
                .parse()
                .map_err(|_| format!("a bad Content-Length: {value:?}"))?;
            length = Some(n);
        }
    }
    let length = length.ok_or("a frame without Content-Length")?;
    if length > MAX_BODY {
        return Err(format!("a frame of {length} bytes (at most {MAX_BODY})"));
    }
    let mut body = vec![0; length];
    reader
        .read_exact(&mut body)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Some(body))
}

pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    body: &[u8],
) -> std::io::Result<()> {
    let header = format!("Content-Length: {}\r\n\r\n", body.len());
    writer.write_all(header.as_bytes()).await?;
    writer.write_all(body).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8]) -> Vec<Result<Option<Vec<u8>>, String>> {
        let mut reader = tokio::io::BufReader::new(input);
        let mut out = Vec::new();
        loop {
            let frame = read_frame(&mut reader).await;
            let done = !matches!(frame, Ok(Some(_)));
            out.push(frame);
            if done {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn frames_are_read_whole_and_bad_ones_refused() {
        let mut written = Vec::new();
        write_frame(&mut written, b"{}").await.unwrap();
        write_frame(&mut written, b"[1]").await.unwrap();
        assert_eq!(
            frames(&written).await,
            [
                Ok(Some(b"{}".to_vec())),
                Ok(Some(b"[1]".to_vec())),
                Ok(None)
            ]
        );
        let too_big = format!("Content-Length: {}\r\n\r\n", MAX_BODY + 1);
        for (input, why) in [
            (too_big.as_str(), "a frame of"),
            ("Content-Type: x\r\n\r\n", "without Content-Length"),
            ("Content-Length: 5\r\n", "inside a header"),
            ("Content-Length: -1\r\n\r\n", "bad Content-Length"),
        ] {
            let got = frames(input.as_bytes()).await;
            let Some(Err(e)) = got.last() else {
                panic!("{input:?}: {got:?}");
            };
            assert!(e.contains(why), "{input:?}: {e}");
        }
        let long = format!("X: {}\r\n", "a".repeat(9000));
        assert!(frames(long.as_bytes()).await[0].is_err());
    }
}
