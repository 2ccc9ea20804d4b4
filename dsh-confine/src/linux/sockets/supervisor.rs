//! The supervisor's loop: it polls the listener, init and the calls that
//! wait, receives notifications, starts and goes on with calls, and
//! answers them.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};

use libc::{c_int, c_long};

use super::errno;
use super::guard::Guard;
use super::mapping::{MAX_PENDING, Mapping};
use super::op::{Caller, Op, Step, now};
use crate::linux::sys;

/// `CAP_SYS_PTRACE` (linux/capability.h).
const CAP_SYS_PTRACE: u32 = 19;
/// How often a waiting call that has no poll event is tried again, and
/// how often waiting calls are checked for callers that are gone.
const RETRY_MS: c_int = 20;
const SWEEP_MS: c_int = 500;

/// The supervisor's side: serves notifications until init exits.
pub(crate) struct Supervisor<'g> {
    pub(super) guard: &'g Guard,
    listener: OwnedFd,
    /// The host's `/proc`, opened before the view replaced it.
    pub(super) proc_dir: BorrowedFd<'g>,
    pub(super) map: Mapping,
}

impl<'g> Supervisor<'g> {
    /// Prepares the supervisor: its buffer and table, its working directory
    /// (the host's `/proc`, for `self/fd/N` addresses) and its
    /// capabilities.
    pub(crate) fn new(
        guard: &'g Guard,
        listener: OwnedFd,
        proc_dir: BorrowedFd<'g>,
    ) -> io::Result<Self> {
        let map = Mapping::new()?;
        sys::fchdir(proc_dir)?;
        // A send on a closed connection must not end the supervisor; the
        // caller gets its SIGPIPE from `answer`.
        let _ = sys::ignore_signal(libc::SIGPIPE);
        sys::keep_only_capability(CAP_SYS_PTRACE)?;
        Ok(Supervisor {
            guard,
            listener,
            proc_dir,
            map,
        })
    }

    /// The listener this supervisor answers.
    pub(crate) fn listener(&self) -> c_int {
        self.listener.as_raw_fd()
    }

    /// Confines the supervisor to the system calls it makes from here on
    /// (see the module docs).
    pub(crate) fn confine(&self) -> io::Result<()> {
        sys::no_new_privs()?;
        sys::seccomp_install(&self.guard.own)
    }

    /// Fills the poll set for the rows in use (their sockets when they
    /// wait for room, their callers), the listener (while `listening` and
    /// a row is free) and init: `(rows to poll, poll timeout in ms)`.
    fn arm(&self, init_pidfd: BorrowedFd<'_>, listening: bool) -> (usize, c_int) {
        let mut high = 0;
        let mut free = false;
        let mut timeout: c_int = -1;
        let at = now();
        let fds = self.map.poll_set();
        for i in 0..MAX_PENDING {
            let op = *self.map.row(i);
            let (sock, caller) = if op.used {
                high = i + 1;
                let tick = if op.writable { SWEEP_MS } else { RETRY_MS };
                let mut wait = tick;
                if op.deadline != u64::MAX {
                    let left = op.deadline.saturating_sub(at) / 1_000_000 + 1;
                    wait = wait.min(left.min(c_int::MAX as u64) as c_int);
                }
                timeout = if timeout < 0 { wait } else { timeout.min(wait) };
                (if op.writable { op.sock } else { -1 }, op.caller.pidfd)
            } else {
                free = true;
                (-1, -1)
            };
            fds[2 + 2 * i] = libc::pollfd {
                fd: sock,
                events: libc::POLLOUT,
                revents: 0,
            };
            fds[3 + 2 * i] = libc::pollfd {
                fd: caller,
                events: libc::POLLIN,
                revents: 0,
            };
        }
        fds[0] = libc::pollfd {
            fd: if listening && free {
                self.listener.as_raw_fd()
            } else {
                -1
            },
            events: libc::POLLIN,
            revents: 0,
        };
        fds[1] = libc::pollfd {
            fd: init_pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        (high, timeout)
    }

    /// Serves notifications until `init_pidfd` says init exited.
    pub(crate) fn serve(&self, init_pidfd: BorrowedFd<'_>) {
        let mut listening = true;
        loop {
            // The rows in use, what they wait for, and how long to wait.
            let (high, timeout) = self.arm(init_pidfd, listening);
            {
                let fds = &mut self.map.poll_set()[..2 + 2 * high];
                match sys::poll(fds, timeout) {
                    Err(e) if e.raw_os_error() != Some(libc::EINTR) => return,
                    Ok(n) if n > 0 && fds[1].revents != 0 => return,
                    _ => {}
                }
            }
            self.go_on(high);
            let fds = self.map.poll_set();
            if fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                // No process is left under the filter: only init's end.
                listening = false;
            } else if fds[0].revents & libc::POLLIN != 0 {
                self.receive();
            }
        }
    }

    /// After a poll: the calls under way in the first `high` rows, their
    /// callers first (gone: abandoned), then their sockets.
    fn go_on(&self, high: usize) {
        let fds = self.map.poll_set();
        for i in 0..high {
            let op = self.map.row(i);
            if !op.used {
                continue;
            }
            let gone = fds[3 + 2 * i].revents != 0 || !self.valid(op.caller.id);
            if gone {
                // Killed or interrupted: the call is abandoned.
                op.release();
                continue;
            }
            let woken = fds[2 + 2 * i].revents != 0;
            if woken || !op.writable || op.timed_out() {
                match self.progress(op, woken) {
                    Step::Wait => {}
                    Step::Answer(result) => {
                        self.answer(op, result);
                        op.release();
                    }
                }
            }
        }
    }

    /// Receives one notification and starts it: answered at once, or kept
    /// in a free row.
    fn receive(&self) {
        let Some(slot) = (0..MAX_PENDING).find(|&i| !self.map.row(i).used) else {
            return;
        };
        let Ok(notif) = sys::notif_receive(self.listener.as_fd()) else {
            return;
        };
        let op = self.map.row(slot);
        op.used = true;
        op.caller = Caller {
            id: notif.id,
            tid: notif.pid,
            tgid: 0,
            pidfd: -1,
        };
        op.nr = c_long::from(notif.data.nr);
        op.args = notif.data.args;
        op.sock = -1;
        op.target = -1;
        op.addressed = false;
        op.raw_len = 0;
        op.done = 0;
        op.sent = 0;
        op.deadline = u64::MAX;
        op.writable = false;
        op.flags = 0;
        let step = match self.start(op) {
            Ok(step) => step,
            Err(e) => Step::Answer(Err(e)),
        };
        if let Step::Answer(result) = step {
            self.answer(op, result);
            op.release();
        }
    }

    /// Answers the call of `op` (the caller's SIGPIPE, which the
    /// supervisor's own send did not raise, with an `EPIPE` of a send).
    fn answer(&self, op: &Op, result: Result<i64, i32>) {
        let (val, error) = match result {
            Ok(v) => (v, 0),
            Err(e) => (0, -e),
        };
        if result == Err(libc::EPIPE)
            && op.nr != libc::SYS_connect
            && op.nr != libc::SYS_bind
            && op.flags & libc::MSG_NOSIGNAL == 0
            && self.valid(op.caller.id)
        {
            // The calling thread, which waits on us.
            let _ = sys::tgkill(op.caller.tgid, op.caller.tid as libc::pid_t, libc::SIGPIPE);
        }
        let resp = libc::seccomp_notif_resp {
            id: op.caller.id,
            val,
            error,
            flags: 0,
        };
        // ENOENT: the caller is gone or was interrupted; nothing to do.
        let _ = sys::notif_answer(self.listener.as_fd(), &resp);
    }

    /// Whether the notification `id` still waits for its answer.
    pub(super) fn valid(&self, id: u64) -> bool {
        sys::notif_id_valid(self.listener.as_fd(), id).is_ok()
    }

    /// The first attempt at the call in `op`.
    fn start(&self, op: &mut Op) -> Result<Step, i32> {
        self.caller(op)?;
        op.sock = self.fetch(&op.caller, op.args[0] as c_int)?.into_raw_fd();
        let nr = op.nr;
        if nr == libc::SYS_bind {
            return Ok(Step::Answer(self.bind(op)));
        }
        let status = sys::status_flags(op.sock()?).map_err(errno)?;
        op.nonblocking = status & libc::O_NONBLOCK != 0;
        op.unix = op.socket_int(libc::SO_DOMAIN)? == libc::AF_UNIX;
        op.stream = op.socket_int(libc::SO_TYPE)? == libc::SOCK_STREAM;
        if nr == libc::SYS_connect {
            return self.start_connect(op, status);
        }
        op.flags = if nr == libc::SYS_sendmsg {
            op.args[2]
        } else if nr == libc::SYS_sendto || nr == libc::SYS_sendmmsg {
            op.args[3]
        } else {
            return Err(libc::ENOSYS);
        } as c_int;
        op.nonblocking |= op.flags & libc::MSG_DONTWAIT != 0;
        if !op.nonblocking {
            op.deadline = op.send_deadline()?;
        }
        op.writable = !op.unix || op.stream;
        Ok(self.send_some(op, false))
    }

    /// Goes on with a waiting call (`woken`: its socket's poll event came).
    fn progress(&self, op: &mut Op, woken: bool) -> Step {
        if op.nr == libc::SYS_connect {
            self.progress_connect(op, woken)
        } else {
            self.send_some(op, woken)
        }
    }
}
