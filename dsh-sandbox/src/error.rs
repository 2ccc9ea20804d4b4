//! Errors of the sandbox. `Display` is for developers (terse, without the
//! source, which the error chain carries); the model's text where a tool
//! call fails is [`contract::render_error`](crate::contract::render_error)'s.

use crate::SandboxMode;

/// A sandboxed call or setup that failed.
///
/// `Display` says what failed, for a log or an error reporter; a tool shows
/// the model [`contract::render_error`](crate::contract::render_error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// `sandbox_permissions` was sent but the host has no approver.
    #[error("`sandbox_permissions` was sent but the host has no approver (mode {current})")]
    NoApprover {
        /// The owner's mode.
        current: SandboxMode,
    },
    /// The approver refused.
    #[error("the approver denied {requested} access")]
    Denied {
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// The approver did not answer in time.
    #[error("the approver did not answer the request for {requested} access in time")]
    ApprovalTimedOut {
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// The requested mode is not wider than the current one.
    #[error("`sandbox_permissions` asked for {requested}, which is not wider than {current}")]
    NotWider {
        /// The owner's mode.
        current: SandboxMode,
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// `sandbox_permissions` without a usable justification.
    #[error("`sandbox_permissions` without a non-empty `justification`")]
    MissingJustification,
    /// `justification` without `sandbox_permissions`.
    #[error("`justification` without `sandbox_permissions`")]
    JustificationWithoutPermissions,
    /// `sandbox_permissions` is not a mode.
    #[error("`sandbox_permissions` is not a sandbox mode")]
    InvalidPermissions,
    /// A mode change was refused because a persistent shell is open.
    #[error(
        "cannot change the sandbox mode of {owner:?} from {from} to {to} while its persistent shell is open"
    )]
    ShellOpen {
        /// The owner.
        owner: String,
        /// The current mode.
        from: SandboxMode,
        /// The mode asked for.
        to: SandboxMode,
    },
    /// The kernel cannot enforce what the policy asks, and the host did not
    /// opt into degrading.
    #[error("the sandbox cannot be enforced on this system (missing: {missing})")]
    NotEnforceable {
        /// What is missing.
        missing: String,
    },
    /// A resource limit of the shell's config cannot be kept.
    #[error(transparent)]
    Limits(#[from] dsh_pty::LimitsError),
    /// Bounds of the private `/tmp` ([`SandboxPolicy::tmp_size`](crate::SandboxPolicy::tmp_size),
    /// [`tmp_inodes`](crate::SandboxPolicy::tmp_inodes)) cannot be kept,
    /// with the shell's own limits that cannot be kept either, and the
    /// limits are not best effort.
    #[error("{} cannot be enforced: {why}", limit_list(.limits, .tmp))]
    LimitsNotHeld {
        /// The shell's own limits that cannot be kept (may be empty).
        limits: Vec<dsh_pty::Limit>,
        /// The private `/tmp`'s bounds that cannot be kept.
        tmp: Vec<crate::TmpLimit>,
        /// What is missing, as a sentence's end.
        why: String,
        /// The shell whose start was refused (`bash`, `sh`, `pwsh`), when a
        /// call was to start it; `None` when the sandbox was being set up.
        starting: Option<&'static str>,
    },
    /// Restricted modes are not implemented on this platform.
    #[error("the {mode} sandbox mode is not supported on this platform")]
    Unsupported {
        /// The mode.
        mode: SandboxMode,
    },
    /// Preparing the sandbox failed.
    #[error("setting up the sandbox failed: {what}")]
    Setup {
        /// What was being prepared (or what was wrong).
        what: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A copy-on-write workspace's restricted modes are confined by the
    /// sandbox's own namespaces, not by bubblewrap.
    #[error(
        "a copy-on-write workspace confines its shells with the sandbox's own namespaces, not bubblewrap"
    )]
    CopyOnWriteBubblewrap,
    /// An entry of [`SandboxPolicy::allow_domains`](crate::SandboxPolicy::allow_domains)
    /// is not `HOST[:PORT]` or `*.DOMAIN[:PORT]`.
    #[error("the allowed domain {entry:?} is not HOST[:PORT] or *.DOMAIN[:PORT]: {why}")]
    InvalidAllowDomain {
        /// The entry as given.
        entry: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// [`SandboxPolicy::allow_domains`](crate::SandboxPolicy::allow_domains)
    /// where nothing could enforce it.
    #[error("allowed domains cannot be enforced: {why}")]
    EgressConflict {
        /// Why (a sentence's end).
        why: &'static str,
    },
    /// The host has no copy-on-write workspace.
    #[error("this sandbox has no copy-on-write workspace")]
    NoCopyOnWrite,
    /// The copy-on-write view could not be made (the kernel refused).
    #[error("the copy-on-write view of the workspace could not be made: {reason}")]
    CopyOnWriteUnavailable {
        /// What the kernel refused.
        reason: String,
    },
    /// A copy-on-write workspace's layers or snapshots.
    #[error(transparent)]
    Workspace(#[from] dsh_workspace::WorkspaceError),
    /// The shell settings the sandbox derived are invalid.
    #[error("setting up the sandbox failed")]
    ShellConfig(#[from] dsh_shell_persistent::ShellConfigError),
    /// The shell failed.
    #[error(transparent)]
    Shell(#[from] dsh_shell_persistent::ShellError),
}

/// "the process limit, the /tmp size limit and the /tmp inode limit": the
/// shell's limits and the `/tmp` bounds in the order of
/// [`dsh_pty::ResourceLimits::requested`], the `/tmp` bounds after the
/// cgroup's limits (processes, memory, CPU) and before the rlimits.
pub(crate) fn limit_list(limits: &[dsh_pty::Limit], tmp: &[crate::TmpLimit]) -> String {
    use dsh_pty::Limit;
    let cgroup = |l: &&Limit| matches!(l, Limit::Pids | Limit::Memory | Limit::Cpu);
    let names: Vec<String> = limits
        .iter()
        .filter(cgroup)
        .map(|l| format!("the {l}"))
        .chain(tmp.iter().map(|l| format!("the {l}")))
        .chain(
            limits
                .iter()
                .filter(|l| !cgroup(l))
                .map(|l| format!("the {l}")),
        )
        .collect();
    match names.as_slice() {
        [] => "no limit".to_owned(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

impl SandboxError {
    /// [`SandboxError::Setup`] without an underlying error.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn setup(what: impl Into<String>) -> Self {
        SandboxError::Setup {
            what: what.into(),
            source: None,
        }
    }

    /// [`SandboxError::Setup`] caused by `source`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn setup_from(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        SandboxError::Setup {
            what: what.into(),
            source: Some(source.into()),
        }
    }
}

/// The confinement's setup error, as the sandbox's own (same text). Not a
/// public `From`: `dsh-confine` stays out of this crate's API.
#[cfg(target_os = "linux")]
pub(crate) fn from_confine(error: dsh_confine::Error) -> SandboxError {
    match error {
        dsh_confine::Error::Setup { what, source } => SandboxError::Setup { what, source },
        other => SandboxError::setup_from("the confinement", other),
    }
}
