//! The few Linux calls the walks make, each relative to a directory
//! descriptor and none following a symbolic link.
//!
//! Every name passed here is one path component read from a directory (or
//! one the crate made), never a path with `/`: a walk opens each directory
//! with `O_DIRECTORY | O_NOFOLLOW` from its parent's descriptor, so a link
//! the owner planted anywhere in a layer is met as a link and never crossed.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// What an entry is, from `fstatat(AT_SYMLINK_NOFOLLOW)` or `fstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    Dir,
    File,
    Symlink,
    /// A character device: `rdev` 0 is an overlay whiteout.
    Char,
    Block,
    Fifo,
    Socket,
}

/// The parts of a `stat` the crate uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub(crate) kind: Type,
    /// The permission bits (`0o7777`).
    pub(crate) perm: u32,
    pub(crate) size: u64,
    pub(crate) rdev: u64,
    pub(crate) atime: libc::timespec,
    pub(crate) mtime: libc::timespec,
}

impl Stat {
    fn from_raw(st: &libc::stat) -> Stat {
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Type::Dir,
            libc::S_IFLNK => Type::Symlink,
            libc::S_IFCHR => Type::Char,
            libc::S_IFBLK => Type::Block,
            libc::S_IFIFO => Type::Fifo,
            libc::S_IFSOCK => Type::Socket,
            _ => Type::File,
        };
        Stat {
            kind,
            perm: st.st_mode & 0o7777,
            size: u64::try_from(st.st_size).unwrap_or(0),
            rdev: st.st_rdev,
            atime: libc::timespec {
                tv_sec: st.st_atime,
                tv_nsec: st.st_atime_nsec,
            },
            mtime: libc::timespec {
                tv_sec: st.st_mtime,
                tv_nsec: st.st_mtime_nsec,
            },
        }
    }

    /// An overlay whiteout: a character device 0/0.
    pub(crate) fn is_whiteout_device(&self) -> bool {
        self.kind == Type::Char && self.rdev == 0
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn open_raw(
    dir: RawFd,
    name: &OsStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    open_any(dir, name, flags | libc::O_NOFOLLOW, mode)
}

/// `openat`, retried on `EINTR`, close-on-exec, never a controlling
/// terminal. Callers add `O_NOFOLLOW` (all but the `/proc/self/fd` reopen).
fn open_any(
    dir: RawFd,
    name: &OsStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let name = cstr(name)?;
    let flags = flags | libc::O_CLOEXEC | libc::O_NOCTTY;
    loop {
        // SAFETY: `name` is a valid NUL-terminated string for the call's
        // duration; the result is checked before it is owned.
        let fd = unsafe { libc::openat(dir, name.as_ptr(), flags, libc::c_uint::from(mode)) };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by openat and nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Opens an absolute or relative path that the crate trusts (the base's
/// and the layers' roots) as a directory; its last component is not
/// followed if it is a link.
pub(crate) fn open_dir_path(path: &std::path::Path) -> io::Result<OwnedFd> {
    open_raw(
        libc::AT_FDCWD,
        path.as_os_str(),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
    )
}

/// Opens the directory `name` in `dir`; a link there fails (`ELOOP` or
/// `ENOTDIR`).
pub(crate) fn open_dir(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    open_raw(dir.as_raw_fd(), name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

/// Opens the regular file `name` in `dir` for reading, never opening
/// anything else: `name` is opened `O_PATH | O_NOFOLLOW` (which opens no
/// device or FIFO and follows no link), `fstat` must say it is a regular
/// file, and only then is that very inode opened for reading through
/// `/proc/self/fd`. Without `/proc`, the open is `O_NONBLOCK` (a FIFO does
/// not block it) and checked by `fstat` after.
pub(crate) fn open_file(dir: &OwnedFd, name: &OsStr) -> io::Result<(File, Stat)> {
    let path_fd = open_raw(dir.as_raw_fd(), name, libc::O_PATH, 0)?;
    let st = fstat(&path_fd)?;
    if st.kind != Type::File {
        return Err(not_regular());
    }
    let proc = format!("/proc/self/fd/{}", path_fd.as_raw_fd());
    // The magic link names the inode `path_fd` holds, whatever the name
    // in `dir` is now.
    let fd = match open_any(libc::AT_FDCWD, OsStr::new(&proc), libc::O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            open_raw(dir.as_raw_fd(), name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?
        }
        Err(e) => return Err(e),
    };
    let st = fstat(&fd)?;
    if st.kind != Type::File {
        return Err(not_regular());
    }
    Ok((File::from(fd), st))
}

fn not_regular() -> io::Error {
    io::Error::other("not a regular file (it changed while it was read)")
}

/// Creates the regular file `name` in `dir` (it must not exist), mode 0600.
pub(crate) fn create_file(dir: &OwnedFd, name: &OsStr) -> io::Result<File> {
    let fd = open_raw(
        dir.as_raw_fd(),
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )?;
    Ok(File::from(fd))
}

pub(crate) fn fstat(fd: &impl AsRawFd) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable stat buffer; it is read only on success.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(Stat::from_raw(&st))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub(crate) fn stat_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Stat> {
    let name = cstr(name)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: valid C string and stat buffer; read only on success.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: fstatat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(Stat::from_raw(&st))
}

/// The target text of the link `name` in `dir`.
pub(crate) fn read_link(dir: &OwnedFd, name: &OsStr) -> io::Result<OsString> {
    let name = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is writable for its whole length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n.unsigned_abs());
    Ok(OsString::from_vec(buf))
}

/// The names in a directory, without `.` and `..`, sorted.
pub(crate) fn list_dir(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    // A descriptor of its own, rewound: fdopendir takes it over.
    let own = open_raw(
        dir.as_raw_fd(),
        OsStr::new("."),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
    )?;
    let raw = std::os::fd::IntoRawFd::into_raw_fd(own);
    // SAFETY: `raw` is an open directory descriptor we own; on success the
    // DIR owns it and closedir closes it.
    let dirp = unsafe { libc::fdopendir(raw) };
    if dirp.is_null() {
        let err = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `raw` is still ours to close.
        unsafe { libc::close(raw) };
        return Err(err);
    }
    let mut names = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; clearing it tells end-of-directory
        // from an error after readdir returns NULL.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `dirp` is a valid DIR until closedir below.
        let ent = unsafe { libc::readdir(dirp) };
        if ent.is_null() {
            let err = io::Error::last_os_error();
            break if err.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(err)
            };
        }
        // SAFETY: readdir returned a valid entry whose d_name is
        // NUL-terminated and lives until the next readdir.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            names.push(OsString::from_vec(name.to_vec()));
        }
    };
    // SAFETY: `dirp` is valid and closed once.
    unsafe { libc::closedir(dirp) };
    result?;
    names.sort();
    Ok(names)
}

pub(crate) fn mkdir(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<()> {
    let name = cstr(name)?;
    // SAFETY: valid C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

pub(crate) fn symlink(target: &OsStr, dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let target = cstr(target)?;
    let name = cstr(name)?;
    // SAFETY: valid C strings.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// `mknodat`: whiteouts (character device 0/0, allowed without
/// `CAP_MKNOD` since Linux 5.8), FIFOs, sockets and, with the capability,
/// devices.
pub(crate) fn mknod(
    dir: &OwnedFd,
    name: &OsStr,
    kind: Type,
    perm: u32,
    rdev: u64,
) -> io::Result<()> {
    let fmt = match kind {
        Type::Char => libc::S_IFCHR,
        Type::Block => libc::S_IFBLK,
        Type::Fifo => libc::S_IFIFO,
        Type::Socket => libc::S_IFSOCK,
        Type::Dir | Type::File | Type::Symlink => {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
    };
    let name = cstr(name)?;
    // SAFETY: valid C string.
    check(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), fmt | perm, rdev) }).map(drop)
}

pub(crate) fn unlink(dir: &OwnedFd, name: &OsStr, is_dir: bool) -> io::Result<()> {
    let name = cstr(name)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: valid C string.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

pub(crate) fn fchmod(fd: &impl AsRawFd, perm: u32) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor we hold.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), perm) }).map(drop)
}

/// Makes the directory `name` in `dir` readable, writable and searchable
/// by its owner (0700), without following a link: the directory is opened
/// `O_PATH | O_NOFOLLOW | O_DIRECTORY` (which needs no permission on it)
/// and changed through `/proc/self/fd`, so the mode reaches exactly the
/// directory opened, even if the name is swapped for a link meanwhile.
pub(crate) fn chmod_dir_owner_rwx(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let fd = open_raw(dir.as_raw_fd(), name, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    let proc = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid C string; the path names our own O_PATH descriptor.
    check(unsafe { libc::chmod(proc.as_ptr(), 0o700) }).map(drop)
}

/// Sets access and modification times on a descriptor.
pub(crate) fn futimens(fd: &impl AsRawFd, st: &Stat) -> io::Result<()> {
    let times = [st.atime, st.mtime];
    // SAFETY: `times` holds two timespecs as the call requires.
    check(unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) }).map(drop)
}

/// Sets the times of `name` in `dir` without following a link.
pub(crate) fn utimens_nofollow(dir: &OwnedFd, name: &OsStr, st: &Stat) -> io::Result<()> {
    let times = [st.atime, st.mtime];
    let name = cstr(name)?;
    // SAFETY: valid C string and two timespecs.
    check(unsafe {
        libc::utimensat(
            dir.as_raw_fd(),
            name.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// The value of xattr `name` on an open file or directory; `None` when it
/// is absent or not readable (a `trusted.*` name without `CAP_SYS_ADMIN`).
pub(crate) fn get_xattr(fd: &impl AsRawFd, name: &CStr) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: `buf` is writable for its length; `name` is NUL-terminated.
        let n = unsafe {
            libc::fgetxattr(
                fd.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n >= 0 {
            buf.truncate(n.unsigned_abs());
            return Ok(Some(buf));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ENOTSUP) | Some(libc::EPERM) | Some(libc::EACCES) => {
                return Ok(None);
            }
            Some(libc::ERANGE) if buf.len() < 65536 => buf.resize(65536, 0),
            _ => return Err(err),
        }
    }
}

/// The xattr names on an open file or directory.
pub(crate) fn list_xattrs(fd: &impl AsRawFd) -> io::Result<Vec<CString>> {
    let mut buf = vec![0u8; 1024];
    let n = loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::flistxattr(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            break n.unsigned_abs();
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            Some(libc::ERANGE) if buf.len() < 65536 => buf.resize(65536, 0),
            _ => return Err(err),
        }
    };
    Ok(buf[..n]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|s| CString::new(s).ok())
        .collect())
}

pub(crate) fn set_xattr(fd: &impl AsRawFd, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: valid C string and a readable value buffer.
    check(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(drop)
}

/// `renameat2` with `RENAME_NOREPLACE` (`exchange: false`: fails if `to`
/// exists) or `RENAME_EXCHANGE` (`exchange: true`: swaps the two
/// atomically), between directories of the crate's own.
pub(crate) fn rename2(
    from_dir: &OwnedFd,
    from: &OsStr,
    to_dir: &OwnedFd,
    to: &OsStr,
    exchange: bool,
) -> io::Result<()> {
    let from = cstr(from)?;
    let to = cstr(to)?;
    let flags = if exchange {
        libc::RENAME_EXCHANGE
    } else {
        libc::RENAME_NOREPLACE
    };
    // The system call itself: musl's libc has no `renameat2` wrapper,
    // and the static `dsh-mcp` links against musl.
    // SAFETY: valid C strings; the kernel returns 0 or -1 with errno.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
