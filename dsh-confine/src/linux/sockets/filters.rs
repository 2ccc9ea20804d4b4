//! The two seccomp filters: the one init installs, which hands the
//! socket-address calls to the supervisor, and the supervisor's own.

use crate::Error;
use crate::linux::{seccomp, sys};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xC000_00F3;

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
pub(super) fn supervisor() -> Result<Vec<libc::sock_filter>, Error> {
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
                    sys::NOTIF_ID_VALID as u64,
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
pub(super) fn notification(host_network: bool) -> Vec<libc::sock_filter> {
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
