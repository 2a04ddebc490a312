//! The lexical half of path confinement, shared by every check of a path
//! from the wire (the service's `workspace_fs::confine` adds the walk that
//! refuses symlinks, which needs the file system).
//!
//! A path is accepted only if it is absolute, has no `..`, lies inside a
//! workspace folder by whole components (so `/w/proj` does not contain
//! `/w/project-secrets`), is not the folder itself, and has no `.git`
//! component in any letter case.
//!
//! What it returns is a plain path, not a proof: the service's
//! `workspace_fs::ConfinedPath`, which its IO takes, is made only by
//! `workspace_fs::confine`, after this check and the walk. The hub, which
//! does no IO, uses this half alone.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused; the message names the rule, never file contents.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub String);

/// A path inside one of `roots`, by its text alone: the clean path and the
/// root it lies in.
pub fn confine_lexically<'r>(
    roots: &'r [PathBuf],
    raw: &str,
) -> Result<(PathBuf, &'r Path), Refused> {
    let refuse = |why: &str| Err(Refused(format!("{why}: {raw:?}")));
    if raw.is_empty() || raw.contains('\0') {
        return refuse("not a usable path");
    }
    let path = Path::new(raw);
    if !path.is_absolute() {
        return refuse("not an absolute path");
    }
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => clean.push("/"),
            Component::CurDir => {}
            Component::Normal(part) => clean.push(part),
            Component::ParentDir => return refuse("`..` is not allowed"),
            Component::Prefix(_) => return refuse("not a local path"),
        }
    }
    let Some(root) = roots.iter().find(|r| clean.starts_with(r) && clean != **r) else {
        return refuse("outside the workspace");
    };
    let inside = clean.strip_prefix(root).expect("checked by starts_with");
    if inside.components().any(|c| is_git(c.as_os_str())) {
        return refuse("inside .git");
    }
    Ok((clean, root))
}

fn is_git(part: &OsStr) -> bool {
    part.as_bytes().eq_ignore_ascii_case(b".git")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_rules() {
        let roots = [PathBuf::from("/w/proj")];
        let check = |raw: &str| match confine_lexically(&roots, raw) {
            Ok((path, _)) => format!("ok {}", path.display()),
            Err(Refused(why)) => why,
        };
        let cases = [
            "/w/proj/src/a.rs",
            "/w/proj/./src//a.rs",
            "/w/proj/../etc/passwd",
            "/w/project-secrets/key",
            "/w/proj",
            "/w/proj/.GIT/config",
            "src/a.rs",
            "",
        ];
        let got: Vec<String> = cases.iter().map(|c| check(c)).collect();
        expect_test::expect![[r#"
            [
                "ok /w/proj/src/a.rs",
                "ok /w/proj/src/a.rs",
                "`..` is not allowed: \"/w/proj/../etc/passwd\"",
                "outside the workspace: \"/w/project-secrets/key\"",
                "outside the workspace: \"/w/proj\"",
                "inside .git: \"/w/proj/.GIT/config\"",
                "not an absolute path: \"src/a.rs\"",
                "not a usable path: \"\"",
            ]
        "#]]
        .assert_debug_eq(&got);
    }
}
