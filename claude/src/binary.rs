//! Finding the `claude` executable.
//!
//! A configured path wins. Otherwise `PATH` is searched, skipping entries a
//! workspace could plant a fake `claude` in: relative entries (`""`, `.`,
//! `bin`) and entries inside the workspace folder. A repository that ships
//! `./node_modules/.bin/claude` must not get to run it with the user's login.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// [`find`] with `PATH` taken from `env` (a child's environment to be).
pub fn find_in_env(
    configured: Option<&Path>,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    workspace: &Path,
) -> Result<PathBuf> {
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    find(configured, path, workspace)
}

/// The executable to run: `configured`, else the first safe `claude` on
/// `path_var` (the value of `PATH`).
pub fn find(
    configured: Option<&Path>,
    path_var: Option<&OsStr>,
    workspace: &Path,
) -> Result<PathBuf> {
    if let Some(path) = configured {
        return if is_executable(path) {
            Ok(path.to_path_buf())
        } else {
            Err(Error::NotExecutable(path.to_path_buf()))
        };
    }
    let mut looked = Vec::new();
    let mut skipped = Vec::new();
    for dir in std::env::split_paths(path_var.unwrap_or_default()) {
        if !dir.is_absolute() {
            skipped.push(format!("{} (a relative entry)", dir.display()));
            continue;
        }
        if dir.starts_with(workspace) {
            skipped.push(format!(
                "{} (inside the workspace, where a repository could plant its own claude)",
                dir.display()
            ));
            continue;
        }
        let candidate = dir.join("claude");
        if is_executable(&candidate) {
            return Ok(candidate);
        }
        looked.push(dir.display().to_string());
    }
    let mut said = if looked.is_empty() {
        "PATH is empty".to_owned()
    } else {
        format!("searched {}", looked.join(":"))
    };
    if !skipped.is_empty() {
        said += &format!("; skipped {}", skipped.join(", "));
    }
    Err(Error::NotFound { looked: said })
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn hostile_42_path_entries_a_workspace_could_plant_are_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let planted = ws.join("node_modules/.bin/claude");
        let real = tmp.path().join("usr/bin/claude");
        exe(&planted);
        exe(&real);
        let path = std::env::join_paths([
            ws.join("node_modules/.bin"),
            "bin".into(),
            real.parent().unwrap().into(),
        ])
        .unwrap();
        assert_eq!(find(None, Some(&path), &ws).unwrap(), real);
        let only_planted = std::env::join_paths([ws.join("node_modules/.bin")]).unwrap();
        let err = find(None, Some(&only_planted), &ws)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not found") && err.contains("npm install"),
            "{err}"
        );
        // The real ways to name another one, not "the service's configuration".
        assert!(
            err.contains("MOONKALE_CLAUDE_BIN=PATH") && err.contains("--claude PATH"),
            "{err}"
        );
    }

    #[test]
    fn hostile_42_a_configured_path_must_be_executable() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("claude");
        std::fs::write(&file, "").unwrap();
        let err = find(Some(&file), None, tmp.path()).unwrap_err().to_string();
        assert!(err.contains("--claude or MOONKALE_CLAUDE_BIN"), "{err}");
        exe(&file);
        assert_eq!(
            find(Some(&file), None, Path::new("/nowhere")).unwrap(),
            file
        );
    }
}

/// A CLI version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The first `N.N.N` of `claude --version`'s output ("2.1.332 (Claude
/// Code)").
pub fn parse_version(output: &str) -> Option<Version> {
    output.split_whitespace().find_map(|word| {
        let mut parts = word.split('.').map(|p| p.parse::<u32>().ok());
        match (parts.next()??, parts.next()??, parts.next()??) {
            (a, b, c) if parts.next().is_none() => Some(Version(a, b, c)),
            _ => None,
        }
    })
}

/// How long `claude --version` may take: an old generation is a 10 MB
/// script that node parses first, which a loaded machine makes slow.
pub const VERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// `program --version`, run once per executable (by path and modification
/// time) with `env`; `None` if it does not answer within
/// [`VERSION_TIMEOUT`] or says no version.
pub async fn version(
    program: &Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Option<Version> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::SystemTime;
    /// What each executable (by path and modification time) said.
    type Known = HashMap<(PathBuf, SystemTime), Option<Version>>;
    static CACHE: Mutex<Option<Known>> = Mutex::new(None);
    let modified = std::fs::metadata(program).and_then(|m| m.modified()).ok()?;
    let key = (program.to_owned(), modified);
    if let Some(known) = CACHE.lock().ok()?.get_or_insert_default().get(&key) {
        return *known;
    }
    // Never in a workspace: nothing of a repository's is read for this.
    let found = ask_version(program, &[], Path::new("/"), env).await.ok();
    CACHE
        .lock()
        .ok()?
        .get_or_insert_default()
        .insert(key, found);
    found
}

/// `program ARGS… --version` in `cwd` with only `env`, each time (a
/// sandbox's command, whose `claude` is whatever the sandbox holds now);
/// why not, when it gives no version within [`VERSION_TIMEOUT`].
pub async fn ask_version(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> crate::Result<Version> {
    let name = program.display().to_string();
    let run = tokio::process::Command::new(program)
        .args(args)
        .arg("--version")
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().cloned())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(VERSION_TIMEOUT, run).await {
        Err(_) => {
            return Err(Error::VersionTimedOut {
                program: name,
                timeout: VERSION_TIMEOUT,
            });
        }
        Ok(Err(source)) => {
            return Err(Error::NotStarted {
                program: name,
                source,
            });
        }
        Ok(Ok(out)) => out,
    };
    let printed = String::from_utf8_lossy(&out.stdout);
    if let Some(version) = parse_version(&printed) {
        return Ok(version);
    }
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.chars().take(300).collect());
        return Err(Error::VersionFailed {
            program: name,
            status: out.status,
            said,
        });
    }
    Err(Error::NoVersion {
        program: name,
        printed: printed.chars().take(120).collect(),
    })
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn versions_are_read_from_what_the_cli_prints() {
        assert_eq!(
            parse_version("2.1.332 (Claude Code)\n"),
            Some(Version(2, 1, 332))
        );
        assert_eq!(
            parse_version("1.0.60 (Claude Code)"),
            Some(Version(1, 0, 60))
        );
        assert_eq!(parse_version("claude 2.0"), None);
        assert_eq!(parse_version(""), None);
        assert!(Version(2, 0, 50) < Version(2, 1, 0));
    }
}
