//! One persistent shell: the unit a host holds for one agent.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use dsh_pty::PtySession;
use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;

use crate::bash::{Fatal, strip_fatal_residue};
use crate::outcome::{
    BrokenReason, CallEnd, CallOutcome, Clip, LimitsReached, Output, StreamsRepaired,
};
use crate::process::{Broken, Outcome, Process};
use crate::state::{Capture, ShellState, Unread};
use crate::{Dialect, ShellConfig, ShellConfigError, ShellError, ShellRequest, contract};

/// One persistent shell: a shell process (started by the first call, started
/// again after a reset) and the protocol that runs one command at a time in
/// it.
///
/// A call takes `&mut self`, so a `Shell` runs one call at a time. A host
/// that shares one shell between tasks puts it behind a
/// [`tokio::sync::Mutex`]: its queue, first come first served, is the
/// shell's turn. [`ShellHandle`] reaches the shell from outside that turn
/// (input for a running command, closing it). [`ShellPool`](crate::ShellPool)
/// is a map of owners to shells built exactly so.
///
/// Dropping a shell kills its process tree.
///
/// ```no_run
/// use dsh_shell_persistent::{Shell, ShellConfig};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let mut shell = Shell::new(ShellConfig::new("/tmp"))?;
/// assert_eq!(shell.run("cd /usr && export X=1").await?, "");
/// assert_eq!(shell.run("echo $PWD $X").await?, "/usr 1");
/// assert_eq!(shell.run("false").await?, "[exit code: 1]");
/// shell.close().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Shell {
    config: Arc<ShellConfig>,
    process: Option<Process>,
    handle: ShellHandle,
    /// Whose shell it is, for tracing (a pool's owner).
    owner: Option<Arc<str>>,
    /// The last call that held a shell process was cancelled (or its future
    /// dropped) and lost it: the next outcome says so.
    cancelled: bool,
}

impl Shell {
    /// A shell with `config`, once it is validated. No process starts until
    /// the first call.
    pub fn new(config: ShellConfig) -> Result<Self, ShellConfigError> {
        config.validate()?;
        Ok(Shell::shared(Arc::new(config), None))
    }

    /// A shell with a configuration already validated (a pool's).
    pub(crate) fn shared(config: Arc<ShellConfig>, owner: Option<Arc<str>>) -> Self {
        Shell {
            handle: ShellHandle::new(config.dialect.tool_name(), config.close_grace),
            config,
            process: None,
            owner,
            cancelled: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ShellConfig {
        &self.config
    }

    /// Replaces the configuration a pool gave this shell (with an owner's
    /// start directory), while no process runs: the next call starts one
    /// under it.
    pub(crate) fn set_config(&mut self, config: Arc<ShellConfig>) {
        debug_assert!(
            self.process.is_none(),
            "a running shell keeps its configuration"
        );
        self.config = config;
    }

    /// The tool's definition ([`ShellConfig::spec`]).
    pub fn spec(&self) -> dsh_tool::ToolSpec {
        self.config.spec()
    }

    /// The tool's name: `bash`, `sh` or `pwsh`.
    pub fn tool_name(&self) -> &'static str {
        self.config.dialect.tool_name()
    }

    /// A handle that reaches this shell while a call holds it.
    pub fn handle(&self) -> ShellHandle {
        self.handle.clone()
    }

    /// Whether a shell process runs (a call started one and no reset ended
    /// it since).
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// Whether the last call that held a shell process was cancelled (or
    /// its future dropped), so that the next outcome says the shell was
    /// reset ([`CallOutcome::after_cancel`]).
    pub fn after_cancel(&self) -> bool {
        self.cancelled
    }

    /// Makes the next outcome say that the previous call was cancelled and
    /// the shell reset: for a host that replaces a shell whose
    /// [`Shell::after_cancel`] is set with a new one (another
    /// configuration for the same agent), so that the model still learns it.
    pub fn mark_after_cancel(&mut self) {
        self.cancelled = true;
    }

    /// Runs a tool call given as the model's JSON arguments (`{"command": ...}`,
    /// and `timeout` when [`ShellConfig::timeout_parameter`] offers it) and
    /// returns the model-visible text ([`contract::render`] of
    /// [`Shell::call`]).
    pub async fn execute(&mut self, args: &Value) -> Result<String, ShellError> {
        let request = self.config.parse_request(args)?;
        let outcome = self.call(request, std::future::pending()).await?;
        Ok(contract::render(&outcome))
    }

    /// A convenience: runs `command` and returns the model-visible text
    /// ([`contract::render`] of [`Shell::call`], never cancelled).
    pub async fn run(&mut self, command: &str) -> Result<String, ShellError> {
        let outcome = self.call(command, std::future::pending()).await?;
        Ok(contract::render(&outcome))
    }

    /// Runs `request` (its command, under its timeout when it has one) and
    /// returns what happened as data. It is cancelled when `cancel` resolves
    /// (`std::future::pending()` never does): the shell is then reset and
    /// the result discarded, even if the command had finished; dropping the
    /// returned future has the same effect. Every other call method is this
    /// one.
    ///
    /// ```no_run
    /// use std::future::pending;
    /// use std::time::Duration;
    /// use dsh_shell_persistent::{CallEnd, Shell, ShellConfig, ShellRequest};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut shell = Shell::new(ShellConfig::new("/tmp").timeout(Duration::from_secs(600)))?;
    /// let quick = ShellRequest::new("curl -s localhost:8080/health").timeout(Duration::from_secs(2));
    /// let outcome = shell.call(quick, pending()).await?;
    /// if let CallEnd::TimedOut { after } = outcome.end {
    ///     assert_eq!(after, Duration::from_secs(2)); // and the shell was reset
    /// }
    /// let listing = shell.call("ls", pending()).await?;
    /// # let _ = listing;
    /// # Ok(()) }
    /// ```
    pub async fn call(
        &mut self,
        request: impl Into<ShellRequest>,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallOutcome, ShellError> {
        let request = request.into();
        let started = Instant::now();
        let owner = self.owner.as_deref().unwrap_or_default();
        let span = tracing::info_span!("shell_call", owner, tool = self.tool_name());
        let result = self
            .call_inner(&request, cancel)
            .instrument(span.clone())
            .await;
        let _enter = span.enter();
        tracing::info!(
            duration_us = started.elapsed().as_micros() as u64,
            outcome = match &result {
                Ok(o) => match o.end {
                    CallEnd::Exited { code: 0 } => "ok",
                    CallEnd::Exited { .. } => "failed",
                    CallEnd::TimedOut { .. } => "timed out",
                    _ => "shell reset",
                },
                Err(ShellError::Cancelled { .. }) => "cancelled",
                Err(_) => "error",
            },
            "tool call finished"
        );
        result
    }

    /// Starts the shell's process now, if it has none (a call starts one
    /// when it needs it), from its start state
    /// ([`Shell::set_start_state`]) if it has one: a host that works in
    /// what the shell's start makes (a copy-on-write workspace's view)
    /// before the first call.
    pub async fn start(&mut self) -> Result<(), ShellError> {
        if self.process.is_some() {
            return Ok(());
        }
        let mut closed = self.handle.inner.closed.subscribe();
        if *closed.borrow() {
            return Err(ShellError::Closed);
        }
        let process = tokio::select! {
            process = Process::spawn(&self.config) => process?,
            _ = closed.wait_for(|c| *c) => return Err(ShellError::Closed),
        };
        tracing::debug!("shell started");
        let process = self.start_from_state(process).await?;
        self.process = Some(process);
        Ok(())
    }

    /// The process id of the shell's session (the first process its
    /// backend started), while it has a process.
    pub fn session_pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(|p| p.session().pid())
    }

    /// Ends the shell's process tree (`SIGTERM`, up to
    /// [`ShellConfig::close_grace`] for it to leave, `SIGKILL`)
    /// and refuses every later call with [`ShellError::Closed`]; the same
    /// as [`ShellHandle::close`].
    pub async fn close(&mut self) {
        self.handle.close().await;
        self.process = None;
    }

    /// [`Shell::close`] without the grace: the process tree gets `SIGKILL`
    /// at once. For a shell whose processes are thrown away with what
    /// they worked on (a copy-on-write view reset or replaced).
    pub async fn kill(&mut self) {
        self.handle.close_within(Duration::ZERO).await;
        self.process = None;
    }

    async fn call_inner(
        &mut self,
        request: &ShellRequest,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallOutcome, ShellError> {
        if request.command.is_empty() {
            return Err(ShellError::EmptyCommand);
        }
        let mut cancel = std::pin::pin!(cancel);
        // A shell found dead is replaced once, and the call runs in the
        // fresh one: a shell that died between calls is never the call's
        // error.
        let mut restarted = false;
        loop {
            match self.call_once(request, cancel.as_mut(), restarted).await? {
                Once::Ran(outcome) => return Ok(*outcome),
                Once::ShellWasDead => restarted = true,
            }
        }
    }

    /// One attempt of [`Shell::call_inner`]: in the shell that runs, or in
    /// a fresh one (`restarted` when an earlier attempt found the shell
    /// dead). [`Once::ShellWasDead`] when the shell this call found had
    /// ended before any of the command ran.
    async fn call_once(
        &mut self,
        request: &ShellRequest,
        cancel: impl Future<Output = ()>,
        mut restarted: bool,
    ) -> Result<Once, ShellError> {
        let command = request.command.as_str();
        let timeout = request.timeout.unwrap_or(self.config.timeout);
        let config = Arc::clone(&self.config);
        let reach = Arc::clone(&self.handle.inner);
        let mut closed = reach.closed.subscribe();
        if *closed.borrow() {
            self.process = None;
            return Err(ShellError::Closed);
        }
        // Taken out for the call: a call dropped midway drops the process,
        // which kills it.
        let found = self.process.take();
        // A shell that ended since the last call (killed from outside) is
        // replaced: what is left of its tree goes with it.
        let found = match found {
            Some(dead) if dead.session().status().is_some() => {
                let _ = dead.session().end(Duration::ZERO).await;
                restarted = true;
                None
            }
            found => found,
        };
        let fresh = found.is_none();
        let mut process = match found {
            Some(process) => process,
            None => {
                let process = tokio::select! {
                    process = Process::spawn(&config) => process?,
                    _ = closed.wait_for(|c| *c) => return Err(ShellError::Closed),
                };
                tracing::debug!("shell started");
                self.start_from_state(process).await?
            }
        };
        // Set until this call ends: a future dropped from here on loses the
        // process, and the next outcome says the shell was reset.
        let after_cancel = std::mem::replace(&mut self.cancelled, true);
        let session = process.session();
        let mut guard = InCall::new(&reach, &session);
        // A close that came while the shell started finds it now.
        if *closed.borrow() {
            self.cancelled = after_cancel;
            return Err(ShellError::Closed);
        }
        let limits_before = session.limit_events();
        let mut closed_during = false;
        let stop = async {
            tokio::select! {
                biased;
                _ = closed.wait_for(|c| *c) => closed_during = true,
                () = cancel => {},
            }
        };
        // Input may be typed once the call's line is on the terminal: earlier,
        // bash would read it as a command.
        let outcome = process
            .call(&config, command, timeout, stop, || guard.taking_input())
            .await;
        let outcome = match outcome {
            Ok(Outcome::EndedBeforeStart) if !fresh && !closed_during => {
                // Nothing of the command ran: again, in a fresh shell.
                let _ = session.end(Duration::ZERO).await;
                drop(guard);
                drop(process);
                self.cancelled = after_cancel;
                return Ok(Once::ShellWasDead);
            }
            outcome => outcome,
        };
        // A session whose counters take a round trip (a container's cgroup)
        // reads them once, here; its reading before the call is the one
        // after the last call (or from its start), so a background job's
        // kill between calls shows with the next call.
        session.refresh_limit_events().await;
        let met = session
            .limit_events()
            .zip(limits_before)
            .map(|(after, before)| after.since(before))
            .unwrap_or_default();
        // The limits are the config's, or the container's own.
        let limits_reached = LimitsReached {
            memory: config
                .limits
                .memory
                .or(met.memory_limit)
                .filter(|_| met.oom_kills > 0),
            pids: config
                .limits
                .pids
                .or(met.pids_limit)
                .filter(|_| met.forks_refused > 0),
        };
        let keep = config.persistent && matches!(outcome, Ok(Outcome::Completed { .. }));
        if keep {
            guard.keep();
            self.process = Some(process);
        } else {
            // SIGKILL to the whole tree at once, as dropping the process
            // would; the backend returns once the tree is gone.
            let _ = session.end(Duration::ZERO).await;
            drop(process);
        }
        drop(guard);
        self.cancelled = config.persistent && matches!(outcome, Ok(Outcome::Cancelled));
        if closed_during {
            return Err(ShellError::Closed);
        }
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                self.cancelled |= after_cancel;
                return Err(error);
            }
        };
        let mut typed = typed(&config, outcome)?;
        typed.limits_reached = limits_reached;
        typed.after_cancel = after_cancel;
        typed.shell_restarted = restarted;
        Ok(Once::Ran(Box::new(typed)))
    }
}

/// How one attempt of a call ended ([`Shell::call_once`]).
enum Once {
    /// The call ran (boxed: an outcome is large beside the other answer).
    Ran(Box<CallOutcome>),
    /// The shell it found had ended before any of the command ran.
    ShellWasDead,
}

/// Reaches a [`Shell`] from outside its turn: input for the command a call
/// runs, and closing the shell while a call holds it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShellHandle {
    inner: Arc<Reach>,
}

#[derive(Debug)]
struct Reach {
    /// The dialect's name, for errors.
    shell: &'static str,
    /// [`ShellConfig::close_grace`](crate::ShellConfig::close_grace).
    close_grace: Duration,
    /// The shell process's terminal, while there is one (the process holds
    /// it: dropping the process ends it).
    session: Mutex<Option<Weak<dyn PtySession>>>,
    /// A call's line is on the terminal: typed input reaches its command.
    taking_input: AtomicBool,
    closed: watch::Sender<bool>,
    /// The state the shell's next process starts from
    /// ([`Shell::set_start_state`]).
    start_state: Mutex<Option<ShellState>>,
}

impl Reach {
    fn session(&self) -> MutexGuard<'_, Option<Weak<dyn PtySession>>> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session, while its process lives.
    fn live(&self) -> Option<Arc<dyn PtySession>> {
        self.session().as_ref().and_then(Weak::upgrade)
    }
}

impl ShellHandle {
    fn new(shell: &'static str, close_grace: Duration) -> Self {
        ShellHandle {
            inner: Arc::new(Reach {
                shell,
                close_grace,
                session: Mutex::new(None),
                taking_input: AtomicBool::new(false),
                closed: watch::channel(false).0,
                start_state: Mutex::new(None),
            }),
        }
    }

    /// Writes `input` to the shell's terminal, for hosts that let the model
    /// (or a human) answer a command that reads the terminal. Pair it with
    /// [`InputWait::Wait`](crate::InputWait::Wait). Fails with
    /// [`ShellError::NotRunning`], writing nothing, unless a call is under
    /// way (input typed at an idle prompt would run as a command).
    pub async fn send_input(&self, input: &[u8]) -> Result<(), ShellError> {
        let session = self
            .inner
            .taking_input
            .load(Ordering::Acquire)
            .then(|| self.inner.live())
            .flatten()
            .ok_or(ShellError::NotRunning)?;
        session
            .write_all(input)
            .await
            .map_err(|source| ShellError::Terminal {
                shell: self.inner.shell,
                source,
            })
    }

    /// Closes the shell: a call under way ends with [`ShellError::Closed`],
    /// every later call is refused the same way, and the process tree is
    /// ended (`SIGTERM`, up to [`ShellConfig::close_grace`](crate::ShellConfig::close_grace)
    /// for it to leave, `SIGKILL`) before this returns.
    pub async fn close(&self) {
        self.close_within(self.inner.close_grace).await;
    }

    /// [`ShellHandle::close`] with `grace` for the tree to leave.
    async fn close_within(&self, grace: Duration) {
        self.inner.closed.send_replace(true);
        let session = self.inner.live();
        self.inner.session().take();
        if let Some(session) = session {
            let _ = session.end(grace).await;
        }
    }

    /// Whether the shell was closed.
    pub fn is_closed(&self) -> bool {
        *self.inner.closed.borrow()
    }
}

/// A call's hold on the handle: the session is reachable while the call
/// runs (and after, if the process is kept); input is accepted once the
/// line is written, until the call ends, however it ends.
struct InCall<'a> {
    reach: &'a Reach,
    kept: bool,
}

impl<'a> InCall<'a> {
    fn new(reach: &'a Reach, session: &Arc<dyn PtySession>) -> Self {
        *reach.session() = Some(Arc::downgrade(session));
        InCall { reach, kept: false }
    }

    fn taking_input(&self) {
        self.reach.taking_input.store(true, Ordering::Release);
    }

    fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for InCall<'_> {
    fn drop(&mut self) {
        self.reach.taking_input.store(false, Ordering::Release);
        if !self.kept {
            *self.reach.session() = None;
        }
    }
}

/// The typed outcome of a call that ran.
fn typed(config: &ShellConfig, outcome: Outcome) -> Result<CallOutcome, ShellError> {
    let persistent = config.persistent;
    let base = |output: Output, end: CallEnd| CallOutcome {
        dialect: config.dialect,
        output,
        end,
        eofs_sent: 0,
        continued: false,
        streams_repaired: StreamsRepaired::default(),
        shell_reset: persistent,
        limits_reached: LimitsReached::default(),
        ended_programs: Vec::new(),
        after_cancel: false,
        shell_restarted: false,
    };
    Ok(match outcome {
        Outcome::Completed {
            output,
            status,
            eofs_sent,
            repairs,
            continued,
            ended,
        } => CallOutcome {
            eofs_sent,
            continued,
            ended_programs: ended,
            streams_repaired: StreamsRepaired {
                stdin: repairs.stdin,
                stdout: repairs.stdout,
                stderr: repairs.stderr,
            },
            shell_reset: false,
            ..base(output.finish(), CallEnd::Exited { code: status })
        },
        // A one-shot shell ending is the command ending.
        Outcome::ShellEnded { output, exit, .. } if !persistent => {
            let code = match (exit.code(), exit.signal()) {
                (Some(code), _) => code,
                (None, Some(sig)) => 128 + sig,
                (None, None) => 1,
            };
            base(output.finish(), CallEnd::Exited { code })
        }
        Outcome::ShellEnded {
            output,
            exit,
            errexit,
        } => base(
            output.finish(),
            CallEnd::ShellEnded {
                status: exit,
                errexit,
            },
        ),
        // A fresh shell that ended before it read the call's line.
        Outcome::EndedBeforeStart => base(
            Output::default(),
            CallEnd::ShellEnded {
                status: dsh_pty::ExitStatus::unknown(),
                errexit: false,
            },
        ),
        Outcome::Lost { output, error } => base(output.finish(), CallEnd::ConnectionLost { error }),
        Outcome::Broken { output, why } => {
            let mut output = output.finish();
            if matches!(why, Broken::Fatal(_)) {
                match &mut output.clip {
                    None => strip_fatal_residue(&mut output.text),
                    Some(Clip::HeadTail { tail, .. }) => strip_fatal_residue(tail),
                    Some(_) => {}
                }
            }
            let reason = match why {
                Broken::Fatal(Fatal::Builtins) => BrokenReason::BuiltinDisabled,
                Broken::Fatal(Fatal::ReadOnly) => BrokenReason::ReadOnlyVariable,
                Broken::Fatal(Fatal::Epilogue) => BrokenReason::StreamsUnrecoverable,
                Broken::Stale => BrokenReason::WrapperDidNotRun,
                Broken::NotRun => BrokenReason::LineNotRun,
                Broken::NoPromptExpansion => BrokenReason::PromptExpansionOff,
                Broken::Replaced => BrokenReason::Replaced,
            };
            base(output, CallEnd::ShellBroken { reason })
        }
        Outcome::TimedOut { output, after } => base(output.finish(), CallEnd::TimedOut { after }),
        Outcome::Cancelled => {
            return Err(ShellError::Cancelled {
                dialect: config.dialect,
                shell_reset: persistent,
            });
        }
    })
}

/// The most characters a call the library makes for itself (a state's
/// capture) may print: a larger state cannot be captured.
const INTERNAL_OUTPUT_CHARS: usize = 64 << 20;

/// How many times a capture is tried while other output comes in between
/// (a job printing to the terminal).
const CAPTURE_ATTEMPTS: u32 = 3;

/// How a call the library made for itself ended.
enum Internal {
    /// The shell ran it and waits at its prompt: what it printed (all of
    /// it unless `clipped`) and its status.
    Done {
        text: String,
        status: i32,
        clipped: bool,
    },
    /// The shell was reset (a timeout, a shell that ended): how, as the
    /// model would read it.
    Reset(String),
}

/// A shell's state: capture, apply, start from.
impl Shell {
    /// Captures the state of the running shell ([`ShellState`]: its
    /// directory, variables, functions, aliases, options and umask; no
    /// process) with one command of the library's own, run in the shell
    /// between calls like any call (so not while another runs) and shown
    /// to no model. Nothing the model can see changes: the options the
    /// command turns off while it reads are back on when it ends, it
    /// leaves no variable behind, and every call starts with `$?` at 0
    /// anyway. `None` if no shell process runs (a shell that was never
    /// called, or was reset: its next call starts fresh).
    ///
    /// [`ShellError::StateUnsupported`] unless the dialect is bash;
    /// [`ShellError::StateNotCaptured`] if it could not be read (the shell
    /// is then reset only if the error says so).
    ///
    /// ```no_run
    /// use dsh_shell_persistent::{Shell, ShellConfig};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut first = Shell::new(ShellConfig::new("/tmp"))?;
    /// first.run("cd /usr && X=1 && alias ll='ls -l'").await?;
    /// let state = first.capture_state().await?.expect("a shell runs");
    /// let mut second = Shell::new(ShellConfig::new("/tmp"))?;
    /// second.apply_state(&state).await?;
    /// assert_eq!(second.run("echo $PWD $X").await?, "/usr 1");
    /// # Ok(()) }
    /// ```
    pub async fn capture_state(&mut self) -> Result<Option<ShellState>, ShellError> {
        let local = self.config.backend.is_local();
        self.capture_state_through(local).await
    }

    /// [`Shell::capture_state`], through a file first if `through_file`,
    /// else through the terminal.
    async fn capture_state_through(
        &mut self,
        mut through_file: bool,
    ) -> Result<Option<ShellState>, ShellError> {
        let shell = self.supports_state()?;
        if self.handle.is_closed() {
            self.process = None;
            return Err(ShellError::Closed);
        }
        let Some(mut process) = self.process.take() else {
            return Ok(None);
        };
        // A future dropped from here on loses the process: the next
        // outcome says the shell was reset.
        let after_cancel = std::mem::replace(&mut self.cancelled, true);
        let not_captured = |why: String, shell_reset| ShellError::StateNotCaptured {
            shell,
            why,
            shell_reset,
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let capture = match Capture::new(through_file) {
                Ok(capture) => capture,
                Err(error) => {
                    self.process = Some(process);
                    self.cancelled = after_cancel;
                    return Err(error);
                }
            };
            let (text, clipped) = match self.internal(&mut process, &capture.command()).await {
                Ok(Internal::Done { text, clipped, .. }) => (text, clipped),
                Ok(Internal::Reset(how)) => {
                    return Err(not_captured(
                        format!("the shell was reset while it was read: {how}"),
                        true,
                    ));
                }
                Err(error) => {
                    self.cancelled = after_cancel;
                    return Err(error);
                }
            };
            let read = if clipped {
                Err(Unread::Other(
                    "it is larger than the 64 Mi characters a capture reads",
                ))
            } else {
                capture.read(&text)
            };
            match read {
                Err(Unread::Torn) if attempts < CAPTURE_ATTEMPTS => continue,
                Err(Unread::NoFile) if attempts < CAPTURE_ATTEMPTS => through_file = false,
                read => {
                    self.process = Some(process);
                    self.cancelled = after_cancel;
                    return read
                        .map(Some)
                        .map_err(|unread| not_captured(unread.why().to_owned(), false));
                }
            }
        }
    }

    /// Applies `state` to this shell: to its running process, else to one
    /// it starts now. Meant for a fresh shell (see [`ShellState`] for what
    /// is set and in which order); on a used one, what the state does not
    /// name stays.
    ///
    /// [`ShellError::StateNotApplied`] with what bash said when a part
    /// was refused (a directory that is gone, a variable the shell holds
    /// read-only): the shell then keeps every other part.
    pub async fn apply_state(&mut self, state: &ShellState) -> Result<(), ShellError> {
        self.supports_state()?;
        let mut closed = self.handle.inner.closed.subscribe();
        if *closed.borrow() {
            self.process = None;
            return Err(ShellError::Closed);
        }
        let process = match self.process.take() {
            Some(process) => process,
            None => tokio::select! {
                process = Process::spawn(&self.config) => process?,
                _ = closed.wait_for(|c| *c) => return Err(ShellError::Closed),
            },
        };
        let process = self.apply_on(process, state).await?;
        self.process = Some(process);
        Ok(())
    }

    /// Makes the next shell process this shell starts (at its next call,
    /// or after a reset) start from `state`, applied before that call's
    /// command; once: a later reset starts fresh. `None` forgets a state
    /// not yet applied. If applying fails, that call returns
    /// [`ShellError::StateNotApplied`] without running its command.
    pub fn set_start_state(&self, state: Option<ShellState>) {
        self.handle.set_start_state(state);
    }

    /// The dialect's name, if its state can be captured.
    fn supports_state(&self) -> Result<&'static str, ShellError> {
        let shell = self.tool_name();
        if self.config.dialect == Dialect::Bash {
            Ok(shell)
        } else {
            Err(ShellError::StateUnsupported { shell })
        }
    }

    /// A process just started: the start state applied to it, if one was
    /// set ([`Shell::set_start_state`]).
    async fn start_from_state(&mut self, process: Process) -> Result<Process, ShellError> {
        match self.handle.take_start_state() {
            Some(state) => self.apply_on(process, &state).await,
            None => Ok(process),
        }
    }

    /// Applies `state` to `process` and returns it. On
    /// [`ShellError::StateNotApplied`] with the shell alive, the process
    /// is kept as this shell's.
    async fn apply_on(
        &mut self,
        mut process: Process,
        state: &ShellState,
    ) -> Result<Process, ShellError> {
        let shell = match self.supports_state() {
            Ok(shell) => shell,
            Err(error) => {
                self.process = Some(process);
                return Err(error);
            }
        };
        let after_cancel = std::mem::replace(&mut self.cancelled, true);
        let ran = self.internal(&mut process, &state.apply_command()).await;
        self.cancelled = after_cancel;
        match ran? {
            Internal::Done { text, status, .. } if text.is_empty() && status == 0 => Ok(process),
            Internal::Done { text, status, .. } => {
                self.process = Some(process);
                let said = if text.is_empty() {
                    format!("exit status {status}")
                } else {
                    text.lines().collect::<Vec<_>>().join("; ")
                };
                Err(ShellError::StateNotApplied {
                    shell,
                    said,
                    shell_reset: false,
                })
            }
            Internal::Reset(said) => {
                self.cancelled = true;
                Err(ShellError::StateNotApplied {
                    shell,
                    said,
                    shell_reset: true,
                })
            }
        }
    }

    /// Runs `command` in `process` for the library itself: as a call
    /// does, but with no input for it, no limit on its output short of
    /// [`INTERNAL_OUTPUT_CHARS`], and its result kept from the model.
    /// Closing the shell reaches it. A process whose shell was reset must
    /// be dropped by the caller.
    async fn internal(
        &mut self,
        process: &mut Process,
        command: &str,
    ) -> Result<Internal, ShellError> {
        let mut config = self.config.as_ref().clone();
        config.max_output_chars = INTERNAL_OUTPUT_CHARS;
        config.clip = crate::ClipMode::Head;
        let reach = Arc::clone(&self.handle.inner);
        let mut closed = reach.closed.subscribe();
        if *closed.borrow() {
            return Err(ShellError::Closed);
        }
        let session = process.session();
        let mut guard = InCall::new(&reach, &session);
        let mut closed_during = false;
        let stop = async {
            let _ = closed.wait_for(|c| *c).await;
            closed_during = true;
        };
        let outcome = process
            .call(&config, command, config.timeout, stop, || {})
            .await;
        if closed_during {
            return Err(ShellError::Closed);
        }
        match outcome? {
            Outcome::Completed { output, status, .. } => {
                guard.keep();
                let output = output.finish();
                Ok(Internal::Done {
                    clipped: output.clip.is_some(),
                    text: output.text,
                    status,
                })
            }
            Outcome::Cancelled => Err(ShellError::Closed),
            other => {
                let _ = session.end(Duration::ZERO).await;
                Ok(Internal::Reset(contract::render(&typed(&config, other)?)))
            }
        }
    }
}

impl ShellHandle {
    /// Sets (or with `None` forgets) the state the shell's next process
    /// starts from.
    pub(crate) fn set_start_state(&self, state: Option<ShellState>) {
        *self
            .inner
            .start_state
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Whether the shell holds a running process (kept after a call, or a
    /// call's).
    pub(crate) fn has_process(&self) -> bool {
        self.inner.live().is_some()
    }

    /// The state the shell's next process starts from, taken.
    fn take_start_state(&self) -> Option<ShellState> {
        self.inner
            .start_state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The terminal's way (a shell on another machine, whose files this
    /// process cannot read) reads the same state as the file's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::unwrap_used)]
    async fn a_state_reads_the_same_through_the_terminal() {
        let dir = tempfile::tempdir().unwrap();
        let mut source = Shell::new(ShellConfig::new(dir.path())).unwrap();
        let setup = "cd / && X=$'a\\nb\\xff' && declare -A h=([k]=v) && f() { echo f; } && alias a='echo a' && set -o noclobber && umask 077";
        assert_eq!(source.run(setup).await.unwrap(), "");
        let by_file = source.capture_state_through(true).await.unwrap().unwrap();
        let by_terminal = source.capture_state_through(false).await.unwrap().unwrap();
        let lines = |s: &ShellState| {
            String::from_utf8_lossy(s.script())
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let (file, terminal) = (lines(&by_file), lines(&by_terminal));
        let differ: Vec<_> = file.iter().zip(&terminal).filter(|(a, b)| a != b).collect();
        assert!(
            differ.is_empty() && file.len() == terminal.len(),
            "{differ:?}"
        );
        assert!(by_file.script().windows(5).any(|w| w == b"umask"));
        source.close().await;
    }
}
