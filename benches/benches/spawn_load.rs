//! One agent's calls while 200 shells start at once: nothing a spawn does
//! may hold the runtime's workers. On a multi-thread runtime of two
//! workers, one agent runs `true` in a loop on its own persistent shell;
//! its per-call p50 and p99 are measured idle (the baseline, same run),
//! then while 200 other shells start at once, run `true` and close,
//! unconfined and confined (namespaces + Landlock + seccomp, workspace-write).
//! The goal: the agent's p99 under that load stays within 2x its idle p99.
//!
//! ```text
//! cargo bench -p benches --bench spawn_load
//! ```
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_sandbox::{SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell};
use dsh_shell_persistent::{ShellConfig, ShellPool};

const SHELLS: usize = 200;
const ROUNDS: usize = 5;
const IDLE_CALLS: usize = 1000;

/// `(p50, p99)` of `times`.
fn percentiles(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

/// The agent's loop: `true` on its own shell until `stop`, each call timed.
async fn agent(pool: ShellPool, stop: Arc<AtomicBool>, at_least: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    while !stop.load(Ordering::Acquire) || times.len() < at_least {
        let start = Instant::now();
        pool.run("agent", "true").await.unwrap();
        times.push(start.elapsed());
    }
    times
}

/// What starts one of the storm's shells, runs `true` in it and closes it.
#[derive(Clone)]
enum Storm {
    Unconfined(ShellPool),
    Confined(Arc<SandboxedShell>),
}

impl Storm {
    async fn one(self, i: usize) {
        let owner = format!("storm-{i}");
        match self {
            Storm::Unconfined(pool) => {
                pool.run(&owner, "true").await.unwrap();
                pool.close_owner(&owner).await;
            }
            Storm::Confined(shell) => {
                let args = serde_json::json!({"command": "true"});
                shell.execute(&owner, &args).await.unwrap();
                shell.close_owner(&owner).await;
            }
        }
    }
}

/// The agent's call times while `ROUNDS` storms of `SHELLS` shells start
/// at once and close, and the storms' wall time.
fn under_storm(
    rt: &tokio::runtime::Runtime,
    pool: &ShellPool,
    storm: &Storm,
) -> (Vec<Duration>, Duration) {
    let mut times = Vec::new();
    let mut wall = Duration::ZERO;
    for _ in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let calls = rt.spawn(agent(pool.clone(), Arc::clone(&stop), 0));
        let storm = storm.clone();
        let start = Instant::now();
        rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..SHELLS {
                tasks.spawn(storm.clone().one(i));
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        });
        wall += start.elapsed();
        stop.store(true, Ordering::Release);
        times.extend(rt.block_on(calls).unwrap());
    }
    (times, wall / ROUNDS as u32)
}

fn spawn_load(_c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ws = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pool = ShellPool::new(ShellConfig::new(ws.path())).unwrap();
    // Warm up: the agent's shell is started, the page cache is warm.
    rt.block_on(async {
        for _ in 0..100 {
            pool.run("agent", "true").await.unwrap();
        }
    });

    let stop = Arc::new(AtomicBool::new(true));
    let mut idle = rt
        .block_on(rt.spawn(agent(pool.clone(), stop, IDLE_CALLS)))
        .unwrap();
    let (idle_p50, idle_p99) = percentiles(&mut idle);
    println!(
        "agent `true`, idle ({} calls): p50 {idle_p50:?}, p99 {idle_p99:?}",
        idle.len()
    );

    let unconfined = Storm::Unconfined(ShellPool::new(ShellConfig::new(ws.path())).unwrap());
    let mut confined_config = SandboxConfig::new(
        SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite),
        ShellConfig::new(ws.path()),
    );
    confined_config.restricted = dsh_sandbox::Persistence::Persistent;
    let confined = Storm::Confined(Arc::new(SandboxedShell::new(confined_config).unwrap()));
    for (name, storm) in [("unconfined", unconfined), ("confined", confined)] {
        let (mut times, wall) = under_storm(&rt, &pool, &storm);
        let (p50, p99) = percentiles(&mut times);
        println!(
            "agent `true` while {SHELLS} {name} shells start and close ({} calls over {ROUNDS} \
             storms of {wall:?} each): p50 {p50:?} ({:.2}x idle), p99 {p99:?} ({:.2}x idle p99; goal <= 2x)",
            times.len(),
            p50.as_secs_f64() / idle_p50.as_secs_f64(),
            p99.as_secs_f64() / idle_p99.as_secs_f64(),
        );
    }
    rt.block_on(pool.close_all());
}

criterion_group!(benches, spawn_load);
criterion_main!(benches);
