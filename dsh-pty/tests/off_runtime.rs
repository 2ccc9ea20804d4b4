//! Spawning never runs on a runtime's worker: a hook that waits, in the
//! child, for a task of the same runtime to answer lets the spawn finish
//! only if that task can run meanwhile. And a spawn whose future is
//! dropped still ends the session it started. Linux only (`pipe2`,
//! `pidfd_open`).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use dsh_pty::{NativeBackend, PtyBackend, PtyError, SpawnSpec};
use tokio::io::unix::AsyncFd;

/// How long the hook waits for the test's answer before it gives up (and
/// the spawn fails): generous, it only bounds a failing run.
const HOOK_WAIT_MS: libc::c_int = 20_000;

/// A pipe whose ends close on `exec`; the read end does not block.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 just returned these descriptors, owned by nobody else.
    let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: F_SETFL on a descriptor we own.
    unsafe { libc::fcntl(rx.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    (rx, tx)
}

/// In the child: tells the test it runs (its pid, 4 bytes), then waits
/// (bounded) until the test answers.
#[derive(Debug, Clone, Copy)]
struct Handshake {
    entered: RawFd,
    release: RawFd,
}

// SAFETY: only getpid, write, poll and read, all async-signal-safe, on
// descriptors and memory that exist before the fork; nothing allocates.
unsafe impl dsh_pty::PreExec for Handshake {
    fn pre_exec(&self) -> std::io::Result<()> {
        // SAFETY: plain system calls on descriptors inherited from the
        // parent and on stack memory.
        unsafe {
            let pid = libc::getpid().to_ne_bytes();
            if libc::write(self.entered, pid.as_ptr().cast(), pid.len()) != 4 {
                return Err(std::io::Error::last_os_error());
            }
            let mut wait = libc::pollfd {
                fd: self.release,
                events: libc::POLLIN,
                revents: 0,
            };
            loop {
                match libc::poll(&mut wait, 1, HOOK_WAIT_MS) {
                    1 => break,
                    -1 if *libc::__errno_location() == libc::EINTR => continue,
                    // Nobody answered: the task that would have could not run.
                    _ => return Err(std::io::Error::from_raw_os_error(libc::ETIMEDOUT)),
                }
            }
            let mut byte = 0u8;
            libc::read(self.release, (&raw mut byte).cast(), 1);
        }
        Ok(())
    }
}

/// The test's ends of a handshake, and the hook holding the child's ends.
struct Sides {
    entered: AsyncFd<OwnedFd>,
    release: OwnedFd,
    _child_ends: (OwnedFd, OwnedFd),
    hook: Handshake,
}

fn handshake() -> Sides {
    let (entered_rx, entered_tx) = pipe();
    let (release_rx, release_tx) = pipe();
    let hook = Handshake {
        entered: entered_tx.as_raw_fd(),
        release: release_rx.as_raw_fd(),
    };
    Sides {
        // SAFETY: the `AsyncFd` owns the descriptor for its whole life.
        entered: unsafe { AsyncFd::register(entered_rx) }.unwrap(),
        release: release_tx,
        _child_ends: (entered_tx, release_rx),
        hook,
    }
}

impl Sides {
    fn spec(&self) -> SpawnSpec {
        SpawnSpec::new("bash")
            .args(["--norc", "--noprofile", "--noediting"])
            .env("PS1", "")
            .echo(false)
            .pre_exec(std::sync::Arc::new(self.hook))
    }

    /// Waits (bounded) until the hook runs in the child; its pid.
    async fn entered(&self) -> i32 {
        let wait = async {
            loop {
                let mut guard = self.entered.readable().await.unwrap();
                let mut pid = [0u8; 4];
                // SAFETY: reads into a 4-byte stack buffer.
                let n = unsafe {
                    libc::read(self.entered.as_raw_fd(), pid.as_mut_ptr().cast(), pid.len())
                };
                if n == 4 {
                    return i32::from_ne_bytes(pid);
                }
                guard.clear_ready();
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .expect("the hook never ran")
    }

    /// Lets the hook go on.
    fn release(&self) {
        // SAFETY: writes one byte from a static buffer.
        let n = unsafe { libc::write(self.release.as_raw_fd(), b"g".as_ptr().cast(), 1) };
        assert_eq!(n, 1);
    }
}

/// On a current-thread runtime the spawn's task and this one share the
/// only thread: the hook (in the child) waits for this task's answer, so
/// the spawn finishes only if the parent's side of it does not hold the
/// thread. (Run on the code before spawning moved to the blocking pool,
/// the parent blocked in `fork`+`exec` on the runtime's thread, this task
/// never ran, and the hook gave up after 20 s: `PtyError::Confine`.)
#[tokio::test(flavor = "current_thread")]
async fn a_spawn_leaves_the_runtime_thread_to_other_tasks() {
    let sides = handshake();
    let spec = sides.spec();
    let spawning = tokio::spawn(async move { NativeBackend::new().spawn(spec).await });
    sides.entered().await;
    sides.release();
    let session = tokio::time::timeout(Duration::from_secs(60), spawning)
        .await
        .expect("the spawn never finished")
        .unwrap();
    match session {
        Ok(session) => {
            session.end(Duration::ZERO).await.unwrap();
        }
        Err(PtyError::Confine(err)) => panic!(
            "the spawn held the runtime's only thread: the hook waited for this task in vain ({err})"
        ),
        Err(err) => panic!("the spawn failed: {err}"),
    }
}

/// A spawn whose future is dropped while the child is still in its hook
/// ends the session it started: the process that would have been the
/// shell dies (observed through a pidfd, no sleep).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn a_spawn_whose_future_is_dropped_ends_its_session() {
    let sides = handshake();
    let spec = sides.spec();
    let spawning = tokio::spawn(async move { NativeBackend::new().spawn(spec).await });
    let pid = sides.entered().await;
    // SAFETY: pidfd_open takes a pid and flags; the result is checked.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    assert!(raw >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    // SAFETY: pidfd_open returned a new descriptor that nothing else owns.
    // The `AsyncFd` owns it for its whole life.
    let pidfd = unsafe { AsyncFd::register(OwnedFd::from_raw_fd(raw as RawFd)) }.unwrap();
    spawning.abort();
    let _ = spawning.await;
    // The spawn goes on without anyone waiting for it; the child execs.
    sides.release();
    let _exited = tokio::time::timeout(Duration::from_secs(60), pidfd.readable())
        .await
        .expect("the abandoned session's process still runs")
        .unwrap();
}
