//! Resource limits for a session's whole process tree: what a host asks for
//! ([`ResourceLimits`]), what holds on this machine ([`LimitsReport`]), and
//! what a session met ([`LimitEvents`]).
//!
//! A limit on processes, memory or CPU is kept by a **cgroup per session**
//! (cgroup v2, or v1's `pids`, `memory`, `cpu` and `freezer` hierarchies),
//! made beneath [`ResourceLimits::cgroup_parent`] (a path, or
//! [`CgroupParent::Auto`]: the cgroup v2 delegated to this process). The session's first
//! process joins it between `fork` and `exec`, so everything it starts,
//! however it double-forks, is counted and is ended with it (`cgroup.kill`,
//! or freeze-and-kill on v1). Open files and the largest file are rlimits
//! (`RLIMIT_NOFILE`, `RLIMIT_FSIZE`), per process, inherited by the whole tree.
//! The private `/tmp`'s size and inodes are not among them: whoever makes
//! that `/tmp` bounds it (`dsh-sandbox`'s `SandboxPolicy::tmp_size` and
//! `tmp_inodes`, `dsh-docker`'s `ContainerTemplate`). They left this crate
//! before 1.0, with `Limit::TmpSize`, `Limit::TmpInodes` and `Held::Tmpfs`
//! (a breaking change: a serde config with `tmp-size` is now refused).
//!
//! A limit that cannot be kept makes the spawn fail with
//! [`LimitsError::NotHeld`] naming what is missing, unless
//! [`ResourceLimits::best_effort`] is set; then the session runs with what
//! holds and [`ResourceLimits::check`] says which. Without a cgroup, a best-effort
//! memory limit becomes `RLIMIT_AS` (address space per process: a weaker
//! limit, and one some runtimes that reserve address space refuse to start
//! under).

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Per-session resource limits: none by default. Plain data (with the
/// `serde` feature, a serde type hosts can load from config) with a setter per
/// field.
///
/// ```
/// use dsh_pty::ResourceLimits;
/// let limits = ResourceLimits::default()
///     .memory(Some(256 << 20))
///     .pids(Some(64))
///     .cpus(Some(0.5))
///     .cgroup_parent(Some("/dsh".into()));
/// assert_eq!(limits.cpu_millis, Some(500));
/// assert!(!limits.is_empty());
/// assert!(ResourceLimits::default().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default, deny_unknown_fields, rename_all = "kebab-case")
)]
#[non_exhaustive]
pub struct ResourceLimits {
    /// The most processes (and threads) the tree may hold at once
    /// (cgroup `pids.max`; Docker's `--pids-limit`).
    pub pids: Option<u64>,
    /// The most memory the tree may use, in bytes, page cache and the
    /// tree's tmpfs pages included, swap excluded (cgroup `memory.max` with
    /// `memory.swap.max` 0; Docker's `--memory`). A process that goes past it
    /// is killed by the kernel's OOM killer.
    pub memory: Option<u64>,
    /// The CPU share, in thousandths of a CPU (cgroup `cpu.max`; Docker's
    /// `--cpus` × 1000).
    pub cpu_millis: Option<u64>,
    /// The most descriptors one process may hold open (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// The largest file a process may write, in bytes (`RLIMIT_FSIZE`: a
    /// write past it fails with `EFBIG`; the signal `SIGXFSZ` is ignored).
    pub file_size: Option<u64>,
    /// Where sessions' cgroups are made ([`CgroupParent`]: a path, or the
    /// cgroup delegated to this process). `None`: no cgroup is made, and
    /// limits that need one are not held.
    pub cgroup_parent: Option<CgroupParent>,
    /// Run with the limits that hold instead of failing when one cannot be
    /// kept.
    pub best_effort: bool,
}

crate::setters!(ResourceLimits {
    pids: Option<u64>,
    memory: Option<u64>,
    cpu_millis: Option<u64>,
    open_files: Option<u64>,
    file_size: Option<u64>,
    cgroup_parent: Option<CgroupParent>,
    best_effort: bool,
});

/// Where the sessions' cgroups are made.
///
/// Written as text (the CLI's `--cgroup-parent`, the serde form): `auto` is
/// [`CgroupParent::Auto`], anything else a [`CgroupParent::Path`] (a
/// cgroup literally named `auto` is `/auto`).
///
/// ```
/// use dsh_pty::CgroupParent;
/// assert_eq!("auto".parse(), Ok(CgroupParent::Auto));
/// assert_eq!("/dsh".parse(), Ok(CgroupParent::Path("/dsh".into())));
/// assert_eq!(CgroupParent::from("/dsh").to_string(), "/dsh");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(from = "PathBuf", into = "PathBuf")
)]
#[non_exhaustive]
pub enum CgroupParent {
    /// A path inside the cgroup hierarchy, as Docker's `--cgroup-parent`
    /// (e.g. `/dsh` or `/system.slice/agents.service`), made if missing
    /// (with the controllers turned on from the hierarchy's root down to
    /// it); a path under the cgroup mount (`/sys/fs/cgroup/dsh`) means the
    /// same.
    Path(PathBuf),
    /// The cgroup this process runs in, when it is delegated to it (cgroup
    /// v2: a systemd unit or scope with `Delegate=yes`, a container with a
    /// cgroup namespace of its own; see docs/limits.md, "Delegated
    /// cgroups"). At the first session's spawn the process moves itself
    /// into a leaf of it, `dsh-PID-self` (v2 lets only a cgroup without
    /// processes give controllers to its children), and the sessions'
    /// cgroups are made beside that leaf. Not delegated: the limits that
    /// need a cgroup are refused (or, best effort, not held), saying why.
    Auto,
}

impl From<PathBuf> for CgroupParent {
    fn from(path: PathBuf) -> Self {
        if path.as_os_str() == "auto" {
            CgroupParent::Auto
        } else {
            CgroupParent::Path(path)
        }
    }
}

impl From<&str> for CgroupParent {
    fn from(text: &str) -> Self {
        PathBuf::from(text).into()
    }
}

impl From<CgroupParent> for PathBuf {
    fn from(parent: CgroupParent) -> Self {
        match parent {
            CgroupParent::Path(path) => path,
            CgroupParent::Auto => PathBuf::from("auto"),
        }
    }
}

impl std::str::FromStr for CgroupParent {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(text.into())
    }
}

impl fmt::Display for CgroupParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CgroupParent::Path(path) => write!(f, "{}", path.display()),
            CgroupParent::Auto => f.write_str("auto"),
        }
    }
}

impl ResourceLimits {
    /// Sets [`ResourceLimits::cpu_millis`] from a number of CPUs, as Docker's
    /// `--cpus` (`0.5` is half a CPU); rounded to a thousandth, at least one.
    #[must_use]
    pub fn cpus(mut self, cpus: Option<f64>) -> Self {
        self.cpu_millis = cpus.map(|c| ((c * 1000.0).round() as u64).max(1));
        self
    }

    /// `true` when no limit is asked for.
    pub fn is_empty(&self) -> bool {
        self.requested().next().is_none()
    }

    /// The limits asked for, with their values.
    pub fn requested(&self) -> impl Iterator<Item = (Limit, u64)> + '_ {
        [
            (Limit::Pids, self.pids),
            (Limit::Memory, self.memory),
            (Limit::Cpu, self.cpu_millis),
            (Limit::OpenFiles, self.open_files),
            (Limit::FileSize, self.file_size),
        ]
        .into_iter()
        .filter_map(|(limit, value)| value.map(|v| (limit, v)))
    }
}

/// One kind of limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Limit {
    /// [`ResourceLimits::pids`].
    Pids,
    /// [`ResourceLimits::memory`].
    Memory,
    /// [`ResourceLimits::cpu_millis`].
    Cpu,
    /// [`ResourceLimits::open_files`].
    OpenFiles,
    /// [`ResourceLimits::file_size`].
    FileSize,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Pids => "process limit",
            Limit::Memory => "memory limit",
            Limit::Cpu => "CPU limit",
            Limit::OpenFiles => "open-file limit",
            Limit::FileSize => "file-size limit",
        })
    }
}

/// The cgroup hierarchy a session's cgroup is made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CgroupVersion {
    /// The unified hierarchy.
    V2,
    /// One hierarchy per controller.
    V1,
}

/// How one requested limit is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Held {
    /// By the session's cgroup, for the whole tree.
    Cgroup(CgroupVersion),
    /// By an rlimit, per process.
    Rlimit,
    /// Not at all (only with [`ResourceLimits::best_effort`]).
    NotHeld,
}

/// What holds of a [`ResourceLimits`]: one entry per requested limit, in the
/// order of [`ResourceLimits::requested`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitsReport {
    /// Each requested limit and how it is kept.
    pub limits: Vec<(Limit, Held)>,
    /// Why the limits marked [`Held::NotHeld`] are not held, as the end of a
    /// sentence (e.g. what is missing for a cgroup); empty when every
    /// limit holds.
    pub why_not_held: String,
}

impl LimitsReport {
    /// How `limit` is kept (`None`: it was not asked for).
    pub fn held(&self, limit: Limit) -> Option<Held> {
        self.limits
            .iter()
            .find(|(l, _)| *l == limit)
            .map(|(_, held)| *held)
    }

    /// The requested limits that do not hold.
    pub fn not_held(&self) -> impl Iterator<Item = Limit> + '_ {
        self.limits
            .iter()
            .filter(|(_, held)| *held == Held::NotHeld)
            .map(|(limit, _)| *limit)
    }

    /// Sets how `limit` is kept.
    pub fn set(&mut self, limit: Limit, held: Held) {
        for entry in &mut self.limits {
            if entry.0 == limit {
                entry.1 = held;
            }
        }
    }
}

/// Counters of the limits a session reached, read from its cgroup. Compare
/// two readings to learn what happened in between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitEvents {
    /// Processes the kernel killed because the memory limit was reached.
    pub oom_kills: u64,
    /// New processes refused because the process limit was reached.
    pub forks_refused: u64,
    /// The memory limit the counters count against, in bytes, when the
    /// session's side sets it rather than the caller's [`ResourceLimits`]
    /// (a container's own limit); `None` otherwise.
    pub memory_limit: Option<u64>,
    /// The process limit the counters count against, when the session's
    /// side sets it (a container's own); `None` otherwise.
    pub pids_limit: Option<u64>,
}

impl LimitEvents {
    /// Counters read now: `oom_kills` and `forks_refused` so far, and no
    /// limits of the session's side.
    pub fn new(oom_kills: u64, forks_refused: u64) -> Self {
        LimitEvents {
            oom_kills,
            forks_refused,
            memory_limit: None,
            pids_limit: None,
        }
    }

    /// The same counters, counted against the session's side's own limits
    /// (a container's memory and process limits).
    pub fn against(mut self, memory_limit: Option<u64>, pids_limit: Option<u64>) -> Self {
        self.memory_limit = memory_limit;
        self.pids_limit = pids_limit;
        self
    }

    /// What happened since `earlier` (counters only grow), against this
    /// reading's limits.
    pub fn since(self, earlier: LimitEvents) -> LimitEvents {
        LimitEvents {
            oom_kills: self.oom_kills.saturating_sub(earlier.oom_kills),
            forks_refused: self.forks_refused.saturating_sub(earlier.forks_refused),
            ..self
        }
    }
}

/// Why limits could not be set up. `Display` is for developers (the
/// operating-system error is the source); a tool shows a model
/// [`contract::render_limits_error`](crate::contract::render_limits_error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsError {
    /// Requested limits that cannot be kept here.
    #[error("{} cannot be enforced: {why}", list(.limits))]
    NotHeld {
        /// The limits.
        limits: Vec<Limit>,
        /// What is missing, as a sentence's end.
        why: String,
    },
    /// Making or filling the session's cgroup failed.
    #[error("{what} {} failed", path.display())]
    Cgroup {
        /// The step, e.g. "making the cgroup".
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },
}

/// "the memory limit and the process limit".
pub(crate) fn list(limits: &[Limit]) -> String {
    let names: Vec<String> = limits.iter().map(|l| format!("the {l}")).collect();
    match names.as_slice() {
        [] => "no limit".to_owned(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// A byte count the way people read it: `256 MiB`, `1.5 GiB`, `512 KiB`,
/// `100 bytes`.
///
/// ```
/// assert_eq!(dsh_pty::format_bytes(256 << 20), "256 MiB");
/// assert_eq!(dsh_pty::format_bytes(3 << 29), "1.5 GiB");
/// ```
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            let whole = bytes / size;
            let tenths = (bytes % size) * 10 / size;
            return if tenths == 0 {
                format!("{whole} {unit}")
            } else {
                format!("{whole}.{tenths} {unit}")
            };
        }
    }
    format!("{bytes} bytes")
}

/// Parses a size the way Docker does (`256m`, `2g`, `512k`, `1024`, `1.5g`;
/// units are powers of 1024, a trailing `b`/`B` is allowed).
///
/// ```
/// assert_eq!(dsh_pty::parse_size("256m"), Ok(256 << 20));
/// assert_eq!(dsh_pty::parse_size("2G"), Ok(2 << 30));
/// assert!(dsh_pty::parse_size("lots").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t.strip_suffix(['b', 'B']).unwrap_or(t);
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((at, _)) => (&t[..at], &t[at..]),
        None => (t, ""),
    };
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => {
            return Err(format!(
                "{text:?} is not a size: use a number with an optional unit k, m, g or t (e.g. 256m)"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{text:?} is not a size: use a number with an optional unit k, m, g or t (e.g. 256m)"))?;
    let bytes = value * scale as f64;
    if bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is not a size greater than zero"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_docker_reads_them() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("256mb"), Ok(256 << 20));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert!(parse_size("0").is_err());
        assert!(parse_size("-1m").is_err());
        assert!(parse_size("12x").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(format_bytes(64 << 20), "64 MiB");
        assert_eq!(format_bytes(100), "100 bytes");
        assert_eq!(format_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn a_refusal_names_every_limit() {
        let err = LimitsError::NotHeld {
            limits: vec![Limit::Memory, Limit::Pids, Limit::Cpu],
            why: "no cgroup parent was given".into(),
        };
        assert_eq!(
            err.to_string(),
            "the memory limit, the process limit and the CPU limit cannot be enforced: no cgroup parent was given"
        );
    }

    #[test]
    fn events_subtract() {
        let a = LimitEvents::new(1, 5);
        let b = LimitEvents::new(3, 5).against(Some(1 << 20), None);
        assert_eq!(
            b.since(a),
            LimitEvents::new(2, 0).against(Some(1 << 20), None)
        );
    }
}
