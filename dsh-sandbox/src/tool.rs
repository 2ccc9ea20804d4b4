//! The shell tool under the sandbox: per owner, its mode, its shell and
//! what confines it, behind one turn; the rules for changing a mode; the
//! tool's definition.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use dsh_shell_persistent::{
    OwnerDirError, OwnerKind, OwnerTurn, Seat, Shell, ShellConfig, ShellError, ShellPool,
    ShellRequest, ToolSpec,
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
    pub(crate) config: SandboxConfig,
    /// The owners: their turns, shells, modes, directories and idle close.
    pub(crate) pool: ShellPool<Confined>,
    /// Namespaces failed and the policy allows the weaker mode.
    weaker: AtomicBool,
    /// The shell states of the copy-on-write workspace's snapshots.
    pub(crate) snapshots: crate::rollout::Snapshots,
    /// The egress proxy, when the policy allows domains.
    egress: Option<Arc<crate::egress::Egress>>,
}

/// The sandbox's kind of pool owner: a shell with its mode and what
/// confines it, and beside the turn the owner's mode, editor filesystem and
/// git placeholders.
#[derive(Debug)]
pub(crate) struct Confined;

impl OwnerKind for Confined {
    type Seat = Current;
    type State = OwnerState;

    fn holds(state: &OwnerState) -> bool {
        state.mode().is_some() || state.fs.get().is_some() || state.start_state().is_some()
    }

    fn dir_fixed(state: &OwnerState) -> Option<&'static str> {
        state
            .fs
            .get()
            .map(|_| "its editor filesystem was handed out")
    }

    fn dropped_running(state: &OwnerState) {
        // A shell of the owner killed just now (the tool dropped without
        // closing it) may still be dying, and could write `HEAD` the moment
        // its placeholder went: the placeholders stay on disk then, as a
        // crash leaves them (empty, no repository to git).
        state
            .placeholders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .leave();
    }
}

/// What an owner keeps outside its turn.
#[derive(Debug, Default)]
pub(crate) struct OwnerState {
    /// The owner's own mode; written only in its turn, read at any time.
    mode: Mutex<Option<SandboxMode>>,
    /// The owner's editor filesystem, once a host asked for it.
    pub(crate) fs: OnceLock<Arc<SandboxFs>>,
    /// Held by the job that prepares one of the owner's confined shells
    /// on tokio's blocking pool, from the git placeholders to handing the
    /// result over (or dropping it, when the call that asked was dropped
    /// meanwhile): one preparation of the owner at a time.
    preparing: Arc<Mutex<()>>,
    /// The git placeholders the owner's confined shells needed, kept until
    /// the owner goes (last: after its shell was killed), so that no
    /// reset, one-shot call or mode change leaves its roots without them.
    placeholders: Arc<Mutex<Placeholders>>,
    /// The shell state the owner's next shell starts with (a fork's or a
    /// snapshot's), applied once.
    pub(crate) start_state: Mutex<Option<dsh_shell_persistent::ShellState>>,
}

/// A shell, the mode it runs under and what the kernel enforces for it.
#[derive(Debug)]
pub(crate) struct Current {
    pub(crate) mode: SandboxMode,
    pub(crate) shell: Shell,
    pub(crate) enforcement: Enforcement,
    /// A confined shell's scratch directory (its long commands), shown
    /// read-only in its view; removed with the shell.
    _scratch: Option<tempfile::TempDir>,
}

impl Seat for Current {
    fn shell(&self) -> &Shell {
        &self.shell
    }

    fn shell_mut(&mut self) -> &mut Shell {
        &mut self.shell
    }
}

impl OwnerState {
    pub(crate) fn mode(&self) -> MutexGuard<'_, Option<SandboxMode>> {
        self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SandboxedShell {
    /// The tool, once its shell settings are validated. No shell starts
    /// until a call; a restricted call whose confinement cannot be enforced
    /// fails closed with the reason.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        let egress = crate::egress::Egress::for_config(&config)?.map(Arc::new);
        Ok(SandboxedShell {
            egress,
            pool: ShellPool::of_kind(config.shell.clone())?,
            weaker: AtomicBool::new(false),
            snapshots: crate::rollout::Snapshots::default(),
            config,
        })
    }

    /// The owner's mode: its own, else the policy's default.
    pub fn mode(&self, owner: &str) -> SandboxMode {
        self.pool
            .peek(owner, |state| *state.mode())
            .flatten()
            .unwrap_or(self.config.policy.mode)
    }

    /// What the kernel enforces for `mode` now (the error says why it
    /// cannot). Where namespaces failed and the policy allows degrading,
    /// this reports the weaker mode.
    pub fn enforcement(&self, mode: SandboxMode) -> Result<Enforcement, SandboxError> {
        if mode == SandboxMode::DangerFullAccess {
            let mut enforcement = Enforcement::none();
            (enforcement.limits, enforcement.tmp_limits) = crate::confine::without_private_tmp(
                &self.config.shell.limits,
                crate::confine::tmp_limits(&self.config.policy),
                None,
            )?;
            return Ok(enforcement);
        }
        let mut shell = self.config.shell.clone();
        let policy = self.restricted_policy();
        let rules = WriteRules::new(&policy, mode, &self.config.shell.start_dir);
        crate::confine::confine(
            &mut shell,
            &rules,
            &policy,
            !self.weaker.load(Ordering::Relaxed),
            None,
        )
    }

    /// Changes `owner`'s mode, following the [`ModeChange`] rule when it has
    /// a persistent shell. The change waits for the owner's turn, so a call
    /// that already started finishes under the old mode and every later one
    /// runs under the new one; the owner's editor filesystem changes with
    /// it. The same mode keeps the shell.
    pub async fn set_mode(&self, owner: &str, mode: SandboxMode) -> Result<(), SandboxError> {
        let mut turn = self.pool.turn(owner).await?;
        let from = turn.state().mode().unwrap_or(self.config.policy.mode);
        if from == mode {
            return Ok(());
        }
        let (current, state) = turn.parts();
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
                }
            }
        }
        *state.mode() = Some(mode);
        if let Some(fs) = state.fs.get() {
            fs.set_mode(mode);
        }
        // A closed owner keeps nothing live anyway.
        let _ = turn.set_live(None);
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
        self.pool.set_owner_dir(owner, dir)
    }

    /// The workspace `owner` was given with
    /// [`SandboxedShell::set_owner_dir`], if any (else it works in the
    /// shell config's `start_dir`).
    pub fn owner_dir(&self, owner: &str) -> Option<PathBuf> {
        self.pool.owner_dir(owner)
    }

    /// The editor's filesystem for `owner` ([`SandboxFs`]), in the owner's
    /// mode now and following every later [`SandboxedShell::set_mode`],
    /// over the owner's workspace (its own directory, when
    /// [`SandboxedShell::set_owner_dir`] gave it one), its writes bounded
    /// by the shell config's [`file_size`](dsh_pty::ResourceLimits::file_size)
    /// limit as the shell's are: the same one on every ask.
    pub fn editor_fs(&self, owner: &str) -> Arc<SandboxFs> {
        self.pool.with_owner(owner, |dir, state| {
            let fs = state.fs.get_or_init(|| {
                let workspace = dir.unwrap_or(&self.config.shell.start_dir);
                let fs = SandboxFs::new(self.restricted_policy(), workspace);
                fs.set_file_size(self.config.shell.limits.file_size);
                #[cfg(target_os = "linux")]
                if self.config.copy_on_write.is_some() {
                    fs.set_view(None);
                }
                if let Some(mode) = *state.mode() {
                    fs.set_mode(mode);
                }
                Arc::new(fs)
            });
            Arc::clone(fs)
        })
    }

    /// Runs `work` in `owner`'s turn: after the owner's calls and mode
    /// changes that came before, and before those that come after. A host
    /// runs its other tools for the owner so (an MCP server its editor), so
    /// that they see the shell's effects in the order the model asked.
    pub async fn in_turn<T>(&self, owner: &str, work: impl Future<Output = T>) -> T {
        self.pool.in_turn(owner, work).await
    }

    /// Closes `owner`'s shells and forgets the owner (its mode and
    /// directory included):
    /// everything it held is freed, and its next call starts as a new owner.
    /// A call of the owner under way or waiting ends with
    /// [`ShellError::Closed`].
    pub async fn close_owner(&self, owner: &str) {
        self.pool.close_owner(owner).await;
        self.remove_layer(owner).await;
    }

    /// The owners this tool holds state for (a mode, a shell, a turn).
    pub fn owners(&self) -> Vec<String> {
        self.pool.owners()
    }

    /// The tool's name: `bash`, `sh` or `pwsh`.
    pub fn tool_name(&self) -> &'static str {
        self.config.shell.dialect.tool_name()
    }

    /// Closes every shell, all at once, forgets every owner and refuses
    /// every later call with [`ShellError::Closed`].
    pub async fn close_all(&self) {
        self.pool.close_all().await;
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

    /// The policy of the restricted modes' shells and editors: the
    /// config's, with a copy-on-write workspace's layers directory hidden
    /// too (beside the view's own cover over it, which a hiding overlay
    /// of a directory above it would not show).
    pub(crate) fn restricted_policy(&self) -> crate::SandboxPolicy {
        let mut policy = self.config.policy.clone();
        if let Some(workspace) = &self.config.copy_on_write {
            policy.hidden_paths.push(workspace.cow_dir().to_owned());
        }
        policy
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
        owner: &str,
        state: &OwnerState,
        start_dir: PathBuf,
        mode: SandboxMode,
        persistent: bool,
    ) -> Result<Current, SandboxError> {
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut shell = self
            .shell_config(mode, persistent)
            .start_dir(start_dir.clone());
        // The view first: a restricted mode's namespaces are then made
        // inside the view's, and its walls built over the overlay.
        if let Some(workspace) = &self.config.copy_on_write {
            if mode != SandboxMode::DangerFullAccess && self.config.policy.bubblewrap.is_some() {
                return Err(SandboxError::CopyOnWriteBubblewrap);
            }
            #[cfg(target_os = "linux")]
            shell
                .pre_exec
                .insert(0, crate::rollout::view_hook(workspace, owner, &start_dir)?);
            #[cfg(not(target_os = "linux"))]
            let _ = (workspace, owner);
        }
        if mode == SandboxMode::DangerFullAccess {
            refuse_tmp_bounds(&shell, &self.config.policy)?;
            return Ok(Current {
                mode,
                shell: Shell::new(shell)?,
                enforcement: Enforcement::none(),
                _scratch: None,
            });
        }
        let policy = self.restricted_policy();
        let namespaces = !self.weaker.load(Ordering::Relaxed);
        let placeholders_needed = self.config.copy_on_write.is_none();
        let preparing = Arc::clone(&state.preparing);
        let placeholders = Arc::clone(&state.placeholders);
        let egress = self.egress.clone();
        let (made_tx, made_rx) = tokio::sync::oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let _serial = preparing.lock().unwrap_or_else(|p| p.into_inner());
            let placeholders = placeholders_needed.then_some(&*placeholders);
            let made = prepare(
                shell,
                (&policy, egress.as_deref()),
                &start_dir,
                mode,
                namespaces,
                placeholders,
            );
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

    /// The model's JSON arguments as a request (`{"command",
    /// "sandbox_permissions"?, "justification"?}`, and `timeout` when the
    /// shell config's
    /// [`timeout_parameter`](dsh_shell_persistent::ShellConfig::timeout_parameter)
    /// offers it), for [`SandboxedShell::call`].
    pub fn parse_request(&self, args: &Value) -> Result<SandboxRequest, SandboxError> {
        SandboxRequest::from_json_for(&self.config.shell, args)
    }

    /// A convenience: runs one tool call given as the model's JSON
    /// arguments ([`SandboxedShell::parse_request`]) and returns the
    /// model-visible text ([`contract::render`](crate::contract::render) of
    /// [`SandboxedShell::call`], never cancelled).
    pub async fn execute(&self, owner: &str, args: &Value) -> Result<String, SandboxError> {
        let request = self.parse_request(args)?;
        let outcome = self.call(owner, request, std::future::pending()).await?;
        Ok(crate::contract::render(&outcome))
    }

    /// Runs one call in `owner`'s turn and returns what happened as data.
    /// It is cancelled when `cancel` resolves (`std::future::pending()`
    /// never does): the shell is then reset and the result discarded;
    /// dropping the returned future has the same effect. Every other call
    /// method is this one.
    pub async fn call(
        &self,
        owner: &str,
        request: impl Into<SandboxRequest>,
        cancel: impl Future<Output = ()>,
    ) -> Result<SandboxOutcome, SandboxError> {
        let request = request.into();
        if request.command.is_empty() {
            return Err(SandboxError::Shell(ShellError::EmptyCommand));
        }
        let mut turn = self.pool.turn(owner).await?;
        let owner_mode = turn.state().mode().unwrap_or(self.config.policy.mode);
        let (mode, escalated) =
            crate::escalation::escalation(&self.config, owner, &request, owner_mode).await?;
        let persistent = !escalated && self.persistent(mode);
        let mut cancel = std::pin::pin!(cancel);
        loop {
            let mut fresh = None;
            let start_dir = turn.start_dir();
            let used = if persistent {
                self.persistent_current(&mut turn, mode).await?
            } else {
                fresh.insert(
                    self.make(owner, turn.state(), start_dir, mode, false)
                        .await?,
                )
            };
            tracing::debug!(owner, %mode, persistent, enforcement = ?used.enforcement, "sandboxed call");
            let handle = used.shell.handle();
            let mut shell_request = ShellRequest::new(request.command.as_str());
            shell_request.timeout = request.timeout;
            let namespaces = used.enforcement.namespaces;
            turn.set_live(Some(handle))?;
            let result = match fresh.as_mut() {
                Some(used) => used.shell.call(shell_request, cancel.as_mut()).await,
                None => match turn.parts().0 {
                    Some(used) => used.shell.call(shell_request, cancel.as_mut()).await,
                    None => Err(ShellError::Closed),
                },
            };
            drop(fresh);
            let kept = turn.parts().0.as_ref().map(|c| c.shell.handle());
            // Closed meanwhile: closing ended the call's shell, which
            // answers so below.
            let _ = turn.set_live(kept);
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
                Err(err @ ShellError::Spawn { .. }) if self.config.copy_on_write.is_some() => {
                    if persistent {
                        *turn.parts().0 = None;
                        let _ = turn.set_live(None);
                    }
                    return Err(crate::rollout::unavailable(err));
                }
                Err(ShellError::Spawn {
                    source: dsh_pty::PtyError::Confine(err),
                    ..
                }) => {
                    if persistent {
                        *turn.parts().0 = None;
                        let _ = turn.set_live(None);
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
    pub(crate) async fn persistent_current<'a>(
        &self,
        turn: &'a mut OwnerTurn<Confined>,
        mode: SandboxMode,
    ) -> Result<&'a mut Current, SandboxError> {
        let start_dir = turn.start_dir();
        let owner = turn.name().to_owned();
        let (current, state) = turn.parts();
        let reusable = current
            .as_ref()
            .is_some_and(|c| c.mode == mode && c.shell.is_running());
        if !reusable {
            // The model learns of a cancellation that reset the old shell.
            let after_cancel = current.as_ref().is_some_and(|c| c.shell.after_cancel());
            // Drop the old shell (its process killed) before making the new
            // one; the placeholders stay with the owner.
            *current = None;
            let mut made = self.make(&owner, state, start_dir, mode, true).await?;
            if after_cancel {
                made.shell.mark_after_cancel();
            }
            made.shell.set_start_state(state.start_state().take());
            *current = Some(made);
        }
        current
            .as_mut()
            .ok_or(SandboxError::Shell(ShellError::Closed))
    }
}

/// Refuses to start `shell` without a private `/tmp` when the policy bounds
/// one and the limits are not best effort (with the shell's own limits
/// that cannot be kept, as its start would have named them).
fn refuse_tmp_bounds(
    shell: &ShellConfig,
    policy: &crate::SandboxPolicy,
) -> Result<(), SandboxError> {
    let tmp = crate::confine::tmp_limits(policy);
    if tmp.is_empty() {
        return Ok(());
    }
    match crate::confine::without_private_tmp(&shell.limits, tmp, Some(shell.dialect.tool_name())) {
        Err(refused @ SandboxError::LimitsNotHeld { .. }) => Err(refused),
        // Anything else is the shell's start's to say.
        _ => Ok(()),
    }
}

/// [`SandboxedShell::make`]'s blocking part: a confined shell for `mode`.
fn prepare(
    mut shell: ShellConfig,
    (policy, egress): (&crate::SandboxPolicy, Option<&crate::egress::Egress>),
    start_dir: &Path,
    mode: SandboxMode,
    namespaces: bool,
    placeholders: Option<&Mutex<Placeholders>>,
) -> Result<Current, SandboxError> {
    let rules = WriteRules::new(policy, mode, start_dir);
    if let Some(placeholders) = placeholders {
        placeholders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .merge(Placeholders::create(&rules));
    }
    // Seatbelt makes no private /tmp, and keeps no limit of its own.
    #[cfg(target_os = "macos")]
    refuse_tmp_bounds(&shell, policy)?;
    // Long commands go through files, which the shell's private /tmp
    // would hide: a directory of this shell's own, shown read-only in its
    // view (a local backend's only; another writes them on its side).
    let scratch = if shell.backend.is_local() {
        Some(scratch_dir()?)
    } else {
        None
    };
    shell.scratch_dir = scratch.as_ref().map(|d| d.path().to_owned());
    let enforcement = crate::confine::confine(&mut shell, &rules, policy, namespaces, egress)?;
    Ok(Current {
        mode,
        shell: Shell::new(shell)?,
        enforcement,
        _scratch: scratch,
    })
}

/// A new private directory (mode 0700) under the system's temporary
/// directory, at its canonical path.
fn scratch_dir() -> Result<tempfile::TempDir, SandboxError> {
    let tmp = std::fs::canonicalize(std::env::temp_dir())
        .map_err(|e| SandboxError::setup_from("the system's temporary directory", e))?;
    tempfile::Builder::new()
        .prefix("dsh-scratch-")
        .tempdir_in(tmp)
        .map_err(|e| SandboxError::setup_from("making the shell's scratch directory", e))
}
