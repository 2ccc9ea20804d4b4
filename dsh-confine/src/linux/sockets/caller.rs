//! The process that made a call: its thread group, its descriptors and
//! its memory, reached through the host's `/proc`, a pidfd and
//! `process_vm_readv`.

use std::ffi::CStr;
use std::os::fd::{AsFd, IntoRawFd, OwnedFd};

use libc::c_int;

use super::errno;
use super::op::{Caller, Op};
use super::supervisor::Supervisor;
use crate::linux::sys;

impl Supervisor<'_> {
    /// The caller's thread group (from the host's `/proc`) and a pidfd,
    /// checked against the notification so that a reused pid is never
    /// taken for it.
    pub(super) fn caller(&self, op: &mut Op) -> Result<(), i32> {
        let tgid = self.tgid(op.caller.tid)?;
        op.caller.pidfd = sys::pidfd_open(tgid).map_err(errno)?.into_raw_fd();
        op.caller.tgid = tgid;
        if !self.valid(op.caller.id) {
            return Err(libc::ESRCH);
        }
        Ok(())
    }

    fn tgid(&self, tid: u32) -> Result<i32, i32> {
        let mut path = [0u8; 64];
        let path = proc_path(&mut path, b"", u64::from(tid), b"/status");
        let fd =
            sys::open_at(self.proc_dir, path, libc::O_RDONLY | libc::O_CLOEXEC).map_err(errno)?;
        let mut text = [0u8; 2048];
        let n = usize::try_from(sys::read_once(fd.as_fd(), &mut text))
            .map_err(|_| errno(std::io::Error::last_os_error()))?;
        let text = &text[..n];
        let key = b"\nTgid:";
        let at = text
            .windows(key.len())
            .position(|w| w == key)
            .ok_or(libc::ESRCH)?;
        let mut value: i32 = 0;
        let mut seen = false;
        for &b in &text[at + key.len()..] {
            match b {
                b'0'..=b'9' => {
                    value = value.saturating_mul(10).saturating_add(i32::from(b - b'0'));
                    seen = true;
                }
                b' ' | b'\t' if !seen => {}
                _ => break,
            }
        }
        if seen { Ok(value) } else { Err(libc::ESRCH) }
    }

    /// The caller's descriptor `fd`, as a descriptor of ours.
    pub(super) fn fetch(&self, call: &Caller, fd: c_int) -> Result<OwnedFd, i32> {
        sys::pidfd_getfd(call.pidfd()?, fd).map_err(errno)
    }

    /// Fills `local` from the caller's memory described by `remote` (as
    /// many bytes in all), and checks that the notification is still valid
    /// (so that the thread read was the caller, not a reused id).
    pub(super) fn read_vec(
        &self,
        call: &Caller,
        remote: &[libc::iovec],
        local: &mut [u8],
    ) -> Result<(), i32> {
        let len = local.len();
        if len == 0 {
            return Ok(());
        }
        match sys::read_process(call.tid as libc::pid_t, remote, local) {
            Ok(n) if n == len => {}
            _ => return Err(libc::EFAULT),
        }
        if !self.valid(call.id) {
            return Err(libc::ESRCH);
        }
        Ok(())
    }

    /// Fills `local` from the caller's memory at `remote`.
    pub(super) fn read(&self, call: &Caller, remote: u64, local: &mut [u8]) -> Result<(), i32> {
        let r = libc::iovec {
            iov_base: remote as *mut libc::c_void,
            iov_len: local.len(),
        };
        self.read_vec(call, &[r], local)
    }
}

/// A path relative to a `/proc` directory: `<n>/<rest>` (or `self/fd/<n>`
/// with `prefix`), NUL-terminated, in `buf`.
pub(super) fn proc_path<'b>(buf: &'b mut [u8; 64], prefix: &[u8], n: u64, rest: &[u8]) -> &'b CStr {
    let mut len = 0;
    for &b in prefix {
        buf[len] = b;
        len += 1;
    }
    let mut digits = [0u8; 20];
    let mut d = 0;
    let mut v = n;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        buf[len] = digits[d];
        len += 1;
    }
    for &b in rest {
        buf[len] = b;
        len += 1;
    }
    buf[len] = 0;
    // Digits and the NUL just written: never an error.
    CStr::from_bytes_until_nul(&buf[..=len]).unwrap_or_default()
}
