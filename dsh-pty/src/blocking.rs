//! Blocking work kept off tokio's runtime threads.
//!
//! Starting a session blocks: opening the terminal, making a cgroup and
//! writing its limits, and `fork` + waiting for the child's `exec` (which,
//! for a confined shell, includes the whole namespace chain of the
//! sandbox's hook). Ending a cgroup blocks too (`cgroup.kill`, the v1
//! freezer, `rmdir`). All of that runs on tokio's blocking pool, whose
//! threads carry the runtime's context (the child reaper, the I/O driver a
//! terminal registers with, `tokio::spawn`), so a runtime's workers keep
//! serving every other task while hundreds of sessions start or end.
//!
//! The blocking pool, not a thread of our own: its threads are reused
//! (a spawn costs no thread creation once warm), it grows with the number
//! of spawns in flight (a dedicated thread would start them one after the
//! other), and a job there already runs inside the runtime's context.
//!
//! At most one spawn per CPU is in flight ([`spawn_off_runtime`] waits
//! for its turn asynchronously): `fork` takes the parent's memory map for
//! writing, so hundreds of concurrent forks of this process would stall
//! every thread of it that faults a page or maps memory (the runtime's
//! workers included) for the whole storm; a few at a time keep the CPU
//! busy and the workers free.

use std::sync::OnceLock;

use tokio::sync::Semaphore;

use crate::PtyError;

/// The spawns allowed in flight at once: one per CPU, at least two.
fn spawn_turns() -> &'static Semaphore {
    static TURNS: OnceLock<Semaphore> = OnceLock::new();
    TURNS.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        Semaphore::new(cpus.max(2))
    })
}

/// Runs `work`, which starts something, on tokio's blocking pool once
/// one of the spawn turns is free, and returns its result.
///
/// Cancellation never leaks what `work` started: if the future awaiting
/// it is dropped, the job still runs to the end and tokio drops its result
/// on the thread that ran it, so a session's `Drop` ends the session (the
/// same as dropping a session that was returned). If the runtime shuts
/// down before the job started, the job is dropped unrun: nothing was
/// started. A panic in `work` resumes in the caller.
pub(crate) async fn spawn_off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, PtyError> + Send + 'static,
) -> Result<T, PtyError> {
    let turn = spawn_turns().acquire().await.map_err(|_| {
        PtyError::io(
            "waiting for a turn to spawn",
            std::io::Error::other("the spawn turns were closed"),
        )
    })?;
    let job = move || {
        let _turn = turn;
        work()
    };
    match tokio::task::spawn_blocking(job).await {
        Ok(result) => result,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        Err(_) => Err(PtyError::io(
            "starting the session on tokio's blocking pool",
            std::io::Error::other("the runtime is shutting down"),
        )),
    }
}

/// A job that runs when it is dropped, wherever that is.
#[cfg(unix)]
struct RunOnDrop<F: FnOnce(bool)> {
    work: Option<F>,
    /// Set on the blocking pool; `false` when the job runs in place.
    in_pool: bool,
}

#[cfg(unix)]
impl<F: FnOnce(bool)> Drop for RunOnDrop<F> {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            work(self.in_pool);
        }
    }
}

/// Runs `work`, which ends something and must run, on tokio's blocking
/// pool without waiting for it (for `Drop`, which cannot await); in place
/// when there is no runtime, or when the runtime drops the job unrun (it
/// is shutting down). `work` is told whether it runs on the pool (where it
/// may wait a little) or in place (where it should not).
#[cfg(unix)]
pub(crate) fn detach_off_runtime(work: impl FnOnce(bool) + Send + 'static) {
    let mut job = RunOnDrop {
        work: Some(work),
        in_pool: false,
    };
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(move || {
                job.in_pool = true;
                drop(job);
            });
        }
        Err(_) => drop(job),
    }
}

/// Runs `/proc` (or cgroupfs) work on tokio's blocking pool, never on the
/// runtime's own threads; in place when the pool no longer runs jobs (the
/// runtime is shutting down).
#[cfg(unix)]
pub(crate) async fn off_runtime<T: Send + 'static>(
    work: impl Fn() -> T + Clone + Send + 'static,
) -> T {
    match tokio::task::spawn_blocking(work.clone()).await {
        Ok(value) => value,
        Err(_) => work(),
    }
}
