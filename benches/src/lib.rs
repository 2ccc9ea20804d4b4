//! Criterion benches of the dsh-rs crates (see `benches/`), and the baselines
//! they share.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use nix::sys::termios::{self, LocalFlags, OutputFlags, SetArg};

/// Bytes `seq 1 3000000` prints (before a terminal turns `\n` into `\r\n`).
pub const SEQ_BYTES: u64 = 22_888_896;

/// The raw baseline: bash on a pseudo-terminal from `openpty`, driven with
/// blocking reads and writes and no async runtime: the least any PTY tool
/// must do.
#[derive(Debug)]
pub struct RawPty {
    master: File,
    child: Child,
    buf: Vec<u8>,
}

impl RawPty {
    /// Starts `bash --norc --noprofile --noediting` with echo off and output
    /// post-processing as given.
    pub fn spawn(opost: bool) -> io::Result<RawPty> {
        RawPty::spawn_under(&[], opost)
    }

    /// As [`RawPty::spawn`], with bash run by `wrapper` (a program and its
    /// arguments, such as `valgrind --tool=callgrind`; empty for none).
    pub fn spawn_under(wrapper: &[String], opost: bool) -> io::Result<RawPty> {
        let pty = nix::pty::openpty(None, None)?;
        let mut modes = termios::tcgetattr(&pty.slave)?;
        modes.local_flags.remove(LocalFlags::ECHO);
        modes.output_flags.set(OutputFlags::OPOST, opost);
        termios::tcsetattr(&pty.slave, SetArg::TCSANOW, &modes)?;
        let stdio = |fd: &OwnedFd| fd.try_clone().map(Stdio::from);
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg("bash");
                cmd
            }
            None => Command::new("bash"),
        };
        cmd.args(["--norc", "--noprofile", "--noediting"])
            .env("PS1", "")
            .env("TERM", "dumb")
            .stdin(stdio(&pty.slave)?)
            .stdout(stdio(&pty.slave)?)
            .stderr(stdio(&pty.slave)?);
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY as _, 0);
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(pty.slave);
        Ok(RawPty {
            master: File::from(pty.master),
            child,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Writes `command` and reads until `needle` was seen; returns the bytes read.
    pub fn run(&mut self, command: &str, needle: &[u8]) -> io::Result<usize> {
        self.master.write_all(command.as_bytes())?;
        let mut tail = Vec::new();
        let mut total = 0;
        loop {
            let n = self.master.read(&mut self.buf)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            total += n;
            tail.extend_from_slice(&self.buf[..n]);
            if memchr::memmem::find(&tail, needle).is_some() {
                return Ok(total);
            }
            let keep = needle.len().min(tail.len());
            tail.drain(..tail.len() - keep);
        }
    }
}

impl RawPty {
    /// Writes `bytes` whole.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            match self.master.write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Makes reads of the terminal return at once ([`RawPty::read_some`]).
    pub fn set_nonblocking(&mut self) {
        // SAFETY: fcntl on a descriptor this value owns.
        unsafe {
            let fd = self.master.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }

    /// The terminal's master descriptor, for `epoll`.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.master.as_raw_fd()
    }

    /// What a non-blocking read gives now: `None` when nothing is there.
    pub fn read_some(&mut self, buf: &mut [u8]) -> Option<usize> {
        match self.master.read(buf) {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        }
    }

    /// Writes `exit` and waits for bash to end by itself (so that a tool
    /// running it, such as callgrind, writes what it counted).
    pub fn exit(mut self) -> io::Result<()> {
        self.master.write_all(b"exit\n")?;
        let mut sink = Vec::new();
        let _ = self.master.read_to_end(&mut sink);
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for RawPty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `kB` figure of a `/proc` file (`/proc/self/status`'s `VmRSS`,
/// `/proc/meminfo`'s `MemAvailable`), in KiB; 0 where there is none.
pub fn proc_kib(file: &str, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The medians of `n` timings each of `a` and `b`, taken in turns (after
/// `warm_up` untimed turns), so a baseline and what is compared with it
/// see the same moments of a noisy machine.
pub fn median_pair(
    n: usize,
    warm_up: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (std::time::Duration, std::time::Duration) {
    for _ in 0..warm_up {
        a();
        b();
    }
    let time = |f: &mut dyn FnMut()| {
        let start = std::time::Instant::now();
        f();
        start.elapsed()
    };
    let (mut ta, mut tb): (Vec<_>, Vec<_>) =
        (0..n.max(1)).map(|_| (time(&mut a), time(&mut b))).unzip();
    ta.sort();
    tb.sort();
    (ta[ta.len() / 2], tb[tb.len() / 2])
}

/// The median of `n` timings of `f`, after `warm_up` untimed runs.
pub fn median(n: usize, warm_up: usize, mut f: impl FnMut()) -> std::time::Duration {
    for _ in 0..warm_up {
        f();
    }
    let mut times: Vec<std::time::Duration> = (0..n.max(1))
        .map(|_| {
            let start = std::time::Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}
