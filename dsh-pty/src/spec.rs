//! What to spawn: program, arguments, environment, directory, terminal.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::{ResourceLimits, ScrollbackLimits};

/// The size of a terminal in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TermSize {
    /// Number of rows (lines).
    pub rows: u16,
    /// Number of columns.
    pub cols: u16,
}

impl Default for TermSize {
    /// 24 rows by 200 columns: wide enough that tools which wrap at the terminal
    /// width rarely do so in an agent's output.
    fn default() -> Self {
        TermSize {
            rows: 24,
            cols: 200,
        }
    }
}

/// An action a backend runs in the child after `fork` and before `exec`, used to
/// confine the child (the sandbox crate applies Landlock and seccomp this way).
///
/// # Safety
///
/// [`PreExec::pre_exec`] runs in a forked copy of a multi-threaded process. An
/// implementation must only make async-signal-safe calls there: raw system
/// calls such as `prctl`, `setrlimit`, `landlock_restrict_self` or `seccomp` on
/// data prepared *before* the fork. It must not allocate, lock, log or touch
/// anything another thread might have held when the process forked.
///
/// # Hooks that fork
///
/// A hook may `fork` (to enter a new PID namespace, say). The process that
/// returns `Ok` from the hook goes on to `exec` the program. A process that
/// stays behind (a supervisor) must never return from the hook: it closes
/// every descriptor it does not need — the spawn learns that the program was
/// executed when every copy of the backend's close-on-exec descriptors is
/// closed — and ends with `_exit`, ideally mirroring the program's exit so
/// that the session reports it. Any process of the chain that returns an
/// error from the hook makes the spawn fail with that error.
///
/// # Guarantees the backend gives
///
/// - Hooks run in the order they were added, after the child has become a
///   session leader with the PTY as its controlling terminal and its standard
///   streams, and after signal dispositions and the signal mask were reset.
/// - If a hook returns an error, the program is not executed and
///   [`PtyBackend::spawn`](crate::PtyBackend::spawn) returns
///   [`PtyError::Confine`](crate::PtyError::Confine) carrying that error.
/// - Only backends that fork (the native Unix backend) run hooks; the others
///   refuse a spec that has any with [`PtyError::NotKept`](crate::PtyError::NotKept),
///   so a confinement can never be silently skipped.
pub unsafe trait PreExec: Send + Sync + fmt::Debug {
    /// Applies the action in the child. Runs after fork, before exec.
    fn pre_exec(&self) -> io::Result<()>;
}

/// The recipe for a new PTY session.
///
/// ```
/// use dsh_pty::{SpawnSpec, TermSize};
/// let spec = SpawnSpec::new("bash")
///     .args(["--norc", "--noprofile"])
///     .env("TERM", "dumb")
///     .env_remove("PROMPT_COMMAND")
///     .cwd("/tmp")
///     .size(TermSize { rows: 40, cols: 120 })
///     .echo(false);
/// assert_eq!(spec.program(), "bash");
/// ```
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    program: OsString,
    args: Vec<OsString>,
    env_clear: bool,
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    size: TermSize,
    echo: bool,
    output_processing: bool,
    drain_grace: Duration,
    scrollback: ScrollbackLimits,
    pre_exec: Vec<Arc<dyn PreExec>>,
    limits: ResourceLimits,
}

impl SpawnSpec {
    /// A spec that runs `program` (looked up on `PATH` if it has no `/`) with
    /// no arguments, the parent's environment, the parent's directory, a
    /// default-size terminal with echo and output processing on.
    pub fn new(program: impl Into<OsString>) -> Self {
        SpawnSpec {
            program: program.into(),
            args: Vec::new(),
            env_clear: false,
            env: Vec::new(),
            cwd: None,
            size: TermSize::default(),
            echo: true,
            output_processing: true,
            drain_grace: Duration::from_millis(200),
            scrollback: ScrollbackLimits::default(),
            pre_exec: Vec::new(),
            limits: ResourceLimits::default(),
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable in the child.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    /// Removes an environment variable from the child's environment.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.env.push((key.into(), None));
        self
    }

    /// Starts the child from an empty environment; variables set with
    /// [`SpawnSpec::env`] are still applied.
    pub fn env_clear(mut self) -> Self {
        self.env_clear = true;
        self.env.clear();
        self
    }

    /// Sets the child's working directory. Spawning fails with
    /// [`PtyError::CwdMissing`](crate::PtyError::CwdMissing) if it does not exist.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Sets the initial terminal size.
    pub fn size(mut self, size: TermSize) -> Self {
        self.size = size;
        self
    }

    /// Whether the terminal echoes input back (`stty echo`). On by default.
    pub fn echo(mut self, on: bool) -> Self {
        self.echo = on;
        self
    }

    /// Whether the terminal post-processes output (`stty opost`, which turns
    /// `\n` into `\r\n`). On by default, as in a real terminal; turning it off
    /// roughly triples throughput for hosts that normalise line endings anyway.
    pub fn output_processing(mut self, on: bool) -> Self {
        self.output_processing = on;
        self
    }

    /// How long output is still drained after the program exited while some
    /// other process (a background job) keeps the terminal open. 200 ms by default.
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.drain_grace = grace;
        self
    }

    /// Sets the bounds of the session's scrollback (4 MiB and 10,000 lines by default).
    pub fn scrollback(mut self, limits: ScrollbackLimits) -> Self {
        self.scrollback = limits;
        self
    }

    /// Adds a confinement hook run in the child before `exec` (see [`PreExec`]).
    pub fn pre_exec(mut self, hook: Arc<dyn PreExec>) -> Self {
        self.pre_exec.push(hook);
        self
    }

    /// Sets the limits of the session's process tree (see
    /// [`ResourceLimits`]); a backend that cannot keep one fails the spawn
    /// unless [`ResourceLimits::best_effort`].
    pub fn limits(mut self, limits: ResourceLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits of the session's process tree.
    pub fn get_limits(&self) -> &ResourceLimits {
        &self.limits
    }

    /// The program to run.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments, without the program.
    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }

    /// Whether the environment starts empty.
    pub fn is_env_cleared(&self) -> bool {
        self.env_clear
    }

    /// Environment changes in order: `Some` sets, `None` removes.
    pub fn get_env(&self) -> &[(OsString, Option<OsString>)] {
        &self.env
    }

    /// The working directory, if one was set.
    pub fn get_cwd(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// The initial terminal size.
    pub fn get_size(&self) -> TermSize {
        self.size
    }

    /// Whether echo is on.
    pub fn get_echo(&self) -> bool {
        self.echo
    }

    /// Whether output post-processing is on.
    pub fn get_output_processing(&self) -> bool {
        self.output_processing
    }

    /// The drain grace after exit.
    pub fn get_drain_grace(&self) -> Duration {
        self.drain_grace
    }

    /// The scrollback bounds.
    pub fn get_scrollback(&self) -> ScrollbackLimits {
        self.scrollback
    }

    /// The confinement hooks.
    pub fn get_pre_exec(&self) -> &[Arc<dyn PreExec>] {
        &self.pre_exec
    }

    /// Checks the working directory, so that a missing one is reported as such
    /// rather than as a missing program (both are `ENOENT` from `exec`).
    #[cfg(feature = "native")]
    pub(crate) fn check_cwd(&self) -> Result<(), crate::PtyError> {
        let Some(dir) = &self.cwd else { return Ok(()) };
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err(crate::PtyError::CwdNotDirectory { path: dir.clone() }),
            Err(_) => Err(crate::PtyError::CwdMissing { path: dir.clone() }),
        }
    }

    /// Whether the program can be found the way `execvp` would: as a path if
    /// it has a `/`, else in the child's `PATH`.
    #[cfg(all(unix, feature = "portable"))]
    pub(crate) fn program_exists(&self) -> bool {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        let is_exec = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if self.program.as_bytes().contains(&b'/') {
            let path = match &self.cwd {
                Some(dir) => dir.join(&self.program),
                None => PathBuf::from(&self.program),
            };
            return is_exec(&path);
        }
        let from_spec = self
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        let path = match from_spec {
            Some(v) => v,
            None if self.env_clear => None,
            None => std::env::var_os("PATH"),
        };
        path.is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| is_exec(&dir.join(&self.program)))
        })
    }

    #[cfg(feature = "native")]
    pub(crate) fn program_lossy(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }
}
