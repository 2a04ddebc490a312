#!/usr/bin/env python3
"""Builds fuzz/seeds/<target>/ from real traffic: the recorded Helix session
(tests/fixtures), Claude Code's recorded stream-json, transcripts and IDE
handshakes (../shared/docs/real-cli, ../shared/docs/ide-protocol.md), plus
the hostile cases of security.md. Run once; the output is committed."""
import hashlib, json, os, pathlib, sys

here = pathlib.Path(__file__).resolve().parent
repo = here.parent
shared = pathlib.Path(os.environ.get("MOONKALE_SHARED", repo.parent / "shared"))
out = here / "seeds"

def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)

def frame(msg):
    body = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body

# LSP: each recorded Helix message as a frame, the whole session as one
# stream, and framing edge cases.
session = [json.loads(l) for l in (repo / "tests/fixtures/helix-25.07.1-session.jsonl").read_text().splitlines() if l.strip()]
for i, m in enumerate(session):
    msg = {"jsonrpc": "2.0", **m}
    if "id" not in msg and "method" in msg and i % 3 == 0:
        msg["id"] = i
    put("lsp_frames", frame(msg))
put("lsp_frames", b"".join(frame({"jsonrpc": "2.0", **m}) for m in session))
for raw in [b"Content-Length: 99999999999\r\n\r\n", b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n{}{}{}",
            b"content-length:2\n\n{}", b"Content-Type: x\r\n\r\n", b"Content-Length: 2\r\n\r\n[]" * 3,
            b"Content-Length: 7\r\n\r\n[[[[[[[", b"\xff\xfe" * 10, b"Content-Length: 4\r\n\r\n\"\\ud8\""]:
    put("lsp_frames", raw)

# Upgrade heads: the CLI's, a remote client's, and the hostile ones.
token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
base = ("GET / HTTP/1.1\r\nHost: 127.0.0.1:45678\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
for extra in [f"Sec-WebSocket-Protocol: mcp\r\nX-Claude-Code-Ide-Authorization: {token}\r\n",
              f"Authorization: Bearer {token}\r\n", f"authorization: bearer {token}\r\n",
              f"Authorization: Bearer {token}\r\nOrigin: https://evil.example\r\n",
              f"Authorization: Bearer {token}\r\nAuthorization: Bearer {token}\r\n",
              f"X-Claude-Code-Ide-Authorization: {token}\r\nHost: localhost:45678\r\n",
              "Authorization: Basic dXNlcjpwYXNz\r\n", "X-Claude-Code-Ide-Authorization: nope\r\n"]:
    put("ws_handshake", base + extra + "\r\n")
put("ws_handshake", base.replace("GET / ", f"GET /?token={token} ") + "\r\n")
put("ws_handshake", "GET / HTTP/1.0\r\n\r\n")
put("ws_handshake", base + "X: " + "a" * 20000 + "\r\n\r\n")

# Paths: security.md 31-37.
for p in ["/etc/passwd", "ROOT/../x", "ROOT/sub/../../x", "relative/a.txt", "ROOT", "a\0b", "",
          "file://remotehost/ROOT/a", "file:///ROOT/%2e%2e/x", "/w/project-secrets/x", "out/secret",
          "sub/loop/sub/loop/a", "passwd", ".git/hooks/pre-commit", ".GIT/config", "sub/deeper/new.txt",
          "sub/./deeper//x", "\\\\?\\C:\\x", "a.txt:evil", "CON", "x. "]:
    put("path_confinement", p)

# Positions: 8 bytes of line/column, then text with CRLF, lone CR, emoji, CJK.
for text in ["", "abc", "a\r\nb\rc\nd", "日本😀語\n\u2028x", "😀😀😀\n" * 3, "\n\n\n", "é\u0301\ud7ff"]:
    for line, col in [(0, 0), (0, 2), (1, 1), (3, 9), (60, 500)]:
        put("positions", line.to_bytes(4, "little") + col.to_bytes(4, "little") + text.encode("utf-8", "surrogatepass"))

# stream-json: the CLI's recorded stdout (first 16 KiB of each), split at a
# seed-chosen point, plus broken lines.
for f in sorted((shared / "docs/real-cli").glob("*/stdout.jsonl")):
    put("stream_json", bytes([37]) + f.read_bytes()[:16384])
for raw in [b'{"type":"assistant"', b'\n\n{}\n', b'not json\n{"type":"result","subtype":"success"}\n', b'{"a":' * 2000]:
    put("stream_json", bytes([3]) + raw)

# Transcripts: a recorded CLI transcript, ours with a torn tail, garbage.
t = next((shared / "docs/real-cli/d-transcript").glob("*.jsonl")).read_bytes()
put("transcript_recovery", t[:8192])
put("transcript_recovery", t[:8192] + b'{"torn":')
ours = b"".join(json.dumps({"seq": i, "kind": "prompt", "data": {"text": "hi"}}).encode() + b"\n" for i in range(5))
put("transcript_recovery", ours)
put("transcript_recovery", ours + b'{"seq": 5, "kind": "cl')
put("transcript_recovery", ours[:40] + b"\n" + ours)
put("transcript_recovery", b"\x00\x01\x02\n{}\n")
# A whole session is the LSP stream the editor sends (the same frames).
for f in sorted((out / "lsp_frames").iterdir()):
    put("lsp_session", f.read_bytes())

# Claude Code's JSON-RPC: its opening and every tool, with hostile paths.
def rpc(method, params, id=1):
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
put("mcp_calls", rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": True}},
                                    "clientInfo": {"name": "claude-code", "version": "2.1.332"}}))
put("mcp_calls", rpc("initialize", {"protocolVersion": "1999-01-01"}))
for name, args in [
    ("openDiff", {"old_file_path": "ROOT/sub/a.txt", "new_file_path": "ROOT/sub/a.txt", "new_file_contents": "x\n", "tab_name": "t"}),
    ("openDiff", {"old_file_path": "/etc/passwd", "new_file_path": "/etc/passwd", "new_file_contents": "x", "tab_name": "t"}),
    ("openDiff", {"old_file_path": "ROOT/out/secret.txt", "new_file_path": "ROOT/passwd", "new_file_contents": "", "tab_name": "t"}),
    ("openFile", {"filePath": "ROOT/sub/a.txt", "startText": "a", "endText": "b", "makeFrontmost": False}),
    ("getDiagnostics", {"uri": "file:///etc/passwd"}), ("getDiagnostics", {}),
    ("getCurrentSelection", {}), ("getOpenEditors", {}), ("getWorkspaceFolders", {}),
    ("checkDocumentDirty", {"filePath": "ROOT/.git/config"}), ("saveDocument", {"filePath": "ROOT/sub/../../x"}),
    ("close_tab", {"tab_name": "t"}), ("closeAllDiffTabs", {}), ("executeCode", {"code": "1"}), ("noSuchTool", []),
]:
    put("mcp_calls", rpc("tools/call", {"name": name, "arguments": args}))
put("mcp_calls", rpc("tools/list", {}))
put("mcp_calls", '{"jsonrpc":"2.0","id":' + '[' * 200 + '}')
print("seeds written to", out, file=sys.stderr)
