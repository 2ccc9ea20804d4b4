//! The persistent shell tool: marker scanning next to `memmem` on the same
//! buffer, and whole-call round trip and throughput next to the raw PTY.
//!
//! ```text
//! cargo bench -p benches --bench shell
//! ```
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::time::{Duration, Instant};

use benches::{RawPty, SEQ_BYTES};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_pty::{NativeBackend, PtyBackend, SpawnSpec};
use dsh_shell_persistent::__private::{CallScanner, Markers};
use dsh_shell_persistent::{ShellConfig, ShellPool};

mod common;

const PREFIX: &str = "0123456789abcdef";
const START: &str = "0123456789abcdef0123456789abcdef";
const END: &str = "0123456789abcdeffedcba9876543210";

fn scanning(c: &mut Criterion) {
    // 64 MiB of `seq`-like output, then the end marker.
    let mut buf: Vec<u8> = Vec::with_capacity(64 << 20);
    buf.extend_from_slice(START.as_bytes());
    let mut i = 0u64;
    while buf.len() < 64 << 20 {
        buf.extend_from_slice(format!("{i}\n").as_bytes());
        i += 1;
    }
    buf.extend_from_slice(END.as_bytes());
    buf.extend_from_slice(b"0#");

    let mut group = c.benchmark_group("marker_scan_64MiB");
    group.throughput(Throughput::Bytes(buf.len() as u64));
    group.sample_size(20);
    group.bench_function("memmem_find_whole_buffer", |b| {
        let finder = memchr::memmem::Finder::new(END.as_bytes());
        b.iter(|| finder.find(&buf))
    });
    for chunk in [4 << 10, 16 << 10, 64 << 10] {
        group.bench_function(format!("call_scanner_{}KiB_chunks", chunk >> 10), |b| {
            b.iter(|| {
                let mut scanner = CallScanner::new(Markers {
                    prefix: PREFIX.into(),
                    start: START[16..].into(),
                    end: END[16..].into(),
                    ..Markers::default()
                });
                let mut out = 0usize;
                for piece in buf.chunks(chunk) {
                    scanner.feed(piece, &mut |b| out += b.len());
                }
                out
            })
        });
    }
    group.finish();
}

fn round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("shell_round_trip_true");
    group.measurement_time(Duration::from_secs(5));

    let mut raw = RawPty::spawn(false).unwrap();
    let mut n = 0u64;
    group.bench_function("raw_openpty_blocking", |b| {
        b.iter(|| {
            n += 1;
            raw.run(
                &format!("true; printf 'RT%s:\\n' {n}\n"),
                format!("RT{n}:").as_bytes(),
            )
            .unwrap()
        })
    });
    drop(raw);

    let mut session = rt
        .block_on(
            NativeBackend::new().spawn(
                SpawnSpec::new("bash")
                    .args(["--norc", "--noprofile", "--noediting"])
                    .env("PS1", "")
                    .echo(false)
                    .output_processing(false),
            ),
        )
        .unwrap();
    let mut out = session.take_output().unwrap();
    group.bench_function("dsh_pty_native", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    let needle = format!("RT{n}:");
                    session
                        .write_all(format!("true; printf 'RT%s:\\n' {n}\n").as_bytes())
                        .await
                        .unwrap();
                    let mut tail = Vec::new();
                    while memchr::memmem::find(&tail, needle.as_bytes()).is_none() {
                        tail.extend_from_slice(&out.recv().await.unwrap());
                    }
                }
                start.elapsed()
            })
        })
    });
    drop(out);
    drop(session);

    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir())).unwrap();
    rt.block_on(pool.run("bench", "true")).unwrap();
    group.bench_function("dsh_shell_persistent", |b| {
        b.iter(|| rt.block_on(pool.run("bench", "true")).unwrap())
    });
    // A line bash abandons (SIGINT to the shell itself) comes back through
    // the abandoned-line prompt, not a poll.
    group.bench_function("dsh_shell_persistent_abandoned_line", |b| {
        b.iter(|| {
            let out = rt.block_on(pool.run("bench", "kill -INT $$")).unwrap();
            assert_eq!(out, "[exit code: 130]");
        })
    });
    group.finish();

    // Medians of 100, as the closing notes report them.
    let median = |cmd: &str| {
        let mut times: Vec<Duration> = (0..100)
            .map(|_| {
                let start = Instant::now();
                rt.block_on(pool.run("bench", cmd)).unwrap();
                start.elapsed()
            })
            .collect();
        times.sort();
        times[50]
    };
    let normal = median("true");
    let abandoned = median("kill -INT $$");
    let syntax = median("echo 'it's");
    println!(
        "median of 100 calls: `true` {normal:?}, abandoned line (`kill -INT $$`) {abandoned:?}, syntax error (`echo 'it's`) {syntax:?}"
    );
    rt.block_on(pool.close_all());
}

fn throughput(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("shell_seq_3M");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    group.throughput(Throughput::Bytes(SEQ_BYTES));

    let mut raw = RawPty::spawn(false).unwrap();
    group.bench_function("raw_openpty_blocking", |b| {
        b.iter(|| {
            raw.run("seq 1 3000000; printf 'DO%s:\\n' NE\n", b"DONE:")
                .unwrap()
        })
    });
    drop(raw);

    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir())).unwrap();
    group.bench_function("dsh_shell_persistent", |b| {
        b.iter(|| rt.block_on(pool.run("bench", "seq 1 3000000")).unwrap())
    });
    group.finish();
    rt.block_on(pool.close_all());
}

/// The issue's goal for one call, as a ratio to a raw PTY round trip
/// measured in the same run (medians of 500 each, taken in turns).
fn call_ratio(_c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut raw = RawPty::spawn(false).unwrap();
    let mut n = 0u64;
    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir())).unwrap();
    let (raw_time, call) = benches::median_pair(
        500,
        50,
        || {
            n += 1;
            raw.run(
                &format!("true; printf 'RT%s:\\n' {n}\n"),
                format!("RT{n}:").as_bytes(),
            )
            .unwrap();
        },
        || {
            rt.block_on(pool.run("bench", "true")).unwrap();
        },
    );
    drop(raw);
    println!(
        "in-process bash `true`: {call:?}, raw PTY round trip {raw_time:?}: {:.2}x (goal <= 1.5x)",
        call.as_secs_f64() / raw_time.as_secs_f64()
    );
    // The same calls from a task on the runtime, as an application built on
    // tokio makes them: no hop to a thread outside the runtime per wake-up.
    let in_task = pool.clone();
    let call = rt
        .block_on(rt.spawn(async move {
            let mut times = Vec::with_capacity(500);
            for i in 0..550 {
                let start = Instant::now();
                in_task.run("bench", "true").await.unwrap();
                if i >= 50 {
                    times.push(start.elapsed());
                }
            }
            times.sort();
            times[times.len() / 2]
        }))
        .unwrap();
    println!(
        "in-process bash `true` from a runtime task: {call:?}: {:.2}x the raw PTY round trip",
        call.as_secs_f64() / raw_time.as_secs_f64()
    );
    rt.block_on(pool.close_all());
}

/// Spawning and closing 1,000 idle shells, timed once (too heavy to repeat).
fn closing(_c: &mut Criterion) {
    const SHELLS: usize = 1000;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir())).unwrap();
    let start = Instant::now();
    rt.block_on(common::start_owners(&pool, "owner-", SHELLS));
    let spawned = start.elapsed();
    assert_eq!(pool.owners().len(), SHELLS);
    let start = Instant::now();
    rt.block_on(pool.close_all());
    let closed = start.elapsed();
    println!(
        "{SHELLS} idle shells: spawned (and one call each) in {spawned:?}, closed in {closed:?}"
    );
}

/// The resident set size of this process, in KiB (Linux).
fn rss_kib() -> u64 {
    benches::proc_kib("/proc/self/status", "VmRSS")
}

/// 20,000 owners, each created, used once and closed, in sequence: the
/// host's memory must stay flat.
fn owner_churn(_c: &mut Criterion) {
    const OWNERS: usize = 20_000;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir())).unwrap();
    let mut after_first = 0;
    let start = Instant::now();
    rt.block_on(async {
        for i in 0..OWNERS {
            let owner = format!("agent-{i}");
            pool.run(&owner, "true").await.unwrap();
            pool.close_owner(&owner).await;
            if i + 1 == 1000 {
                after_first = rss_kib();
            }
        }
    });
    let end = rss_kib();
    println!(
        "{OWNERS} owners used once and closed in {:?}: RSS {after_first} KiB after 1,000, {end} KiB after {OWNERS} ({:.2}x)",
        start.elapsed(),
        end as f64 / after_first.max(1) as f64
    );
}

criterion_group!(
    benches,
    call_ratio,
    scanning,
    round_trip,
    throughput,
    closing,
    owner_churn
);
criterion_main!(benches);
