//! What the operating system enforces for one confinement.

use crate::{TmpHeld, TmpLimit};

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
    /// What keeps pathname Unix sockets outside the writable roots, the
    /// private `/tmp` and the policy's allow list out of reach.
    pub unix_sockets: UnixSocketGuard,
    /// What was asked but could not be enforced (only with `degrade`).
    pub missing: Vec<&'static str>,
    /// How each resource limit of the shell's config is kept (see
    /// [`dsh_pty::ResourceLimits`]): the cgroup, rlimits, or not at all
    /// (only with best-effort limits). Its `why_not_held` also says why
    /// the bounds of [`Enforcement::tmp_limits`] marked
    /// [`TmpHeld::NotHeld`] are not held (after the shell's own reasons).
    pub limits: dsh_pty::LimitsReport,
    /// How each requested bound of the private `/tmp` is kept, the size
    /// first (see [`TmpLimits`](crate::TmpLimits)): by its tmpfs, or not at all.
    pub tmp_limits: Vec<(TmpLimit, TmpHeld)>,
}

/// What confines the Unix sockets a sandboxed process reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum UnixSocketGuard {
    /// Nothing: every socket the caller's uid may connect to is reachable
    /// (danger-full-access, bubblewrap, the weaker mode before Landlock ABI 9).
    #[default]
    Unguarded,
    /// The sandbox's supervisor makes every socket-address call for the
    /// sandbox (seccomp user notification): any kernel with namespaces.
    Supervisor,
    /// Landlock's `LANDLOCK_ACCESS_FS_RESOLVE_UNIX` (ABI 9, Linux 7.1).
    Landlock,
}

impl Enforcement {
    /// Nothing enforced (danger-full-access).
    pub fn none() -> Self {
        Enforcement::default()
    }

    /// How the private `/tmp`'s bound `limit` is kept (`None`: it was not
    /// asked for).
    pub fn tmp_held(&self, limit: TmpLimit) -> Option<TmpHeld> {
        self.tmp_limits
            .iter()
            .find(|(l, _)| *l == limit)
            .map(|(_, held)| *held)
    }

    /// What a Seatbelt profile enforces.
    pub(crate) fn seatbelt(network: bool) -> Self {
        Enforcement {
            filesystem: true,
            network_isolated: !network,
            git_read_only: true,
            ..Enforcement::default()
        }
    }
}
