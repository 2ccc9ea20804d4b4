//! Keeping a workspace that has no repository yet from becoming one.
//!
//! A mount point is what the confined shell cannot create, rename or
//! remove, and a mount needs an existing path. So when a writable root has
//! no `.git` when a confined shell is created, an empty `.git` directory and
//! an empty `HEAD` directory are made there on the host for the shell's
//! lifetime and mounted read-only in its view: the shell cannot create a
//! repository there (`git init` fails with `Read-only file system`), nor
//! make the root itself look like a bare repository to a host's `git`
//! (which takes a directory with `HEAD`, `objects/` and `refs/` for one and
//! would run its `config`'s `core.fsmonitor`): git accepts no directory as
//! `HEAD`. Both are removed when the confined shell is dropped, if still
//! empty (a repository the user created meanwhile is left alone), so what
//! the shell left there is no repository afterwards either, and a host's
//! `git init` there does what it always does. Git treats an empty `.git`
//! directory as no repository, so the host's own `git` is not affected
//! while the shell lives.
//!
//! Many confined shells share a workspace (one per owner), and they start
//! and end concurrently (their confinement is prepared on tokio's blocking
//! pool). A placeholder is therefore counted: the first shell that needs
//! it makes it, every later one shares it, and the last one to go removes
//! it, all under one lock, so no shell's view ever names a placeholder
//! that another shell's end removed between its plan and its mount.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::{SandboxMode, WriteRules};

/// The empty `.git` directories made for one confined shell.
#[derive(Debug, Default)]
pub(crate) struct Placeholders(Vec<PathBuf>);

/// The placeholders this process made and how many shells hold each.
fn held() -> MutexGuard<'static, HashMap<PathBuf, usize>> {
    static HELD: OnceLock<Mutex<HashMap<PathBuf, usize>>> = OnceLock::new();
    HELD.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

impl Placeholders {
    /// Makes the placeholders `rules` need (workspace-write, `.git`
    /// protected, missing). A root where one cannot be made is left as it
    /// is: the shell will then be able to create `.git` there.
    pub(crate) fn create(rules: &WriteRules) -> Placeholders {
        let mut made = Vec::new();
        if rules.mode != SandboxMode::WorkspaceWrite {
            return Placeholders(made);
        }
        let mut held = held();
        for root in &rules.roots {
            for name in [".git", "HEAD"] {
                let path = root.join(name);
                if !rules.protected.contains(&path) {
                    continue;
                }
                let exists = std::fs::symlink_metadata(&path).is_ok();
                if let Some(holders) = held.get_mut(&path) {
                    // Ours already; made again if somebody removed it.
                    if !exists {
                        let _ = std::fs::create_dir(&path);
                    }
                    *holders += 1;
                    made.push(path);
                    continue;
                }
                if exists {
                    continue;
                }
                match std::fs::create_dir(&path) {
                    Ok(()) => {
                        held.insert(path.clone(), 1);
                        made.push(path);
                    }
                    Err(err) => {
                        tracing::warn!(path = %path.display(), %err, "cannot make the git placeholder");
                    }
                }
            }
        }
        Placeholders(made)
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let mut held = held();
        for path in &self.0 {
            match held.get_mut(path) {
                Some(holders) if *holders > 1 => *holders -= 1,
                _ => {
                    held.remove(path);
                    // Only an empty directory goes; anything else is somebody's.
                    let _ = std::fs::remove_dir(path);
                }
            }
        }
    }
}
