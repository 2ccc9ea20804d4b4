//! A call's address: read once from the caller, a pathname resolved in
//! the sandbox's view from the caller's directory to a descriptor, checked
//! against the guard, and reached as `self/fd/N`.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};

use libc::c_int;

use super::caller::proc_path;
use super::errno;
use super::op::{Caller, Op};
use super::supervisor::Supervisor;
use crate::linux::sys;

impl Supervisor<'_> {
    /// Reads the caller's address (`addr`, `len`) into `raw` and decides
    /// what to call with: `Ok(None)` for the address as read, or the
    /// `O_PATH` descriptor of the pathname socket it names, to be reached
    /// as `self/fd/N`.
    pub(super) fn address(
        &self,
        call: &Caller,
        sock: BorrowedFd<'_>,
        addr: u64,
        len: usize,
        raw: &mut libc::sockaddr_storage,
        binding: bool,
    ) -> Result<Option<OwnedFd>, i32> {
        if len > std::mem::size_of::<libc::sockaddr_storage>() {
            return Err(libc::EINVAL);
        }
        self.read(call, addr, &mut sys::plain_bytes(raw)[..len])?;
        if sys::socket_int(sock, libc::SO_DOMAIN).map_err(errno)? != libc::AF_UNIX
            || len <= 2
            || c_int::from(raw.ss_family) != libc::AF_UNIX
        {
            return Ok(None);
        }
        // SAFETY: `sockaddr_storage` is larger than `sockaddr_un` and
        // suitably aligned for it; only read here.
        let un = unsafe { &*(raw as *const libc::sockaddr_storage).cast::<libc::sockaddr_un>() };
        let path_len = len - 2;
        if un.sun_path[0] == 0 {
            return if self.guard.host_network {
                Err(libc::EPERM)
            } else {
                Ok(None)
            };
        }
        if binding {
            return Ok(None);
        }
        let mut path = [0u8; 110];
        for (dst, src) in path.iter_mut().zip(&un.sun_path[..path_len.min(108)]) {
            *dst = *src as u8;
        }
        // The kernel reads up to the first NUL or the end of the address.
        Ok(Some(self.resolve(call, &path)?))
    }

    /// Resolves the NUL-terminated `path` as the caller would, and checks
    /// that it names a socket where the sandbox may reach one.
    fn resolve(&self, call: &Caller, path: &[u8; 110]) -> Result<OwnedFd, i32> {
        let cwd = self.caller_cwd(call)?;
        // NUL-terminated: 110 > 108.
        let path = CStr::from_bytes_until_nul(path).map_err(|_| libc::EINVAL)?;
        let target =
            sys::open_at(cwd.as_fd(), path, libc::O_PATH | libc::O_CLOEXEC).map_err(errno)?;
        let st = sys::fstat(target.as_fd()).map_err(errno)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(libc::ECONNREFUSED);
        }
        let mut link = [0u8; 64];
        let link = proc_path(&mut link, b"self/fd/", target.as_raw_fd() as u64, b"");
        let mut real = [0u8; 4096];
        let n = sys::readlink_at(self.proc_dir, link, &mut real).map_err(errno)?;
        if n >= real.len() || !self.guard.allows(&real[..n]) {
            return Err(libc::EACCES);
        }
        Ok(target)
    }

    /// The caller's working directory (`O_PATH`), from the host's `/proc`.
    pub(super) fn caller_cwd(&self, call: &Caller) -> Result<OwnedFd, i32> {
        let mut buf = [0u8; 64];
        let cwd_path = proc_path(&mut buf, b"", u64::from(call.tid), b"/cwd");
        sys::open_at(
            self.proc_dir,
            cwd_path,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
        .map_err(errno)
    }

    /// `self/fd/N` as a Unix address; its length.
    pub(super) fn by_descriptor(fd: c_int, out: &mut libc::sockaddr_un) -> libc::socklen_t {
        out.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let mut buf = [0u8; 64];
        let path = proc_path(&mut buf, b"self/fd/", fd as u64, b"").to_bytes_with_nul();
        for (dst, src) in out.sun_path.iter_mut().zip(path) {
            *dst = *src as libc::c_char;
        }
        (2 + path.len()) as libc::socklen_t
    }

    /// Reads the address of `op`'s current message (once per message)
    /// from (`addr`, `len`).
    pub(super) fn take_address(&self, op: &mut Op, addr: u64, len: usize) -> Result<(), i32> {
        if op.addressed {
            return Ok(());
        }
        if addr != 0 && len > 0 {
            let mut raw = op.raw;
            let target = self.address(&op.caller, op.sock()?, addr, len, &mut raw, false)?;
            op.raw = raw;
            op.target = target.map_or(-1, IntoRawFd::into_raw_fd);
            op.raw_len = len;
        } else {
            op.raw_len = 0;
        }
        op.addressed = true;
        Ok(())
    }
}
