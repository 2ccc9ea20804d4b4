//! The `portable-pty` backend: Linux, macOS and Windows (ConPTY).
//!
//! `portable-pty` offers blocking reads and a blocking wait, so a session of
//! this backend costs two threads (a reader and, on Unix, a `waitpid` waiter;
//! on Windows, a `wait` waiter) besides the tokio pump task. The reader thread
//! ends when the terminal closes, which [`PtySession::end`] and dropping
//! the session bring about. It does not run [`PreExec`](crate::PreExec) hooks:
//! a spec with hooks is refused rather than run unconfined.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use portable_pty::{CommandBuilder, MasterPty, PtySize, native_pty_system};
use tokio::sync::{mpsc, watch};

use crate::pump::{self, ChannelSource};
use crate::{
    ExitStatus, Foreground, OutputStream, PtyBackend, PtyError, PtySession, ScrollbackHandle,
    Signal, SpawnSpec, SpecField, SpecSupport, TermSize,
};

const NAME: &str = "portable-pty";

/// The `portable-pty` backend (see the [crate docs](crate#backends)).
#[derive(Debug, Clone, Default)]
pub struct PortableBackend {
    _private: (),
}

impl PortableBackend {
    /// The backend.
    pub fn new() -> Self {
        PortableBackend::default()
    }
}

fn pty_size(size: TermSize) -> PtySize {
    PtySize {
        rows: size.rows,
        cols: size.cols,
        pixel_width: 0,
        pixel_height: 0,
    }
}

fn other(what: &'static str, err: impl std::fmt::Display) -> PtyError {
    PtyError::io(what, std::io::Error::other(err.to_string()))
}

#[async_trait]
impl PtyBackend for PortableBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    /// All but hooks (they need `fork`) and limits; on Windows, without
    /// echo and output processing off too (ConPTY's modes are not set).
    fn keeps(&self) -> SpecSupport {
        let keeps = SpecSupport::ALL
            .without(
                SpecField::PreExec,
                "confinement hooks need the native backend's fork",
            )
            .without(SpecField::Limits, "the native backend keeps them");
        #[cfg(windows)]
        let keeps = keeps
            .without(SpecField::Echo, "ConPTY's terminal modes are not set")
            .without(
                SpecField::OutputProcessing,
                "ConPTY's terminal modes are not set",
            );
        keeps
    }

    /// Starts the session on a spawner thread (`openpty`, `fork` and
    /// the wait for `exec`, the threads), never on the runtime's threads;
    /// dropping the future mid-spawn ends the session once it started.
    async fn spawn(&self, spec: SpawnSpec) -> Result<Box<dyn PtySession>, PtyError> {
        self.keeps().check(NAME, &spec)?;
        crate::blocking::spawn_off_runtime(move || spawn_portable(spec))
            .await
            .map(|s| Box::new(s) as Box<dyn PtySession>)
    }
}

/// Starts a session: blocking, so it runs on a spawner thread (see
/// [`crate::blocking`]).
fn spawn_portable(spec: SpawnSpec) -> Result<PortableSession, PtyError> {
    spec.check_cwd()?;
    #[cfg(unix)]
    if !spec.program_exists() {
        return Err(PtyError::ProgramNotFound {
            program: spec.program_lossy(),
        });
    }
    let pair = native_pty_system()
        .openpty(pty_size(spec.get_size()))
        .map_err(|e| PtyError::OpenPty(std::io::Error::other(e.to_string())))?;
    #[cfg(unix)]
    if let Some(fd) = pair.master.as_raw_fd() {
        set_modes(fd, spec.get_echo(), spec.get_output_processing())?;
    }
    let mut cmd = CommandBuilder::new(spec.program());
    cmd.args(spec.get_args());
    if spec.is_env_cleared() {
        cmd.env_clear();
    }
    for (key, value) in spec.get_env() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        }
    }
    match spec.get_cwd() {
        Some(dir) => cmd.cwd(dir),
        None => {
            if let Ok(dir) = std::env::current_dir() {
                cmd.cwd(dir);
            }
        }
    }
    let child = pair.slave.spawn_command(cmd).map_err(|e| {
        let text = e.to_string();
        match e.downcast::<std::io::Error>() {
            Ok(io) if io.kind() == std::io::ErrorKind::NotFound => PtyError::ProgramNotFound {
                program: spec.program_lossy(),
            },
            Ok(io) => PtyError::Spawn {
                program: spec.program_lossy(),
                source: io,
            },
            Err(_) if text.contains("Unable to spawn") && text.contains("exist") => {
                PtyError::ProgramNotFound {
                    program: spec.program_lossy(),
                }
            }
            Err(_) => PtyError::Spawn {
                program: spec.program_lossy(),
                source: std::io::Error::other(text),
            },
        }
    })?;
    drop(pair.slave);
    let pid = child.process_id();
    #[cfg(not(unix))]
    let killer = child.clone_killer();
    // Windows: the whole tree is ended through a job (no sessions there).
    #[cfg(windows)]
    let job = pid.and_then(|pid| match crate::job::Job::holding(pid) {
        Ok(job) => Some(job),
        Err(e) => {
            tracing::warn!(pid, error = %e, "no job object; only the program itself can be killed");
            None
        }
    });
    let reader = pair
        .master
        .try_clone_reader()
        .map_err(|e| other("cloning the terminal reader", e))?;
    let writer = pair
        .master
        .take_writer()
        .map_err(|e| other("taking the terminal writer", e))?;

    let (raw_tx, raw_rx) = mpsc::channel(pump::OUTPUT_CHANNEL_CHUNKS);
    let pump = pump::start(ChannelSource(raw_rx), &spec);
    spawn_waiter(child, pump.status_tx)?;
    std::thread::Builder::new()
        .name("dsh-pty-reader".into())
        .spawn(move || read_loop(reader, raw_tx))
        .map_err(|e| PtyError::io("starting the reader thread", e))?;
    Ok(PortableSession {
        pid,
        #[cfg(unix)]
        tree: pid.map(|pid| crate::unix::tree::Tree::new(pid as i32)),
        master: Mutex::new(pair.master),
        writer: Arc::new(Mutex::new(writer)),
        #[cfg(not(unix))]
        killer: Mutex::new(killer),
        #[cfg(windows)]
        job,
        status: pump.status,
        closed: pump.closed,
        output: Some(pump.output),
        scrollback: pump.scrollback,
    })
}

#[cfg(unix)]
fn set_modes(fd: std::os::fd::RawFd, echo: bool, opost: bool) -> Result<(), PtyError> {
    use nix::sys::termios::{self, LocalFlags, OutputFlags, SetArg};
    // SAFETY: the master descriptor stays open for the whole call (`pair` owns it).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    // On a pty master, termios requests apply to the terminal's slave side.
    let mut modes = termios::tcgetattr(fd).map_err(|e| PtyError::OpenPty(e.into()))?;
    modes.local_flags.set(LocalFlags::ECHO, echo);
    modes.output_flags.set(OutputFlags::OPOST, opost);
    termios::tcsetattr(fd, SetArg::TCSANOW, &modes).map_err(|e| PtyError::OpenPty(e.into()))
}

fn read_loop(mut reader: Box<dyn Read + Send>, tx: mpsc::Sender<Bytes>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tx.blocking_send(Bytes::copy_from_slice(&buf[..n])).is_err() {
                    return;
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(unix)]
fn spawn_waiter(
    child: Box<dyn portable_pty::Child + Send + Sync>,
    status_tx: watch::Sender<Option<ExitStatus>>,
) -> Result<(), PtyError> {
    use nix::sys::wait::{WaitStatus, waitpid};
    let pid = child
        .process_id()
        .ok_or_else(|| PtyError::io("reading the child's pid", std::io::ErrorKind::NotFound))?;
    std::thread::Builder::new()
        .name("dsh-pty-waiter".into())
        .spawn(move || {
            // `portable-pty` reports signals as `strsignal` text; waiting here
            // keeps the signal number. `child` is kept (never waited) so that
            // nothing else reaps the pid first.
            let _child = child;
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let status = loop {
                match waitpid(pid, None) {
                    Ok(WaitStatus::Exited(_, code)) => break ExitStatus::from_code(code),
                    Ok(WaitStatus::Signaled(_, sig, _)) => {
                        break ExitStatus::from_signal(sig as i32);
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break ExitStatus::unknown(),
                }
            };
            let _ = status_tx.send(Some(status));
        })
        .map(drop)
        .map_err(|e| PtyError::io("starting the waiter thread", e))
}

#[cfg(not(unix))]
fn spawn_waiter(
    mut child: Box<dyn portable_pty::Child + Send + Sync>,
    status_tx: watch::Sender<Option<ExitStatus>>,
) -> Result<(), PtyError> {
    std::thread::Builder::new()
        .name("dsh-pty-waiter".into())
        .spawn(move || {
            let status = match child.wait() {
                Ok(st) => ExitStatus::from_code(st.exit_code() as i32),
                Err(_) => ExitStatus::unknown(),
            };
            let _ = status_tx.send(Some(status));
        })
        .map(drop)
        .map_err(|e| PtyError::io("starting the waiter thread", e))
}

/// A session of the [`PortableBackend`].
pub struct PortableSession {
    pid: Option<u32>,
    /// The session's process tree (a session leader's, so its id is `pid`).
    #[cfg(unix)]
    tree: Option<crate::unix::tree::Tree>,
    master: Mutex<Box<dyn MasterPty + Send>>,
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    #[cfg(not(unix))]
    killer: Mutex<Box<dyn portable_pty::ChildKiller + Send + Sync>>,
    #[cfg(windows)]
    job: Option<crate::job::Job>,
    status: watch::Receiver<Option<ExitStatus>>,
    closed: watch::Sender<bool>,
    output: Option<OutputStream>,
    scrollback: ScrollbackHandle,
}

impl std::fmt::Debug for PortableSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortableSession")
            .field("pid", &self.pid)
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl PortableSession {
    fn lock_master(&self) -> std::sync::MutexGuard<'_, Box<dyn MasterPty + Send>> {
        self.master.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl PtySession for PortableSession {
    fn pid(&self) -> Option<u32> {
        self.pid
    }

    async fn write_all(&self, data: &[u8]) -> Result<(), PtyError> {
        if self.status.borrow().is_some() {
            return Err(PtyError::WriteAfterExit);
        }
        let writer = Arc::clone(&self.writer);
        let data = data.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
            w.write_all(&data).and_then(|()| w.flush())
        })
        .await
        .map_err(|e| other("writing to the terminal", e))?
        .map_err(|e| PtyError::io("writing to the terminal", e))
    }

    fn take_output(&mut self) -> Option<OutputStream> {
        self.output.take()
    }

    fn scrollback(&self) -> ScrollbackHandle {
        self.scrollback.clone()
    }

    fn resize(&self, size: TermSize) -> Result<(), PtyError> {
        self.lock_master()
            .resize(pty_size(size))
            .map_err(|e| other("resizing the terminal", e))
    }

    #[cfg(unix)]
    fn signal_foreground(&self, signal: Signal) -> Result<(), PtyError> {
        use nix::sys::signal::{Signal as NixSignal, killpg};
        let sig = NixSignal::try_from(signal.number())
            .map_err(|e| PtyError::io("converting the signal", e))?;
        let pgid = self
            .lock_master()
            .process_group_leader()
            .or(self.pid.map(|p| p as i32))
            .ok_or(PtyError::Closed)?;
        killpg(nix::unistd::Pid::from_raw(pgid), sig)
            .map_err(|e| PtyError::io("signalling the foreground process group", e))
    }

    #[cfg(not(unix))]
    fn signal_foreground(&self, signal: Signal) -> Result<(), PtyError> {
        match signal {
            Signal::Kill | Signal::Terminate => {
                self.kill_all();
                Ok(())
            }
            _ => Err(PtyError::Unsupported {
                backend: NAME,
                what: "this signal on this platform",
            }),
        }
    }

    #[cfg(not(unix))]
    async fn foreground(&self) -> Result<Foreground, PtyError> {
        // A console has no process groups to hand the terminal to.
        Err(PtyError::Unsupported {
            backend: NAME,
            what: "foreground inspection on this platform",
        })
    }

    #[cfg(unix)]
    async fn flush_input(&self) -> Result<(), PtyError> {
        let tty = self.lock_master().tty_name().ok_or(PtyError::Unsupported {
            backend: NAME,
            what: "discarding the terminal's unread input (its name is unknown)",
        })?;
        crate::unix::flush_input(&tty)
    }

    #[cfg(unix)]
    async fn foreground(&self) -> Result<Foreground, PtyError> {
        let (pgid, tty) = {
            let master = self.lock_master();
            let pgid = master.process_group_leader().ok_or(PtyError::Unsupported {
                backend: NAME,
                what: "foreground inspection on this platform",
            })?;
            (pgid, master.tty_name())
        };
        let pid = self.pid.and_then(|p| i32::try_from(p).ok());
        Ok(crate::blocking::off_runtime(move || {
            let wait = tty
                .as_deref()
                .map(|tty| crate::unix::procfs_tty_wait(pgid, tty))
                .unwrap_or_default();
            let mut fg = Foreground::new(pgid, Some(pgid) == pid);
            fg.waiting_for_input = wait.waiting;
            fg.reader = wait.reader;
            fg.leader = pid.and_then(crate::unix::procfs_leader);
            fg
        })
        .await)
    }

    async fn end(&self, grace: Duration) -> Result<ExitStatus, PtyError> {
        #[cfg(unix)]
        let st = match &self.tree {
            Some(tree) => tree.end(grace, &mut self.status.clone()).await,
            None => self.wait().await,
        };
        #[cfg(not(unix))]
        let st = {
            let _ = grace;
            self.kill_all();
            self.wait().await
        };
        let _ = self.closed.send(true);
        Ok(st)
    }

    fn status(&self) -> Option<ExitStatus> {
        *self.status.borrow()
    }

    async fn wait(&self) -> ExitStatus {
        pump::wait_exit(&self.status).await
    }
}

impl PortableSession {
    /// Ends the program and, where a job holds it, everything it started.
    #[cfg(not(unix))]
    fn kill_all(&self) {
        #[cfg(windows)]
        if let Some(job) = &self.job
            && job.terminate(1).is_ok()
        {
            return;
        }
        let _ = self.killer.lock().unwrap_or_else(|p| p.into_inner()).kill();
    }
}

impl Drop for PortableSession {
    fn drop(&mut self) {
        let _ = self.closed.send(true);
        #[cfg(unix)]
        if let Some(tree) = &self.tree {
            tree.kill_now(&self.status);
        }
        #[cfg(not(unix))]
        self.kill_all();
    }
}
