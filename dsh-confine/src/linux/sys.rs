//! Raw system calls used between `fork` and `exec`.
//!
//! Every function here is async-signal-safe: it makes system calls on data
//! prepared before the fork (C strings, plain integers) and never allocates,
//! locks or logs. The mount-API constants that `libc` does not carry for
//! glibc targets are defined here from `<linux/mount.h>`.
//!
//! One convention: a descriptor this code opens is returned as an
//! [`OwnedFd`] (closed when dropped), one it only uses is taken as a
//! [`BorrowedFd`]; buffers are slices; C types the kernel fills are
//! [`Plain`] (zeroed, or read as bytes, without `unsafe`); the `unsafe`
//! blocks are here, each with what makes it sound, and every function is
//! safe to call but the two that take a message header's pointers
//! ([`sendmsg`], [`received_fds`]). Raw numbers remain only where the
//! kernel deals in them: a descriptor number sent to another process, and
//! [`close_all_except`]'s list.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libc::{c_int, c_long, c_uint};

/// `OPEN_TREE_CLONE`: a detached copy of the mount tree at the path.
const OPEN_TREE_CLONE: c_uint = 1;
/// `MOVE_MOUNT_F_EMPTY_PATH`: the source is the file descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: c_uint = 0x4;
/// `MOVE_MOUNT_T_EMPTY_PATH`: the target is the file descriptor itself.
const MOVE_MOUNT_T_EMPTY_PATH: c_uint = 0x40;
/// `MOUNT_ATTR_RDONLY`.
pub(crate) const ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID`.
pub(crate) const ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_NODEV`.
pub(crate) const ATTR_NODEV: u64 = 0x4;
/// `MOUNT_ATTR_NOEXEC`.
pub(crate) const ATTR_NOEXEC: u64 = 0x8;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

pub(crate) fn check(rc: c_long) -> io::Result<c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

pub(crate) fn check_int(rc: c_int) -> io::Result<c_int> {
    check(rc.into()).map(|_| rc)
}

/// Owns `fd`, a descriptor a system call just returned (`rc >= 0`).
fn owned(rc: c_long) -> io::Result<OwnedFd> {
    let fd = check(rc)? as c_int;
    // SAFETY: the kernel just opened `fd` for this process, and nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `unshare(2)`.
pub(crate) fn unshare(flags: c_int) -> io::Result<()> {
    // SAFETY: a plain system call.
    check_int(unsafe { libc::unshare(flags) })?;
    Ok(())
}

/// `fork(2)`: the child's pid in the parent, 0 in the child. Only after
/// a `fork` already (a single-threaded child), where the child makes raw
/// system calls only.
pub(crate) fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: the caller runs single-threaded, after `fork`, and the
    // children only make raw system calls.
    let pid = check_int(unsafe { libc::fork() })?;
    Ok(pid)
}

/// `PR_SET_PDEATHSIG` to `SIGKILL`: this process dies with its parent.
pub(crate) fn die_with_parent() {
    // SAFETY: a plain prctl.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
}

/// `PR_SET_DUMPABLE` to 0: no core dump, no `ptrace` by the same uid.
pub(crate) fn not_dumpable() {
    // SAFETY: a plain prctl.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

/// `PR_SET_DUMPABLE` to 1: what a process is after `exec` (a fork of a
/// process that is not dumpable is not either, until it execs).
pub(crate) fn dumpable() {
    // SAFETY: a plain prctl.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
}

/// `kill(2)`; an error (the process is gone) is ignored.
pub(crate) fn kill(pid: libc::pid_t, signal: c_int) {
    // SAFETY: a plain system call.
    unsafe { libc::kill(pid, signal) };
}

/// `_exit(2)`.
pub(crate) fn exit(code: c_int) -> ! {
    // SAFETY: ends the process without running anything of the parent's.
    unsafe { libc::_exit(code) }
}

/// One `read(2)` into `buf`: the bytes read, or -1.
pub(crate) fn read_once(fd: BorrowedFd<'_>, buf: &mut [u8]) -> isize {
    // SAFETY: reading into `buf`, of its length.
    unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
}

/// Writes `data` to the file at `path` (one `write`).
pub(crate) fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    let file = open(path, libc::O_WRONLY | libc::O_CLOEXEC)?;
    // SAFETY: writing from `data`, of its length, to our descriptor.
    let n = unsafe { libc::write(file.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `open(2)` of `path` with `flags` (no mode: nothing is created).
pub(crate) fn open(path: &CStr, flags: c_int) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated.
    owned(unsafe { libc::open(path.as_ptr(), flags) }.into())
}

/// A detached copy of the mount tree at `path` (`open_tree(2)` with
/// `OPEN_TREE_CLONE`, recursive); `follow: false` clones a symbolic link or
/// file itself.
pub(crate) fn clone_tree(path: &CStr, follow: bool) -> io::Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as c_uint | libc::AT_RECURSIVE as c_uint;
    if !follow {
        flags |= libc::AT_SYMLINK_NOFOLLOW as c_uint;
    }
    // SAFETY: a plain syscall on a NUL-terminated path.
    owned(unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) })
}

/// Attaches the detached tree `fd` at `target` (`move_mount(2)`); `target`
/// itself is not followed if it is a symbolic link.
pub(crate) fn attach(tree: BorrowedFd<'_>, target: &CStr) -> io::Result<()> {
    let to = open(target, libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)?;
    // SAFETY: a plain syscall on two descriptors and empty C strings.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })?;
    Ok(())
}

/// Sets and clears mount attributes on the mount at `path` (and every mount
/// beneath it when `recursive`), without following a final symbolic link.
pub(crate) fn set_attr(path: &CStr, set: u64, clear: u64, recursive: bool) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = libc::AT_SYMLINK_NOFOLLOW as c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as c_uint;
    }
    // SAFETY: `attr` lives on this stack frame for the duration of the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    Ok(())
}

/// `mount(2)` of a new filesystem instance.
pub(crate) fn mount_fs(
    fstype: &CStr,
    target: &CStr,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let data = data.map_or(std::ptr::null(), |d| d.as_ptr().cast());
    // SAFETY: NUL-terminated strings that outlive the call.
    check_int(unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data,
        )
    })?;
    Ok(())
}

/// Makes every mount of this namespace private: nothing done here reaches
/// the parent namespace, and nothing from there reaches us.
pub(crate) fn make_private() -> io::Result<()> {
    // SAFETY: constant strings; a plain syscall.
    check_int(unsafe {
        libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })?;
    Ok(())
}

/// Whether anything exists at `path` (not following a final link).
pub(crate) fn exists(path: &CStr) -> bool {
    // SAFETY: `st` is written by the kernel; the path is NUL-terminated.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::lstat(path.as_ptr(), &mut st) == 0
    }
}

/// `mkdir(2)`, succeeding if something is already there.
pub(crate) fn mkdir(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    if exists(path) {
        return Ok(());
    }
    // SAFETY: a NUL-terminated path.
    check_int(unsafe { libc::mkdir(path.as_ptr(), mode) })?;
    Ok(())
}

/// Creates an empty file (a mount point for a device node).
pub(crate) fn touch(path: &CStr) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the descriptor is closed at once.
    let file = owned(
        unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o644 as c_uint,
            )
        }
        .into(),
    )?;
    drop(file);
    Ok(())
}

/// A directory with exactly `mode` (no umask) and, where the user
/// namespace maps them, `uid` and `gid` (an owner it does not map keeps the
/// caller's: the directory belongs to a layer only this view reads).
pub(crate) fn mkdir_owned(path: &CStr, mode: libc::mode_t, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; plain syscalls.
    unsafe {
        if !exists(path) {
            check_int(libc::mkdir(path.as_ptr(), 0o700))?;
        }
        // Unmapped ids fail with EINVAL: the caller's stay.
        libc::lchown(path.as_ptr(), uid, gid);
        check_int(libc::chmod(path.as_ptr(), mode))?;
    }
    Ok(())
}

/// An overlayfs whiteout (a character device 0/0) at `path`: the name is
/// absent from an overlay whose upper layers hold it. Unprivileged in any
/// user namespace since Linux 5.8.
pub(crate) fn whiteout(path: &CStr) -> io::Result<()> {
    // SAFETY: a NUL-terminated path.
    check_int(unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR, 0) })?;
    Ok(())
}

/// Detaches the mount at `path` (`MNT_DETACH`) and removes the directory.
pub(crate) fn detach_and_remove(path: &CStr) -> io::Result<()> {
    // SAFETY: a NUL-terminated path.
    unsafe {
        check_int(libc::umount2(path.as_ptr(), libc::MNT_DETACH))?;
        check_int(libc::rmdir(path.as_ptr()))?;
    }
    Ok(())
}

/// `symlink(2)`.
pub(crate) fn symlink(target: &CStr, link: &CStr) -> io::Result<()> {
    // SAFETY: NUL-terminated strings.
    check_int(unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) })?;
    Ok(())
}

/// `chdir(2)`.
pub(crate) fn chdir(path: &CStr) -> io::Result<()> {
    // SAFETY: a NUL-terminated path.
    check_int(unsafe { libc::chdir(path.as_ptr()) })?;
    Ok(())
}

/// Closes every descriptor from 3 up except those in `keep` (which must be
/// sorted and at least 3).
pub(crate) fn close_all_except(keep: &[c_int]) {
    let mut from: c_uint = 3;
    for &fd in keep {
        let fd = fd as c_uint;
        if fd > from {
            // SAFETY: closing descriptors has no memory effects.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32) };
        }
        from = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, c_uint::MAX, 0u32) };
}

/// Drops every capability: the bounding set, the ambient set, and the
/// effective, permitted and inheritable sets; and locks the securebits so
/// that `execve` of a set-user-ID-root or any program as uid 0 grants none.
pub(crate) fn drop_capabilities() -> io::Result<()> {
    // SAFETY: prctl and capset with valid arguments; `data` and `header`
    // live on this frame.
    unsafe {
        let bits = libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_SETUID_FIXUP
            | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
            | libc::SECBIT_KEEP_CAPS_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        check_int(libc::prctl(
            libc::PR_SET_SECUREBITS,
            bits as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                let err = io::Error::last_os_error();
                // EINVAL: no such capability on this kernel; we are done.
                if err.raw_os_error() == Some(libc::EINVAL) {
                    break;
                }
                return Err(err);
            }
        }
        check_int(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        capset_thread(&[CapData::default(); 2])?;
    }
    Ok(())
}

/// No core dumps, whatever the shell does: `RLIMIT_CORE` of 1 byte (hard
/// and soft) is below every executable format's minimum dump, and the
/// kernel refuses to pipe a dump to a `core_pattern` helper at exactly 1.
/// Without `CAP_SYS_RESOURCE` nothing inside can raise it.
pub(crate) fn no_core_dumps() -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: 1,
        rlim_max: 1,
    };
    // SAFETY: `limit` lives on this frame.
    check_int(unsafe { libc::setrlimit(libc::RLIMIT_CORE, &limit) })?;
    Ok(())
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
pub(crate) fn no_new_privs() -> io::Result<()> {
    // SAFETY: a plain prctl.
    check_int(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
    Ok(())
}

/// Adds a Landlock rule granting `access` beneath `path` to `ruleset`.
/// A path that does not exist is skipped.
pub(crate) fn landlock_allow(ruleset: BorrowedFd<'_>, path: &CStr, access: u64) -> io::Result<()> {
    let beneath = match open(path, libc::O_PATH | libc::O_CLOEXEC) {
        Ok(fd) => fd,
        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(err) => return Err(err),
    };
    let attr = PathBeneath {
        allowed_access: access,
        parent_fd: beneath.as_raw_fd(),
    };
    // SAFETY: a plain syscall; `attr` lives on this frame.
    check(unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            1u32, // LANDLOCK_RULE_PATH_BENEATH
            &attr as *const PathBeneath,
            0u32,
        )
    })?;
    Ok(())
}

/// `landlock_restrict_self(2)`.
pub(crate) fn landlock_restrict(ruleset: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a plain syscall.
    check(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) })?;
    Ok(())
}

/// Installs a seccomp filter program.
pub(crate) fn seccomp_install(program: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `program`, which outlives the call; the kernel
    // copies the filter.
    check(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &prog as *const libc::sock_fprog,
        )
    })?;
    Ok(())
}

/// Installs a seccomp filter program that answers through a user
/// notification listener, and returns the listener. Where the kernel has
/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19), a call the
/// supervisor has received waits for its answer killably: only a fatal
/// signal ends the wait, so a handled signal can never make the caller
/// restart a call the supervisor is making. Older kernels refuse the flag
/// (`EINVAL`) and get the filter without it.
pub(crate) fn seccomp_listener(program: &[libc::sock_filter]) -> io::Result<OwnedFd> {
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    let install = |flags: libc::c_ulong| {
        // SAFETY: as in `seccomp_install`; the listener is ours.
        owned(unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags as u32,
                &prog as *const libc::sock_fprog,
            )
        })
    };
    let fd = match install(
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
    ) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            install(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)?
        }
        other => other?,
    };
    Ok(fd)
}

/// One word of a capability set (`__user_cap_data_struct`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CapData {
    pub(crate) effective: u32,
    pub(crate) permitted: u32,
    pub(crate) inheritable: u32,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// The calling thread's capability sets.
pub(crate) fn capget_thread() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: `header` and `data` live on this frame.
    check(unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    })?;
    Ok(data)
}

/// Sets the calling thread's capability sets (only that thread's).
pub(crate) fn capset_thread(data: &[CapData; 2]) -> io::Result<()> {
    let header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    // SAFETY: `header` and `data` live on this frame.
    check(unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) })?;
    Ok(())
}

/// Keeps one capability, effective and permitted, and drops every other
/// from those two sets and the inheritable one (the bounding set stays: a
/// process that never `exec`s gains nothing from it).
pub(crate) fn keep_only_capability(cap: u32) -> io::Result<()> {
    let mut data = [CapData::default(); 2];
    let word = &mut data[(cap / 32) as usize];
    word.effective = 1 << (cap % 32);
    word.permitted = 1 << (cap % 32);
    capset_thread(&data)
}

/// `pidfd_open(pid, 0)`.
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: a plain system call.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) })
}

/// `pidfd_getfd(pidfd, fd, 0)`: our copy of descriptor number `fd` of
/// the process of `pidfd`.
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: c_int) -> io::Result<OwnedFd> {
    // SAFETY: a plain system call.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0u32) })
}

/// Reads exactly `buf.len()` bytes (retrying on `EINTR`); `false` at
/// end-of-file or on an error.
pub(crate) fn read_exact(fd: BorrowedFd<'_>, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        let n = read_once(fd, &mut buf[got..]);
        if n > 0 {
            got += n as usize;
        } else if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return false;
        }
    }
    true
}

/// Writes all of `buf` (one small write to a pipe).
pub(crate) fn write_all(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<()> {
    // SAFETY: writing from `buf`, of its length.
    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != buf.len() {
        return Err(io::Error::from_raw_os_error(libc::EPIPE));
    }
    Ok(())
}

/// Opens `path` as an `O_PATH` directory descriptor (close-on-exec).
pub(crate) fn open_dir_path(path: &CStr) -> io::Result<OwnedFd> {
    open(path, libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
}

/// Brings the loopback interface of this network namespace up.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain system call; the socket is ours.
    let sock = owned(
        unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }.into(),
    )?;
    let fd = sock.as_raw_fd();
    // SAFETY: two ioctls on our socket and a zeroed `ifreq` on this frame.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS as libc::Ioctl, &mut req);
        if rc == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS as libc::Ioctl, &req);
        }
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `pipe2(O_CLOEXEC)`: `(read end, write end)`.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    check_int(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Reads and discards until end-of-file (or an error other than `EINTR`).
pub(crate) fn drain(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 16];
    loop {
        let n = read_once(fd, &mut buf);
        if n > 0 || (n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)) {
            continue;
        }
        return;
    }
}

/// `waitpid(pid)` retried on `EINTR`; `None` on any other error.
pub(crate) fn wait(pid: libc::pid_t) -> Option<(libc::pid_t, c_int)> {
    loop {
        let mut status: c_int = 0;
        // SAFETY: `status` is a local the kernel writes.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc >= 0 {
            return Some((rc, status));
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// Ends this process the way `status` (from `waitpid`) says another one
/// ended: the same exit code, or death by the same signal.
pub(crate) fn exit_like(status: c_int, signal: c_int) -> ! {
    // SAFETY: signal/kill/_exit are async-signal-safe and end the process.
    unsafe {
        let sig = if signal > 0 {
            signal
        } else if libc::WIFSIGNALED(status) {
            libc::WTERMSIG(status)
        } else {
            0
        };
        if sig > 0 {
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        libc::_exit(1)
    }
}

/// `socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)`.
pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors, owned right after.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The descriptors passed in `msg`'s `SCM_RIGHTS` messages, owned (the
/// host's side only: it allocates).
///
/// # Safety
///
/// `msg` is a header `recvmsg` filled, its control buffer still alive.
pub(crate) unsafe fn received_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `control`;
    // each SCM_RIGHTS message holds `(len - CMSG_LEN(0)) / 4` descriptors,
    // owned from here on.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<c_int>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    fds
}

/// A TCP socket listening on `127.0.0.1:port` of this process's network
/// namespace (close-on-exec).
pub(crate) fn loopback_listener(port: u16, backlog: c_int) -> io::Result<OwnedFd> {
    // SAFETY: a plain system call; the socket is owned right after.
    let sock = owned(
        unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) }.into(),
    )?;
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    bind(
        sock.as_fd(),
        &addr,
        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
    )?;
    // SAFETY: a plain system call on our socket.
    check_int(unsafe { libc::listen(sock.as_raw_fd(), backlog) })?;
    Ok(sock)
}

/// Sends `fd` over the Unix socket `socket` (`SCM_RIGHTS`, one byte of
/// data).
pub(crate) fn send_fd(socket: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
    let byte = [0u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_ptr().cast_mut().cast(),
        iov_len: byte.len(),
    };
    let mut control = [0u64; 4];
    let len = std::mem::size_of::<c_int>() as u32;
    // SAFETY: zeroed plain data pointed at buffers of this frame; the
    // control message (one descriptor: CMSG_SPACE(4) = 24 bytes) is built
    // within `control`.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(len) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(len) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<c_int>(), fd.as_raw_fd());
        sendmsg(socket, &msg, libc::MSG_NOSIGNAL)?;
    }
    Ok(())
}

/// `SECCOMP_IOCTL_NOTIF_ID_VALID` as first defined (`_IOR`), which every
/// kernel with user notification accepts.
pub(crate) const NOTIF_ID_VALID: libc::Ioctl = 0x8008_2102u32 as libc::Ioctl;

/// Receives one seccomp user notification from `listener`
/// (`SECCOMP_IOCTL_NOTIF_RECV`).
pub(crate) fn notif_receive(listener: BorrowedFd<'_>) -> io::Result<libc::seccomp_notif> {
    // SAFETY: a zeroed notification (the kernel requires it) on this frame,
    // which the ioctl fills.
    unsafe {
        let mut notif: libc::seccomp_notif = std::mem::zeroed();
        check_int(libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &mut notif,
        ))?;
        Ok(notif)
    }
}

/// Answers a seccomp user notification (`SECCOMP_IOCTL_NOTIF_SEND`);
/// `ENOENT`: the caller is gone or was interrupted.
pub(crate) fn notif_answer(
    listener: BorrowedFd<'_>,
    resp: &libc::seccomp_notif_resp,
) -> io::Result<()> {
    // SAFETY: `resp` is borrowed for the call; the kernel only reads it.
    check_int(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            resp as *const libc::seccomp_notif_resp,
        )
    })?;
    Ok(())
}

/// Whether the notification `id` of `listener` is still waiting for its
/// answer (`SECCOMP_IOCTL_NOTIF_ID_VALID`).
pub(crate) fn notif_id_valid(listener: BorrowedFd<'_>, id: u64) -> io::Result<()> {
    // SAFETY: `id` lives on this frame; the kernel only reads it.
    check_int(unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_ID_VALID, &id as *const u64) })?;
    Ok(())
}

/// `tgkill(2)`: `signal` to thread `tid` of thread group `tgid`.
pub(crate) fn tgkill(tgid: libc::pid_t, tid: libc::pid_t, signal: c_int) -> io::Result<()> {
    // SAFETY: a plain system call.
    check(unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, signal) })?;
    Ok(())
}

/// `getpid(2)` (it cannot fail).
pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: a plain system call without arguments.
    unsafe { libc::getpid() }
}

/// Ignores `signal` (`SIG_IGN`).
pub(crate) fn ignore_signal(signal: c_int) -> io::Result<()> {
    // SAFETY: setting a disposition that runs no code of ours.
    if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `poll(2)` of `fds` for `timeout` ms (-1: no end): how many have events.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: c_int) -> io::Result<usize> {
    // SAFETY: the kernel writes the `revents` of `fds`, of its length.
    let n = check_int(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) })?;
    Ok(n as usize)
}

/// `CLOCK_MONOTONIC` in nanoseconds (the vDSO: no allocation).
pub(crate) fn monotonic_ns() -> io::Result<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` lives on this frame; the call writes it.
    check_int(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) })?;
    Ok((ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64))
}

/// An anonymous private mapping of `len` bytes, readable and writable,
/// zero-filled (never unmapped: it lives as long as the process).
pub(crate) fn map_anonymous(len: usize) -> io::Result<*mut u8> {
    // SAFETY: a new mapping where the kernel chooses; it touches no
    // existing memory.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(at.cast())
}

/// `fchdir(2)`.
pub(crate) fn fchdir(dir: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor we hold.
    check_int(unsafe { libc::fchdir(dir.as_raw_fd()) })?;
    Ok(())
}

/// `openat(2)` of `path` from `dir` with `flags` (no mode: nothing is
/// created).
pub(crate) fn open_at(dir: BorrowedFd<'_>, path: &CStr, flags: c_int) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated; the descriptor is owned right after.
    owned(unsafe { libc::openat(dir.as_raw_fd(), path.as_ptr(), flags) }.into())
}

/// `fstat(2)`.
pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: `st` is plain data on this frame, written by the kernel.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        check_int(libc::fstat(fd.as_raw_fd(), &mut st))?;
        Ok(st)
    }
}

/// `readlinkat(2)` of `path` from `dir` into `buf`: the bytes written
/// (all of `buf`: perhaps cut short).
pub(crate) fn readlink_at(dir: BorrowedFd<'_>, path: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `path` is NUL-terminated; the kernel writes at most
    // `buf.len()` bytes into `buf`.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            path.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    Ok(check(n as c_long)? as usize)
}

/// The file status flags of `fd`'s open file description (`F_GETFL`).
pub(crate) fn status_flags(fd: BorrowedFd<'_>) -> io::Result<c_int> {
    // SAFETY: a plain system call on a descriptor we hold.
    check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}

/// Sets the file status flags of `fd`'s open file description
/// (`F_SETFL`).
pub(crate) fn set_status_flags(fd: BorrowedFd<'_>, flags: c_int) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor we hold.
    check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) })?;
    Ok(())
}

/// Reads the `SOL_SOCKET` option `option` of `sock` into `value`
/// (`getsockopt(2)`).
fn socket_option<T: Plain>(sock: BorrowedFd<'_>, option: c_int, value: &mut T) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`, any bit
    // pattern of which is a valid `T` (`Plain`).
    check_int(unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (value as *mut T).cast(),
            &mut len,
        )
    })?;
    Ok(())
}

/// An integer `SOL_SOCKET` option of `sock` (`SO_DOMAIN`, `SO_TYPE`,
/// `SO_ERROR`, …).
pub(crate) fn socket_int(sock: BorrowedFd<'_>, option: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    socket_option(sock, option, &mut value)?;
    Ok(value)
}

/// The send timeout of `sock` (`SO_SNDTIMEO`; zero: none).
pub(crate) fn send_timeout(sock: BorrowedFd<'_>) -> io::Result<libc::timeval> {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    socket_option(sock, libc::SO_SNDTIMEO, &mut tv)?;
    Ok(tv)
}

/// Plain C data the kernel may fill: every bit pattern is a valid value.
///
/// # Safety
///
/// Only for types of integers, raw pointers and arrays of them.
pub(crate) unsafe trait Plain {}
// SAFETY: integers.
unsafe impl Plain for c_int {}
// SAFETY: a struct of integers.
unsafe impl Plain for libc::timeval {}
// SAFETY: structs of integers and arrays of integers.
unsafe impl Plain for libc::sockaddr_un {}
// SAFETY: as above.
unsafe impl Plain for libc::sockaddr_in {}
// SAFETY: as above.
unsafe impl Plain for libc::sockaddr_storage {}

// SAFETY: integers and raw pointers (null when zero).
unsafe impl Plain for libc::msghdr {}

/// A zeroed `T`.
pub(crate) fn zeroed<T: Plain>() -> T {
    // SAFETY: all-zero bytes are a valid `T` (`Plain`).
    unsafe { std::mem::zeroed() }
}

/// The bytes of `value`, for a copy from another process to fill.
pub(crate) fn plain_bytes<T: Plain>(value: &mut T) -> &mut [u8] {
    // SAFETY: `value` is `size_of::<T>()` bytes, borrowed for the slice's
    // life; any bytes written make a valid `T` (`Plain`).
    unsafe {
        std::slice::from_raw_parts_mut((value as *mut T).cast::<u8>(), std::mem::size_of::<T>())
    }
}

/// A socket address type (`sockaddr_un`, `sockaddr_in`,
/// `sockaddr_storage`).
pub(crate) trait SocketAddress: Plain {}
impl SocketAddress for libc::sockaddr_un {}
impl SocketAddress for libc::sockaddr_in {}
impl SocketAddress for libc::sockaddr_storage {}

/// `addr` as `(pointer, length)` for a call: its first `len` bytes
/// (`EINVAL` if `len` is more than it holds).
fn address_of<A: SocketAddress>(
    addr: &A,
    len: libc::socklen_t,
) -> io::Result<*const libc::sockaddr> {
    if len as usize > std::mem::size_of::<A>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok((addr as *const A).cast())
}

/// `connect(2)` of `sock` to the first `len` bytes of `addr`.
pub(crate) fn connect<A: SocketAddress>(
    sock: BorrowedFd<'_>,
    addr: &A,
    len: libc::socklen_t,
) -> io::Result<()> {
    let at = address_of(addr, len)?;
    // SAFETY: the kernel reads `len` bytes of `addr`, which holds them.
    check_int(unsafe { libc::connect(sock.as_raw_fd(), at, len) })?;
    Ok(())
}

/// `bind(2)` of `sock` to the first `len` bytes of `addr` (a relative
/// pathname from this process's working directory).
pub(crate) fn bind<A: SocketAddress>(
    sock: BorrowedFd<'_>,
    addr: &A,
    len: libc::socklen_t,
) -> io::Result<()> {
    let at = address_of(addr, len)?;
    // SAFETY: the kernel reads `len` bytes of `addr`, which holds them.
    check_int(unsafe { libc::bind(sock.as_raw_fd(), at, len) })?;
    Ok(())
}

/// `sendmsg(2)` of `msg` on `sock` with `flags`: the bytes sent.
///
/// # Safety
///
/// Every pointer in `msg` (name, vectors and what they point at, control)
/// names memory of this process that is alive, of the length `msg` gives.
pub(crate) unsafe fn sendmsg(
    sock: BorrowedFd<'_>,
    msg: &libc::msghdr,
    flags: c_int,
) -> io::Result<usize> {
    // SAFETY: the caller vouches for `msg`'s buffers; the kernel only
    // reads them.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), msg, flags) };
    Ok(check(n as c_long)? as usize)
}

/// Fills `local` from the memory of process `pid` that `remote` describes
/// (`process_vm_readv(2)`): the bytes read.
pub(crate) fn read_process(
    pid: libc::pid_t,
    remote: &[libc::iovec],
    local: &mut [u8],
) -> io::Result<usize> {
    let into = libc::iovec {
        iov_base: local.as_mut_ptr().cast(),
        iov_len: local.len(),
    };
    // SAFETY: the kernel writes at most `local.len()` bytes into `local`;
    // `remote` describes the other process's memory, which the kernel
    // checks.
    let n = unsafe {
        libc::process_vm_readv(
            pid,
            &into,
            1,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    Ok(check(n as c_long)? as usize)
}

/// Writes `local` into the memory of process `pid` that `remote`
/// describes (`process_vm_writev(2)`): the bytes written.
pub(crate) fn write_process(
    pid: libc::pid_t,
    remote: &[libc::iovec],
    local: &[u8],
) -> io::Result<usize> {
    let from = libc::iovec {
        iov_base: local.as_ptr().cast_mut().cast(),
        iov_len: local.len(),
    };
    // SAFETY: the kernel only reads `local`, of its length; `remote`
    // describes the other process's memory, which the kernel checks.
    let n = unsafe {
        libc::process_vm_writev(
            pid,
            &from,
            1,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    Ok(check(n as c_long)? as usize)
}
