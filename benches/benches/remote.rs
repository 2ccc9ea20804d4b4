//! The shell through Docker and SSH next to the local backend, in the same
//! run: the round trip of a `true` call, and 100 container-backed shells
//! (a container each) spawned, called once and closed at once.
//!
//! Needs a Docker daemon with the `dsh-test` image and OpenSSH's `sshd`
//! (`.ci/engines` makes both ready); a part whose engine is missing says so
//! and is skipped.
//!
//! ```text
//! cargo bench -p benches --bench remote
//! ```
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_docker::{ContainerTemplate, DockerBackend};
use dsh_shell_persistent::{ShellConfig, ShellPool};
use dsh_testbeds::{Testbed, Where};

fn median(rt: &tokio::runtime::Runtime, pool: &ShellPool) -> Duration {
    let mut times: Vec<Duration> = (0..100)
        .map(|_| {
            let start = Instant::now();
            rt.block_on(pool.run("bench", "true")).unwrap();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[50]
}

fn engines_here() -> (bool, bool) {
    let docker = std::path::Path::new("/var/run/docker.sock").exists()
        || std::env::var_os("DOCKER_HOST").is_some();
    let sshd = std::path::Path::new("/usr/sbin/sshd").exists();
    (docker, sshd)
}

fn round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (docker, sshd) = engines_here();
    let mut places = vec![Where::Local];
    if docker {
        places.push(Where::Docker);
    } else {
        println!("no Docker daemon: the Docker round trip is skipped");
    }
    if sshd {
        places.push(Where::Ssh);
    } else {
        println!("no sshd: the SSH round trip is skipped");
    }
    let mut group = c.benchmark_group("remote_round_trip_true");
    group.measurement_time(Duration::from_secs(5));
    let mut medians = Vec::new();
    for place in places {
        let bed = rt.block_on(Testbed::new(place));
        let mut config = ShellConfig::new(&bed.root);
        config.backend = Arc::clone(&bed.backend);
        let pool = ShellPool::new(config).unwrap();
        rt.block_on(pool.run("bench", "true")).unwrap();
        group.bench_function(format!("{place:?}"), |b| {
            b.iter(|| rt.block_on(pool.run("bench", "true")).unwrap())
        });
        medians.push((place, median(&rt, &pool)));
        rt.block_on(pool.close_all());
        drop(bed);
    }
    group.finish();
    let local = medians[0].1;
    for (place, m) in &medians {
        println!(
            "median of 100 `true` calls, {place:?}: {m:?} ({:.2}x local)",
            m.as_secs_f64() / local.as_secs_f64()
        );
    }
}

/// Memory the kernel counts as available, in KiB.
fn mem_available_kib() -> u64 {
    benches::proc_kib("/proc/meminfo", "MemAvailable")
}

fn rss_kib() -> u64 {
    benches::proc_kib("/proc/self/status", "VmRSS")
}

/// Spawns `SHELLS` shells at once through `backend` (one call each), calls
/// each again at once, closes them all; prints the times and memory.
fn hundred_shells(rt: &tokio::runtime::Runtime, what: &str, backend: Arc<dyn dsh_pty::PtyBackend>) {
    const SHELLS: usize = 100;
    let mut config = ShellConfig::new("/tmp");
    config.backend = backend;
    let pool = ShellPool::new(config).unwrap();
    let (mem_before, rss_before) = (mem_available_kib(), rss_kib());
    let many = |cmd: &'static str, want: &'static str| {
        let pool = pool.clone();
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..SHELLS {
                let pool = pool.clone();
                tasks.spawn(async move { pool.run(&format!("owner-{i}"), cmd).await.unwrap() });
            }
            while let Some(done) = tasks.join_next().await {
                assert_eq!(done.unwrap(), want);
            }
        }
    };
    let start = Instant::now();
    rt.block_on(many("true", ""));
    let spawned = start.elapsed();
    let (mem_after, rss_after) = (mem_available_kib(), rss_kib());
    let start = Instant::now();
    rt.block_on(many("echo again", "again"));
    let called = start.elapsed();
    let start = Instant::now();
    rt.block_on(pool.close_all());
    let closed = start.elapsed();
    println!(
        "{SHELLS} shells, {what}: spawned with one call each in {spawned:?}, a second call each (all at once) \
         in {called:?}, closed in {closed:?}; host memory {} KiB per shell (MemAvailable), this process {} KiB \
         per shell (RSS)",
        mem_before.saturating_sub(mem_after) / SHELLS as u64,
        rss_after.saturating_sub(rss_before) / SHELLS as u64,
    );
}

fn hundred_containers(_c: &mut Criterion) {
    if !engines_here().0 {
        println!("no Docker daemon: the 100 container-backed shells are skipped");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let docker = rt.block_on(dsh_docker::connect(None)).unwrap();
    let mut template = ContainerTemplate::new(dsh_testbeds::test_image());
    template.labels.push(("dsh-rs-bench".into(), "1".into()));
    let per_session = DockerBackend::per_session(docker.clone(), template.clone());
    hundred_shells(&rt, "a container each", Arc::new(per_session));
    let shared = rt
        .block_on(dsh_docker::Container::create(docker, &template))
        .unwrap();
    hundred_shells(
        &rt,
        "one shared container",
        Arc::new(DockerBackend::new(shared.clone())),
    );
    rt.block_on(shared.remove()).unwrap();
    hundred_shells(&rt, "local (baseline)", dsh_pty::default_backend());
}

criterion_group!(
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = round_trip, hundred_containers
);
criterion_main!(benches);
