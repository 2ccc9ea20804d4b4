//! Copying an upper layer (fork, snapshot, restore) and removing one, each
//! without following any link in it.

use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::sys::{self, Type};
use crate::{MAX_DEPTH, WorkspaceError};

/// Copies the directory `src` (a layer's upper, or a snapshot) to the new
/// directory `name` in `dst_parent`.
pub(crate) fn copy_tree(
    src: &Path,
    dst_parent: &OwnedFd,
    name: &OsStr,
    dst_path: &Path,
) -> Result<(), WorkspaceError> {
    let src_fd = sys::open_dir_path(src).map_err(|e| WorkspaceError::io("open", src, e))?;
    let st = sys::fstat(&src_fd).map_err(|e| WorkspaceError::io("read", src, e))?;
    sys::mkdir(dst_parent, name, 0o700).map_err(|e| WorkspaceError::io("create", dst_path, e))?;
    let dst =
        sys::open_dir(dst_parent, name).map_err(|e| WorkspaceError::io("open", dst_path, e))?;
    let mut copy = Copy {
        rel: PathBuf::new(),
        src_root: src.to_path_buf(),
    };
    copy.dir(&src_fd, &dst, 0)?;
    finish_dir(&src_fd, &dst, &st).map_err(|e| WorkspaceError::io("copy the attributes of", src, e))
}

struct Copy {
    rel: PathBuf,
    src_root: PathBuf,
}

impl Copy {
    fn err(&self, action: &'static str, name: &OsStr, e: io::Error) -> WorkspaceError {
        WorkspaceError::io(action, self.src_root.join(&self.rel).join(name), e)
    }

    fn dir(&mut self, src: &OwnedFd, dst: &OwnedFd, depth: usize) -> Result<(), WorkspaceError> {
        if depth >= MAX_DEPTH {
            return Err(WorkspaceError::TooDeep {
                path: self.rel.clone(),
                max: MAX_DEPTH,
            });
        }
        let names = sys::list_dir(src).map_err(|e| self.err("list", OsStr::new(""), e))?;
        for name in &names {
            let st = match sys::stat_at(src, name) {
                Ok(st) => st,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.err("read", name, e)),
            };
            match st.kind {
                Type::Dir => {
                    let s = sys::open_dir(src, name).map_err(|e| self.err("open", name, e))?;
                    sys::mkdir(dst, name, 0o700).map_err(|e| self.err("copy", name, e))?;
                    let d = sys::open_dir(dst, name).map_err(|e| self.err("copy", name, e))?;
                    self.rel.push(name);
                    let r = self.dir(&s, &d, depth + 1);
                    self.rel.pop();
                    r?;
                    let st = sys::fstat(&s).map_err(|e| self.err("read", name, e))?;
                    finish_dir(&s, &d, &st)
                        .map_err(|e| self.err("copy the attributes of", name, e))?;
                }
                Type::File => {
                    let (mut s, st) = match sys::open_file(src, name) {
                        Ok(f) => f,
                        // Replaced by something else since the stat: skip it.
                        Err(e)
                            if e.raw_os_error() == Some(libc::ELOOP)
                                || e.kind() == io::ErrorKind::NotFound =>
                        {
                            continue;
                        }
                        Err(e) => return Err(self.err("open", name, e)),
                    };
                    let mut d =
                        sys::create_file(dst, name).map_err(|e| self.err("copy", name, e))?;
                    // std::io::copy between two files uses copy_file_range
                    // (a reflink or in-kernel copy where the filesystem can).
                    io::copy(&mut s, &mut d).map_err(|e| self.err("copy", name, e))?;
                    copy_xattrs(&s, &d).map_err(|e| self.err("copy the attributes of", name, e))?;
                    sys::fchmod(&d, st.perm).map_err(|e| self.err("copy", name, e))?;
                    sys::futimens(&d, &st).map_err(|e| self.err("copy", name, e))?;
                }
                Type::Symlink => {
                    let target = match sys::read_link(src, name) {
                        Ok(t) => t,
                        Err(e)
                            if e.kind() == io::ErrorKind::NotFound
                                || e.kind() == io::ErrorKind::InvalidInput =>
                        {
                            continue;
                        }
                        Err(e) => return Err(self.err("read the link", name, e)),
                    };
                    sys::symlink(&target, dst, name).map_err(|e| self.err("copy", name, e))?;
                    sys::utimens_nofollow(dst, name, &st).map_err(|e| self.err("copy", name, e))?;
                }
                Type::Char | Type::Block | Type::Fifo | Type::Socket => {
                    match sys::mknod(dst, name, st.kind, st.perm, st.rdev) {
                        Ok(()) => {
                            sys::utimens_nofollow(dst, name, &st)
                                .map_err(|e| self.err("copy", name, e))?;
                        }
                        Err(e)
                            if e.kind() == io::ErrorKind::PermissionDenied
                                && !st.is_whiteout_device() =>
                        {
                            tracing::warn!(path = %self.src_root.join(&self.rel).join(name).display(), "a device in a layer was not copied: this process may not make devices");
                        }
                        Err(e) => return Err(self.err("copy", name, e)),
                    }
                }
            }
        }
        Ok(())
    }
}

/// Mode, overlay attributes and times of a copied directory, after its
/// contents (which change its times).
fn finish_dir(src: &OwnedFd, dst: &OwnedFd, st: &sys::Stat) -> io::Result<()> {
    copy_xattrs(src, dst)?;
    sys::fchmod(dst, st.perm)?;
    sys::futimens(dst, st)
}

/// Copies the `user.*` and `trusted.overlay.*` attributes that can be read.
fn copy_xattrs(src: &impl std::os::fd::AsRawFd, dst: &impl std::os::fd::AsRawFd) -> io::Result<()> {
    for name in sys::list_xattrs(src)? {
        let bytes = name.as_bytes();
        if !(bytes.starts_with(b"user.") || bytes.starts_with(b"trusted.overlay.")) {
            continue;
        }
        if let Some(value) = sys::get_xattr(src, &name)? {
            set(dst, &name, &value)?;
        }
    }
    Ok(())
}

fn set(dst: &impl std::os::fd::AsRawFd, name: &CStr, value: &[u8]) -> io::Result<()> {
    match sys::set_xattr(dst, name, value) {
        // A filesystem without user xattrs, or trusted ones without the capability.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTSUP) | Some(libc::EPERM)) => {
            tracing::debug!(attr = ?name, "an extended attribute was not copied: {e}");
            Ok(())
        }
        r => r,
    }
}

/// Removes `name` in `parent` and everything beneath it, following no link
/// and making unreadable directories (overlayfs leaves `work/work` mode
/// 000) readable first. A missing `name` is not an error.
pub(crate) fn remove_tree(
    parent: &OwnedFd,
    name: &OsStr,
    path: &Path,
) -> Result<(), WorkspaceError> {
    remove(parent, name, 0).map_err(|e| WorkspaceError::io("remove", path, e))
}

fn remove(parent: &OwnedFd, name: &OsStr, depth: usize) -> io::Result<()> {
    let st = match sys::stat_at(parent, name) {
        Ok(st) => st,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if st.kind != Type::Dir {
        return ignore_missing(sys::unlink(parent, name, false));
    }
    if depth >= MAX_DEPTH {
        return Err(io::Error::other(format!(
            "it nests deeper than {MAX_DEPTH} directories"
        )));
    }
    if st.perm & 0o700 != 0o700 {
        sys::chmod_dir_owner_rwx(parent, name)?;
    }
    let dir = sys::open_dir(parent, name)?;
    for child in sys::list_dir(&dir)? {
        remove(&dir, &child, depth + 1)?;
    }
    ignore_missing(sys::unlink(parent, name, true))
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}
