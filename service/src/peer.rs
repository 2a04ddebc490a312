//! A name for an editor that does not name itself (no `clientInfo` in its
//! `initialize`), from what the service can know about the other end of
//! its connection: the peer's process on the unix socket (`SO_PEERCRED`),
//! our parent for `lsp --stdio`, the address for TCP. An editor started
//! through moonkale-shim is named after the shim's parent, the editor.
//!
//! Process names come from `/proc/<pid>/comm`, which any process sets for
//! itself: they are untrusted, so they are escaped and capped.

use crate::printable::one_line;

/// The shim's process name, whose parent is the editor.
const SHIM: &str = "moonkale-shim";

/// `nvim (pid 123)`, or `nvim (pid 123, via moonkale-shim)` when `pid` is a
/// shim; `pid 123` when /proc does not say.
pub fn process(pid: u32) -> String {
    let Some(name) = comm(pid) else {
        return format!("pid {pid}");
    };
    if name == SHIM
        && let Some(parent) = parent_of(pid)
        && let Some(editor) = comm(parent)
    {
        return format!("{editor} (pid {parent}, via {SHIM})");
    }
    format!("{name} (pid {pid})")
}

/// The peer process of a unix socket connection.
pub fn unix(stream: &tokio::net::UnixStream) -> Option<String> {
    let pid = stream.peer_cred().ok()?.pid()?;
    Some(process(u32::try_from(pid).ok()?))
}

/// This process's parent: the editor that started `lsp --stdio`.
pub fn parent() -> String {
    process(std::os::unix::process::parent_id())
}

fn comm(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/comm")).ok()?;
    // The kernel caps it at 15 bytes; a cap of our own all the same.
    let raw = String::from_utf8_lossy(&raw[..raw.len().min(64)]).into_owned();
    let name = one_line(raw.trim_end_matches('\n'));
    (!name.is_empty()).then_some(name)
}

/// The parent pid from `/proc/<pid>/stat`: the field after the state,
/// which follows the last `)` (the name in parentheses may hold anything).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_this_process_and_its_parent() {
        let me = process(std::process::id());
        assert!(
            me.ends_with(&format!("(pid {})", std::process::id())),
            "{me}"
        );
        assert_eq!(
            parent_of(std::process::id()),
            Some(std::os::unix::process::parent_id())
        );
        assert_eq!(process(u32::MAX), format!("pid {}", u32::MAX));
    }
}
