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
use crate::{ShellConfig, ShellConfigError, ShellError, ShellRequest, contract};

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

    /// Ends the shell's process tree (`SIGTERM`, up to
    /// [`ShellConfig::close_grace`] for it to leave, `SIGKILL`)
    /// and refuses every later call with [`ShellError::Closed`]; the same
    /// as [`ShellHandle::close`].
    pub async fn close(&mut self) {
        self.handle.close().await;
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
                process
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
        self.inner.closed.send_replace(true);
        let session = self.inner.live();
        self.inner.session().take();
        if let Some(session) = session {
            let _ = session.end(self.inner.close_grace).await;
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
