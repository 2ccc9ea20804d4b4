//! The resolved policy a confinement is built from.

use std::path::PathBuf;

/// What to confine, resolved by the caller: canonical paths and decisions,
/// nothing left to look up in a configuration.
///
/// [`Policy::new`] is a read-only view of everything with the workspace
/// shown, no network, namespaces on and the kernel's default `/tmp`; each
/// setter changes one thing.
///
/// ```
/// use dsh_confine::Policy;
/// let workspace = std::env::temp_dir().canonicalize().unwrap();
/// let policy = Policy::new(workspace.clone())
///     .workspace_write(true)
///     .writable_roots(vec![workspace.clone()])
///     .protected(vec![workspace.join(".git")])
///     .tmp_writable(true);
/// assert!(format!("{policy:?}").contains(".git"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The workspace (canonical): shown, read-only unless a writable root.
    pub(crate) workspace: PathBuf,
    /// The shell's start directory.
    pub(crate) cwd: PathBuf,
    /// Workspace-write: `/dev/shm` writable, `.git` reported read-only.
    pub(crate) workspace_write: bool,
    /// Canonical directories under which writing is allowed.
    pub(crate) roots: Vec<PathBuf>,
    /// Paths of those roots that stay read-only.
    pub(crate) protected: Vec<PathBuf>,
    /// Paths hidden by name.
    pub(crate) hidden: Vec<PathBuf>,
    /// Whether the private `/tmp` is writable.
    pub(crate) tmp_writable: bool,
    pub(crate) network: bool,
    /// Use namespaces (`false`: the weaker mode).
    pub(crate) namespaces: bool,
    /// Pathname Unix sockets reachable besides those beneath the writable
    /// roots, `/tmp` and `/dev/shm` (canonical).
    pub(crate) unix_sockets: Vec<PathBuf>,
    /// For the confined opener, not a shell: no `/proc` in the view (the
    /// opener is a fork of the host's process, whose memory and
    /// environment `/proc/self` would show) and no socket guard.
    pub(crate) files: bool,
    /// The private `/tmp`'s (and `/dev/shm`'s) tmpfs size and inodes.
    pub(crate) tmp_limits: TmpLimits,
    /// Directories shown read-only at their own paths (canonical), even
    /// beneath the private `/tmp`.
    pub(crate) readable: Vec<PathBuf>,
    /// The port of the egress proxy's listener inside (network off only).
    pub(crate) egress_port: Option<u16>,
}

impl Policy {
    /// Read-only everywhere, `workspace` (canonical) shown and the start
    /// directory, no network, namespaces, nothing hidden or protected.
    pub fn new(workspace: PathBuf) -> Policy {
        Policy {
            cwd: workspace.clone(),
            workspace,
            workspace_write: false,
            roots: Vec::new(),
            protected: Vec::new(),
            hidden: Vec::new(),
            tmp_writable: false,
            network: false,
            namespaces: true,
            unix_sockets: Vec::new(),
            files: false,
            tmp_limits: TmpLimits::default(),
            readable: Vec::new(),
            egress_port: None,
        }
    }

    /// Sets the writable roots (canonical directories; the workspace among
    /// them in workspace-write).
    #[must_use]
    pub fn writable_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.roots = roots;
        self
    }

    /// Sets directories (canonical, existing) shown read-only at their own
    /// paths with the namespaces, even beneath the private `/tmp`: a
    /// host's files for the shell to read, such as its long commands.
    #[must_use]
    pub fn readable_roots(mut self, readable: Vec<PathBuf>) -> Self {
        self.readable = readable;
        self
    }

    /// Sets the private `/tmp`'s and `/dev/shm`'s tmpfs bounds.
    #[must_use]
    pub fn tmp_limits(mut self, limits: TmpLimits) -> Self {
        self.tmp_limits = limits;
        self
    }
}

dsh_pty::setters!(Policy {
    /// Sets the shell's start directory (default: the workspace).
    cwd: PathBuf,
    /// Sets workspace-write (`true`) or read-only (`false`, the default):
    /// the private `/dev/shm` is writable, and `.git` of the writable
    /// roots reported read-only, only in workspace-write.
    workspace_write: bool,
    /// Sets the paths of the writable roots that stay read-only (each
    /// root's `.git` and what git keeps there), whether they exist yet or
    /// not: those that exist are bound read-only over themselves, and the
    /// socket supervisor reaches no socket beneath them.
    protected: Vec<PathBuf>,
    /// Sets the paths hidden by name for the confinement's life (a
    /// directory shows empty, a file empty and read-only): each one's
    /// directory resolved, its name kept.
    hidden: Vec<PathBuf>,
    /// Sets whether the private `/tmp` is writable (default `false`).
    tmp_writable: bool,
    /// Sets whether the network is reachable (default `false`: a network
    /// namespace of its own with only loopback).
    network: bool,
    /// Sets whether namespaces are used (default `true`; `false`: the
    /// weaker mode, capabilities, `no_new_privs`, Landlock and seccomp in
    /// the host's process table and filesystem view).
    namespaces: bool,
    /// Sets the pathname Unix sockets (or directories of them, canonical)
    /// reachable besides those beneath the writable roots, `/tmp` and
    /// `/dev/shm`.
    unix_sockets: Vec<PathBuf>,
    /// Sets the port of a TCP listener on `127.0.0.1` inside the sandbox's
    /// own network namespace, handed to the host (Linux, namespaces, the
    /// network off; default none): the host's proxy accepts on it, see
    /// `Confinement::egress_listeners`. Refused by the weaker mode and by
    /// bubblewrap.
    egress_port: Option<u16>,
});

/// The size bounds of the private `/tmp` and `/dev/shm` tmpfs (`None`: the
/// kernel's default, half the host's memory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TmpLimits {
    /// The size in bytes.
    pub size: Option<u64>,
    /// The number of inodes.
    pub inodes: Option<u64>,
}

impl TmpLimits {
    /// Bounds of `size` bytes and `inodes` inodes.
    pub fn new(size: Option<u64>, inodes: Option<u64>) -> Self {
        TmpLimits { size, inodes }
    }

    /// The bounds asked for, with their values: the size, then the inodes.
    ///
    /// ```
    /// use dsh_confine::{TmpLimit, TmpLimits};
    /// let asked: Vec<_> = TmpLimits::new(None, Some(100)).requested().collect();
    /// assert_eq!(asked, [(TmpLimit::Inodes, 100)]);
    /// assert!(TmpLimits::default().is_empty());
    /// ```
    pub fn requested(self) -> impl Iterator<Item = (TmpLimit, u64)> {
        [(TmpLimit::Size, self.size), (TmpLimit::Inodes, self.inodes)]
            .into_iter()
            .filter_map(|(limit, value)| value.map(|v| (limit, v)))
    }

    /// `true` when no bound is asked for.
    pub fn is_empty(self) -> bool {
        self.size.is_none() && self.inodes.is_none()
    }

    /// The tmpfs options: `mode=1777` and the bounds.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn options(self) -> String {
        let mut options = "mode=1777".to_owned();
        if let Some(size) = self.size {
            options.push_str(&format!(",size={size}"));
        }
        if let Some(inodes) = self.inodes {
            options.push_str(&format!(",nr_inodes={inodes}"));
        }
        options
    }
}

/// One bound of the private `/tmp`'s tmpfs. `Display` names it as a limit
/// ("/tmp size limit"), as the shell's own limits are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum TmpLimit {
    /// [`TmpLimits::size`].
    Size,
    /// [`TmpLimits::inodes`].
    Inodes,
}

impl std::fmt::Display for TmpLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TmpLimit::Size => "/tmp size limit",
            TmpLimit::Inodes => "/tmp inode limit",
        })
    }
}

/// How one requested bound of the private `/tmp` is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TmpHeld {
    /// By the size options of the private `/tmp`'s tmpfs (`size=`,
    /// `nr_inodes=`).
    Tmpfs,
    /// Not at all: there is no private `/tmp`, or what makes it cannot
    /// bound this (only with best-effort limits).
    NotHeld,
}
