//! Sends (`sendto` with an address, `sendmsg`, `sendmmsg`): each message's
//! address read once, its data gathered from the caller's memory into the
//! supervisor's buffer, sent without waiting.

use std::os::fd::OwnedFd;

use libc::c_void;

use super::control::MAX_FDS;
use super::errno;
use super::mapping::{CONTROL_CAP, DATA_CAP, MAX_IOV};
use super::op::{Op, Step};
use super::supervisor::Supervisor;
use crate::linux::sys;

impl Supervisor<'_> {
    /// Sends what can go out now of `op`'s messages; `Wait` when the caller
    /// waits for room (`woken`: its socket said there was some).
    pub(super) fn send_some(&self, op: &mut Op, woken: bool) -> Step {
        let count = if op.nr == libc::SYS_sendmmsg {
            (op.args[2] as usize).min(MAX_IOV)
        } else {
            1
        };
        if count == 0 {
            return Step::Answer(Ok(0));
        }
        let mut moved = false;
        loop {
            match self.send_part(op) {
                Ok((n, total)) => {
                    moved |= n > 0;
                    op.sent += n;
                    if op.stream && op.sent < total && n > 0 && !op.nonblocking {
                        // A blocking stream send goes on until all is sent.
                        continue;
                    }
                    if let Some(result) = self.message_sent(op, count) {
                        return Step::Answer(Ok(result));
                    }
                    moved = true;
                }
                Err(libc::EAGAIN) if !op.nonblocking && !op.timed_out() => {
                    if woken && !moved {
                        // The poll event said room, the send said none (a
                        // peer's queue it does not watch): try on ticks.
                        op.writable = false;
                    }
                    return Step::Wait;
                }
                Err(e) => return Step::Answer(self.send_failed(op, e)),
            }
        }
    }

    /// The current message is done: `Some(result)` when the call is.
    fn message_sent(&self, op: &mut Op, count: usize) -> Option<i64> {
        let sent = op.sent;
        if op.nr != libc::SYS_sendmmsg {
            return Some(sent as i64);
        }
        self.write_len(op, sent);
        op.done += 1;
        op.next_message();
        (op.done == count).then_some(op.done as i64)
    }

    /// A send failed with `e`: what was sent before counts.
    fn send_failed(&self, op: &mut Op, e: i32) -> Result<i64, i32> {
        if op.sent > 0 {
            let sent = op.sent;
            if op.nr != libc::SYS_sendmmsg {
                return Ok(sent as i64);
            }
            self.write_len(op, sent);
            op.done += 1;
        }
        if op.nr == libc::SYS_sendmmsg && op.done > 0 {
            return Ok(op.done as i64);
        }
        Err(e)
    }

    /// `sendmmsg`: the bytes sent of message `op.done`, into its
    /// `msg_len`.
    fn write_len(&self, op: &Op, sent: usize) {
        let size = std::mem::size_of::<libc::mmsghdr>() as u64;
        let entry = op.args[1] + op.done as u64 * size;
        let len = (sent as u32).to_ne_bytes();
        let remote = libc::iovec {
            iov_base: (entry + std::mem::size_of::<libc::msghdr>() as u64) as *mut c_void,
            iov_len: 4,
        };
        // 4 bytes of the caller's array entry.
        let _ = sys::write_process(op.caller.tid as libc::pid_t, &[remote], &len);
    }

    /// `op`'s current message header into `hdr` (`sendto`: made from its
    /// arguments), its address taken, its vectors read into `iovs`: how
    /// many there are.
    // `msg_iovlen` is `size_t` with glibc, `c_int` with musl.
    #[allow(clippy::unnecessary_cast)]
    fn message_header(
        &self,
        op: &mut Op,
        hdr: &mut libc::msghdr,
        iovs: &mut [libc::iovec],
    ) -> Result<usize, i32> {
        if op.nr == libc::SYS_sendto {
            let [_, buf, len, _, addr, addr_len] = op.args;
            self.take_address(op, addr, addr_len as usize)?;
            iovs[0] = libc::iovec {
                iov_base: buf as *mut c_void,
                iov_len: len as usize,
            };
            hdr.msg_iovlen = 1;
            return Ok(1);
        }
        let at = if op.nr == libc::SYS_sendmmsg {
            op.args[1] + op.done as u64 * std::mem::size_of::<libc::mmsghdr>() as u64
        } else {
            op.args[1]
        };
        self.read(&op.caller, at, sys::plain_bytes(hdr))?;
        self.take_address(op, hdr.msg_name as u64, hdr.msg_namelen as usize)?;
        let count = hdr.msg_iovlen as usize;
        if count > MAX_IOV {
            return Err(libc::EMSGSIZE);
        }
        let iovs = &mut iovs[..count];
        // SAFETY: `iovec` is plain C data; the slice covers `count` of them.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                iovs.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(iovs),
            )
        };
        self.read(&op.caller, hdr.msg_iov as u64, bytes)?;
        Ok(count)
    }

    /// One `sendmsg` (with `MSG_DONTWAIT`) of what is left of `op`'s
    /// current message: `(bytes sent, the message's length)`.
    // `msg_controllen` is `size_t` with glibc, `socklen_t` with musl.
    #[allow(clippy::unnecessary_cast)]
    fn send_part(&self, op: &mut Op) -> Result<(usize, usize), i32> {
        let (data, control, iovs) = self.map.buffers();
        let mut hdr: libc::msghdr = sys::zeroed();
        let count = self.message_header(op, &mut hdr, iovs)?;
        // The address, as read once for this message.
        let mut un: libc::sockaddr_un = sys::zeroed();
        if op.target >= 0 {
            hdr.msg_namelen = Self::by_descriptor(op.target, &mut un);
            hdr.msg_name = (&mut un as *mut libc::sockaddr_un).cast();
        } else if op.raw_len > 0 {
            hdr.msg_namelen = op.raw_len as libc::socklen_t;
            hdr.msg_name = (&mut op.raw as *mut libc::sockaddr_storage).cast();
        } else {
            hdr.msg_name = std::ptr::null_mut();
            hdr.msg_namelen = 0;
        }

        // The data left, gathered into one buffer.
        let remote = &mut iovs[..count];
        let mut total = 0usize;
        for iov in remote.iter() {
            total = total.saturating_add(iov.iov_len);
        }
        let left = total.saturating_sub(op.sent);
        let wanted = if left <= DATA_CAP {
            left
        } else if op.stream {
            DATA_CAP
        } else {
            return Err(libc::EMSGSIZE);
        };
        let used = trim(remote, op.sent, wanted);
        if wanted > 0 {
            self.read_vec(&op.caller, &remote[used], &mut data[..wanted])?;
        }
        let mut one = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: wanted,
        };
        hdr.msg_iov = &mut one;
        hdr.msg_iovlen = 1;

        // Control messages go with the message's first byte; descriptors
        // are the caller's, fetched here (closed when `passed` is dropped).
        let control_len = hdr.msg_controllen as usize;
        let mut passed: [Option<OwnedFd>; MAX_FDS] = [const { None }; MAX_FDS];
        if op.sent == 0 && !hdr.msg_control.is_null() && control_len > 0 {
            if control_len > CONTROL_CAP {
                return Err(libc::ENOBUFS);
            }
            let control = &mut control[..control_len];
            self.read(&op.caller, hdr.msg_control as u64, control)?;
            self.translate_control(&op.caller, control, &mut passed)?;
            hdr.msg_control = control.as_mut_ptr().cast();
        } else {
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
        }
        let sock = op.sock()?;
        // SAFETY: `hdr` points at buffers of this frame, `op` and the
        // mapping, with their lengths.
        let sent = unsafe { sys::sendmsg(sock, &hdr, op.flags | libc::MSG_DONTWAIT) };
        drop(passed);
        Ok((sent.map_err(errno)?, total))
    }
}

/// Trims the caller's vectors `remote` to what is sent now: past the
/// `sent` bytes already sent, `wanted` bytes. The range of the vectors
/// that hold them.
fn trim(remote: &mut [libc::iovec], sent: usize, wanted: usize) -> std::ops::Range<usize> {
    let mut skip = sent;
    let mut first = 0;
    let mut used = 0;
    let mut want = wanted;
    for (i, iov) in remote.iter_mut().enumerate() {
        if skip >= iov.iov_len {
            skip -= iov.iov_len;
            first = i + 1;
            continue;
        }
        if want == 0 {
            break;
        }
        iov.iov_base = (iov.iov_base as u64 + skip as u64) as *mut c_void;
        iov.iov_len = (iov.iov_len - skip).min(want);
        skip = 0;
        want -= iov.iov_len;
        used = i + 1;
    }
    first..used.max(first)
}
