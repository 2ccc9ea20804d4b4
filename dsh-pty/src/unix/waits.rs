//! What a blocked process waits on (Linux): whether the system call it
//! sleeps in, as `/proc/<pid>/task/<tid>/syscall` shows it, waits for input
//! from the terminal. A `read` of the terminal does; so does a
//! `poll`/`ppoll` or `select`/`pselect6` whose set (read from the
//! process's memory) asks for input from it, and an `epoll_wait` on an
//! epoll whose interest list (`/proc/<pid>/fdinfo/<epfd>`) holds it. A wait
//! on sockets, pipes, files, inotify, timers or nothing does not: such a
//! program runs on to its end or to the call's timeout.
//!
//! Where the set a `poll`/`select` waits on cannot be read (the process's
//! memory is refused), the call counts as a wait for the terminal when the
//! process's standard input is the terminal: the rule before sets were
//! read, which keeps pagers, editors and password prompts ended where the
//! sets cannot be seen.

use std::path::Path;

/// `POLLIN | POLLPRI | POLLRDNORM`, and the same bits of `epoll`'s events:
/// a wait for input.
const INPUT_EVENTS: u32 = 0x1 | 0x2 | 0x40;

/// The most descriptors of a `poll` set read from a process's memory (one
/// page of `pollfd`s is 512; a set larger than this many is not a person's
/// prompt).
const MAX_POLL_FDS: usize = 4096;

/// The most descriptors of a `select` set read (eight times
/// `FD_SETSIZE`).
const MAX_SELECT_FDS: u64 = 8192;

/// What kind of wait a system call number is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// `read` and friends: argument 0 is the descriptor.
    Read,
    /// `poll`/`ppoll`: argument 0 points at the `pollfd`s, argument 1 is
    /// their number.
    Poll,
    /// `select`/`pselect6`: argument 0 is the number of descriptors,
    /// argument 1 points at the read set.
    Select,
    /// `epoll_wait` and friends: argument 0 is the epoll.
    Epoll,
}

/// The wait system call `nr` is, on this architecture.
#[allow(
    clippy::useless_conversion,
    reason = "`c_long` is `i64` only on 64-bit targets"
)]
fn call(nr: i64) -> Option<Call> {
    use libc::*;
    let generic = [
        (SYS_read, Call::Read),
        (SYS_readv, Call::Read),
        (SYS_pread64, Call::Read),
        (SYS_preadv, Call::Read),
        (SYS_ppoll, Call::Poll),
        (SYS_pselect6, Call::Select),
        (SYS_epoll_pwait, Call::Epoll),
    ];
    #[cfg(target_arch = "x86_64")]
    let legacy = [
        (SYS_preadv2, Call::Read),
        (SYS_poll, Call::Poll),
        (SYS_select, Call::Select),
        (SYS_epoll_wait, Call::Epoll),
        (SYS_epoll_pwait2, Call::Epoll),
    ];
    #[cfg(target_arch = "aarch64")]
    let legacy = [(SYS_preadv2, Call::Read), (SYS_epoll_pwait2, Call::Epoll)];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let legacy: [(libc::c_long, Call); 0] = [];
    generic
        .into_iter()
        .chain(legacy)
        .find(|&(n, _)| i64::from(n) == nr)
        .map(|(_, c)| c)
}

/// One reading of `/proc/<pid>/task/<tid>/syscall`: the call's number and
/// its first two arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Blocked {
    nr: i64,
    arg0: u64,
    arg1: u64,
}

/// Parses "NR arg0 arg1 …" (arguments in hex); `None` for `running`, for a
/// task blocked outside a system call (`-1 …`) or for anything else.
fn parse_syscall(text: &str) -> Option<Blocked> {
    let mut fields = text.split_ascii_whitespace();
    let nr = fields.next()?.parse::<i64>().ok()?;
    let mut hex = || u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok();
    let (arg0, arg1) = (hex()?, hex()?);
    (nr >= 0).then_some(Blocked { nr, arg0, arg1 })
}

/// Whether descriptor `fd` of process `pid` is the terminal at `tty` (or
/// `/dev/tty`, the name a descriptor opened through the controlling
/// terminal shows).
fn fd_is_tty(pid: i32, fd: u64, tty: &Path) -> bool {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .is_ok_and(|target| target == tty || target == Path::new("/dev/tty"))
}

/// Whether some thread of process `pid` (seen in state `S` in its
/// `/proc/<pid>/stat`) sleeps in a wait for input from the terminal at `tty`.
pub(crate) fn waits_for_tty(pid: i32, tty: &Path) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .any(|tid| {
            (tid == pid || task_sleeps(pid, tid))
                && std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
                    .ok()
                    .and_then(|text| parse_syscall(&text))
                    .is_some_and(|b| blocked_on_tty(pid, b, tty))
        })
}

/// Whether thread `tid` of `pid` is asleep (`S`).
fn task_sleeps(pid: i32, tid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/task/{tid}/stat"))
        .ok()
        .and_then(|text| super::procfs::parse_stat(tid, &text))
        .is_some_and(|s| s.state == b'S')
}

/// Whether the call `b` that a thread of `pid` sleeps in waits for input
/// from the terminal.
fn blocked_on_tty(pid: i32, b: Blocked, tty: &Path) -> bool {
    match call(b.nr) {
        None => false,
        Some(Call::Read) => fd_is_tty(pid, b.arg0, tty),
        Some(Call::Epoll) => epoll_holds_tty(pid, b.arg0, tty),
        Some(Call::Poll) if b.arg1 == 0 => false,
        Some(Call::Poll) => match poll_input_fds(pid, b.arg0, b.arg1) {
            Some(fds) => fds.into_iter().any(|fd| fd_is_tty(pid, fd, tty)),
            None => fd_is_tty(pid, 0, tty),
        },
        // No descriptor, or no read set.
        Some(Call::Select) if b.arg0 == 0 || b.arg1 == 0 => false,
        Some(Call::Select) => match select_read_fds(pid, b.arg0, b.arg1) {
            Some(fds) => fds.into_iter().any(|fd| fd_is_tty(pid, fd, tty)),
            None => fd_is_tty(pid, 0, tty),
        },
    }
}

/// Reads `len` bytes at `addr` in the memory of process `pid`: `None` when
/// it is refused (`EPERM`), the process is gone (`ESRCH`) or the range is
/// not all mapped.
fn read_memory(pid: i32, addr: u64, len: usize) -> Option<Vec<u8>> {
    use nix::sys::uio::{RemoteIoVec, process_vm_readv};
    let mut buf = vec![0u8; len];
    let remote = [RemoteIoVec {
        base: usize::try_from(addr).ok()?,
        len,
    }];
    let local = &mut [std::io::IoSliceMut::new(&mut buf)];
    match process_vm_readv(nix::unistd::Pid::from_raw(pid), local, &remote) {
        Ok(n) if n == len => Some(buf),
        Ok(_) | Err(_) => None,
    }
}

/// The descriptors the `nfds` `pollfd`s at `addr` ask input from; `None`
/// when they cannot be read.
fn poll_input_fds(pid: i32, addr: u64, nfds: u64) -> Option<Vec<u64>> {
    let n = usize::try_from(nfds).ok()?.min(MAX_POLL_FDS);
    let bytes = read_memory(pid, addr, n * size_of::<libc::pollfd>())?;
    Some(pollfds_asking_input(&bytes))
}

/// The descriptors a `pollfd` array (as the process holds it in memory)
/// asks input from.
fn pollfds_asking_input(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(size_of::<libc::pollfd>())
        .filter(|p| u32::from(u16::from_ne_bytes([p[4], p[5]])) & INPUT_EVENTS != 0)
        .filter_map(|p| u64::try_from(i32::from_ne_bytes([p[0], p[1], p[2], p[3]])).ok())
        .collect()
}

/// The descriptors in the read set at `addr` of a `select` over `nfds`
/// descriptors; `None` when it cannot be read.
fn select_read_fds(pid: i32, nfds: u64, addr: u64) -> Option<Vec<u64>> {
    let nfds = nfds.min(MAX_SELECT_FDS);
    let word = size_of::<libc::c_ulong>() as u64;
    let words = nfds.div_ceil(word * 8);
    let bytes = read_memory(pid, addr, usize::try_from(words * word).ok()?)?;
    Some(fd_set_members(&bytes, nfds))
}

/// The descriptors below `nfds` in an `fd_set` (native `unsigned long`s,
/// as the process holds it in memory).
fn fd_set_members(bytes: &[u8], nfds: u64) -> Vec<u64> {
    let word = size_of::<libc::c_ulong>();
    let mut fds = Vec::new();
    for (i, w) in bytes.chunks_exact(word).enumerate() {
        let mut buf = [0u8; 8];
        let value = if cfg!(target_endian = "little") {
            buf[..word].copy_from_slice(w);
            u64::from_le_bytes(buf)
        } else {
            buf[8 - word..].copy_from_slice(w);
            u64::from_be_bytes(buf)
        };
        fds.extend(
            (0..8 * word as u64)
                .filter(|bit| value & (1 << bit) != 0)
                .map(|bit| i as u64 * 8 * word as u64 + bit)
                .filter(|&fd| fd < nfds),
        );
    }
    fds
}

/// Whether the epoll `epfd` of process `pid` watches the terminal for
/// input: its `/proc/<pid>/fdinfo/<epfd>` lists each target as `tfd: <fd>
/// events: <hex>`.
fn epoll_holds_tty(pid: i32, epfd: u64, tty: &Path) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{epfd}")).is_ok_and(|text| {
        epoll_targets(&text)
            .any(|(fd, events)| events & INPUT_EVENTS != 0 && fd_is_tty(pid, fd, tty))
    })
}

/// The targets an epoll's `fdinfo` lists: each `tfd:` line's descriptor and
/// events.
fn epoll_targets(text: &str) -> impl Iterator<Item = (u64, u32)> + '_ {
    text.lines().filter_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        (fields.next()? == "tfd:").then_some(())?;
        let fd = fields.next()?.parse().ok()?;
        (fields.next()? == "events:").then_some(())?;
        let events = u32::from_str_radix(fields.next()?, 16).ok()?;
        Some((fd, events))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_blocked_call() {
        assert_eq!(
            parse_syscall("7 0x7ffd3c1e5a60 0x2 0xffffffff 0x0 0x0 0x0 0x7ffd 0x7f12\n"),
            Some(Blocked {
                nr: 7,
                arg0: 0x7ffd3c1e5a60,
                arg1: 2
            })
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd 0x7f12\n"), None);
    }

    #[test]
    #[allow(
        clippy::useless_conversion,
        reason = "`c_long` is `i64` only on 64-bit targets"
    )]
    fn knows_the_waits_of_this_architecture() {
        assert_eq!(call(libc::SYS_read.into()), Some(Call::Read));
        assert_eq!(call(libc::SYS_ppoll.into()), Some(Call::Poll));
        assert_eq!(call(libc::SYS_pselect6.into()), Some(Call::Select));
        assert_eq!(call(libc::SYS_epoll_pwait.into()), Some(Call::Epoll));
        assert_eq!(call(libc::SYS_futex.into()), None);
        assert_eq!(call(libc::SYS_nanosleep.into()), None);
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(call(7), Some(Call::Poll));
            assert_eq!(call(23), Some(Call::Select));
            assert_eq!(call(232), Some(Call::Epoll));
            assert_eq!(call(441), Some(Call::Epoll));
        }
        #[cfg(target_arch = "aarch64")]
        {
            assert_eq!(call(63), Some(Call::Read));
            assert_eq!(call(73), Some(Call::Poll));
            assert_eq!(call(72), Some(Call::Select));
            assert_eq!(call(22), Some(Call::Epoll));
        }
    }

    #[test]
    fn a_poll_set_is_read_for_its_input_descriptors() {
        let pollfd = |fd: i32, events: i16| {
            let mut b = fd.to_ne_bytes().to_vec();
            b.extend(events.to_ne_bytes());
            b.extend(0i16.to_ne_bytes());
            b
        };
        // Input from 5 and 0; output to 1 only; -1 is skipped by poll.
        let set: Vec<u8> = [pollfd(5, 1), pollfd(0, 0x40), pollfd(1, 4), pollfd(-1, 1)].concat();
        assert_eq!(pollfds_asking_input(&set), [5, 0]);
    }

    #[test]
    fn a_select_set_is_read_for_its_members() {
        let bits = 8 * size_of::<libc::c_ulong>() as u64;
        let words: [libc::c_ulong; 2] = [1 | 1 << 3, 1 << 2];
        let set: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(fd_set_members(&set, 100), [0, 3, bits + 2]);
        // Beyond `nfds` is not looked at.
        assert_eq!(fd_set_members(&set, 3), [0]);
    }

    #[test]
    fn reads_an_epolls_targets() {
        let text = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        4 events:       19 data:                4  pos:0 ino:2a sdev:16\n\
                    tfd:        0 events:        4 data:                0  pos:0 ino:3 sdev:18\n";
        assert_eq!(epoll_targets(text).collect::<Vec<_>>(), [(4, 0x19), (0, 4)]);
    }

    /// This process's own memory reads back as it is (we may read our own).
    #[test]
    fn reads_process_memory() {
        let data = *b"pollfd!!";
        let me = std::process::id() as i32;
        let got = read_memory(me, data.as_ptr() as u64, data.len());
        assert_eq!(got.as_deref(), Some(&data[..]));
        assert_eq!(read_memory(me, 0, 8), None);
    }
}
