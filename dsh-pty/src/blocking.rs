//! Blocking work kept off tokio's runtime threads.
//!
//! Starting a session blocks: opening the terminal, making a cgroup and
//! writing its limits, and `fork` + waiting for the child's `exec` (which,
//! for a confined shell, includes the whole namespace chain of the
//! sandbox's hook). Ending a cgroup blocks too (`cgroup.kill`, the v1
//! freezer, `rmdir`). None of it runs on a runtime's worker: spawns run on
//! spawner threads and the rest on tokio's blocking pool (below), each
//! inside the runtime's context (the child reaper, the I/O driver a
//! terminal registers with, `tokio::spawn`), so a runtime's workers keep
//! serving every other task while hundreds of sessions start or end.
//!
//! Spawns run on threads of their own ("spawners", one per spawn turn
//! below, started on first use and never ending), not on tokio's blocking
//! pool: a child's `PR_SET_PDEATHSIG` (bubblewrap's `--die-with-parent`,
//! a user's hook) fires when the *thread* that forked it exits, and the
//! blocking pool ends threads that have been idle for a few seconds, which
//! killed live sessions. A spawner enters the caller's runtime first, so
//! the job runs inside its context as a blocking-pool job would. The other
//! jobs here (ending things, `/proc` readings) fork nothing and stay on the
//! blocking pool.
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
    TURNS.get_or_init(|| Semaphore::new(spawn_turn_count()))
}

/// How many spawn turns (and spawner threads) there are.
fn spawn_turn_count() -> usize {
    std::thread::available_parallelism()
        .map_or(2, usize::from)
        .max(2)
}

/// A job for a spawner.
type SpawnJob = Box<dyn FnOnce() + Send>;

/// The spawners' queue: as many threads as spawn turns, so that every job
/// holding a turn runs at once. `None` if no thread could be started.
fn spawners() -> Option<&'static std::sync::mpsc::Sender<SpawnJob>> {
    static SPAWNERS: OnceLock<Option<std::sync::mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNERS
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<SpawnJob>();
            let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
            let mut started = 0;
            for n in 0..spawn_turn_count() {
                let rx = std::sync::Arc::clone(&rx);
                let thread = std::thread::Builder::new()
                    .name(format!("dsh-pty-spawn-{n}"))
                    .spawn(move || {
                        loop {
                            let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                            match job {
                                Ok(job) => job(),
                                Err(_) => return,
                            }
                        }
                    });
                match thread {
                    Ok(_) => started += 1,
                    Err(err) => tracing::warn!(%err, "a spawner thread could not be started"),
                }
            }
            (started > 0).then_some(tx)
        })
        .as_ref()
}

/// Runs `work`, which starts something, on a spawner thread (see the
/// module's documentation) once one of the spawn turns is free, inside the
/// caller's runtime, and returns its result.
///
/// Cancellation never leaks what `work` started: if the future awaiting
/// it is dropped, the job still runs to the end and its result is dropped
/// on the spawner, so a session's `Drop` ends the session (the same as
/// dropping a session that was returned). A panic in `work` resumes in the
/// caller.
pub(crate) async fn spawn_off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, PtyError> + Send + 'static,
) -> Result<T, PtyError> {
    let turn = spawn_turns().acquire().await.map_err(|_| {
        PtyError::io(
            "waiting for a turn to spawn",
            std::io::Error::other("the spawn turns were closed"),
        )
    })?;
    let runtime = tokio::runtime::Handle::current();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let job: SpawnJob = Box::new(move || {
        let _turn = turn;
        let _runtime = runtime.enter();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        // A caller that went away no longer waits: what was started is
        // dropped here, which ends it.
        drop(done_tx.send(result));
    });
    let queued = spawners().map(|queue| queue.send(job));
    if !matches!(queued, Some(Ok(()))) {
        return Err(PtyError::io(
            "starting the session",
            std::io::Error::other("no spawner thread could be started"),
        ));
    }
    match done_rx.await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => Err(PtyError::io(
            "starting the session",
            std::io::Error::other("the spawner dropped the job"),
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
