//! `connect` and `bind`: the calls with one address, made on the caller's
//! socket without waiting.

use std::os::fd::AsFd;

use libc::c_int;

use super::errno;
use super::op::{Op, Step};
use super::supervisor::Supervisor;
use crate::linux::sys;

impl Supervisor<'_> {
    /// One `connect` with the address of `op`, as it is now (blocking or
    /// not).
    fn connect_now(op: &Op) -> Result<(), i32> {
        let sock = op.sock()?;
        let connected = if op.target >= 0 {
            let mut un: libc::sockaddr_un = sys::zeroed();
            let n = Self::by_descriptor(op.target, &mut un);
            sys::connect(sock, &un, n)
        } else {
            sys::connect(sock, &op.raw, op.raw_len as libc::socklen_t)
        };
        connected.map_err(errno)
    }

    /// One `connect` that does not wait: the caller's own if its socket
    /// is non-blocking, else with `O_NONBLOCK` set on the socket for the
    /// duration of the call.
    fn connect_without_waiting(op: &Op, status: c_int) -> Result<(), i32> {
        if op.nonblocking {
            return Self::connect_now(op);
        }
        let sock = op.sock()?;
        sys::set_status_flags(sock, status | libc::O_NONBLOCK).map_err(errno)?;
        let result = Self::connect_now(op);
        let _ = sys::set_status_flags(sock, status);
        result
    }

    /// The first attempt at a `connect`.
    pub(super) fn start_connect(&self, op: &mut Op, status: c_int) -> Result<Step, i32> {
        self.take_address(op, op.args[1], op.args[2] as usize)?;
        if op.raw_len == 0 {
            op.raw_len = op.args[2] as usize;
        }
        if !op.nonblocking {
            op.deadline = op.send_deadline()?;
        }
        op.flags = status;
        Ok(match Self::connect_without_waiting(op, status) {
            Ok(()) => Step::Answer(Ok(0)),
            Err(e) if op.nonblocking => Step::Answer(Err(e)),
            // A TCP connect under way (`EALREADY`: the one an interrupted
            // call started), which the caller waits for.
            Err(libc::EINPROGRESS | libc::EALREADY) if !op.unix => {
                op.writable = true;
                Step::Wait
            }
            // A Unix listener whose backlog is full: no poll event says
            // when it accepts, so the connect is tried again.
            Err(libc::EAGAIN) if op.unix => {
                op.writable = false;
                Step::Wait
            }
            Err(e) => Step::Answer(Err(e)),
        })
    }

    /// Goes on with a `connect` that waits (`woken`: its socket's poll
    /// event came).
    pub(super) fn progress_connect(&self, op: &mut Op, woken: bool) -> Step {
        if op.writable {
            if woken {
                return Step::Answer(match op.socket_int(libc::SO_ERROR) {
                    Ok(0) => Ok(0),
                    Ok(e) | Err(e) => Err(e),
                });
            }
        } else {
            match Self::connect_without_waiting(op, op.flags) {
                Ok(()) => return Step::Answer(Ok(0)),
                Err(libc::EAGAIN) => {}
                Err(e) => return Step::Answer(Err(e)),
            }
        }
        if op.timed_out() {
            // What the kernel's own wait ends with.
            return Step::Answer(Err(if op.unix {
                libc::EAGAIN
            } else {
                libc::EINPROGRESS
            }));
        }
        Step::Wait
    }

    /// A `bind` (with the network on: abstract names refused), made from
    /// the caller's working directory.
    pub(super) fn bind(&self, op: &mut Op) -> Result<i64, i32> {
        let sock = op.sock()?;
        let mut raw: libc::sockaddr_storage = sys::zeroed();
        let len = op.args[2] as usize;
        self.address(&op.caller, sock, op.args[1], len, &mut raw, true)?;
        // A relative pathname is the caller's: bind from its directory.
        let cwd = self.caller_cwd(&op.caller)?;
        sys::fchdir(cwd.as_fd()).map_err(errno)?;
        let bound = sys::bind(sock, &raw, len as libc::socklen_t);
        // The working directory set back before returning.
        let _ = sys::fchdir(self.proc_dir);
        bound.map(|()| 0).map_err(errno)
    }
}
