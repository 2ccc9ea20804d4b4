//! Rollout workspaces through the sandbox's owners: an owner's first call
//! with its copy-on-write view made for it, a reset, a fork and a snapshot,
//! next to the same run's baselines (a plain danger-full-access owner's
//! first call; `cp -a` of the base, `git worktree add` of a repository
//! holding it, and, with `DSH_BENCH_DOCKER_IMAGE`, a `docker run` of an
//! image holding it: each timed once and printed).
//!
//! ```text
//! cargo bench -p benches --bench rollout
//! DSH_BENCH_BASE_FILES=20000 cargo bench -p benches --bench rollout   # a smaller base
//! DSH_BENCH_DOCKER_IMAGE=dsh-test cargo bench -p benches --bench rollout  # + `docker run`
//! ```
//!
//! The `docker run` baseline builds an image `FROM` the named one (which
//! must hold `bash`) with the base copied to `/testbed`, times
//! `docker run --rm IMAGE bash -c true` three times (the fastest is
//! printed: the image's layers are then in the page cache, as the view's
//! base is), and removes the image.
//!
//! The base is `DSH_BENCH_BASE_FILES` files (100,000 by default) of
//! `DSH_BENCH_FILE_BYTES` bytes (10,240: 1 GB in all), 1,000 to a
//! directory, made once under the bench's temporary directory.
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_sandbox::dsh_workspace::Workspace;
use dsh_sandbox::{SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell};
use dsh_shell_persistent::ShellConfig;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn make_tree(root: &Path, n: usize, bytes: usize) {
    let content = vec![b'x'; bytes];
    for i in 0..n {
        let dir = root.join(format!("d{:03}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}.txt")), &content).unwrap();
    }
}

/// Makes `repo` (a copy of the base) a repository of one commit, untimed,
/// then times `git worktree add` of it beside it; removes the worktree.
fn git_worktree_add(repo: &Path) -> Duration {
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
            .arg("-C")
            .arg(repo)
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "base"]);
    let tree = repo.with_file_name("worktree");
    let started = Instant::now();
    git(&["worktree", "add", "-q", tree.to_str().unwrap()]);
    let took = started.elapsed();
    std::fs::remove_dir_all(&tree).unwrap();
    took
}

/// The fastest of three `docker run`s of an image `FROM image` holding the
/// base at `/testbed` (built untimed, removed after).
fn docker_run(base: &Path, image: &str) -> Duration {
    use std::io::Write;
    let tag = "dsh-bench-rollout-base";
    let mut build = std::process::Command::new("docker")
        .args(["build", "-q", "-t", tag, "-f", "-"])
        .arg(base)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    write!(
        build.stdin.take().unwrap(),
        "FROM {image}\nCOPY . /testbed\n"
    )
    .unwrap();
    assert!(build.wait().unwrap().success(), "docker build");
    let fastest = (0..3)
        .map(|_| {
            let started = Instant::now();
            let status = std::process::Command::new("docker")
                .args(["run", "--rm", tag, "bash", "-c", "true"])
                .status()
                .unwrap();
            assert!(status.success(), "docker run");
            started.elapsed()
        })
        .min()
        .unwrap();
    let status = std::process::Command::new("docker")
        .args(["rmi", "-f", tag])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "docker rmi");
    fastest
}

fn tool(base: &Path, cow: Option<&Path>) -> SandboxedShell {
    let mut config = SandboxConfig::new(
        SandboxPolicy::default().mode(SandboxMode::DangerFullAccess),
        ShellConfig::new(base),
    );
    if let Some(cow) = cow {
        config = config.copy_on_write(Some(Arc::new(Workspace::new(base, cow).unwrap())));
    }
    SandboxedShell::new(config).unwrap()
}

fn rollout(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = dir.path().join("base");
    let (files, bytes) = (
        env_usize("DSH_BENCH_BASE_FILES", 100_000),
        env_usize("DSH_BENCH_FILE_BYTES", 10_240),
    );
    make_tree(&base, files, bytes);
    let copy = dir.path().join("copy");
    let started = Instant::now();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&base)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    println!(
        "baseline: cp -a of the base ({files} files of {bytes} bytes): {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!(
        "baseline: git worktree add of a repository holding the base: {:.0} ms",
        git_worktree_add(&copy).as_secs_f64() * 1e3
    );
    std::fs::remove_dir_all(&copy).unwrap();
    if let Ok(image) = std::env::var("DSH_BENCH_DOCKER_IMAGE") {
        println!(
            "baseline: docker run of an image holding the base: {:.0} ms",
            docker_run(&base, &image).as_secs_f64() * 1e3
        );
    }

    let plain = tool(&base, None);
    let cow = tool(&base, Some(&dir.path().join("cow")));
    let args = serde_json::json!({"command": "true"});
    let next = AtomicUsize::new(0);
    // An owner's first call: its shell started (and, copy-on-write, its
    // view made) and `true` run; the owner is closed after, untimed.
    let first_call = |tool: &SandboxedShell, iters: u64| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let owner = format!("o{}", next.fetch_add(1, Ordering::Relaxed));
            let started = Instant::now();
            rt.block_on(tool.execute(&owner, &args)).unwrap();
            total += started.elapsed();
            rt.block_on(tool.close_owner(&owner));
        }
        total
    };
    let mut group = c.benchmark_group("owner_first_call_true");
    group.sample_size(30);
    group.bench_function("plain_danger_full_access_baseline", |b| {
        b.iter_custom(|iters| first_call(&plain, iters))
    });
    group.bench_function("copy_on_write_view", |b| {
        b.iter_custom(|iters| first_call(&cow, iters))
    });
    group.finish();

    // One owner that changed ten files, forked and snapshotted.
    let changes = "for i in 0 1 2 3 4 5 6 7 8 9; do echo changed >> d000/f$i.txt; done";
    rt.block_on(cow.execute("source", &serde_json::json!({"command": changes})))
        .unwrap();
    let mut group = c.benchmark_group("owner_with_ten_changes");
    group.sample_size(30);
    group.bench_function("fork", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let to = format!("f{}", next.fetch_add(1, Ordering::Relaxed));
                let started = Instant::now();
                rt.block_on(cow.fork("source", &to)).unwrap();
                total += started.elapsed();
                rt.block_on(cow.close_owner(&to));
            }
            total
        })
    });
    group.bench_function("snapshot", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let started = Instant::now();
                let id = rt.block_on(cow.snapshot("source")).unwrap();
                total += started.elapsed();
                rt.block_on(cow.delete_snapshot(&id)).unwrap();
            }
            total
        })
    });
    // A reset, and the first call after it (the view made again).
    group.bench_function("reset_then_first_call", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(cow.execute("r", &serde_json::json!({"command": changes})))
                    .unwrap();
                let started = Instant::now();
                rt.block_on(cow.reset_workspace("r")).unwrap();
                rt.block_on(cow.execute("r", &args)).unwrap();
                total += started.elapsed();
            }
            total
        })
    });
    group.finish();
    rt.block_on(cow.close_all());
    rt.block_on(plain.close_all());
}

criterion_group!(benches, rollout);
criterion_main!(benches);
