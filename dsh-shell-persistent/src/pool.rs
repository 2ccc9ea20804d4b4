//! Shells keyed by owner: lazily created, calls of one owner in order,
//! owners in parallel.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dsh_pty::PtySession;
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::Instrument;

use crate::bash::{Fatal, strip_fatal_residue};
use crate::outcome::{
    BrokenReason, CallEnd, CallOutcome, Clip, LimitsReached, Output, StreamsRepaired,
};
use crate::shell::{Broken, Outcome, Shell};
use crate::{ShellConfig, ShellConfigError, ShellError, contract};

/// How long a closed shell's processes get between `SIGTERM` and `SIGKILL`.
const KILL_GRACE: Duration = Duration::from_millis(200);

#[derive(Debug)]
struct Owner {
    /// The owner's shell; the lock serialises its calls in arrival order.
    slot: tokio::sync::Mutex<Option<Shell>>,
    /// The running shell's terminal, reachable while a call holds `slot`.
    live: Mutex<Option<Arc<dyn PtySession>>>,
    /// When the owner's last call ended (or its first began).
    last_used: Mutex<Instant>,
}

impl Default for Owner {
    fn default() -> Self {
        Owner {
            slot: tokio::sync::Mutex::new(None),
            live: Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
        }
    }
}

impl Owner {
    fn live(&self) -> MutexGuard<'_, Option<Arc<dyn PtySession>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }
}

#[derive(Debug)]
struct Inner {
    config: ShellConfig,
    owners: Mutex<HashMap<String, Arc<Owner>>>,
    closed: watch::Sender<bool>,
    /// Whether the idle sweeper runs (started by the first call).
    sweeping: std::sync::atomic::AtomicBool,
}

impl Inner {
    fn owners(&self) -> MutexGuard<'_, HashMap<String, Arc<Owner>>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for owner in self.owners().values() {
            if let Some(session) = owner.live().take() {
                session.kill_now();
            }
        }
    }
}

/// The persistent shell tool: one shell per owner (agent).
///
/// Cloning a pool is cheap and shares its shells. When the last clone is
/// dropped, every shell's process tree is killed.
///
/// ```no_run
/// use dsh_shell_persistent::{ShellConfig, ShellPool};
/// use serde_json::json;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = ShellPool::new(ShellConfig::new("/tmp"))?;
/// // A host hands the model's tool call over as JSON:
/// let text = pool.execute("agent-1", &json!({"command": "cd /usr && export X=1"})).await?;
/// assert_eq!(text, "");
/// let text = pool.execute("agent-1", &json!({"command": "echo $PWD $X"})).await?;
/// assert_eq!(text, "/usr 1");
/// let text = pool.execute("agent-1", &json!({"command": "false"})).await?;
/// assert_eq!(text, "[exit code: 1]");
/// pool.close_all().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ShellPool {
    inner: Arc<Inner>,
}

impl ShellPool {
    /// A pool with `config`, once it is validated. No shell starts until the
    /// first call of an owner.
    pub fn new(config: ShellConfig) -> Result<Self, ShellConfigError> {
        config.validate()?;
        Ok(ShellPool {
            inner: Arc::new(Inner {
                config,
                owners: Mutex::new(HashMap::new()),
                closed: watch::channel(false).0,
                sweeping: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShellConfig {
        &self.inner.config
    }

    /// The tool's name: `bash`, `sh` or `pwsh`.
    pub fn tool_name(&self) -> &'static str {
        self.inner.config.dialect.tool_name()
    }

    /// The tool's definition in the OpenAI function shape:
    /// `{"name", "description", "parameters"}`.
    pub fn schema(&self) -> Value {
        json!({
            "name": self.tool_name(),
            "description": self.inner.config.effective_description(),
            "parameters": self.parameters_schema(),
        })
    }

    /// The tool's definition in the Anthropic Messages API shape:
    /// `{"name", "description", "input_schema"}`.
    pub fn anthropic_schema(&self) -> Value {
        json!({
            "name": self.tool_name(),
            "description": self.inner.config.effective_description(),
            "input_schema": self.parameters_schema(),
        })
    }

    /// The tool's definition in the MCP `tools/list` shape:
    /// `{"name", "description", "inputSchema"}`.
    pub fn mcp_schema(&self) -> Value {
        json!({
            "name": self.tool_name(),
            "description": self.inner.config.effective_description(),
            "inputSchema": self.parameters_schema(),
        })
    }

    /// The JSON Schema of the arguments ([`ShellRequest`](crate::ShellRequest)).
    pub fn parameters_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": self.inner.config.dialect.command_description(),
                }
            },
            "required": ["command"],
        })
    }

    /// Runs a tool call given as the model's JSON arguments (`{"command": ...}`)
    /// and returns the model-visible text.
    pub async fn execute(&self, owner: &str, args: &Value) -> Result<String, ShellError> {
        self.run(owner, crate::request::command_of(args)?).await
    }

    /// Runs `command` in `owner`'s shell and returns the model-visible text
    /// ([`contract::render`] of [`ShellPool::call`]).
    pub async fn run(&self, owner: &str, command: &str) -> Result<String, ShellError> {
        self.run_with_cancel(owner, command, std::future::pending())
            .await
    }

    /// Like [`ShellPool::run`], cancelled when `cancel` resolves: the shell is
    /// then reset and the result discarded, even if the command had finished.
    /// Dropping the returned future has the same effect.
    pub async fn run_with_cancel(
        &self,
        owner: &str,
        command: &str,
        cancel: impl Future<Output = ()>,
    ) -> Result<String, ShellError> {
        let outcome = self.call_with_cancel(owner, command, cancel).await?;
        Ok(contract::render(&outcome))
    }

    /// Runs `command` in `owner`'s shell and returns what happened as data.
    pub async fn call(&self, owner: &str, command: &str) -> Result<CallOutcome, ShellError> {
        self.call_with_cancel(owner, command, std::future::pending())
            .await
    }

    /// Like [`ShellPool::call`], cancelled when `cancel` resolves (see
    /// [`ShellPool::run_with_cancel`]).
    pub async fn call_with_cancel(
        &self,
        owner: &str,
        command: &str,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallOutcome, ShellError> {
        let started = Instant::now();
        let span = tracing::info_span!("shell_call", owner, tool = self.tool_name());
        let result = self
            .call_inner(owner, command, cancel)
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

    async fn call_inner(
        &self,
        owner: &str,
        command: &str,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallOutcome, ShellError> {
        if command.is_empty() {
            return Err(ShellError::EmptyCommand);
        }
        let config = &self.inner.config;
        self.start_sweeper();
        let owner_entry = self.owner(owner)?;
        owner_entry.touch();
        let mut slot = owner_entry.slot.lock().await;
        let mut closed = self.inner.closed.subscribe();
        if *closed.borrow() {
            return Err(ShellError::Closed);
        }
        let mut shell = match slot.take() {
            Some(shell) => shell,
            None => {
                // A spawn still pending when the pool closes is dropped,
                // which kills what it had started.
                let shell = tokio::select! {
                    shell = Shell::spawn(config) => shell?,
                    _ = closed.wait_for(|c| *c) => return Err(ShellError::Closed),
                };
                tracing::debug!(owner, "shell started");
                shell
            }
        };
        let session = shell.session();
        let limits_before = session.limit_events();
        let mut closed_during = false;
        let stop = async {
            tokio::select! {
                () = cancel => {},
                _ = closed.wait_for(|c| *c) => closed_during = true,
            }
        };
        // Input may be typed once the call's line is on the terminal: earlier,
        // bash would read it as a command.
        let outcome = shell
            .call(config, command, stop, || {
                *owner_entry.live() = Some(session)
            })
            .await;
        // Between calls no command runs: input has nowhere to go.
        *owner_entry.live() = None;
        owner_entry.touch();
        let met = shell
            .session()
            .limit_events()
            .zip(limits_before)
            .map(|(after, before)| after.since(before))
            .unwrap_or_default();
        let limits_reached = LimitsReached {
            memory: config.limits.memory.filter(|_| met.oom_kills > 0),
            pids: config.limits.pids.filter(|_| met.forks_refused > 0),
        };
        let keep = config.persistent && matches!(outcome, Ok(Outcome::Completed { .. }));
        if keep {
            *slot = Some(shell);
        } else {
            // SIGKILL to the whole tree at once, as dropping the shell would;
            // a local backend reads `/proc` on the blocking pool and returns
            // once the tree is gone.
            shell.session().end_now().await;
            drop(shell);
        }
        if closed_during {
            return Err(ShellError::Closed);
        }
        let mut typed = typed(config, outcome?)?;
        typed.limits_reached = limits_reached;
        Ok(typed)
    }

    /// With an idle limit, starts (once) the task that closes idle owners.
    /// It holds the pool weakly and ends with it.
    fn start_sweeper(&self) {
        let Some(limit) = self.inner.config.idle_limit else {
            return;
        };
        if self
            .inner
            .sweeping
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let period = (limit / 4).max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                if *inner.closed.borrow() {
                    return;
                }
                ShellPool { inner }.close_idle(limit).await;
            }
        });
    }

    /// Closes and forgets the owners idle for at least `limit` whose shell
    /// is not in a call.
    async fn close_idle(&self, limit: Duration) {
        let idle: Vec<Shell> = {
            let mut owners = self.inner.owners();
            let names: Vec<String> = owners
                .iter()
                .filter(|(_, o)| o.idle_for() >= limit && Arc::strong_count(o) == 1)
                .map(|(name, _)| name.clone())
                .collect();
            let mut shells = Vec::new();
            for name in names {
                let Some(owner) = owners.get(&name) else {
                    continue;
                };
                // A call under way (or waiting its turn) holds the slot.
                let Ok(mut slot) = owner.slot.try_lock() else {
                    continue;
                };
                let shell = slot.take();
                drop(slot);
                owners.remove(&name);
                tracing::debug!(owner = name, "idle owner closed");
                shells.extend(shell);
            }
            shells
        };
        end_trees(idle.into_iter().map(|shell| (shell.session(), Some(shell)))).await;
    }

    fn owner(&self, owner: &str) -> Result<Arc<Owner>, ShellError> {
        if *self.inner.closed.borrow() {
            return Err(ShellError::Closed);
        }
        Ok(Arc::clone(
            self.inner.owners().entry(owner.to_owned()).or_default(),
        ))
    }

    /// Writes `input` to the terminal of `owner`'s shell, for hosts that let
    /// the model (or a human) answer a command that reads the terminal.
    /// Pair it with [`InputWait::Wait`](crate::InputWait::Wait). Fails with
    /// [`ShellError::NotRunning`], writing nothing, unless a call of `owner`
    /// is under way (input typed at an idle prompt would run as a command).
    pub async fn send_input(&self, owner: &str, input: &[u8]) -> Result<(), ShellError> {
        let session = self
            .inner
            .owners()
            .get(owner)
            .and_then(|o| o.live().clone())
            .ok_or(ShellError::NotRunning)?;
        session
            .write_all(input)
            .await
            .map_err(|source| ShellError::Terminal {
                shell: self.tool_name(),
                source,
            })
    }

    /// Kills `owner`'s shell (its whole process tree) and forgets it; the
    /// owner's next call starts a fresh shell.
    pub async fn close_owner(&self, owner: &str) {
        let entry = self.inner.owners().remove(owner);
        if let Some(entry) = entry {
            let live = entry.live().take();
            if let Some(session) = live {
                let _ = session.kill_tree(KILL_GRACE).await;
            }
        }
    }

    /// Closes the pool: kills every shell and refuses further calls. All
    /// process trees are ended at once, sharing one grace period.
    pub async fn close_all(&self) {
        self.inner.closed.send_replace(true);
        let owners: Vec<Arc<Owner>> = self.inner.owners().drain().map(|(_, o)| o).collect();
        let trees = owners.into_iter().filter_map(|owner| {
            // A running call's shell (its call sees the pool close and
            // drops it), or an idle one taken out of its slot.
            let live = owner.live().take();
            let idle = owner.slot.try_lock().ok().and_then(|mut slot| slot.take());
            let session = live.or_else(|| idle.as_ref().map(Shell::session))?;
            Some((session, idle))
        });
        end_trees(trees).await;
    }

    /// The owners that currently have a shell.
    pub fn owners(&self) -> Vec<String> {
        self.inner.owners().keys().cloned().collect()
    }

    /// Whether `owner` has a live shell or a call under way (which may be
    /// starting one).
    pub fn has_shell(&self, owner: &str) -> bool {
        self.inner
            .owners()
            .get(owner)
            .is_some_and(|o| o.slot.try_lock().map_or(true, |slot| slot.is_some()))
    }
}

/// Ends every tree at once, sharing one grace period and `/proc` readings,
/// then drops the shells (whose `Drop` finds nothing left to kill).
async fn end_trees(trees: impl Iterator<Item = (Arc<dyn PtySession>, Option<Shell>)>) {
    let _shared = dsh_pty::SharedScans::new();
    let mut ending = tokio::task::JoinSet::new();
    for (session, shell) in trees {
        ending.spawn(async move {
            let _ = session.kill_tree(KILL_GRACE).await;
            drop(shell);
        });
    }
    while ending.join_next().await.is_some() {}
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
    };
    Ok(match outcome {
        Outcome::Completed {
            output,
            status,
            eofs_sent,
            repairs,
            continued,
        } => CallOutcome {
            eofs_sent,
            continued,
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
                Broken::NoPromptExpansion => BrokenReason::PromptExpansionOff,
                Broken::Replaced => BrokenReason::Replaced,
            };
            base(output, CallEnd::ShellBroken { reason })
        }
        Outcome::TimedOut { output } => base(
            output.finish(),
            CallEnd::TimedOut {
                after: config.timeout,
            },
        ),
        Outcome::Cancelled => {
            return Err(ShellError::Cancelled {
                dialect: config.dialect,
                shell_reset: persistent,
            });
        }
    })
}
