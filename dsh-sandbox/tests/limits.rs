//! Resource limits on a shell's whole process tree, in every mode: rlimits
//! and the private `/tmp`'s bounds here, on this host; the cgroup limits
//! (processes, memory, CPU, the cgroup as the tree) in `cgroup::`, which
//! only run in a VM with a fresh kernel (`.ci/vm`): this host's cgroup
//! hierarchies belong to the system that runs it and are never touched.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};

use dsh_pty::{Held, Limit, ResourceLimits};
use dsh_sandbox::{SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell, TmpHeld, TmpLimit};
use dsh_shell_persistent::ShellConfig;
use serde_json::json;

fn shell(ws: &Path, mode: SandboxMode, limits: ResourceLimits) -> SandboxedShell {
    SandboxedShell::new(SandboxConfig::new(
        SandboxPolicy::default().mode(mode),
        ShellConfig::new(ws).limits(limits),
    ))
    .unwrap()
}

/// A shell under `policy` whose private `/tmp` is bounded to `size` bytes
/// and `inodes` inodes, with the shell's own `limits`.
fn tmp_shell(
    ws: &Path,
    policy: SandboxPolicy,
    size: Option<u64>,
    inodes: Option<u64>,
    limits: ResourceLimits,
) -> SandboxedShell {
    SandboxedShell::new(SandboxConfig::new(
        policy.tmp_size(size).tmp_inodes(inodes),
        ShellConfig::new(ws).limits(limits),
    ))
    .unwrap()
}

async fn run(s: &SandboxedShell, cmd: &str) -> String {
    match s.execute("agent", &json!({ "command": cmd })).await {
        Ok(text) => text,
        Err(err) => format!("error: {}", dsh_sandbox::contract::render_error(&err)),
    }
}

/// A fresh workspace: beneath `DSH_TEST_WORKSPACES` when set (the VM's
/// unprivileged run, which cannot write the checkout), else where a confined
/// shell sees it.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let base =
        std::env::var_os("DSH_TEST_WORKSPACES").map_or_else(common::visible_tmp, PathBuf::from);
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

const MODES: [SandboxMode; 2] = [SandboxMode::DangerFullAccess, SandboxMode::WorkspaceWrite];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_and_file_size_hold_for_the_whole_tree_in_every_mode() {
    let limited = ResourceLimits::default()
        .open_files(Some(64))
        .file_size(Some(1 << 20));
    for mode in MODES {
        let (_dir, ws) = workspace();
        for limits in [limited.clone(), ResourceLimits::default()] {
            let on = !limits.is_empty();
            let s = shell(&ws, mode, limits);
            let out = run(
                &s,
                "ulimit -n; sh -c 'head -c 3000000 /dev/zero > big; echo rc=$?'; stat -c %s big",
            )
            .await;
            if on {
                assert!(out.starts_with("64\n"), "{mode}: {out}");
                assert!(out.contains("File too large"), "{mode}: {out}");
                assert!(out.ends_with("rc=1\n1048576"), "{mode}: {out}");
            } else {
                assert!(!out.starts_with("64\n"), "{mode}: {out}");
                assert!(out.ends_with("rc=0\n3000000"), "{mode}: {out}");
            }
            // The shell itself lives on.
            assert_eq!(run(&s, "echo alive").await, "alive", "{mode}");
            s.close_all().await;
        }
    }
}

/// The editor of the tool ([`SandboxedShell::editor_fs`]) writes within
/// the shell's file size limit in every mode: a longer `create`,
/// `str_replace` or `insert` is refused with `File too large` (the text
/// the shell's programs report for the same write) and leaves the file
/// byte-for-byte as it was; a file of exactly the limit is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_writes_within_the_file_size_limit_in_every_mode() {
    const MIB: usize = 1 << 20;
    for mode in MODES {
        let (_dir, ws) = workspace();
        let s = shell(
            &ws,
            mode,
            ResourceLimits::default().file_size(Some(MIB as u64)),
        );
        let editor = dsh_editor::Editor::new(s.editor_fs("agent"));
        let call = |args: serde_json::Value| {
            let editor = editor.clone();
            async move {
                editor
                    .execute(&args)
                    .await
                    .map_err(|e| dsh_editor::contract::render_error(&e))
            }
        };
        let too_large = |path: &Path, len: usize| {
            format!(
                "Nothing was written: {}: File too large (the file would be {len} bytes; no process here may write a file larger than {MIB} bytes).",
                path.display()
            )
        };
        // A 2 MB create: refused, nothing there.
        let big = ws.join("big.txt");
        let text = "x".repeat(2_000_000);
        let out = call(json!({"command": "create", "path": big, "file_text": text})).await;
        assert_eq!(out, Err(too_large(&big, 2_000_000)), "{mode}");
        assert!(!big.exists(), "{mode}");
        // Exactly the limit is allowed, as under RLIMIT_FSIZE.
        let full = ws.join("full.txt");
        let text = format!("{}tail", "y".repeat(MIB - 4));
        call(json!({"command": "create", "path": full, "file_text": text}))
            .await
            .unwrap();
        assert_eq!(std::fs::metadata(&full).unwrap().len(), MIB as u64);
        // Edits that would pass it: refused, the file unchanged.
        let before = std::fs::read(&full).unwrap();
        let out = call(
            json!({"command": "str_replace", "path": full, "old_str": "tail", "new_str": "tails"}),
        )
        .await;
        assert_eq!(out, Err(too_large(&full, MIB + 1)), "{mode}");
        let out =
            call(json!({"command": "insert", "path": full, "insert_line": 0, "new_str": "z"}))
                .await;
        assert_eq!(out, Err(too_large(&full, MIB + 2)), "{mode}");
        assert_eq!(std::fs::read(&full).unwrap(), before, "{mode}");
        // The shell's own program reports the same reason for the same write.
        let out = run(
            &s,
            &format!("head -c 2000000 /dev/zero > {}/shell.bin", ws.display()),
        )
        .await;
        assert!(out.contains("File too large"), "{mode}: {out}");
        s.close_all().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_private_tmp_holds_its_size_and_inodes() {
    let (_dir, ws) = workspace();
    let policy = SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite);
    for on in [true, false] {
        let (size, inodes) = if on {
            (Some(64 << 20), Some(200))
        } else {
            (None, None)
        };
        let s = tmp_shell(&ws, policy.clone(), size, inodes, ResourceLimits::default());
        let enforcement = s.enforcement(SandboxMode::WorkspaceWrite).unwrap();
        let out = run(
            &s,
            "head -c 200000000 /dev/zero > /tmp/big; echo rc=$?; stat -c %s /tmp/big; rm /tmp/big",
        )
        .await;
        let files = run(
            &s,
            "mkdir /tmp/many && for i in $(seq 400); do : > /tmp/many/$i || break; done 2>&1 | tail -1; ls /tmp/many | wc -l",
        )
        .await;
        if on {
            assert_eq!(enforcement.tmp_held(TmpLimit::Size), Some(TmpHeld::Tmpfs));
            assert_eq!(enforcement.tmp_held(TmpLimit::Inodes), Some(TmpHeld::Tmpfs));
            assert!(out.contains("No space left on device"), "{out}");
            let size: u64 = out.lines().last().unwrap().parse().unwrap();
            assert!(size <= 64 << 20, "{out}");
            assert!(files.contains("No space left on device"), "{files}");
            let made: u64 = files.lines().last().unwrap().trim().parse().unwrap();
            assert!(made < 200, "{files}");
        } else {
            assert!(out.ends_with("rc=0\n200000000"), "{out}");
            assert!(files.ends_with("400"), "{files}");
        }
        assert_eq!(run(&s, "echo alive").await, "alive");
        s.close_all().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_that_cannot_be_kept_are_refused_unless_best_effort() {
    let (_dir, ws) = workspace();
    // No cgroup parent: memory, processes and CPU cannot be kept.
    let wanted = ResourceLimits::default()
        .memory(Some(256 << 20))
        .pids(Some(64))
        .cpus(Some(0.5));
    for mode in MODES {
        let s = shell(&ws, mode, wanted.clone());
        let err = dsh_sandbox::contract::render_error(&s.enforcement(mode).unwrap_err());
        assert_eq!(
            err,
            "the process limit, the memory limit and the CPU limit cannot be enforced: no cgroup parent was given (`ResourceLimits::cgroup_parent`; `dsh-mcp --cgroup-parent`: a cgroup path, or `auto` in a delegated cgroup, see \"Delegated cgroups\" in docs/limits.md); the command was not run.",
            "{mode}"
        );
        let out = run(&s, "echo ran > ran").await;
        assert!(out.contains("cannot be enforced"), "{mode}: {out}");
        assert!(!ws.join("ran").exists(), "{mode}: nothing ran");
    }
    // A private /tmp exists only in the restricted modes.
    let s = tmp_shell(
        &ws,
        SandboxPolicy::default().mode(SandboxMode::DangerFullAccess),
        Some(64 << 20),
        None,
        ResourceLimits::default(),
    );
    let err = s.enforcement(SandboxMode::DangerFullAccess).unwrap_err();
    assert!(
        dsh_sandbox::contract::render_error(&err).starts_with(
            "the /tmp size limit cannot be enforced: only the sandbox's restricted modes make a private /tmp"
        ),
        "{err}"
    );
    // Best effort: the shell runs with what holds, and says which.
    for mode in MODES {
        let s = shell(&ws, mode, wanted.clone().best_effort(true));
        let enforcement = s.enforcement(mode).unwrap();
        assert_eq!(enforcement.limits.held(Limit::Memory), Some(Held::Rlimit));
        assert_eq!(enforcement.limits.held(Limit::Pids), Some(Held::NotHeld));
        assert_eq!(enforcement.limits.held(Limit::Cpu), Some(Held::NotHeld));
        assert!(
            enforcement
                .limits
                .why_not_held
                .starts_with("no cgroup parent was given"),
            "{mode}: {:?}",
            enforcement.limits
        );
        assert_eq!(run(&s, "ulimit -v").await, "262144", "{mode}");
        s.close_all().await;
    }
}

/// The refusals and reports of the private `/tmp`'s bounds read as they
/// always did (the model's text and the developer's), wherever they are
/// kept: no private `/tmp` in danger-full-access, and bubblewrap, which
/// cannot bound a tmpfs's inodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tmp_bound_refusals_and_reports_read_as_before() {
    let (_dir, ws) = workspace();
    let no_cgroup = "no cgroup parent was given (`ResourceLimits::cgroup_parent`; `dsh-mcp --cgroup-parent`: a cgroup path, or `auto` in a delegated cgroup, see \"Delegated cgroups\" in docs/limits.md)";
    let no_tmp = "only the sandbox's restricted modes make a private /tmp";
    let full = SandboxMode::DangerFullAccess;
    // Danger-full-access has no private /tmp: refused with the shell's own
    // limits that cannot be kept, in one list, at start and at a call.
    let s = tmp_shell(
        &ws,
        SandboxPolicy::default().mode(full),
        Some(64 << 20),
        None,
        ResourceLimits::default(),
    );
    let err = s.enforcement(full).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("the /tmp size limit cannot be enforced: {no_tmp}")
    );
    assert_eq!(
        dsh_sandbox::contract::render_error(&err),
        format!("the /tmp size limit cannot be enforced: {no_tmp}; the command was not run.")
    );
    assert_eq!(
        run(&s, "echo ran").await,
        format!(
            "error: The bash shell could not be started: the /tmp size limit cannot be enforced: {no_tmp}"
        )
    );
    let s = tmp_shell(
        &ws,
        SandboxPolicy::default().mode(full),
        Some(64 << 20),
        Some(100),
        ResourceLimits::default()
            .pids(Some(50))
            .open_files(Some(99)),
    );
    let both = format!(
        "the process limit, the /tmp size limit and the /tmp inode limit cannot be enforced: {no_cgroup}; {no_tmp}"
    );
    let err = s.enforcement(full).unwrap_err();
    assert_eq!(err.to_string(), both);
    assert_eq!(
        dsh_sandbox::contract::render_error(&err),
        format!("{both}; the command was not run.")
    );
    assert_eq!(
        run(&s, "echo ran").await,
        format!("error: The bash shell could not be started: {both}")
    );
    // Best effort: not held, and why, after the shell's own reasons.
    let s = tmp_shell(
        &ws,
        SandboxPolicy::default().mode(full),
        Some(64 << 20),
        Some(100),
        ResourceLimits::default().pids(Some(50)).best_effort(true),
    );
    let enforcement = s.enforcement(full).unwrap();
    assert_eq!(
        enforcement.limits.why_not_held,
        format!("{no_cgroup}; {no_tmp}")
    );
    assert_eq!(enforcement.tmp_held(TmpLimit::Size), Some(TmpHeld::NotHeld));
    assert_eq!(
        enforcement.tmp_held(TmpLimit::Inodes),
        Some(TmpHeld::NotHeld)
    );
    assert_eq!(run(&s, "echo ran").await, "ran");
    s.close_all().await;
    // Bubblewrap bounds the size but not the inodes.
    let bwrap = SandboxPolicy::default()
        .mode(SandboxMode::WorkspaceWrite)
        .bubblewrap(Some(PathBuf::from("bwrap")));
    let s = tmp_shell(
        &ws,
        bwrap.clone(),
        Some(64 << 20),
        Some(100),
        ResourceLimits::default(),
    );
    let err = s.enforcement(SandboxMode::WorkspaceWrite).unwrap_err();
    let inodes =
        "the /tmp inode limit cannot be enforced: bubblewrap cannot bound a tmpfs's inodes";
    assert_eq!(err.to_string(), inodes);
    assert_eq!(
        dsh_sandbox::contract::render_error(&err),
        format!("{inodes}; the command was not run.")
    );
    assert_eq!(
        run(&s, "echo ran").await,
        format!("error: {inodes}; the command was not run.")
    );
    let s = tmp_shell(
        &ws,
        bwrap,
        Some(64 << 20),
        Some(100),
        ResourceLimits::default().pids(Some(50)).best_effort(true),
    );
    let enforcement = s.enforcement(SandboxMode::WorkspaceWrite).unwrap();
    assert_eq!(
        enforcement.limits.why_not_held,
        format!("{no_cgroup}; bubblewrap cannot bound a tmpfs's inodes")
    );
    assert_eq!(enforcement.tmp_held(TmpLimit::Size), Some(TmpHeld::Tmpfs));
    assert_eq!(
        enforcement.tmp_held(TmpLimit::Inodes),
        Some(TmpHeld::NotHeld)
    );
}

/// The cgroup limits. Each test makes cgroups beneath
/// `DSH_TEST_CGROUP_PARENT`, which only `.ci/vm` sets, inside a VM of its
/// own; each refuses to run anywhere else.
mod cgroup {
    use std::time::{Duration, Instant};

    use super::*;

    /// The parent to make cgroups beneath, once it is sure this is the VM.
    fn parent() -> PathBuf {
        let parent = std::env::var_os("DSH_TEST_CGROUP_PARENT")
            .expect("DSH_TEST_CGROUP_PARENT: these tests run in the VM of .ci/vm");
        let marker = std::env::var_os("DSH_TEST_VM_MARKER").expect("DSH_TEST_VM_MARKER");
        // `.ci/vm` writes this file inside the guest only (its /run is the guest's own).
        assert!(
            Path::new(&marker).starts_with("/run") && Path::new(&marker).exists(),
            "not in the VM of .ci/vm: refusing to make cgroups on this host"
        );
        PathBuf::from(parent)
    }

    /// The hierarchy the VM set up: `DSH_TEST_CGROUP_VERSION` 1 or 2.
    fn version() -> dsh_pty::CgroupVersion {
        match std::env::var("DSH_TEST_CGROUP_VERSION").as_deref() {
            Ok("1") => dsh_pty::CgroupVersion::V1,
            _ => dsh_pty::CgroupVersion::V2,
        }
    }

    fn limits() -> ResourceLimits {
        ResourceLimits::default().cgroup_parent(Some(parent().into()))
    }

    /// The shell's own cgroup directory (danger-full-access: it sees the
    /// host's cgroup namespace).
    async fn cgroup_dir(s: &SandboxedShell) -> PathBuf {
        let line = run(s, "cat /proc/self/cgroup").await;
        let rel = line
            .trim()
            .strip_prefix("0::")
            .unwrap()
            .trim_start_matches('/');
        PathBuf::from("/sys/fs/cgroup").join(rel)
    }

    /// This VM's processes whose command line is `sleep ARG` (the pids a
    /// confined shell sees are its own namespace's, so processes are found
    /// by a duration no other test uses).
    fn sleeps(arg: &str) -> Vec<i32> {
        let want = format!("sleep\0{arg}\0");
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes())
            })
            .collect()
    }

    /// Waits (bounded) until no `sleep ARG` is left: each found ends (its
    /// pidfd says so, an event).
    async fn gone(arg: &str) -> bool {
        common::ended_within(&sleeps(arg), Duration::from_secs(10))
            .await
            .is_empty()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup parent of its own: runs in the VM of .ci/vm"]
    async fn a_fork_bomb_stops_at_the_process_limit_and_the_shell_answers() {
        for mode in MODES {
            for pids in [Some(64), None] {
                let (_dir, ws) = workspace();
                let s = shell(&ws, mode, limits().pids(pids));
                let out = run(
                    &s,
                    // Python, not bash: bash retries a refused fork for
                    // half a minute, Python reports it at once.
                    "python3 -c 'import subprocess\nn = 0\nfor i in range(100):\n    try:\n        subprocess.Popen([\"sleep\", \"1001\"]); n += 1\n    except OSError:\n        pass\nprint(n)'",
                )
                .await;
                let started: usize = out
                    .lines()
                    .next()
                    .and_then(|l| l.trim().parse().ok())
                    .unwrap_or_else(|| panic!("{mode}: {out}"));
                assert_eq!(sleeps("1001").len(), started, "{mode}");
                eprintln!("{mode} pids {pids:?}: {started} of 100 sleeps started");
                if pids.is_some() {
                    assert!(started < 64 && started > 0, "{mode}: {out}");
                    assert!(
                        out.contains("[process limit of 64 reached: new processes were refused]"),
                        "{mode}: {out}"
                    );
                } else {
                    assert_eq!(started, 100, "{mode}: {out}");
                    assert!(!out.contains("process limit"), "{mode}: {out}");
                }
                assert_eq!(run(&s, "echo alive").await, "alive", "{mode}");
                s.close_all().await;
                assert!(gone("1001").await, "{mode}: a sleep outlived the close");
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup parent of its own: runs in the VM of .ci/vm"]
    async fn a_process_past_the_memory_limit_is_killed_and_the_result_says_so() {
        let one_gib = "python3 -c \"b = b'x' * (1 << 30); print('allocated', len(b))\"";
        for mode in MODES {
            for memory in [Some(256 << 20), None] {
                let (_dir, ws) = workspace();
                let s = shell(&ws, mode, limits().memory(memory));
                let out = run(&s, one_gib).await;
                eprintln!("{mode} memory {memory:?}: {out:?}");
                if memory.is_some() {
                    assert!(!out.contains("allocated"), "{mode}: {out}");
                    assert!(
                        out.contains("[killed: memory limit of 256 MiB reached]"),
                        "{mode}: {out}"
                    );
                } else {
                    assert!(out.contains("allocated 1073741824"), "{mode}: {out}");
                    assert!(!out.contains("memory limit"), "{mode}: {out}");
                }
                assert_eq!(run(&s, "echo alive").await, "alive", "{mode}");
                if memory.is_some() {
                    // The shell itself the largest: it is the one killed,
                    // and reset.
                    let out = run(
                        &s,
                        "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo ${#x}",
                    )
                    .await;
                    eprintln!("{mode} the shell past the limit: {out:?}");
                    assert!(
                        out.contains("[killed: memory limit of 256 MiB reached]\n[shell killed by signal: SIGKILL]\nThe persistent bash shell was reset"),
                        "{mode}: {out}"
                    );
                    assert_eq!(run(&s, "echo alive").await, "alive", "{mode}");
                }
                s.close_all().await;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup parent of its own: runs in the VM of .ci/vm"]
    async fn processes_each_small_but_together_too_big_meet_the_tree_limit() {
        // Four processes of 100 MiB each: every one is under a per-process
        // bound of 256 MiB, the four together are not.
        let four = "for i in 1 2 3 4; do python3 -c \"import time; b = b'x' * (100 << 20); time.sleep(3)\" & done; ok=0; for j in $(jobs -p); do wait $j && ok=$((ok+1)); done; echo ok=$ok";
        for memory in [Some(256 << 20), None] {
            let (_dir, ws) = workspace();
            let s = shell(&ws, SandboxMode::DangerFullAccess, limits().memory(memory));
            let out = run(&s, four).await;
            eprintln!("memory {memory:?}: {out:?}");
            if memory.is_some() {
                assert!(!out.contains("ok=4"), "{out}");
                assert!(
                    out.contains("[killed: memory limit of 256 MiB reached]"),
                    "{out}"
                );
            } else {
                assert!(out.ends_with("ok=4"), "{out}");
            }
            s.close_all().await;
        }
    }

    /// `usage_usec` and `nr_throttled` of a cgroup's `cpu.stat`.
    fn cpu_stat(dir: &Path) -> (u64, u64) {
        let text = std::fs::read_to_string(dir.join("cpu.stat")).unwrap();
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .unwrap_or(0)
        };
        (get("usage_usec "), get("nr_throttled "))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup parent of its own: runs in the VM of .ci/vm"]
    async fn a_busy_loop_gets_about_its_cpu_share() {
        for cpus in [Some(0.5), None] {
            let (_dir, ws) = workspace();
            let s = shell(&ws, SandboxMode::DangerFullAccess, limits().cpus(cpus));
            let dir = cgroup_dir(&s).await;
            let (used_before, throttled_before) = cpu_stat(&dir);
            let started = Instant::now();
            run(&s, "timeout 3 sh -c 'while :; do :; done'").await;
            let elapsed = started.elapsed().as_micros() as f64;
            let (used, throttled) = cpu_stat(&dir);
            let share = (used - used_before) as f64 / elapsed;
            eprintln!(
                "cpus {cpus:?}: {share:.2} of a CPU, throttled {} times",
                throttled - throttled_before
            );
            if cpus.is_some() {
                assert!(throttled > throttled_before, "never throttled");
                assert!((0.2..0.75).contains(&share), "share {share:.2}");
            } else {
                assert!(share > 0.75, "share {share:.2}");
            }
            s.close_all().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup parent of its own: runs in the VM of .ci/vm"]
    async fn closing_ends_a_tree_that_left_the_session_and_ignores_sigterm() {
        let escape = "(setsid sh -c 'trap \"\" TERM HUP INT; (trap \"\" TERM HUP; sleep 1002 & echo $! > far) & wait' </dev/null >/dev/null 2>&1 &); for i in $(seq 100); do [ -s far ] && break; sleep 0.05; done; cat far";
        for mode in MODES {
            for with_cgroup in [true, false] {
                let (_dir, ws) = workspace();
                let limits = if with_cgroup {
                    limits()
                } else {
                    ResourceLimits::default()
                };
                let s = shell(&ws, mode, limits);
                run(&s, escape).await;
                assert_eq!(sleeps("1002").len(), 1, "{mode}");
                s.close_all().await;
                let ended = gone("1002").await;
                eprintln!("{mode} cgroup {with_cgroup}: the escaped sleep ended: {ended}");
                if with_cgroup {
                    assert!(ended, "{mode}: the escaped sleep outlived the close");
                } else {
                    // Without a cgroup it left the terminal session (and,
                    // confined, dies with the PID namespace).
                    assert_eq!(ended, mode != SandboxMode::DangerFullAccess, "{mode}");
                    for pid in sleeps("1002") {
                        // SAFETY: kill(2) of the process this test started.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup parent of its own: runs in the VM of .ci/vm"]
    async fn the_enforcement_names_the_cgroup_and_nothing_is_left_behind() {
        let (_dir, ws) = workspace();
        let wanted = limits()
            .memory(Some(256 << 20))
            .pids(Some(64))
            .cpus(Some(1.0));
        for mode in MODES {
            let s = shell(&ws, mode, wanted.clone());
            let enforcement = s.enforcement(mode).unwrap();
            for limit in [Limit::Memory, Limit::Pids, Limit::Cpu] {
                assert_eq!(
                    enforcement.limits.held(limit),
                    Some(Held::Cgroup(version())),
                    "{mode} {limit}"
                );
            }
            assert_eq!(run(&s, "echo alive").await, "alive");
            s.close_all().await;
        }
        // Every session's cgroup was removed with it, in every hierarchy.
        let rel = parent();
        let rel = rel.strip_prefix("/").unwrap();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mut looked = 0;
        for line in mountinfo.lines() {
            let (left, right) = line.split_once(" - ").unwrap();
            if !right.starts_with("cgroup") {
                continue;
            }
            let dir = Path::new(left.split(' ').nth(4).unwrap()).join(rel);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            looked += 1;
            let left: Vec<_> = entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("dsh-"))
                .map(|e| e.path())
                .collect();
            assert!(left.is_empty(), "left behind: {left:?}");
        }
        assert!(looked > 0, "no hierarchy holds {}", rel.display());
    }

    /// A thousand idle shells (`DSH_MEASURE_SHELLS`), without limits and with
    /// cgroup limits: each holds a few descriptors of this process (2 here
    /// without limits) and closing them leaves none (asserted); the times
    /// of spawning (the first 100, one after another) and closing, with and
    /// without cgroups, are printed, never asserted; `.ci/vm-tests` skips it (`--skip measure`): run it by name.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup parent of its own: runs in the VM of .ci/vm"]
    async fn measure_spawn_with_and_without_limits_and_closing_a_thousand() {
        let (_dir, ws) = workspace();
        let descriptors = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let n: u32 = std::env::var("DSH_MEASURE_SHELLS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        for (name, limits) in [
            ("no limits", ResourceLimits::default()),
            (
                "cgroup limits",
                limits()
                    .memory(Some(256 << 20))
                    .pids(Some(64))
                    .cpus(Some(1.0)),
            ),
        ] {
            let before = descriptors();
            let pool = std::sync::Arc::new(
                dsh_shell_persistent::ShellPool::new(ShellConfig::new(&ws).limits(limits)).unwrap(),
            );
            // The cost of one shell: the first 100, one after another.
            let sequential = 100.min(n);
            let started = Instant::now();
            for i in 0..sequential {
                pool.call(&format!("a{i}"), "true", std::future::pending())
                    .await
                    .unwrap();
            }
            let spawned = started.elapsed() / sequential;
            // The rest, 50 at a time, to have `n` idle shells to close.
            for batch in (sequential..n).collect::<Vec<_>>().chunks(50) {
                let mut set = tokio::task::JoinSet::new();
                for &i in batch {
                    let pool = std::sync::Arc::clone(&pool);
                    set.spawn(async move {
                        pool.call(&format!("a{i}"), "true", std::future::pending())
                            .await
                            .unwrap()
                    });
                }
                while let Some(done) = set.join_next().await {
                    done.unwrap();
                }
            }
            let held = descriptors() - before;
            let started = Instant::now();
            pool.close_all().await;
            let closed = started.elapsed();
            let left = descriptors().saturating_sub(before);
            eprintln!(
                "MEASURE {name}: {n} idle shells hold {held} descriptors of this process; spawn + one call {:.2} ms a shell (the first {sequential}, one after another); close {n} idle shells {:.0} ms",
                spawned.as_secs_f64() * 1000.0,
                closed.as_secs_f64() * 1000.0
            );
            assert!(
                held <= 4 * n as usize,
                "{name}: {n} shells hold {held} descriptors"
            );
            // (A few the runtime may make once, on first use, aside.)
            assert!(left <= 4, "{name}: {left} descriptors left after closing");
        }
    }
}

/// `CgroupParent::Auto`, as uid 65534 in the VM of `.ci/vm-tests`: in a
/// cgroup delegated to it the way systemd delegates one (the directory,
/// `cgroup.procs` and `cgroup.subtree_control` the user's, the test process
/// alone in it), and in a leaf root made (not delegated). Each test reads
/// the layout `.ci/vm-tests` made from `DSH_TEST_DELEGATION` and refuses to
/// run outside the VM.
mod delegated {
    use dsh_pty::{CgroupParent, CgroupVersion};

    use super::*;

    /// `DSH_TEST_DELEGATION`, once it is sure this is the VM.
    fn layout() -> String {
        let marker = std::env::var_os("DSH_TEST_VM_MARKER")
            .expect("DSH_TEST_VM_MARKER: these tests run in the VM of .ci/vm-tests");
        assert!(
            Path::new(&marker).starts_with("/run") && Path::new(&marker).exists(),
            "not in the VM of .ci/vm: refusing to move this process between cgroups on this host"
        );
        std::env::var("DSH_TEST_DELEGATION").expect("DSH_TEST_DELEGATION")
    }

    /// This process's cgroup v2 path.
    fn own_cgroup() -> String {
        std::fs::read_to_string("/proc/self/cgroup")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap()
            .to_owned()
    }

    fn auto() -> ResourceLimits {
        ResourceLimits::default().cgroup_parent(Some(CgroupParent::Auto))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup delegated to the test process: runs in the VM of .ci/vm-tests"]
    async fn auto_holds_memory_and_processes_in_the_cgroup_delegated_to_the_process() {
        let delegated = layout();
        assert!(delegated.starts_with('/'), "{delegated}");
        assert_eq!(
            own_cgroup(),
            delegated,
            "the test starts in the delegated cgroup"
        );
        // Small, and Debian's Python rather than a shim: the VM emulates
        // its CPU.
        let limits = auto().memory(Some(128 << 20)).pids(Some(64));
        // Only looked at: nothing moves.
        let report = limits.check().unwrap();
        assert_eq!(
            report.held(Limit::Memory),
            Some(Held::Cgroup(CgroupVersion::V2))
        );
        assert_eq!(own_cgroup(), delegated);
        // Taken: the process moves into a leaf; twice is once.
        limits.prepare().unwrap();
        limits.prepare().unwrap();
        let leaf = format!("{delegated}/dsh-{}-self", std::process::id());
        assert_eq!(own_cgroup(), leaf);
        let dir = Path::new("/sys/fs/cgroup").join(&delegated[1..]);
        let on = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap();
        assert!(on.contains("memory") && on.contains("pids"), "{on}");
        for mode in MODES {
            let (_dir, ws) = workspace();
            let s = shell(&ws, mode, limits.clone());
            let enforcement = s.enforcement(mode).unwrap();
            assert_eq!(
                enforcement.limits.held(Limit::Pids),
                Some(Held::Cgroup(CgroupVersion::V2)),
                "{mode}"
            );
            // The sleeps are ended before it exits: the memory hog below
            // needs processes of its own.
            let bomb = run(
                &s,
                "/usr/bin/python3 -c 'import subprocess\nps = []\nfor i in range(100):\n    try:\n        ps.append(subprocess.Popen([\"sleep\", \"1002\"]))\n    except OSError:\n        pass\nprint(len(ps))\nfor p in ps:\n    p.kill(); p.wait()'",
            )
            .await;
            eprintln!("{mode}: the fork bomb: {bomb:?}");
            let started: usize = bomb.lines().next().unwrap().trim().parse().unwrap();
            assert!(started > 0 && started < 64, "{mode}: {bomb}");
            assert!(
                bomb.contains("[process limit of 64 reached: new processes were refused]"),
                "{mode}: {bomb}"
            );
            let hog = run(
                &s,
                "/usr/bin/python3 -c \"b = b'x' * (1 << 29); print('allocated', len(b))\"",
            )
            .await;
            eprintln!("{mode}: the memory hog: {hog:?}");
            assert!(!hog.contains("allocated"), "{mode}: {hog}");
            assert!(
                hog.contains("[killed: memory limit of 128 MiB reached]"),
                "{mode}: {hog}"
            );
            assert_eq!(run(&s, "echo alive").await, "alive", "{mode}");
            // The shell's cgroup is beside the leaf, in the delegated one.
            let shells: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| !name.ends_with("-self"))
                .collect();
            assert_eq!(shells.len(), 1, "{mode}: {shells:?}");
            assert!(
                shells[0].starts_with(&format!("dsh-{}-", std::process::id())),
                "{mode}: {shells:?}"
            );
            s.close_all().await;
            // Closed: its cgroup goes (bounded wait for the teardown).
            let gone = dir.join(&shells[0]);
            for _ in 0..500 {
                if !gone.exists() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(!gone.exists(), "{mode}: {} is left", gone.display());
        }
        // The server is still in its leaf, the only process there.
        assert_eq!(own_cgroup(), leaf);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a cgroup that is not delegated to the test process: runs in the VM of .ci/vm-tests"]
    async fn auto_is_refused_naming_the_recipe_where_nothing_is_delegated() {
        assert_eq!(layout(), "refused");
        let before = own_cgroup();
        let dir = Path::new("/sys/fs/cgroup").join(before.trim_start_matches('/'));
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        assert_ne!(uid, 0, "the refusal is the unprivileged user's");
        let why = format!(
            "`auto` found no cgroup delegated to this process: {} belongs to uid 0, not to this process's uid {uid} (see \"Delegated cgroups\" in docs/limits.md)",
            dir.display()
        );
        let limits = auto().memory(Some(256 << 20)).pids(Some(64));
        assert_eq!(
            limits.prepare().unwrap_err().to_string(),
            format!("the process limit and the memory limit cannot be enforced: {why}")
        );
        let (_dir, ws) = workspace();
        for mode in MODES {
            let s = shell(&ws, mode, limits.clone());
            assert_eq!(
                dsh_sandbox::contract::render_error(&s.enforcement(mode).unwrap_err()),
                format!(
                    "the process limit and the memory limit cannot be enforced: {why}; the command was not run."
                ),
                "{mode}"
            );
            let out = run(&s, "echo ran > ran").await;
            assert!(out.contains("cannot be enforced"), "{mode}: {out}");
            assert!(!ws.join("ran").exists(), "{mode}: nothing ran");
            // Best effort: what holds, and why the rest does not.
            let s = shell(&ws, mode, limits.clone().best_effort(true));
            limits.clone().best_effort(true).prepare().unwrap();
            let report = s.enforcement(mode).unwrap().limits;
            assert_eq!(report.held(Limit::Memory), Some(Held::Rlimit), "{mode}");
            assert_eq!(report.held(Limit::Pids), Some(Held::NotHeld), "{mode}");
            assert_eq!(report.why_not_held, why, "{mode}");
            assert_eq!(run(&s, "ulimit -v").await, "262144", "{mode}");
            s.close_all().await;
        }
        // Nothing moved, nothing was made.
        assert_eq!(own_cgroup(), before);
        let made: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .collect();
        assert!(made.is_empty(), "{made:?}");
    }
}
