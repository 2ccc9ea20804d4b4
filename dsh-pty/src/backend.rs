//! The backend and session traits.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{
    ExitStatus, OutputStream, PtyError, ScrollbackHandle, Signal, SpawnSpec, SpecSupport, TermSize,
};

/// Something that can start programs in new pseudo-terminals.
///
/// The traits use `async-trait` rather than native `async fn` in traits
/// because hosts hold backends and sessions as trait objects
/// (`Arc<dyn PtyBackend>`, `Box<dyn PtySession>`) chosen at run time, and
/// native async trait methods are not object safe. One boxed future per call
/// is noise next to a terminal round trip.
#[async_trait]
pub trait PtyBackend: Send + Sync + fmt::Debug {
    /// A short name for logs and errors, e.g. `"native-unix"`.
    fn name(&self) -> &'static str;

    /// The parts of a [`SpawnSpec`] this backend keeps ([`SpecField`](crate::SpecField)):
    /// [`PtyBackend::spawn`] refuses a spec that uses any other with
    /// [`PtyError::NotKept`], before anything starts. A host asks here
    /// to leave out what it can do without (a terminal's echo, say).
    fn keeps(&self) -> SpecSupport;

    /// Starts `spec.program` in a new pseudo-terminal, as the leader of a new
    /// session with the terminal as its controlling terminal. A spec that
    /// uses a part the backend does not keep ([`PtyBackend::keeps`]) is
    /// refused with [`PtyError::NotKept`].
    ///
    /// The backends of this crate make every blocking step (the terminal,
    /// a cgroup, `fork` and the wait for `exec`, the hooks' own work) on a
    /// spawner thread of this crate, never on the runtime's threads, and
    /// dropping this future mid-spawn ends whatever it had started.
    async fn spawn(&self, spec: SpawnSpec) -> Result<Box<dyn PtySession>, PtyError>;

    /// `true` when programs run on this machine, so that a working
    /// directory can be checked here before anything starts. Backends whose
    /// programs run elsewhere (a container, another host) answer `false`.
    fn is_local(&self) -> bool {
        true
    }
}

/// Which process group owns a session's terminal, and what it is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Foreground {
    /// The foreground process group id.
    pub pgid: i32,
    /// `true` when the foreground group is the session's own program (for a
    /// shell: it is at its prompt or running a builtin, no job is in front).
    pub is_leader: bool,
    /// Whether a process of the foreground group sleeps waiting for input
    /// from the terminal (a command waiting for input): `None` where that
    /// cannot be seen. Linux reads `/proc/<pid>/task/<tid>/syscall`: a
    /// `read` of the terminal, or a `poll`/`select` whose set (read from the
    /// process's memory) or an `epoll_wait` whose interest list
    /// (`/proc/<pid>/fdinfo`) holds it. A wait on anything else (a socket,
    /// a pipe, inotify, a timer) is not one.
    pub waiting_for_input: Option<bool>,
    /// The session's program as it is now, where the backend can see it.
    pub leader: Option<Leader>,
    /// How the terminal hands input to its readers now (set by whoever
    /// reads it last: a line editor, a full-screen program, a password
    /// prompt): `None` where the backend cannot read the terminal's modes.
    pub input_mode: Option<InputMode>,
    /// The name of the process of the foreground group that waits for
    /// input (its `comm`, e.g. `less`), where it can be seen.
    pub reader: Option<String>,
}

impl Foreground {
    /// A foreground of group `pgid` whose waiting, leader, input mode and
    /// reader are unknown.
    pub fn new(pgid: i32, is_leader: bool) -> Self {
        Foreground {
            pgid,
            is_leader,
            waiting_for_input: None,
            leader: None,
            input_mode: None,
            reader: None,
        }
    }
}

/// The terminal's input modes that tell a program reading lines from one
/// that needs a person at the keyboard.
///
/// ```
/// let lines = dsh_pty::InputMode::new(true, true);
/// assert!(!lines.needs_a_person());
/// let keys = dsh_pty::InputMode::new(false, false); // less, vim, top
/// assert!(keys.needs_a_person());
/// let password = dsh_pty::InputMode::new(true, false); // ssh, sudo
/// assert!(password.needs_a_person());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InputMode {
    /// Canonical mode (`ICANON`): the terminal collects a whole line before
    /// the reader sees it, and Ctrl-D at the start of a line is
    /// end-of-file. Off, every key reaches the program as it is typed (a
    /// pager, an editor, `top`, a line editor such as readline).
    pub canonical: bool,
    /// The terminal echoes what is typed (`ECHO`); a password prompt turns
    /// it off, and so do programs that draw the screen themselves.
    pub echo: bool,
}

impl InputMode {
    /// The modes `canonical` and `echo`.
    pub fn new(canonical: bool, echo: bool) -> Self {
        InputMode { canonical, echo }
    }

    /// `true` when a reader in this mode waits for keys or a secret that
    /// only a person types: Ctrl-D is a key to it, not the end of its
    /// input.
    pub fn needs_a_person(&self) -> bool {
        !(self.canonical && self.echo)
    }
}

/// The state of a session's program (its leader), as the process table
/// shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The executable it runs, where it can be read: another one than at
    /// start means the program replaced itself (`exec`).
    pub program: Option<PathBuf>,
    /// It is stopped (`SIGSTOP`, `SIGTSTP`).
    pub stopped: bool,
}

impl Leader {
    /// A leader running `program`, stopped or not.
    pub fn new(program: Option<PathBuf>, stopped: bool) -> Self {
        Leader { program, stopped }
    }
}

/// A program running in a pseudo-terminal.
///
/// [`PtySession::end`] ends its whole process tree, with a grace period or
/// at once; dropping a session does the same at once without waiting
/// (`SIGKILL`), and the program is reaped in the background.
#[async_trait]
pub trait PtySession: Send + Sync + fmt::Debug {
    /// The program's process id (also its session and process group id),
    /// where it is one of this host's.
    fn pid(&self) -> Option<u32>;

    /// Writes all of `data` to the terminal, as if typed.
    ///
    /// Fails with [`PtyError::WriteAfterExit`] once the program has exited.
    async fn write_all(&self, data: &[u8]) -> Result<(), PtyError>;

    /// Takes the output stream. It can be taken once; later calls return `None`.
    fn take_output(&mut self) -> Option<OutputStream>;

    /// The scrollback that records every output chunk with absolute offsets.
    fn scrollback(&self) -> ScrollbackHandle;

    /// Changes the terminal size; the foreground group receives `SIGWINCH`.
    fn resize(&self, size: TermSize) -> Result<(), PtyError>;

    /// Sends `signal` to the terminal's foreground process group (to the
    /// program itself when nothing else is in front).
    fn signal_foreground(&self, signal: Signal) -> Result<(), PtyError>;

    /// Sends `signal` to the terminal's foreground process group if that is
    /// still `pgid` (as [`PtySession::foreground`] reported it): `Ok(false)`,
    /// sending nothing, when another group is in front now. A caller that
    /// decided from one look to end a program never reaches the group that
    /// came in front after it (the shell itself, once the program ended).
    ///
    /// The default, for backends that cannot check and signal in one step,
    /// answers [`PtyError::Unsupported`].
    fn signal_foreground_if(&self, pgid: i32, signal: Signal) -> Result<bool, PtyError> {
        let _ = (pgid, signal);
        Err(PtyError::Unsupported {
            backend: "this backend",
            what: "signalling a foreground group that is still the one seen",
        })
    }

    /// Discards the terminal's input queue: what was written to it and not
    /// yet read. A caller that wrote end-of-file to end a program calls it
    /// once the program is ended (or seen not to read it), so that what the
    /// program left unread never reaches the program that reads next (a
    /// shell, which would take it as its own end).
    ///
    /// The default, for backends that cannot reach the terminal's queue,
    /// answers [`PtyError::Unsupported`].
    async fn flush_input(&self) -> Result<(), PtyError> {
        Err(PtyError::Unsupported {
            backend: "this backend",
            what: "discarding the terminal's unread input",
        })
    }

    /// Looks at the terminal now: which process group owns it, whether it
    /// waits for input, and the program's own state. Local backends read
    /// the process table on tokio's blocking pool; remote ones ask the
    /// other side.
    async fn foreground(&self) -> Result<Foreground, PtyError>;

    /// [`PtySession::foreground`] for a caller that needs only the group in
    /// front and the program's own state ([`Foreground::leader`]), such as
    /// a shell's first look at itself: `waiting_for_input`, `input_mode`
    /// and `reader` may be `None`. A local backend then skips the walk of
    /// the group's processes. The default asks [`PtySession::foreground`].
    async fn foreground_brief(&self) -> Result<Foreground, PtyError> {
        self.foreground().await
    }

    /// Ends every process of the terminal session and returns the program's
    /// exit record. With a `grace` period: `SIGTERM` (and `SIGHUP` to the
    /// leader, since interactive shells ignore `SIGTERM`), up to `grace` for
    /// them to leave, then `SIGKILL` to what remains; with
    /// [`Duration::ZERO`], `SIGKILL` at once. It returns once the session is
    /// empty (bounded), so dropping it afterwards has nothing left to do.
    ///
    /// A process that left the session on purpose (`setsid`) is not reached
    /// unless the backend tracks the tree by other means (a cgroup, a tag
    /// in the environment).
    async fn end(&self, grace: Duration) -> Result<ExitStatus, PtyError>;

    /// The exit record, if the program has exited (and was reaped).
    fn status(&self) -> Option<ExitStatus>;

    /// Waits until the program exits and returns its exit record. Exit is
    /// detected by waiting on the process, not by end-of-file on the terminal.
    async fn wait(&self) -> ExitStatus;

    /// Why the connection to the program broke, when the program runs
    /// elsewhere and the output ended because its transport failed (daemon
    /// restarted, container removed, network gone) rather than because the
    /// program exited. `None` for local backends.
    fn connection_lost(&self) -> Option<Arc<PtyError>> {
        None
    }

    /// The counters of the limits the session's tree met (see
    /// [`ResourceLimits`](crate::ResourceLimits)): read from its cgroup, so
    /// `None` for a session without one (the default). A session whose
    /// cgroup is elsewhere (a container's) answers with its last reading,
    /// brought up to date by [`PtySession::refresh_limit_events`].
    fn limit_events(&self) -> Option<crate::LimitEvents> {
        None
    }

    /// Reads the limit counters again where reading them takes a round trip
    /// (a container's cgroup, read through its daemon), so that
    /// [`PtySession::limit_events`] answers with what holds now. Bounded in
    /// time; a reading that fails keeps the last one. Sessions that read
    /// their counters on the spot need nothing (the default does nothing).
    async fn refresh_limit_events(&self) {}

    /// Stores `data` as the file `name` in a scratch directory of this
    /// session *on the program's side*, and returns the path the program
    /// sees. The directory goes away with the session.
    ///
    /// Remote backends (a container, another host) implement it; for the
    /// local backends the program shares the caller's filesystem, so the
    /// default answers [`PtyError::Unsupported`] and callers write locally.
    async fn put_scratch_file(&self, name: &str, data: &[u8]) -> Result<PathBuf, PtyError> {
        let _ = (name, data);
        Err(PtyError::Unsupported {
            backend: "local",
            what: "scratch files on the program's side (write them locally)",
        })
    }
}

/// The best backend for this platform: the native backend on Unix, the
/// `portable-pty` backend elsewhere.
///
/// ```no_run
/// # async fn demo() -> Result<(), dsh_pty::PtyError> {
/// let backend = dsh_pty::default_backend();
/// let mut session = backend.spawn(dsh_pty::SpawnSpec::new("bash")).await?;
/// session.write_all(b"exit 3\n").await?;
/// assert_eq!(session.wait().await.code(), Some(3));
/// # Ok(()) }
/// ```
#[cfg(feature = "native")]
#[cfg_attr(docsrs, doc(cfg(feature = "native")))]
pub fn default_backend() -> Arc<dyn PtyBackend> {
    #[cfg(unix)]
    {
        Arc::new(crate::NativeBackend::new())
    }
    #[cfg(windows)]
    {
        Arc::new(crate::PortableBackend::new())
    }
}
