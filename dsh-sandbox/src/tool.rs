//! The shell tool under the sandbox: per owner, its mode, its shell and
//! what confines it, behind one turn; the rules for changing a mode; the
//! tool's definition.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use dsh_shell_persistent::{
    OwnerDirError, Shell, ShellConfig, ShellError, ShellHandle, ShellRequest, ToolSpec,
};
use dsh_tool::{Kind, Parameter};
use serde_json::Value;

use crate::contract::{Denial, SandboxOutcome};
use crate::git::Placeholders;
use crate::{
    Enforcement, ModeChange, Persistence, SandboxConfig, SandboxError, SandboxFs, SandboxMode,
    SandboxRequest, WriteRules,
};

/// The shell tool with sandbox modes.
///
/// * `danger-full-access`: the owner's shell, unconfined (persistent unless
///   the shell config says `persistent(false)`).
/// * `read-only`, `workspace-write`: the owner's persistent shell, confined
///   when it is created (or a fresh confined shell per call with
///   [`Persistence::OneShot`]).
/// * An approved `sandbox_permissions` runs that one call wider, in a fresh
///   shell; the owner's persistent shell stays as it was.
///
/// Each owner has one turn: its calls, the changes of its mode (which its
/// editor's filesystem, [`SandboxedShell::editor_fs`], follows) and whatever
/// a host runs in it ([`SandboxedShell::in_turn`]) happen one at a time in
/// arrival order.
///
/// Every owner works in the shell config's `start_dir` (the workspace),
/// unless the host gave it a directory of its own
/// ([`SandboxedShell::set_owner_dir`]): then that directory is its
/// workspace, where its shells start and, in workspace-write, its writable
/// root in place of the shared one, for the shell and the editor alike.
#[derive(Debug)]
pub struct SandboxedShell {
    config: SandboxConfig,
    owners: Arc<Mutex<HashMap<String, Arc<Owner>>>>,
    /// Whether the idle sweeper runs (started by the first call).
    sweeping: AtomicBool,
    /// Namespaces failed and the policy allows the weaker mode.
    weaker: AtomicBool,
    /// The size of `owners` at which the next new owner prunes it.
    prune_at: AtomicUsize,
    closed: AtomicBool,
}

/// The smallest owner map that is ever pruned.
const PRUNE_FLOOR: usize = 1024;

#[derive(Debug, Default)]
struct Owner {
    /// The owner's turn, holding its persistent shell.
    turn: tokio::sync::Mutex<Option<Current>>,
    /// The owner's own mode; written only in its turn, read at any time.
    mode: Mutex<Option<SandboxMode>>,
    /// The shell a call of the owner runs in, else its persistent shell:
    /// what closing the owner ends.
    live: Mutex<Option<ShellHandle>>,
    /// The owner's editor filesystem, once a host asked for it.
    fs: OnceLock<Arc<SandboxFs>>,
    /// The owner's own workspace ([`SandboxedShell::set_owner_dir`]);
    /// `None`: the shell config's `start_dir`. Held while the editor's
    /// filesystem is made, so that both see the same one.
    dir: Mutex<Option<PathBuf>>,
    /// The owner was closed: calls still waiting for its turn are refused.
    closed: AtomicBool,
    /// When the owner's last call ended (or its first began).
    last_used: Mutex<Option<Instant>>,
    /// Held by the job that prepares one of the owner's confined shells
    /// on tokio's blocking pool, from the git placeholders to handing the
    /// result over (or dropping it, when the call that asked was dropped
    /// meanwhile): one preparation of the owner at a time.
    preparing: Arc<Mutex<()>>,
    /// The git placeholders the owner's confined shells needed, kept until
    /// the owner goes (last: after its shell was killed), so that no
    /// reset, one-shot call or mode change leaves its roots without them.
    placeholders: Arc<Mutex<Placeholders>>,
}

/// A shell, the mode it runs under and what the kernel enforces for it.
#[derive(Debug)]
struct Current {
    mode: SandboxMode,
    shell: Shell,
    enforcement: Enforcement,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // A shell of the owner killed just now (the tool dropped without
        // closing it) may still be dying, and could write `HEAD` the moment
        // its placeholder went: the placeholders stay on disk then, as a
        // crash leaves them (empty, no repository to git).
        if self
            .turn
            .get_mut()
            .as_ref()
            .is_some_and(|c| c.shell.is_running() && !c.shell.handle().is_closed())
        {
            self.placeholders
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .leave();
        }
    }
}

impl Owner {
    fn mode(&self) -> MutexGuard<'_, Option<SandboxMode>> {
        self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self) -> MutexGuard<'_, Option<ShellHandle>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dir(&self) -> MutexGuard<'_, Option<PathBuf>> {
        self.dir.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(Duration::ZERO, |t| t.elapsed())
    }
}

impl SandboxedShell {
    /// The tool, once its shell settings are validated. No shell starts
    /// until a call; a restricted call whose confinement cannot be enforced
    /// fails closed with the reason.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        config.shell.validate()?;
        Ok(SandboxedShell {
            owners: Arc::new(Mutex::new(HashMap::new())),
            sweeping: AtomicBool::new(false),
            weaker: AtomicBool::new(false),
            prune_at: AtomicUsize::new(PRUNE_FLOOR),
            closed: AtomicBool::new(false),
            config,
        })
    }

    fn owners_map(&self) -> MutexGuard<'_, HashMap<String, Arc<Owner>>> {
        lock_owners(&self.owners)
    }

    /// With the shell config's idle limit, starts (once) the task that ends
    /// the shells of owners idle that long. The owners stay, with their
    /// modes: an idle owner's next call starts a fresh shell in the mode it
    /// had. The task holds the owners weakly and ends with the tool.
    fn start_sweeper(&self) {
        let Some(limit) = self.config.shell.idle_limit else {
            return;
        };
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let owners = Arc::downgrade(&self.owners);
        let period = (limit / 4).max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(owners) = owners.upgrade() else {
                    return;
                };
                let idle: Vec<Arc<Owner>> = lock_owners(&owners)
                    .values()
                    .filter(|o| o.idle_for() >= limit)
                    .cloned()
                    .collect();
                drop(owners);
                let mut closing = tokio::task::JoinSet::new();
                for entry in idle {
                    // A call under way (or waiting its turn) holds the turn.
                    let Ok(mut current) = entry.turn.try_lock() else {
                        continue;
                    };
                    if let Some(mut c) = current.take() {
                        *entry.live() = None;
                        closing.spawn(async move { c.shell.close().await });
                    }
                }
                while closing.join_next().await.is_some() {}
            }
        });
    }

    fn owner(&self, owner: &str) -> Arc<Owner> {
        let mut owners = self.owners_map();
        if !owners.contains_key(owner) && owners.len() >= self.prune_at.load(Ordering::Relaxed) {
            self.prune(&mut owners);
        }
        Arc::clone(owners.entry(owner.to_owned()).or_default())
    }

    /// Forgets the owners that hold nothing: no call under way or waiting,
    /// no mode or directory of their own, no editor filesystem handed out, and no shell
    /// (closed, or ended by the shell's idle limit). Run when the map has
    /// doubled since the last pruning, so its cost is amortized and the map
    /// stays within twice the owners that hold something.
    fn prune(&self, owners: &mut HashMap<String, Arc<Owner>>) {
        owners.retain(|_, entry| {
            let Ok(current) = entry.turn.try_lock() else {
                return true;
            };
            let busy = Arc::strong_count(entry) > 1;
            let holds = entry.mode().is_some()
                || entry.dir().is_some()
                || entry.fs.get().is_some()
                || current.as_ref().is_some_and(|c| c.shell.is_running());
            busy || holds
        });
        self.prune_at
            .store((owners.len() * 2).max(PRUNE_FLOOR), Ordering::Relaxed);
    }

    /// The owner's mode: its own, else the policy's default.
    pub fn mode(&self, owner: &str) -> SandboxMode {
        self.owners_map()
            .get(owner)
            .and_then(|o| *o.mode())
            .unwrap_or(self.config.policy.mode)
    }

    /// What the kernel enforces for `mode` now (the error says why it
    /// cannot). Where namespaces failed and the policy allows degrading,
    /// this reports the weaker mode.
    pub fn enforcement(&self, mode: SandboxMode) -> Result<Enforcement, SandboxError> {
        if mode == SandboxMode::DangerFullAccess {
            return Ok(Enforcement {
                limits: self.config.shell.limits.check()?,
                ..Enforcement::none()
            });
        }
        let mut shell = self.config.shell.clone();
        let rules = WriteRules::new(&self.config.policy, mode, &self.config.shell.start_dir);
        crate::confine::confine(
            &mut shell,
            &rules,
            &self.config.policy,
            !self.weaker.load(Ordering::Relaxed),
        )
    }

    /// Changes `owner`'s mode, following the [`ModeChange`] rule when it has
    /// a persistent shell. The change waits for the owner's turn, so a call
    /// that already started finishes under the old mode and every later one
    /// runs under the new one; the owner's editor filesystem changes with
    /// it. The same mode keeps the shell.
    pub async fn set_mode(&self, owner: &str, mode: SandboxMode) -> Result<(), SandboxError> {
        let entry = self.owner(owner);
        let mut current = entry.turn.lock().await;
        let from = entry.mode().unwrap_or(self.config.policy.mode);
        if from == mode {
            return Ok(());
        }
        if current.as_ref().is_some_and(|c| c.shell.is_running()) {
            match self.config.mode_change {
                ModeChange::Reject => {
                    return Err(SandboxError::ShellOpen {
                        owner: owner.to_owned(),
                        from,
                        to: mode,
                    });
                }
                ModeChange::Reset => {
                    if let Some(mut c) = current.take() {
                        c.shell.close().await;
                    }
                    *entry.live() = None;
                }
            }
        }
        *entry.mode() = Some(mode);
        if let Some(fs) = entry.fs.get() {
            fs.set_mode(mode);
        }
        tracing::info!(owner, %from, to = %mode, "sandbox mode changed");
        Ok(())
    }

    /// Gives `owner` a workspace of its own instead of the shell config's
    /// `start_dir`: its shells start there (the first, and every one after
    /// a reset, a timeout, a cancellation, an idle close, a mode change, and
    /// an escalated call's); in workspace-write it is the owner's writable
    /// root in place of the shared workspace (with the policy's
    /// [`writable_roots`](crate::SandboxPolicy::writable_roots) beside it,
    /// and `/tmp` unless [`tmp_writable`](crate::SandboxPolicy::tmp_writable)
    /// is off), so that an owner cannot write its neighbours' directories
    /// nor the rest of the shared workspace; and its editor filesystem ([`SandboxedShell::editor_fs`]) is confined to
    /// the same root. Reading is not confined to it (the modes limit writes,
    /// not reads: hide what neighbours must not read with
    /// [`hidden_paths`](crate::SandboxPolicy::hidden_paths)). In
    /// danger-full-access it is only where the shell starts.
    ///
    /// The directory is checked first
    /// ([`ShellConfig::check_owner_dir`]: absolute and, with a local
    /// backend, an existing directory). Setting it again replaces it;
    /// [`SandboxedShell::close_owner`] and [`SandboxedShell::close_all`]
    /// forget it. It is refused with [`OwnerDirError::InUse`] while the
    /// owner's shell runs, while a call of it is under way, and once its
    /// editor filesystem was handed out: each was confined to the old root,
    /// and moving the owner later (at its next reset) would leave a shell
    /// or an editor writing where the host no longer means it to. Set it
    /// before the owner's first use, or close the owner first.
    pub fn set_owner_dir(&self, owner: &str, dir: impl Into<PathBuf>) -> Result<(), OwnerDirError> {
        let dir = dir.into();
        self.config.shell.check_owner_dir(owner, &dir)?;
        let in_use = |why| OwnerDirError::InUse {
            owner: owner.to_owned(),
            why,
        };
        let entry = self.owner(owner);
        let current = entry
            .turn
            .try_lock()
            .map_err(|_| in_use("a call of it is under way"))?;
        if current.as_ref().is_some_and(|c| c.shell.is_running()) {
            return Err(in_use("its shell is running"));
        }
        // Checked and set under the lock `editor_fs` makes the filesystem in.
        let mut own = entry.dir();
        if entry.fs.get().is_some() {
            return Err(in_use("its editor filesystem was handed out"));
        }
        *own = Some(dir);
        Ok(())
    }

    /// The workspace `owner` was given with
    /// [`SandboxedShell::set_owner_dir`], if any (else it works in the
    /// shell config's `start_dir`).
    pub fn owner_dir(&self, owner: &str) -> Option<PathBuf> {
        self.owners_map().get(owner).and_then(|o| o.dir().clone())
    }

    /// The editor's filesystem for `owner` ([`SandboxFs`]), in the owner's
    /// mode now and following every later [`SandboxedShell::set_mode`],
    /// over the owner's workspace (its own directory, when
    /// [`SandboxedShell::set_owner_dir`] gave it one), its writes bounded
    /// by the shell config's [`file_size`](dsh_pty::ResourceLimits::file_size)
    /// limit as the shell's are: the same one on every ask.
    pub fn editor_fs(&self, owner: &str) -> Arc<SandboxFs> {
        let entry = self.owner(owner);
        let dir = entry.dir();
        let fs = entry.fs.get_or_init(|| {
            let workspace = dir.as_deref().unwrap_or(&self.config.shell.start_dir);
            let fs = SandboxFs::new(self.config.policy.clone(), workspace);
            fs.set_file_size(self.config.shell.limits.file_size);
            if let Some(mode) = *entry.mode() {
                fs.set_mode(mode);
            }
            Arc::new(fs)
        });
        let fs = Arc::clone(fs);
        drop(dir);
        fs
    }

    /// Runs `work` in `owner`'s turn: after the owner's calls and mode
    /// changes that came before, and before those that come after. A host
    /// runs its other tools for the owner so (an MCP server its editor), so
    /// that they see the shell's effects in the order the model asked.
    pub async fn in_turn<T>(&self, owner: &str, work: impl Future<Output = T>) -> T {
        let entry = self.owner(owner);
        let _turn = entry.turn.lock().await;
        work.await
    }

    /// Closes `owner`'s shells and forgets the owner (its mode and
    /// directory included):
    /// everything it held is freed, and its next call starts as a new owner.
    /// A call of the owner under way or waiting ends with
    /// [`ShellError::Closed`].
    pub async fn close_owner(&self, owner: &str) {
        let entry = self.owners_map().remove(owner);
        if let Some(entry) = entry {
            close_together(vec![entry]).await;
        }
    }

    /// The owners this tool holds state for (a mode, a shell, a turn).
    pub fn owners(&self) -> Vec<String> {
        self.owners_map().keys().cloned().collect()
    }

    /// The tool's name: `bash`, `sh` or `pwsh`.
    pub fn tool_name(&self) -> &'static str {
        self.config.shell.dialect.tool_name()
    }

    /// Closes every shell, all at once, forgets every owner and refuses
    /// every later call with [`ShellError::Closed`].
    pub async fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
        let owners: Vec<Arc<Owner>> = self.owners_map().drain().map(|(_, o)| o).collect();
        close_together(owners).await;
    }

    /// The shell settings for `mode` before confinement: persistence and a
    /// description that says what the mode allows.
    fn shell_config(&self, mode: SandboxMode, persistent: bool) -> ShellConfig {
        let shell = &self.config.shell;
        let base = if persistent {
            shell.clone().persistent(true).effective_description()
        } else {
            shell.dialect.one_shot_description()
        };
        let description = match mode {
            SandboxMode::DangerFullAccess => base,
            _ => format!(
                "{base} Commands run in the {} sandbox{}.",
                mode.name(),
                if self.config.policy.network {
                    ""
                } else {
                    " without network access"
                }
            ),
        };
        shell
            .clone()
            .persistent(persistent)
            .description(Some(description))
    }

    /// Whether calls under `mode` (not escalated) keep a shell.
    fn persistent(&self, mode: SandboxMode) -> bool {
        match mode {
            SandboxMode::DangerFullAccess => self.config.shell.persistent,
            _ => self.config.restricted == Persistence::Persistent,
        }
    }

    /// A new shell for `mode` in the owner's workspace, confined (resolved
    /// now) unless the mode is danger-full-access. The confinement is prepared on tokio's blocking
    /// pool (paths resolved, the git placeholders made, the mount plan,
    /// the Landlock ruleset, the BPF programs), never on the runtime's
    /// threads; the shell itself starts at its first call, through its
    /// backend (which forks off the runtime too).
    async fn make(
        &self,
        entry: &Owner,
        mode: SandboxMode,
        persistent: bool,
    ) -> Result<Current, SandboxError> {
        let start_dir = entry
            .dir()
            .clone()
            .unwrap_or_else(|| self.config.shell.start_dir.clone());
        let shell = self
            .shell_config(mode, persistent)
            .start_dir(start_dir.clone());
        if mode == SandboxMode::DangerFullAccess {
            return Ok(Current {
                mode,
                shell: Shell::new(shell)?,
                enforcement: Enforcement::none(),
            });
        }
        let policy = self.config.policy.clone();
        let namespaces = !self.weaker.load(Ordering::Relaxed);
        let preparing = Arc::clone(&entry.preparing);
        let placeholders = Arc::clone(&entry.placeholders);
        let (made_tx, made_rx) = tokio::sync::oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let _serial = preparing.lock().unwrap_or_else(|p| p.into_inner());
            let made = prepare(shell, &policy, &start_dir, mode, namespaces, &placeholders);
            // A dropped call no longer waits: the shell (not started) is
            // dropped here; the placeholders stay with the owner.
            if let Err(unwanted) = made_tx.send(made) {
                drop(unwanted);
            }
        });
        made_rx.await.map_err(|_| {
            SandboxError::setup("preparing the confinement: the runtime is shutting down")
        })?
    }

    /// The tool's definition for `owner`'s current mode: in restricted
    /// modes it says which sandbox runs the commands (and, one-shot, that
    /// nothing persists), and offers `sandbox_permissions` and
    /// `justification` when an approver is configured. Nothing is confined
    /// or started to make it.
    pub fn spec(&self, owner: &str) -> ToolSpec {
        let mode = self.mode(owner);
        let spec = self.shell_config(mode, self.persistent(mode)).spec();
        if mode == SandboxMode::DangerFullAccess || self.config.approver.is_none() {
            return spec;
        }
        let wider = crate::escalation::wider_than(mode);
        spec.parameter(Parameter::optional(
            "sandbox_permissions",
            Kind::one_of(wider.iter().map(|m| m.name())),
            "Only to retry a command the sandbox blocked: run this one call with more access, after the user approves.",
        ))
        .parameter(Parameter::optional(
            "justification",
            Kind::String,
            "Required with `sandbox_permissions`: why this command needs the extra access, in one sentence for the user.",
        ))
    }

    /// Runs one tool call (`{"command", "sandbox_permissions"?, "justification"?}`,
    /// and `timeout` when the shell config's
    /// [`timeout_parameter`](dsh_shell_persistent::ShellConfig::timeout_parameter)
    /// offers it) and returns the model-visible text.
    pub async fn execute(&self, owner: &str, args: &Value) -> Result<String, SandboxError> {
        self.execute_with_cancel(owner, args, std::future::pending())
            .await
    }

    /// Like [`SandboxedShell::execute`], cancelled (and the shell reset) when
    /// `cancel` resolves.
    pub async fn execute_with_cancel(
        &self,
        owner: &str,
        args: &Value,
        cancel: impl Future<Output = ()>,
    ) -> Result<String, SandboxError> {
        let request = SandboxRequest::from_json_for(&self.config.shell, args)?;
        let outcome = self.call_with_cancel(owner, request, cancel).await?;
        Ok(crate::contract::render(&outcome))
    }

    /// Runs one call and returns what happened as data.
    pub async fn call(
        &self,
        owner: &str,
        request: SandboxRequest,
    ) -> Result<SandboxOutcome, SandboxError> {
        self.call_with_cancel(owner, request, std::future::pending())
            .await
    }

    /// Like [`SandboxedShell::call`], cancelled (and the shell reset) when
    /// `cancel` resolves.
    pub async fn call_with_cancel(
        &self,
        owner: &str,
        request: SandboxRequest,
        cancel: impl Future<Output = ()>,
    ) -> Result<SandboxOutcome, SandboxError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(SandboxError::Shell(ShellError::Closed));
        }
        self.start_sweeper();
        let entry = self.owner(owner);
        entry.touch();
        let mut current = entry.turn.lock().await;
        if entry.closed.load(Ordering::Acquire) {
            return Err(SandboxError::Shell(ShellError::Closed));
        }
        let result = self
            .call_in_turn(&entry, &mut current, owner, request, cancel)
            .await;
        entry.touch();
        result
    }

    /// [`SandboxedShell::call_with_cancel`] once the owner's turn came.
    async fn call_in_turn(
        &self,
        entry: &Owner,
        current: &mut Option<Current>,
        owner: &str,
        request: SandboxRequest,
        cancel: impl Future<Output = ()>,
    ) -> Result<SandboxOutcome, SandboxError> {
        let command = request.command.as_str();
        if command.is_empty() {
            return Err(SandboxError::Shell(ShellError::EmptyCommand));
        }
        let owner_mode = entry.mode().unwrap_or(self.config.policy.mode);
        let (mode, escalated) =
            crate::escalation::escalation(&self.config, owner, &request, owner_mode).await?;
        let persistent = !escalated && self.persistent(mode);
        let mut cancel = std::pin::pin!(cancel);
        loop {
            let mut fresh = None;
            let used = if persistent {
                self.persistent_current(entry, current, mode).await?
            } else {
                fresh.insert(self.make(entry, mode, false).await?)
            };
            tracing::debug!(owner, %mode, persistent, enforcement = ?used.enforcement, "sandboxed call");
            *entry.live() = Some(used.shell.handle());
            let mut shell_request = ShellRequest::new(command);
            shell_request.timeout = request.timeout;
            let result = used.shell.call_with(shell_request, cancel.as_mut()).await;
            let namespaces = used.enforcement.namespaces;
            drop(fresh);
            *entry.live() = current.as_ref().map(|c| c.shell.handle());
            match result {
                Ok(call) => {
                    let denial =
                        crate::contract::failed_on_denial(&call, namespaces).then(|| Denial {
                            wider: if self.config.approver.is_some() {
                                crate::escalation::wider_than(mode)
                            } else {
                                Vec::new()
                            },
                        });
                    return Ok(SandboxOutcome {
                        call,
                        mode,
                        escalated,
                        likely_denial: denial,
                    });
                }
                Err(ShellError::Spawn {
                    source: dsh_pty::PtyError::Confine(err),
                    ..
                }) => {
                    if persistent {
                        *current = None;
                        *entry.live() = None;
                    }
                    if namespaces && self.config.policy.degrade {
                        tracing::warn!(%err, "namespaces unavailable; the policy allows the weaker mode");
                        self.weaker.store(true, Ordering::Relaxed);
                        continue;
                    }
                    return Err(SandboxError::NotEnforceable {
                        missing: if namespaces {
                            format!("namespaces and a private filesystem view for the shell: {err}")
                        } else {
                            format!("the shell's confinement: {err}")
                        },
                    });
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// The owner's persistent shell for `mode`: the current one while its
    /// process lives (a reset makes the next call resolve the confinement
    /// again), else a new one.
    async fn persistent_current<'a>(
        &self,
        entry: &Owner,
        current: &'a mut Option<Current>,
        mode: SandboxMode,
    ) -> Result<&'a mut Current, SandboxError> {
        let reusable = current
            .as_ref()
            .is_some_and(|c| c.mode == mode && c.shell.is_running());
        if !reusable {
            // The model learns of a cancellation that reset the old shell.
            let after_cancel = current.as_ref().is_some_and(|c| c.shell.after_cancel());
            // Drop the old shell (and its placeholders) before making new ones.
            *current = None;
            let mut made = self.make(entry, mode, true).await?;
            if after_cancel {
                made.shell.mark_after_cancel();
            }
            *current = Some(made);
        }
        current
            .as_mut()
            .ok_or(SandboxError::Shell(ShellError::Closed))
    }
}

/// [`SandboxedShell::make`]'s blocking part: a confined shell for `mode`.
fn prepare(
    mut shell: ShellConfig,
    policy: &crate::SandboxPolicy,
    start_dir: &Path,
    mode: SandboxMode,
    namespaces: bool,
    placeholders: &Mutex<Placeholders>,
) -> Result<Current, SandboxError> {
    let rules = WriteRules::new(policy, mode, start_dir);
    placeholders
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .merge(Placeholders::create(&rules));
    let enforcement = crate::confine::confine(&mut shell, &rules, policy, namespaces)?;
    Ok(Current {
        mode,
        shell: Shell::new(shell)?,
        enforcement,
    })
}

fn lock_owners(
    owners: &Mutex<HashMap<String, Arc<Owner>>>,
) -> MutexGuard<'_, HashMap<String, Arc<Owner>>> {
    owners.lock().unwrap_or_else(|p| p.into_inner())
}

/// Closes the owners' shells at once (one grace period), refusing the calls
/// that still wait for their turns.
async fn close_together(owners: Vec<Arc<Owner>>) {
    let _shared = dsh_pty::SharedScans::new();
    let mut closing = tokio::task::JoinSet::new();
    for entry in owners {
        entry.closed.store(true, Ordering::Release);
        let live = entry.live().take();
        if let Some(handle) = live {
            // The owner (and so its shell process) is held until the shell
            // is closed: dropped first, it would be killed without grace.
            closing.spawn(async move {
                handle.close().await;
                drop(entry);
            });
        }
    }
    while closing.join_next().await.is_some() {}
}
