//! Copy-on-write workspaces on the sandbox's owners
//! ([`SandboxConfig::copy_on_write`](crate::SandboxConfig::copy_on_write)):
//! each owner's view of the base, made with its shell, and what a host does
//! with it — the owner's changes and diff, reset, fork, snapshot and
//! restore — each in the owner's turn, so in order with its calls.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use dsh_shell_persistent::{ShellError, ShellState};
use dsh_workspace::{Change, SnapshotId, Workspace, WorkspaceError};

use crate::tool::{Current, OwnerState};
use crate::{SandboxError, SandboxedShell};

/// What a snapshot keeps beside the files the workspace keeps: the shell's
/// state then (`None`: the owner had no shell).
#[derive(Debug, Default)]
pub(crate) struct Snapshots {
    states: Mutex<HashMap<SnapshotId, Option<ShellState>>>,
}

impl Snapshots {
    fn states(&self) -> std::sync::MutexGuard<'_, HashMap<SnapshotId, Option<ShellState>>> {
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The hook that runs `owner`'s shell in its view of `workspace`, starting
/// in `start_dir`.
#[cfg(target_os = "linux")]
pub(crate) fn view_hook(
    workspace: &Workspace,
    owner: &str,
    start_dir: &std::path::Path,
) -> Result<Arc<dyn dsh_pty::PreExec>, SandboxError> {
    let layer = workspace.layer(owner)?;
    let view = dsh_confine::CopyOnWriteView::new(
        workspace.base(),
        &layer.upper,
        &layer.work,
        &[workspace.cow_dir().to_owned()],
        start_dir,
    )
    .map_err(crate::error::from_confine)?;
    Ok(Arc::new(view))
}

/// A shell whose start failed in its copy-on-write view (the kernel
/// refused a namespace or the overlay): the reason, for the model and the
/// host alike.
pub(crate) fn unavailable(error: ShellError) -> SandboxError {
    match error {
        ShellError::Spawn { source, .. } => SandboxError::CopyOnWriteUnavailable {
            reason: format!(
                "{}; it needs user namespaces (or root), mount and PID namespaces, and an overlayfs mount of the base (in a user namespace: Linux 5.11 or newer)",
                crate::contract::chain(&source)
            ),
        },
        other => SandboxError::Shell(other),
    }
}

/// Runs blocking workspace work off the runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, WorkspaceError> + Send + 'static,
) -> Result<T, SandboxError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SandboxError::setup(format!("a workspace task failed: {e}")))?
        .map_err(SandboxError::from)
}

impl SandboxedShell {
    /// The copy-on-write workspace every owner has a view of, if the
    /// config has one.
    pub fn copy_on_write(&self) -> Option<&Arc<Workspace>> {
        self.config.copy_on_write.as_ref()
    }

    fn workspace(&self) -> Result<Arc<Workspace>, SandboxError> {
        self.config
            .copy_on_write
            .clone()
            .ok_or(SandboxError::NoCopyOnWrite)
    }

    /// Runs `work` in `owner`'s turn ([`SandboxedShell::in_turn`]) with its
    /// copy-on-write view open to its editor
    /// ([`SandboxedShell::editor_fs`]): the owner's shell is started first
    /// if it has none, and the editor reads and writes as that shell sees
    /// the filesystem while `work` runs (outside it, the editor's calls
    /// fail saying the view is not running). Without a copy-on-write
    /// workspace, this is [`SandboxedShell::in_turn`].
    pub async fn in_view<T>(
        &self,
        owner: &str,
        work: impl Future<Output = T>,
    ) -> Result<T, SandboxError> {
        if self.copy_on_write().is_none() {
            return Ok(self.in_turn(owner, work).await);
        }
        let fs = self.editor_fs(owner);
        let mut turn = self.pool.turn(owner).await?;
        let mode = turn.state().mode().unwrap_or(self.config.policy.mode);
        let current = self.persistent_current(&mut turn, mode).await?;
        current.shell.start().await.map_err(unavailable)?;
        let pid = current.shell.session_pid();
        // A restricted mode's shell is in the sandbox's namespaces, made
        // inside the view's: its root is the view with the walls on top.
        let confined = current.enforcement.namespaces;
        let handle = current.shell.handle();
        turn.set_live(Some(handle))?;
        #[cfg(target_os = "linux")]
        {
            let root = pid
                .ok_or_else(|| SandboxError::setup("the owner's shell has no process"))
                .and_then(|pid| {
                    dsh_confine::CopyOnWriteView::root_of(pid as i32, confined).map_err(|e| {
                        SandboxError::setup_from("opening the owner's copy-on-write view", e)
                    })
                })?;
            fs.set_view(Some(root));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (pid, confined, &fs);
        let out = work.await;
        #[cfg(target_os = "linux")]
        fs.set_view(None);
        Ok(out)
    }

    /// Makes one view and its shell (in the policy's mode, with its
    /// confinement) and ends them: what a host runs at its start, so that
    /// a kernel that cannot give copy-on-write workspaces (no user
    /// namespaces, an overlay it refuses) or the sandbox over them is
    /// named then ([`SandboxError::CopyOnWriteUnavailable`]), not at an
    /// owner's first call. Nothing is left behind. Without a copy-on-write
    /// workspace, [`SandboxError::NoCopyOnWrite`].
    pub async fn check_copy_on_write(&self) -> Result<(), SandboxError> {
        /// Not an HTTP session's id, nor the stdio server's owner.
        const PROBE: &str = "dsh-copy-on-write-probe";
        self.workspace()?;
        let made = self.in_view(PROBE, async {}).await;
        self.close_owner(PROBE).await;
        made
    }

    /// What `owner` changed in its view of the base: each path added,
    /// modified or deleted (a link the owner made is reported as a link,
    /// never with what it points to).
    pub async fn changes(&self, owner: &str) -> Result<Vec<Change>, SandboxError> {
        let workspace = self.workspace()?;
        let owner = owner.to_owned();
        let _turn = self.pool.turn(&owner).await?;
        blocking(move || workspace.changes(&owner)).await
    }

    /// `owner`'s changes as a unified diff, paths relative to the base
    /// (`git apply` takes it in a copy of the base).
    pub async fn diff(&self, owner: &str) -> Result<String, SandboxError> {
        let workspace = self.workspace()?;
        let owner = owner.to_owned();
        let _turn = self.pool.turn(&owner).await?;
        blocking(move || workspace.diff(&owner)).await
    }

    /// Puts `owner`'s view back to the base and its shell back to a fresh
    /// one (its process tree ended; its next call starts a new shell).
    ///
    /// The old view's end does not hold up the next: the owner gets an
    /// empty layer at once, while the old shell is killed and, once its
    /// processes have all ended (its mounts with them), its layer removed
    /// in the background.
    pub async fn reset_workspace(&self, owner: &str) -> Result<(), SandboxError> {
        let workspace = self.workspace()?;
        let mut turn = self.pool.turn(owner).await?;
        let old = turn.parts().0.take();
        let _ = turn.set_live(None);
        *turn.state().start_state() = None;
        let owner = owner.to_owned();
        let (retired, replaced) = match blocking(move || workspace.reset_retiring(&owner)).await {
            Ok(retired) => (retired, Ok(())),
            Err(e) => (None, Err(e)),
        };
        // The old shell is ended whether or not the layer was replaced.
        tokio::spawn(async move {
            end_shell(&mut { old }).await;
            if let Some(retired) = retired
                && let Err(e) = blocking(move || retired.remove()).await
            {
                tracing::warn!(error = %e, "removing a reset owner's former layer failed");
            }
        });
        replaced
    }

    /// Makes `to` a copy of `from` now: its view a copy of `from`'s (its
    /// own from then on), its next shell started with `from`'s shell state
    /// (working directory, variables exported or not, arrays, functions,
    /// aliases, `set` and `shopt` options, umask: see [`ShellState`]) and
    /// `from`'s mode. No process is copied. What `to` had is replaced.
    pub async fn fork(&self, from: &str, to: &str) -> Result<(), SandboxError> {
        let workspace = self.workspace()?;
        if from == to {
            return Err(SandboxError::setup("an owner cannot be forked onto itself"));
        }
        // Both turns, always in the same order: two forks between the same
        // owners cannot wait on each other.
        let (first, second) = if from < to { (from, to) } else { (to, from) };
        let mut first_turn = self.pool.turn(first).await?;
        let mut second_turn = self.pool.turn(second).await?;
        let (source, target) = if from < to {
            (&mut first_turn, &mut second_turn)
        } else {
            (&mut second_turn, &mut first_turn)
        };
        let state = capture(source.parts().0).await?;
        let mode = *source.state().mode();
        let dir = self.owner_dir(from);
        end_shell(target.parts().0).await;
        let _ = target.set_live(None);
        *target.state().start_state() = state;
        *target.state().mode() = mode;
        if let Some(fs) = target.state().fs.get() {
            fs.set_mode(mode.unwrap_or(self.config.policy.mode));
        }
        let (from_owned, to_owned) = (from.to_owned(), to.to_owned());
        blocking(move || workspace.fork(&from_owned, &to_owned)).await?;
        drop(first_turn);
        drop(second_turn);
        if let Some(dir) = dir {
            // The new owner has no shell yet, so its directory can be set.
            let _ = self.set_owner_dir(to, dir);
        }
        Ok(())
    }

    /// Keeps `owner`'s view and shell state now under a new id, for
    /// [`SandboxedShell::restore`] into any owner.
    pub async fn snapshot(&self, owner: &str) -> Result<SnapshotId, SandboxError> {
        let workspace = self.workspace()?;
        let mut turn = self.pool.turn(owner).await?;
        let state = capture(turn.parts().0).await?;
        let owner = owner.to_owned();
        let id = blocking(move || workspace.snapshot(&owner)).await?;
        self.snapshots.states().insert(id, state);
        Ok(id)
    }

    /// Makes `owner` what `snapshot` kept: its view the snapshot's files,
    /// its shell a new one started with the snapshot's shell state.
    pub async fn restore(&self, owner: &str, snapshot: &SnapshotId) -> Result<(), SandboxError> {
        let workspace = self.workspace()?;
        let Some(state) = self.snapshots.states().get(snapshot).cloned() else {
            return Err(WorkspaceError::SnapshotNotFound {
                id: snapshot.to_string(),
            }
            .into());
        };
        let mut turn = self.pool.turn(owner).await?;
        end_shell(turn.parts().0).await;
        let _ = turn.set_live(None);
        *turn.state().start_state() = state;
        let (owner, snapshot) = (owner.to_owned(), *snapshot);
        blocking(move || workspace.restore(&owner, &snapshot)).await
    }

    /// Deletes `snapshot` (its files and the shell state it kept).
    pub async fn delete_snapshot(&self, snapshot: &SnapshotId) -> Result<(), SandboxError> {
        let workspace = self.workspace()?;
        if self.snapshots.states().remove(snapshot).is_none() {
            return Err(WorkspaceError::SnapshotNotFound {
                id: snapshot.to_string(),
            }
            .into());
        }
        let snapshot = *snapshot;
        blocking(move || workspace.delete_snapshot(&snapshot)).await
    }

    /// Forgets `owner`'s layer (after its shell was closed).
    pub(crate) async fn remove_layer(&self, owner: &str) {
        if let Ok(workspace) = self.workspace() {
            let owner = owner.to_owned();
            if let Err(e) = blocking(move || workspace.remove(&owner)).await {
                tracing::warn!(error = %e, "removing a closed owner's copy-on-write layer failed");
            }
        }
    }
}

impl OwnerState {
    /// The shell state the owner's next shell starts with.
    pub(crate) fn start_state(&self) -> std::sync::MutexGuard<'_, Option<ShellState>> {
        self.start_state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Ends the owner's shell, if it has one: its view unmounts with it.
async fn end_shell(current: &mut Option<Current>) {
    if let Some(mut current) = current.take() {
        // Its view goes with it: nothing is left to end gracefully.
        current.shell.kill().await;
    }
}

/// The state of the owner's shell, if it has a live one.
async fn capture(current: &mut Option<Current>) -> Result<Option<ShellState>, SandboxError> {
    match current {
        Some(c) if c.shell.is_running() => Ok(c.shell.capture_state().await?),
        _ => Ok(None),
    }
}
