//! Real bash in a real PTY, through every backend available here.
#![cfg(unix)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dsh_pty::{
    NativeBackend, OutputStream, PtyBackend, PtyError, PtySession, ScrollbackError,
    ScrollbackLimits, Signal, SpawnSpec, TermSize,
};

/// A generous bound for things that should take milliseconds on a shared machine.
const BOUND: Duration = Duration::from_secs(20);

fn backends() -> Vec<Arc<dyn PtyBackend>> {
    vec![
        Arc::new(NativeBackend::new()),
        Arc::new(dsh_pty::PortableBackend::new()),
    ]
}

fn bash() -> SpawnSpec {
    SpawnSpec::new("bash")
        .args(["--norc", "--noprofile", "--noediting"])
        .env("TERM", "dumb")
        .env("PS1", "")
        .env("PS2", "")
        .echo(false)
}

/// Reads until `needle` has been seen; returns everything read. The output
/// ending first is a failure, not a result.
async fn read_until(out: &mut OutputStream, needle: &str) -> String {
    let mut seen = Vec::new();
    tokio::time::timeout(BOUND, async {
        while !String::from_utf8_lossy(&seen).contains(needle) {
            match out.recv().await {
                Some(chunk) => seen.extend_from_slice(&chunk),
                None => panic!(
                    "the output ended before {needle:?}; saw {:?}",
                    String::from_utf8_lossy(&seen)
                ),
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "timed out waiting for {needle:?}; saw {:?}",
            String::from_utf8_lossy(&seen)
        )
    });
    String::from_utf8_lossy(&seen).into_owned()
}

async fn read_to_end(out: &mut OutputStream) -> String {
    let mut seen = Vec::new();
    tokio::time::timeout(BOUND, async {
        while let Some(chunk) = out.recv().await {
            seen.extend_from_slice(&chunk);
        }
    })
    .await
    .expect("output did not end");
    String::from_utf8_lossy(&seen).into_owned()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let rest = &s[s.rfind(')').unwrap() + 1..];
            !rest.trim_start().starts_with('Z')
        })
        .unwrap_or(false)
}

fn session_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .collect();
        if rest[3] == pid.to_string() && rest[0] != "Z" {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_round_trip() {
    for backend in backends() {
        let mut s = backend.spawn(bash()).await.unwrap();
        let mut out = s.take_output().unwrap();
        assert!(s.take_output().is_none(), "output can be taken once");
        s.write_all(b"echo round-$((20+22))-trip\n").await.unwrap();
        let text = read_until(&mut out, "round-42-trip").await;
        assert!(
            !text.contains("$((20+22))"),
            "{}: echo is off",
            backend.name()
        );
        s.end(Duration::from_millis(100)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_is_reported() {
    for backend in backends() {
        let s = backend.spawn(bash()).await.unwrap();
        s.write_all(b"exit 7\n").await.unwrap();
        let st = tokio::time::timeout(BOUND, s.wait()).await.unwrap();
        assert_eq!(st.code(), Some(7), "{}", backend.name());
        assert_eq!(st.signal(), None);
        assert_eq!(s.status(), Some(st));
        assert!(matches!(
            s.write_all(b"echo\n").await,
            Err(PtyError::WriteAfterExit)
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_is_reported_as_sigkill() {
    for backend in backends() {
        let s = backend.spawn(bash()).await.unwrap();
        s.write_all(b"kill -9 $$\n").await.unwrap();
        let st = tokio::time::timeout(BOUND, s.wait()).await.unwrap();
        assert_eq!(st.signal_name(), Some("SIGKILL"), "{}", backend.name());
        assert_eq!(st.code(), None);
        assert_eq!(st.to_string(), "killed by signal SIGKILL");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_tree_ends_background_jobs_and_double_forks() {
    for backend in backends() {
        let mut s = backend.spawn(bash()).await.unwrap();
        let mut out = s.take_output().unwrap();
        let sid = s.pid().unwrap() as i32;
        // A job, a HUP-immune job, and a double-forked orphan.
        s.write_all(
            b"sleep 1000 & (trap '' HUP TERM; exec sleep 1001) & ( (sleep 1002 &) ) ; echo started\n",
        )
        .await
        .unwrap();
        read_until(&mut out, "started").await;
        // Wait (bounded) until all three sleeps exist.
        tokio::time::timeout(BOUND, async {
            while session_of(sid).len() < 4 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the jobs never started");
        let members = session_of(sid);
        let st = s.end(Duration::from_millis(300)).await.unwrap();
        assert!(
            st.signal().is_some() || st.code().is_some(),
            "{}: {st}",
            backend.name()
        );
        assert_eq!(session_of(sid), Vec::<i32>::new(), "{}", backend.name());
        for pid in members {
            assert!(!alive(pid), "{}: pid {pid} survived", backend.name());
        }
        assert!(s.status().is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_is_seen_while_a_background_job_holds_the_terminal() {
    for backend in backends() {
        let mut s = backend.spawn(bash()).await.unwrap();
        let mut out = s.take_output().unwrap();
        let sid = s.pid().unwrap() as i32;
        s.write_all(b"(trap '' HUP; sleep 1000) & echo bye; exit 0\n")
            .await
            .unwrap();
        let st = tokio::time::timeout(BOUND, s.wait()).await.unwrap();
        assert_eq!(st.code(), Some(0), "{}", backend.name());
        // The job still holds the terminal, so there is no end-of-file; the
        // exit was seen by waiting on the shell, and the stream ends after the grace.
        let members = session_of(sid);
        assert!(
            !members.is_empty(),
            "{}: the job should still run",
            backend.name()
        );
        let text = read_to_end(&mut out).await;
        assert!(text.contains("bye"), "{text:?}");
        s.end(Duration::from_millis(100)).await.unwrap();
        assert!(session_of(sid).is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_is_seen_by_stty() {
    for backend in backends() {
        let mut s = backend
            .spawn(bash().size(TermSize {
                rows: 30,
                cols: 100,
            }))
            .await
            .unwrap();
        let mut out = s.take_output().unwrap();
        s.write_all(b"echo first $(stty size)\n").await.unwrap();
        read_until(&mut out, "first 30 100").await;
        s.resize(TermSize {
            rows: 51,
            cols: 132,
        })
        .unwrap();
        s.write_all(b"echo second $(stty size)\n").await.unwrap();
        read_until(&mut out, "second 51 132").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrollback_pages_back_exactly_and_reports_dropped_offsets() {
    let backend = NativeBackend::new();
    let spec = bash()
        .output_processing(false)
        .scrollback(ScrollbackLimits {
            max_bytes: 64 * 1024,
            max_lines: 100_000,
        });
    let mut s = backend.spawn(spec).await.unwrap();
    let mut out = s.take_output().unwrap();
    s.write_all(b"seq 1 500; echo END\n").await.unwrap();
    let text = read_until(&mut out, "END\n").await;
    let sb = s.scrollback();
    let end = sb.end_offset();
    assert_eq!(end, text.len() as u64);
    // Page back 7 lines at a time and reassemble.
    let mut pages = Vec::new();
    let mut at = end;
    while at > 0 {
        let page = sb.page_before(at, 7, 1 << 20).unwrap();
        assert!(page.data.iter().filter(|&&b| b == b'\n').count() <= 7);
        at = page.start;
        pages.push(page.data);
    }
    pages.reverse();
    assert_eq!(String::from_utf8(pages.concat()).unwrap(), text);

    // Now overflow the 64 KiB bound: the first offsets are gone, explicitly.
    s.write_all(b"seq 1 100000; echo END2\n").await.unwrap();
    read_until(&mut out, "END2\n").await;
    let earliest = sb.start_offset();
    assert!(earliest > 0);
    assert_eq!(
        sb.page_before(10, 1, 100),
        Err(ScrollbackError::Dropped {
            requested: 10,
            earliest
        })
    );
    assert!(matches!(
        sb.read_range(0, 10),
        Err(ScrollbackError::Dropped { .. })
    ));
    let last = sb.page_before(sb.end_offset(), 1, 100).unwrap();
    assert_eq!(last.data, b"END2\n");
    assert!(sb.lock().retained_bytes() <= 64 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_errors_are_precise() {
    for backend in backends() {
        let err = backend
            .spawn(SpawnSpec::new("/definitely/not/a/program"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, PtyError::ProgramNotFound { ref program } if program == "/definitely/not/a/program"),
            "{}: {err:?}",
            backend.name()
        );
        let err = backend
            .spawn(bash().cwd("/definitely/not/a/dir"))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "working directory does not exist: /definitely/not/a/dir"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_cwd_and_args_reach_the_program() {
    let dir = std::env::temp_dir();
    for backend in backends() {
        let mut s = backend
            .spawn(
                bash()
                    .env("DSH_PROBE", "probe-value")
                    .env_remove("HOME")
                    .cwd(&dir),
            )
            .await
            .unwrap();
        let mut out = s.take_output().unwrap();
        s.write_all(b"echo \"[$DSH_PROBE|${HOME-unset}|$PWD]\"\n")
            .await
            .unwrap();
        let want = format!("[probe-value|unset|{}]", dir.display());
        read_until(&mut out, &want).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_inspection_sees_commands_waiting_for_input() {
    for backend in backends() {
        let mut s = backend.spawn(bash()).await.unwrap();
        let mut out = s.take_output().unwrap();
        let shell = s.pid().unwrap() as i32;
        s.write_all(b"echo ready\n").await.unwrap();
        read_until(&mut out, "ready").await;

        // `sleep` is in front but not reading.
        s.write_all(b"sleep 1000\n").await.unwrap();
        let fg = wait_for(&*s, |fg| !fg.is_leader && comm(fg.pgid) == "sleep").await;
        assert_eq!(
            fg.waiting_for_input,
            Some(false),
            "{}: {fg:?}",
            backend.name()
        );
        s.signal_foreground(Signal::Interrupt).unwrap();
        wait_for(&*s, |fg| fg.is_leader).await;

        // `cat` is in front and reading the terminal.
        s.write_all(b"cat\n").await.unwrap();
        let fg = wait_for(&*s, |fg| {
            !fg.is_leader && fg.waiting_for_input == Some(true)
        })
        .await;
        assert_ne!(fg.pgid, shell);
        s.write_all(b"\x04").await.unwrap(); // Ctrl-D ends cat
        wait_for(&*s, |fg| fg.is_leader).await;

        // The `read` builtin: the shell itself waits for input.
        s.write_all(b"read x; echo \"got=$x\"\n").await.unwrap();
        wait_for(&*s, |fg| fg.is_leader && fg.waiting_for_input == Some(true)).await;
        s.write_all(b"typed\n").await.unwrap();
        read_until(&mut out, "got=typed").await;
    }
}

/// The foreground reports the program's own state: the executable it runs
/// (another one after an `exec`) and whether it is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_foreground_reports_the_programs_state() {
    for backend in backends() {
        let mut s = backend.spawn(bash()).await.unwrap();
        let mut out = s.take_output().unwrap();
        let pid = s.pid().unwrap() as i32;
        s.write_all(b"echo ready\n").await.unwrap();
        read_until(&mut out, "ready").await;
        let bash_exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let fg = s.foreground().await.unwrap();
        let leader = fg.leader.clone().unwrap();
        assert_eq!(
            leader.program.as_ref(),
            Some(&bash_exe),
            "{}",
            backend.name()
        );
        assert!(!leader.stopped);
        // The brief look (a shell's first look at itself) sees the same
        // group and program.
        let brief = s.foreground_brief().await.unwrap();
        assert_eq!(
            (
                brief.pgid,
                brief.is_leader,
                brief.leader.as_ref().map(|l| &l.program)
            ),
            (fg.pgid, true, Some(&leader.program)),
            "{}",
            backend.name()
        );

        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        wait_for(&*s, |fg| fg.leader.as_ref().is_some_and(|l| l.stopped)).await;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGCONT,
        )
        .unwrap();
        wait_for(&*s, |fg| fg.leader.as_ref().is_some_and(|l| !l.stopped)).await;

        s.write_all(b"exec sleep 1000\n").await.unwrap();
        let fg = wait_for(&*s, |fg| {
            fg.leader
                .as_ref()
                .is_some_and(|l| l.program.as_ref().is_some_and(|p| p != &bash_exe))
        })
        .await;
        let program = fg.leader.and_then(|l| l.program).unwrap();
        assert!(program.ends_with("sleep"), "{program:?}");
        let brief = s.foreground_brief().await.unwrap();
        assert_eq!(
            brief.leader.and_then(|l| l.program),
            Some(program),
            "{}",
            backend.name()
        );
        s.end(Duration::ZERO).await.unwrap();
    }
}

/// The command name of `pid`: waiting for it to be `sleep` (not the forked
/// shell about to exec it, which would swallow a SIGINT in its handler).
fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

async fn wait_for(
    s: &dyn PtySession,
    pred: impl Fn(&dsh_pty::Foreground) -> bool,
) -> dsh_pty::Foreground {
    let mut last = None;
    let found = tokio::time::timeout(BOUND, async {
        loop {
            let fg = s.foreground().await.unwrap();
            if pred(&fg) {
                return fg;
            }
            last = Some(fg);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        let proc_info = last.as_ref().map(|fg| {
            let pid = fg.pgid;
            let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_else(|e| e.to_string());
            let fd0 = std::fs::read_link(format!("/proc/{pid}/fd/0")).map(|p| p.display().to_string()).unwrap_or_else(|e| e.to_string());
            format!("stat={} syscall={} wchan={} fd0={fd0} cmdline={:?}", read("stat"), read("syscall"), read("wchan"), read("cmdline"))
        });
        panic!("foreground never reached the expected state; last seen {last:?}, shell pid {:?}; {proc_info:?}", s.pid())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_reaches_the_foreground_job_not_the_shell() {
    for backend in backends() {
        let mut s = backend.spawn(bash()).await.unwrap();
        let mut out = s.take_output().unwrap();
        s.write_all(b"sleep 1000\n").await.unwrap();
        wait_for(&*s, |fg| !fg.is_leader && comm(fg.pgid) == "sleep").await;
        s.signal_foreground(Signal::Interrupt).unwrap();
        wait_for(&*s, |fg| fg.is_leader).await;
        s.write_all(b"echo \"status=$?\"\n").await.unwrap();
        read_until(&mut out, "status=130").await;
        assert!(s.status().is_none(), "the shell survives Ctrl-C");
    }
}

#[derive(Debug)]
struct SetEnvMarker;
// SAFETY: `pre_exec` only calls `umask`, an async-signal-safe system call.
unsafe impl dsh_pty::PreExec for SetEnvMarker {
    fn pre_exec(&self) -> std::io::Result<()> {
        // SAFETY: umask is async-signal-safe and has no preconditions.
        unsafe { libc_umask(0o027) };
        Ok(())
    }
}

#[derive(Debug)]
struct Refuse;
// SAFETY: returns a prebuilt error without allocating (`from_raw_os_error`).
unsafe impl dsh_pty::PreExec for Refuse {
    fn pre_exec(&self) -> std::io::Result<()> {
        Err(std::io::Error::from_raw_os_error(1))
    }
}

unsafe extern "C" {
    #[link_name = "umask"]
    fn libc_umask(mask: u32) -> u32;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_exec_hooks_run_in_the_child_and_their_failure_is_reported() {
    let backend = NativeBackend::new();
    let mut s = backend
        .spawn(bash().pre_exec(Arc::new(SetEnvMarker)))
        .await
        .unwrap();
    let mut out = s.take_output().unwrap();
    s.write_all(b"echo mask=$(umask)\n").await.unwrap();
    read_until(&mut out, "mask=0027").await;

    let err = backend
        .spawn(bash().pre_exec(Arc::new(Refuse)))
        .await
        .unwrap_err();
    assert!(matches!(err, PtyError::Confine(_)), "{err:?}");

    let err = dsh_pty::PortableBackend::new()
        .spawn(bash().pre_exec(Arc::new(Refuse)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            PtyError::NotKept {
                field: dsh_pty::SpecField::PreExec,
                ..
            }
        ),
        "{err:?}"
    );
}

/// A hook that does nothing: a spec with it is started with `fork` and
/// `exec`, one without it (on Linux) with `posix_spawn`.
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct Nothing;
// SAFETY: `pre_exec` calls nothing.
#[cfg(target_os = "linux")]
unsafe impl dsh_pty::PreExec for Nothing {
    fn pre_exec(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A program started without a hook (`posix_spawn` on Linux) and one
/// started with a hook (`fork` and `exec`) start alike: the same arguments,
/// directory and environment (its order too), the same ignored and blocked
/// signals, each the leader of its own session and process group with the
/// terminal as its controlling terminal. (Signals 32 and 33 are glibc's
/// own: its `posix_spawn` leaves them ignored in the child, as in every
/// program started through it, the standard library's `Command` without a
/// hook included.)
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_and_forked_programs_start_alike() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"printf '[%s]' "$0" "$@"; echo; pwd
read -r _ _ _ _ pgrp sid tty _ < /proc/$$/stat
echo "leader=$(( sid == $$ )) group=$(( pgrp == $$ )) tty=$(( tty != 0 ))"
[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo "streams=terminal"
grep '^SigBlk' /proc/$$/status
read -r _ ign < <(grep '^SigIgn' /proc/$$/status)
printf 'SigIgn but 32 and 33: %x\n' $(( 0x$ign & ~0x180000000 ))
tr '\0' '\n' < /proc/$$/environ"#;
    let path = format!("/nonexistent-dir:{}", std::env::var("PATH").unwrap());
    let spec = || {
        SpawnSpec::new("bash")
            .args(["-c", script, "arg A", "arg B"])
            .env("DSH_PROBE", "x y")
            .env("A_FIRST", "1")
            .env_remove("HOME")
            .env("PATH", &path)
            .cwd(dir.path())
    };
    let mut seen = Vec::new();
    for hook in [false, true] {
        let spec = if hook {
            spec().pre_exec(Arc::new(Nothing))
        } else {
            spec()
        };
        let mut s = NativeBackend::new().spawn(spec).await.unwrap();
        let mut out = s.take_output().unwrap();
        seen.push(read_to_end(&mut out).await.replace("\r\n", "\n"));
    }
    let text = &seen[0];
    let dir_line = format!("\n{}\n", dir.path().canonicalize().unwrap().display());
    for want in [
        "[arg A][arg B]\n",
        dir_line.as_str(),
        "leader=1 group=1 tty=1\n",
        "streams=terminal\n",
        "\nDSH_PROBE=x y\n",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
    assert!(!text.contains("\nHOME="), "{text}");
    assert_eq!(seen[0], seen[1], "posix_spawn and fork + exec differ");
}

/// A program whose runtime ended before it exited is not left a zombie:
/// the next spawn reaps it. On a current-thread runtime the program's
/// waiter never ran before the runtime ended (nothing yields after the
/// spawn); on a multi-thread one it may or may not have.
#[cfg(target_os = "linux")]
#[test]
fn a_program_whose_runtime_ended_is_reaped_by_the_next_spawn() {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    let current = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    reaped_by_the_next_spawn(runtime(), runtime);
    reaped_by_the_next_spawn(current(), runtime);
}

#[cfg(target_os = "linux")]
fn reaped_by_the_next_spawn(
    first: tokio::runtime::Runtime,
    runtime: impl Fn() -> tokio::runtime::Runtime,
) {
    let state = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(") ").next().and_then(|r| r.chars().next()))
    };
    let pid = first.block_on(async {
        let s = NativeBackend::new().spawn(bash()).await.unwrap();
        s.pid().unwrap() as i32
        // dropped here: SIGKILL, its waiter left on the runtime
    });
    drop(first);
    let deadline = std::time::Instant::now() + BOUND;
    while state(pid).is_some_and(|s| s != 'Z') {
        assert!(std::time::Instant::now() < deadline, "{pid} never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Dead, and a zombie unless its waiter reaped it before the runtime ended.
    let second = runtime();
    second.block_on(async {
        let s = NativeBackend::new().spawn(bash()).await.unwrap();
        drop(s);
    });
    assert_eq!(state(pid), None, "{pid} is still in the process table");
}

/// The last `n` bytes of the scrollback, as text.
fn scrollback_tail(s: &dyn PtySession, n: u64) -> String {
    let sb = s.scrollback();
    let end = sb.end_offset();
    let start = end.saturating_sub(n).max(sb.start_offset());
    String::from_utf8_lossy(&sb.read_range(start, end).unwrap()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarding_stream_never_blocks_the_program_and_delivers_only_what_follows() {
    for backend in backends() {
        let name = backend.name();
        // Megabytes printed while nobody reads: with the stream discarding,
        // the program runs to its end (a reading stream's backpressure would
        // hold it at its first full terminal buffer).
        let mut s = backend.spawn(bash()).await.unwrap();
        let mut out = s.take_output().unwrap();
        out.discard();
        s.write_all(b"seq 1 300000; exit 3\n").await.unwrap();
        let st = tokio::time::timeout(BOUND, s.wait())
            .await
            .unwrap_or_else(|_| panic!("{name}: the program blocked while the stream discarded"));
        assert_eq!(st.code(), Some(3), "{name}");
        // The stream ends once the pump has seen the end of the output
        // (some backends report the exit before their last chunks): none of
        // what was printed reached it.
        let rest = read_to_end(&mut out).await;
        assert!(!rest.contains("300000"), "{name}: delivered {rest:?}");
        assert!(
            scrollback_tail(s.as_ref(), 64).contains("299999\r\n300000\r\n"),
            "{name}: the scrollback records what was dropped: {:?}",
            scrollback_tail(s.as_ref(), 64)
        );
        let dropped = out.deliver();
        assert!(dropped >= 2_000_000, "{name}: {dropped} bytes dropped");
        assert_eq!(out.deliver(), 0, "{name}: the count restarts");

        // What was printed while discarding is not delivered after.
        let mut s = backend.spawn(bash()).await.unwrap();
        let mut out = s.take_output().unwrap();
        out.discard();
        s.write_all(b"echo before-$((0+1))\n").await.unwrap();
        tokio::time::timeout(BOUND, async {
            while !scrollback_tail(s.as_ref(), 64).contains("before-1") {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{name}: bash never printed before-1"));
        assert!(out.deliver() > 0, "{name}");
        s.write_all(b"echo after-$((1+1))\n").await.unwrap();
        let text = read_until(&mut out, "after-2").await;
        assert!(!text.contains("before-1"), "{name}: {text:?}");
        s.end(Duration::from_millis(100)).await.unwrap();
    }
}
