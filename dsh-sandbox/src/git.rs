//! Keeping `.git` read-only in a workspace that has none yet.
//!
//! A mount point is what the confined shell cannot create, rename or
//! remove, and a mount needs an existing path. So when a writable root has
//! no `.git` when a confined shell is created, an empty `.git` directory is
//! made there on the host for the shell's lifetime and mounted read-only in
//! its view: the shell cannot create a repository there (`git init` fails
//! with `Read-only file system`). The directory is removed when the shell's
//! pool is dropped, if it is still empty (a repository the user created
//! meanwhile is left alone). Git treats an empty `.git` directory as no
//! repository, so the host's own `git` is not affected.

use std::path::PathBuf;

use crate::{SandboxMode, WriteRules};

/// The empty `.git` directories made for one confined pool.
#[derive(Debug, Default)]
pub(crate) struct Placeholders(Vec<PathBuf>);

impl Placeholders {
    /// Makes the placeholders `rules` need (workspace-write, `.git`
    /// protected, missing). A root where one cannot be made is left as it
    /// is: the shell will then be able to create `.git` there.
    pub(crate) fn create(rules: &WriteRules) -> Placeholders {
        let mut made = Vec::new();
        if rules.mode != SandboxMode::WorkspaceWrite {
            return Placeholders(made);
        }
        for root in &rules.roots {
            let git = root.join(".git");
            if !rules.protected.contains(&git) || std::fs::symlink_metadata(&git).is_ok() {
                continue;
            }
            match std::fs::create_dir(&git) {
                Ok(()) => made.push(git),
                Err(err) => {
                    tracing::warn!(path = %git.display(), %err, "cannot make the .git placeholder");
                }
            }
        }
        Placeholders(made)
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        for path in &self.0 {
            // Only an empty directory goes; anything else is somebody's.
            let _ = std::fs::remove_dir(path);
        }
    }
}
