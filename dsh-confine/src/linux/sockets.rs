//! Unix sockets the sandbox did not make: the supervisor makes every
//! socket-address system call for the confined processes.
//!
//! Landlock restricts `connect(2)` to pathname sockets only from ABI 9, and
//! neither a read-only mount nor a network namespace stops it, so a Docker,
//! systemd or ssh-agent socket anywhere in the view would be a way out. Here
//! a seccomp filter (installed by init, so that the shell and everything it
//! starts inherit it) hands `connect`, `sendto` with an address, `sendmsg`,
//! `sendmmsg` and — with the network on, where abstract names are the
//! host's — `bind` to the supervisor as user notifications, and the
//! supervisor *makes the call itself* on the caller's own socket (fetched
//! with `pidfd_getfd`), from a copy of the arguments it read once:
//!
//! * a pathname address is resolved once, in the sandbox's own view (the
//!   supervisor shares its mount namespace) from the caller's working
//!   directory, to an `O_PATH` descriptor; the socket is reached only if
//!   that descriptor's path lies beneath a writable root, the private
//!   `/tmp` or `/dev/shm`, or an entry of the policy's allow list, and the
//!   call is then made with the address `self/fd/N` of that descriptor —
//!   so neither a rewritten argument nor a symlink or rename swapped in
//!   meanwhile changes what is reached;
//! * an abstract address is the sandbox's own with the network off (its own
//!   network namespace); with the network on it is refused (`EPERM`), for
//!   `connect`, `sendto`, `sendmsg` and `bind` alike;
//! * any other family is passed on unchanged: the kernel judges it, on the
//!   caller's socket, in the caller's network namespace;
//! * descriptors passed with `SCM_RIGHTS` are fetched from the caller too.
//!
//! Nothing is ever continued (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): the
//! kernel would read the arguments again after the check. The supervisor
//! keeps only `CAP_SYS_PTRACE` in the sandbox's user namespace (to fetch
//! descriptors and read memory of processes that made themselves not
//! dumpable), so its own file permissions are those of the shell.
//! The peer credentials of a connection a program made name the
//! supervisor's process (not visible inside) with the same uid and gid.
//!
//! # No call waits for another's
//!
//! The supervisor is one process that never blocks in a socket call: it
//! makes each call without waiting (sends with `MSG_DONTWAIT`; a `connect`
//! on a blocking socket with `O_NONBLOCK` set on it for the duration of
//! that one system call, then cleared) and keeps a call that would wait in
//! a table of up to 256, polled together with the listener: a TCP
//! `connect` under way or a send waiting for room is woken by `POLLOUT` on
//! the caller's socket; a Unix listener with a full backlog, or a Unix
//! datagram peer whose queue is full, has no poll event for the caller's
//! socket and is tried again every 20 ms. Meanwhile every other
//! notification is received and answered, so one process's `connect` to a
//! listener that never accepts holds back no other socket call, DNS
//! included. Only 256 calls waiting at once fill the table; a further
//! notification then stays queued in the kernel (where its caller is still
//! interruptible) until one of them ends. Threads were the other way, but
//! after `fork` in a multithreaded process they could not use the C
//! library's thread-local `errno` safely, and worker processes would each
//! be a copy of the host's address space and still a fixed number.
//!
//! What the caller sees is what it would see unconfined:
//!
//! * a caller that does not wait (`O_NONBLOCK` on its socket, or
//!   `MSG_DONTWAIT`) gets the one attempt's answer, `EINPROGRESS` or
//!   `EAGAIN` included;
//! * a blocking caller is answered when its call completes, or when the
//!   socket's `SO_SNDTIMEO` is up, with what the kernel answers then
//!   (`EINPROGRESS` for a TCP `connect`, `EAGAIN` for a Unix one, the bytes
//!   sent so far or `EAGAIN` for a send); a blocking stream send goes on
//!   until all of it is sent, in parts of at most 256 KiB, as the kernel's
//!   own does. A `connect` restarted after a wait that was interrupted
//!   (`EALREADY` without waiting) waits for the connection under way, as
//!   the kernel's own restart does.
//!
//! Two differences remain: while the supervisor makes a blocking caller's
//! `connect`, `O_NONBLOCK` is set on the socket's open file description,
//! which another process or thread sharing that socket could see for the
//! duration of that system call; and a send that waited reads the rest of
//! the caller's data from its memory when it goes on (the kernel too copies
//! a blocking send as room comes), while its address is read once.
//!
//! # Interrupting the caller frees its call
//!
//! The filter is installed with `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`
//! where the kernel has it (Linux 5.19): until the supervisor has received
//! a call, any signal interrupts it as usual (nothing was made); once
//! received, only a fatal signal ends the caller's wait. The supervisor
//! polls a pidfd of every caller whose call waits, and abandons the call
//! as soon as the caller is gone: it closes its copy of the socket, so a
//! `connect` still under way goes on only if another process holds the
//! socket (as it would unconfined), and its row is free. Every turn of the
//! loop, and at least every 500 ms while calls wait, it also asks the
//! kernel whether each waiting call is still valid
//! (`SECCOMP_IOCTL_NOTIF_ID_VALID`) and abandons those that are not (a
//! thread ended by another's `execve`; before Linux 5.19, a caller a
//! handled signal interrupted).
//!
//! # Never twice
//!
//! With `WAIT_KILLABLE_RECV`, a call the supervisor received cannot be
//! interrupted by a handled signal, so the kernel never restarts a call
//! whose send the supervisor made: each send goes out once, and a fatal
//! signal leaves nothing to restart. Kernels before 5.19 refuse the flag;
//! the filter is installed without it, and there a handled signal that
//! arrives after the supervisor received a send and before it answered
//! interrupts the caller, whose restarted (or retried, after `EINTR`) call
//! is a new notification: that data can go out twice. The window is the
//! time the supervisor takes over that one call (microseconds, or the wait
//! of a blocking send); nothing in the notification interface can close it
//! without the flag.
//!
//! # The supervisor is confined too
//!
//! Once its loop starts, it runs under its own seccomp filter
//! (`no_new_privs` first): only the system calls of its loop and its end —
//! `poll`/`ppoll`, `ioctl` with the three notification requests only,
//! `clock_gettime`, `openat` (reading and `O_PATH` only), `read`, `close`, `fstat`/`newfstatat`/`statx`,
//! `readlinkat`, `fchdir`, `pidfd_open`, `pidfd_getfd`, `process_vm_readv`,
//! `process_vm_writev`, `fcntl` (`F_GETFL`/`F_SETFL`, and `F_GETFD`, with
//! which the standard library's `OwnedFd` checks in debug builds that a
//! descriptor it closes is open), `getsockopt`,
//! `connect`, `sendmsg`, `bind`, `getpid`, `tgkill` (`SIGPIPE` only),
//! `wait4`, `rt_sigaction`, `rt_sigprocmask`, `rt_sigreturn`,
//! `restart_syscall`, `kill`, `exit`, `exit_group`; any other system call
//! kills it, and init with it (`PR_SET_PDEATHSIG`), so the sandbox ends
//! instead of waiting for answers that would never come. `openat` is
//! allowed only without a flag that writes, creates or truncates. It
//! cannot `socket`, `execve`, `fork`, `mount` or `ptrace`, and makes no
//! file but the socket a `bind` of the sandbox names.
//!
//! It needs the host's `/proc` (opened before the view replaced it) for a
//! caller's `<tid>/status` (its thread group), `<tid>/cwd` (to resolve a
//! relative path as the caller would) and `self/fd/N` (to check and reach a
//! resolved socket). Its filter lets it open nothing for writing; what it
//! can read of the host's `/proc` is what the shell's own user could
//! outside the sandbox: the world-readable entries, and the ptrace-guarded
//! ones (`environ`, `mem`, …) of the host's dumpable processes of the same
//! uid. A Landlock domain of its own (signals and ptrace scoped to the
//! sandbox) would narrow that, but any Landlock domain denies every link
//! or rename into another directory unless a rule of its own grants it
//! (`Refer`), and one that handles `Refer` forbids init's mounts: the
//! sandbox's view could then not be made. So it has none.
//!
//! Everything here runs in the supervisor or init, after `fork` in a
//! multithreaded process: raw system calls on memory prepared before the
//! fork (the guard and both filters), or mapped after it
//! (its buffers, its table and its poll set), and no allocation.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use libc::{c_int, c_long, c_void};

use super::{seccomp, sys};
use crate::Error;

/// What the supervisor lets a confined process reach, prepared in the
/// parent.
#[derive(Debug)]
pub(crate) struct Guard {
    program: Vec<libc::sock_filter>,
    /// Paths (no trailing `/`) beneath which pathname sockets are reached.
    allowed: Vec<Vec<u8>>,
    /// Paths beneath those that are not (protected `.git` paths, where a
    /// host's git keeps its fsmonitor socket).
    denied: Vec<Vec<u8>>,
    /// The network namespace is the host's: abstract names are refused.
    host_network: bool,
    /// The supervisor's own seccomp filter (see the module docs).
    own: Vec<libc::sock_filter>,
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xC000_00F3;

/// `SECCOMP_IOCTL_NOTIF_ID_VALID` as first defined (`_IOR`), which every
/// kernel with user notification accepts.
const NOTIF_ID_VALID: libc::Ioctl = 0x8008_2102u32 as libc::Ioctl;
/// The supervisor's buffer for a call's data and control messages.
const DATA_CAP: usize = 256 * 1024;
const CONTROL_CAP: usize = 16 * 1024;
/// `UIO_MAXIOV`.
const MAX_IOV: usize = 1024;
/// `CAP_SYS_PTRACE` (linux/capability.h).
const CAP_SYS_PTRACE: u32 = 19;
/// The most descriptors one message may pass (the kernel's `SCM_MAX_FD`).
const MAX_FDS: usize = 253;

impl Guard {
    /// The guard for a sandbox whose pathname sockets may be reached beneath
    /// `allowed` (canonical paths), with the host's network namespace or
    /// not.
    pub(crate) fn new(
        allowed: &[PathBuf],
        denied: &[PathBuf],
        host_network: bool,
    ) -> Result<Guard, Error> {
        let bytes = |paths: &[PathBuf]| -> Vec<Vec<u8>> {
            paths
                .iter()
                .map(|p| {
                    let bytes = p.as_os_str().as_bytes();
                    bytes.strip_suffix(b"/").unwrap_or(bytes).to_vec()
                })
                .collect()
        };
        Ok(Guard {
            program: program(host_network),
            allowed: bytes(allowed),
            denied: bytes(denied),
            host_network,
            own: supervisor_program()?,
        })
    }

    /// Init: installs the filter and returns its listener.
    pub(crate) fn install(&self) -> io::Result<OwnedFd> {
        sys::seccomp_listener(&self.program)
    }

    fn allows(&self, path: &[u8]) -> bool {
        let beneath = |root: &Vec<u8>| {
            path.starts_with(root)
                && (path.len() == root.len() || path[root.len()] == b'/' || root.is_empty())
        };
        self.allowed.iter().any(beneath) && !self.denied.iter().any(beneath)
    }
}

/// The `open` flags that write, create or truncate.
const OPEN_WRITES: u64 = (libc::O_ACCMODE
    | libc::O_CREAT
    | libc::O_TRUNC
    | libc::O_APPEND
    | (libc::O_TMPFILE & !libc::O_DIRECTORY)
    | libc::O_EXCL) as u64;

/// The supervisor's own filter: the system calls its loop and its end
/// make, and nothing else (any other kills it, and with it the sandbox).
// The ioctl request type is `c_ulong` with glibc, `c_int` with musl.
#[allow(clippy::unnecessary_cast)]
fn supervisor_program() -> Result<Vec<libc::sock_filter>, Error> {
    let any = Vec::new;
    let mut calls: Vec<(i64, Vec<seccompiler::SeccompRule>)> = vec![
        // Its loop.
        (libc::SYS_ppoll, any()),
        (
            libc::SYS_ioctl,
            seccomp::arg_is(
                1,
                &[
                    libc::SECCOMP_IOCTL_NOTIF_RECV as u64,
                    libc::SECCOMP_IOCTL_NOTIF_SEND as u64,
                    NOTIF_ID_VALID as u64,
                ],
            )?,
        ),
        (libc::SYS_clock_gettime, any()),
        // The caller: its thread group, its descriptors, its memory.
        // Reading or `O_PATH` only: nothing written, created or truncated.
        (libc::SYS_openat, seccomp::flags_clear(2, OPEN_WRITES)?),
        (libc::SYS_read, any()),
        (libc::SYS_close, any()),
        (libc::SYS_pidfd_open, any()),
        (libc::SYS_pidfd_getfd, any()),
        (libc::SYS_process_vm_readv, any()),
        (libc::SYS_process_vm_writev, any()),
        // A pathname: resolved, checked, reached by its descriptor.
        (libc::SYS_newfstatat, any()),
        (libc::SYS_fstat, any()),
        (libc::SYS_statx, any()),
        (libc::SYS_readlinkat, any()),
        (libc::SYS_fchdir, any()),
        // The calls it makes.
        (
            libc::SYS_fcntl,
            // `F_GETFD`: `OwnedFd`'s drop checks the descriptor with it
            // in debug builds.
            seccomp::arg_is(
                1,
                &[
                    libc::F_GETFL as u64,
                    libc::F_SETFL as u64,
                    libc::F_GETFD as u64,
                ],
            )?,
        ),
        (libc::SYS_getsockopt, any()),
        (libc::SYS_connect, any()),
        (libc::SYS_sendmsg, any()),
        (libc::SYS_bind, any()),
        (libc::SYS_getpid, any()),
        (
            libc::SYS_tgkill,
            seccomp::arg_is(2, &[libc::SIGPIPE as u64])?,
        ),
        // Its end: init's status, then the same end.
        (libc::SYS_wait4, any()),
        (libc::SYS_rt_sigaction, any()),
        (libc::SYS_rt_sigprocmask, any()),
        (libc::SYS_rt_sigreturn, any()),
        (libc::SYS_restart_syscall, any()),
        (libc::SYS_kill, any()),
        (libc::SYS_exit, any()),
        (libc::SYS_exit_group, any()),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.push((libc::SYS_poll, any()));
    seccomp::allow_only(calls)
}

/// The notification filter (see the module docs).
fn program(host_network: bool) -> Vec<libc::sock_filter> {
    #[derive(Clone, Copy)]
    enum To {
        Next,
        Allow,
        Notify,
    }
    let ld = |k: u32| {
        (
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            k,
            To::Next,
            To::Next,
        )
    };
    let jeq = |k: u32, t: To, f: To| (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, k, t, f);
    let mut code = vec![ld(4), jeq(AUDIT_ARCH, To::Next, To::Allow), ld(0)];
    let mut notified = vec![libc::SYS_connect, libc::SYS_sendmsg, libc::SYS_sendmmsg];
    if host_network {
        notified.push(libc::SYS_bind);
    }
    for nr in notified {
        code.push(jeq(nr as u32, To::Notify, To::Next));
    }
    // sendto: only with an address (argument 4, at offset 16 + 4 * 8).
    code.push(jeq(libc::SYS_sendto as u32, To::Next, To::Allow));
    code.push(ld(48));
    code.push(jeq(0, To::Next, To::Notify));
    code.push(ld(52));
    code.push(jeq(0, To::Allow, To::Notify));
    let allow = code.len();
    let notify = allow + 1;
    let mut out: Vec<libc::sock_filter> = code
        .iter()
        .enumerate()
        .map(|(i, &(op, k, t, f))| {
            let jump = |to: To| -> u8 {
                match to {
                    To::Next => 0,
                    To::Allow => (allow - i - 1) as u8,
                    To::Notify => (notify - i - 1) as u8,
                }
            };
            libc::sock_filter {
                code: op as u16,
                jt: jump(t),
                jf: jump(f),
                k,
            }
        })
        .collect();
    let ret = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    out.push(ret(libc::SECCOMP_RET_ALLOW));
    out.push(ret(libc::SECCOMP_RET_USER_NOTIF));
    out
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `Err(errno)` for a negative return.
fn ok(rc: c_long) -> Result<c_long, i32> {
    if rc < 0 { Err(errno()) } else { Ok(rc) }
}

/// A path relative to a `/proc` directory: `<n>/<rest>` (or `self/fd/<n>`
/// with `prefix`), NUL-terminated, in `buf`.
fn proc_path<'b>(buf: &'b mut [u8; 64], prefix: &[u8], n: u64, rest: &[u8]) -> &'b [u8] {
    let mut len = 0;
    for &b in prefix {
        buf[len] = b;
        len += 1;
    }
    let mut digits = [0u8; 20];
    let mut d = 0;
    let mut v = n;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        buf[len] = digits[d];
        len += 1;
    }
    for &b in rest {
        buf[len] = b;
        len += 1;
    }
    buf[len] = 0;
    &buf[..=len]
}

/// Owns the descriptor a system call returned (`Err(errno)` for a
/// negative return).
fn owned(rc: c_long) -> Result<OwnedFd, i32> {
    let fd = ok(rc)? as c_int;
    // SAFETY: the kernel just opened `fd` for this process, and nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The bytes of `value`, for a copy from another process to fill.
///
/// # Safety
///
/// Every bit pattern must be a valid `T` (plain C data: integers, raw
/// pointers, arrays of them).
unsafe fn plain_bytes<T>(value: &mut T) -> &mut [u8] {
    // SAFETY: `value` is `size_of::<T>()` bytes, borrowed for the slice's
    // life; the caller vouches that any bytes written make a valid `T`.
    unsafe {
        std::slice::from_raw_parts_mut((value as *mut T).cast::<u8>(), std::mem::size_of::<T>())
    }
}

/// A row's descriptor (`-1`: none), closed; for rows of the table, which
/// hold plain numbers (see [`Op`]).
fn close(fd: c_int) {
    if fd >= 0 {
        // SAFETY: closing a descriptor this code opened.
        unsafe { libc::close(fd) };
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
fn now() -> u64 {
    // SAFETY: `ts` is written by the call (the vDSO, no allocation).
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The process that made a call.
#[derive(Clone, Copy)]
struct Caller {
    id: u64,
    tid: u32,
    tgid: i32,
    /// A pidfd of its thread group (owned by the `Op` that holds it).
    pidfd: c_int,
}

/// One notification being answered: a row of the supervisor's table. A
/// call that would block stays here until it can go on, its time (the
/// socket's `SO_SNDTIMEO`) is up, or its caller is gone.
///
/// A row is plain data in the supervisor's mapping (written there after
/// the fork, no allocation), so it holds its descriptors as numbers
/// (`-1`: none), owned by the row and closed by [`Op::release`] and
/// [`Op::next_message`].
#[derive(Clone, Copy)]
struct Op {
    used: bool,
    caller: Caller,
    nr: c_long,
    args: [u64; 6],
    /// The caller's socket, fetched (`pidfd_getfd`).
    sock: c_int,
    /// The caller does not wait: `O_NONBLOCK` on its socket or
    /// `MSG_DONTWAIT`.
    nonblocking: bool,
    /// A stream socket (a send may go out in parts).
    stream: bool,
    /// The socket is a Unix one (whose waits have no poll event).
    unix: bool,
    /// Wait for `POLLOUT` on `sock` (else: try again at the next tick).
    writable: bool,
    /// When the caller's `SO_SNDTIMEO` is up (`u64::MAX`: never).
    deadline: u64,
    /// The send flags the caller gave.
    flags: c_int,
    /// The address of the current message (or the connect) was read.
    addressed: bool,
    /// Its resolved pathname socket (`O_PATH`), or -1.
    target: c_int,
    /// Its address as read, `raw_len` bytes (0: none).
    raw: libc::sockaddr_storage,
    raw_len: usize,
    /// `sendmmsg`: messages sent.
    done: usize,
    /// Bytes of the current message sent.
    sent: usize,
}

impl Op {
    /// Closes what the row holds and frees it.
    fn release(&mut self) {
        close(self.sock);
        close(self.target);
        close(self.caller.pidfd);
        self.used = false;
        self.sock = -1;
        self.target = -1;
        self.caller.pidfd = -1;
    }

    /// Forgets the address of the message that was just sent.
    fn next_message(&mut self) {
        close(self.target);
        self.target = -1;
        self.addressed = false;
        self.raw_len = 0;
        self.sent = 0;
    }

    fn timed_out(&self) -> bool {
        self.deadline != u64::MAX && now() >= self.deadline
    }
}

/// What handling a notification came to.
enum Step {
    /// Answer now (the value, or the errno).
    Answer(Result<i64, i32>),
    /// The call waits in the table.
    Wait,
}

/// The most calls waiting at once; further notifications stay queued in
/// the kernel (their callers interruptible) until one ends.
const MAX_PENDING: usize = 256;
/// How often a waiting call that has no poll event is tried again, and
/// how often waiting calls are checked for callers that are gone.
const RETRY_MS: c_int = 20;
const SWEEP_MS: c_int = 500;

const TABLE_AT: usize = DATA_CAP + CONTROL_CAP + MAX_IOV * 16;
const POLL_AT: usize = TABLE_AT + MAX_PENDING * std::mem::size_of::<Op>();
const MAPPED: usize = POLL_AT + (2 + 2 * MAX_PENDING) * std::mem::size_of::<libc::pollfd>();

/// The supervisor's side: serves notifications until init exits.
pub(crate) struct Supervisor<'g> {
    guard: &'g Guard,
    listener: OwnedFd,
    /// The host's `/proc`, opened before the view replaced it.
    proc_dir: BorrowedFd<'g>,
    buf: *mut u8,
}

impl<'g> Supervisor<'g> {
    /// Prepares the supervisor: its buffer and table, its working directory
    /// (the host's `/proc`, for `self/fd/N` addresses) and its
    /// capabilities.
    pub(crate) fn new(
        guard: &'g Guard,
        listener: OwnedFd,
        proc_dir: BorrowedFd<'g>,
    ) -> io::Result<Self> {
        // SAFETY: an anonymous private mapping; checked below.
        let buf = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MAPPED,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if buf == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let buf: *mut u8 = buf.cast();
        // SAFETY: the table lies within the mapping, suitably aligned (the
        // offset is a multiple of 16); every row is written before use.
        unsafe {
            let table = buf.add(TABLE_AT).cast::<Op>();
            for i in 0..MAX_PENDING {
                table.add(i).write(Op {
                    used: false,
                    caller: Caller {
                        id: 0,
                        tid: 0,
                        tgid: 0,
                        pidfd: -1,
                    },
                    nr: 0,
                    args: [0; 6],
                    sock: -1,
                    nonblocking: false,
                    stream: false,
                    unix: false,
                    writable: false,
                    deadline: u64::MAX,
                    flags: 0,
                    addressed: false,
                    target: -1,
                    raw: std::mem::zeroed(),
                    raw_len: 0,
                    done: 0,
                    sent: 0,
                });
            }
        }
        // SAFETY: plain system calls.
        unsafe {
            sys::check_int(libc::fchdir(proc_dir.as_raw_fd()))?;
            // A send on a closed connection must not end the supervisor; the
            // caller gets its SIGPIPE from `answer`.
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        sys::keep_only_capability(CAP_SYS_PTRACE)?;
        Ok(Supervisor {
            guard,
            listener,
            proc_dir,
            buf,
        })
    }

    /// The listener this supervisor answers.
    pub(crate) fn listener(&self) -> c_int {
        self.listener.as_raw_fd()
    }

    /// Confines the supervisor to the system calls it makes from here on
    /// (see the module docs).
    pub(crate) fn confine(&self) -> io::Result<()> {
        sys::no_new_privs()?;
        sys::seccomp_install(&self.guard.own)
    }

    /// The table's row `i`.
    #[allow(clippy::mut_from_ref)]
    fn row(&self, i: usize) -> &mut Op {
        debug_assert!(i < MAX_PENDING);
        // SAFETY: within the table written in `new`; the supervisor is one
        // thread and holds no other reference to a row across this call.
        unsafe { &mut *self.buf.add(TABLE_AT).cast::<Op>().add(i) }
    }

    /// The poll set: the listener, init, then per row its socket and its
    /// caller.
    #[allow(clippy::mut_from_ref)]
    fn poll_set(&self) -> &mut [libc::pollfd] {
        // SAFETY: within the mapping, aligned (`POLL_AT` is a multiple of
        // 8), and only this one slice is alive at a time.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.buf.add(POLL_AT).cast::<libc::pollfd>(),
                2 + 2 * MAX_PENDING,
            )
        }
    }

    /// Fills the poll set for the rows in use (their sockets when they
    /// wait for room, their callers), the listener (while `listening` and
    /// a row is free) and init: `(rows to poll, poll timeout in ms)`.
    fn arm(&self, init_pidfd: BorrowedFd<'_>, listening: bool) -> (usize, c_int) {
        let mut high = 0;
        let mut free = false;
        let mut timeout: c_int = -1;
        let at = now();
        let fds = self.poll_set();
        for i in 0..MAX_PENDING {
            let op = *self.row(i);
            let (sock, caller) = if op.used {
                high = i + 1;
                let tick = if op.writable { SWEEP_MS } else { RETRY_MS };
                let mut wait = tick;
                if op.deadline != u64::MAX {
                    let left = op.deadline.saturating_sub(at) / 1_000_000 + 1;
                    wait = wait.min(left.min(c_int::MAX as u64) as c_int);
                }
                timeout = if timeout < 0 { wait } else { timeout.min(wait) };
                (if op.writable { op.sock } else { -1 }, op.caller.pidfd)
            } else {
                free = true;
                (-1, -1)
            };
            fds[2 + 2 * i] = libc::pollfd {
                fd: sock,
                events: libc::POLLOUT,
                revents: 0,
            };
            fds[3 + 2 * i] = libc::pollfd {
                fd: caller,
                events: libc::POLLIN,
                revents: 0,
            };
        }
        fds[0] = libc::pollfd {
            fd: if listening && free {
                self.listener.as_raw_fd()
            } else {
                -1
            },
            events: libc::POLLIN,
            revents: 0,
        };
        fds[1] = libc::pollfd {
            fd: init_pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        (high, timeout)
    }

    /// Serves notifications until `init_pidfd` says init exited.
    pub(crate) fn serve(&self, init_pidfd: BorrowedFd<'_>) {
        let mut listening = true;
        loop {
            // The rows in use, what they wait for, and how long to wait.
            let (high, timeout) = self.arm(init_pidfd, listening);
            {
                let fds = self.poll_set();
                // SAFETY: `fds` has at least `2 + 2 * high` entries.
                let n = unsafe {
                    libc::poll(fds.as_mut_ptr(), (2 + 2 * high) as libc::nfds_t, timeout)
                };
                if n < 0 && errno() != libc::EINTR {
                    return;
                }
                if n > 0 && fds[1].revents != 0 {
                    return;
                }
            }
            self.go_on(high);
            let fds = self.poll_set();
            if fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                // No process is left under the filter: only init's end.
                listening = false;
            } else if fds[0].revents & libc::POLLIN != 0 {
                self.receive();
            }
        }
    }

    /// After a poll: the calls under way in the first `high` rows, their
    /// callers first (gone: abandoned), then their sockets.
    fn go_on(&self, high: usize) {
        let fds = self.poll_set();
        for i in 0..high {
            let op = self.row(i);
            if !op.used {
                continue;
            }
            let gone = fds[3 + 2 * i].revents != 0 || !self.valid(op.caller.id);
            if gone {
                // Killed or interrupted: the call is abandoned.
                op.release();
                continue;
            }
            let woken = fds[2 + 2 * i].revents != 0;
            if woken || !op.writable || op.timed_out() {
                match self.progress(op, woken) {
                    Step::Wait => {}
                    Step::Answer(result) => {
                        self.answer(op, result);
                        op.release();
                    }
                }
            }
        }
    }

    /// Receives one notification and starts it: answered at once, or kept
    /// in a free row.
    fn receive(&self) {
        let Some(slot) = (0..MAX_PENDING).find(|&i| !self.row(i).used) else {
            return;
        };
        // SAFETY: a zeroed notification (the kernel requires it) that the
        // ioctl fills.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notif,
            )
        } < 0
        {
            return;
        }
        let op = self.row(slot);
        op.used = true;
        op.caller = Caller {
            id: notif.id,
            tid: notif.pid,
            tgid: 0,
            pidfd: -1,
        };
        op.nr = c_long::from(notif.data.nr);
        op.args = notif.data.args;
        op.sock = -1;
        op.target = -1;
        op.addressed = false;
        op.raw_len = 0;
        op.done = 0;
        op.sent = 0;
        op.deadline = u64::MAX;
        op.writable = false;
        op.flags = 0;
        let step = match self.start(op) {
            Ok(step) => step,
            Err(e) => Step::Answer(Err(e)),
        };
        if let Step::Answer(result) = step {
            self.answer(op, result);
            op.release();
        }
    }

    /// Answers the call of `op` (the caller's SIGPIPE, which the
    /// supervisor's own send did not raise, with an `EPIPE` of a send).
    fn answer(&self, op: &Op, result: Result<i64, i32>) {
        let (val, error) = match result {
            Ok(v) => (v, 0),
            Err(e) => (0, -e),
        };
        if result == Err(libc::EPIPE)
            && op.nr != libc::SYS_connect
            && op.nr != libc::SYS_bind
            && op.flags & libc::MSG_NOSIGNAL == 0
            && self.valid(op.caller.id)
        {
            // SAFETY: signalling the calling thread, which waits on us.
            unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    op.caller.tgid,
                    op.caller.tid,
                    libc::SIGPIPE,
                )
            };
        }
        let resp = libc::seccomp_notif_resp {
            id: op.caller.id,
            val,
            error,
            flags: 0,
        };
        // SAFETY: `resp` lives on this frame. ENOENT: the caller is gone
        // or was interrupted; nothing to do.
        unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &resp,
            )
        };
    }

    fn valid(&self, id: u64) -> bool {
        // SAFETY: `id` lives on this frame.
        unsafe { libc::ioctl(self.listener.as_raw_fd(), NOTIF_ID_VALID, &id) == 0 }
    }

    /// The first attempt at the call in `op`.
    fn start(&self, op: &mut Op) -> Result<Step, i32> {
        self.caller(op)?;
        op.sock = self.fetch(&op.caller, op.args[0] as c_int)?.into_raw_fd();
        let nr = op.nr;
        if nr == libc::SYS_bind {
            return Ok(Step::Answer(self.bind(op)));
        }
        // SAFETY: a plain system call on our descriptor.
        let status = ok(unsafe { libc::fcntl(op.sock, libc::F_GETFL) }.into())? as c_int;
        op.nonblocking = status & libc::O_NONBLOCK != 0;
        op.unix = Self::socket_int(op.sock, libc::SO_DOMAIN)? == libc::AF_UNIX;
        op.stream = Self::socket_int(op.sock, libc::SO_TYPE)? == libc::SOCK_STREAM;
        if nr == libc::SYS_connect {
            return self.start_connect(op, status);
        }
        op.flags = if nr == libc::SYS_sendmsg {
            op.args[2]
        } else if nr == libc::SYS_sendto || nr == libc::SYS_sendmmsg {
            op.args[3]
        } else {
            return Err(libc::ENOSYS);
        } as c_int;
        op.nonblocking |= op.flags & libc::MSG_DONTWAIT != 0;
        if !op.nonblocking {
            op.deadline = Self::send_timeout(op.sock)?;
        }
        op.writable = !op.unix || op.stream;
        Ok(self.send_some(op, false))
    }

    /// Goes on with a waiting call (`woken`: its socket's poll event came).
    fn progress(&self, op: &mut Op, woken: bool) -> Step {
        if op.nr == libc::SYS_connect {
            self.progress_connect(op, woken)
        } else {
            self.send_some(op, woken)
        }
    }

    /// The caller's thread group (from the host's `/proc`) and a pidfd,
    /// checked against the notification so that a reused pid is never
    /// taken for it.
    fn caller(&self, op: &mut Op) -> Result<(), i32> {
        let tgid = self.tgid(op.caller.tid)?;
        // SAFETY: a plain system call.
        let pidfd = ok(unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0u32) })? as c_int;
        op.caller.pidfd = pidfd;
        op.caller.tgid = tgid;
        if !self.valid(op.caller.id) {
            return Err(libc::ESRCH);
        }
        Ok(())
    }

    fn tgid(&self, tid: u32) -> Result<i32, i32> {
        let mut path = [0u8; 64];
        let path = proc_path(&mut path, b"", u64::from(tid), b"/status");
        // SAFETY: NUL-terminated path on this frame.
        let fd = owned(
            unsafe {
                libc::openat(
                    self.proc_dir.as_raw_fd(),
                    path.as_ptr().cast(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            }
            .into(),
        )?;
        let mut text = [0u8; 2048];
        let n = ok(sys::read_once(fd.as_fd(), &mut text) as c_long)? as usize;
        let text = &text[..n];
        let key = b"\nTgid:";
        let at = text
            .windows(key.len())
            .position(|w| w == key)
            .ok_or(libc::ESRCH)?;
        let mut value: i32 = 0;
        let mut seen = false;
        for &b in &text[at + key.len()..] {
            match b {
                b'0'..=b'9' => {
                    value = value.saturating_mul(10).saturating_add(i32::from(b - b'0'));
                    seen = true;
                }
                b' ' | b'\t' if !seen => {}
                _ => break,
            }
        }
        if seen { Ok(value) } else { Err(libc::ESRCH) }
    }

    /// The caller's descriptor `fd`, as a descriptor of ours.
    fn fetch(&self, call: &Caller, fd: c_int) -> Result<OwnedFd, i32> {
        // SAFETY: a plain system call.
        owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, call.pidfd, fd, 0u32) })
    }

    /// Fills `local` from the caller's memory described by `remote` (as
    /// many bytes in all), and checks that the notification is still valid
    /// (so that the thread read was the caller, not a reused id).
    fn read_vec(&self, call: &Caller, remote: &[libc::iovec], local: &mut [u8]) -> Result<(), i32> {
        let len = local.len();
        if len == 0 {
            return Ok(());
        }
        let l = libc::iovec {
            iov_base: local.as_mut_ptr().cast(),
            iov_len: len,
        };
        // SAFETY: the kernel writes at most `len` bytes, `local`'s length.
        let n = unsafe {
            libc::process_vm_readv(
                call.tid as libc::pid_t,
                &l,
                1,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if n < 0 || n as usize != len {
            return Err(libc::EFAULT);
        }
        if !self.valid(call.id) {
            return Err(libc::ESRCH);
        }
        Ok(())
    }

    /// Fills `local` from the caller's memory at `remote`.
    fn read(&self, call: &Caller, remote: u64, local: &mut [u8]) -> Result<(), i32> {
        let r = libc::iovec {
            iov_base: remote as *mut c_void,
            iov_len: local.len(),
        };
        self.read_vec(call, &[r], local)
    }

    fn socket_int(sock: c_int, option: c_int) -> Result<c_int, i32> {
        let mut value: c_int = 0;
        let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` live on this frame.
        let rc = unsafe {
            libc::getsockopt(
                sock,
                libc::SOL_SOCKET,
                option,
                (&mut value as *mut c_int).cast(),
                &mut len,
            )
        };
        ok(rc.into())?;
        Ok(value)
    }

    /// When a blocking call on `sock` gives up: its `SO_SNDTIMEO` from now
    /// (`u64::MAX`: none), as the kernel's own wait would.
    fn send_timeout(sock: c_int) -> Result<u64, i32> {
        let mut tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        // SAFETY: `tv` and `len` live on this frame.
        let rc = unsafe {
            libc::getsockopt(
                sock,
                libc::SOL_SOCKET,
                libc::SO_SNDTIMEO,
                (&mut tv as *mut libc::timeval).cast(),
                &mut len,
            )
        };
        ok(rc.into())?;
        if tv.tv_sec <= 0 && tv.tv_usec <= 0 {
            return Ok(u64::MAX);
        }
        let ns = (tv.tv_sec.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(tv.tv_usec.max(0) as u64 * 1000);
        Ok(now().saturating_add(ns))
    }

    /// Reads the caller's address (`addr`, `len`) into `raw` and decides
    /// what to call with: `Ok(None)` for the address as read, or the
    /// `O_PATH` descriptor of the pathname socket it names, to be reached
    /// as `self/fd/N`.
    fn address(
        &self,
        call: &Caller,
        sock: c_int,
        addr: u64,
        len: usize,
        raw: &mut libc::sockaddr_storage,
        binding: bool,
    ) -> Result<Option<OwnedFd>, i32> {
        if len > std::mem::size_of::<libc::sockaddr_storage>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: `sockaddr_storage` is plain C data.
        self.read(call, addr, &mut unsafe { plain_bytes(raw) }[..len])?;
        if Self::socket_int(sock, libc::SO_DOMAIN)? != libc::AF_UNIX
            || len <= 2
            || c_int::from(raw.ss_family) != libc::AF_UNIX
        {
            return Ok(None);
        }
        // SAFETY: `sockaddr_storage` is larger than `sockaddr_un` and
        // suitably aligned for it; only read here.
        let un = unsafe { &*(raw as *const libc::sockaddr_storage).cast::<libc::sockaddr_un>() };
        let path_len = len - 2;
        if un.sun_path[0] == 0 {
            return if self.guard.host_network {
                Err(libc::EPERM)
            } else {
                Ok(None)
            };
        }
        if binding {
            return Ok(None);
        }
        let mut path = [0u8; 110];
        for (dst, src) in path.iter_mut().zip(&un.sun_path[..path_len.min(108)]) {
            *dst = *src as u8;
        }
        // The kernel reads up to the first NUL or the end of the address.
        Ok(Some(self.resolve(call, &path)?))
    }

    /// Resolves the NUL-terminated `path` as the caller would, and checks
    /// that it names a socket where the sandbox may reach one.
    fn resolve(&self, call: &Caller, path: &[u8; 110]) -> Result<OwnedFd, i32> {
        let cwd = self.caller_cwd(call)?;
        // SAFETY: a NUL-terminated path (110 > 108) on this frame.
        let target = owned(
            unsafe {
                libc::openat(
                    cwd.as_raw_fd(),
                    path.as_ptr().cast(),
                    libc::O_PATH | libc::O_CLOEXEC,
                )
            }
            .into(),
        )?;
        // SAFETY: `st` is written by the kernel.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        ok(unsafe { libc::fstat(target.as_raw_fd(), &mut st) }.into())?;
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(libc::ECONNREFUSED);
        }
        let mut link = [0u8; 64];
        let link = proc_path(&mut link, b"self/fd/", target.as_raw_fd() as u64, b"");
        let mut real = [0u8; 4096];
        // SAFETY: buffers on this frame.
        let n = ok(unsafe {
            libc::readlinkat(
                self.proc_dir.as_raw_fd(),
                link.as_ptr().cast(),
                real.as_mut_ptr().cast(),
                real.len(),
            )
        } as c_long)? as usize;
        if n >= real.len() || !self.guard.allows(&real[..n]) {
            return Err(libc::EACCES);
        }
        Ok(target)
    }

    /// The caller's working directory (`O_PATH`), from the host's `/proc`.
    fn caller_cwd(&self, call: &Caller) -> Result<OwnedFd, i32> {
        let mut buf = [0u8; 64];
        let cwd_path = proc_path(&mut buf, b"", u64::from(call.tid), b"/cwd");
        // SAFETY: a NUL-terminated path on this frame.
        owned(
            unsafe {
                libc::openat(
                    self.proc_dir.as_raw_fd(),
                    cwd_path.as_ptr().cast(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            }
            .into(),
        )
    }

    /// `self/fd/N` as a Unix address; its length.
    fn by_descriptor(fd: c_int, out: &mut libc::sockaddr_un) -> libc::socklen_t {
        out.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let mut buf = [0u8; 64];
        let path = proc_path(&mut buf, b"self/fd/", fd as u64, b"");
        for (dst, src) in out.sun_path.iter_mut().zip(path) {
            *dst = *src as libc::c_char;
        }
        (2 + path.len()) as libc::socklen_t
    }

    /// Reads the address of `op`'s current message (once per message)
    /// from (`addr`, `len`).
    fn take_address(&self, op: &mut Op, addr: u64, len: usize) -> Result<(), i32> {
        if op.addressed {
            return Ok(());
        }
        if addr != 0 && len > 0 {
            let target = self.address(&op.caller, op.sock, addr, len, &mut op.raw, false)?;
            op.target = target.map_or(-1, IntoRawFd::into_raw_fd);
            op.raw_len = len;
        } else {
            op.raw_len = 0;
        }
        op.addressed = true;
        Ok(())
    }

    /// One `connect` with the address of `op`, as it is now (blocking or
    /// not).
    fn connect_now(op: &Op) -> Result<(), i32> {
        // SAFETY: addresses on this frame or in `op`, with their lengths.
        let rc = unsafe {
            if op.target >= 0 {
                let mut un: libc::sockaddr_un = std::mem::zeroed();
                let n = Self::by_descriptor(op.target, &mut un);
                libc::connect(op.sock, (&un as *const libc::sockaddr_un).cast(), n)
            } else {
                libc::connect(
                    op.sock,
                    (&op.raw as *const libc::sockaddr_storage).cast(),
                    op.raw_len as libc::socklen_t,
                )
            }
        };
        ok(rc.into()).map(|_| ())
    }

    /// One `connect` that does not wait: the caller's own if its socket
    /// is non-blocking, else with `O_NONBLOCK` set on the socket for the
    /// duration of the call.
    fn connect_without_waiting(op: &Op, status: c_int) -> Result<(), i32> {
        if op.nonblocking {
            return Self::connect_now(op);
        }
        // SAFETY: plain system calls on our descriptor.
        unsafe {
            ok(libc::fcntl(op.sock, libc::F_SETFL, status | libc::O_NONBLOCK).into())?;
            let result = Self::connect_now(op);
            libc::fcntl(op.sock, libc::F_SETFL, status);
            result
        }
    }

    fn start_connect(&self, op: &mut Op, status: c_int) -> Result<Step, i32> {
        self.take_address(op, op.args[1], op.args[2] as usize)?;
        if op.raw_len == 0 {
            op.raw_len = op.args[2] as usize;
        }
        if !op.nonblocking {
            op.deadline = Self::send_timeout(op.sock)?;
        }
        op.flags = status;
        Ok(match Self::connect_without_waiting(op, status) {
            Ok(()) => Step::Answer(Ok(0)),
            Err(e) if op.nonblocking => Step::Answer(Err(e)),
            // A TCP connect under way (`EALREADY`: the one an interrupted
            // call started), which the caller waits for.
            Err(libc::EINPROGRESS | libc::EALREADY) if !op.unix => {
                op.writable = true;
                Step::Wait
            }
            // A Unix listener whose backlog is full: no poll event says
            // when it accepts, so the connect is tried again.
            Err(libc::EAGAIN) if op.unix => {
                op.writable = false;
                Step::Wait
            }
            Err(e) => Step::Answer(Err(e)),
        })
    }

    fn progress_connect(&self, op: &mut Op, woken: bool) -> Step {
        if op.writable {
            if woken {
                return Step::Answer(match Self::socket_int(op.sock, libc::SO_ERROR) {
                    Ok(0) => Ok(0),
                    Ok(e) | Err(e) => Err(e),
                });
            }
        } else {
            match Self::connect_without_waiting(op, op.flags) {
                Ok(()) => return Step::Answer(Ok(0)),
                Err(libc::EAGAIN) => {}
                Err(e) => return Step::Answer(Err(e)),
            }
        }
        if op.timed_out() {
            // What the kernel's own wait ends with.
            return Step::Answer(Err(if op.unix {
                libc::EAGAIN
            } else {
                libc::EINPROGRESS
            }));
        }
        Step::Wait
    }

    fn bind(&self, op: &mut Op) -> Result<i64, i32> {
        // SAFETY: zeroed plain data.
        let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = op.args[2] as usize;
        self.address(&op.caller, op.sock, op.args[1], len, &mut raw, true)?;
        // A relative pathname is the caller's: bind from its directory.
        let cwd = self.caller_cwd(&op.caller)?;
        // SAFETY: plain system calls on buffers of this frame; the working
        // directory is set back before returning.
        unsafe {
            ok(libc::fchdir(cwd.as_raw_fd()).into())?;
            let rc = libc::bind(
                op.sock,
                (&raw as *const libc::sockaddr_storage).cast(),
                len as libc::socklen_t,
            );
            let err = errno();
            libc::fchdir(self.proc_dir.as_raw_fd());
            if rc < 0 { Err(err) } else { Ok(0) }
        }
    }

    /// The data buffer, the control buffer and the iovec buffer.
    #[allow(clippy::mut_from_ref)]
    fn buffers(&self) -> (&mut [u8], &mut [u8], &mut [libc::iovec]) {
        // SAFETY: three disjoint regions of the mapping made in `new` (the
        // iovecs at a multiple of 16, zero-filled by the kernel: valid
        // iovecs); the supervisor is one thread, and `send_part`, their
        // one user, holds them for one call only.
        unsafe {
            (
                std::slice::from_raw_parts_mut(self.buf, DATA_CAP),
                std::slice::from_raw_parts_mut(self.buf.add(DATA_CAP), CONTROL_CAP),
                std::slice::from_raw_parts_mut(
                    self.buf.add(DATA_CAP + CONTROL_CAP).cast::<libc::iovec>(),
                    MAX_IOV,
                ),
            )
        }
    }

    /// Sends what can go out now of `op`'s messages; `Wait` when the caller
    /// waits for room (`woken`: its socket said there was some).
    fn send_some(&self, op: &mut Op, woken: bool) -> Step {
        let count = if op.nr == libc::SYS_sendmmsg {
            (op.args[2] as usize).min(MAX_IOV)
        } else {
            1
        };
        if count == 0 {
            return Step::Answer(Ok(0));
        }
        let mut moved = false;
        loop {
            match self.send_part(op) {
                Ok((n, total)) => {
                    moved |= n > 0;
                    op.sent += n;
                    if op.stream && op.sent < total && n > 0 && !op.nonblocking {
                        // A blocking stream send goes on until all is sent.
                        continue;
                    }
                    if let Some(result) = self.message_sent(op, count) {
                        return Step::Answer(Ok(result));
                    }
                    moved = true;
                }
                Err(libc::EAGAIN) if !op.nonblocking && !op.timed_out() => {
                    if woken && !moved {
                        // The poll event said room, the send said none (a
                        // peer's queue it does not watch): try on ticks.
                        op.writable = false;
                    }
                    return Step::Wait;
                }
                Err(e) => return Step::Answer(self.send_failed(op, e)),
            }
        }
    }

    /// The current message is done: `Some(result)` when the call is.
    fn message_sent(&self, op: &mut Op, count: usize) -> Option<i64> {
        let sent = op.sent;
        if op.nr != libc::SYS_sendmmsg {
            return Some(sent as i64);
        }
        self.write_len(op, sent);
        op.done += 1;
        op.next_message();
        (op.done == count).then_some(op.done as i64)
    }

    /// A send failed with `e`: what was sent before counts.
    fn send_failed(&self, op: &mut Op, e: i32) -> Result<i64, i32> {
        if op.sent > 0 {
            let sent = op.sent;
            if op.nr != libc::SYS_sendmmsg {
                return Ok(sent as i64);
            }
            self.write_len(op, sent);
            op.done += 1;
        }
        if op.nr == libc::SYS_sendmmsg && op.done > 0 {
            return Ok(op.done as i64);
        }
        Err(e)
    }

    /// `sendmmsg`: the bytes sent of message `op.done`, into its
    /// `msg_len`.
    fn write_len(&self, op: &Op, sent: usize) {
        let size = std::mem::size_of::<libc::mmsghdr>() as u64;
        let entry = op.args[1] + op.done as u64 * size;
        let len = sent as u32;
        let local = libc::iovec {
            iov_base: (&len as *const u32).cast_mut().cast(),
            iov_len: 4,
        };
        let remote = libc::iovec {
            iov_base: (entry + std::mem::size_of::<libc::msghdr>() as u64) as *mut c_void,
            iov_len: 4,
        };
        // SAFETY: writes 4 bytes of the caller's array entry.
        unsafe { libc::process_vm_writev(op.caller.tid as libc::pid_t, &local, 1, &remote, 1, 0) };
    }

    /// `op`'s current message header into `hdr` (`sendto`: made from its
    /// arguments), its address taken, its vectors read into `iovs`: how
    /// many there are.
    // `msg_iovlen` is `size_t` with glibc, `c_int` with musl.
    #[allow(clippy::unnecessary_cast)]
    fn message_header(
        &self,
        op: &mut Op,
        hdr: &mut libc::msghdr,
        iovs: &mut [libc::iovec],
    ) -> Result<usize, i32> {
        if op.nr == libc::SYS_sendto {
            let [_, buf, len, _, addr, addr_len] = op.args;
            self.take_address(op, addr, addr_len as usize)?;
            iovs[0] = libc::iovec {
                iov_base: buf as *mut c_void,
                iov_len: len as usize,
            };
            hdr.msg_iovlen = 1;
            return Ok(1);
        }
        let at = if op.nr == libc::SYS_sendmmsg {
            op.args[1] + op.done as u64 * std::mem::size_of::<libc::mmsghdr>() as u64
        } else {
            op.args[1]
        };
        // SAFETY: `msghdr` is plain C data.
        self.read(&op.caller, at, unsafe { plain_bytes(hdr) })?;
        self.take_address(op, hdr.msg_name as u64, hdr.msg_namelen as usize)?;
        let count = hdr.msg_iovlen as usize;
        if count > MAX_IOV {
            return Err(libc::EMSGSIZE);
        }
        let iovs = &mut iovs[..count];
        // SAFETY: `iovec` is plain C data; the slice covers `count` of them.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                iovs.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(iovs),
            )
        };
        self.read(&op.caller, hdr.msg_iov as u64, bytes)?;
        Ok(count)
    }

    /// One `sendmsg` (with `MSG_DONTWAIT`) of what is left of `op`'s
    /// current message: `(bytes sent, the message's length)`.
    fn send_part(&self, op: &mut Op) -> Result<(usize, usize), i32> {
        let (data, control, iovs) = self.buffers();
        // SAFETY: zeroed plain data.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        let count = self.message_header(op, &mut hdr, iovs)?;
        // The address, as read once for this message.
        // SAFETY: zeroed plain data.
        let mut un: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        if op.target >= 0 {
            hdr.msg_namelen = Self::by_descriptor(op.target, &mut un);
            hdr.msg_name = (&mut un as *mut libc::sockaddr_un).cast();
        } else if op.raw_len > 0 {
            hdr.msg_namelen = op.raw_len as libc::socklen_t;
            hdr.msg_name = (&mut op.raw as *mut libc::sockaddr_storage).cast();
        } else {
            hdr.msg_name = std::ptr::null_mut();
            hdr.msg_namelen = 0;
        }

        // The data left, gathered into one buffer.
        let remote = &mut iovs[..count];
        let mut total = 0usize;
        for iov in remote.iter() {
            total = total.saturating_add(iov.iov_len);
        }
        let left = total.saturating_sub(op.sent);
        let wanted = if left <= DATA_CAP {
            left
        } else if op.stream {
            DATA_CAP
        } else {
            return Err(libc::EMSGSIZE);
        };
        let used = trim(remote, op.sent, wanted);
        if wanted > 0 {
            self.read_vec(&op.caller, &remote[used], &mut data[..wanted])?;
        }
        let mut one = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: wanted,
        };
        hdr.msg_iov = &mut one;
        hdr.msg_iovlen = 1;

        // Control messages go with the message's first byte; descriptors
        // are the caller's, fetched here (closed when `passed` is dropped).
        let control_len = hdr.msg_controllen as usize;
        let mut passed: [Option<OwnedFd>; MAX_FDS] = [const { None }; MAX_FDS];
        if op.sent == 0 && !hdr.msg_control.is_null() && control_len > 0 {
            if control_len > CONTROL_CAP {
                return Err(libc::ENOBUFS);
            }
            let control = &mut control[..control_len];
            self.read(&op.caller, hdr.msg_control as u64, control)?;
            self.translate_control(&op.caller, control, &mut passed)?;
            hdr.msg_control = control.as_mut_ptr().cast();
        } else {
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
        }
        // SAFETY: `hdr` points at buffers of this frame, `op` and the
        // mapping.
        let rc = unsafe { libc::sendmsg(op.sock, &hdr, op.flags | libc::MSG_DONTWAIT) };
        let err = errno();
        drop(passed);
        if rc < 0 {
            Err(err)
        } else {
            Ok((rc as usize, total))
        }
    }

    /// Replaces the caller's descriptors in `SCM_RIGHTS` messages of
    /// `control` by ours (kept in `passed`), and the pid in
    /// `SCM_CREDENTIALS` by the supervisor's (the kernel checks it against
    /// the sender).
    fn translate_control(
        &self,
        call: &Caller,
        control: &mut [u8],
        passed: &mut [Option<OwnedFd>; MAX_FDS],
    ) -> Result<(), i32> {
        let len = control.len();
        let header = std::mem::size_of::<libc::cmsghdr>();
        let mut npassed = 0;
        let mut off = 0usize;
        while off + header <= len {
            // SAFETY: `header` bytes within `control` (checked above), read
            // unaligned; `cmsghdr` is plain C data.
            let cmsg: libc::cmsghdr = unsafe {
                std::ptr::read_unaligned(control[off..].as_ptr().cast::<libc::cmsghdr>())
            };
            let clen = cmsg.cmsg_len as usize;
            if clen < header || off + clen > len {
                // Malformed: the kernel answers it.
                return Ok(());
            }
            let body = off + header;
            if cmsg.cmsg_level == libc::SOL_SOCKET && cmsg.cmsg_type == libc::SCM_RIGHTS {
                for at in (body..off + clen)
                    .step_by(4)
                    .filter(|at| at + 4 <= off + clen)
                {
                    let word = &mut control[at..at + 4];
                    let theirs = c_int::from_ne_bytes([word[0], word[1], word[2], word[3]]);
                    if npassed >= MAX_FDS {
                        return Err(libc::EINVAL);
                    }
                    let ours = self.fetch(call, theirs)?;
                    word.copy_from_slice(&ours.as_raw_fd().to_ne_bytes());
                    passed[npassed] = Some(ours);
                    npassed += 1;
                }
            } else if cmsg.cmsg_level == libc::SOL_SOCKET
                && cmsg.cmsg_type == libc::SCM_CREDENTIALS
                && clen >= header + std::mem::size_of::<libc::ucred>()
            {
                // SAFETY: getpid has no preconditions.
                let pid = unsafe { libc::getpid() };
                control[body..body + 4].copy_from_slice(&pid.to_ne_bytes());
            }
            off += (clen + 7) & !7;
        }
        Ok(())
    }
}

/// Trims the caller's vectors `remote` to what is sent now: past the
/// `sent` bytes already sent, `wanted` bytes. The range of the vectors
/// that hold them.
fn trim(remote: &mut [libc::iovec], sent: usize, wanted: usize) -> std::ops::Range<usize> {
    let mut skip = sent;
    let mut first = 0;
    let mut used = 0;
    let mut want = wanted;
    for (i, iov) in remote.iter_mut().enumerate() {
        if skip >= iov.iov_len {
            skip -= iov.iov_len;
            first = i + 1;
            continue;
        }
        if want == 0 {
            break;
        }
        iov.iov_base = (iov.iov_base as u64 + skip as u64) as *mut c_void;
        iov.iov_len = (iov.iov_len - skip).min(want);
        skip = 0;
        want -= iov.iov_len;
        used = i + 1;
    }
    first..used.max(first)
}
