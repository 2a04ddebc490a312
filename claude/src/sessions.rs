//! The CLI's own transcripts, `<config>/projects/<slug>/<session-id>.jsonl`:
//! listing a project's past sessions and rendering one as a conversation
//! (agent-host.md §2.2–2.3), the way the SDKs do.
//!
//! Only the first and last 64 KiB of a file are read to list it; rendering
//! follows the main chain (`parentUuid` from the newest leaf that is not a
//! side chain) so abandoned branches and subagents stay out.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

/// Longest slug the CLI writes whole; longer ones end in a hash we cannot
/// reproduce, so they are matched by this prefix.
const SLUG_PREFIX: usize = 200;
const HEAD_TAIL: u64 = 64 * 1024;
/// The most of a transcript [`render`] reads: its end (a conversation is
/// rendered from its newest leaf back).
pub const MAX_RENDER_BYTES: u64 = 32 << 20;
const TITLE_CHARS: usize = 200;

/// The folder name the CLI uses for a working directory: every character
/// that is not an ASCII letter or digit becomes `-`.
pub fn project_slug(cwd: &Path) -> String {
    cwd.to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The project folders under `config_dir/projects` that hold `cwd`'s sessions.
pub fn project_dirs(config_dir: &Path, cwd: &Path) -> Vec<PathBuf> {
    let slug = project_slug(cwd);
    let projects = config_dir.join("projects");
    if slug.len() <= SLUG_PREFIX {
        let dir = projects.join(&slug);
        return if dir.is_dir() { vec![dir] } else { vec![] };
    }
    let prefix = &slug[..SLUG_PREFIX];
    let Ok(entries) = std::fs::read_dir(&projects) else {
        return vec![];
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq)]
pub struct SessionSummary {
    pub id: String,
    pub path: PathBuf,
    pub title: String,
    /// The first line's timestamp.
    pub created: Option<String>,
    pub modified: Option<SystemTime>,
    pub git_branch: Option<String>,
    /// The folder it ran in, as its first record says.
    pub cwd: Option<PathBuf>,
    /// What started the CLI (`cli`, `sdk-cli`, a host's own), as its first
    /// record says.
    pub entrypoint: Option<String>,
}

/// The sessions of `cwd`, newest first.
pub fn list_sessions(config_dir: &Path, cwd: &Path) -> Vec<SessionSummary> {
    let mut out: Vec<SessionSummary> = project_dirs(config_dir, cwd)
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "jsonl")
                && p.file_stem()
                    .is_some_and(|s| uuid::Uuid::parse_str(&s.to_string_lossy()).is_ok())
        })
        .filter_map(|p| summarize(&p))
        // A project folder's name can stand for several folders (its slug
        // is lossy): a session is `cwd`'s only if it says it ran there.
        .filter(|s| s.cwd.as_deref().is_none_or(|c| c == cwd))
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.modified));
    out
}

/// Session `id` of `cwd`, if Claude Code keeps it (one file read, not the
/// whole project's).
pub fn find_session(config_dir: &Path, cwd: &Path, id: &str) -> Option<SessionSummary> {
    uuid::Uuid::parse_str(id).ok()?;
    project_dirs(config_dir, cwd)
        .iter()
        .find_map(|dir| summarize(&dir.join(format!("{id}.jsonl"))))
        .filter(|s| s.cwd.as_deref().is_none_or(|c| c == cwd))
}

fn summarize(path: &Path) -> Option<SessionSummary> {
    let (head, tail) = head_and_tail(path)?;
    let lines: Vec<Value> = head
        .lines()
        .chain(tail.lines())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let first = lines.first()?;
    if first.get("isSidechain").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let last_of = |kind: &str, key: &str| {
        lines
            .iter()
            .rev()
            .find(|l| l["type"] == kind)
            .and_then(|l| l[key].as_str())
            .map(str::to_owned)
    };
    let title = last_of("custom-title", "customTitle")
        .or_else(|| last_of("ai-title", "aiTitle"))
        .or_else(|| last_of("last-prompt", "lastPrompt"))
        .or_else(|| last_of("summary", "summary"))
        .or_else(|| lines.iter().find_map(first_prompt))
        .unwrap_or_default();
    Some(SessionSummary {
        id: path.file_stem()?.to_string_lossy().into_owned(),
        path: path.to_path_buf(),
        title: title.chars().take(TITLE_CHARS).collect(),
        created: lines
            .iter()
            .find_map(|l| l["timestamp"].as_str().map(str::to_owned)),
        modified: std::fs::metadata(path).and_then(|m| m.modified()).ok(),
        git_branch: lines
            .iter()
            .rev()
            .find_map(|l| l["gitBranch"].as_str().map(str::to_owned)),
        cwd: lines
            .iter()
            .find_map(|l| l["cwd"].as_str().map(PathBuf::from)),
        entrypoint: lines
            .iter()
            .find_map(|l| l["entrypoint"].as_str().map(str::to_owned)),
    })
}

/// A real prompt the user typed (not a tool result, a command or a marker).
fn first_prompt(line: &Value) -> Option<String> {
    if line["type"] != "user" || line["isMeta"] == true || line["isCompactSummary"] == true {
        return None;
    }
    let text = message_text(&line["message"])?;
    let noise = [
        "<command-name>",
        "<local-command-stdout>",
        "[Request interrupted by user",
        "<ide_selection>",
    ];
    (!text.is_empty() && !noise.iter().any(|n| text.starts_with(n))).then_some(text)
}

/// The text of a message: a string, or its text blocks joined.
fn message_text(message: &Value) -> Option<String> {
    match &message["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// A transcript opened for reading: a regular file, never through a
/// symlink (a FIFO would block the reader, a link could point anywhere).
fn open_transcript(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

fn head_and_tail(path: &Path) -> Option<(String, String)> {
    let mut file = open_transcript(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut head = Vec::new();
    (&mut file).take(HEAD_TAIL).read_to_end(&mut head).ok()?;
    let mut tail = Vec::new();
    if len > HEAD_TAIL {
        file.seek(SeekFrom::Start(
            len.saturating_sub(HEAD_TAIL).max(HEAD_TAIL),
        ))
        .ok()?;
        file.read_to_end(&mut tail).ok()?;
        // The first tail line is likely cut.
        if let Some(nl) = tail.iter().position(|&b| b == b'\n') {
            tail.drain(..=nl);
        }
    }
    Some((
        String::from_utf8_lossy(&head).into_owned(),
        String::from_utf8_lossy(&tail).into_owned(),
    ))
}

/// One turn of a rendered conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub role: &'static str,
    pub text: String,
}

/// The main conversation of a transcript: from the newest main-chain leaf
/// back to the root, user and assistant text only.
pub fn render(path: &Path) -> std::io::Result<Vec<Turn>> {
    let mut file = open_transcript(path)?;
    let len = file.metadata()?.len();
    let mut bytes = Vec::new();
    if len > MAX_RENDER_BYTES {
        file.seek(SeekFrom::Start(len - MAX_RENDER_BYTES))?;
    }
    file.take(MAX_RENDER_BYTES).read_to_end(&mut bytes)?;
    if len > MAX_RENDER_BYTES
        && let Some(nl) = bytes.iter().position(|&b| b == b'\n')
    {
        bytes.drain(..=nl); // the first line is cut
    }
    let text = String::from_utf8_lossy(&bytes);
    let entries: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["uuid"].is_string()
                && ["user", "assistant", "system", "attachment", "progress"]
                    .contains(&e["type"].as_str().unwrap_or(""))
        })
        .collect();
    let by_uuid: HashMap<&str, &Value> = entries
        .iter()
        .map(|e| (e["uuid"].as_str().expect("filtered"), e))
        .collect();
    let parents: HashSet<&str> = entries
        .iter()
        .filter_map(|e| e["parentUuid"].as_str())
        .collect();
    let Some(leaf) = entries.iter().rev().find(|e| {
        !parents.contains(e["uuid"].as_str().expect("filtered"))
            && e["isSidechain"] != true
            && e["isMeta"] != true
    }) else {
        return Ok(vec![]);
    };
    let mut chain = vec![leaf];
    while let Some(parent) = chain
        .last()
        .and_then(|e| e["parentUuid"].as_str())
        .and_then(|p| by_uuid.get(p))
    {
        chain.push(parent);
    }
    chain.reverse();
    Ok(chain
        .into_iter()
        .filter(|e| e["isMeta"] != true && e["isSidechain"] != true)
        .filter_map(|e| {
            let role = match e["type"].as_str()? {
                "user" => "user",
                "assistant" => "assistant",
                _ => return None,
            };
            Some(Turn {
                role,
                text: message_text(&e["message"])?,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slug_rule() {
        assert_eq!(
            project_slug(Path::new("/srv/demo/ws/d-session")),
            "-srv-demo-ws-d-session"
        );
        assert_eq!(
            project_slug(Path::new("/home/me/my project/é")),
            "-home-me-my-project--"
        );
    }

    /// A transcript that is a symlink or a FIFO is neither listed nor
    /// rendered (a FIFO would block the reader), and a session that ran in
    /// another folder with the same slug is not this folder's.
    #[test]
    fn hostile_transcripts_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = Path::new("/srv/demo/ws/d-session");
        let dir = tmp.path().join("projects").join(project_slug(cwd));
        std::fs::create_dir_all(&dir).unwrap();
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/d-transcript.jsonl");
        let linked = dir.join("11111111-2222-4333-8444-555555555555.jsonl");
        std::os::unix::fs::symlink(&fixture, &linked).unwrap();
        let fifo = dir.join("22222222-2222-4333-8444-555555555555.jsonl");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let elsewhere = dir.join("33333333-2222-4333-8444-555555555555.jsonl");
        let text = std::fs::read_to_string(&fixture)
            .unwrap()
            .replace("/srv/demo/ws/d-session", "/srv/demo/ws/d/session");
        std::fs::write(&elsewhere, text).unwrap();
        assert_eq!(list_sessions(tmp.path(), cwd), Vec::new());
        assert!(render(&linked).is_err() && render(&fifo).is_err());
    }

    /// A recorded transcript (three turns about the number 42) lists with
    /// its last prompt as title and renders as its main chain.
    #[test]
    fn recorded_session_lists_and_renders() {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = Path::new("/srv/demo/ws/d-session");
        let dir = tmp.path().join("projects").join(project_slug(cwd));
        std::fs::create_dir_all(&dir).unwrap();
        let id = "11111111-2222-4333-8444-555555555555";
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/d-transcript.jsonl"),
            dir.join(format!("{id}.jsonl")),
        )
        .unwrap();
        std::fs::write(dir.join("not-a-session.jsonl"), "{}\n").unwrap();
        let sessions = list_sessions(tmp.path(), cwd);
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].id, id);
        assert_eq!(sessions[0].title, "what number again?");
        assert_eq!(
            sessions[0].created.as_deref(),
            Some("2026-11-29T19:31:01.135Z")
        );
        let turns = render(&sessions[0].path).unwrap();
        let text: Vec<String> = turns
            .iter()
            .map(|t| format!("{}: {}", t.role, t.text))
            .collect();
        assert_eq!(
            text,
            [
                "user: remember the number 42",
                "assistant: OK, I will remember 42.",
                "user: what number did I say?",
                "assistant: The number was 42.",
                "user: what number again?",
                "assistant: The number was 42.",
            ]
        );
    }
}
