//! What the service keeps for the user **outside** every workspace: the
//! agent's session transcripts and the user's workspace-trust decisions.
//!
//! A workspace is input from whoever wrote the repository, so nothing the
//! service later trusts may be read from it (ARCHITECTURE.md, "Trust
//! model"). Transcripts carry a session's settings (permission mode, model,
//! "always allow" answers); kept under the workspace, a cloned repository
//! could ship one that elevates permissions. So they live in the user's
//! state directory, which only the user's own processes can write:
//!
//! - `$XDG_STATE_HOME/moonkale` (else `~/.local/state/moonkale`), 0700,
//!   ours: `workspaces/<name>-<hash>/chats/<session>.jsonl`, keyed by the
//!   workspace's canonical path (the same hash names its runtime files).
//! - `$XDG_CONFIG_HOME/moonkale/trusted-workspaces.json` (else
//!   `~/.config/moonkale/…`), 0600: the folders the user trusts.
//! - `$XDG_CONFIG_HOME/moonkale/sandboxes.json`, 0600: the sandbox each
//!   workspace's Claude Code runs in by default ([`SandboxStore`]); a
//!   repository naming a sandbox (or none) in its own files changes
//!   nothing.
//!
//! **Invariant:** every decision that widens what Claude Code may do (a
//! permission mode, an "always", trust) is read from here or from the
//! user's own request, never from a file under a workspace.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::path_map::PathPair;
use crate::error::{Error, IoContext, Result};
use crate::runtime;

/// Largest trust file we read.
const MAX_TRUST_FILE: u64 = 1 << 20;

/// `$<var>` if it is an absolute path, else `$HOME/<fallback>`.
fn xdg_dir(var: &str, fallback: &str) -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(var).map(PathBuf::from)
        && dir.is_absolute()
    {
        return Ok(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "neither ${var} nor $HOME is an absolute path; cannot find the user's {fallback}"
            ))
        })?;
    Ok(home.join(fallback))
}

/// Creates `dir` and its missing parents (each new one 0700) and checks
/// that the last one is a real directory of ours without group or other
/// access (tightened if it had some).
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .context(|| format!("creating {}", dir.display()))?;
    let meta = std::fs::symlink_metadata(dir).context(|| format!("checking {}", dir.display()))?;
    if !meta.file_type().is_dir() {
        return Err(Error::Invalid(format!(
            "{} is not a directory (a symlink or a file is in its place)",
            dir.display()
        )));
    }
    if meta.uid() != runtime::uid() {
        return Err(Error::Invalid(format!(
            "{} belongs to another user",
            dir.display()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .context(|| format!("making {} private", dir.display()))?;
    }
    Ok(())
}

/// The user's state directory for moonkale (not created here).
/// The user's moonkale configuration (`$XDG_CONFIG_HOME/moonkale`).
pub fn config_dir() -> Result<PathBuf> {
    Ok(xdg_dir("XDG_CONFIG_HOME", ".config")?.join("moonkale"))
}

pub fn state_dir() -> Result<PathBuf> {
    Ok(xdg_dir("XDG_STATE_HOME", ".local/state")?.join("moonkale"))
}

/// Where one workspace's state lives: `<state>/workspaces/<name>-<hash>`.
/// `root` is the canonical workspace path.
pub fn workspace_state_dir(root: &Path) -> Result<PathBuf> {
    let name: String = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    Ok(state_dir()?
        .join("workspaces")
        .join(format!("{name}-{:016x}", runtime::path_hash(root))))
}

/// The folder of a workspace's session transcripts.
pub fn chats_dir(root: &Path) -> Result<PathBuf> {
    Ok(workspace_state_dir(root)?.join("chats"))
}

/// The user's trust decisions, one JSON file outside every workspace.
#[derive(Clone, Debug)]
pub struct TrustStore {
    path: PathBuf,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TrustFile {
    #[serde(default)]
    trusted: Vec<TrustEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct TrustEntry {
    path: PathBuf,
    /// When the user decided (ms since the epoch).
    at: u64,
}

/// What trusting a workspace lets its files do, said once wherever the
/// user is asked or told.
pub const TRUST_ENABLES: &str = "Claude Code sessions the service runs for it load the \
repository's own Claude Code settings: .claude/settings.json and .claude/settings.local.json \
(hooks there run shell commands, permission rules there can allow tools without asking) and \
the MCP servers of .mcp.json (programs that start with the session), and git in them sees the \
repository (whose own git configuration can name programs git runs)";

impl TrustStore {
    pub fn from_env() -> Result<TrustStore> {
        let dir = xdg_dir("XDG_CONFIG_HOME", ".config")?.join("moonkale");
        Ok(TrustStore {
            path: dir.join("trusted-workspaces.json"),
        })
    }

    pub fn at(path: PathBuf) -> TrustStore {
        TrustStore { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load(&self) -> Result<TrustFile> {
        match runtime::read_regular_file(&self.path, MAX_TRUST_FILE) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::Invalid(format!(
                    "{} is not a trust file ({e}); fix or remove it",
                    self.path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TrustFile::default()),
            Err(e) => Err(Error::io(format!("reading {}", self.path.display()), e)),
        }
    }

    /// Whether the user trusts `root` (a canonical path) or a folder that
    /// contains it. An unreadable store trusts nothing.
    pub fn is_trusted(&self, root: &Path) -> bool {
        match self.load() {
            Ok(file) => file.trusted.iter().any(|t| root.starts_with(&t.path)),
            Err(e) => {
                tracing::warn!("{e}; treating every workspace as untrusted");
                false
            }
        }
    }

    /// Records the user's decision for `root`; whether anything changed.
    /// Untrusting removes `root` itself (a trusted parent still trusts it:
    /// the caller says so).
    pub fn set(&self, root: &Path, trusted: bool) -> Result<bool> {
        let mut file = self.load()?;
        let had = file.trusted.iter().any(|t| t.path == root);
        if trusted == had {
            return Ok(false);
        }
        if trusted {
            let at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            file.trusted.push(TrustEntry {
                path: root.to_owned(),
                at,
            });
        } else {
            file.trusted.retain(|t| t.path != root);
        }
        if let Some(dir) = self.path.parent() {
            ensure_private_dir(dir)?;
        }
        let bytes = serde_json::to_vec_pretty(&file).expect("serializes");
        runtime::write_private_atomic(&self.path, &bytes)?;
        Ok(true)
    }

    /// The trusted folder that makes `root` trusted, if one does.
    pub fn trusted_by(&self, root: &Path) -> Option<PathBuf> {
        let file = self.load().ok()?;
        file.trusted
            .into_iter()
            .map(|t| t.path)
            .filter(|p| root.starts_with(p))
            .max_by_key(|p| p.as_os_str().len())
    }
}

/// Largest sandbox file we read.
const MAX_SANDBOX_FILE: u64 = 1 << 20;

/// The sandbox a workspace's Claude Code runs in unless told otherwise:
/// the command that runs `claude` there, where it mounts what, and where
/// it sees `moonkale-service`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultSandbox {
    pub command: Vec<String>,
    /// `HOST=INSIDE` folders (empty: the same paths inside), kept as the
    /// user wrote them and parsed when the file is read.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "path_pairs")]
    pub paths: Vec<PathPair>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bin: Option<PathBuf>,
}

/// `HOST=INSIDE` strings in the file, [`PathPair`]s in memory: a pair
/// that does not parse makes the file damaged.
mod path_pairs {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::PathPair;

    pub fn serialize<S: Serializer>(pairs: &[PathPair], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(pairs.iter().map(ToString::to_string))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathPair>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|pair| pair.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct SandboxFile {
    #[serde(default)]
    sandboxes: Vec<SandboxEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SandboxEntry {
    workspace: PathBuf,
    #[serde(flatten)]
    sandbox: DefaultSandbox,
}

/// The user's default sandbox per workspace, one JSON file outside every
/// workspace, read afresh at each use (a `sandbox set` takes effect at the
/// next start).
#[derive(Clone, Debug)]
pub struct SandboxStore {
    path: PathBuf,
}

impl SandboxStore {
    pub fn from_env() -> Result<SandboxStore> {
        let dir = xdg_dir("XDG_CONFIG_HOME", ".config")?.join("moonkale");
        Ok(SandboxStore {
            path: dir.join("sandboxes.json"),
        })
    }

    pub fn at(path: PathBuf) -> SandboxStore {
        SandboxStore { path }
    }

    fn load(&self) -> Result<SandboxFile> {
        match runtime::read_regular_file(&self.path, MAX_SANDBOX_FILE) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::Invalid(format!(
                    "{} is not a sandbox file ({e}); fix or remove it",
                    self.path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SandboxFile::default()),
            Err(e) => Err(Error::io(format!("reading {}", self.path.display()), e)),
        }
    }

    fn save(&self, file: &SandboxFile) -> Result<()> {
        if let Some(dir) = self.path.parent() {
            ensure_private_dir(dir)?;
        }
        let bytes = serde_json::to_vec_pretty(file).expect("serializes");
        runtime::write_private_atomic(&self.path, &bytes)?;
        Ok(())
    }

    /// The default sandbox of `root` (a canonical path), if the user set
    /// one. A damaged file is an error: running unjailed because the file
    /// could not be read is not the user's choice.
    pub fn get(&self, root: &Path) -> Result<Option<DefaultSandbox>> {
        Ok(self
            .load()?
            .sandboxes
            .into_iter()
            .find(|e| e.workspace == root)
            .map(|e| e.sandbox))
    }

    /// Makes `sandbox` the default of `root`.
    pub fn set(&self, root: &Path, sandbox: DefaultSandbox) -> Result<()> {
        let mut file = self.load()?;
        file.sandboxes.retain(|e| e.workspace != root);
        file.sandboxes.push(SandboxEntry {
            workspace: root.to_owned(),
            sandbox,
        });
        self.save(&file)
    }

    /// Removes `root`'s default; whether it had one.
    pub fn clear(&self, root: &Path) -> Result<bool> {
        let mut file = self.load()?;
        let before = file.sandboxes.len();
        file.sandboxes.retain(|e| e.workspace != root);
        if file.sandboxes.len() == before {
            return Ok(false);
        }
        self.save(&file)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_sandbox_is_per_workspace_and_a_damaged_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = SandboxStore::at(dir.path().join("cfg/sandboxes.json"));
        let ws = Path::new("/home/u/ws");
        assert_eq!(store.get(ws).unwrap(), None);
        let sandbox = DefaultSandbox {
            command: vec![
                "docker".into(),
                "exec".into(),
                "box".into(),
                "claude".into(),
            ],
            paths: vec!["/home/u/ws=/workspaces/ws".parse().unwrap()],
            link_bin: None,
        };
        store.set(ws, sandbox.clone()).unwrap();
        assert_eq!(store.get(ws).unwrap(), Some(sandbox));
        assert_eq!(store.get(Path::new("/home/u/ws/sub")).unwrap(), None);
        assert_eq!(store.get(Path::new("/home/u/ws2")).unwrap(), None);
        let mode = std::fs::metadata(dir.path().join("cfg/sandboxes.json"))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(store.clear(ws).unwrap());
        assert!(!store.clear(ws).unwrap());
        assert_eq!(store.get(ws).unwrap(), None);
        // A pair that is not HOST=INSIDE damages the file as bad JSON does.
        let bad = r#"{"sandboxes": [{"workspace": "/home/u/ws", "command": ["claude"], "paths": ["rel=/x"]}]}"#;
        std::fs::write(dir.path().join("cfg/sandboxes.json"), bad).unwrap();
        assert!(
            store
                .get(ws)
                .unwrap_err()
                .to_string()
                .contains("must be absolute")
        );
        std::fs::write(dir.path().join("cfg/sandboxes.json"), "{nope").unwrap();
        assert!(
            store
                .get(ws)
                .unwrap_err()
                .to_string()
                .contains("is not a sandbox file")
        );
    }

    #[test]
    fn trust_is_per_folder_and_covers_subfolders() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::at(dir.path().join("cfg/trust.json"));
        let ws = Path::new("/home/u/ws");
        assert!(!store.is_trusted(ws));
        assert!(store.set(ws, true).unwrap());
        assert!(!store.set(ws, true).unwrap(), "already trusted");
        assert!(store.is_trusted(ws));
        assert!(store.is_trusted(Path::new("/home/u/ws/sub")));
        assert!(
            !store.is_trusted(Path::new("/home/u/ws2")),
            "prefix of a name"
        );
        assert!(!store.is_trusted(Path::new("/home/u")));
        assert_eq!(
            store.trusted_by(Path::new("/home/u/ws/sub")).as_deref(),
            Some(ws)
        );
        assert!(store.set(ws, false).unwrap());
        assert!(!store.is_trusted(ws));
        let mode = std::fs::metadata(store.path()).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_damaged_trust_file_trusts_nothing_and_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trust.json");
        std::fs::write(&path, "{not json").unwrap();
        let store = TrustStore::at(path.clone());
        assert!(!store.is_trusted(Path::new("/")));
        let err = store.set(Path::new("/w"), true).unwrap_err().to_string();
        assert!(err.contains("is not a trust file"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{not json");
    }
}
