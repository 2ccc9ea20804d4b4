//! Many agents on one host: what an owner's life costs and how many calls
//! a second the library sustains, each next to a raw baseline measured in
//! the same run.
//!
//! * **Lifecycle**: creating an owner (its shell's spawn and first `true`)
//!   and closing it, next to a raw spawn of bash on a PTY with its first
//!   round trip, and a raw `SIGKILL` and reap (medians, taken in turns).
//! * **Threads**: the threads this process holds with 1,000 idle shells.
//! * **N agents at once**: N owners, each making 50 sequential `echo hi`
//!   calls on its own shell, all at once, next to N raw bash sessions on
//!   PTYs driven by one `epoll` loop with a marker line
//!   (`echo hi; echo __M_<k>_$?__`), both CPU-bound.
//!
//! ```text
//! cargo bench -p benches --bench agents
//! ```
//! (`DSH_AGENTS=10,100` picks the N of the throughput part.)
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::time::{Duration, Instant};

use benches::RawPty;

mod common;
use dsh_shell_persistent::{ShellConfig, ShellPool};

/// Calls each agent makes in the throughput part.
const CALLS: usize = 50;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Creating and closing an owner, next to a raw spawn, first round trip,
/// kill and reap; 200 of each, in turns, after 20 untimed.
fn lifecycle() {
    const ROUNDS: usize = 200;
    let rt = runtime();
    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir())).unwrap();
    let (mut raw_spawn, mut raw_kill, mut create, mut close) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..ROUNDS + 20 {
        let start = Instant::now();
        let mut raw = RawPty::spawn(false).unwrap();
        raw.run("true; printf 'RT%s:\\n' 1\n", b"RT1:").unwrap();
        let spawned = start.elapsed();
        let start = Instant::now();
        drop(raw); // SIGKILL and wait
        let killed = start.elapsed();

        let owner = format!("owner-{i}");
        let start = Instant::now();
        rt.block_on(pool.run(&owner, "true")).unwrap();
        let created = start.elapsed();
        let start = Instant::now();
        rt.block_on(pool.close_owner(&owner));
        let closed = start.elapsed();
        if i >= 20 {
            raw_spawn.push(spawned);
            raw_kill.push(killed);
            create.push(created);
            close.push(closed);
        }
    }
    let (raw_spawn, raw_kill) = (median(&mut raw_spawn), median(&mut raw_kill));
    let (create, close) = (median(&mut create), median(&mut close));
    println!(
        "create an owner (spawn + first `true`): {create:?}, raw spawn + first round trip {raw_spawn:?}: {:.2}x (goal <= 1.3x)",
        create.as_secs_f64() / raw_spawn.as_secs_f64()
    );
    println!(
        "close an owner: {close:?}, raw SIGKILL + reap {raw_kill:?}: {:.2}x (goal: close <= 1.5 ms)",
        close.as_secs_f64() / raw_kill.as_secs_f64()
    );
}

/// The threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// The threads held with 1,000 idle shells (each made one call).
fn idle_threads() {
    const SHELLS: usize = 1000;
    let rt = runtime();
    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir())).unwrap();
    rt.block_on(pool.run("first", "true")).unwrap();
    let before = threads();
    rt.block_on(common::start_owners(&pool, "a", SHELLS));
    let during = threads();
    // The blocking pool's idle threads leave after 10 s; what stays is what
    // the shells hold.
    std::thread::sleep(Duration::from_secs(11));
    let idle = threads();
    println!(
        "threads: {before} with one shell, {during} right after starting {SHELLS} more, {idle} once they are idle"
    );
    rt.block_on(pool.close_all());
}

/// `n` agents, [`CALLS`] `echo hi` each, all at once: calls per second.
fn library_agents(rt: &tokio::runtime::Runtime, n: usize) -> f64 {
    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir())).unwrap();
    rt.block_on(common::start_owners(&pool, "a", n));
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..n {
            let pool = pool.clone();
            tasks.spawn(async move {
                let owner = format!("a{i}");
                for _ in 0..CALLS {
                    let out = pool.run(&owner, "echo hi").await.unwrap();
                    assert_eq!(out.trim_end(), "hi");
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    });
    let rate = (n * CALLS) as f64 / start.elapsed().as_secs_f64();
    rt.block_on(pool.close_all());
    rate
}

/// One raw session of [`raw_agents`]: its terminal, the marker it waits
/// for, what arrived since the command was sent.
struct RawSession {
    pty: RawPty,
    marker: Vec<u8>,
    seen: Vec<u8>,
    done: usize,
}

impl RawSession {
    fn send(&mut self) {
        let k = self.done + 1;
        self.marker = format!("__M_{k}_0__").into_bytes();
        self.seen.clear();
        self.pty
            .write(format!("echo hi; echo __M_{k}_$?__\n").as_bytes())
            .unwrap();
    }
}

/// `n` raw bash sessions on PTYs, [`CALLS`] `echo hi` round trips each, all
/// at once, driven by one `epoll` loop: calls per second.
fn raw_agents(n: usize) -> f64 {
    let mut sessions: Vec<RawSession> = (0..n)
        .map(|_| {
            let mut pty = RawPty::spawn(false).unwrap();
            pty.run("true; printf 'RT%s:\\n' 0\n", b"RT0:").unwrap();
            pty.set_nonblocking();
            RawSession {
                pty,
                marker: Vec::new(),
                seen: Vec::new(),
                done: 0,
            }
        })
        .collect();
    // SAFETY: plain system calls on descriptors this function owns.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(epoll >= 0);
    for (i, s) in sessions.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: as above.
        let r = unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, s.pty.raw_fd(), &mut ev) };
        assert_eq!(r, 0);
    }
    let start = Instant::now();
    sessions.iter_mut().for_each(RawSession::send);
    let mut finished = 0;
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut buf = vec![0u8; 64 * 1024];
    while finished < n {
        // SAFETY: as above; `events` outlives the call.
        let got = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), 256, -1) };
        assert!(got >= 0);
        for ev in &events[..got as usize] {
            let s = &mut sessions[ev.u64 as usize];
            while let Some(read) = s.pty.read_some(&mut buf) {
                s.seen.extend_from_slice(&buf[..read]);
            }
            if memchr::memmem::find(&s.seen, &s.marker).is_some() {
                assert!(s.seen.starts_with(b"hi"));
                s.done += 1;
                if s.done == CALLS {
                    finished += 1;
                } else {
                    s.send();
                }
            }
        }
    }
    let rate = (n * CALLS) as f64 / start.elapsed().as_secs_f64();
    // SAFETY: closing the descriptor this function made.
    unsafe { libc::close(epoll) };
    rate
}

fn agents() {
    let ns: Vec<usize> = std::env::var("DSH_AGENTS")
        .ok()
        .map(|s| s.split(',').map(|n| n.trim().parse().unwrap()).collect())
        .unwrap_or_else(|| vec![10, 100, 500]);
    let rt = runtime();
    for n in ns {
        let raw = raw_agents(n);
        let ours = library_agents(&rt, n);
        println!(
            "{n} agents x {CALLS} `echo hi` at once: {ours:.0} calls/s, raw epoll baseline {raw:.0} calls/s: {:.2}x (goal >= 0.5x at N = 100)",
            ours / raw
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter picks one part.
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let parts: [(&str, fn()); 3] = [
        ("lifecycle", lifecycle),
        ("agents", agents),
        ("threads", idle_threads),
    ];
    for (name, part) in parts {
        if name.contains(&filter) {
            part();
        }
    }
}
