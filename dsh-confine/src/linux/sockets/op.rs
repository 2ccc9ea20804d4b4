//! The supervisor's table of calls: a row per notification being
//! answered, and its caller.

use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};

use libc::{c_int, c_long};

use super::errno;
use crate::linux::sys;

/// `CLOCK_MONOTONIC` in nanoseconds (0 if the clock cannot be read).
pub(super) fn now() -> u64 {
    sys::monotonic_ns().unwrap_or(0)
}

/// A row's descriptor `fd` (`-1`: none), borrowed.
fn held(fd: &c_int) -> Result<BorrowedFd<'_>, i32> {
    if *fd < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: a row's descriptor is open while the row holds it; only
    // `close`, through `&mut` of the row, closes it (see [`Op`]).
    Ok(unsafe { BorrowedFd::borrow_raw(*fd) })
}

/// A row's descriptor `fd` (`-1`: none), closed and set to -1; for rows of
/// the table, which hold plain numbers (see [`Op`]).
fn close(fd: &mut c_int) {
    if *fd >= 0 {
        // SAFETY: the row owns the descriptor, which this code opened;
        // its number is forgotten below.
        drop(unsafe { OwnedFd::from_raw_fd(*fd) });
    }
    *fd = -1;
}

/// The process that made a call.
#[derive(Clone, Copy)]
pub(super) struct Caller {
    pub(super) id: u64,
    pub(super) tid: u32,
    pub(super) tgid: i32,
    /// A pidfd of its thread group (owned by the `Op` that holds it).
    pub(super) pidfd: c_int,
}

impl Caller {
    /// The pidfd of its thread group (`EBADF` before it is opened).
    pub(super) fn pidfd(&self) -> Result<BorrowedFd<'_>, i32> {
        held(&self.pidfd)
    }
}

/// One notification being answered: a row of the supervisor's table. A
/// call that would block stays here until it can go on, its time (the
/// socket's `SO_SNDTIMEO`) is up, or its caller is gone.
///
/// A row is plain data in the supervisor's mapping (written there after
/// the fork, no allocation), so it holds its descriptors as numbers
/// (`-1`: none), owned by the row and closed by [`Op::release`] and
/// [`Op::next_message`].
#[derive(Clone, Copy)]
pub(super) struct Op {
    pub(super) used: bool,
    pub(super) caller: Caller,
    pub(super) nr: c_long,
    pub(super) args: [u64; 6],
    /// The caller's socket, fetched (`pidfd_getfd`).
    pub(super) sock: c_int,
    /// The caller does not wait: `O_NONBLOCK` on its socket or
    /// `MSG_DONTWAIT`.
    pub(super) nonblocking: bool,
    /// A stream socket (a send may go out in parts).
    pub(super) stream: bool,
    /// The socket is a Unix one (whose waits have no poll event).
    pub(super) unix: bool,
    /// Wait for `POLLOUT` on `sock` (else: try again at the next tick).
    pub(super) writable: bool,
    /// When the caller's `SO_SNDTIMEO` is up (`u64::MAX`: never).
    pub(super) deadline: u64,
    /// The send flags the caller gave.
    pub(super) flags: c_int,
    /// The address of the current message (or the connect) was read.
    pub(super) addressed: bool,
    /// Its resolved pathname socket (`O_PATH`), or -1.
    pub(super) target: c_int,
    /// Its address as read, `raw_len` bytes (0: none).
    pub(super) raw: libc::sockaddr_storage,
    pub(super) raw_len: usize,
    /// `sendmmsg`: messages sent.
    pub(super) done: usize,
    /// Bytes of the current message sent.
    pub(super) sent: usize,
}

impl Op {
    /// A free row.
    pub(super) fn free() -> Op {
        Op {
            used: false,
            caller: Caller {
                id: 0,
                tid: 0,
                tgid: 0,
                pidfd: -1,
            },
            nr: 0,
            args: [0; 6],
            sock: -1,
            nonblocking: false,
            stream: false,
            unix: false,
            writable: false,
            deadline: u64::MAX,
            flags: 0,
            addressed: false,
            target: -1,
            raw: sys::zeroed(),
            raw_len: 0,
            done: 0,
            sent: 0,
        }
    }

    /// The caller's socket (`EBADF` before it is fetched).
    pub(super) fn sock(&self) -> Result<BorrowedFd<'_>, i32> {
        held(&self.sock)
    }

    /// An integer `SOL_SOCKET` option of the caller's socket.
    pub(super) fn socket_int(&self, option: c_int) -> Result<c_int, i32> {
        sys::socket_int(self.sock()?, option).map_err(errno)
    }

    /// When a blocking call on the caller's socket gives up: its
    /// `SO_SNDTIMEO` from now (`u64::MAX`: none), as the kernel's own wait
    /// would.
    pub(super) fn send_deadline(&self) -> Result<u64, i32> {
        let tv = sys::send_timeout(self.sock()?).map_err(errno)?;
        if tv.tv_sec <= 0 && tv.tv_usec <= 0 {
            return Ok(u64::MAX);
        }
        let ns = (tv.tv_sec.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(tv.tv_usec.max(0) as u64 * 1000);
        Ok(now().saturating_add(ns))
    }

    /// Closes what the row holds and frees it.
    pub(super) fn release(&mut self) {
        close(&mut self.sock);
        close(&mut self.target);
        close(&mut self.caller.pidfd);
        self.used = false;
    }

    /// Forgets the address of the message that was just sent.
    pub(super) fn next_message(&mut self) {
        close(&mut self.target);
        self.addressed = false;
        self.raw_len = 0;
        self.sent = 0;
    }

    pub(super) fn timed_out(&self) -> bool {
        self.deadline != u64::MAX && now() >= self.deadline
    }
}

/// What handling a notification came to.
pub(super) enum Step {
    /// Answer now (the value, or the errno).
    Answer(Result<i64, i32>),
    /// The call waits in the table.
    Wait,
}
