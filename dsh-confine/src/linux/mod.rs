//! Linux enforcement, modelled on bubblewrap and nsjail, with Landlock and
//! seccomp as extra layers ([`Confinement`]'s docs are the process layout).
//!
//! Everything here runs in the parent to prepare, or after `fork` in the
//! processes of the chain (raw system calls only, through [`sys`]).

pub(crate) mod bubblewrap;
pub(crate) mod cow;
pub(crate) mod egress;
pub(crate) mod files;
mod hiding;
pub(crate) mod landlock;
mod seccomp;
mod sockets;
mod sys;
mod view;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;

pub use self::egress::{EgressListeners, Received};
use self::landlock::{Grant, landlock_abi};
use self::view::{Attachment, View, ViewSpec};
use crate::{Enforcement, Error, Policy, UnixSocketGuard};

#[derive(Debug)]
struct Namespaces {
    flags: libc::c_int,
    uid_map: CString,
    gid_map: CString,
    view: View,
    loopback: bool,
    /// The supervisor's mediation of socket addresses (none for the
    /// confined opener, which makes no socket calls).
    sockets: Option<sockets::Guard>,
    /// The egress proxy's listener, made by init and passed to the host.
    egress: Option<egress::Plan>,
}

/// The confinement applied to one shell: a [`dsh_pty::PreExec`] hook.
///
/// # Process layout
///
/// A confined shell is three processes. The PTY backend forks the
/// *supervisor* (a session leader holding the terminal, in the host's PID
/// namespace); this hook unshares user, mount, PID, IPC, UTS, cgroup (and,
/// with the network off, network) namespaces, maps the caller's uid and
/// gid to themselves, and forks the namespace's *init* (pid 1), which
/// builds the filesystem view, brings the loopback interface up, and forks
/// the *shell* (pid 2). The shell drops every capability, sets
/// `no_new_privs`, enters Landlock and seccomp, and returns from the hook,
/// so the backend `exec`s the real shell program.
///
/// * init reaps orphans, never signals or is signalled from inside (a PID
///   namespace's init only gets signals it handles, and it handles none),
///   is not dumpable, and holds no capability after the fork. When the
///   shell ends, init ends, and the kernel kills everything left in the
///   namespace: nothing started inside (`setsid`, double fork, `nohup`)
///   outlives it.
/// * init dies with the supervisor (`PR_SET_PDEATHSIG`), and the
///   supervisor ends exactly like the shell did (same code, or killed by
///   the same signal), so the backend reports the shell's own exit.
/// * init installs the socket filter before it forks the shell, so that
///   every process of the sandbox is under it, and hands its listener over
///   (`pidfd_getfd`); the supervisor then serves it until init exits (it
///   makes every socket-address call itself, never waiting in one, under
///   its own seccomp filter).
/// * The backend's `spawn` learns of success when every copy of its
///   close-on-exec error pipe is closed: the shell's at `exec`, the
///   supervisor's and init's explicitly. A failure anywhere in the chain
///   is returned from the hook in that process and reported as usual.
///
/// Everything is prepared in the parent ([`Confinement::build`]: mount
/// plan, C strings, Landlock ruleset, BPF programs); the three processes
/// only make raw system calls.
///
/// # The weaker mode
///
/// Where namespaces cannot be created (some container runtimes forbid user
/// namespaces or mounting `proc` in them), a policy without namespaces
/// ([`Policy::namespaces`]) gets the old layering instead: capabilities
/// dropped, `no_new_privs`, Landlock (writes only beneath the writable
/// roots, TCP denied when the network is off) and seccomp (no socket but
/// `AF_UNIX` when the network is off). It shares the host's PID namespace
/// and filesystem view, so it does not hold against root; [`Enforcement`]
/// says what is missing.
#[derive(Debug)]
pub struct Confinement {
    namespaces: Option<Namespaces>,
    landlock: Option<self::landlock::Plan>,
    seccomp: seccomp::Filters,
    /// Fail if capabilities cannot be dropped (we are root somewhere).
    strict_capabilities: bool,
    /// The host's end of the egress listeners' handoff, until taken.
    egress_listeners: Option<egress::EgressListeners>,
}

/// The writable roots, the workspace read-only if it is none of them, and
/// the readable roots read-only.
fn attachments(policy: &Policy) -> Vec<Attachment> {
    let mut attachments: Vec<Attachment> = policy
        .roots
        .iter()
        .map(|r| Attachment {
            path: r.clone(),
            writable: true,
        })
        .collect();
    if !policy.roots.contains(&policy.workspace) {
        attachments.push(Attachment {
            path: policy.workspace.clone(),
            writable: false,
        });
    }
    attachments.extend(policy.readable.iter().map(|path| Attachment {
        path: path.clone(),
        writable: false,
    }));
    attachments
}

/// The protected paths that exist now, beneath a writable root.
fn existing_protected(policy: &Policy) -> Vec<PathBuf> {
    policy
        .protected
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .filter(|p| policy.roots.iter().any(|r| p.starts_with(r)))
        .cloned()
        .collect()
}

/// The namespaces' part of [`Confinement::build`]: the view, the uid maps
/// and the socket guard, and the Landlock grants of the private mounts.
fn plan_namespaces(
    policy: &Policy,
    enforcement: &mut Enforcement,
    grants: &mut Vec<(PathBuf, Grant)>,
) -> Result<(Namespaces, Option<egress::EgressListeners>), Error> {
    let writable = policy.workspace_write;
    let attachments = attachments(policy);
    let protected = existing_protected(policy);
    enforcement.git_read_only = writable && !protected.is_empty();
    let view = View::plan(&ViewSpec {
        roots: &attachments,
        protected: &protected,
        hidden: &policy.hidden,
        by_name: hiding::overlay_in_user_namespaces(),
        sockets: &policy.unix_sockets,
        tmp_writable: policy.tmp_writable,
        shm_writable: writable,
        tmp_options: &policy.tmp_limits.options(),
        proc: !policy.files,
        cwd: &policy.cwd,
    })?;
    if policy.tmp_writable {
        grants.push((PathBuf::from("/tmp"), Grant::Write));
    }
    if writable {
        grants.push((PathBuf::from("/dev/shm"), Grant::Write));
    }
    grants.push((PathBuf::from("/dev"), Grant::Files));
    // SAFETY: getters without preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let map = |id: u32| CString::new(format!("{id} {id} 1")).map_err(|_| Error::setup("uid map"));
    let mut flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if !policy.network {
        flags |= libc::CLONE_NEWNET;
    }
    enforcement.namespaces = true;
    enforcement.filesystem = true;
    enforcement.network_isolated = !policy.network;
    enforcement.unix_sockets = UnixSocketGuard::Supervisor;
    let guard = || {
        let mut reachable: Vec<PathBuf> = policy.roots.clone();
        reachable.push(PathBuf::from("/tmp"));
        reachable.push(PathBuf::from("/dev/shm"));
        reachable.extend(policy.unix_sockets.iter().cloned());
        sockets::Guard::new(&reachable, &protected, policy.network)
    };
    let sockets = if policy.files { None } else { Some(guard()?) };
    let (egress, listeners) = match policy.egress_port {
        Some(_) if policy.network || policy.files => {
            return Err(Error::setup(
                "an egress proxy port needs the network off (a network namespace of its own)",
            ));
        }
        Some(port) => {
            let (plan, listeners) = egress::Plan::new(port)
                .map_err(|e| Error::setup_from("the egress listener's socket pair", e))?;
            (Some(plan), Some(listeners))
        }
        None => (None, None),
    };
    Ok((
        Namespaces {
            flags,
            uid_map: map(uid)?,
            gid_map: map(gid)?,
            view,
            loopback: !policy.network && !policy.files,
            sockets,
            egress,
        },
        listeners,
    ))
}

/// The weaker mode's Landlock grants (the host's view), and what it misses.
fn plan_weaker(policy: &Policy, enforcement: &mut Enforcement, grants: &mut Vec<(PathBuf, Grant)>) {
    enforcement.missing.push(
        "user, mount and PID namespaces (processes and the filesystem view are shared with the host)",
    );
    if policy.tmp_writable {
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
}

/// What Landlock (`plan`, if any) adds to `enforcement`, with namespaces
/// or (`weaker`) without.
fn report_landlock(
    plan: Option<&self::landlock::Plan>,
    weaker: bool,
    network: bool,
    enforcement: &mut Enforcement,
) {
    match plan {
        Some(plan) => {
            enforcement.landlock = true;
            enforcement.landlock_scopes = plan.scoped;
            if weaker {
                enforcement.filesystem = true;
                enforcement.network_isolated = !network && plan.tcp_denied;
                if plan.unix_sockets {
                    enforcement.unix_sockets = UnixSocketGuard::Landlock;
                }
            }
        }
        None if weaker => {
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
}

impl Confinement {
    /// Prepares the confinement of `policy`, and says what it enforces
    /// (in the weaker mode, [`Enforcement::missing`] names what it cannot:
    /// the caller decides whether to run it anyway). Run it in the parent:
    /// it reads the filesystem and the mount table, and allocates.
    pub fn build(policy: &Policy) -> Result<(Confinement, Enforcement), Error> {
        let abi = landlock_abi();
        let mut enforcement = Enforcement {
            landlock_abi: abi,
            seccomp: true,
            capabilities_dropped: true,
            ..Enforcement::default()
        };
        let mut grants: Vec<(PathBuf, Grant)> = policy
            .roots
            .iter()
            .map(|r| (r.clone(), Grant::Write))
            .collect();
        let (namespaces, egress_listeners) = if policy.namespaces {
            let (ns, listeners) = plan_namespaces(policy, &mut enforcement, &mut grants)?;
            (Some(ns), listeners)
        } else if policy.egress_port.is_some() {
            return Err(Error::setup(
                "an egress proxy needs namespaces (the weaker mode has no network namespace \
                 of its own to put its listener in)",
            ));
        } else {
            plan_weaker(policy, &mut enforcement, &mut grants);
            (None, None)
        };
        for socket in &policy.unix_sockets {
            grants.push((socket.clone(), Grant::Connect));
        }
        let weaker = namespaces.is_none();
        let landlock = self::landlock::plan(abi, &grants, !policy.network && weaker)?;
        report_landlock(landlock.as_ref(), weaker, policy.network, &mut enforcement);
        let seccomp = seccomp::filters(!weaker, policy.network)?;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        Ok((
            Confinement {
                strict_capabilities: !weaker || root,
                namespaces,
                landlock,
                seccomp,
                egress_listeners,
            },
            enforcement,
        ))
    }

    /// The host's end of the egress listeners' handoff, once (`None`
    /// without [`Policy::egress_port`], or taken already): every shell this
    /// confinement starts sends its listener there. Take it before the
    /// confinement is shared with the PTY backend.
    pub fn egress_listeners(&mut self) -> Option<EgressListeners> {
        self.egress_listeners.take()
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

    /// The namespace chain (see the type's docs). Returns `Ok` only in the
    /// shell; the supervisor and init never return.
    fn enter_namespaces(&self, ns: &Namespaces) -> io::Result<()> {
        // A host that is not dumpable (dsh-mcp keeps its secrets so) has
        // forked this process not dumpable: its `/proc/self` is then
        // root's, whose `uid_map` it cannot write, and the supervisor
        // cannot take init's listener (`pidfd_getfd`). The supervisor and
        // init make themselves not dumpable again before they serve; the
        // shell's `exec` makes it dumpable anyway.
        sys::dumpable();
        sys::unshare(ns.flags)?;
        sys::write_file(c"/proc/self/setgroups", b"deny")?;
        sys::write_file(c"/proc/self/uid_map", ns.uid_map.as_bytes())?;
        sys::write_file(c"/proc/self/gid_map", ns.gid_map.as_bytes())?;
        let ready = sys::pipe()?;
        let report = sys::pipe()?;
        // The socket supervisor: init hands over its listener's number
        // (`listen`), the supervisor answers with 0 or an errno (`ack`).
        // The host's /proc is opened before the view replaces it.
        let proc_dir = sys::open_dir_path(c"/proc")?;
        let listen = sys::pipe()?;
        let ack = sys::pipe()?;
        let init = sys::fork()?;
        if init > 0 {
            drop((ready.1, report.1, listen.1, ack.0));
            supervise::run(
                ns,
                init,
                supervise::Ends {
                    ready: ready.0,
                    report: report.0,
                    listen: listen.0,
                    ack: ack.1,
                    proc_dir,
                },
            );
        }
        // init, pid 1 of the new PID namespace. If the supervisor died
        // before this line, init is still a member of its terminal
        // session, which the backend kills when the supervisor exits.
        sys::die_with_parent();
        drop((ready.0, report.0, listen.0, ack.1, proc_dir));
        ns.view.apply()?;
        if ns.loopback {
            sys::loopback_up()?;
        }
        if let Some(egress) = &ns.egress {
            egress.hand_over()?;
        }
        // The filter is init's, so the shell and all it starts inherit
        // it; the supervisor fetches the listener before init closes it.
        if let Some(guard) = &ns.sockets {
            hand_over(guard, listen.1.as_fd(), ack.0.as_fd())?;
        }
        drop((listen.1, ack.0));
        let shell = sys::fork()?;
        if shell > 0 {
            drop(ready.1);
            be_init(shell, report.1);
        }
        // The shell (pid 2): the ready pipe's write end closes when it
        // execs (close-on-exec), which the supervisor waits for.
        let _ = ready.1.into_raw_fd();
        drop(report.1);
        Ok(())
    }
}

/// Init: installs the socket filter and hands its listener to the
/// supervisor (its number on `listen`, 0 or an errno back on `ack`).
fn hand_over(
    guard: &sockets::Guard,
    listen: BorrowedFd<'_>,
    ack: BorrowedFd<'_>,
) -> io::Result<()> {
    let listener = guard.install()?;
    sys::write_all(listen, &listener.as_raw_fd().to_ne_bytes())?;
    let mut answer = [0u8; 4];
    if !sys::read_exact(ack, &mut answer) {
        return Err(io::Error::from_raw_os_error(libc::EPIPE));
    }
    drop(listener);
    match i32::from_ne_bytes(answer) {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Init after the shell's fork: reaps every process until the shell ends,
/// then ends with its code (its signal, if any, written to `report` for
/// the supervisor).
fn be_init(shell: libc::pid_t, report: OwnedFd) -> ! {
    sys::close_all_except(&[report.as_raw_fd()]);
    sys::not_dumpable();
    // Nothing to do with the result: init keeps no capability.
    let _ = sys::drop_capabilities();
    loop {
        match sys::wait(-1) {
            Some((pid, status)) if pid == shell => {
                if libc::WIFSIGNALED(status) {
                    let signal = libc::WTERMSIG(status) as u8;
                    // Nothing to do if the supervisor is gone.
                    let _ = sys::write_all(report.as_fd(), &[signal]);
                }
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    0
                };
                sys::exit(code);
            }
            Some(_) => {}
            None => sys::exit(1),
        }
    }
}

/// Runs `f` with this thread's effective capabilities cleared, and sets
/// them back to its permitted ones after (Linux credentials are per
/// thread: the process's other threads keep theirs). Without capabilities
/// to begin with, only `f` runs.
pub fn without_capabilities<T>(f: impl FnOnce() -> T) -> T {
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

/// The supervisor: the first process of the chain, in the host's PID
/// namespace.
mod supervise {
    use std::io;
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

    use libc::c_int;

    use super::Namespaces;
    use super::sockets::{Guard, Supervisor};
    use super::sys;

    /// The supervisor's ends of the pipes it shares with init, and the
    /// host's `/proc`.
    pub(super) struct Ends {
        /// Closes when the shell execs (or the chain failed).
        pub(super) ready: OwnedFd,
        /// The signal that ended the shell, if one did.
        pub(super) report: OwnedFd,
        /// The number of init's listener.
        pub(super) listen: OwnedFd,
        /// 0 or an errno back to init.
        pub(super) ack: OwnedFd,
        pub(super) proc_dir: OwnedFd,
    }

    /// Takes the listener, waits until the shell exec'd (or the chain
    /// failed and reported it), then lets `spawn` return, serves the
    /// listener until init exits, and ends as the shell did.
    pub(super) fn run(ns: &Namespaces, init: libc::pid_t, ends: Ends) -> ! {
        let Ends {
            ready,
            report,
            listen,
            ack,
            proc_dir,
        } = ends;
        let taken = ns
            .sockets
            .as_ref()
            .map(|guard| take_listener(guard, init, listen.as_fd(), proc_dir.as_fd()));
        if let Some(taken) = &taken {
            let answer: i32 = match taken {
                Ok(_) => 0,
                Err(e) => e.raw_os_error().unwrap_or(libc::EPERM),
            };
            // Nothing to do if init is gone: its end reports it.
            let _ = sys::write_all(ack.as_fd(), &answer.to_ne_bytes());
        }
        drop((listen, ack));
        sys::drain(ready.as_fd());
        drop(ready);
        let mut keep = [report.as_raw_fd(), proc_dir.as_raw_fd(), -1, -1];
        if let Some(Ok((supervisor, pidfd))) = &taken {
            keep[2] = supervisor.listener();
            keep[3] = pidfd.as_raw_fd();
        }
        keep.sort_unstable();
        let first = keep.iter().position(|fd| *fd >= 0).unwrap_or(keep.len());
        sys::close_all_except(&keep[first..]);
        sys::not_dumpable();
        if let Some(Ok((supervisor, pidfd))) = &taken {
            // Unconfined, it would leave the sandbox's calls unanswered:
            // then the sandbox ends with it.
            if supervisor.confine().is_ok() {
                supervisor.serve(pidfd.as_fd());
            } else {
                sys::kill(init, libc::SIGKILL);
            }
        }
        let status = sys::wait(init).map_or(libc::EXIT_FAILURE << 8, |(_, s)| s);
        let mut signal = [0u8];
        sys::read_once(report.as_fd(), &mut signal);
        sys::exit_like(status, signal[0].into());
    }

    /// Reads the number of init's listener, fetches it and prepares the
    /// supervisor: `(supervisor, init's pidfd)`.
    fn take_listener<'g>(
        guard: &'g Guard,
        init: libc::pid_t,
        listen: BorrowedFd<'_>,
        proc_dir: BorrowedFd<'g>,
    ) -> io::Result<(Supervisor<'g>, OwnedFd)> {
        let mut number = [0u8; 4];
        if !sys::read_exact(listen, &mut number) {
            return Err(io::Error::from_raw_os_error(libc::EPIPE));
        }
        let pidfd = sys::pidfd_open(init)?;
        let listener = sys::pidfd_getfd(pidfd.as_fd(), c_int::from_ne_bytes(number))?;
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
