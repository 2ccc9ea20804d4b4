//! The settings of a [`SandboxedShell`](crate::SandboxedShell)(crate::SandboxedShell).

use std::sync::Arc;

use dsh_shell_persistent::ShellConfig;

use crate::{Approver, SandboxPolicy};

/// What happens when an owner's mode changes while it has a persistent shell
/// (or one is being spawned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModeChange {
    /// The change fails; the shell must be closed first.
    #[default]
    Reject,
    /// The shell is closed and the next call runs under the new mode.
    Reset,
}

/// How the restricted modes run commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Persistence {
    /// One persistent confined shell per owner (the default): the working
    /// directory, exports, functions and an activated virtualenv persist,
    /// as in danger-full-access. The confinement is resolved when the shell
    /// is created.
    #[default]
    Persistent,
    /// A fresh confined shell per call; nothing persists.
    OneShot,
}

/// Settings of a [`SandboxedShell`](crate::SandboxedShell): [`SandboxConfig::new`] and a setter
/// per field (the fields are public to read and assign; new settings arrive
/// as new fields with defaults).
///
/// ```
/// use dsh_sandbox::{ModeChange, Persistence, SandboxConfig, SandboxPolicy};
/// use dsh_shell_persistent::ShellConfig;
/// let config = SandboxConfig::new(SandboxPolicy::default(), ShellConfig::new("/tmp"))
///     .mode_change(ModeChange::Reset)
///     .restricted(Persistence::OneShot);
/// assert_eq!(config.restricted, Persistence::OneShot);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SandboxConfig {
    /// The policy (default mode, roots, network, degrade).
    pub policy: SandboxPolicy,
    /// The shell settings; `start_dir` is the workspace root of every owner
    /// without one of its own
    /// ([`SandboxedShell::set_owner_dir`](crate::SandboxedShell::set_owner_dir)).
    pub shell: ShellConfig,
    /// The rule for mode changes.
    pub mode_change: ModeChange,
    /// Who approves escalations; `None` refuses every escalation.
    pub approver: Option<Arc<dyn Approver>>,
    /// Whether restricted modes keep a persistent shell.
    pub restricted: Persistence,
    /// Every owner's copy-on-write view of the workspace's base, at the
    /// base's own path (`None`: owners share the host's files). See the
    /// crate docs' "Copy-on-write workspaces".
    pub copy_on_write: Option<Arc<dsh_workspace::Workspace>>,
    /// Who resolves the names the egress proxy connects to
    /// ([`SandboxPolicy::allow_domains`]; `None`: the host's resolver).
    #[cfg(all(feature = "egress", target_os = "linux"))]
    pub egress_resolver: Option<Arc<dyn crate::Resolve>>,
    /// The egress proxy's bounds.
    #[cfg(all(feature = "egress", target_os = "linux"))]
    pub egress_limits: crate::EgressLimits,
}

impl SandboxConfig {
    /// `policy` over `shell`, rejecting mode changes while a shell is open,
    /// without an approver, with persistent restricted shells.
    pub fn new(policy: SandboxPolicy, shell: ShellConfig) -> Self {
        SandboxConfig {
            policy,
            shell,
            mode_change: ModeChange::default(),
            approver: None,
            restricted: Persistence::default(),
            copy_on_write: None,
            #[cfg(all(feature = "egress", target_os = "linux"))]
            egress_resolver: None,
            #[cfg(all(feature = "egress", target_os = "linux"))]
            egress_limits: crate::EgressLimits::default(),
        }
    }
}

dsh_pty::setters!(SandboxConfig {
    policy: SandboxPolicy,
    shell: ShellConfig,
    mode_change: ModeChange,
    approver: Option<Arc<dyn Approver>>,
    restricted: Persistence,
    copy_on_write: Option<Arc<dsh_workspace::Workspace>>,
});

#[cfg(all(feature = "egress", target_os = "linux"))]
dsh_pty::setters!(SandboxConfig {
    egress_resolver: Option<Arc<dyn crate::Resolve>>,
    egress_limits: crate::EgressLimits,
});
