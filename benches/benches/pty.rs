//! PTY round trip and throughput through each `dsh-pty` backend, next to a raw
//! baseline in the same run: `openpty` + a blocking read loop, no tokio.
//!
//! ```text
//! cargo bench -p benches --bench pty
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::{RawPty, SEQ_BYTES};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_pty::{NativeBackend, OutputStream, PortableBackend, PtyBackend, PtySession, SpawnSpec};

const SEQ: &str = "seq 1 3000000";

/// A `dsh-pty` session plus its output stream.
struct Tokio {
    session: Box<dyn PtySession>,
    out: OutputStream,
}

impl Tokio {
    async fn spawn(backend: &dyn PtyBackend, opost: bool) -> Tokio {
        let spec = SpawnSpec::new("bash")
            .args(["--norc", "--noprofile", "--noediting"])
            .env("PS1", "")
            .env("TERM", "dumb")
            .echo(false)
            .output_processing(opost);
        let mut session = backend.spawn(spec).await.unwrap();
        let out = session.take_output().unwrap();
        Tokio { session, out }
    }

    async fn run(&mut self, command: &str, needle: &[u8]) -> usize {
        self.session.write_all(command.as_bytes()).await.unwrap();
        let mut tail: Vec<u8> = Vec::new();
        let mut total = 0;
        loop {
            let chunk = self.out.recv().await.unwrap();
            total += chunk.len();
            tail.extend_from_slice(&chunk);
            if memchr::memmem::find(&tail, needle).is_some() {
                return total;
            }
            let keep = needle.len().min(tail.len());
            tail.drain(..tail.len() - keep);
        }
    }
}

fn round_trip_command(i: u64) -> (String, Vec<u8>) {
    (
        format!("printf 'RT%s:\\n' {i}\n"),
        format!("RT{i}:").into_bytes(),
    )
}

fn backends() -> Vec<Arc<dyn PtyBackend>> {
    vec![
        Arc::new(NativeBackend::new()),
        Arc::new(PortableBackend::new()),
    ]
}

fn round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("pty_round_trip");
    group.measurement_time(Duration::from_secs(5));

    let mut raw = RawPty::spawn(true).unwrap();
    let mut n = 0u64;
    group.bench_function("raw_openpty_blocking", |b| {
        b.iter(|| {
            n += 1;
            let (cmd, needle) = round_trip_command(n);
            raw.run(&cmd, &needle).unwrap()
        })
    });
    drop(raw);

    for backend in backends() {
        let mut s = rt.block_on(Tokio::spawn(&*backend, true));
        group.bench_function(backend.name(), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        n += 1;
                        let (cmd, needle) = round_trip_command(n);
                        s.run(&cmd, &needle).await;
                    }
                    start.elapsed()
                })
            })
        });
        rt.block_on(s.session.end(Duration::from_millis(100)))
            .unwrap();
    }
    group.finish();
}

fn throughput(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("pty_seq_3M");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    group.throughput(Throughput::Bytes(SEQ_BYTES));
    let command = format!("{SEQ}; printf 'DO%s:\\n' NE\n");

    for opost in [true, false] {
        let label = if opost { "opost" } else { "raw-output" };
        let mut raw = RawPty::spawn(opost).unwrap();
        group.bench_function(format!("raw_openpty_blocking/{label}"), |b| {
            b.iter(|| raw.run(&command, b"DONE:").unwrap())
        });
        drop(raw);
        for backend in backends() {
            let mut s = rt.block_on(Tokio::spawn(&*backend, opost));
            group.bench_function(format!("{}/{label}", backend.name()), |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let start = Instant::now();
                        for _ in 0..iters {
                            s.run(&command, b"DONE:").await;
                        }
                        start.elapsed()
                    })
                })
            });
            rt.block_on(s.session.end(Duration::from_millis(100)))
                .unwrap();
        }
    }
    group.finish();
}

criterion_group!(benches, round_trip, throughput);
criterion_main!(benches);
