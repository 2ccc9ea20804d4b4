//! What the sandbox's integration tests share.

/// A directory for test files that a confined shell can see wherever the
/// checkout lives: the shell's `/tmp` is private, so not under `/tmp`.
pub(crate) fn visible_tmp() -> std::path::PathBuf {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    if !target.starts_with("/tmp") {
        return target.to_owned();
    }
    let var_tmp = std::path::PathBuf::from("/var/tmp");
    assert!(
        var_tmp.is_dir(),
        "the checkout is under /tmp, which confined shells do not see, and /var/tmp is missing"
    );
    var_tmp
}

/// A pidfd of process `pid`, if it is still there.
#[allow(dead_code)]
pub(crate) fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    // SAFETY: pidfd_open takes no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a descriptor pidfd_open just returned, owned by nothing else.
    (fd >= 0).then(|| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// Waits until each of `pids` has ended (its pidfd becomes readable when it
/// exits, zombie or reaped: an event, not a poll), `bound` at most in all;
/// returns those still running.
#[allow(dead_code)]
pub(crate) async fn ended_within(pids: &[i32], bound: std::time::Duration) -> Vec<i32> {
    let deadline = tokio::time::Instant::now() + bound;
    let mut left = Vec::new();
    for &pid in pids {
        let Some(fd) = pidfd(pid) else {
            continue;
        };
        // SAFETY: an owned descriptor: open, and the same one, for the
        // `AsyncFd`'s whole life.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .unwrap();
        if tokio::time::timeout_at(deadline, fd.readable())
            .await
            .is_err()
        {
            left.push(pid);
        }
    }
    left
}

/// `command`'s output once its program can be run: until every child forked
/// by other tests while the program (a fresh copy of a test binary) was open
/// for writing has exec'd, running it fails with `ETXTBSY` (tried again for
/// up to 30 s).
#[allow(dead_code, clippy::unwrap_used)]
pub(crate) fn output_when_not_busy(command: &mut std::process::Command) -> std::process::Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match command.output() {
            Err(e)
                if e.raw_os_error() == Some(libc::ETXTBSY)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::yield_now();
            }
            other => return other.unwrap(),
        }
    }
}
