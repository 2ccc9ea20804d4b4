//! The native Unix backend: `posix_openpt`, a child that becomes a session
//! leader with the terminal as its controlling terminal, a non-blocking master
//! registered with tokio, and the child reaped by tokio's process driver.
//! On Linux a spec that needs no code between `fork` and `exec` (no hook,
//! rlimit or cgroup) is started with `posix_spawn` instead and reaped
//! through its pidfd ([`posix_spawn`]), so that spawning does not slow down
//! as this process grows. A session costs two tokio tasks (output pump,
//! exit waiter) and no thread.

#[cfg(target_os = "linux")]
pub(crate) mod cgroup;
#[cfg(target_os = "linux")]
mod delegation;
#[cfg(target_os = "linux")]
mod posix_spawn;
pub(crate) mod procfs;
mod pty;
pub(crate) mod tree;
#[cfg(target_os = "linux")]
mod waits;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use nix::errno::Errno;
use nix::sys::signal::{Signal as NixSignal, killpg};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use crate::pump::{self, ChunkSource};
use crate::{
    ExitStatus, Foreground, OutputStream, PtyBackend, PtyError, PtySession, ScrollbackHandle,
    Signal, SpawnSpec, TermSize,
};

/// A pipe whose ends close on `exec`.
fn cloexec_pipe() -> nix::Result<(OwnedFd, OwnedFd)> {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        // No `pipe2` (macOS): mark both ends right after, as the standard
        // library does there. A spawn on another thread in between could
        // inherit them; that only delays this spawn's hook report.
        use nix::fcntl::{FcntlArg, FdFlag, fcntl};
        let (rx, tx) = nix::unistd::pipe()?;
        for fd in [&rx, &tx] {
            fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        }
        Ok((rx, tx))
    }
}

/// Signals whose disposition the child resets to the default before `exec`,
/// in case this process ignores or handles them.
const RESET_SIGNALS: [libc::c_int; 9] = [
    libc::SIGCHLD,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGALRM,
    libc::SIGPIPE,
    libc::SIGTSTP,
    libc::SIGTTOU,
];

/// The native Unix backend (see the [crate docs](crate#backends)).
///
/// ```no_run
/// use dsh_pty::{NativeBackend, PtyBackend, SpawnSpec};
/// # async fn demo() -> Result<(), dsh_pty::PtyError> {
/// let mut session = NativeBackend::new().spawn(SpawnSpec::new("sh")).await?;
/// session.write_all(b"kill -9 $$\n").await?;
/// assert_eq!(session.wait().await.signal_name(), Some("SIGKILL"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct NativeBackend {
    _private: (),
}

impl NativeBackend {
    /// The backend.
    pub fn new() -> Self {
        NativeBackend::default()
    }
}

#[async_trait]
impl PtyBackend for NativeBackend {
    fn name(&self) -> &'static str {
        "native-unix"
    }

    /// Every part of the spec.
    fn keeps(&self) -> crate::SpecSupport {
        crate::SpecSupport::ALL
    }

    /// Starts the session on a spawner thread (the cgroup, the
    /// terminal, `fork` and the wait for `exec`, the hooks' whole process
    /// chain included), never on the runtime's threads. Dropping the
    /// returned future mid-spawn ends the session once it started.
    async fn spawn(&self, spec: SpawnSpec) -> Result<Box<dyn PtySession>, PtyError> {
        crate::blocking::spawn_off_runtime(move || spawn_native(spec))
            .await
            .map(|s| Box::new(s) as Box<dyn PtySession>)
    }
}

/// The rlimits the child sets: `(resource, value)`.
type Rlimits = Vec<(libc::c_int, libc::rlim_t)>;

/// What keeps the spec's limits: the session's cgroup (Linux) and the
/// rlimits the child sets.
struct Limiter {
    #[cfg(target_os = "linux")]
    cgroup: Option<cgroup::Cgroup>,
    rlimits: Rlimits,
}

impl Limiter {
    fn new(limits: &crate::ResourceLimits) -> Result<Limiter, PtyError> {
        use crate::{Held, Limit};
        if limits.is_empty() && limits.cgroup_parent.is_none() {
            return Ok(Limiter {
                #[cfg(target_os = "linux")]
                cgroup: None,
                rlimits: Vec::new(),
            });
        }
        #[cfg(target_os = "linux")]
        let (report, placement) = cgroup::plan(limits, true)?;
        #[cfg(not(target_os = "linux"))]
        let report = limits.check()?;
        let mut rlimits: Rlimits = Vec::new();
        let clamp = |v: u64| libc::rlim_t::try_from(v).unwrap_or(libc::RLIM_INFINITY);
        if let Some(n) = limits.open_files {
            rlimits.push((libc::RLIMIT_NOFILE as libc::c_int, clamp(n)));
        }
        if let Some(n) = limits.file_size {
            rlimits.push((libc::RLIMIT_FSIZE as libc::c_int, clamp(n)));
        }
        if let (Some(n), Some(Held::Rlimit)) = (limits.memory, report.held(Limit::Memory)) {
            rlimits.push((libc::RLIMIT_AS as libc::c_int, clamp(n)));
        }
        #[cfg(target_os = "linux")]
        {
            let cgroup = placement
                .map(|p| cgroup::Cgroup::create(&p, limits))
                .transpose()?;
            Ok(Limiter { cgroup, rlimits })
        }
        #[cfg(not(target_os = "linux"))]
        Ok(Limiter { rlimits })
    }

    /// The descriptors the child joins the session's cgroup through.
    fn join_fds(&self) -> Vec<std::os::fd::RawFd> {
        #[cfg(target_os = "linux")]
        if let Some(cgroup) = &self.cgroup {
            return cgroup.join_fds();
        }
        Vec::new()
    }
}

/// Starts a session: blocking (see [`crate::blocking`]), so it runs on a
/// spawner thread inside the caller's runtime, whose context the child
/// reaper, the terminal's registration and the tasks need.
fn spawn_native(spec: SpawnSpec) -> Result<NativeSession, PtyError> {
    spec.check_cwd()?;
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut limiter = Limiter::new(spec.get_limits())?;
    let join_fds = limiter.join_fds();
    let rlimits = limiter.rlimits.clone();
    let ignore_xfsz = spec.get_limits().file_size.is_some();
    let pair = pty::open(
        spec.get_size(),
        spec.get_echo(),
        spec.get_output_processing(),
    )?;
    let plain = hooks_rlimits_free(&spec, &join_fds, &rlimits, ignore_xfsz);
    #[cfg(target_os = "linux")]
    let leader = if plain && posix_spawn::available() {
        Leader::Spawned(posix_spawn::spawn_leader(
            &spec,
            &pair.tty_path,
            &RESET_SIGNALS,
        )?)
    } else {
        Leader::Forked(fork_leader(&spec, &pair, join_fds, rlimits, ignore_xfsz)?)
    };
    #[cfg(not(target_os = "linux"))]
    let leader = {
        let _ = plain;
        Leader::Forked(fork_leader(&spec, &pair, join_fds, rlimits, ignore_xfsz)?)
    };
    drop(pair.slave);
    let pid = match &leader {
        Leader::Forked(child) => child
            .id()
            .ok_or_else(|| PtyError::io("reading the child's pid", std::io::ErrorKind::NotFound))?
            as i32,
        #[cfg(target_os = "linux")]
        Leader::Spawned(child) => child.pid(),
    };
    // SAFETY: the `AsyncFd` owns the descriptor for its whole life and the
    // descriptor is never replaced (`get_mut` is not used), so it stays valid
    // until tokio deregisters it on drop.
    let master = unsafe { AsyncFd::register(pair.master) }
        .map_err(|e| PtyError::io("registering the terminal with tokio", e.into_parts().1))?;
    let master = Arc::new(master);

    let pump = pump::start(
        MasterReader {
            fd: Arc::clone(&master),
            buf: vec![0u8; 64 * 1024],
        },
        &spec,
    );
    let status_tx = pump.status_tx;
    tokio::spawn(async move {
        let status = match leader.wait().await {
            Ok(st) => ExitStatus::from(st),
            Err(err) => {
                tracing::warn!(pid, %err, "waiting for the pty child failed");
                ExitStatus::unknown()
            }
        };
        tracing::debug!(pid, %status, "pty child exited");
        let _ = status_tx.send(Some(status));
    });
    tracing::debug!(pid, program = %spec.program_lossy(), "pty session spawned");

    #[cfg(target_os = "linux")]
    let tree = match limiter.cgroup.take() {
        Some(mut cg) => {
            cg.joined();
            tree::Tree::in_cgroup(pid, cg)
        }
        None => tree::Tree::new(pid),
    };
    #[cfg(not(target_os = "linux"))]
    let tree = tree::Tree::new(pid);
    drop(limiter);
    Ok(NativeSession {
        pid,
        tree,
        master,
        tty_path: pair.tty_path,
        status: pump.status,
        closed: pump.closed,
        output: Some(pump.output),
        scrollback: pump.scrollback,
        write_lock: tokio::sync::Mutex::new(()),
    })
}

/// The session's program as it was started: forked (then reaped by tokio's
/// process driver) or, on Linux, spawned with `posix_spawn` (reaped through
/// its pidfd).
enum Leader {
    Forked(tokio::process::Child),
    #[cfg(target_os = "linux")]
    Spawned(posix_spawn::Unreaped),
}

impl Leader {
    /// Waits for the program to exit and reaps it.
    async fn wait(self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Leader::Forked(mut child) => child.wait().await,
            #[cfg(target_os = "linux")]
            Leader::Spawned(child) => posix_spawn::wait(child).await,
        }
    }
}

/// Whether the spec needs nothing run between `fork` and `exec` beyond what
/// `posix_spawn` does: no hook, no cgroup to join, no rlimit, `SIGXFSZ`
/// left alone.
fn hooks_rlimits_free(
    spec: &SpawnSpec,
    join_fds: &[std::os::fd::RawFd],
    rlimits: &Rlimits,
    ignore_xfsz: bool,
) -> bool {
    spec.get_pre_exec().is_empty() && join_fds.is_empty() && rlimits.is_empty() && !ignore_xfsz
}

/// Starts the spec's program with `fork` and `exec`, running what the spec
/// needs in between (joining the cgroup, the hooks, the rlimits).
fn fork_leader(
    spec: &SpawnSpec,
    pair: &pty::PtyPair,
    join_fds: Vec<std::os::fd::RawFd>,
    rlimits: Rlimits,
    ignore_xfsz: bool,
) -> Result<tokio::process::Child, PtyError> {
    let stdio = |fd: &OwnedFd| -> Result<Stdio, PtyError> {
        fd.try_clone().map(Stdio::from).map_err(PtyError::OpenPty)
    };
    let mut cmd = tokio::process::Command::new(spec.program());
    cmd.args(spec.get_args())
        .stdin(stdio(&pair.slave)?)
        .stdout(stdio(&pair.slave)?)
        .stderr(stdio(&pair.slave)?)
        .kill_on_drop(false);
    if spec.is_env_cleared() {
        cmd.env_clear();
    }
    for (key, value) in spec.get_env() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    if let Some(dir) = spec.get_cwd() {
        cmd.current_dir(dir);
    }

    // A hook failure is told apart from an exec failure through this pipe:
    // the child writes one byte before reporting the hook's error.
    let hooks = spec.get_pre_exec().to_vec();
    let confine_pipe = if hooks.is_empty() {
        None
    } else {
        Some(cloexec_pipe().map_err(|e| PtyError::OpenPty(e.into()))?)
    };
    let confine_tx = confine_pipe.as_ref().map(|(_, tx)| tx.as_raw_fd());
    // SAFETY: the closure runs between fork and exec. It only makes
    // async-signal-safe calls (write, setrlimit, signal, sigprocmask, setsid,
    // ioctl) and runs the hooks, whose `PreExec` contract requires the same
    // of them. It allocates nothing: `hooks`, `join_fds` and `rlimits` were
    // made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // Into the session's cgroup first, so everything after (the
            // hooks' own forks included) is counted and killed with it.
            for fd in &join_fds {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for sig in RESET_SIGNALS {
                libc::signal(sig, libc::SIG_DFL);
            }
            // A write past the file-size limit fails with EFBIG instead of
            // killing the writer.
            if ignore_xfsz {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            #[allow(clippy::cast_lossless, clippy::useless_conversion)]
            if libc::ioctl(0, libc::TIOCSCTTY as _, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            for hook in &hooks {
                if let Err(err) = hook.pre_exec() {
                    if let Some(fd) = confine_tx {
                        libc::write(fd, b"!".as_ptr().cast(), 1);
                    }
                    return Err(err);
                }
            }
            // Last, in the process that goes on to exec (a hook may have
            // forked): an address-space limit would fail this copy of a
            // large process at its next mapping.
            for (resource, value) in &rlimits {
                let limit = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                #[allow(clippy::useless_conversion)]
                if libc::setrlimit((*resource).try_into().unwrap_or_default(), &limit) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }

    let spawned = cmd.spawn();
    drop(cmd); // closes the parent's copies of the slave
    match spawned {
        Ok(child) => Ok(child),
        Err(err) => {
            if let Some((rx, tx)) = confine_pipe {
                drop(tx);
                let mut byte = [0u8; 1];
                if nix::unistd::read(rx.as_raw_fd(), &mut byte) == Ok(1) {
                    return Err(PtyError::Confine(err));
                }
            }
            if err.kind() == std::io::ErrorKind::NotFound {
                return Err(PtyError::ProgramNotFound {
                    program: spec.program_lossy(),
                });
            }
            Err(PtyError::Spawn {
                program: spec.program_lossy(),
                source: err,
            })
        }
    }
}

struct MasterReader {
    fd: Arc<AsyncFd<OwnedFd>>,
    buf: Vec<u8>,
}

impl ChunkSource for MasterReader {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            let mut guard = self.fd.readable().await.ok()?;
            let buf = &mut self.buf;
            match guard.try_io(|fd| {
                nix::unistd::read(fd.get_ref().as_raw_fd(), buf).map_err(std::io::Error::from)
            }) {
                Ok(Ok(0)) => return None,
                Ok(Ok(n)) => return Some(Bytes::copy_from_slice(&self.buf[..n])),
                Ok(Err(err)) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                // EIO: every process closed the terminal (Linux's end-of-file).
                Ok(Err(_)) => return None,
                Err(_would_block) => continue,
            }
        }
    }
}

/// A session of the [`NativeBackend`].
#[derive(Debug)]
pub struct NativeSession {
    pid: i32,
    tree: tree::Tree,
    master: Arc<AsyncFd<OwnedFd>>,
    tty_path: PathBuf,
    status: watch::Receiver<Option<ExitStatus>>,
    closed: watch::Sender<bool>,
    output: Option<OutputStream>,
    scrollback: ScrollbackHandle,
    write_lock: tokio::sync::Mutex<()>,
}

impl NativeSession {
    /// The path of the terminal's slave side, e.g. `/dev/pts/3`.
    pub fn tty_path(&self) -> &std::path::Path {
        &self.tty_path
    }
}

#[async_trait]
impl PtySession for NativeSession {
    fn pid(&self) -> Option<u32> {
        Some(self.pid as u32)
    }

    async fn write_all(&self, mut data: &[u8]) -> Result<(), PtyError> {
        let _serial = self.write_lock.lock().await;
        while !data.is_empty() {
            if self.status.borrow().is_some() {
                return Err(PtyError::WriteAfterExit);
            }
            let mut guard = self
                .master
                .writable()
                .await
                .map_err(|e| PtyError::io("waiting to write to the terminal", e))?;
            match guard
                .try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(std::io::Error::from))
            {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(err)) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(Err(err)) if err.raw_os_error() == Some(libc::EIO) => {
                    return Err(PtyError::WriteAfterExit);
                }
                Ok(Err(err)) => return Err(PtyError::io("writing to the terminal", err)),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }

    fn take_output(&mut self) -> Option<OutputStream> {
        self.output.take()
    }

    fn scrollback(&self) -> ScrollbackHandle {
        self.scrollback.clone()
    }

    fn resize(&self, size: TermSize) -> Result<(), PtyError> {
        pty::set_size(self.master.get_ref(), size)
    }

    fn signal_foreground(&self, signal: Signal) -> Result<(), PtyError> {
        let pgid = nix::unistd::tcgetpgrp(self.master.get_ref().as_fd())
            .unwrap_or(Pid::from_raw(self.pid));
        match signal_group(pgid, signal)? {
            true => Ok(()),
            false => Err(PtyError::Closed),
        }
    }

    fn signal_foreground_if(&self, pgid: i32, signal: Signal) -> Result<bool, PtyError> {
        // The terminal's foreground group is one of this session's: checked
        // and signalled back to back, a group of another session is never
        // reached.
        match nix::unistd::tcgetpgrp(self.master.get_ref().as_fd()) {
            Ok(front) if front.as_raw() == pgid && pgid > 1 => signal_group(front, signal),
            Ok(_) => Ok(false),
            Err(err) => Err(PtyError::io(
                "reading the terminal's foreground process group",
                err,
            )),
        }
    }

    async fn flush_input(&self) -> Result<(), PtyError> {
        pty::flush_input(&self.tty_path)
    }

    async fn foreground(&self) -> Result<Foreground, PtyError> {
        let master = self.master.get_ref().as_fd();
        let pgid = nix::unistd::tcgetpgrp(master)
            .map_err(|e| PtyError::io("reading the terminal's foreground process group", e))?
            .as_raw();
        // The master reads the modes its terminal's readers set.
        let input_mode = pty::input_mode(master);
        let (pid, tty) = (self.pid, self.tty_path.clone());
        Ok(crate::blocking::off_runtime(move || {
            let wait = procfs::tty_wait(pgid, &tty);
            Foreground {
                pgid,
                is_leader: pgid == pid,
                waiting_for_input: wait.waiting,
                leader: procfs::leader(pid),
                input_mode,
                reader: wait.reader,
            }
        })
        .await)
    }

    async fn foreground_brief(&self) -> Result<Foreground, PtyError> {
        let pgid = nix::unistd::tcgetpgrp(self.master.get_ref().as_fd())
            .map_err(|e| PtyError::io("reading the terminal's foreground process group", e))?
            .as_raw();
        let pid = self.pid;
        let leader = crate::blocking::off_runtime(move || procfs::leader(pid)).await;
        let mut fg = Foreground::new(pgid, pgid == pid);
        fg.leader = leader;
        Ok(fg)
    }

    async fn end(&self, grace: Duration) -> Result<ExitStatus, PtyError> {
        let mut status = self.status.clone();
        let st = self.tree.end(grace, &mut status).await;
        let _ = self.closed.send(true);
        Ok(st)
    }

    fn limit_events(&self) -> Option<crate::LimitEvents> {
        self.tree.limit_events()
    }

    fn status(&self) -> Option<ExitStatus> {
        *self.status.borrow()
    }

    async fn wait(&self) -> ExitStatus {
        pump::wait_exit(&self.status).await
    }
}

/// Sends `signal` to process group `pgid`: `false` when the group is gone.
fn signal_group(pgid: Pid, signal: Signal) -> Result<bool, PtyError> {
    let sig = NixSignal::try_from(signal.number())
        .map_err(|e| PtyError::io("converting the signal", e))?;
    match killpg(pgid, sig) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(err) => Err(PtyError::io("signalling the foreground process group", err)),
    }
}

/// The foreground of a terminal session that this host's `/proc` shows but
/// whose terminal it does not hold: a shell in a container of a local
/// Docker daemon, known by its process id *in this host's namespace*.
///
/// `tty` is the terminal's name as the session's processes see it (the
/// target of `/proc/<leader>/fd/0` when the program started). It reads the
/// process table in place: call it off the runtime's threads. Linux only;
/// elsewhere it answers [`PtyError::Unsupported`].
pub fn foreground_of_leader(leader: i32, tty: &std::path::Path) -> Result<Foreground, PtyError> {
    #[cfg(target_os = "linux")]
    {
        let stat = procfs::stat_of(leader).ok_or_else(|| {
            PtyError::io(
                "reading the session leader's /proc entry",
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )
        })?;
        let pgid = stat.tpgid;
        let wait = procfs::tty_wait(pgid, tty);
        Ok(Foreground {
            pgid,
            is_leader: pgid == leader,
            waiting_for_input: wait.waiting,
            leader: procfs::leader(leader),
            input_mode: None,
            reader: wait.reader,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (leader, tty);
        Err(PtyError::Unsupported {
            backend: "procfs",
            what: "reading a foreground from /proc",
        })
    }
}

impl Drop for NativeSession {
    fn drop(&mut self) {
        let _ = self.closed.send(true);
        // No grace: nothing can await here. The exit waiter task reaps the
        // leader as soon as it dies.
        self.tree.kill_now(&self.status);
    }
}

#[cfg(feature = "portable")]
pub(crate) use procfs::{leader as procfs_leader, tty_wait as procfs_tty_wait};
#[cfg(feature = "portable")]
pub(crate) use pty::flush_input;
