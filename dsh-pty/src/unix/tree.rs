//! Ending a terminal session's whole process tree.
//!
//! Interactive job control puts each job in its own process group, and a
//! double-forked child is nobody's child any more, but all of them stay in the
//! terminal *session* whose id is the leader's pid. On Linux the session's
//! members are found in `/proc`, on macOS through `proc_listallpids` and
//! `getsid`, and signalled one by one; elsewhere the leader's group and the
//! terminal's foreground group are signalled.
//!
//! Process ids are read, then signalled: a process that exits in between and
//! whose id is reused at once by an unrelated process could be signalled too.
//! Linux's pid allocator makes that window practically unreachable.

use std::time::Duration;

use nix::sys::signal::{Signal as NixSignal, kill, killpg};
use nix::unistd::Pid;
use tokio::sync::watch;
use tokio::time::Instant;

use super::procfs;
use crate::ExitStatus;

/// Sends `sig` to every live member of session `sid` and to the group `sid`.
/// Only a first, graceful signal may use a shared reading of the process
/// table (see [`crate::SharedScans`]); a last one (`SIGKILL`) reads anew, so
/// nothing started a moment before is missed.
pub(crate) fn signal_session(sid: i32, sig: NixSignal) {
    let fresh = sig == NixSignal::SIGKILL;
    for pid in procfs::session_members(sid, fresh) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
    let _ = killpg(Pid::from_raw(sid), sig);
}

/// `true` while some process of session `sid` lives. Where the session's
/// members cannot be listed this only knows about the leader's process group.
pub(crate) fn session_alive(sid: i32) -> bool {
    if cfg!(any(target_os = "linux", target_os = "macos")) {
        !procfs::session_members(sid, false).is_empty()
    } else {
        killpg(Pid::from_raw(sid), None).is_ok()
    }
}

/// SIGTERM (and SIGHUP to the leader, with SIGCONT so stopped jobs can act),
/// up to `grace` for everyone to leave, then SIGKILL; waits (bounded) until
/// the leader is reaped and the session is empty.
pub(crate) async fn kill_session(
    sid: i32,
    grace: Duration,
    status: &mut watch::Receiver<Option<ExitStatus>>,
) -> ExitStatus {
    if status.borrow().is_none() || session_alive(sid) {
        signal_session(sid, NixSignal::SIGTERM);
        signal_session(sid, NixSignal::SIGCONT);
        let _ = kill(Pid::from_raw(sid), NixSignal::SIGHUP);
        wait_empty(sid, status, Instant::now() + grace).await;
        if status.borrow().is_none() || session_alive(sid) {
            signal_session(sid, NixSignal::SIGKILL);
            // SIGKILL cannot be refused; this bound only guards against a
            // process stuck in uninterruptible sleep.
            wait_empty(sid, status, Instant::now() + Duration::from_secs(5)).await;
        }
    }
    let reaped = *status.borrow();
    reaped.unwrap_or_else(ExitStatus::unknown)
}

async fn wait_empty(sid: i32, status: &mut watch::Receiver<Option<ExitStatus>>, until: Instant) {
    // The leader's exit is an event; the other members' exits are not (they
    // are not our children), so they are checked every few milliseconds. This
    // only runs while a session is being torn down.
    let mut step = Duration::from_millis(1);
    loop {
        let leader_done = status.borrow().is_some();
        if leader_done && !session_alive(sid) {
            return;
        }
        let now = Instant::now();
        if now >= until {
            return;
        }
        let nap = step.min(until - now);
        if leader_done || status.has_changed().is_err() {
            tokio::time::sleep(nap).await;
        } else {
            let _ = tokio::time::timeout(nap, status.changed()).await;
        }
        step = (step * 2).min(Duration::from_millis(20));
    }
}
