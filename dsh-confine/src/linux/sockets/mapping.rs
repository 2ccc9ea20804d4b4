//! The supervisor's memory, mapped after the fork: its buffers for a
//! call's data, control messages and vectors, its table of calls and its
//! poll set.

use std::io;

use super::op::Op;
use crate::linux::sys;

/// The supervisor's buffer for a call's data and control messages.
pub(super) const DATA_CAP: usize = 256 * 1024;
pub(super) const CONTROL_CAP: usize = 16 * 1024;
/// `UIO_MAXIOV`.
pub(super) const MAX_IOV: usize = 1024;
/// The most calls waiting at once; further notifications stay queued in
/// the kernel (their callers interruptible) until one ends.
pub(super) const MAX_PENDING: usize = 256;

const TABLE_AT: usize = DATA_CAP + CONTROL_CAP + MAX_IOV * 16;
const POLL_AT: usize = TABLE_AT + MAX_PENDING * std::mem::size_of::<Op>();
const MAPPED: usize = POLL_AT + (2 + 2 * MAX_PENDING) * std::mem::size_of::<libc::pollfd>();

/// The mapping (never unmapped: the supervisor ends with it).
pub(super) struct Mapping {
    buf: *mut u8,
}

impl Mapping {
    /// Maps the supervisor's memory, every row of its table free.
    pub(super) fn new() -> io::Result<Mapping> {
        let buf = sys::map_anonymous(MAPPED)?;
        // SAFETY: the table lies within the mapping, suitably aligned (the
        // offset is a multiple of 16); every row is written before use.
        unsafe {
            let table = buf.add(TABLE_AT).cast::<Op>();
            for i in 0..MAX_PENDING {
                table.add(i).write(Op::free());
            }
        }
        Ok(Mapping { buf })
    }

    /// The table's row `i`.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn row(&self, i: usize) -> &mut Op {
        debug_assert!(i < MAX_PENDING);
        // SAFETY: within the table written in `new`; the supervisor is one
        // thread and holds no other reference to a row across this call.
        unsafe { &mut *self.buf.add(TABLE_AT).cast::<Op>().add(i) }
    }

    /// The poll set: the listener, init, then per row its socket and its
    /// caller.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn poll_set(&self) -> &mut [libc::pollfd] {
        // SAFETY: within the mapping, aligned (`POLL_AT` is a multiple of
        // 8), and only this one slice is alive at a time.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.buf.add(POLL_AT).cast::<libc::pollfd>(),
                2 + 2 * MAX_PENDING,
            )
        }
    }

    /// The data buffer, the control buffer and the iovec buffer.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn buffers(&self) -> (&mut [u8], &mut [u8], &mut [libc::iovec]) {
        // SAFETY: three disjoint regions of the mapping made in `new` (the
        // iovecs at a multiple of 16, zero-filled by the kernel: valid
        // iovecs); the supervisor is one thread, and `send_part`, their
        // one user, holds them for one call only.
        unsafe {
            (
                std::slice::from_raw_parts_mut(self.buf, DATA_CAP),
                std::slice::from_raw_parts_mut(self.buf.add(DATA_CAP), CONTROL_CAP),
                std::slice::from_raw_parts_mut(
                    self.buf.add(DATA_CAP + CONTROL_CAP).cast::<libc::iovec>(),
                    MAX_IOV,
                ),
            )
        }
    }
}
