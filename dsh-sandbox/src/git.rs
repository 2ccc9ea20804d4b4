//! Keeping a workspace that has no repository yet from becoming one.
//!
//! Git takes a directory for a repository when its `.git` is a git
//! directory (or a `gitdir:` file naming one), or when the directory
//! itself is one (a bare repository): a valid `HEAD` (a `ref: refs/…` or
//! an object id) beside an `objects/` and a `refs/` (or a `commondir` file
//! naming where they are). `HEAD` is needed in every shape, so a root
//! whose `.git` is no repository keeps both its `.git` and its `HEAD`
//! read-only ([`WriteRules::protected`](crate::WriteRules::protected)):
//! the editor refuses to write either (by name, and by identity once they
//! exist), and the confined shell's view binds them read-only.
//!
//! A mount point is what the confined shell cannot create, rename or
//! remove, and a mount needs an existing path. So where they are missing,
//! an empty `.git` directory and an empty `HEAD` directory are made there
//! on the host and mounted read-only in the shell's view: the shell cannot
//! create a repository there (`git init` fails with `Read-only file
//! system`), nor make the root itself look like a bare repository to a
//! host's `git` (which would run its `config`'s `core.fsmonitor`): git
//! accepts no directory as `HEAD`, and an empty `.git` directory is no
//! repository to it, so the host's own `git` is not affected while they
//! are there, nor if a crash of the server leaves them behind.
//!
//! A root with a `HEAD` of the user's that git would read (a `ref:` or an
//! object id) is half a bare repository already: there `objects` and
//! `refs` get an empty file no one may search (mode 0) and `commondir` a
//! read-only file naming the root itself (`.`), so none of them can
//! complete it.
//!
//! The placeholders live as long as the owner of a
//! [`SandboxedShell`](crate::SandboxedShell) whose shell needed them, not
//! as long as one shell: across resets, one-shot calls and mode changes
//! they stay in place. They are removed, if still empty (a repository the
//! user created meanwhile is left alone), when the owner is closed (its
//! shells closed and waited for first); a host's `git init` there then
//! does what it always does. A tool dropped while an owner's shell runs
//! (killed, not waited for) leaves that owner's placeholders on disk, as a
//! crash does.
//!
//! Many owners share a workspace, and their shells are prepared
//! concurrently (on tokio's blocking pool). A placeholder is therefore
//! counted: the first holder makes it, every later one shares it, and the
//! last one to go removes it, all under one lock, so no shell's view ever
//! names a placeholder that another holder's end removed between its plan
//! and its mount.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::{SandboxMode, WriteRules};

/// The placeholders one holder keeps.
#[derive(Debug, Default)]
pub(crate) struct Placeholders(Vec<PathBuf>);

/// The placeholders this process made and how many holders hold each.
fn held() -> MutexGuard<'static, HashMap<PathBuf, usize>> {
    static HELD: OnceLock<Mutex<HashMap<PathBuf, usize>>> = OnceLock::new();
    HELD.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

impl Placeholders {
    /// Makes the placeholders `rules` need (workspace-write, `.git` and
    /// `HEAD` protected, missing). A root where one cannot be made is left
    /// as it is: this process could not make it, so neither can the shell,
    /// which runs as the same user with no capability.
    pub(crate) fn create(rules: &WriteRules) -> Placeholders {
        let mut made = Vec::new();
        if rules.mode != SandboxMode::WorkspaceWrite {
            return Placeholders(made);
        }
        let mut held = held();
        for root in &rules.roots {
            for name in [".git", "HEAD"].into_iter().chain(crate::policy::BARE_REST) {
                let path = root.join(name);
                if !rules.protected.contains(&path) {
                    continue;
                }
                let exists = std::fs::symlink_metadata(&path).is_ok();
                if let Some(holders) = held.get_mut(&path) {
                    // Ours already; made again if somebody removed it.
                    if !exists {
                        let _ = make(&path);
                    }
                    *holders += 1;
                    made.push(path);
                    continue;
                }
                if exists {
                    continue;
                }
                match make(&path) {
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

    /// Takes over `other`'s placeholders: those this holder has already
    /// are given back (their count drops, never to zero), the others kept.
    pub(crate) fn merge(&mut self, mut other: Placeholders) {
        let (dup, new): (Vec<PathBuf>, Vec<PathBuf>) = std::mem::take(&mut other.0)
            .into_iter()
            .partition(|p| self.0.contains(p));
        self.0.extend(new);
        drop(Placeholders(dup));
    }

    /// Gives the placeholders up without removing any from the disk (as a
    /// crash would leave them): for a holder whose shell may still be
    /// dying, which could write `HEAD` the moment its placeholder went.
    pub(crate) fn leave(&mut self) {
        let mut held = held();
        for path in self.0.drain(..) {
            match held.get_mut(&path) {
                Some(holders) if *holders > 1 => *holders -= 1,
                _ => {
                    held.remove(&path);
                }
            }
        }
    }
}

/// The mode and content of the file the placeholder at `path` is, or
/// `None` for an empty directory (`.git`, `HEAD`: git reads neither as a
/// repository's). `objects` and `refs` are empty files no one may search
/// (git needs searchable directories there); `commondir` a read-only file
/// naming the directory it is in (`.`: git dies on one it cannot read, or
/// an empty one).
fn file_placeholder(path: &Path) -> Option<(u32, &'static [u8])> {
    match path.file_name()?.to_str()? {
        "objects" | "refs" => Some((0, b"")),
        "commondir" => Some((0o444, b".")),
        _ => None,
    }
}

/// Makes the placeholder at `path`.
fn make(path: &Path) -> std::io::Result<()> {
    let Some((mode, content)) = file_placeholder(path) else {
        return std::fs::create_dir(path);
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    std::io::Write::write_all(&mut options.open(path)?, content)
}

/// Removes the placeholder at `path` if it is still as it was made (an
/// empty directory, a file of the size it was made with); anything else
/// is somebody's.
fn remove(path: &Path) {
    let Some((_, content)) = file_placeholder(path) else {
        let _ = std::fs::remove_dir(path);
        return;
    };
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == content.len() as u64)
    {
        let _ = std::fs::remove_file(path);
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
                    remove(path);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SandboxPolicy;

    #[test]
    fn placeholders_are_counted_across_holders_and_merges() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        let policy = SandboxPolicy::default().tmp_writable(false);
        let rules = WriteRules::new(&policy, SandboxMode::WorkspaceWrite, &ws);
        let mut owner = Placeholders::create(&rules);
        assert!(ws.join(".git").is_dir() && ws.join("HEAD").is_dir());
        // A second shell's set merged into the owner's: one count each.
        owner.merge(Placeholders::create(&rules));
        assert_eq!(owner.0.len(), 2);
        let other = Placeholders::create(&rules);
        drop(owner);
        assert!(ws.join(".git").is_dir() && ws.join("HEAD").is_dir());
        drop(other);
        assert!(!ws.join(".git").exists() && !ws.join("HEAD").exists());
        // A valid HEAD of the user's: what would complete a bare
        // repository is held, and goes as it came.
        std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let rules = WriteRules::new(&policy, SandboxMode::WorkspaceWrite, &ws);
        for name in ["HEAD", "objects", "refs", "commondir"] {
            assert!(rules.protected.contains(&ws.join(name)), "{name}");
        }
        let held = Placeholders::create(&rules);
        assert!(ws.join(".git").is_dir());
        for (name, mode, len) in [("objects", 0, 0), ("refs", 0, 0), ("commondir", 0o444, 1)] {
            let meta = std::fs::metadata(ws.join(name)).unwrap();
            assert!(meta.is_file() && meta.len() == len, "{name}");
            #[cfg(unix)]
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
                mode
            );
            #[cfg(not(unix))]
            let _ = mode;
        }
        drop(held);
        let left: Vec<_> = std::fs::read_dir(&ws)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["HEAD"]);
        // One that git would not read keeps only itself.
        std::fs::write(ws.join("HEAD"), "notes\n").unwrap();
        let rules = WriteRules::new(&policy, SandboxMode::WorkspaceWrite, &ws);
        assert!(rules.protected.contains(&ws.join("HEAD")));
        assert!(!rules.protected.contains(&ws.join("objects")));
        // Read-only makes none.
        let ro = WriteRules::new(&policy, SandboxMode::ReadOnly, &ws);
        assert!(Placeholders::create(&ro).0.is_empty());
    }
}
