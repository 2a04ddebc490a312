//! The checks behind the fuzz targets (`fuzz_targets/`), one function per
//! target, so that `tests/replay.rs` can run every committed seed and every
//! input that ever crashed through the same code in a plain `cargo test`.
//! Each function panics when its property does not hold.

use moonkale_claude::stream::Decoder;
use moonkale_service::agent::transcript::Transcript;
use moonkale_service::core::position::{
    PositionEncoding, WirePosition, clamp_char_idx, clamp_to_line_col, to_char_idx, to_wire,
};
use moonkale_service::ide::handshake;
use moonkale_service::workspace_fs::confine;
use moonkale_service::lsp::message;
use moonkale_service::remote::auth;
use moonkale_wire::framing::{FrameReader, encode_frame};
use ropey::Rope;
use serde_json::json;
use std::path::{Component, Path, PathBuf};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// LSP framing and message parsing (security.md 17–30): any bytes from a
/// socket or stdio must end in frames, a clean error or end of input, never
/// a panic or a hang; every frame read back from `encode_frame` is the body
/// that went in.
pub fn lsp_frames(data: &[u8]) {
    runtime().block_on(async {
        // As a stream: frames until an error or the end.
        let mut reader = FrameReader::with_max_body(data, 1 << 20);
        for _ in 0..1000 {
            match reader.read_frame().await {
                Ok(Some(body)) => {
                    let _ = message::parse(&body);
                    // What we send, we read back unchanged.
                    let framed = encode_frame(&body);
                    let mut again = FrameReader::new(framed.as_slice());
                    let back = again.read_frame().await.expect("our own frame");
                    assert_eq!(back.as_deref(), Some(body.as_slice()));
                }
                Ok(None) | Err(_) => break,
            }
        }
        // As one body.
        let _ = message::parse(data);
    });
}

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The WebSocket upgrade decisions (security.md 1–16, 40): Claude Code's
/// IDE server and the remote front door. Any request head is parsed or
/// refused without a panic, and a head is accepted only if it carries the
/// token.
pub fn ws_handshake(data: &[u8]) {
    let Ok(head) = moonkale_service::http::parse_head(data) else {
        return;
    };
    let ide = handshake::decide(&head, handshake::HostRule::Port(45678), TOKEN);
    let remote = auth::decide(&head, TOKEN);
    if ide.is_ok() || remote.is_ok() {
        assert!(
            contains(data, TOKEN.as_bytes()),
            "accepted without the token"
        );
    }
    if let Err(refusal) = ide.and(remote) {
        let _ = refusal.response();
    }
}

fn root() -> &'static PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("mkfuzz")
            .tempdir()
            .expect("tempdir")
            .keep();
        let root = std::fs::canonicalize(&dir).expect("canonical").join("ws");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        let _ = std::os::unix::fs::symlink(dir.join("outside"), root.join("out"));
        let _ = std::os::unix::fs::symlink(&root, root.join("sub/loop"));
        let _ = std::os::unix::fs::symlink("/etc/passwd", root.join("passwd"));
        root
    })
}

/// Path confinement (security.md 31–37): whatever string Claude Code or a
/// remote client names, an accepted path lies strictly inside the root by
/// whole components, has no `..`, no `.git` component, and no symlink on the
/// way (the root holds a symlink to outside, one to itself and a `.git`).
pub fn path_confinement(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let root = root();
    // Fuzz both absolute guesses and paths under the real root.
    for candidate in [raw.to_owned(), format!("{}/{raw}", root.display())] {
        let Ok(path) = confine(std::slice::from_ref(root), &candidate) else {
            continue;
        };
        assert!(path.starts_with(root) && path.as_path() != root, "{path:?}");
        let inside = path.strip_prefix(root).expect("inside");
        let mut at = root.to_path_buf();
        for c in inside.components() {
            assert!(matches!(c, Component::Normal(_)), "{path:?}");
            assert!(!c.as_os_str().eq_ignore_ascii_case(".git"), "{path:?}");
            at.push(c);
            if let Ok(meta) = std::fs::symlink_metadata(&at) {
                assert!(
                    !meta.file_type().is_symlink(),
                    "through a symlink: {path:?}"
                );
            }
        }
        assert!(Path::new(&candidate).is_absolute());
    }
}

const ENCODINGS: [PositionEncoding; 3] = [
    PositionEncoding::Utf8,
    PositionEncoding::Utf16,
    PositionEncoding::Utf32,
];

/// Position conversion in all three encodings: for any text and any wire
/// position, conversion lands inside the text, and a char index converted
/// to the wire and back is the same index, in utf-8, utf-16 and utf-32.
pub fn positions(data: &[u8]) {
    if data.len() < 8 {
        return;
    }
    let (nums, text) = data.split_at(8);
    let text = String::from_utf8_lossy(text);
    let rope = Rope::from_str(&text);
    let line = u32::from_le_bytes([nums[0], nums[1], nums[2], nums[3]]) % 64;
    let character = u32::from_le_bytes([nums[4], nums[5], nums[6], nums[7]]) % 512;
    let wire = WirePosition { line, character };
    for encoding in ENCODINGS {
        let idx = to_char_idx(&rope, wire, encoding);
        assert!(idx.get() <= rope.len_chars());
        let back = to_char_idx(&rope, to_wire(&rope, idx, encoding), encoding);
        assert_eq!(back, idx, "{encoding:?} round trip of {wire:?} in {text:?}");
        let _ = clamp_to_line_col(&rope, wire, encoding);
        let raw = character as usize * 7 + line as usize;
        assert!(clamp_char_idx(&rope, raw).get() <= rope.len_chars());
    }
}

fn decode(chunks: &[&[u8]]) -> Vec<String> {
    let mut decoder = Decoder::with_max_line(4096);
    let mut out = Vec::new();
    for chunk in chunks {
        for item in decoder.push(chunk) {
            out.push(format!("{item:?}"));
        }
    }
    if let Some(item) = decoder.finish() {
        out.push(format!("{item:?}"));
    }
    out
}

/// Decoding the CLI's stream-json stdout: any bytes, however they are
/// split into reads, decode to the same messages and errors, without a panic.
pub fn stream_json(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let whole = decode(&[rest]);
    let at = (split as usize).min(rest.len());
    let (a, b) = rest.split_at(at);
    assert_eq!(decode(&[a, b]), whole, "split at {at}");
    let bytes: Vec<&[u8]> = rest.chunks(1).collect();
    assert_eq!(decode(&bytes), whole, "byte by byte");
}

/// Transcript recovery (security.md 53–55): whatever a crash or a hostile
/// hand left in a session file, opening it never panics; a writable
/// transcript takes one more record, and reopening it reads that record
/// back after everything it had.
pub fn transcript_recovery(data: &[u8]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, data).expect("write");
    let Ok(mut t) = Transcript::open(&path) else {
        return;
    };
    let Ok(before) = t.records() else {
        return;
    };
    if t.read_only().is_some() {
        return;
    }
    let marker = json!({"kind": "fuzz", "n": before.records.len()});
    let seq = t.append(&marker).expect("append to a writable transcript");
    drop(t);
    let t = Transcript::open(&path).expect("reopen");
    let after = t.records().expect("records");
    assert_eq!(after.records.len(), before.records.len() + 1);
    let last = after.records.last().expect("the new record");
    assert_eq!((last.seq, &last.value), (seq, &marker));
}

/// Claude Code's JSON-RPC on the IDE WebSocket (security.md 1–16, 31–37):
/// any message is parsed or refused; `initialize` and `tools/call` are
/// answered without a panic, and a call writes nothing outside the
/// workspace (a file beside it stays as it was).
pub fn mcp_calls(data: &[u8]) {
    use moonkale_service::ide::mcp;
    let root = root();
    let beside = root.parent().expect("parent").join("outside/secret.txt");
    if !beside.exists() {
        std::fs::write(&beside, "SECRET\n").expect("write");
    }
    // Seeds say ROOT for the workspace, which is only known now.
    let text = String::from_utf8_lossy(data).replace("ROOT", &root.display().to_string());
    let Ok(msg) = message::parse(text.as_bytes()) else {
        return;
    };
    let (method, params) = match msg {
        message::Message::Request { method, params, .. }
        | message::Message::Notification { method, params } => (method, params),
        message::Message::Response { .. } => return,
    };
    let params: serde_json::Value = serde_json::from_str(params.get()).unwrap_or_default();
    match method.as_str() {
        "initialize" => {
            let _ = mcp::SERVER.initialize_result(&params);
        }
        "tools/call" => {
            let root = moonkale_service::workspace_fs::Root::open(root).expect("the fuzz root");
            // Proposals go to a runtime directory of the fuzz run's own,
            // beside the workspace.
            let run = root.path().parent().expect("beside the root").join("run");
            let proposals = moonkale_service::ide::proposals::ProposalDir::in_runtime(run);
            let _ = mcp::prepare_call(&params, &root, &proposals);
        }
        _ => {}
    }
    assert_eq!(std::fs::read_to_string(&beside).expect("read"), "SECRET\n");
    // Proposals written by openDiff: whole, inside, and gone before the
    // next input (millions of runs must not fill the disk).
    let proposals = root.join(".moonkale");
    let _ = std::fs::remove_dir_all(&proposals);
}

/// A whole LSP session (security.md 17–30): any bytes from an editor go
/// through the connection's framing and lifecycle into a real hub, and the
/// session ends without a panic once the editor's input ends.
pub fn lsp_session(data: &[u8]) {
    use moonkale_service::hub::Transport;
    use moonkale_service::lsp::connection::{ConnectionConfig, HubSelector, serve_connection};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A runtime per session: whatever the hub leaves behind ends with it,
    // instead of piling up across millions of inputs.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let hub =
            moonkale_service::hub::spawn(root().clone(), Default::default(), Default::default());
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (their_read, their_write) = tokio::io::split(theirs);
        let cfg = ConnectionConfig {
            transport: Transport::Stdio,
            token: None,
            hubs: HubSelector::One(hub),
            confine: None,
            peer: None,
        };
        let session = tokio::spawn(serve_connection(their_read, their_write, cfg));
        let (mut read, mut write) = tokio::io::split(ours);
        let drain = tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = read.read_to_end(&mut sink).await;
        });
        let _ = write.write_all(data).await;
        let _ = write.shutdown().await;
        drop(write);
        let ending = tokio::time::timeout(std::time::Duration::from_secs(5), session).await;
        assert!(
            matches!(ending, Ok(Ok(_))),
            "the session did not end: {ending:?}"
        );
        drain.abort();
    });
}
