//! Copy-on-write workspaces' layers (`dsh-workspace`), next to copying the
//! tree with `cp -a` in the same run: what a host does today to give each
//! agent its own checkout.
//!
//! ```text
//! cargo bench -p benches --bench workspace
//! DSH_BENCH_BASE_FILES=20000 cargo bench -p benches --bench workspace   # a smaller base
//! ```
//!
//! The base is `DSH_BENCH_BASE_FILES` files (100,000 by default) of 1 KiB
//! in directories of 1,000, made once in the system's temp directory.
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dsh_workspace::Workspace;

fn base_files() -> usize {
    std::env::var("DSH_BENCH_BASE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// `n` files of 1 KiB, 1,000 to a directory.
fn make_tree(root: &Path, n: usize) {
    let content = vec![b'x'; 1024];
    for i in 0..n {
        let dir = root.join(format!("d{:03}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}.txt")), &content).unwrap();
    }
}

/// `cp -a` of `src` to a new `dst` (removed afterwards, not timed).
fn cp_a(src: &Path, dst: &Path) -> Duration {
    let start = Instant::now();
    let st = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dst)
        .status()
        .unwrap();
    let took = start.elapsed();
    assert!(st.success());
    std::fs::remove_dir_all(dst).unwrap();
    took
}

fn workspace(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    let files = base_files();
    make_tree(&base, files);
    let ws = Workspace::new(&base, dir.path().join("cow")).unwrap();

    let mut group = c.benchmark_group("workspace");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));

    // A new owner's layers, against copying the base for it (measured
    // last: the slowest).
    let mut next = 0u64;
    group.bench_function(BenchmarkId::new("layer_create", files), |b| {
        b.iter(|| {
            next += 1;
            ws.layer(&format!("new{next}")).unwrap()
        })
    });
    // Fork and snapshot of an owner with N changed files (4 KiB each, in
    // directories of 100), against `cp -a` of its upper layer.
    for n in [10usize, 1000] {
        let owner = format!("changed{n}");
        let upper = ws.layer(&owner).unwrap().upper;
        let content = vec![b'y'; 4096];
        for i in 0..n {
            let d = upper.join(format!("d{:03}", i / 100));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(format!("f{i}.txt")), &content).unwrap();
        }
        group.bench_function(BenchmarkId::new("fork", n), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    ws.fork(&owner, "fork-target").unwrap();
                    took += start.elapsed();
                    ws.remove("fork-target").unwrap();
                }
                took
            })
        });
        group.bench_function(BenchmarkId::new("snapshot", n), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let id = ws.snapshot(&owner).unwrap();
                    took += start.elapsed();
                    ws.delete_snapshot(&id).unwrap();
                }
                took
            })
        });
        group.bench_function(BenchmarkId::new("baseline_cp_a_upper", n), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| cp_a(&upper, &dir.path().join("upper-copy")))
                    .sum()
            })
        });
    }

    // changes() and diff() of an owner with a few changes on the whole base.
    let upper = ws.layer("few").unwrap().upper;
    let last = format!("d{:03}", (files - 1) / 1000);
    for d in ["d000", last.as_str()] {
        std::fs::create_dir_all(upper.join(d)).unwrap();
    }
    std::fs::write(upper.join("d000/f1.txt"), "changed\n").unwrap();
    std::fs::write(upper.join(&last).join("new.txt"), "added\n").unwrap();
    std::fs::write(upper.join("top.txt"), "added\n").unwrap();
    assert_eq!(ws.changes("few").unwrap().len(), 3);
    group.bench_function(BenchmarkId::new("changes_few", files), |b| {
        b.iter(|| ws.changes("few").unwrap())
    });
    group.bench_function(BenchmarkId::new("diff_few", files), |b| {
        b.iter(|| ws.diff("few").unwrap())
    });
    group.bench_function(BenchmarkId::new("baseline_cp_a_base", files), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| cp_a(&base, &dir.path().join("copy")))
                .sum()
        })
    });
    group.finish();
}

criterion_group!(benches, workspace);
criterion_main!(benches);
