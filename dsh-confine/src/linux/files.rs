//! The host's reads in the restricted modes, opened by a confined helper.
//!
//! The host process may read what the shell may not: the host's `/tmp`,
//! `/run`, `/dev/shm`, hidden credential stores, another uid's 0600 file
//! (as root, through `CAP_DAC_OVERRIDE`), the server's own `/proc`. So a
//! host that reads for the shell's user (the editor, in dsh-sandbox) names
//! each path to a *helper*: a process under the same confinement as the
//! shell (its own namespaces and filesystem view, hidden paths included,
//! the same uid without capabilities, Landlock and seccomp), which opens
//! the path and passes the descriptor back over a `SOCK_SEQPACKET` socket
//! (`SCM_RIGHTS`). The kernel decides, in that process, what may be opened;
//! the host then only reads from, or looks at, the descriptor it was given.
//! So a path resolves exactly as it would for the shell — no
//! check-then-open gap for a rename or symlink swap to use.
//!
//! * The helper's view has an empty `/proc`: it is a fork of the host's
//!   process (no `exec`), so its `/proc/self` would show the host's memory
//!   and environment.
//! * Every answer is awaited at most [`ANSWER_WITHIN`]; a helper that does
//!   not answer in time, or died, is killed and the call fails
//!   ([`OpenError::Stopped`]); the next call starts a new one.
//!
//! The helper is the shell's process chain (supervisor, init, helper as
//! pid 2) with a loop of raw system calls where the shell would `exec`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libc::c_int;

use super::{Confinement, sys};
use crate::{Error, Policy, TmpLimits};

/// How long the helper may take to answer one request.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

const OP_OPEN: u8 = 1;
/// Open the path without following a last symbolic link (`O_PATH`), and,
/// if that is a regular file, open it for reading too: a view's `stat` and
/// open in one round trip.
const OP_STAT_OPEN: u8 = 2;
/// The longest request: an operation, flags and a path of `PATH_MAX`.
const REQUEST_MAX: usize = 5 + 4096;
/// An answer: errno (0 for success) and a byte of [`ANSWER_FILE`], the
/// descriptors passed alongside.
const ANSWER_LEN: usize = 5;
/// In an [`OP_STAT_OPEN`] answer: the one descriptor passed is the regular
/// file at the path, opened for reading (the helper checked that it is the
/// inode its `O_PATH` open found there).
const ANSWER_FILE: u8 = 1;

/// A confined helper that opens files for the host: the descriptors it
/// opens in the confined view (the module's docs in `linux/files.rs` tell
/// how). Started on first use, and again after it stopped answering.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::io::Read;
/// let workspace = std::env::current_dir()?.canonicalize()?;
/// let opener = dsh_confine::Opener::new(&dsh_confine::Policy::new(workspace.clone()))?;
/// let fd = opener.open(&workspace.join("Cargo.toml"), libc::O_RDONLY)?;
/// let mut text = String::new();
/// std::fs::File::from(fd).read_to_string(&mut text)?;
/// // Opened as the shell would: a hidden or unreadable path is refused.
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Opener {
    /// The helper's confinement (`None` for [`Opener::in_root`]).
    confinement: Option<Arc<Confinement>>,
    live: Mutex<Option<Live>>,
    /// [`Opener::in_root`]'s root: paths are opened by this process,
    /// resolved in it.
    root: Option<OwnedFd>,
}

/// What [`Opener::stat_open`] found at a path.
#[derive(Debug)]
#[non_exhaustive]
pub enum Found {
    /// A regular file, opened for reading (`O_NONBLOCK`, not following a
    /// last symbolic link): the helper checked that it is the inode that
    /// an `O_PATH | O_NOFOLLOW` open of the path found.
    File(OwnedFd),
    /// Anything else (a symbolic link itself, a directory, a device, or a
    /// regular file that could not be opened for reading or was swapped
    /// meanwhile), opened `O_PATH | O_NOFOLLOW` to look at.
    Other(OwnedFd),
}

/// Why the [`Opener`] gave no descriptor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The helper's `open` failed (or the path is too long, or holds a
    /// NUL): the kernel's answer in the confined view.
    #[error("the confined open failed")]
    Open(#[source] io::Error),
    /// The helper could not be started.
    #[error("the confined opener could not start")]
    Start(#[source] io::Error),
    /// The helper answered without a descriptor.
    #[error("the confined opener sent no descriptor")]
    NoFile,
    /// The helper did not answer in time, or died; it was killed, and the
    /// next call starts a new one.
    #[error("the confined opener stopped answering")]
    Stopped(#[source] io::Error),
}

#[derive(Debug)]
struct Live {
    socket: OwnedFd,
    child: Child,
}

impl Drop for Live {
    fn drop(&mut self) {
        // The helper's supervisor; init dies with it, and the helper with
        // its PID namespace.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Opener {
    /// The opener for `policy`'s view (started on first use). The view is
    /// the shell's but for `/proc`, which is empty; the policy's network,
    /// namespaces, Unix sockets and `/tmp` bounds do not apply (the helper
    /// has its own namespaces, no network and makes no socket calls).
    pub fn new(policy: &Policy) -> Result<Opener, Error> {
        let mut policy = policy.clone();
        policy.files = true;
        policy.network = false;
        policy.namespaces = true;
        policy.unix_sockets = Vec::new();
        policy.tmp_limits = TmpLimits::default();
        let (confinement, _) = Confinement::build(&policy)?;
        Ok(Opener {
            confinement: Some(Arc::new(confinement)),
            live: Mutex::new(None),
            root: None,
        })
    }

    /// An opener that resolves every path in another view of the
    /// filesystem, whose root directory `root` is (`/proc/<pid>/root` of a
    /// process in that view: a [`CopyOnWriteView`](crate::CopyOnWriteView)'s shell): this process
    /// opens each path with `openat2(2)` and `RESOLVE_IN_ROOT`, so `..`
    /// and absolute symbolic links stay in that view, as that process
    /// would resolve them; no helper runs. The answers are those of
    /// [`Opener::new`]'s helper, checked the same way.
    pub fn in_root(root: OwnedFd) -> Opener {
        Opener {
            confinement: None,
            live: Mutex::new(None),
            root: Some(root),
        }
    }

    fn start(&self) -> io::Result<Live> {
        let (ours, theirs) = sys::socketpair()?;
        receive_within(ours.as_fd(), ANSWER_WITHIN)?;
        let confinement = self
            .confinement
            .clone()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let fd = theirs.as_raw_fd();
        let mut command = Command::new("/bin/true");
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: the hook runs between fork and exec; the confinement only
        // makes raw system calls on data prepared before the fork (its
        // `PreExec` contract), and so does `serve`, which never returns.
        unsafe {
            command.pre_exec(move || {
                dsh_pty::PreExec::pre_exec(&*confinement)?;
                // SAFETY: `theirs` is open in the child (the fork copied
                // it; the parent drops its copy only after the spawn).
                serve(BorrowedFd::borrow_raw(fd))
            });
        }
        let child = command.spawn()?;
        drop(theirs);
        Ok(Live {
            socket: ours,
            child,
        })
    }

    /// Starts the helper now if it is not running (a host that allows the
    /// weaker mode learns here whether the helper can run at all).
    pub fn ensure_started(&self) -> io::Result<()> {
        if self.root.is_some() {
            return Ok(());
        }
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        self.running(&mut live).map(|_| ())
    }

    /// The running helper, started first if there is none.
    fn running<'l>(&self, live: &'l mut Option<Live>) -> io::Result<&'l Live> {
        if live.is_none() {
            *live = Some(self.start()?);
        }
        live.as_ref()
            .ok_or_else(|| io::Error::other("the helper was not kept"))
    }

    /// Opens `path` in the helper with `open(2)`'s `flags` (plus
    /// `O_CLOEXEC | O_NOCTTY`).
    pub fn open(&self, path: &Path, flags: i32) -> Result<OwnedFd, OpenError> {
        if let Some(root) = &self.root {
            return open_in_root(root.as_fd(), path, flags | libc::O_CLOEXEC | libc::O_NOCTTY)
                .map_err(OpenError::Open);
        }
        let (fd, _) = self.ask(OP_OPEN, path, flags, &mut || ())?;
        Ok(fd)
    }

    /// `path` with every symbolic link of its existing part resolved, as
    /// [`std::fs::canonicalize`] does, in [`Opener::in_root`]'s view (a
    /// helper's opener cannot: `EINVAL`). A missing component is an error
    /// (`ENOENT`).
    pub fn canonicalize(&self, path: &Path) -> Result<std::path::PathBuf, OpenError> {
        match &self.root {
            Some(root) => canonicalize_in_root(root.as_fd(), path).map_err(OpenError::Open),
            None => Err(OpenError::Open(io::Error::from_raw_os_error(libc::EINVAL))),
        }
    }

    /// What is at `path`, in one round trip: where that is a regular file,
    /// the file opened for reading ([`Found::File`]); else the path opened
    /// `O_PATH | O_NOFOLLOW`, to look at what is there, a symbolic link
    /// itself included ([`Found::Other`]).
    pub fn stat_open(&self, path: &Path) -> Result<Found, OpenError> {
        self.stat_open_while(path, &mut || ())
    }

    /// [`Opener::stat_open`], running `meanwhile` on this thread, once,
    /// while the helper answers (first, where no request could be sent).
    pub fn stat_open_while(
        &self,
        path: &Path,
        meanwhile: &mut dyn FnMut(),
    ) -> Result<Found, OpenError> {
        if let Some(root) = &self.root {
            meanwhile();
            return stat_open_in_root(root.as_fd(), path).map_err(OpenError::Open);
        }
        let mut ran = false;
        let asked = self.ask(OP_STAT_OPEN, path, 0, &mut || {
            ran = true;
            meanwhile();
        });
        if !ran {
            meanwhile();
        }
        let (fd, answer) = asked?;
        Ok(if answer & ANSWER_FILE != 0 {
            Found::File(fd)
        } else {
            Found::Other(fd)
        })
    }

    /// Sends request `op` for `path` (with `flags`) to the helper, started
    /// first if none runs, and runs `meanwhile` once it was sent: the
    /// descriptor it passed back and its answer's flags byte, or the error
    /// its first `open` got.
    fn ask(
        &self,
        op: u8,
        path: &Path,
        flags: c_int,
        meanwhile: &mut dyn FnMut(),
    ) -> Result<(OwnedFd, u8), OpenError> {
        let bytes = path.as_os_str().as_bytes();
        if bytes.len() + 6 > REQUEST_MAX || bytes.contains(&0) {
            return Err(OpenError::Open(io::Error::from_raw_os_error(
                libc::ENAMETOOLONG,
            )));
        }
        let mut request = Vec::with_capacity(bytes.len() + 6);
        request.push(op);
        request.extend_from_slice(&flags.to_ne_bytes());
        request.extend_from_slice(bytes);
        request.push(0);
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let helper = self.running(&mut live).map_err(OpenError::Start)?;
        match exchange(helper.socket.as_fd(), &request, meanwhile) {
            Ok((0, answer, Some(fd))) => Ok((fd, answer)),
            Ok((0, _, None)) => Err(OpenError::NoFile),
            Ok((errno, _, _)) => Err(OpenError::Open(io::Error::from_raw_os_error(errno))),
            Err(e) => {
                // Killed and reaped by Drop; the next call starts another.
                *live = None;
                Err(OpenError::Stopped(e))
            }
        }
    }
}

/// Makes every receive on `socket` wait at most `within` (`SO_RCVTIMEO`:
/// then it fails with `EAGAIN`).
fn receive_within(socket: BorrowedFd<'_>, within: Duration) -> io::Result<()> {
    // The fields' types are inferred, not named: musl's `time_t` and
    // `suseconds_t` aliases are deprecated (they change width in musl 1.2).
    let timeout = libc::timeval {
        tv_sec: within.as_secs().try_into().unwrap_or(i32::MAX.into()),
        // Below 1,000,000: an `i32`, which every width takes.
        tv_usec: i32::try_from(within.subsec_micros())
            .unwrap_or_default()
            .into(),
    };
    // SAFETY: `timeout` is a timeval of this frame, its size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends one request, runs `meanwhile`, and waits (at most
/// [`ANSWER_WITHIN`], the socket's `SO_RCVTIMEO`) for its answer: the
/// helper's errno, its flags byte and the descriptor it passed (at most
/// one).
fn exchange(
    socket: BorrowedFd<'_>,
    request: &[u8],
    meanwhile: &mut dyn FnMut(),
) -> io::Result<(i32, u8, Option<OwnedFd>)> {
    let socket = socket.as_raw_fd();
    // SAFETY: writing from `request`.
    let sent = unsafe {
        libc::send(
            socket,
            request.as_ptr().cast(),
            request.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    meanwhile();
    let mut answer = [0u8; ANSWER_LEN];
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: answer.as_mut_ptr().cast(),
        iov_len: answer.len(),
    };
    // SAFETY: zeroed plain data, pointed at buffers of this frame.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let n = loop {
        // SAFETY: as above; descriptors received are close-on-exec.
        let n = unsafe { libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {} s", ANSWER_WITHIN.as_secs()),
                ));
            }
            _ => return Err(err),
        }
    };
    // SAFETY: `msg` is the header `recvmsg` just filled.
    let mut fds = unsafe { sys::received_fds(&msg) }.into_iter();
    if n as usize != ANSWER_LEN {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the helper closed its end",
        ));
    }
    let errno = i32::from_ne_bytes([answer[0], answer[1], answer[2], answer[3]]);
    Ok((errno, answer[4], fds.next()))
}

/// The helper's loop (pid 2 of its sandbox): receive a request, open, pass
/// the descriptor back. Raw system calls only (after `fork`); never returns.
fn serve(socket: BorrowedFd<'_>) -> ! {
    let socket = socket.as_raw_fd();
    sys::close_all_except(&[socket]);
    // SAFETY: raw system calls on buffers of this frame; `_exit` ends the
    // process without running anything of the parent's.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        let mut request = [0u8; REQUEST_MAX + 1];
        loop {
            let n = libc::recv(socket, request.as_mut_ptr().cast(), REQUEST_MAX, 0);
            if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if n <= 0 {
                libc::_exit(0);
            }
            let n = n as usize;
            let (errno, answer, fd) = if n < 6 || request[n - 1] != 0 {
                (libc::EINVAL, 0, -1)
            } else {
                let path = request[5..].as_ptr().cast::<libc::c_char>();
                let flags = c_int::from_ne_bytes([request[1], request[2], request[3], request[4]]);
                match request[0] {
                    OP_OPEN => answered(
                        libc::open(path, flags | libc::O_CLOEXEC | libc::O_NOCTTY),
                        0,
                    ),
                    OP_STAT_OPEN => stat_open(path),
                    _ => (libc::EINVAL, 0, -1),
                }
            };
            reply(socket, errno, answer, fd);
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
}

/// An open's result as an answer: errno (0 when `fd` is open), `answer`,
/// and the descriptor.
fn answered(fd: c_int, answer: u8) -> (i32, u8, c_int) {
    if fd >= 0 {
        return (0, answer, fd);
    }
    let errno = io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO);
    (errno, 0, -1)
}

/// The helper's half of [`Opener::stat_open`]: where `lstat` finds a
/// regular file at `path`, the file opened for reading ([`ANSWER_FILE`]
/// when `fstat` finds it one too: a swap in between answers what was
/// opened, to look at); else `path` opened `O_PATH | O_NOFOLLOW`.
///
/// # Safety
///
/// `path` points at a NUL-terminated string.
unsafe fn stat_open(path: *const libc::c_char) -> (i32, u8, c_int) {
    let regular = |st: &libc::stat| st.st_mode & libc::S_IFMT == libc::S_IFREG;
    // SAFETY: raw system calls on `path` and on stat buffers of this frame.
    unsafe {
        let mut at: libc::stat = std::mem::zeroed();
        if libc::fstatat(libc::AT_FDCWD, path, &mut at, libc::AT_SYMLINK_NOFOLLOW) == 0
            && regular(&at)
        {
            let file = libc::open(
                path,
                libc::O_RDONLY
                    | libc::O_NONBLOCK
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC
                    | libc::O_NOCTTY,
            );
            let mut opened: libc::stat = std::mem::zeroed();
            if file >= 0 {
                let read = libc::fstat(file, &mut opened) == 0 && regular(&opened);
                return (0, if read { ANSWER_FILE } else { 0 }, file);
            }
        }
        answered(
            libc::open(path, libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC),
            0,
        )
    }
}

/// Sends `errno`, `answer` and, when it is open (`>= 0`), `fd`.
fn reply(socket: c_int, errno: i32, answer: u8, fd: c_int) {
    let e = errno.to_ne_bytes();
    let bytes: [u8; ANSWER_LEN] = [e[0], e[1], e[2], e[3], answer];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: zeroed plain data pointed at buffers of this frame; the
    // control message (one descriptor: CMSG_SPACE(4) = 24 bytes) is built
    // within `control`.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if fd >= 0 {
            let len = std::mem::size_of::<c_int>() as u32;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(len) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(len) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<c_int>(), fd);
        }
        libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL);
    }
}

/// `openat2(root, path, flags)` with `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`:
/// `path` (absolute or not) resolved as if `root` were `/`.
fn open_in_root(root: BorrowedFd<'_>, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a zeroed `open_how` is valid (all fields are integers).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    // `openat2` refuses `O_PATH` with any flag but these.
    let flags = if flags & libc::O_PATH != 0 {
        flags & (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
    } else {
        flags
    };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    loop {
        // SAFETY: `path` is NUL-terminated and `how` lives on this frame;
        // the kernel returns a new descriptor or an error.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if rc >= 0 {
            // SAFETY: a descriptor the kernel just returned, owned by nothing else.
            return Ok(unsafe { OwnedFd::from_raw_fd(rc as c_int) });
        }
        let err = io::Error::last_os_error();
        // The kernel asks for a retry when a rename raced the lookup.
        if err.raw_os_error() != Some(libc::EAGAIN) {
            return Err(err);
        }
    }
}

/// The helper's [`OP_STAT_OPEN`], made in this process in `root`'s view.
fn stat_open_in_root(root: BorrowedFd<'_>, path: &Path) -> io::Result<Found> {
    let cloexec = libc::O_CLOEXEC | libc::O_NOCTTY;
    let at = open_in_root(root, path, libc::O_PATH | libc::O_NOFOLLOW | cloexec)?;
    let seen = sys_fstat(at.as_fd())?;
    if seen.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(Found::Other(at));
    }
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | cloexec;
    match open_in_root(root, path, flags) {
        Ok(file) => {
            let opened = sys_fstat(file.as_fd())?;
            if (opened.st_dev, opened.st_ino) == (seen.st_dev, seen.st_ino) {
                Ok(Found::File(file))
            } else {
                Ok(Found::Other(at))
            }
        }
        Err(_) => Ok(Found::Other(at)),
    }
}

fn sys_fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: `st` is written by the kernel.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) == 0 {
            Ok(st)
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// The most symbolic links one resolution follows (the kernel's limit).
const MAX_LINKS: usize = 40;

/// [`Opener::canonicalize`] in `root`'s view: one component at a time, each
/// looked at without following it, a link's target text taken in its place.
fn canonicalize_in_root(root: BorrowedFd<'_>, path: &Path) -> io::Result<std::path::PathBuf> {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    use std::path::{Component, PathBuf};
    fn push_parts(pending: &mut Vec<OsString>, path: &Path) {
        for part in path.components().rev() {
            match part {
                Component::Normal(name) => pending.push(name.to_owned()),
                Component::ParentDir => pending.push("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    }
    let mut out = PathBuf::from("/");
    let mut pending = Vec::new();
    push_parts(&mut pending, path);
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            out.pop();
            continue;
        }
        let candidate = out.join(&part);
        let fd = open_in_root(
            root,
            &candidate,
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )?;
        if sys_fstat(fd.as_fd())?.st_mode & libc::S_IFMT != libc::S_IFLNK {
            out = candidate;
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: `buf` has room for `buf.len()` bytes; an empty path reads
        // the link `fd` itself is (opened `O_PATH | O_NOFOLLOW`).
        let n = unsafe {
            libc::readlinkat(
                fd.as_raw_fd(),
                c"".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        buf.truncate(n);
        let target = PathBuf::from(OsString::from_vec(buf));
        if target.is_absolute() {
            out = PathBuf::from("/");
        }
        push_parts(&mut pending, &target);
    }
    Ok(out)
}
