//! The tools in a Docker container next to their baselines, in the same run:
//!
//! * the editor's `view` and `str_replace` through [`DockerFs`] against the
//!   Docker shell's call of `true` (goal: at most 3×);
//! * the first call of a shell in a container of its own (the container made,
//!   the shell started, `true` answered) against `docker run --rm <image>
//!   true` by the CLI (goal: at most 1.5×), with where its time goes: the
//!   daemon's requests one by one, timed here;
//! * 100 shells spawned at once in one shared container against 100 local
//!   ones × 10 (goal: at most 1×).
//!
//! Needs a Docker daemon with the `dsh-test` image (`.ci/engines` makes it
//! ready); without one it says so and measures nothing.
//!
//! ```text
//! cargo bench -p benches --bench docker
//! ```
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_docker::bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use dsh_docker::bollard::models::{ContainerCreateBody, HostConfig};
use dsh_docker::bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use dsh_docker::{Container, ContainerTemplate, DockerBackend, DockerFs};
use dsh_editor::Editor;
use dsh_shell_persistent::{ShellConfig, ShellPool};
use futures_util::StreamExt;
use serde_json::json;

/// The daemon and the image, or why they are not here.
fn engine(rt: &tokio::runtime::Runtime) -> Result<dsh_docker::Docker, String> {
    let docker = rt
        .block_on(dsh_docker::connect(None))
        .map_err(|e| format!("no Docker daemon ({e})"))?;
    let image = dsh_testbeds::test_image();
    rt.block_on(docker.inspect_image(&image))
        .map_err(|e| format!("no `{image}` image on the daemon ({e}); run .ci/engines"))?;
    Ok(docker)
}

fn template() -> ContainerTemplate {
    let mut template = ContainerTemplate::new(dsh_testbeds::test_image());
    template.labels.push(("dsh-rs-bench".into(), "1".into()));
    template
}

/// The median of `times`.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn timed<T>(n: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(f());
                start.elapsed()
            })
            .collect(),
    )
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// (a) The editor in a container against the Docker shell's `true`.
fn editor_in_container(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let docker = match engine(&rt) {
        Ok(d) => d,
        Err(why) => {
            println!("{why}: the editor-in-a-container bench is skipped");
            return;
        }
    };
    let container = rt.block_on(Container::create(docker, &template())).unwrap();
    let mut config = ShellConfig::new("/tmp");
    config.backend = Arc::new(DockerBackend::new(container.clone()));
    let pool = ShellPool::new(config).unwrap();
    rt.block_on(pool.run("bench", "true")).unwrap();
    let editor = Editor::new(DockerFs::new(container.clone()));
    let path = "/tmp/bench.txt";
    rt.block_on(
        editor
            .execute(&json!({"command": "create", "path": path, "file_text": "one\ntwo\nthree\n"})),
    )
    .unwrap();
    let view = json!({"command": "view", "path": path});
    // Each edit undoes the one before, so every one succeeds.
    let edits = [
        json!({"command": "str_replace", "path": path, "old_str": "two", "new_str": "TWO"}),
        json!({"command": "str_replace", "path": path, "old_str": "TWO", "new_str": "two"}),
    ];
    let mut turn = 0usize;
    let mut edit = || {
        let edit = &edits[turn % 2];
        turn += 1;
        rt.block_on(editor.execute(edit)).unwrap()
    };

    let mut group = c.benchmark_group("docker_editor");
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("shell_true (baseline)", |b| {
        b.iter(|| rt.block_on(pool.run("bench", "true")).unwrap())
    });
    group.bench_function("view", |b| {
        b.iter(|| rt.block_on(editor.execute(&view)).unwrap())
    });
    group.bench_function("str_replace", |b| b.iter(&mut edit));
    group.finish();

    let shell = timed(50, || rt.block_on(pool.run("bench", "true")).unwrap());
    let viewed = timed(50, || rt.block_on(editor.execute(&view)).unwrap());
    let replaced = timed(50, &mut edit);
    println!(
        "median of 50, Docker: shell `true` {shell:?} (baseline); editor view {viewed:?} ({:.2}x, goal <= 3x); \
         editor str_replace {replaced:?} ({:.2}x, goal <= 3x)",
        ratio(viewed, shell),
        ratio(replaced, shell),
    );
    rt.block_on(pool.close_all());
    rt.block_on(container.remove()).unwrap();
}

/// (b) The first call of a shell in a container of its own against `docker
/// run --rm <image> true`, and where that time goes.
fn first_call(_c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let docker = match engine(&rt) {
        Ok(d) => d,
        Err(why) => {
            println!("{why}: the first-call bench is skipped");
            return;
        }
    };
    const N: usize = 15;
    let image = dsh_testbeds::test_image();
    let cli = timed(N, || {
        let out = std::process::Command::new("docker")
            .args(["run", "--rm", "--label", "dsh-rs-bench=1", &image, "true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    });
    let mut config = ShellConfig::new("/tmp");
    config.backend = Arc::new(DockerBackend::per_session(docker.clone(), template()));
    let pool = ShellPool::new(config).unwrap();
    let mut firsts = Vec::new();
    for i in 0..N {
        let owner = format!("first-{i}");
        let start = Instant::now();
        assert_eq!(rt.block_on(pool.run(&owner, "true")).unwrap(), "");
        firsts.push(start.elapsed());
        rt.block_on(pool.close_owner(&owner));
    }
    let first = median(firsts);
    println!(
        "median of {N}: first call of a shell in a container of its own {first:?}; `docker run --rm {image} true` \
         by the CLI {cli:?} (baseline); {:.2}x (goal <= 1.5x)",
        ratio(first, cli)
    );
    breakdown(&rt, &docker, &image);
    ours_in_a_shared_container(&rt, &docker);
}

/// What a shell adds to the daemon's exec: the first call of a new shell in
/// a running container against a bare exec of bash to its first output,
/// taken in turns.
fn ours_in_a_shared_container(rt: &tokio::runtime::Runtime, docker: &dsh_docker::Docker) {
    const N: usize = 15;
    let shared = rt
        .block_on(Container::create(docker.clone(), &template()))
        .unwrap();
    let mut config = ShellConfig::new("/tmp");
    config.backend = Arc::new(DockerBackend::new(shared.clone()));
    let pool = ShellPool::new(config).unwrap();
    let (mut bare, mut shells) = (Vec::new(), Vec::new());
    for i in 0..N {
        let start = Instant::now();
        drop(rt.block_on(raw_exec(shared.docker(), shared.id())));
        bare.push(start.elapsed());
        let owner = format!("shared-{i}");
        let start = Instant::now();
        assert_eq!(rt.block_on(pool.run(&owner, "true")).unwrap(), "");
        shells.push(start.elapsed());
        rt.block_on(pool.close_owner(&owner));
    }
    let (bare, shells) = (median(bare), median(shells));
    println!(
        "median of {N}, one running container: first call of a new shell {shells:?}; a bare exec of bash to its \
         first output {bare:?}; the shell's own part {:?}",
        shells.saturating_sub(bare)
    );
    rt.block_on(shared.remove()).unwrap();
}

/// The daemon's part of a first call, one request at a time: create the
/// container, start it, create the exec, start (attach) it, and bash's first
/// output on its terminal.
fn breakdown(rt: &tokio::runtime::Runtime, docker: &dsh_docker::Docker, image: &str) {
    const N: usize = 10;
    let mut steps: [Vec<Duration>; 5] = Default::default();
    for _ in 0..N {
        rt.block_on(async {
            let body = ContainerCreateBody {
                image: Some(image.to_owned()),
                entrypoint: Some(vec!["sleep".into()]),
                cmd: Some(vec!["2147483647".into()]),
                labels: Some([("dsh-rs-bench".to_owned(), "1".to_owned())].into()),
                host_config: Some(HostConfig {
                    init: Some(false),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let t = Instant::now();
            let id = docker
                .create_container(None::<CreateContainerOptions>, body)
                .await
                .unwrap()
                .id;
            steps[0].push(t.elapsed());
            let t = Instant::now();
            docker.start_container(&id, None).await.unwrap();
            steps[1].push(t.elapsed());
            let t = Instant::now();
            let exec = docker.create_exec(&id, bash_exec()).await.unwrap();
            steps[2].push(t.elapsed());
            let t = Instant::now();
            let started = docker.start_exec(&exec.id, Some(attached())).await.unwrap();
            steps[3].push(t.elapsed());
            let t = Instant::now();
            let StartExecResults::Attached { mut output, .. } = started else {
                panic!("detached");
            };
            let mut seen = Vec::new();
            while !String::from_utf8_lossy(&seen).contains("ready") {
                seen.extend_from_slice(&output.next().await.unwrap().unwrap().into_bytes());
            }
            steps[4].push(t.elapsed());
            let options = RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            };
            docker.remove_container(&id, Some(options)).await.unwrap();
        });
    }
    let names = [
        "create the container",
        "start it",
        "create the exec",
        "start and attach the exec",
        "bash's first output",
    ];
    let parts: Vec<String> = names
        .iter()
        .zip(steps)
        .map(|(name, times)| format!("{name} {:?}", median(times)))
        .collect();
    println!(
        "where a container shell's start goes (median of {N}, one request at a time): {}",
        parts.join(", ")
    );
}

/// Spawns `SHELLS` shells at once through `backend`, one call of `true`
/// each; returns how long that took. Closes them after (not timed).
fn spawn_many(
    rt: &tokio::runtime::Runtime,
    backend: Arc<dyn dsh_pty::PtyBackend>,
    shells: usize,
) -> Duration {
    let mut config = ShellConfig::new("/tmp");
    config.backend = backend;
    let pool = ShellPool::new(config).unwrap();
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..shells {
            let pool = pool.clone();
            tasks.spawn(async move { pool.run(&format!("owner-{i}"), "true").await.unwrap() });
        }
        while let Some(done) = tasks.join_next().await {
            assert_eq!(done.unwrap(), "");
        }
    });
    let took = start.elapsed();
    rt.block_on(pool.close_all());
    took
}

/// The exec the bare-exec figures time: bash with a terminal, as the
/// backend starts it, printing once and then waiting.
fn bash_exec() -> CreateExecOptions<&'static str> {
    CreateExecOptions {
        cmd: Some(vec!["bash", "--norc", "-c", "echo ready; exec cat"]),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(true),
        ..Default::default()
    }
}

/// Starting an exec attached, with a terminal.
fn attached() -> StartExecOptions {
    StartExecOptions {
        detach: false,
        tty: true,
        output_capacity: None,
    }
}

/// Starts bash with a terminal in container `id` with one exec, as the
/// backend does, and waits for its first output; returns the exec's output
/// stream (dropping it lets bash go).
async fn raw_exec(docker: &dsh_docker::Docker, id: &str) -> Box<dyn std::any::Any + Send> {
    let exec = docker.create_exec(id, bash_exec()).await.unwrap();
    let started = docker.start_exec(&exec.id, Some(attached())).await.unwrap();
    let StartExecResults::Attached { mut output, input } = started else {
        panic!("detached");
    };
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ready") {
        seen.extend_from_slice(&output.next().await.unwrap().unwrap().into_bytes());
    }
    Box::new((output, input))
}

/// (c) 100 shells in one shared container against 100 local ones × 10.
fn hundred_in_one_container(_c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let docker = match engine(&rt) {
        Ok(d) => d,
        Err(why) => {
            println!("{why}: the 100-shells bench is skipped");
            return;
        }
    };
    const SHELLS: usize = 100;
    const ROUNDS: usize = 3;
    let shared = rt.block_on(Container::create(docker, &template())).unwrap();
    let backend: Arc<dyn dsh_pty::PtyBackend> = Arc::new(DockerBackend::new(shared.clone()));
    let local = dsh_pty::default_backend();
    let mut in_docker = Vec::new();
    let mut here = Vec::new();
    for _ in 0..ROUNDS {
        in_docker.push(spawn_many(&rt, Arc::clone(&backend), SHELLS));
        here.push(spawn_many(&rt, Arc::clone(&local), SHELLS));
    }
    // The daemon's own part: 100 bare execs of bash at once, as many as
    // the shells need, each waited for until bash prints.
    let mut raw = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let held = rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..SHELLS {
                let (docker, id) = (shared.docker().clone(), shared.id().to_owned());
                tasks.spawn(async move { raw_exec(&docker, &id).await });
            }
            let mut held = Vec::new();
            while let Some(done) = tasks.join_next().await {
                held.push(done.unwrap());
            }
            held
        });
        raw.push(start.elapsed());
        drop(held);
    }
    let (in_docker, here, raw) = (median(in_docker), median(here), median(raw));
    println!(
        "median of {ROUNDS}: {SHELLS} bare `docker exec -t bash` at once, to bash's first output (the daemon's part): {raw:?}"
    );
    println!(
        "median of {ROUNDS}: {SHELLS} shells spawned at once with one call each, one shared container {in_docker:?}; \
         locally {here:?} (x10 = {:?}, baseline); {:.2}x (goal <= 1x)",
        here * 10,
        ratio(in_docker, here * 10)
    );
    rt.block_on(shared.remove()).unwrap();
}

criterion_group!(
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = editor_in_container, first_call, hundred_in_one_container
);
criterion_main!(benches);
