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
//! multithreaded process: system calls (the wrappers of `sys`) on memory
//! prepared before the fork (the guard and both filters), or mapped after it
//! (its buffers, its table and its poll set), and no allocation.
//!
//! # Where it is
//!
//! [`Guard`] (`guard.rs`) is what the parent prepares, with the two
//! filters (`filters.rs`); [`Supervisor`] (`supervisor.rs`) is the loop,
//! on a mapping of its own (`mapping.rs`) that holds a table of calls
//! (`op.rs`). A call's caller (`caller.rs`: its thread group, descriptors
//! and memory), its address (`address.rs`), `connect` and `bind`
//! (`connect.rs`), sends (`send.rs`) and the control messages they pass
//! (`control.rs`) each have a module.

mod address;
mod caller;
mod connect;
mod control;
mod filters;
mod guard;
mod mapping;
mod op;
mod send;
mod supervisor;

pub(crate) use guard::Guard;
pub(crate) use supervisor::Supervisor;

/// An error's errno, as a notification's answer carries it.
fn errno(err: std::io::Error) -> i32 {
    err.raw_os_error().unwrap_or(libc::EIO)
}
