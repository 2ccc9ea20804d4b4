//! Control messages a send passes: descriptors (`SCM_RIGHTS`) fetched
//! from the caller, credentials (`SCM_CREDENTIALS`) the supervisor's.

use std::os::fd::{AsRawFd, OwnedFd};

use libc::c_int;

use super::op::Caller;
use super::supervisor::Supervisor;
use crate::linux::sys;

/// The most descriptors one message may pass (the kernel's `SCM_MAX_FD`).
pub(super) const MAX_FDS: usize = 253;

impl Supervisor<'_> {
    /// Replaces the caller's descriptors in `SCM_RIGHTS` messages of
    /// `control` by ours (kept in `passed`), and the pid in
    /// `SCM_CREDENTIALS` by the supervisor's (the kernel checks it against
    /// the sender).
    pub(super) fn translate_control(
        &self,
        call: &Caller,
        control: &mut [u8],
        passed: &mut [Option<OwnedFd>; MAX_FDS],
    ) -> Result<(), i32> {
        let len = control.len();
        let header = std::mem::size_of::<libc::cmsghdr>();
        let mut npassed = 0;
        let mut off = 0usize;
        while off + header <= len {
            // SAFETY: `header` bytes within `control` (checked above), read
            // unaligned; `cmsghdr` is plain C data.
            let cmsg: libc::cmsghdr = unsafe {
                std::ptr::read_unaligned(control[off..].as_ptr().cast::<libc::cmsghdr>())
            };
            let clen = cmsg.cmsg_len as usize;
            if clen < header || off + clen > len {
                // Malformed: the kernel answers it.
                return Ok(());
            }
            let body = off + header;
            if cmsg.cmsg_level == libc::SOL_SOCKET && cmsg.cmsg_type == libc::SCM_RIGHTS {
                for at in (body..off + clen)
                    .step_by(4)
                    .filter(|at| at + 4 <= off + clen)
                {
                    let word = &mut control[at..at + 4];
                    let theirs = c_int::from_ne_bytes([word[0], word[1], word[2], word[3]]);
                    if npassed >= MAX_FDS {
                        return Err(libc::EINVAL);
                    }
                    let ours = self.fetch(call, theirs)?;
                    word.copy_from_slice(&ours.as_raw_fd().to_ne_bytes());
                    passed[npassed] = Some(ours);
                    npassed += 1;
                }
            } else if cmsg.cmsg_level == libc::SOL_SOCKET
                && cmsg.cmsg_type == libc::SCM_CREDENTIALS
                && clen >= header + std::mem::size_of::<libc::ucred>()
            {
                let pid = sys::getpid();
                control[body..body + 4].copy_from_slice(&pid.to_ne_bytes());
            }
            off += (clen + 7) & !7;
        }
        Ok(())
    }
}
