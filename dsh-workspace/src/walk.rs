//! Reading an upper layer against the base: [`changes`] and [`diff`].

use std::ffi::{CStr, OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::patch::{self, Content, Side};
use crate::sys::{self, Stat, Type};
use crate::{
    Change, ChangeKind, DIFF_MAX_FILE, DIFF_MAX_TOTAL, Entry, EntryKind, MAX_DEPTH, WorkspaceError,
};

const OPAQUE: [&CStr; 2] = [c"trusted.overlay.opaque", c"user.overlay.opaque"];
const WHITEOUT: [&CStr; 2] = [c"trusted.overlay.whiteout", c"user.overlay.whiteout"];

/// The changes of the view made of `upper` over `base`, sorted by path.
/// A missing `upper` is an empty layer.
pub(crate) fn changes(base: &Path, upper: &Path) -> Result<Vec<Change>, WorkspaceError> {
    let upper_fd = match sys::open_dir_path(upper) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WorkspaceError::io("open the layer", upper, e)),
    };
    let base_fd =
        sys::open_dir_path(base).map_err(|e| WorkspaceError::io("open the base", base, e))?;
    let mut walk = Walk {
        out: Vec::new(),
        rel: PathBuf::new(),
        upper_root: upper.to_path_buf(),
    };
    walk.dir(&upper_fd, Some(&base_fd), false, 0)?;
    walk.out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(walk.out)
}

/// The `git diff` of the view made of `upper` over `base`.
pub(crate) fn diff(base: &Path, upper: &Path) -> Result<String, WorkspaceError> {
    let changes = changes(base, upper)?;
    let base_fd =
        sys::open_dir_path(base).map_err(|e| WorkspaceError::io("open the base", base, e))?;
    let upper_fd = match sys::open_dir_path(upper) {
        Ok(fd) => Some(fd),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(WorkspaceError::io("open the layer", upper, e)),
    };
    let mut out = String::new();
    for change in &changes {
        // Past the total budget, files are named only (as binary ones are).
        let limit = if out.len() as u64 > DIFF_MAX_TOTAL {
            0
        } else {
            DIFF_MAX_FILE
        };
        let before = match &change.before {
            Some(e) => side(&base_fd, &change.path, e, limit)
                .map_err(|err| WorkspaceError::io("read", base.join(&change.path), err))?,
            None => Side::Absent,
        };
        let after = match (&change.after, &upper_fd) {
            (Some(e), Some(fd)) => side(fd, &change.path, e, limit)
                .map_err(|err| WorkspaceError::io("read", upper.join(&change.path), err))?,
            _ => Side::Absent,
        };
        patch::write_change(
            &mut out,
            change.path.as_os_str().as_bytes(),
            &before,
            &after,
        );
    }
    Ok(out)
}

/// Reads one side of a change for the diff, from `root` down `rel` without
/// following a link. A file that changed type since the walk is read as
/// what it is now (a FIFO or device as nothing).
fn side(root: &OwnedFd, rel: &Path, entry: &Entry, limit: u64) -> io::Result<Side> {
    if matches!(entry.kind, EntryKind::Dir | EntryKind::Other) {
        return Ok(Side::Absent);
    }
    let (parent, name) = open_parent(root, rel)?;
    let st = sys::stat_at(&parent, &name)?;
    match st.kind {
        Type::Symlink => Ok(Side::Link {
            target: sys::read_link(&parent, &name)?.into_encoded_bytes(),
        }),
        Type::File => {
            let (file, st) = sys::open_file(&parent, &name)?;
            let mut content = Vec::new();
            file.take(limit + 1).read_to_end(&mut content)?;
            let content = if content.len() as u64 > limit {
                Content::TooLarge
            } else {
                Content::Bytes(content)
            };
            Ok(Side::File {
                perm: st.perm,
                content,
            })
        }
        _ => Ok(Side::Absent),
    }
}

/// Opens the parent directory of `rel` under `root` one component at a
/// time with `O_NOFOLLOW`; returns it and the last component.
pub(crate) fn open_parent(root: &OwnedFd, rel: &Path) -> io::Result<(OwnedFd, OsString)> {
    let mut comps: Vec<&OsStr> = rel.iter().collect();
    let name = comps
        .pop()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?
        .to_os_string();
    let mut dir = root.try_clone()?;
    for c in comps {
        dir = sys::open_dir(&dir, c)?;
    }
    Ok((dir, name))
}

struct Walk {
    out: Vec<Change>,
    /// The path of the directory being read, relative to the roots.
    rel: PathBuf,
    upper_root: PathBuf,
}

impl Walk {
    fn io(&self, action: &'static str, name: &OsStr, err: io::Error) -> WorkspaceError {
        WorkspaceError::io(action, self.upper_root.join(&self.rel).join(name), err)
    }

    fn push(
        &mut self,
        name: &OsStr,
        kind: ChangeKind,
        before: Option<Entry>,
        after: Option<Entry>,
    ) {
        self.out.push(Change {
            path: self.rel.join(name),
            kind,
            before,
            after,
        });
    }

    /// Compares the upper directory `upper` with the base directory `base`
    /// (`None`: the view's directory has nothing from the base). `opaque`:
    /// the base's entries are hidden, so any not in `upper` are deleted.
    fn dir(
        &mut self,
        upper: &OwnedFd,
        base: Option<&OwnedFd>,
        opaque: bool,
        depth: usize,
    ) -> Result<(), WorkspaceError> {
        if depth >= MAX_DEPTH {
            return Err(WorkspaceError::TooDeep {
                path: self.rel.clone(),
                max: MAX_DEPTH,
            });
        }
        let names = sys::list_dir(upper).map_err(|e| self.io("list", OsStr::new(""), e))?;
        if let (true, Some(base)) = (opaque, base) {
            let base_names =
                sys::list_dir(base).map_err(|e| self.io("list the base's", OsStr::new(""), e))?;
            for name in base_names {
                if names.binary_search(&name).is_err() {
                    self.deleted(base, &name, depth)?;
                }
            }
        }
        for name in &names {
            let st = match sys::stat_at(upper, name) {
                Ok(st) => st,
                // Gone since the listing: the owner is writing; nothing to report.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io("read", name, e)),
            };
            let base_st = match base {
                Some(b) => match sys::stat_at(b, name) {
                    Ok(st) => Some(st),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                    Err(e) => return Err(self.io("read the base's", name, e)),
                },
                None => None,
            };
            if self.is_whiteout(upper, name, &st)? {
                if let (Some(b), Some(_)) = (base, base_st) {
                    self.deleted(b, name, depth)?;
                }
                continue;
            }
            let after = self.entry(upper, name, &st)?;
            if st.kind == Type::Dir {
                let sub = sys::open_dir(upper, name).map_err(|e| self.io("open", name, e))?;
                let sub_opaque = opaque || is_opaque(&sub).map_err(|e| self.io("read", name, e))?;
                match (base, base_st) {
                    (Some(b), Some(bst)) if bst.kind == Type::Dir => {
                        if bst.perm != st.perm {
                            let before = self.entry(b, name, &bst)?;
                            self.push(name, ChangeKind::Modified, Some(before), Some(after));
                        }
                        let bsub = sys::open_dir(b, name)
                            .map_err(|e| self.io("open the base's", name, e))?;
                        self.descend(name, &sub, Some(&bsub), sub_opaque, depth)?;
                    }
                    (Some(b), Some(bst)) => {
                        let before = self.entry(b, name, &bst)?;
                        self.push(name, ChangeKind::Modified, Some(before), Some(after));
                        self.descend(name, &sub, None, true, depth)?;
                    }
                    _ => {
                        self.push(name, ChangeKind::Added, None, Some(after));
                        self.descend(name, &sub, None, true, depth)?;
                    }
                }
                continue;
            }
            match (base, base_st) {
                (Some(b), Some(bst)) => {
                    let before = self.entry(b, name, &bst)?;
                    if bst.kind == Type::Dir {
                        // A directory replaced by a file: what was beneath it is gone.
                        self.push(name, ChangeKind::Modified, Some(before), Some(after));
                        let bsub = sys::open_dir(b, name)
                            .map_err(|e| self.io("open the base's", name, e))?;
                        self.rel.push(name);
                        let r = self.deleted_children(&bsub, depth + 1);
                        self.rel.pop();
                        r?;
                    } else if !self.same(upper, b, name, &st, &bst, &before, &after)? {
                        self.push(name, ChangeKind::Modified, Some(before), Some(after));
                    }
                }
                _ => self.push(name, ChangeKind::Added, None, Some(after)),
            }
        }
        Ok(())
    }

    fn descend(
        &mut self,
        name: &OsStr,
        upper: &OwnedFd,
        base: Option<&OwnedFd>,
        opaque: bool,
        depth: usize,
    ) -> Result<(), WorkspaceError> {
        self.rel.push(name);
        let r = self.dir(upper, base, opaque, depth + 1);
        self.rel.pop();
        r
    }

    /// Reports `name` in the base directory `base`, and all beneath it, as
    /// deleted.
    fn deleted(
        &mut self,
        base: &OwnedFd,
        name: &OsStr,
        depth: usize,
    ) -> Result<(), WorkspaceError> {
        let st = match sys::stat_at(base, name) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(self.io("read the base's", name, e)),
        };
        let before = self.entry(base, name, &st)?;
        self.push(name, ChangeKind::Deleted, Some(before), None);
        if st.kind == Type::Dir {
            let sub = sys::open_dir(base, name).map_err(|e| self.io("open the base's", name, e))?;
            self.rel.push(name);
            let r = self.deleted_children(&sub, depth + 1);
            self.rel.pop();
            r?;
        }
        Ok(())
    }

    fn deleted_children(&mut self, base: &OwnedFd, depth: usize) -> Result<(), WorkspaceError> {
        if depth >= MAX_DEPTH {
            return Err(WorkspaceError::TooDeep {
                path: self.rel.clone(),
                max: MAX_DEPTH,
            });
        }
        let names =
            sys::list_dir(base).map_err(|e| self.io("list the base's", OsStr::new(""), e))?;
        for name in &names {
            self.deleted(base, name, depth)?;
        }
        Ok(())
    }

    fn is_whiteout(&self, dir: &OwnedFd, name: &OsStr, st: &Stat) -> Result<bool, WorkspaceError> {
        if st.is_whiteout_device() {
            return Ok(true);
        }
        if st.kind != Type::File || st.size != 0 {
            return Ok(false);
        }
        // Linux 6.7's whiteout: an empty file with `*.overlay.whiteout`.
        let (file, _) = match sys::open_file(dir, name) {
            Ok(f) => f,
            Err(_) => return Ok(false),
        };
        for attr in WHITEOUT {
            if sys::get_xattr(&file, attr)
                .map_err(|e| self.io("read", name, e))?
                .is_some()
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn entry(&self, dir: &OwnedFd, name: &OsStr, st: &Stat) -> Result<Entry, WorkspaceError> {
        let kind = match st.kind {
            Type::File => EntryKind::File,
            Type::Dir => EntryKind::Dir,
            Type::Symlink => EntryKind::Symlink(
                sys::read_link(dir, name).map_err(|e| self.io("read the link", name, e))?,
            ),
            Type::Char | Type::Block | Type::Fifo | Type::Socket => EntryKind::Other,
        };
        Ok(Entry {
            kind,
            mode: st.perm,
        })
    }

    /// Whether an upper entry equals the base's (neither a directory).
    #[allow(clippy::too_many_arguments)]
    fn same(
        &self,
        upper: &OwnedFd,
        base: &OwnedFd,
        name: &OsStr,
        st: &Stat,
        bst: &Stat,
        before: &Entry,
        after: &Entry,
    ) -> Result<bool, WorkspaceError> {
        if st.kind != bst.kind {
            return Ok(false);
        }
        match st.kind {
            Type::Symlink => Ok(before.kind == after.kind),
            Type::File => {
                if st.perm != bst.perm || st.size != bst.size {
                    return Ok(false);
                }
                let (a, _) = sys::open_file(upper, name).map_err(|e| self.io("open", name, e))?;
                let (b, _) =
                    sys::open_file(base, name).map_err(|e| self.io("open the base's", name, e))?;
                same_content(a, b).map_err(|e| self.io("read", name, e))
            }
            _ => Ok(st.perm == bst.perm && st.rdev == bst.rdev),
        }
    }
}

fn is_opaque(dir: &OwnedFd) -> io::Result<bool> {
    for attr in OPAQUE {
        if sys::get_xattr(dir, attr)?.as_deref() == Some(b"y") {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Compares two files in 64 KiB blocks.
fn same_content(mut a: std::fs::File, mut b: std::fs::File) -> io::Result<bool> {
    let mut ba = vec![0u8; 64 << 10];
    let mut bb = vec![0u8; 64 << 10];
    loop {
        let na = read_full(&mut a, &mut ba)?;
        let nb = read_full(&mut b, &mut bb)?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
