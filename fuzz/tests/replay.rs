//! Every committed seed (`seeds/<target>/`) and every input that once made a
//! target fail (`regressions/<target>/`) through the target's check, in a
//! plain build: a fixed crash stays fixed.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut count = 0;
    for dir in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(here.join(dir).join(target)) else {
            continue;
        };
        for entry in entries.flatten() {
            let data = std::fs::read(entry.path()).expect("read input");
            let name = entry.path().display().to_string();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{target} fails on {name}");
            count += 1;
        }
    }
    assert!(count > 0, "no seeds for {target}");
}

#[test]
fn lsp_frames() {
    replay("lsp_frames", moonkale_fuzz::lsp_frames);
}

#[test]
fn ws_handshake() {
    replay("ws_handshake", moonkale_fuzz::ws_handshake);
}

#[test]
fn path_confinement() {
    replay("path_confinement", moonkale_fuzz::path_confinement);
}

#[test]
fn positions() {
    replay("positions", moonkale_fuzz::positions);
}

#[test]
fn stream_json() {
    replay("stream_json", moonkale_fuzz::stream_json);
}

#[test]
fn transcript_recovery() {
    replay("transcript_recovery", moonkale_fuzz::transcript_recovery);
}

#[test]
fn mcp_calls() {
    replay("mcp_calls", moonkale_fuzz::mcp_calls);
}

#[test]
fn lsp_session() {
    replay("lsp_session", moonkale_fuzz::lsp_session);
}
