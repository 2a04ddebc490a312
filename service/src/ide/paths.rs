//! Confinement of paths named by Claude Code's tool calls.
//!
//! Every path from the wire is untrusted (security.md 31–37). A path is
//! accepted only if it is absolute, has no `..`, lies inside a workspace
//! folder by whole components (so `/w/proj` does not contain
//! `/w/project-secrets`), is not the folder itself, has no `.git` component in
//! any letter case, and reaches its target without passing through a symlink
//! (checked with `lstat` from the folder down). Components that do not exist
//! yet are allowed: a proposal may create a new file.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused; the message names the rule, never file contents.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub String);

pub fn confine(roots: &[PathBuf], raw: &str) -> Result<PathBuf, Refused> {
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
    let mut at = root.clone();
    for part in inside.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => return refuse("goes through a symlink"),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(_) => return refuse("cannot be checked"),
        }
    }
    Ok(clean)
}

fn is_git(part: &OsStr) -> bool {
    part.as_bytes().eq_ignore_ascii_case(b".git")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Security cases 31–33 and 37 against a fixture tree.
    #[test]
    fn escapes_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("proj");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(base.join("project-secrets")).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("link.md")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("outdir")).unwrap();
        std::os::unix::fs::symlink("../outside/new", root.join("dangling")).unwrap();
        let roots = vec![root.clone()];
        let r = root.display().to_string();
        let ok = |p: &str| confine(&roots, p).map(|p| p.display().to_string());
        assert_eq!(ok(&format!("{r}/a.txt")), Ok(format!("{r}/a.txt")));
        assert_eq!(
            ok(&format!("{r}/./sub/new.rs")),
            Ok(format!("{r}/sub/new.rs"))
        );
        assert_eq!(
            ok(&format!("{r}/brand/new/dir/file")),
            Ok(format!("{r}/brand/new/dir/file"))
        );
        for bad in [
            "/etc/passwd".to_owned(),
            format!("{r}/../outside/secret"),
            format!("{r}/sub/../../outside/secret"),
            "a.txt".to_owned(),
            r.clone(),
            format!("{r}/a\0b"),
            String::new(),
            format!("{}/project-secrets/x", base.display()),
            format!("{r}/link.md"),
            format!("{r}/outdir/secret"),
            format!("{r}/dangling"),
            format!("{r}/.git/hooks/pre-commit"),
            format!("{r}/.GIT/config"),
            format!("{r}/sub/.Git"),
        ] {
            assert!(confine(&roots, &bad).is_err(), "{bad:?} was accepted");
        }
    }
}
