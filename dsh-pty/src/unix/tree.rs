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

#[cfg(target_os = "linux")]
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal as NixSignal, kill, killpg};
use nix::unistd::Pid;
use tokio::sync::watch;
use tokio::time::Instant;

use super::procfs;
use crate::ExitStatus;
use crate::blocking::off_runtime;

/// Sends each of `sigs`, in order, to every live member of session `sid`
/// (one reading of the process table for all of them) and to the group
/// `sid`. Only a first, graceful signal may use a shared reading (see
/// [`SharedScans`](crate::scans::SharedScans)); a last one (`SIGKILL`) reads
/// anew, so nothing started a moment before is missed.
fn signal_session(sid: i32, sigs: &[NixSignal]) {
    let fresh = sigs.contains(&NixSignal::SIGKILL);
    let members = procfs::session_members(sid, fresh);
    for &sig in sigs {
        for &pid in &members {
            let _ = kill(Pid::from_raw(pid), sig);
        }
        let _ = killpg(Pid::from_raw(sid), sig);
    }
}

/// `true` while some process of session `sid` lives, as of a reading of
/// the process table begun after this call (never a shared older one: a
/// session found empty is never looked at again, so a process started
/// just before must not be missed). Where the session's members cannot be
/// listed this only knows about the leader's process group.
fn session_alive(sid: i32) -> bool {
    if cfg!(any(target_os = "linux", target_os = "macos")) {
        !procfs::session_members(sid, true).is_empty()
    } else {
        killpg(Pid::from_raw(sid), None).is_ok()
    }
}

/// A terminal session's process tree, ended at most once: the members of
/// its cgroup when it has one, else of its terminal session.
#[derive(Debug)]
pub(crate) struct Tree {
    sid: i32,
    /// Shared with the jobs on tokio's blocking pool that read and end it.
    #[cfg(target_os = "linux")]
    cgroup: Option<Arc<std::sync::Mutex<super::cgroup::Cgroup>>>,
    /// Set once [`Tree::end`] saw the session empty: nothing can join a
    /// session whose members are all gone, so a later [`Tree::kill_now`]
    /// has nothing to look for.
    emptied: AtomicBool,
}

impl Tree {
    /// The session whose id (and leader's pid) is `sid`.
    pub(crate) fn new(sid: i32) -> Tree {
        Tree {
            sid,
            #[cfg(target_os = "linux")]
            cgroup: None,
            emptied: AtomicBool::new(false),
        }
    }

    /// The tree of the processes in `cgroup`, led by `sid`.
    #[cfg(target_os = "linux")]
    pub(crate) fn in_cgroup(sid: i32, cgroup: super::cgroup::Cgroup) -> Tree {
        Tree {
            sid,
            cgroup: Some(Arc::new(std::sync::Mutex::new(cgroup))),
            emptied: AtomicBool::new(false),
        }
    }

    /// The limits the tree's cgroup met (`None`: it has none). Reads two
    /// small cgroupfs files in place (a synchronous trait method; cgroupfs
    /// answers from memory and never waits on a device or a lock of ours).
    pub(crate) fn limit_events(&self) -> Option<crate::LimitEvents> {
        #[cfg(target_os = "linux")]
        if let Some(cg) = &self.cgroup {
            return Some(lock(cg).events());
        }
        None
    }

    /// Runs `f` on the cgroup on tokio's blocking pool (cgroupfs is read
    /// and written with blocking calls, and the v1 freezer is waited for),
    /// if the tree has one.
    #[cfg(target_os = "linux")]
    async fn with_cgroup<T: Send + 'static>(
        &self,
        f: impl Fn(&mut super::cgroup::Cgroup) -> T + Clone + Send + 'static,
    ) -> Option<T> {
        let cg = Arc::clone(self.cgroup.as_ref()?);
        Some(off_runtime(move || f(&mut lock(&cg))).await)
    }

    /// Ends a tree that has a cgroup: its members (read from the cgroup,
    /// not `/proc`) get SIGTERM and SIGCONT and the leader SIGHUP, up to
    /// `grace` for them to leave, then the cgroup is killed as one; the
    /// cgroup is removed once empty. Every reading and writing of cgroupfs
    /// runs on tokio's blocking pool.
    #[cfg(target_os = "linux")]
    async fn end_cgroup(
        &self,
        grace: Duration,
        status: &mut watch::Receiver<Option<ExitStatus>>,
    ) -> Option<ExitStatus> {
        self.cgroup.as_ref()?;
        let empty =
            move || async move { self.with_cgroup(|cg| cg.is_empty()).await.unwrap_or(true) };
        let exited = status.borrow().is_some();
        let emptied = self.emptied.load(Ordering::Acquire)
            || (exited && empty().await)
            || {
                if !grace.is_zero() {
                    let sid = self.sid;
                    self.with_cgroup(move |cg| {
                        for pid in cg.members() {
                            let _ = kill(Pid::from_raw(pid), NixSignal::SIGTERM);
                            let _ = kill(Pid::from_raw(pid), NixSignal::SIGCONT);
                        }
                        let _ = kill(Pid::from_raw(sid), NixSignal::SIGHUP);
                    })
                    .await;
                }
                wait_until(status, Instant::now() + grace, empty).await
            }
            || {
                self.with_cgroup(|cg| cg.kill()).await;
                wait_until(status, Instant::now() + Duration::from_secs(5), empty).await
            };
        if emptied {
            self.emptied.store(true, Ordering::Release);
            self.with_cgroup(|cg| cg.remove()).await;
        }
        let reaped = *status.borrow();
        Some(reaped.unwrap_or_else(ExitStatus::unknown))
    }

    /// SIGTERM (and SIGHUP to the leader, with SIGCONT so stopped jobs can
    /// act), up to `grace` for everyone to leave, then SIGKILL; waits
    /// (bounded) until the leader is reaped and the session is empty. Every
    /// reading of the process table runs on tokio's blocking pool.
    pub(crate) async fn end(
        &self,
        grace: Duration,
        status: &mut watch::Receiver<Option<ExitStatus>>,
    ) -> ExitStatus {
        #[cfg(target_os = "linux")]
        if let Some(status) = self.end_cgroup(grace, status).await {
            return status;
        }
        let sid = self.sid;
        // Read apart, so that no borrow of the exit record lives across an await.
        let exited = status.borrow().is_some();
        let emptied = self.emptied.load(Ordering::Acquire)
            || (exited && !off_runtime(move || session_alive(sid)).await)
            || {
                off_runtime(move || {
                    signal_session(sid, &[NixSignal::SIGTERM, NixSignal::SIGCONT]);
                    let _ = kill(Pid::from_raw(sid), NixSignal::SIGHUP);
                })
                .await;
                wait_empty(sid, status, Instant::now() + grace).await
            }
            || {
                off_runtime(move || signal_session(sid, &[NixSignal::SIGKILL])).await;
                // SIGKILL cannot be refused; this bound only guards against a
                // process stuck in uninterruptible sleep.
                wait_empty(sid, status, Instant::now() + Duration::from_secs(5)).await
            };
        if emptied {
            self.emptied.store(true, Ordering::Release);
        }
        let reaped = *status.borrow();
        reaped.unwrap_or_else(ExitStatus::unknown)
    }

    /// SIGKILL to every member at once, for `Drop`, which cannot wait:
    /// unless [`Tree::end`] already saw the session empty, the cgroup is
    /// killed (and then removed) or the process table read and signalled
    /// by a job handed to tokio's blocking pool without waiting for it;
    /// in place when there is no runtime (or it drops the job unrun).
    pub(crate) fn kill_now(&self, status: &watch::Receiver<Option<ExitStatus>>) {
        if self.emptied.load(Ordering::Acquire) {
            return;
        }
        // The leader's own group at once, before anything is handed off:
        // one system call, no reading. A confined shell's leader is its
        // supervisor, whose death ends the sandbox's PID namespace, so the
        // shell can do nothing more (such as write where a placeholder the
        // dropping code removes next stood) while the rest is found.
        if status.borrow().is_none() {
            let _ = killpg(Pid::from_raw(self.sid), NixSignal::SIGKILL);
        }
        #[cfg(target_os = "linux")]
        if let Some(cg) = &self.cgroup {
            // The job holds the cgroup: its last reference goes there, so
            // the removal (`Cgroup`'s `Drop`) runs off the runtime too.
            let cg = Arc::clone(cg);
            crate::blocking::detach_off_runtime(move |_| lock(&cg).kill());
            return;
        }
        let (sid, status) = (self.sid, status.clone());
        crate::blocking::detach_off_runtime(move |_| {
            if status.borrow().is_none() || session_alive(sid) {
                signal_session(sid, &[NixSignal::SIGKILL]);
            }
        });
    }
}

/// Waits until the leader is reaped and the session is empty (`true`), or
/// until `until` (`false`).
async fn wait_empty(
    sid: i32,
    status: &mut watch::Receiver<Option<ExitStatus>>,
    until: Instant,
) -> bool {
    wait_until(status, until, || off_runtime(move || !session_alive(sid))).await
}

/// Waits until the leader is reaped and `gone` says the rest left too
/// (`true`), or until `until` (`false`).
async fn wait_until<F, Fut>(
    status: &mut watch::Receiver<Option<ExitStatus>>,
    until: Instant,
    mut gone: F,
) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    // The leader's exit is an event; the other members' exits are not (they
    // are not our children), so they are checked every few milliseconds. This
    // only runs while a session is being torn down.
    let mut step = Duration::from_millis(1);
    loop {
        let leader_done = status.borrow().is_some();
        if leader_done && gone().await {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
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

/// The cgroup, whoever panicked while holding it.
#[cfg(target_os = "linux")]
fn lock(
    cg: &std::sync::Mutex<super::cgroup::Cgroup>,
) -> std::sync::MutexGuard<'_, super::cgroup::Cgroup> {
    cg.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
