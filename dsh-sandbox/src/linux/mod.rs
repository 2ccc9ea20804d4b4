//! Linux enforcement, modelled on bubblewrap and nsjail, with Landlock and
//! seccomp as extra layers.
//!
//! # Process layout
//!
//! A confined shell is three processes. The PTY backend forks the
//! *supervisor* (a session leader holding the terminal, in the host's PID
//! namespace); its [`PreExec`](dsh_pty::PreExec) hook unshares user, mount,
//! PID, IPC, UTS, cgroup (and, with the network off, network) namespaces,
//! maps the caller's uid and gid to themselves, and forks the namespace's
//! *init* (pid 1), which builds the filesystem view ([`view`]), brings the
//! loopback interface up, and forks the *shell* (pid 2). The shell drops
//! every capability, sets `no_new_privs`, enters Landlock and seccomp, and
//! returns from the hook, so the backend `exec`s the real shell program.
//!
//! * init reaps orphans, never signals or is signalled from inside (a PID
//!   namespace's init only gets signals it handles, and it handles none), is
//!   not dumpable, and holds no capability after the fork. When the shell
//!   ends, init ends, and the kernel kills everything left in the namespace:
//!   nothing started inside (`setsid`, double fork, `nohup`) outlives it.
//! * init dies with the supervisor (`PR_SET_PDEATHSIG`), and the supervisor
//!   ends exactly like the shell did (same code, or killed by the same
//!   signal), so the backend reports the shell's own exit.
//! * init installs the socket filter before it forks the shell, so that
//!   every process of the sandbox is under it, and hands its listener over
//!   (`pidfd_getfd`); the supervisor then serves it until init exits
//!   ([`sockets`]: it makes every socket-address call itself, never
//!   waiting in one, under its own seccomp filter).
//! * The backend's `spawn` learns of success when every copy of its
//!   close-on-exec error pipe is closed: the shell's at `exec`, the
//!   supervisor's and init's explicitly. A failure anywhere in the chain is
//!   returned from the hook in that process and reported as usual.
//!
//! Everything is prepared in the parent (mount plan, C strings, Landlock
//! ruleset, BPF programs); the three processes only make raw system calls.
//!
//! # The weaker mode
//!
//! Where namespaces cannot be created (some container runtimes forbid user
//! namespaces or mounting `proc` in them), a policy with `degrade: true`
//! gets the old layering instead: capabilities dropped, `no_new_privs`,
//! Landlock (writes only beneath the writable roots, TCP denied when the
//! network is off) and seccomp (no socket but `AF_UNIX` when the network is
//! off). It shares the host's PID namespace and filesystem view, so it does
//! not hold against root; [`Enforcement`] says what is missing.

pub(crate) mod bubblewrap;
pub(crate) mod files;
mod hiding;
mod landlock;
mod seccomp;
mod sockets;
mod sys;
mod view;

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use self::landlock::Grant;
pub use self::landlock::landlock_abi;
use self::view::{Attachment, View};
use crate::{Enforcement, SandboxError, SandboxMode, UnixSocketGuard, WriteRules};

/// What to confine, as the sandbox resolved it when the shell is created.
#[derive(Debug)]
pub(crate) struct Spec<'a> {
    pub(crate) rules: &'a WriteRules,
    /// The workspace (canonical): visible read-only in read-only mode.
    pub(crate) workspace: &'a Path,
    /// The shell's start directory.
    pub(crate) cwd: &'a Path,
    pub(crate) network: bool,
    /// Use namespaces (`false`: the weaker mode).
    pub(crate) namespaces: bool,
    /// Pathname Unix sockets reachable besides those beneath the writable
    /// roots, `/tmp` and `/dev/shm` (canonical).
    pub(crate) unix_sockets: &'a [PathBuf],
    /// For the editor's file helper ([`files`]), not a shell: no `/proc`
    /// in the view (the helper is a fork of the host's process, whose
    /// memory and environment `/proc/self` would show) and no socket guard.
    pub(crate) files: bool,
    /// The private `/tmp`'s (and `/dev/shm`'s) tmpfs size and inodes.
    pub(crate) tmp: TmpLimits,
}

/// The size bounds of the private `/tmp` and `/dev/shm` tmpfs (`None`: the
/// kernel's default, half the host's memory).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TmpLimits {
    pub(crate) size: Option<u64>,
    pub(crate) inodes: Option<u64>,
}

impl TmpLimits {
    /// The tmpfs options: `mode=1777` and the bounds.
    pub(crate) fn options(self) -> String {
        let mut options = "mode=1777".to_owned();
        if let Some(size) = self.size {
            options.push_str(&format!(",size={size}"));
        }
        if let Some(inodes) = self.inodes {
            options.push_str(&format!(",nr_inodes={inodes}"));
        }
        options
    }
}

#[derive(Debug)]
struct Namespaces {
    flags: libc::c_int,
    uid_map: CString,
    gid_map: CString,
    view: View,
    loopback: bool,
    /// The supervisor's mediation of socket addresses (none for the
    /// editor's file helper, which makes no socket calls).
    sockets: Option<sockets::Guard>,
}

/// The confinement applied to one shell (see the module docs).
#[derive(Debug)]
pub(crate) struct Confinement {
    namespaces: Option<Namespaces>,
    landlock: Option<self::landlock::Plan>,
    seccomp: seccomp::Filters,
    /// Fail if capabilities cannot be dropped (we are root somewhere).
    strict_capabilities: bool,
}

impl Confinement {
    /// Prepares the confinement of `spec`. In the weaker mode, fails closed
    /// when Landlock is missing.
    pub(crate) fn build(spec: &Spec<'_>) -> Result<(Confinement, Enforcement), SandboxError> {
        let abi = landlock_abi();
        let rules = spec.rules;
        let writable = rules.mode == SandboxMode::WorkspaceWrite;
        let mut enforcement = Enforcement {
            landlock_abi: abi,
            seccomp: true,
            capabilities_dropped: true,
            ..Enforcement::default()
        };
        let mut grants: Vec<(PathBuf, Grant)> = rules
            .roots
            .iter()
            .map(|r| (r.clone(), Grant::Write))
            .collect();

        let namespaces = if spec.namespaces {
            let mut attachments: Vec<Attachment> = rules
                .roots
                .iter()
                .map(|r| Attachment {
                    path: r.clone(),
                    writable: true,
                })
                .collect();
            if !rules.roots.iter().any(|r| r == spec.workspace) {
                attachments.push(Attachment {
                    path: spec.workspace.to_owned(),
                    writable: false,
                });
            }
            let protected: Vec<PathBuf> = rules
                .protected
                .iter()
                .filter(|p| std::fs::symlink_metadata(p).is_ok())
                .filter(|p| rules.roots.iter().any(|r| p.starts_with(r)))
                .cloned()
                .collect();
            enforcement.git_read_only = writable && !protected.is_empty();
            let view = View::plan(
                &attachments,
                &protected,
                (
                    &rules.hidden,
                    hiding::overlay_in_user_namespaces(),
                    spec.unix_sockets,
                ),
                (rules.tmp, writable),
                &spec.tmp.options(),
                !spec.files,
                spec.cwd,
            )?;
            if rules.tmp {
                grants.push((PathBuf::from("/tmp"), Grant::Write));
            }
            if writable {
                grants.push((PathBuf::from("/dev/shm"), Grant::Write));
            }
            grants.push((PathBuf::from("/dev"), Grant::Files));
            // SAFETY: getters without preconditions.
            let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
            let map = |id: u32| {
                CString::new(format!("{id} {id} 1")).map_err(|_| SandboxError::setup("uid map"))
            };
            let mut flags = libc::CLONE_NEWUSER
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS
                | libc::CLONE_NEWCGROUP;
            if !spec.network {
                flags |= libc::CLONE_NEWNET;
            }
            enforcement.namespaces = true;
            enforcement.filesystem = true;
            enforcement.network_isolated = !spec.network;
            enforcement.unix_sockets = UnixSocketGuard::Supervisor;
            let guard = || {
                let mut reachable: Vec<PathBuf> = rules.roots.clone();
                reachable.push(PathBuf::from("/tmp"));
                reachable.push(PathBuf::from("/dev/shm"));
                reachable.extend(spec.unix_sockets.iter().cloned());
                sockets::Guard::new(&reachable, &protected, spec.network)
            };
            let sockets = if spec.files { None } else { Some(guard()?) };
            Some(Namespaces {
                flags,
                uid_map: map(uid)?,
                gid_map: map(gid)?,
                view,
                loopback: !spec.network && !spec.files,
                sockets,
            })
        } else {
            enforcement.missing.push(
                "user, mount and PID namespaces (processes and the filesystem view are shared with the host)",
            );
            if rules.tmp {
                grants.push((PathBuf::from("/tmp"), Grant::Write));
                if let Some(tmp) = std::env::var_os("TMPDIR")
                    && let Ok(tmp) = std::fs::canonicalize(tmp)
                {
                    grants.push((tmp, Grant::Write));
                }
            }
            for dev in ["/dev/null", "/dev/tty"] {
                grants.push((PathBuf::from(dev), Grant::Files));
            }
            None
        };

        for socket in spec.unix_sockets {
            grants.push((socket.clone(), Grant::Connect));
        }
        let landlock = self::landlock::plan(abi, &grants, !spec.network && namespaces.is_none())?;
        match &landlock {
            Some(plan) => {
                enforcement.landlock = true;
                enforcement.landlock_scopes = plan.scoped;
                if namespaces.is_none() {
                    enforcement.filesystem = true;
                    enforcement.network_isolated = !spec.network && plan.tcp_denied;
                    if plan.unix_sockets {
                        enforcement.unix_sockets = UnixSocketGuard::Landlock;
                    }
                }
            }
            None if namespaces.is_none() => {
                enforcement
                    .missing
                    .push("filesystem confinement (Landlock ABI 3 or newer)");
            }
            None => {}
        }
        if enforcement.unix_sockets == UnixSocketGuard::Unguarded {
            enforcement.missing.push(
                "Unix socket confinement (the namespaces' supervisor, or Landlock ABI 9 or newer)",
            );
        }
        let seccomp = seccomp::filters(namespaces.is_some(), spec.network)?;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        Ok((
            Confinement {
                strict_capabilities: namespaces.is_some() || root,
                namespaces,
                landlock,
                seccomp,
            },
            enforcement,
        ))
    }

    /// The last steps, in the process that goes on to `exec` the shell.
    fn restrict_self(&self) -> io::Result<()> {
        sys::no_core_dumps()?;
        if let Err(err) = sys::drop_capabilities()
            && self.strict_capabilities
        {
            return Err(err);
        }
        sys::no_new_privs()?;
        if let Some(plan) = &self.landlock {
            plan.enforce()?;
        }
        for program in &self.seccomp.programs {
            sys::seccomp_install(program)?;
        }
        Ok(())
    }

    /// The namespace chain (see the module docs). Returns `Ok` only in the
    /// shell; the supervisor and init never return.
    fn enter_namespaces(&self, ns: &Namespaces) -> io::Result<()> {
        // SAFETY: every call is a raw system call on data prepared before
        // the fork; `fork` in a single-threaded child is safe, and the
        // children only make raw system calls too.
        unsafe {
            sys::check(libc::unshare(ns.flags).into())?;
            sys::write_file(c"/proc/self/setgroups", b"deny")?;
            sys::write_file(c"/proc/self/uid_map", ns.uid_map.as_bytes())?;
            sys::write_file(c"/proc/self/gid_map", ns.gid_map.as_bytes())?;
            let (ready_rx, ready_tx) = sys::pipe()?;
            let (report_rx, report_tx) = sys::pipe()?;
            // The socket supervisor: init hands over its listener's number
            // (`listen`), the supervisor answers with 0 or an errno (`ack`).
            // The host's /proc is opened before the view replaces it.
            let proc_dir = sys::open_dir_path(c"/proc")?;
            let (listen_rx, listen_tx) = sys::pipe()?;
            let (ack_rx, ack_tx) = sys::pipe()?;
            let init = sys::check(libc::fork().into())? as libc::pid_t;
            if init > 0 {
                // The supervisor: take the listener, wait until the shell
                // exec'd (or the chain failed and reported it), then let
                // `spawn` return and serve the listener.
                for fd in [ready_tx, report_tx, listen_tx, ack_rx] {
                    libc::close(fd);
                }
                let taken = ns
                    .sockets
                    .as_ref()
                    .map(|guard| self::supervise::take_listener(guard, init, listen_rx, proc_dir));
                if let Some(taken) = &taken {
                    let answer: i32 = match taken {
                        Ok(_) => 0,
                        Err(e) => e.raw_os_error().unwrap_or(libc::EPERM),
                    };
                    // Nothing to do if init is gone: its end reports it.
                    let _ = sys::write_all(ack_tx, &answer.to_ne_bytes());
                }
                libc::close(listen_rx);
                libc::close(ack_tx);
                sys::drain(ready_rx);
                let mut keep = [report_rx, proc_dir, -1, -1];
                if let Some(Ok((supervisor, pidfd))) = &taken {
                    keep[2] = supervisor.listener();
                    keep[3] = *pidfd;
                }
                keep.sort_unstable();
                let first = keep.iter().position(|fd| *fd >= 0).unwrap_or(keep.len());
                sys::close_all_except(&keep[first..]);
                libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                if let Some(Ok((supervisor, pidfd))) = &taken {
                    // Unconfined, it would leave the sandbox's calls
                    // unanswered: then the sandbox ends with it.
                    if supervisor.confine().is_ok() {
                        supervisor.serve(*pidfd);
                    } else {
                        libc::kill(init, libc::SIGKILL);
                    }
                }
                let status = sys::wait(init).map_or(libc::EXIT_FAILURE << 8, |(_, s)| s);
                let mut signal = 0u8;
                libc::read(report_rx, (&mut signal as *mut u8).cast(), 1);
                sys::exit_like(status, signal.into());
            }
            // init, pid 1 of the new PID namespace. If the supervisor died
            // before this line, init is still a member of its terminal
            // session, which the backend kills when the supervisor exits.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            for fd in [ready_rx, report_rx, listen_rx, ack_tx, proc_dir] {
                libc::close(fd);
            }
            ns.view.apply()?;
            if ns.loopback {
                sys::loopback_up()?;
            }
            // The filter is init's, so the shell and all it starts inherit
            // it; the supervisor fetches the listener before init closes it.
            if let Some(guard) = &ns.sockets {
                let listener = guard.install()?;
                sys::write_all(listen_tx, &listener.to_ne_bytes())?;
                let mut answer = [0u8; 4];
                if !sys::read_exact(ack_rx, &mut answer) {
                    return Err(io::Error::from_raw_os_error(libc::EPIPE));
                }
                libc::close(listener);
                match i32::from_ne_bytes(answer) {
                    0 => {}
                    errno => return Err(io::Error::from_raw_os_error(errno)),
                }
            }
            libc::close(listen_tx);
            libc::close(ack_rx);
            let shell = sys::check(libc::fork().into())? as libc::pid_t;
            if shell > 0 {
                libc::close(ready_tx);
                sys::close_all_except(&[report_tx]);
                libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                // Nothing to do with the result: init keeps no capability.
                let _ = sys::drop_capabilities();
                loop {
                    match sys::wait(-1) {
                        Some((pid, status)) if pid == shell => {
                            if libc::WIFSIGNALED(status) {
                                let signal = libc::WTERMSIG(status) as u8;
                                libc::write(report_tx, (&signal as *const u8).cast(), 1);
                            }
                            let code = if libc::WIFEXITED(status) {
                                libc::WEXITSTATUS(status)
                            } else {
                                0
                            };
                            libc::_exit(code);
                        }
                        Some(_) => {}
                        None => libc::_exit(1),
                    }
                }
            }
            // The shell (pid 2): `ready_tx` closes when it execs.
            libc::close(report_tx);
            Ok(())
        }
    }
}

/// Runs `f` with this thread's effective capabilities cleared, and sets
/// them back to its permitted ones after (Linux credentials are per
/// thread: the process's other threads keep theirs). Without capabilities
/// to begin with, only `f` runs.
pub(crate) fn without_capabilities<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(Option<[sys::CapData; 2]>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(saved) = self.0
                && let Err(err) = sys::capset_thread(&saved)
            {
                tracing::error!(%err, "could not restore this thread's capabilities");
            }
        }
    }
    let saved = sys::capget_thread()
        .ok()
        .filter(|d| d.iter().any(|d| d.effective != 0));
    let _restore = Restore(saved.and_then(|saved| {
        let mut cleared = saved;
        for d in &mut cleared {
            d.effective = 0;
        }
        sys::capset_thread(&cleared).ok().map(|()| saved)
    }));
    f()
}

/// The supervisor's half of the listener handover.
mod supervise {
    use std::io;

    use libc::c_int;

    use super::sockets::{Guard, Supervisor};
    use super::sys;

    /// Reads the number of init's listener, fetches it and prepares the
    /// supervisor: `(supervisor, init's pidfd)`.
    pub(super) fn take_listener(
        guard: &Guard,
        init: libc::pid_t,
        listen_rx: c_int,
        proc_dir: c_int,
    ) -> io::Result<(Supervisor<'_>, c_int)> {
        let mut number = [0u8; 4];
        if !sys::read_exact(listen_rx, &mut number) {
            return Err(io::Error::from_raw_os_error(libc::EPIPE));
        }
        let pidfd = sys::pidfd_open(init)?;
        let listener = sys::pidfd_getfd(pidfd, c_int::from_ne_bytes(number))?;
        Ok((Supervisor::new(guard, listener, proc_dir)?, pidfd))
    }
}

// SAFETY: `pre_exec` only makes raw system calls on data prepared before
// the fork (see the module docs); it does not allocate, lock or log.
unsafe impl dsh_pty::PreExec for Confinement {
    fn pre_exec(&self) -> io::Result<()> {
        if let Some(ns) = &self.namespaces {
            self.enter_namespaces(ns)?;
        }
        self.restrict_self()
    }
}
