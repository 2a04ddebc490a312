//! Proposal documents: the text Claude Code proposes in an `openDiff`,
//! written where the user's editors can open it while they decide.
//!
//! They live in the service's private runtime directory
//! (`<runtime>/proposals/<pid>-<random>/<the target's file name>`), never in
//! the workspace: whatever a repository ships (`.moonkale` as a file, a
//! FIFO, a read-only folder, a symlink) cannot stop a proposal from being
//! written, and the proposal does not show up in the user's file tree or
//! in git. The file keeps the target's name, so the editor highlights it as
//! it would the target.
//!
//! **Invariant:** a proposal is written only below the runtime directory
//! (ours, 0700, checked by [`RuntimeDir::at`]), in a folder made for it
//! alone (0700), in a file created new (0600, `O_EXCL | O_NOFOLLOW`) and
//! renamed into place once whole; nothing of the workspace's is followed or
//! written. The folder goes once
//! the proposal is answered, and folders of services that died are removed
//! when the next IDE server starts.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::runtime::{RuntimeDir, process_alive, uid};

/// The folder every proposal of this user's services is written in:
/// `<runtime>/proposals`.
pub struct ProposalDir {
    runtime: PathBuf,
}

impl Default for ProposalDir {
    fn default() -> ProposalDir {
        ProposalDir::from_env()
    }
}

impl ProposalDir {
    /// Below the runtime directory of the environment
    /// ([`RuntimeDir::path_from_env`]).
    pub fn from_env() -> ProposalDir {
        ProposalDir::in_runtime(RuntimeDir::path_from_env())
    }

    /// Below the runtime directory `runtime`.
    pub fn in_runtime(runtime: PathBuf) -> ProposalDir {
        ProposalDir { runtime }
    }

    fn path(&self) -> PathBuf {
        self.runtime.join("proposals")
    }

    /// The folder, created (0700) if missing; refused if something else (a
    /// symlink, a file, another user's folder) is in its place.
    fn ensure(&self) -> Result<PathBuf, String> {
        RuntimeDir::at(self.runtime.clone()).map_err(|e| e.to_string())?;
        let root = self.path();
        match std::fs::DirBuilder::new().mode(0o700).create(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", root.display())),
        }
        let meta = std::fs::symlink_metadata(&root)
            .map_err(|e| format!("cannot check {}: {e}", root.display()))?;
        if !meta.file_type().is_dir() || meta.uid() != uid() {
            return Err(format!(
                "{} is not a folder of ours; remove it and try again",
                root.display()
            ));
        }
        Ok(root)
    }

    /// Writes `contents` as the proposal for `target` in a new folder of
    /// its own; returns the folder (removed once the proposal is answered)
    /// and the document.
    pub fn write(&self, target: &Path, contents: &str) -> Result<(PathBuf, PathBuf), String> {
        let name = target.file_name().ok_or("the target has no file name")?;
        let root = self.ensure()?;
        let mut raw = [0u8; 8];
        getrandom::fill(&mut raw).map_err(|e| format!("no randomness: {e}"))?;
        let random: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let dir = root.join(format!("{}-{random}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let file = dir.join(name);
        // Written under a temporary name and renamed: a service killed
        // mid-write leaves no torn proposal, only a folder the next start
        // removes.
        let partial = dir.join(".partial");
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&partial)
            .and_then(|mut f| f.write_all(contents.as_bytes()))
            .and_then(|()| std::fs::rename(&partial, &file));
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("cannot write {}: {e}", file.display()));
        }
        Ok((dir, file))
    }

    /// Removes the proposal folders of services that are no longer running
    /// (killed before they could answer and clean up).
    pub fn remove_stale(&self) {
        let Ok(entries) = std::fs::read_dir(self.path()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.split_once('-'))
                .and_then(|(pid, _)| pid.parse::<u32>().ok());
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if let Some(pid) = pid
                && is_dir
                && !process_alive(pid)
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_privately_outside_the_workspace_and_cleaned_after_a_dead_service() {
        let base = tempfile::tempdir().unwrap();
        let proposals = ProposalDir::in_runtime(base.path().join("moonkale"));
        let target = Path::new("/somewhere/src/app.py");
        let (dir, file) = proposals.write(target, "print(1)\n").unwrap();
        assert!(dir.starts_with(base.path().join("moonkale/proposals")));
        assert_eq!(file.file_name().unwrap(), "app.py");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "print(1)\n");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!((mode(&dir), mode(&file)), (0o700, 0o600));

        // A folder of a service that died goes; ours and strangers stay.
        let root = proposals.path();
        let dead = root.join("999999999-0011");
        std::fs::create_dir(&dead).unwrap();
        let odd = root.join("not-a-pid");
        std::fs::create_dir(&odd).unwrap();
        proposals.remove_stale();
        assert!(!dead.exists() && dir.exists() && odd.exists());

        // Something planted in place of the proposals folder is refused,
        // never followed.
        std::fs::remove_dir_all(&root).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &root).unwrap();
        let refused = proposals.write(target, "x").unwrap_err();
        assert!(refused.contains("not a folder of ours"), "{refused}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
}
