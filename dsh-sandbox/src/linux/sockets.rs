//! Unix sockets the sandbox did not make: the supervisor makes every
//! socket-address system call for the confined processes.
//!
//! Landlock restricts `connect(2)` to pathname sockets only from ABI 9, and
//! neither a read-only mount nor a network namespace stops it, so a Docker,
//! systemd or ssh-agent socket anywhere in the view would be a way out. Here
//! a seccomp filter (installed by init, so that the shell and everything it
//! starts inherit it) hands `connect`, `sendto` with an address, `sendmsg`,
//! `sendmmsg` and — with the network on, where abstract names are the
//! host's — `bind` to the supervisor as user notifications, and the
//! supervisor *makes the call itself* on the caller's own socket (fetched
//! with `pidfd_getfd`), from a copy of the arguments it read once:
//!
//! * a pathname address is resolved once, in the sandbox's own view (the
//!   supervisor shares its mount namespace) from the caller's working
//!   directory, to an `O_PATH` descriptor; the socket is reached only if
//!   that descriptor's path lies beneath a writable root, the private
//!   `/tmp` or `/dev/shm`, or an entry of the policy's allow list, and the
//!   call is then made with the address `self/fd/N` of that descriptor —
//!   so neither a rewritten argument nor a symlink or rename swapped in
//!   meanwhile changes what is reached;
//! * an abstract address is the sandbox's own with the network off (its own
//!   network namespace); with the network on it is refused (`EPERM`), for
//!   `connect`, `sendto`, `sendmsg` and `bind` alike;
//! * any other family is passed on unchanged: the kernel judges it, on the
//!   caller's socket, in the caller's network namespace;
//! * descriptors passed with `SCM_RIGHTS` are fetched from the caller too.
//!
//! Nothing is ever continued (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): the
//! kernel would read the arguments again after the check. The supervisor
//! keeps only `CAP_SYS_PTRACE` in the sandbox's user namespace (to fetch
//! descriptors and read memory of processes that made themselves not
//! dumpable), so its own file permissions are those of the shell.
//! What differs for a program: the peer credentials of a connection it made
//! name the supervisor's process (not visible inside) with the same uid and
//! gid, and a blocking `connect` or `send` waits in the supervisor, so one
//! that never finishes holds back the sandbox's next one until it is
//! interrupted or the shell is reset.
//!
//! Everything here runs in the supervisor or init, after `fork` in a
//! multithreaded process: raw system calls on memory prepared before the
//! fork, or mapped after it, and no allocation.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use libc::{c_int, c_long, c_void};

use super::sys;

/// What the supervisor lets a confined process reach, prepared in the
/// parent.
#[derive(Debug)]
pub(crate) struct Guard {
    program: Vec<libc::sock_filter>,
    /// Paths (no trailing `/`) beneath which pathname sockets are reached.
    allowed: Vec<Vec<u8>>,
    /// Paths beneath those that are not (protected `.git` paths, where a
    /// host's git keeps its fsmonitor socket).
    denied: Vec<Vec<u8>>,
    /// The network namespace is the host's: abstract names are refused.
    host_network: bool,
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xC000_00F3;

/// `SECCOMP_IOCTL_NOTIF_ID_VALID` as first defined (`_IOR`), which every
/// kernel with user notification accepts.
const NOTIF_ID_VALID: libc::Ioctl = 0x8008_2102u32 as libc::Ioctl;
/// The supervisor's buffer for a call's data and control messages.
const DATA_CAP: usize = 256 * 1024;
const CONTROL_CAP: usize = 16 * 1024;
/// `UIO_MAXIOV`.
const MAX_IOV: usize = 1024;
const MAPPED: usize = DATA_CAP + CONTROL_CAP + MAX_IOV * 16;
/// `CAP_SYS_PTRACE` (linux/capability.h).
const CAP_SYS_PTRACE: u32 = 19;
/// The most descriptors one message may pass (the kernel's `SCM_MAX_FD`).
const MAX_FDS: usize = 253;

impl Guard {
    /// The guard for a sandbox whose pathname sockets may be reached beneath
    /// `allowed` (canonical paths), with the host's network namespace or
    /// not.
    pub(crate) fn new(allowed: &[PathBuf], denied: &[PathBuf], host_network: bool) -> Guard {
        let bytes = |paths: &[PathBuf]| -> Vec<Vec<u8>> {
            paths
                .iter()
                .map(|p| {
                    let bytes = p.as_os_str().as_bytes();
                    bytes.strip_suffix(b"/").unwrap_or(bytes).to_vec()
                })
                .collect()
        };
        Guard {
            program: program(host_network),
            allowed: bytes(allowed),
            denied: bytes(denied),
            host_network,
        }
    }

    /// Init: installs the filter and returns its listener.
    pub(crate) fn install(&self) -> io::Result<c_int> {
        sys::seccomp_listener(&self.program)
    }

    fn allows(&self, path: &[u8]) -> bool {
        let beneath = |root: &Vec<u8>| {
            path.starts_with(root)
                && (path.len() == root.len() || path[root.len()] == b'/' || root.is_empty())
        };
        self.allowed.iter().any(beneath) && !self.denied.iter().any(beneath)
    }
}

/// The notification filter (see the module docs).
fn program(host_network: bool) -> Vec<libc::sock_filter> {
    #[derive(Clone, Copy)]
    enum To {
        Next,
        Allow,
        Notify,
    }
    let ld = |k: u32| {
        (
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            k,
            To::Next,
            To::Next,
        )
    };
    let jeq = |k: u32, t: To, f: To| (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, k, t, f);
    let mut code = vec![ld(4), jeq(AUDIT_ARCH, To::Next, To::Allow), ld(0)];
    let mut notified = vec![libc::SYS_connect, libc::SYS_sendmsg, libc::SYS_sendmmsg];
    if host_network {
        notified.push(libc::SYS_bind);
    }
    for nr in notified {
        code.push(jeq(nr as u32, To::Notify, To::Next));
    }
    // sendto: only with an address (argument 4, at offset 16 + 4 * 8).
    code.push(jeq(libc::SYS_sendto as u32, To::Next, To::Allow));
    code.push(ld(48));
    code.push(jeq(0, To::Next, To::Notify));
    code.push(ld(52));
    code.push(jeq(0, To::Allow, To::Notify));
    let allow = code.len();
    let notify = allow + 1;
    let mut out: Vec<libc::sock_filter> = code
        .iter()
        .enumerate()
        .map(|(i, &(op, k, t, f))| {
            let jump = |to: To| -> u8 {
                match to {
                    To::Next => 0,
                    To::Allow => (allow - i - 1) as u8,
                    To::Notify => (notify - i - 1) as u8,
                }
            };
            libc::sock_filter {
                code: op as u16,
                jt: jump(t),
                jf: jump(f),
                k,
            }
        })
        .collect();
    let ret = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    out.push(ret(libc::SECCOMP_RET_ALLOW));
    out.push(ret(libc::SECCOMP_RET_USER_NOTIF));
    out
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `Err(errno)` for a negative return.
fn ok(rc: c_long) -> Result<c_long, i32> {
    if rc < 0 { Err(errno()) } else { Ok(rc) }
}

/// A path relative to a `/proc` directory: `<n>/<rest>` (or `self/fd/<n>`
/// with `prefix`), NUL-terminated, in `buf`.
fn proc_path<'b>(buf: &'b mut [u8; 64], prefix: &[u8], n: u64, rest: &[u8]) -> &'b [u8] {
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
    &buf[..=len]
}

/// A descriptor closed when dropped.
struct Fd(c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: closing a descriptor this code opened.
            unsafe { libc::close(self.0) };
        }
    }
}

/// The supervisor's side: serves notifications until init exits.
pub(crate) struct Supervisor<'g> {
    guard: &'g Guard,
    listener: c_int,
    /// The host's `/proc`, opened before the view replaced it.
    proc_dir: c_int,
    buf: *mut u8,
}

/// The process that made a call, and the call.
struct Call {
    id: u64,
    tid: u32,
    tgid: i32,
    pidfd: Fd,
    args: [u64; 6],
}

impl<'g> Supervisor<'g> {
    /// Prepares the supervisor: its buffer, its working directory (the
    /// host's `/proc`, for `self/fd/N` addresses) and its capabilities.
    pub(crate) fn new(guard: &'g Guard, listener: c_int, proc_dir: c_int) -> io::Result<Self> {
        // SAFETY: an anonymous private mapping; checked below.
        let buf = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MAPPED,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if buf == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: plain system calls.
        unsafe {
            sys::check_int(libc::fchdir(proc_dir))?;
            // A send on a closed connection must not end the supervisor; the
            // caller gets its SIGPIPE from `send_result`.
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        sys::keep_only_capability(CAP_SYS_PTRACE)?;
        Ok(Supervisor {
            guard,
            listener,
            proc_dir,
            buf: buf.cast(),
        })
    }

    /// The listener this supervisor answers.
    pub(crate) fn listener(&self) -> c_int {
        self.listener
    }

    /// Serves notifications until `init_pidfd` says init exited.
    pub(crate) fn serve(&self, init_pidfd: c_int) {
        let mut fds = [
            libc::pollfd {
                fd: self.listener,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: init_pidfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: `fds` lives on this frame.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                return;
            }
            if fds[1].revents != 0 {
                return;
            }
            if fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                // No process is left under the filter: only init's end.
                fds[0].fd = -1;
                continue;
            }
            if fds[0].revents & libc::POLLIN != 0 {
                self.one();
            }
        }
    }

    /// Receives, handles and answers one notification.
    fn one(&self) {
        // SAFETY: a zeroed notification (the kernel requires it) that the
        // ioctl fills.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::ioctl(self.listener, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut notif) } < 0 {
            return;
        }
        let result = self.handle(&notif);
        let (val, error) = match result {
            Ok(v) => (v, 0),
            Err(e) => (0, -e),
        };
        let resp = libc::seccomp_notif_resp {
            id: notif.id,
            val,
            error,
            flags: 0,
        };
        // SAFETY: `resp` lives on this frame. ENOENT: the caller is gone
        // or was interrupted; nothing to do.
        unsafe { libc::ioctl(self.listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
    }

    fn valid(&self, id: u64) -> bool {
        // SAFETY: `id` lives on this frame.
        unsafe { libc::ioctl(self.listener, NOTIF_ID_VALID, &id) == 0 }
    }

    fn handle(&self, notif: &libc::seccomp_notif) -> Result<i64, i32> {
        let call = self.call(notif)?;
        let nr = c_long::from(notif.data.nr);
        let sock = self.fetch(&call, call.args[0] as c_int)?;
        if nr == libc::SYS_connect {
            self.connect(&call, &sock)
        } else if nr == libc::SYS_sendto {
            self.sendto(&call, &sock)
        } else if nr == libc::SYS_sendmsg {
            self.sendmsg(&call, &sock, call.args[1], call.args[2] as c_int)
        } else if nr == libc::SYS_sendmmsg {
            self.sendmmsg(&call, &sock)
        } else if nr == libc::SYS_bind {
            self.bind(&call, &sock)
        } else {
            Err(libc::ENOSYS)
        }
    }

    /// The caller: its thread group (from the host's `/proc`) and a pidfd,
    /// checked against the notification so that a reused pid is never
    /// taken for it.
    fn call(&self, notif: &libc::seccomp_notif) -> Result<Call, i32> {
        let tid = notif.pid;
        let tgid = self.tgid(tid)?;
        // SAFETY: a plain system call.
        let pidfd = Fd(ok(unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0u32) })? as c_int);
        if !self.valid(notif.id) {
            return Err(libc::ESRCH);
        }
        Ok(Call {
            id: notif.id,
            tid,
            tgid,
            pidfd,
            args: notif.data.args,
        })
    }

    fn tgid(&self, tid: u32) -> Result<i32, i32> {
        let mut path = [0u8; 64];
        let path = proc_path(&mut path, b"", u64::from(tid), b"/status");
        // SAFETY: NUL-terminated path on this frame.
        let fd = Fd(ok(unsafe {
            libc::openat(
                self.proc_dir,
                path.as_ptr().cast(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        }
        .into())? as c_int);
        let mut text = [0u8; 2048];
        // SAFETY: reading into a buffer on this frame.
        let n = ok(unsafe { libc::read(fd.0, text.as_mut_ptr().cast(), text.len()) } as c_long)?
            as usize;
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
    fn fetch(&self, call: &Call, fd: c_int) -> Result<Fd, i32> {
        // SAFETY: a plain system call.
        let got = ok(unsafe { libc::syscall(libc::SYS_pidfd_getfd, call.pidfd.0, fd, 0u32) })?;
        Ok(Fd(got as c_int))
    }

    /// Copies `len` bytes of the caller's memory at `remote` to `local`.
    fn read(&self, call: &Call, remote: u64, local: *mut u8, len: usize) -> Result<(), i32> {
        if len == 0 {
            return Ok(());
        }
        let l = libc::iovec {
            iov_base: local.cast(),
            iov_len: len,
        };
        let r = libc::iovec {
            iov_base: remote as *mut c_void,
            iov_len: len,
        };
        // SAFETY: `local` has room for `len` bytes (callers' buffers).
        let n = unsafe { libc::process_vm_readv(call.tid as libc::pid_t, &l, 1, &r, 1, 0) };
        if n < 0 || n as usize != len {
            return Err(libc::EFAULT);
        }
        if !self.valid(call.id) {
            return Err(libc::ESRCH);
        }
        Ok(())
    }

    fn socket_int(sock: &Fd, option: c_int) -> Result<c_int, i32> {
        let mut value: c_int = 0;
        let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` live on this frame.
        let rc = unsafe {
            libc::getsockopt(
                sock.0,
                libc::SOL_SOCKET,
                option,
                (&mut value as *mut c_int).cast(),
                &mut len,
            )
        };
        ok(rc.into())?;
        Ok(value)
    }

    /// Reads the caller's address (`addr`, `len`) into `raw` and decides
    /// what to call with: `Ok(None)` for the address as read, or the
    /// `O_PATH` descriptor of the pathname socket it names, to be reached
    /// as `self/fd/N`.
    fn address(
        &self,
        call: &Call,
        sock: &Fd,
        addr: u64,
        len: usize,
        raw: &mut libc::sockaddr_storage,
        binding: bool,
    ) -> Result<Option<Fd>, i32> {
        if len > std::mem::size_of::<libc::sockaddr_storage>() {
            return Err(libc::EINVAL);
        }
        self.read(call, addr, (raw as *mut libc::sockaddr_storage).cast(), len)?;
        if Self::socket_int(sock, libc::SO_DOMAIN)? != libc::AF_UNIX
            || len <= 2
            || c_int::from(raw.ss_family) != libc::AF_UNIX
        {
            return Ok(None);
        }
        // SAFETY: `sockaddr_storage` is larger than `sockaddr_un` and
        // suitably aligned for it.
        let un = unsafe { &mut *(raw as *mut libc::sockaddr_storage).cast::<libc::sockaddr_un>() };
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
    fn resolve(&self, call: &Call, path: &[u8; 110]) -> Result<Fd, i32> {
        let mut buf = [0u8; 64];
        let cwd_path = proc_path(&mut buf, b"", u64::from(call.tid), b"/cwd");
        // SAFETY: NUL-terminated paths on this frame.
        let cwd = Fd(ok(unsafe {
            libc::openat(
                self.proc_dir,
                cwd_path.as_ptr().cast(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        }
        .into())? as c_int);
        // SAFETY: as above; `path` is NUL-terminated (110 > 108).
        let target = Fd(ok(unsafe {
            libc::openat(cwd.0, path.as_ptr().cast(), libc::O_PATH | libc::O_CLOEXEC)
        }
        .into())? as c_int);
        // SAFETY: `st` is written by the kernel.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        ok(unsafe { libc::fstat(target.0, &mut st) }.into())?;
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(libc::ECONNREFUSED);
        }
        let mut link = [0u8; 64];
        let link = proc_path(&mut link, b"self/fd/", target.0 as u64, b"");
        let mut real = [0u8; 4096];
        // SAFETY: buffers on this frame.
        let n = ok(unsafe {
            libc::readlinkat(
                self.proc_dir,
                link.as_ptr().cast(),
                real.as_mut_ptr().cast(),
                real.len(),
            )
        } as c_long)? as usize;
        if n >= real.len() || !self.guard.allows(&real[..n]) {
            return Err(libc::EACCES);
        }
        Ok(target)
    }

    /// `self/fd/N` as a Unix address; its length.
    fn by_descriptor(fd: &Fd, out: &mut libc::sockaddr_un) -> libc::socklen_t {
        out.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let mut buf = [0u8; 64];
        let path = proc_path(&mut buf, b"self/fd/", fd.0 as u64, b"");
        for (dst, src) in out.sun_path.iter_mut().zip(path) {
            *dst = *src as libc::c_char;
        }
        (2 + path.len()) as libc::socklen_t
    }

    fn connect(&self, call: &Call, sock: &Fd) -> Result<i64, i32> {
        // SAFETY: zeroed plain data.
        let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = call.args[2] as usize;
        let target = self.address(call, sock, call.args[1], len, &mut raw, false)?;
        // SAFETY: addresses on this frame with their lengths.
        let rc = unsafe {
            match &target {
                Some(fd) => {
                    let mut un: libc::sockaddr_un = std::mem::zeroed();
                    let n = Self::by_descriptor(fd, &mut un);
                    libc::connect(sock.0, (&un as *const libc::sockaddr_un).cast(), n)
                }
                None => libc::connect(
                    sock.0,
                    (&raw as *const libc::sockaddr_storage).cast(),
                    len as libc::socklen_t,
                ),
            }
        };
        ok(rc.into()).map(|_| 0)
    }

    fn bind(&self, call: &Call, sock: &Fd) -> Result<i64, i32> {
        // SAFETY: zeroed plain data.
        let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = call.args[2] as usize;
        self.address(call, sock, call.args[1], len, &mut raw, true)?;
        // A relative pathname is the caller's: bind from its directory.
        let mut buf = [0u8; 64];
        let cwd_path = proc_path(&mut buf, b"", u64::from(call.tid), b"/cwd");
        // SAFETY: plain system calls on buffers of this frame; the working
        // directory is set back before returning.
        unsafe {
            let cwd = Fd(ok(libc::openat(
                self.proc_dir,
                cwd_path.as_ptr().cast(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
            .into())? as c_int);
            ok(libc::fchdir(cwd.0).into())?;
            let rc = libc::bind(
                sock.0,
                (&raw as *const libc::sockaddr_storage).cast(),
                len as libc::socklen_t,
            );
            let err = errno();
            libc::fchdir(self.proc_dir);
            if rc < 0 { Err(err) } else { Ok(0) }
        }
    }

    /// The data buffer, the control buffer and the iovec buffer.
    fn buffers(&self) -> (*mut u8, *mut u8, *mut libc::iovec) {
        // SAFETY: offsets within the mapping made in `new`.
        unsafe {
            (
                self.buf,
                self.buf.add(DATA_CAP),
                self.buf.add(DATA_CAP + CONTROL_CAP).cast(),
            )
        }
    }

    /// A stream socket may send less than asked; any other kind must send
    /// a message whole.
    fn cap_len(sock: &Fd, len: usize) -> Result<usize, i32> {
        if len <= DATA_CAP {
            return Ok(len);
        }
        if Self::socket_int(sock, libc::SO_TYPE)? == libc::SOCK_STREAM {
            Ok(DATA_CAP)
        } else {
            Err(libc::EMSGSIZE)
        }
    }

    /// The caller's SIGPIPE, which the supervisor's own send did not raise.
    fn send_result(&self, call: &Call, rc: isize, flags: c_int) -> Result<i64, i32> {
        if rc >= 0 {
            return Ok(rc as i64);
        }
        let err = errno();
        if err == libc::EPIPE && flags & libc::MSG_NOSIGNAL == 0 {
            // SAFETY: signalling the calling thread, which is waiting on us.
            unsafe { libc::syscall(libc::SYS_tgkill, call.tgid, call.tid, libc::SIGPIPE) };
        }
        Err(err)
    }

    fn sendto(&self, call: &Call, sock: &Fd) -> Result<i64, i32> {
        let [_, data, len, flags, addr, addr_len] = call.args;
        let flags = flags as c_int;
        let len = Self::cap_len(sock, len as usize)?;
        // SAFETY: zeroed plain data.
        let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let target = self.address(call, sock, addr, addr_len as usize, &mut raw, false)?;
        let (buf, _, _) = self.buffers();
        self.read(call, data, buf, len)?;
        // SAFETY: buffers of the given lengths.
        let rc = unsafe {
            match &target {
                Some(fd) => {
                    let mut un: libc::sockaddr_un = std::mem::zeroed();
                    let n = Self::by_descriptor(fd, &mut un);
                    libc::sendto(
                        sock.0,
                        buf.cast(),
                        len,
                        flags,
                        (&un as *const libc::sockaddr_un).cast(),
                        n,
                    )
                }
                None => libc::sendto(
                    sock.0,
                    buf.cast(),
                    len,
                    flags,
                    (&raw as *const libc::sockaddr_storage).cast(),
                    addr_len as libc::socklen_t,
                ),
            }
        };
        self.send_result(call, rc, flags)
    }

    /// One `sendmsg` of the caller's message at `msg`.
    fn sendmsg(&self, call: &Call, sock: &Fd, msg: u64, flags: c_int) -> Result<i64, i32> {
        // SAFETY: zeroed plain data, then filled from the caller's memory.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        self.read(
            call,
            msg,
            (&mut hdr as *mut libc::msghdr).cast(),
            std::mem::size_of::<libc::msghdr>(),
        )?;
        let (data, control, iovs) = self.buffers();

        // The address.
        // SAFETY: zeroed plain data.
        let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut un: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        let name_len = hdr.msg_namelen as usize;
        let mut target = None;
        if !hdr.msg_name.is_null() && name_len > 0 {
            target = self.address(call, sock, hdr.msg_name as u64, name_len, &mut raw, false)?;
            match &target {
                Some(fd) => {
                    hdr.msg_namelen = Self::by_descriptor(fd, &mut un);
                    hdr.msg_name = (&mut un as *mut libc::sockaddr_un).cast();
                }
                None => hdr.msg_name = (&mut raw as *mut libc::sockaddr_storage).cast(),
            }
        } else {
            hdr.msg_name = std::ptr::null_mut();
            hdr.msg_namelen = 0;
        }

        // The data, gathered into one buffer.
        let count = hdr.msg_iovlen as usize;
        if count > MAX_IOV {
            return Err(libc::EMSGSIZE);
        }
        self.read(call, hdr.msg_iov as u64, iovs.cast(), count * 16)?;
        // SAFETY: `count` iovecs were just written there.
        let remote = unsafe { std::slice::from_raw_parts_mut(iovs, count) };
        let mut total = 0usize;
        for iov in remote.iter() {
            total = total.saturating_add(iov.iov_len);
        }
        let wanted = Self::cap_len(sock, total)?;
        // Trim the caller's vectors to what is sent.
        let mut left = wanted;
        let mut used = 0;
        for iov in remote.iter_mut() {
            if left == 0 {
                break;
            }
            iov.iov_len = iov.iov_len.min(left);
            left -= iov.iov_len;
            used += 1;
        }
        if wanted > 0 {
            let local = libc::iovec {
                iov_base: data.cast(),
                iov_len: wanted,
            };
            // SAFETY: `data` has room for `wanted` bytes.
            let n = unsafe {
                libc::process_vm_readv(
                    call.tid as libc::pid_t,
                    &local,
                    1,
                    remote.as_ptr(),
                    used as libc::c_ulong,
                    0,
                )
            };
            if n < 0 || n as usize != wanted {
                return Err(libc::EFAULT);
            }
        }
        let mut one = libc::iovec {
            iov_base: data.cast(),
            iov_len: wanted,
        };
        hdr.msg_iov = &mut one;
        hdr.msg_iovlen = 1;

        // Control messages: descriptors are the caller's, fetched here.
        let control_len = hdr.msg_controllen as usize;
        let mut passed = [-1 as c_int; MAX_FDS];
        let mut npassed = 0;
        if !hdr.msg_control.is_null() && control_len > 0 {
            if control_len > CONTROL_CAP {
                return Err(libc::ENOBUFS);
            }
            self.read(call, hdr.msg_control as u64, control, control_len)?;
            let result =
                self.translate_control(call, control, control_len, &mut passed, &mut npassed);
            if let Err(e) = result {
                close_all(&passed[..npassed]);
                return Err(e);
            }
            hdr.msg_control = control.cast();
        } else {
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
        }
        // SAFETY: `hdr` points at buffers of this frame and the mapping.
        let rc = unsafe { libc::sendmsg(sock.0, &hdr, flags) };
        let result = self.send_result(call, rc, flags);
        close_all(&passed[..npassed]);
        drop(target);
        result
    }

    /// Replaces the caller's descriptors in `SCM_RIGHTS` messages by ours,
    /// and the pid in `SCM_CREDENTIALS` by the supervisor's (the kernel
    /// checks it against the sender).
    fn translate_control(
        &self,
        call: &Call,
        control: *mut u8,
        len: usize,
        passed: &mut [c_int; MAX_FDS],
        npassed: &mut usize,
    ) -> Result<(), i32> {
        let header = std::mem::size_of::<libc::cmsghdr>();
        let mut off = 0usize;
        while off + header <= len {
            // SAFETY: within the `len` bytes read into `control`; cmsghdr
            // is read unaligned.
            let cmsg: libc::cmsghdr =
                unsafe { std::ptr::read_unaligned(control.add(off).cast::<libc::cmsghdr>()) };
            let clen = cmsg.cmsg_len as usize;
            if clen < header || off + clen > len {
                // Malformed: the kernel answers it.
                return Ok(());
            }
            let body = off + header;
            if cmsg.cmsg_level == libc::SOL_SOCKET && cmsg.cmsg_type == libc::SCM_RIGHTS {
                let n = (clen - header) / 4;
                for i in 0..n {
                    // SAFETY: within the message, read and written unaligned.
                    unsafe {
                        let at = control.add(body + 4 * i).cast::<c_int>();
                        let theirs = std::ptr::read_unaligned(at);
                        if *npassed >= MAX_FDS {
                            return Err(libc::EINVAL);
                        }
                        let ours = self.fetch(call, theirs)?;
                        std::ptr::write_unaligned(at, ours.0);
                        passed[*npassed] = ours.0;
                        *npassed += 1;
                        std::mem::forget(ours);
                    }
                }
            } else if cmsg.cmsg_level == libc::SOL_SOCKET
                && cmsg.cmsg_type == libc::SCM_CREDENTIALS
                && clen >= header + std::mem::size_of::<libc::ucred>()
            {
                // SAFETY: within the message; getpid has no preconditions.
                unsafe {
                    let at = control.add(body).cast::<libc::pid_t>();
                    std::ptr::write_unaligned(at, libc::getpid());
                }
            }
            off += (clen + 7) & !7;
        }
        Ok(())
    }

    fn sendmmsg(&self, call: &Call, sock: &Fd) -> Result<i64, i32> {
        let [_, vec, count, flags, _, _] = call.args;
        let flags = flags as c_int;
        let count = (count as usize).min(MAX_IOV);
        let size = std::mem::size_of::<libc::mmsghdr>() as u64;
        let mut sent = 0usize;
        for i in 0..count {
            let entry = vec + i as u64 * size;
            match self.sendmsg(call, sock, entry, flags) {
                Ok(n) => {
                    let len = n as u32;
                    let local = libc::iovec {
                        iov_base: (&len as *const u32).cast_mut().cast(),
                        iov_len: 4,
                    };
                    let remote = libc::iovec {
                        iov_base: (entry + std::mem::size_of::<libc::msghdr>() as u64)
                            as *mut c_void,
                        iov_len: 4,
                    };
                    // SAFETY: writes 4 bytes of the caller's array entry.
                    unsafe {
                        libc::process_vm_writev(call.tid as libc::pid_t, &local, 1, &remote, 1, 0)
                    };
                    sent += 1;
                }
                Err(e) if sent == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(sent as i64)
    }
}

fn close_all(fds: &[c_int]) {
    for &fd in fds {
        // SAFETY: descriptors fetched by this code.
        unsafe { libc::close(fd) };
    }
}
