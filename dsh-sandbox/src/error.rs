//! Errors of the sandbox. `Display` is the model-visible text where a tool
//! call fails.

use crate::SandboxMode;

/// A sandboxed call or setup that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// `sandbox_permissions` was sent but the host has no approver.
    #[error(
        "Escalation is not available: this host has no approver for `sandbox_permissions`. The command was not run; run it within {current} mode."
    )]
    NoApprover {
        /// The owner's mode.
        current: SandboxMode,
    },
    /// The approver refused.
    #[error(
        "The request to run this command with {requested} access was denied. The command was not run."
    )]
    Denied {
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// The approver did not answer in time.
    #[error(
        "The request to run this command with {requested} access timed out without an answer. The command was not run."
    )]
    ApprovalTimedOut {
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// The requested mode is not wider than the current one.
    #[error(
        "`sandbox_permissions` must ask for more than the current {current} mode; `{requested}` does not. The command was not run."
    )]
    NotWider {
        /// The owner's mode.
        current: SandboxMode,
        /// The mode asked for.
        requested: SandboxMode,
    },
    /// `sandbox_permissions` without a usable justification.
    #[error(
        "`justification` must be a non-empty string explaining why the command needs `sandbox_permissions`. The command was not run."
    )]
    MissingJustification,
    /// `justification` without `sandbox_permissions`.
    #[error(
        "`justification` was given without `sandbox_permissions`; give both to ask for more access, or neither. The command was not run."
    )]
    JustificationWithoutPermissions,
    /// `sandbox_permissions` is not a mode.
    #[error(
        "`sandbox_permissions` must be `workspace-write` or `danger-full-access`. The command was not run."
    )]
    InvalidPermissions,
    /// A mode change was refused because a persistent shell is open.
    #[error(
        "Cannot change {owner}'s sandbox mode from {from} to {to} while its persistent shell is open; close the shell first."
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
    #[error(
        "The sandbox cannot be enforced on this system (missing: {missing}); the command was not run."
    )]
    NotEnforceable {
        /// What is missing.
        missing: String,
    },
    /// A resource limit of the shell's config cannot be kept.
    #[error("{0}; the command was not run.")]
    Limits(#[from] dsh_pty::LimitsError),
    /// Restricted modes are not implemented on this platform.
    #[error("The {mode} sandbox mode is not supported on this platform; the command was not run.")]
    Unsupported {
        /// The mode.
        mode: SandboxMode,
    },
    /// Preparing the sandbox failed.
    #[error("Setting up the sandbox failed: {what}{}", cause(.source))]
    Setup {
        /// What was being prepared (or what was wrong).
        what: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The shell settings the sandbox derived are invalid.
    #[error("Setting up the sandbox failed: {0}")]
    ShellConfig(#[from] dsh_shell_persistent::ShellConfigError),
    /// The shell failed.
    #[error(transparent)]
    Shell(#[from] dsh_shell_persistent::ShellError),
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

fn cause(source: &Option<Box<dyn std::error::Error + Send + Sync>>) -> String {
    source.as_ref().map_or(String::new(), |e| format!(": {e}"))
}
