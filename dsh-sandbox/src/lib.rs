//! Sandbox modes for agent shells and editors, enforced by the OS.
//!
//! Three modes ([`SandboxMode`]): `read-only` (the default), `workspace-write`
//! and `danger-full-access`. The policy ([`SandboxPolicy`]) is a plain serde
//! type. This crate composes the two tools; neither depends on it:
//!
//! * [`SandboxedShell`] runs the shell tool: the owner's persistent shell in
//!   `danger-full-access`, and a fresh confined shell per call in the
//!   restricted modes (nothing persists there, and the tool description says
//!   so). A call may carry `sandbox_permissions` + `justification`; an
//!   [`Approver`] must allow it, for that call only, and every other case
//!   fails closed with its own error ([`SandboxError`]).
//! * [`SandboxFs`] wraps the editor's filesystem: every mutation is checked
//!   against the writable roots after resolving the real path.
//!
//! # Enforcement
//!
//! On Linux, a restricted shell is confined before `exec` (see the `linux`
//! module's docs): **Landlock** allows writes only beneath the writable
//! roots (+ `/dev/null`, `/dev/tty`, and the terminal already open) and,
//! where the ABI has it (4+), denies TCP bind/connect; a **seccomp** filter
//! makes `socket(2)` fail for every family but `AF_UNIX` (UDP and raw
//! sockets included) and blocks `io_uring_setup`; `no_new_privs` is set; and
//! `.git` in the writable roots is bound read-only in a private mount
//! namespace. What the kernel enforces is reported ([`Enforcement`]): if it
//! cannot enforce what the policy asks, calls fail closed unless the policy
//! opts into `degrade`.
//!
//! On macOS, a generated Seatbelt profile runs through
//! `/usr/bin/sandbox-exec` (compiled and tested only as text here). On other
//! platforms the restricted modes report "not supported".
//!
//! # Messages
//!
//! A confined command that failed on a denied write gets, after its output
//! and `[exit code: N]`, the line `[sandbox: file access denied under <mode>
//! mode]` and, when an approver is configured, one line telling how to ask
//! for more with `sandbox_permissions`. An editor write that is refused
//! answers with the marker line alone and leaves the file unchanged.

mod approval;
#[cfg(unix)]
mod beneath;
mod error;
mod fs;
mod git;
#[cfg(target_os = "linux")]
mod linux;
mod policy;
mod seatbelt;
mod tool;

pub use approval::{Approval, Approver, EscalationRequest, FixedApprover};
pub use error::SandboxError;
pub use fs::SandboxFs;
#[cfg(target_os = "linux")]
pub use linux::landlock_abi;
pub use policy::{SandboxMode, SandboxPolicy, WriteRules, resolve};
pub use seatbelt::seatbelt_profile;
pub use tool::{ModeChange, Persistence, SandboxConfig, SandboxedShell};

/// What the operating system enforces for one mode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Enforcement {
    /// The kernel's Landlock ABI version (0 without Landlock or off Linux).
    pub landlock_abi: i32,
    /// The shell has its own user, mount, PID, IPC, UTS and cgroup
    /// namespaces and a read-only view of the filesystem.
    pub namespaces: bool,
    /// Writes are confined to the writable roots.
    pub filesystem: bool,
    /// Landlock is applied as a layer (writes, and TCP in the weaker mode).
    pub landlock: bool,
    /// Landlock scopes signals and abstract Unix sockets to the sandbox (ABI 6+).
    pub landlock_scopes: bool,
    /// Every capability is dropped and cannot come back through `exec`.
    pub capabilities_dropped: bool,
    /// The seccomp filter is installed.
    pub seccomp: bool,
    /// No network: the shell's own network namespace (loopback only), or
    /// in the weaker mode Landlock and seccomp denying sockets.
    pub network_isolated: bool,
    /// `.git` of the writable roots is read-only for the shell.
    pub git_read_only: bool,
    /// What was asked but could not be enforced (only with `degrade`).
    pub missing: Vec<&'static str>,
}

impl Enforcement {
    /// Nothing enforced (danger-full-access).
    pub fn none() -> Self {
        Enforcement::default()
    }

    /// What a Seatbelt profile enforces.
    #[cfg(target_os = "macos")]
    pub(crate) fn seatbelt(network: bool) -> Self {
        Enforcement {
            filesystem: true,
            network_isolated: !network,
            git_read_only: true,
            ..Enforcement::default()
        }
    }
}
