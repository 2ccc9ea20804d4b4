//! A cgroup per session (Linux): found in the mount table, made beneath the
//! host's parent, joined by the child between `fork` and `exec`, read for
//! the limits it met, killed as one and removed.
//!
//! cgroup v2 is used when its hierarchy offers every controller asked for;
//! otherwise cgroup v1, where each controller (`pids`, `memory`, `cpu`, and
//! `freezer` for the kill) has a hierarchy of its own and the session gets a
//! directory in each.

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::limits::{
    CgroupParent, CgroupVersion, Limit, LimitEvents, LimitsError, LimitsReport, ResourceLimits,
};

/// A cgroup controller this crate uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    Pids,
    Memory,
    Cpu,
    /// v1 only: the kill freezes the tree first.
    Freezer,
}

impl Controller {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Freezer => "freezer",
        }
    }
}

/// A mounted cgroup hierarchy.
#[derive(Debug, Clone)]
pub(crate) struct Mount {
    /// Where it is mounted.
    pub(crate) point: PathBuf,
    /// The cgroup shown at `point`, as `/proc/self/cgroup` names cgroups
    /// (`/` unless a subtree was bind-mounted).
    pub(crate) root: String,
    /// Mounted read-only.
    pub(crate) read_only: bool,
    /// v1: the controllers bound to it; v2: empty (read `cgroup.controllers`).
    controllers: Vec<String>,
    pub(crate) v2: bool,
}

/// The mount table of this process's mount namespace.
pub(crate) const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The cgroup mounts of this process's mount namespace.
fn mounts() -> Result<Vec<Mount>, String> {
    let text = fs::read_to_string(MOUNTINFO)
        .map_err(|e| format!("the mount table ({MOUNTINFO}) could not be read: {e}"))?;
    Ok(parse_mountinfo(&text))
}

/// The cgroup mounts of a mount table.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_mountinfo_line).collect()
}

/// One line of `/proc/self/mountinfo`: `id parent dev root point opts
/// [optional...] - fstype source superopts`.
fn parse_mountinfo_line(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let mut left = left.split(' ');
    let root = left.nth(3)?;
    let point = left.next()?;
    let opts = left.next().unwrap_or("");
    let mut right = right.split(' ');
    let fstype = right.next()?;
    let _source = right.next()?;
    let superopts = right.next().unwrap_or("");
    let point = PathBuf::from(unescape_octal(point));
    let root = unescape_octal(root);
    let read_only = opts.split(',').any(|o| o == "ro");
    match fstype {
        "cgroup2" => Some(Mount {
            point,
            root,
            read_only,
            controllers: Vec::new(),
            v2: true,
        }),
        "cgroup" => Some(Mount {
            point,
            root,
            read_only,
            controllers: superopts.split(',').map(str::to_owned).collect(),
            v2: false,
        }),
        _ => None,
    }
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 4 <= bytes.len()
            && let Ok(v) = u8::from_str_radix(&text[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The controllers the limits need.
fn needed(limits: &ResourceLimits) -> Vec<Controller> {
    let mut out = Vec::new();
    if limits.pids.is_some() {
        out.push(Controller::Pids);
    }
    if limits.memory.is_some() {
        out.push(Controller::Memory);
    }
    if limits.cpu_millis.is_some() {
        out.push(Controller::Cpu);
    }
    out
}

/// `parent` relative to a hierarchy's mount point: a path under the mount
/// (`/sys/fs/cgroup/dsh`) or inside the hierarchy (`/dsh`).
fn beneath(mount: &Path, parent: &Path) -> PathBuf {
    let inside = parent.strip_prefix(mount).unwrap_or(parent);
    let relative: PathBuf = inside
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .collect();
    mount.join(relative)
}

/// Where the session's cgroups go: one directory (v2) or one per controller (v1).
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    version: CgroupVersion,
    /// The v2 mount point (enabling controllers walks from it down).
    root: PathBuf,
    /// v2: one entry, every controller; v1: one per controller.
    parents: Vec<(Vec<Controller>, PathBuf)>,
    needed: Vec<Controller>,
}

/// Where the refusals point a host for a cgroup parent of its own.
const RECIPES: &str = "see \"Delegated cgroups\" in docs/limits.md";

/// Finds where `limits`' cgroup would be made, or why it cannot be; a
/// delegated parent ([`CgroupParent::Auto`]) is only inspected unless
/// `take` (then this process moves into its leaf, once).
fn place(limits: &ResourceLimits, take: bool) -> Result<Placement, String> {
    let needed = needed(limits);
    let parent = match &limits.cgroup_parent {
        None => {
            return Err(format!(
                "no cgroup parent was given (`ResourceLimits::cgroup_parent`; `dsh-mcp --cgroup-parent`: a cgroup path, or `auto` in a delegated cgroup, {RECIPES})"
            ));
        }
        Some(CgroupParent::Path(parent)) => parent,
        Some(CgroupParent::Auto) => {
            let found = super::delegation::resolve(&needed, take).map_err(|e| {
                format!("`auto` found no cgroup delegated to this process: {e} ({RECIPES})")
            })?;
            return Ok(Placement {
                version: CgroupVersion::V2,
                root: found.mount,
                parents: vec![(needed.clone(), found.dir)],
                needed,
            });
        }
    };
    let mounts = mounts()?;
    if let Some(v2) = mounts.iter().find(|m| m.v2) {
        let offered = fs::read_to_string(v2.point.join("cgroup.controllers")).unwrap_or_default();
        let offered: Vec<&str> = offered.split_whitespace().collect();
        if needed.iter().all(|c| offered.contains(&c.name())) {
            return Ok(Placement {
                version: CgroupVersion::V2,
                root: v2.point.clone(),
                parents: vec![(needed.clone(), beneath(&v2.point, parent))],
                needed,
            });
        }
    }
    let mut parents = Vec::new();
    let mut missing = Vec::new();
    for controller in needed.iter().copied().chain([Controller::Freezer]) {
        match mounts
            .iter()
            .find(|m| !m.v2 && m.controllers.iter().any(|c| c == controller.name()))
        {
            Some(m) => parents.push((vec![controller], beneath(&m.point, parent))),
            None => missing.push(controller.name()),
        }
    }
    if missing.is_empty() {
        return Ok(Placement {
            version: CgroupVersion::V1,
            root: PathBuf::new(),
            parents,
            needed,
        });
    }
    let v2_has = mounts.iter().any(|m| m.v2);
    Err(match (v2_has, mounts.iter().any(|m| !m.v2)) {
        (false, false) => "no cgroup hierarchy is mounted".to_owned(),
        _ => format!(
            "no mounted cgroup hierarchy offers the {} controller{}",
            missing.join(", "),
            if missing.len() == 1 { "" } else { "s" }
        ),
    })
}

/// What holds of `limits` here, and where the cgroup goes; fails closed
/// unless best effort. With `take`, a delegated parent is taken (the spawn);
/// without, only inspected ([`ResourceLimits::check`]).
pub(crate) fn plan(
    limits: &ResourceLimits,
    take: bool,
) -> Result<(LimitsReport, Option<Placement>), LimitsError> {
    let placement = if limits.cgroup_parent.is_some() || !needed(limits).is_empty() {
        Some(place(limits, take))
    } else {
        None
    };
    let version = match &placement {
        Some(Ok(p)) => Ok(p.version),
        Some(Err(why)) => Err(why.clone()),
        None => Err(String::new()),
    };
    let report = crate::native_limits::report_with(limits, version.clone())?;
    Ok((report, placement.and_then(Result::ok)))
}

/// [`ResourceLimits::prepare`] on Linux.
pub(crate) fn prepare(limits: &ResourceLimits) -> Result<(), LimitsError> {
    let needed = needed(limits);
    if limits.cgroup_parent != Some(CgroupParent::Auto) || needed.is_empty() {
        return Ok(());
    }
    match place(limits, true) {
        Ok(_) => Ok(()),
        Err(_) if limits.best_effort => Ok(()),
        Err(why) => Err(LimitsError::NotHeld {
            limits: limits
                .requested()
                .map(|(limit, _)| limit)
                .filter(|l| matches!(l, Limit::Pids | Limit::Memory | Limit::Cpu))
                .collect(),
            why,
        }),
    }
}

/// [`ResourceLimits::check`] on Linux.
pub(crate) fn report(limits: &ResourceLimits) -> Result<LimitsReport, LimitsError> {
    plan(limits, false).map(|(report, _)| report)
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// One session's cgroup: its directories and the open `cgroup.procs` the
/// child joins through.
#[derive(Debug)]
pub(crate) struct Cgroup {
    version: CgroupVersion,
    /// The session's directories; the first is the one read for members.
    dirs: Vec<(Vec<Controller>, PathBuf)>,
    procs: Vec<OwnedFd>,
}

fn cg_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> LimitsError + 'a {
    move |source| LimitsError::Cgroup {
        what,
        path: path.to_owned(),
        source,
    }
}

fn write_file(path: &Path, value: &str) -> Result<(), LimitsError> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(cg_err("writing", path))
}

/// Makes `parent` (and the cgroups above it) if missing, with `controllers`
/// turned on for the children of every cgroup from the v2 mount down to
/// `parent` itself (a cgroup only offers its children what its own parent
/// enabled for it).
fn prepare_parent(
    root: &Path,
    parent: &Path,
    controllers: &[Controller],
) -> Result<(), LimitsError> {
    let rel = parent.strip_prefix(root).unwrap_or(Path::new(""));
    let mut level = root.to_path_buf();
    enable(&level, controllers)?;
    for part in rel.components() {
        level.push(part);
        match fs::create_dir(&level) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(cg_err("making the cgroup", &level)(e)),
        }
        enable(&level, controllers)?;
    }
    Ok(())
}

/// What of `needed` a `cgroup.subtree_control` reading `on` lacks, as the
/// `+name` words that turn it on.
pub(super) fn to_enable(on: &str, needed: &[Controller]) -> Vec<String> {
    let on: Vec<&str> = on.split_whitespace().collect();
    needed
        .iter()
        .filter(|c| !on.contains(&c.name()))
        .map(|c| format!("+{}", c.name()))
        .collect()
}

/// Turns `controllers` on in `dir`'s `cgroup.subtree_control`.
fn enable(dir: &Path, controllers: &[Controller]) -> Result<(), LimitsError> {
    if controllers.is_empty() {
        return Ok(());
    }
    let control = dir.join("cgroup.subtree_control");
    let on = fs::read_to_string(&control).map_err(cg_err("reading", &control))?;
    let missing = to_enable(&on, controllers);
    if missing.is_empty() {
        return Ok(());
    }
    write_file(&control, &missing.join(" "))
}

impl Cgroup {
    /// Makes the session's cgroup and writes its limits.
    pub(crate) fn create(
        placement: &Placement,
        limits: &ResourceLimits,
    ) -> Result<Cgroup, LimitsError> {
        let name = format!(
            "dsh-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut cgroup = Cgroup {
            version: placement.version,
            dirs: Vec::new(),
            procs: Vec::new(),
        };
        for (controllers, parent) in &placement.parents {
            let dir = parent.join(&name);
            match placement.version {
                CgroupVersion::V2 => prepare_parent(&placement.root, parent, &placement.needed)?,
                CgroupVersion::V1 => {
                    fs::create_dir_all(parent).map_err(cg_err("making the cgroup", parent))?
                }
            }
            fs::create_dir(&dir).map_err(cg_err("making the cgroup", &dir))?;
            // From here on, Drop removes what was made.
            cgroup.dirs.push((controllers.clone(), dir.clone()));
            cgroup.write_limits(controllers, &dir, limits)?;
            let procs = dir.join("cgroup.procs");
            let file = fs::OpenOptions::new()
                .write(true)
                .open(&procs)
                .map_err(cg_err("opening", &procs))?;
            cgroup.procs.push(OwnedFd::from(file));
        }
        Ok(cgroup)
    }

    fn write_limits(
        &self,
        controllers: &[Controller],
        dir: &Path,
        limits: &ResourceLimits,
    ) -> Result<(), LimitsError> {
        let v2 = self.version == CgroupVersion::V2;
        for controller in controllers {
            match controller {
                Controller::Pids => {
                    if let Some(n) = limits.pids {
                        write_file(&dir.join("pids.max"), &n.to_string())?;
                    }
                }
                Controller::Memory => {
                    if let Some(bytes) = limits.memory {
                        if v2 {
                            write_file(&dir.join("memory.max"), &bytes.to_string())?;
                            let swap = dir.join("memory.swap.max");
                            if swap.exists() {
                                write_file(&swap, "0")?;
                            }
                        } else {
                            write_file(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                            let memsw = dir.join("memory.memsw.limit_in_bytes");
                            if memsw.exists() {
                                write_file(&memsw, &bytes.to_string())?;
                            }
                        }
                    }
                }
                Controller::Cpu => {
                    if let Some(millis) = limits.cpu_millis {
                        let quota = millis.saturating_mul(100).max(1000);
                        if v2 {
                            write_file(&dir.join("cpu.max"), &format!("{quota} 100000"))?;
                        } else {
                            write_file(&dir.join("cpu.cfs_period_us"), "100000")?;
                            write_file(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                        }
                    }
                }
                Controller::Freezer => {}
            }
        }
        Ok(())
    }

    /// The descriptors the child writes `0` to (joining every hierarchy).
    pub(crate) fn join_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// Closes the `cgroup.procs` descriptors once the child has joined.
    pub(crate) fn joined(&mut self) {
        self.procs.clear();
    }

    fn dir_of(&self, controller: Controller) -> Option<&Path> {
        match self.version {
            CgroupVersion::V2 => self.dirs.first().map(|(_, d)| d.as_path()),
            CgroupVersion::V1 => self
                .dirs
                .iter()
                .find(|(cs, _)| cs.contains(&controller))
                .map(|(_, d)| d.as_path()),
        }
    }

    /// The limits met so far.
    pub(crate) fn events(&self) -> LimitEvents {
        let mut events = LimitEvents::default();
        if let Some(dir) = self.dir_of(Controller::Memory) {
            let file = if self.version == CgroupVersion::V2 {
                "memory.events"
            } else {
                "memory.oom_control"
            };
            events.oom_kills = counter(&dir.join(file), "oom_kill");
        }
        if let Some(dir) = self.dir_of(Controller::Pids) {
            events.forks_refused = counter(&dir.join("pids.events"), "max");
        }
        events
    }

    /// The processes in the cgroup (pids in this process's namespace).
    pub(crate) fn members(&self) -> Vec<i32> {
        let Some((_, dir)) = self.dirs.first() else {
            return Vec::new();
        };
        fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// `true` once no process is left in it.
    pub(crate) fn is_empty(&self) -> bool {
        match (self.version, self.dirs.first()) {
            (CgroupVersion::V2, Some((_, dir))) => {
                match fs::read_to_string(dir.join("cgroup.events")) {
                    Ok(text) => text.lines().any(|l| l.trim() == "populated 0"),
                    Err(_) => self.members().is_empty(),
                }
            }
            _ => self.members().is_empty(),
        }
    }

    /// `SIGKILL` to everything in it at once: `cgroup.kill` on v2; on v1 the
    /// tree is frozen (nothing can fork while its members are listed and
    /// killed), killed, and thawed so the kills are delivered.
    pub(crate) fn kill(&self) {
        match self.version {
            CgroupVersion::V2 => {
                let Some((_, dir)) = self.dirs.first() else {
                    return;
                };
                if write_file(&dir.join("cgroup.kill"), "1").is_err() {
                    // Before Linux 5.14: kill until empty (bounded).
                    for _ in 0..100 {
                        let members = self.members();
                        if members.is_empty() {
                            break;
                        }
                        for pid in members {
                            // SAFETY: kill(2) with a pid read from our own cgroup.
                            unsafe { libc::kill(pid, libc::SIGKILL) };
                        }
                    }
                }
            }
            CgroupVersion::V1 => {
                let freezer = self.dir_of(Controller::Freezer).map(Path::to_path_buf);
                if let Some(f) = &freezer {
                    let state = f.join("freezer.state");
                    let _ = write_file(&state, "FROZEN");
                    for _ in 0..1000 {
                        match fs::read_to_string(&state) {
                            Ok(s) if s.trim() == "FREEZING" => std::thread::yield_now(),
                            _ => break,
                        }
                    }
                }
                for pid in self.members() {
                    // SAFETY: kill(2) with a pid read from our own cgroup.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                if let Some(f) = &freezer {
                    let _ = write_file(&f.join("freezer.state"), "THAWED");
                }
            }
        }
    }

    /// Removes the directories (only an empty cgroup can be removed);
    /// `false` if one is still there.
    pub(crate) fn remove(&mut self) -> bool {
        self.procs.clear();
        self.dirs.retain(|(_, dir)| match fs::remove_dir(dir) {
            Ok(()) => false,
            Err(e) => e.kind() != io::ErrorKind::NotFound,
        });
        self.dirs.is_empty()
    }
}

impl Drop for Cgroup {
    /// Kills what is left and removes the directories, on tokio's blocking
    /// pool when there is a runtime (cgroupfs is written with blocking
    /// calls, the v1 freezer is waited for), where a cgroup whose last
    /// processes are still dying is tried again for up to 5 s; in place,
    /// once, otherwise.
    fn drop(&mut self) {
        if self.dirs.is_empty() {
            return;
        }
        let rest = Cgroup {
            version: self.version,
            dirs: std::mem::take(&mut self.dirs),
            procs: Vec::new(),
        };
        crate::blocking::detach_off_runtime(move |in_pool| rest.tear_down(in_pool));
    }
}

impl Cgroup {
    /// [`Drop`]'s work: kill, remove (retried while `patient`), and leave
    /// nothing for the next `Drop`.
    fn tear_down(mut self, patient: bool) {
        if !self.is_empty() {
            self.kill();
        }
        let tries = if patient { 500 } else { 1 };
        for attempt in 0..tries {
            if self.remove() {
                return;
            }
            if attempt + 1 < tries {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        tracing::warn!(dirs = ?self.dirs, "a session's cgroup could not be removed");
        self.dirs.clear();
    }
}

/// The number after `key` in a flat-keyed cgroup file (`memory.events`).
fn counter(path: &Path, key: &str) -> u64 {
    fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let (k, v) = line.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok()).flatten()
            })
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_name_their_hierarchies() {
        let v1 = parse_mountinfo_line("32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct").unwrap();
        assert!(!v1.v2);
        assert_eq!(v1.point, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert!(v1.controllers.iter().any(|c| c == "cpu"));
        let v2 = parse_mountinfo_line(
            "41 31 0:38 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate",
        )
        .unwrap();
        assert!(v2.v2);
        assert!(parse_mountinfo_line("1 0 0:1 / / rw - ext4 /dev/sda rw").is_none());
        assert_eq!(unescape_octal("/a\\040b"), "/a b");
    }

    #[test]
    fn a_parent_means_the_same_inside_the_hierarchy_or_under_its_mount() {
        let mount = Path::new("/sys/fs/cgroup");
        assert_eq!(
            beneath(mount, Path::new("/dsh")),
            Path::new("/sys/fs/cgroup/dsh")
        );
        assert_eq!(
            beneath(mount, Path::new("/sys/fs/cgroup/dsh/a")),
            Path::new("/sys/fs/cgroup/dsh/a")
        );
        assert_eq!(
            beneath(mount, Path::new("../../etc")),
            Path::new("/sys/fs/cgroup/etc")
        );
    }

    #[test]
    fn counters_are_read_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.events");
        fs::write(&path, "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\n").unwrap();
        assert_eq!(counter(&path, "oom_kill"), 1);
        assert_eq!(counter(&path, "max"), 12);
        assert_eq!(counter(&path, "missing"), 0);
    }
}
