//! What `/proc` tells about a terminal session's processes (Linux); elsewhere
//! these answers are empty and callers fall back to process groups.

use std::path::Path;

#[cfg(not(target_os = "macos"))]
/// One line of `/proc/<pid>/stat`, the fields this crate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub(crate) pid: i32,
    pub(crate) state: u8,
    pub(crate) ppid: i32,
    pub(crate) pgrp: i32,
    pub(crate) session: i32,
    pub(crate) tpgid: i32,
}

#[cfg(not(target_os = "macos"))]
impl ProcStat {
    /// Zombies and dead entries are already gone as far as signals go.
    pub(crate) fn is_alive(&self) -> bool {
        !matches!(self.state, b'Z' | b'X' | b'x')
    }
}

#[cfg(not(target_os = "macos"))]
/// Parses the text of `/proc/<pid>/stat`. The command name may itself hold
/// spaces, parentheses and bytes that are not UTF-8, so fields are counted
/// from the last `)`.
pub(crate) fn parse_stat(pid: i32, text: &[u8]) -> Option<ProcStat> {
    let close = text.iter().rposition(|&b| b == b')')?;
    let mut fields = text[close + 1..]
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    let mut number = || -> Option<i32> { std::str::from_utf8(fields.next()?).ok()?.parse().ok() };
    let ppid = number()?;
    let pgrp = number()?;
    let session = number()?;
    let _tty_nr = number()?;
    let tpgid = number()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        session,
        tpgid,
    })
}

#[cfg(not(target_os = "macos"))]
/// Every process visible in `/proc` (empty where there is no procfs). Each
/// `stat` is opened relative to one descriptor of `/proc` and read into one
/// buffer: closing a session reads the whole table twice, so this is the
/// cost of a close on a host of many processes.
pub(crate) fn all_processes() -> Vec<ProcStat> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
    let Ok(proc_dir) = std::fs::File::open("/proc") else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut buf = [0u8; 1024];
    let mut path = String::with_capacity(24);
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let name = entry.file_name();
        let name = name.to_str()?;
        let pid: i32 = name.parse().ok()?;
        path.clear();
        path.push_str(name);
        path.push_str("/stat");
        let fd = openat(
            Some(proc_dir.as_raw_fd()),
            path.as_str(),
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        // SAFETY: `openat` just returned this descriptor, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let n = nix::unistd::read(fd.as_fd().as_raw_fd(), &mut buf).ok()?;
        parse_stat(pid, &buf[..n])
    })
    .collect()
}

/// How long after it ends one reading of every process serves callers that
/// ask for session members to signal them gracefully while a
/// [`SharedScans`](crate::scans::SharedScans) guard is alive: closing a
/// thousand shells at once reads `/proc` every few milliseconds, not a
/// thousand times. Counted from the reading's end, not its start: a reading
/// of a thousand processes on a busy machine takes about this long itself,
/// and counted from its start it would be stale on arrival. Callers that
/// ask whether a session is empty, and a final `SIGKILL`, use only a
/// reading begun after they asked (those share too: one reading serves
/// every caller that queued before it began), as does every call without a
/// guard.
#[cfg(not(target_os = "macos"))]
const SNAPSHOT_TTL: std::time::Duration = std::time::Duration::from_millis(10);

/// The processes of every session, as read between two instants.
#[cfg(not(target_os = "macos"))]
#[derive(Debug)]
struct Snapshot {
    /// When the reading began: everything alive then and still alive at
    /// `done` is in it.
    taken: std::time::Instant,
    /// When the reading ended.
    done: std::time::Instant,
    by_session: std::collections::HashMap<i32, Vec<i32>>,
}

#[cfg(not(target_os = "macos"))]
impl Snapshot {
    /// Whether this reading may answer a caller that asked at `asked`
    /// (see [`snapshot`]).
    fn serves(&self, asked: std::time::Instant, fresh: bool, sharing: bool) -> bool {
        self.taken >= asked || (!fresh && sharing && self.done.elapsed() < SNAPSHOT_TTL)
    }
}

#[cfg(not(target_os = "macos"))]
static SNAPSHOT: std::sync::Mutex<Option<std::sync::Arc<Snapshot>>> = std::sync::Mutex::new(None);

/// How many [`SharedScans`](crate::scans::SharedScans) guards are alive: only then may a
/// reading be reused.
pub(crate) static SHARING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A reading of the process table for a caller that asked at `asked`: one
/// begun after that moment is as fresh as a reading of its own, so callers
/// that queued behind a reading in progress use the next one instead of
/// each reading again (without this, once a reading takes longer than
/// [`SNAPSHOT_TTL`] — a thousand shells on two busy CPUs — every caller in
/// the queue found the last reading too old and read `/proc` itself). When
/// `fresh` is `false` and a [`SharedScans`](crate::scans::SharedScans) guard is alive, a reading
/// up to [`SNAPSHOT_TTL`] old serves as well.
#[cfg(not(target_os = "macos"))]
fn snapshot(asked: std::time::Instant, fresh: bool) -> std::sync::Arc<Snapshot> {
    let sharing = SHARING.load(std::sync::atomic::Ordering::Acquire) > 0;
    let mut slot = SNAPSHOT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(snap) = slot.as_ref()
        && snap.serves(asked, fresh, sharing)
    {
        return std::sync::Arc::clone(snap);
    }
    let snap = std::sync::Arc::new(read_snapshot());
    *slot = Some(std::sync::Arc::clone(&snap));
    snap
}

/// Reads every process but this one, grouped by session: the ids from
/// `/proc`'s listing and each one's session from `getsid`, a system call
/// that answers from the process table (reading every `/proc/<pid>/stat`
/// instead costs the kernel some microseconds a process, milliseconds on a
/// host of a thousand shells). Zombies are among them; a session's members
/// are checked one by one ([`session_members`]).
#[cfg(not(target_os = "macos"))]
fn read_snapshot() -> Snapshot {
    let me = std::process::id() as i32;
    let taken = std::time::Instant::now();
    let mut by_session: std::collections::HashMap<i32, Vec<i32>> = std::collections::HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
            // A process gone since the listing fails with ESRCH and is skipped.
            if let Ok(sid) = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid)))
                && pid != me
            {
                by_session.entry(sid.as_raw()).or_default().push(pid);
            }
        }
    }
    Snapshot {
        taken,
        done: std::time::Instant::now(),
        by_session,
    }
}

/// Live processes of the terminal session `sid`, excluding this process, as
/// of a reading begun after this call, or (unless `fresh`) one at most
/// [`SNAPSHOT_TTL`] old while readings are shared; each one's state is read
/// now, so zombies and processes gone since the reading are left out.
#[cfg(not(target_os = "macos"))]
pub(crate) fn session_members(sid: i32, fresh: bool) -> Vec<i32> {
    let snapshot = snapshot(std::time::Instant::now(), fresh);
    let Some(pids) = snapshot.by_session.get(&sid) else {
        return Vec::new();
    };
    pids.iter()
        .copied()
        .filter(|&pid| stat_of(pid).is_some_and(|p| p.is_alive() && p.session == sid))
        .collect()
}

#[cfg(not(target_os = "macos"))]
pub(crate) fn stat_of(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

#[cfg(target_os = "linux")]
/// The children of every thread of `pid` (`None` where the kernel does not
/// list them).
fn children(pid: i32) -> Option<Vec<i32>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let text = std::fs::read_to_string(task.ok()?.path().join("children")).ok()?;
        out.extend(
            text.split_ascii_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    Some(out)
}

#[cfg(target_os = "linux")]
/// The live processes of group `pgid`, found from its leader through the
/// process tree rather than by reading every process: the leader, its
/// siblings in the group (a pipeline's other commands) when its parent is in
/// the same terminal session, and their descendants in the group. Falls back
/// to a scan of `/proc` when the leader is gone or the tree cannot be read.
pub(crate) fn group_members(pgid: i32) -> Vec<ProcStat> {
    let scan = || {
        all_processes()
            .into_iter()
            .filter(|p| p.pgrp == pgid && p.is_alive())
            .collect()
    };
    let Some(leader) = stat_of(pgid).filter(|l| l.pgrp == pgid) else {
        return scan();
    };
    // Of the parent only its session matters: `getsid` asks the kernel for
    // it, where reading a `stat` costs tens of microseconds (more for this
    // process, often the parent, whose reading sums over its threads).
    // SAFETY: `getsid` only reads the process table.
    let parent_in_session =
        leader.ppid > 0 && unsafe { libc::getsid(leader.ppid) } == leader.session;
    let mut queue = if parent_in_session {
        match children(leader.ppid) {
            Some(c) => c,
            None => return scan(),
        }
    } else {
        vec![leader.pid]
    };
    let mut members = Vec::new();
    while let Some(pid) = queue.pop() {
        // The leader's reading above serves again.
        let Some(p) = (pid == leader.pid)
            .then_some(leader)
            .or_else(|| stat_of(pid))
        else {
            continue;
        };
        if p.pgrp != pgid || members.iter().any(|m: &ProcStat| m.pid == pid) {
            continue;
        }
        match children(pid) {
            Some(c) => queue.extend(c),
            None => return scan(),
        }
        if p.is_alive() {
            members.push(p);
        }
    }
    members
}

/// Live processes of the terminal session `sid`, excluding this process:
/// every process id from `proc_listallpids`, kept when `getsid` names `sid`.
#[cfg(target_os = "macos")]
pub(crate) fn session_members(sid: i32, _fresh: bool) -> Vec<i32> {
    let me = std::process::id() as i32;
    // SAFETY: a null buffer of size 0 asks only for the number of processes.
    let count = unsafe { libc::proc_listallpids(std::ptr::null_mut(), 0) };
    let Ok(count) = usize::try_from(count) else {
        return Vec::new();
    };
    // Room for processes started since the count.
    let mut pids = vec![0 as libc::c_int; count + 64];
    let bytes =
        libc::c_int::try_from(pids.len() * size_of::<libc::c_int>()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pids` has room for `bytes` bytes.
    let got = unsafe { libc::proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
    let Ok(got) = usize::try_from(got) else {
        return Vec::new();
    };
    pids.truncate(got.min(pids.len()));
    pids.into_iter()
        // SAFETY: `getsid` only reads the process table.
        .filter(|&pid| pid > 0 && pid != me && unsafe { libc::getsid(pid) } == sid)
        .collect()
}

/// Whether a process of a foreground group waits for terminal input, and
/// which.
#[derive(Debug, Default)]
pub(crate) struct TtyWait {
    /// A live process of the group sleeps waiting for input from the
    /// terminal (`super::waits`): `None` where `/proc` cannot tell (not
    /// Linux).
    pub(crate) waiting: Option<bool>,
    /// That process's name (`comm`).
    pub(crate) reader: Option<String>,
}

/// Whether a live process of group `pgid` sleeps waiting for input from
/// the terminal at `tty`, and its name.
pub(crate) fn tty_wait(pgid: i32, tty: &Path) -> TtyWait {
    #[cfg(target_os = "linux")]
    {
        let reader = (pgid > 0).then(|| group_reader_of_tty(pgid, tty)).flatten();
        TtyWait {
            waiting: Some(reader.is_some()),
            reader: reader.and_then(|pid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
                Some(comm.trim_end_matches('\n').to_owned()).filter(|c| !c.is_empty())
            }),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pgid, tty);
        TtyWait::default()
    }
}

/// The session program's state (Linux): the executable it runs and whether
/// it is stopped; `None` where `/proc` cannot tell, or it is gone.
pub(crate) fn leader(pid: i32) -> Option<crate::Leader> {
    #[cfg(target_os = "linux")]
    {
        let stat = stat_of(pid)?;
        let program = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        Some(crate::Leader::new(program, stat.state == b'T'))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

#[cfg(target_os = "linux")]
/// The first live process of group `pgid` that sleeps waiting for input
/// from the terminal at `tty` ([`super::waits`]).
fn group_reader_of_tty(pgid: i32, tty: &Path) -> Option<i32> {
    group_members(pgid)
        .into_iter()
        .filter(|p| p.state == b'S')
        .find(|p| super::waits::waits_for_tty(p.pid, tty))
        .map(|p| p.pid)
}

#[cfg(all(test, not(target_os = "macos")))]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let text = b"4242 (a) b (c)) S 1 4242 4240 34816 4242 4194560 0 0";
        assert_eq!(
            parse_stat(4242, text),
            Some(ProcStat {
                pid: 4242,
                state: b'S',
                ppid: 1,
                pgrp: 4242,
                session: 4240,
                tpgid: 4242,
            })
        );
        assert_eq!(parse_stat(1, b"garbage"), None);
        // A name that is not UTF-8 does not hide a process.
        let text = b"7 (\xff\xfe) R 1 7 7 0 -1 0";
        assert_eq!(parse_stat(7, text).map(|p| p.session), Some(7));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_reading_serves_who_asked_before_it_or_shares_a_recent_one() {
        use std::time::{Duration, Instant};
        let now = Instant::now();
        let ago = |ms| now.checked_sub(Duration::from_millis(ms)).unwrap();
        let reading = |taken, done| Snapshot {
            taken,
            done,
            by_session: Default::default(),
        };
        // Begun after the caller asked: as fresh as its own, even for SIGKILL.
        let later = reading(ago(3), now);
        assert!(later.serves(ago(5), true, false));
        // Begun before: only a recent one, only to a graceful caller, and only
        // while readings are shared.
        let recent = reading(ago(4), ago(1));
        assert!(recent.serves(now, false, true));
        assert!(!recent.serves(now, true, true));
        assert!(!recent.serves(now, false, false));
        assert!(!reading(ago(40), ago(30)).serves(now, false, true));
        // A reading longer than the TTL is not stale on arrival: its age
        // counts from its end.
        let long = reading(ago(15), now);
        assert!(long.serves(now, false, true));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn finds_a_group_through_the_tree() {
        let me = std::process::id() as i32;
        let pgid = nix::unistd::getpgrp().as_raw();
        let members = group_members(pgid);
        let scanned: Vec<i32> = all_processes()
            .into_iter()
            .filter(|p| p.pgrp == pgid && p.is_alive())
            .map(|p| p.pid)
            .collect();
        assert!(scanned.contains(&me));
        assert!(members.iter().any(|m| m.pid == me), "{members:?}");
        for m in &members {
            assert!(scanned.contains(&m.pid), "{m:?} is not in group {pgid}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sees_this_process() {
        let me = std::process::id() as i32;
        assert!(all_processes().iter().any(|p| p.pid == me && p.is_alive()));
    }
}
