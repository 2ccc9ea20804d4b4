//! Egress by name: the listener a proxy serves inside the sandbox.
//!
//! The sandbox's init, in the sandbox's own network namespace (only
//! loopback, brought up), makes a TCP socket listening on
//! `127.0.0.1:PORT` and passes it to the host over a socket pair made by
//! [`Confinement::build`](super::Confinement::build) (`SCM_RIGHTS`), then
//! closes its copy: no process inside holds it. The host accepts on it,
//! so a connection made inside reaches the host's proxy and nothing else
//! (the namespace has no other interface). A network namespace cannot be
//! entered from the host unprivileged; a socket made in it can be passed.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::sys;

/// The backlog of the listener inside.
const BACKLOG: libc::c_int = 128;

/// The sandbox's side: the port, and the socket pair's end init sends on.
#[derive(Debug)]
pub(crate) struct Plan {
    port: u16,
    sandbox: OwnedFd,
}

impl Plan {
    /// The port, the sandbox's end of a new socket pair, and the host's
    /// (non-blocking) end.
    pub(crate) fn new(port: u16) -> io::Result<(Plan, EgressListeners)> {
        let (sandbox, host) = sys::socketpair()?;
        sys::set_status_flags(host.as_fd(), libc::O_NONBLOCK)?;
        Ok((Plan { port, sandbox }, EgressListeners { host }))
    }

    /// In init, after loopback is up: listens on `127.0.0.1:PORT` and
    /// passes the listener to the host (raw system calls only).
    pub(crate) fn hand_over(&self) -> io::Result<()> {
        let listener = sys::loopback_listener(self.port, BACKLOG)?;
        sys::send_fd(self.sandbox.as_fd(), listener.as_fd())
    }
}

/// The host's end of a confinement's listener handoff: each time a shell
/// of the confinement starts, its init sends one listener
/// (`127.0.0.1:PORT` in that shell's network namespace), to be accepted on
/// by the host's proxy. [`EgressListeners::receive`] reports the end once
/// the [`Confinement`](super::Confinement) is dropped (no shell can start
/// any more).
#[derive(Debug)]
pub struct EgressListeners {
    host: OwnedFd,
}

/// What [`EgressListeners::receive`] found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Received {
    /// A listener from a shell that started (close-on-exec, blocking).
    Listener(OwnedFd),
    /// Nothing yet: wait until the descriptor is readable.
    Nothing,
    /// The confinement is gone: no more listeners will come.
    Closed,
}

impl EgressListeners {
    /// The descriptor to wait on (readable when [`EgressListeners::receive`]
    /// has something to say); non-blocking.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.host.as_fd()
    }

    /// The next listener, if one was sent.
    pub fn receive(&self) -> io::Result<Received> {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: byte.len(),
        };
        let mut control = [0u64; 8];
        // SAFETY: zeroed plain data, pointed at buffers of this frame.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = loop {
            // SAFETY: as above; descriptors received are close-on-exec.
            let n =
                unsafe { libc::recvmsg(self.host.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if n >= 0 {
                break n;
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(Received::Nothing),
                _ => return Err(err),
            }
        };
        // SAFETY: `msg` is the header `recvmsg` just filled.
        let mut fds = unsafe { sys::received_fds(&msg) }.into_iter();
        match fds.next() {
            Some(fd) => Ok(Received::Listener(fd)),
            None if n == 0 => Ok(Received::Closed),
            None => Ok(Received::Nothing),
        }
    }
}

impl AsRawFd for EgressListeners {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.host.as_raw_fd()
    }
}
