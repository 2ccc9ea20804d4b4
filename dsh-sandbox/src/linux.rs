//! Linux enforcement: Landlock for the filesystem (and TCP where the ABI has
//! it), seccomp for every socket family but `AF_UNIX`, `no_new_privs`, and a
//! read-only bind of `.git` in a private mount namespace.
//!
//! Everything is prepared in the parent (the Landlock ruleset file
//! descriptor, the compiled BPF program, the paths as C strings); the child
//! only makes raw system calls between `fork` and `exec`: `unshare`,
//! `mount`, `prctl`, `landlock_restrict_self`, `seccomp`. None of them
//! allocates or locks, so the hook is async-signal-safe.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use crate::{Enforcement, SandboxError, WriteRules};

/// The confinement applied to each restricted shell.
#[derive(Debug)]
pub(crate) struct Confinement {
    ruleset: Option<OwnedFd>,
    seccomp: Option<BpfProgram>,
    read_only_binds: Vec<CString>,
    user_namespace: Option<(CString, CString)>,
}

/// The Landlock ABI version of the running kernel (0 when unsupported).
pub fn landlock_abi() -> i32 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute is the
    // documented way to ask for the ABI version; it touches no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

fn landlock_error(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Setup(format!("Landlock: {e}"))
}

impl Confinement {
    /// Prepares the confinement of `rules`; fails closed (unless `degrade`)
    /// when the kernel cannot enforce it.
    pub(crate) fn build(
        rules: &WriteRules,
        network: bool,
        degrade: bool,
    ) -> Result<(Confinement, Enforcement), SandboxError> {
        let abi = landlock_abi();
        let mut enforcement = Enforcement {
            landlock_abi: abi,
            filesystem: false,
            network_landlock: false,
            network_seccomp: false,
            git_read_only: false,
            missing: Vec::new(),
        };

        // Filesystem: ABI 3 is the least that covers every way to write
        // (including truncate(2) and cross-directory rename).
        let write_v3 = AccessFs::from_write(ABI::V3);
        let write_all = AccessFs::from_write(ABI::V5);
        let file_rights = write_all & AccessFs::from_file(ABI::V5);
        let ruleset = if abi >= 3 {
            let mut ruleset = Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(write_v3)
                .map_err(landlock_error)?
                .set_compatibility(CompatLevel::BestEffort)
                .handle_access(write_all)
                .map_err(landlock_error)?;
            if !network {
                ruleset = ruleset
                    .handle_access(AccessNet::from_all(ABI::V4))
                    .map_err(landlock_error)?;
                enforcement.network_landlock = abi >= 4;
            }
            let mut created = ruleset.create().map_err(landlock_error)?;
            for root in &rules.roots {
                let fd = PathFd::new(root).map_err(landlock_error)?;
                created = created
                    .add_rule(PathBeneath::new(fd, write_all))
                    .map_err(landlock_error)?;
            }
            for dev in ["/dev/null", "/dev/tty"] {
                if let Ok(fd) = PathFd::new(dev) {
                    created = created
                        .add_rule(PathBeneath::new(fd, file_rights))
                        .map_err(landlock_error)?;
                }
            }
            enforcement.filesystem = true;
            let fd: Option<OwnedFd> = created.into();
            fd
        } else {
            enforcement
                .missing
                .push("filesystem confinement (Landlock ABI 3 or newer)");
            None
        };

        let seccomp = if network {
            None
        } else {
            let program = socket_filter()?;
            enforcement.network_seccomp = true;
            Some(program)
        };

        // `.git` read-only: a bind mount in a private mount namespace.
        let mut read_only_binds = Vec::new();
        let mut user_namespace = None;
        let existing: Vec<_> = rules.protected.iter().filter(|p| p.exists()).collect();
        if !existing.is_empty() {
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let userns_allowed = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
                .map_or(true, |v| v.trim() != "0");
            if root || userns_allowed {
                for p in existing {
                    let c = CString::new(p.as_os_str().as_bytes()).map_err(|_| {
                        SandboxError::Setup(format!("path with NUL: {}", p.display()))
                    })?;
                    read_only_binds.push(c);
                }
                if !root {
                    // SAFETY: getuid/getgid have no preconditions.
                    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
                    let map = |id: u32| CString::new(format!("{id} {id} 1")).unwrap_or_default();
                    user_namespace = Some((map(uid), map(gid)));
                }
                enforcement.git_read_only = true;
            } else {
                enforcement
                    .missing
                    .push("read-only .git (needs root or user namespaces)");
            }
        }

        if !enforcement.missing.is_empty() && !degrade {
            return Err(SandboxError::NotEnforceable {
                missing: enforcement.missing.join(", "),
            });
        }
        Ok((
            Confinement {
                ruleset,
                seccomp,
                read_only_binds,
                user_namespace,
            },
            enforcement,
        ))
    }
}

/// `socket(2)` and `socketpair(2)` for anything but `AF_UNIX`, and
/// `io_uring_setup(2)` (which could open sockets around the filter), fail
/// with `EPERM`.
fn socket_filter() -> Result<BpfProgram, SandboxError> {
    let err = |e: &dyn std::fmt::Display| SandboxError::Setup(format!("seccomp: {e}"));
    let not_unix = || -> Result<Vec<SeccompRule>, SandboxError> {
        let cond = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(|e| err(&e))?;
        Ok(vec![SeccompRule::new(vec![cond]).map_err(|e| err(&e))?])
    };
    let rules = [
        (libc::SYS_socket, not_unix()?),
        (libc::SYS_socketpair, not_unix()?),
        (libc::SYS_io_uring_setup, Vec::new()),
    ]
    .into_iter()
    .collect();
    let arch = std::env::consts::ARCH.try_into().map_err(|e| err(&e))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| err(&e))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| err(&e))
}

fn check(rc: libc::c_long) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn write_file(path: &[u8], data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; open/write/close are async-signal-safe.
    unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

// SAFETY: `pre_exec` only makes raw system calls on data prepared before
// the fork (C strings, the ruleset descriptor, the BPF program); it does
// not allocate, lock or log.
unsafe impl dsh_pty::PreExec for Confinement {
    fn pre_exec(&self) -> io::Result<()> {
        // SAFETY: every call below is a plain system call on valid,
        // NUL-terminated strings or owned descriptors.
        unsafe {
            if !self.read_only_binds.is_empty() {
                let flags = if self.user_namespace.is_some() {
                    libc::CLONE_NEWUSER | libc::CLONE_NEWNS
                } else {
                    libc::CLONE_NEWNS
                };
                check(libc::unshare(flags).into())?;
                if let Some((uid_map, gid_map)) = &self.user_namespace {
                    write_file(b"/proc/self/setgroups\0", b"deny")?;
                    write_file(b"/proc/self/uid_map\0", uid_map.as_bytes())?;
                    write_file(b"/proc/self/gid_map\0", gid_map.as_bytes())?;
                }
                let none = c"none".as_ptr();
                check(
                    libc::mount(
                        none,
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    )
                    .into(),
                )?;
                for path in &self.read_only_binds {
                    check(
                        libc::mount(
                            path.as_ptr(),
                            path.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        )
                        .into(),
                    )?;
                    check(
                        libc::mount(
                            none,
                            path.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                            std::ptr::null(),
                        )
                        .into(),
                    )?;
                }
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            if let Some(fd) = &self.ruleset {
                check(libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    fd.as_raw_fd(),
                    0u32,
                ))?;
            }
            if let Some(program) = &self.seccomp {
                let prog = libc::sock_fprog {
                    len: program.len() as libc::c_ushort,
                    filter: program.as_ptr() as *mut libc::sock_filter,
                };
                check(libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0u32,
                    &prog as *const libc::sock_fprog,
                ))?;
            }
        }
        Ok(())
    }
}
