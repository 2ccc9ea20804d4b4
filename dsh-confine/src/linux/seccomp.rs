//! seccomp: what the namespaces and dropped capabilities do not already
//! cover, as a second layer.
//!
//! Denied with `EPERM`: file handles (`open_by_handle_at`,
//! `name_to_handle_at`), the kernel keyring, `bpf`, `perf_event_open`,
//! `fanotify_init`,
//! `userfaultfd`, `io_uring`, new namespaces (`unshare`, `setns`, `clone`
//! with a namespace flag), every mount call and `chroot`, device nodes
//! (`mknod` of a character or block device), `ptrace` attach and
//! `process_vm_*` on the sandbox's init (pid 1) and shell (pid 2),
//! `prlimit64` and `setpriority` on any process but the caller, a mode with
//! a set-user-ID or set-group-ID bit (`chmod`, `fchmod`, `fchmodat`,
//! `fchmodat2`, `mknod`, and `open`/`openat`/`creat` that create a file), the
//! `F_SETLEASE` lease (a lease holds back another process's open), and sockets
//! of any family but `AF_UNIX`, `AF_INET`, `AF_INET6` (and no raw or packet
//! sockets at all). With the network off and no network namespace, every
//! family but `AF_UNIX` is denied. `clone3` and `openat2`, whose flags and
//! mode seccomp cannot read, fail with `ENOSYS` so that the C library falls
//! back to `clone` and `openat`;
//! on x86_64, every x32 system call fails with `ENOSYS` (a deny list must
//! not be bypassed through the other ABI).

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};

use crate::Error;

/// `fchmodat2(2)` (Linux 6.6), not yet in every `libc` release.
const SYS_FCHMODAT2: i64 = 452;

/// `__O_TMPFILE` without `O_DIRECTORY`: `open(O_TMPFILE)` creates a file too.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const O_TMPFILE_BIT: u64 = (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const O_TMPFILE_BIT: u64 = 0;

/// The programs to install, in order.
#[derive(Debug)]
pub(crate) struct Filters {
    pub(crate) programs: Vec<Vec<libc::sock_filter>>,
}

fn error(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::setup_from("seccomp", e)
}

fn cond(arg: u8, len: Len, op: Op, value: u64) -> Result<Cond, Error> {
    Cond::new(arg, len, op, value).map_err(error)
}

fn rule(conds: Vec<Cond>) -> Result<SeccompRule, Error> {
    SeccompRule::new(conds).map_err(error)
}

fn arch() -> Result<TargetArch, Error> {
    std::env::consts::ARCH.try_into().map_err(error)
}

fn compile(
    rules: Vec<(i64, Vec<SeccompRule>)>,
    errno: i32,
) -> Result<Vec<libc::sock_filter>, Error> {
    compile_with(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
    )
}

/// A program that allows only the system calls of `rules` (each with its
/// conditions; none: any arguments) and kills the process at any other.
pub(crate) fn allow_only(
    rules: Vec<(i64, Vec<SeccompRule>)>,
) -> Result<Vec<libc::sock_filter>, Error> {
    compile_with(rules, SeccompAction::KillProcess, SeccompAction::Allow)
}

/// Rules that match when argument `arg`, as a 32-bit value, is one of
/// `values`.
pub(crate) fn arg_is(arg: u8, values: &[u64]) -> Result<Vec<SeccompRule>, Error> {
    values
        .iter()
        .map(|v| rule(vec![cond(arg, Len::Dword, Op::Eq, *v)?]))
        .collect()
}

/// Rules that match when argument `arg`, as a 32-bit value, has none of
/// the bits of `mask`.
pub(crate) fn flags_clear(arg: u8, mask: u64) -> Result<Vec<SeccompRule>, Error> {
    Ok(vec![rule(vec![cond(
        arg,
        Len::Dword,
        Op::MaskedEq(mask),
        0,
    )?])?])
}

fn compile_with(
    rules: Vec<(i64, Vec<SeccompRule>)>,
    mismatch: SeccompAction,
    matched: SeccompAction,
) -> Result<Vec<libc::sock_filter>, Error> {
    let filter = SeccompFilter::new(rules.into_iter().collect(), mismatch, matched, arch()?)
        .map_err(error)?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| error(e))?;
    Ok(program
        .into_iter()
        .map(|f| libc::sock_filter {
            code: f.code,
            jt: f.jt,
            jf: f.jf,
            k: f.k,
        })
        .collect())
}

type Rules = Vec<SeccompRule>;

/// Rules that match when argument 0, the socket family, is none of
/// `families`.
fn family_is_not(families: &[i32]) -> Result<Rules, Error> {
    let conds = families
        .iter()
        .map(|f| cond(0, Len::Dword, Op::Ne, *f as u64))
        .collect::<Result<_, _>>()?;
    Ok(vec![rule(conds)?])
}

/// `socket`: a family but Unix and IP (`inet`; else but Unix), or a raw or
/// packet socket.
fn socket_rules(inet: bool) -> Result<Rules, Error> {
    let mut socket = if inet {
        family_is_not(&[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6])?
    } else {
        family_is_not(&[libc::AF_UNIX])?
    };
    // SOCK_PACKET (10), the obsolete packet socket type.
    for kind in [libc::SOCK_RAW, 10] {
        socket.push(rule(vec![cond(
            1,
            Len::Dword,
            Op::MaskedEq(0xf),
            kind as u64,
        )?])?);
    }
    Ok(socket)
}

/// `clone` with a namespace flag.
fn clone_rules() -> Result<Rules, Error> {
    let ns_flags = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ];
    ns_flags
        .iter()
        .map(|f| {
            rule(vec![cond(
                0,
                Len::Qword,
                Op::MaskedEq(*f as u64),
                *f as u64,
            )?])
        })
        .collect()
}

/// Argument `arg` is pid 1 (the sandbox's init) or 2 (its shell), in
/// their namespace (and argument `extra.0` is `extra.1`).
fn own_pids(arg: u8, extra: Option<(u8, u64)>) -> Result<Rules, Error> {
    [1u64, 2]
        .iter()
        .map(|pid| {
            let mut conds = vec![cond(arg, Len::Dword, Op::Eq, *pid)?];
            if let Some((a, v)) = extra {
                conds.push(cond(a, Len::Dword, Op::Eq, v)?);
            }
            rule(conds)
        })
        .collect()
}

/// The mode argument `arg` makes a character or block device.
fn device_node(arg: u8) -> Result<Rules, Error> {
    [libc::S_IFCHR, libc::S_IFBLK]
        .iter()
        .map(|kind| {
            rule(vec![cond(
                arg,
                Len::Dword,
                Op::MaskedEq(libc::S_IFMT as u64),
                *kind as u64,
            )?])
        })
        .collect()
}

/// A set-user-ID or set-group-ID bit in the mode argument `arg` (with
/// `flags_arg`: only when that argument creates a file, `O_CREAT` or
/// `O_TMPFILE`, the way `open` reads its mode only then).
fn set_id(arg: u8, flags_arg: Option<u8>) -> Result<Rules, Error> {
    let mut out = Vec::new();
    for bit in [libc::S_ISUID, libc::S_ISGID] {
        let mode = cond(arg, Len::Dword, Op::MaskedEq(bit as u64), bit as u64)?;
        match flags_arg {
            None => out.push(rule(vec![mode])?),
            Some(flags) => {
                for create in [libc::O_CREAT as u64, O_TMPFILE_BIT] {
                    if create != 0 {
                        let creates = cond(flags, Len::Dword, Op::MaskedEq(create), create)?;
                        out.push(rule(vec![mode.clone(), creates])?);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// System calls denied whatever their arguments.
const DENIED: [i64; 25] = [
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    // fanotify reports the file events of a whole filesystem or mount
    // (unprivileged since Linux 5.13): the host's and other tenants'.
    libc::SYS_fanotify_init,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
];

/// What fails with `EPERM` (see the module docs): the calls of [`DENIED`]
/// and those with the arguments these rules match.
fn eperm_rules(inet: bool) -> Result<Vec<(i64, Rules)>, Error> {
    let mut ptrace = own_pids(1, Some((0, libc::PTRACE_ATTACH as u64)))?;
    ptrace.extend(own_pids(1, Some((0, libc::PTRACE_SEIZE as u64)))?);
    let mut mknodat = device_node(2)?;
    mknodat.extend(set_id(2, None)?);
    let mut rules: Vec<(i64, Rules)> = vec![
        // Nothing planted for the host: no mode with a set-id bit.
        (libc::SYS_fchmod, set_id(1, None)?),
        (libc::SYS_fchmodat, set_id(2, None)?),
        (SYS_FCHMODAT2, set_id(2, None)?),
        (libc::SYS_openat, set_id(3, Some(2))?),
        (libc::SYS_mknodat, mknodat),
        // Leases would let the sandbox hold back a host writer.
        (
            libc::SYS_fcntl,
            vec![rule(vec![cond(
                1,
                Len::Dword,
                Op::Eq,
                libc::F_SETLEASE as u64,
            )?])?],
        ),
        (libc::SYS_socket, socket_rules(inet)?),
        (libc::SYS_socketpair, family_is_not(&[libc::AF_UNIX])?),
        (libc::SYS_clone, clone_rules()?),
        (libc::SYS_ptrace, ptrace),
        (libc::SYS_process_vm_readv, own_pids(0, None)?),
        (libc::SYS_process_vm_writev, own_pids(0, None)?),
        (
            libc::SYS_prlimit64,
            vec![rule(vec![cond(0, Len::Dword, Op::Ne, 0)?])?],
        ),
        (
            libc::SYS_setpriority,
            vec![rule(vec![cond(1, Len::Dword, Op::Ne, 0)?])?],
        ),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        let mut mknod = device_node(1)?;
        mknod.extend(set_id(1, None)?);
        rules.push((libc::SYS_mknod, mknod));
        rules.push((libc::SYS_chmod, set_id(1, None)?));
        rules.push((libc::SYS_open, set_id(2, Some(1))?));
        rules.push((libc::SYS_creat, set_id(1, None)?));
    }
    rules.extend(DENIED.iter().map(|nr| (*nr, Vec::new())));
    Ok(rules)
}

/// The filters for a shell in namespaces (`namespaces: true`: its own
/// network namespace when the network is off, so `AF_INET` is harmless) or
/// in the weaker mode without them (`namespaces: false`, where the network
/// being off means no socket but `AF_UNIX`).
pub(crate) fn filters(namespaces: bool, network: bool) -> Result<Filters, Error> {
    let eperm = compile(eperm_rules(namespaces || network)?, libc::EPERM)?;
    // `clone3` and `openat2` carry their flags and mode in a structure
    // seccomp cannot read; without them the C library uses `clone` and
    // `openat`.
    let enosys = compile(
        vec![
            (libc::SYS_clone3, Vec::new()),
            (libc::SYS_openat2, Vec::new()),
        ],
        libc::ENOSYS,
    )?;
    let mut programs = vec![eperm, enosys];
    #[cfg(target_arch = "x86_64")]
    programs.push(x32_guard());
    Ok(Filters { programs })
}

/// x86_64 only: every system call numbered in the x32 range fails with
/// `ENOSYS`.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> Vec<libc::sock_filter> {
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let ld_abs = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    vec![
        stmt(ld_abs, 4), // seccomp_data.arch
        jump(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            AUDIT_ARCH_X86_64,
            0,
            3,
        ),
        stmt(ld_abs, 0), // seccomp_data.nr
        jump(
            libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
            X32_SYSCALL_BIT,
            0,
            1,
        ),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}
