//! Programs that wait for a person at the terminal (a pager, an editor,
//! `top`, a password prompt asked again after end-of-file) are ended within
//! seconds, with the line that says so, and the shell keeps its state; a
//! program that reads its standard input gets end-of-file as before. Real
//! programs in a real PTY on this machine.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dsh_shell_persistent::{
    ENDED_PROGRAM_NOTE, INPUT_EOF_NOTE, SHELL_RESTARTED_NOTE, ShellConfig, ShellPool, ShellRequest,
    contract,
};

/// The line for `program`.
fn note(program: &str) -> String {
    ENDED_PROGRAM_NOTE.replace("{program}", program)
}

/// A pool whose calls would run for two minutes: a program that is not
/// ended makes the test's own bound (one minute) fail first.
fn pool(dir: &tempfile::TempDir) -> ShellPool {
    ShellPool::new(ShellConfig::new(dir.path()).timeout(Duration::from_secs(120))).unwrap()
}

async fn run(pool: &ShellPool, command: &str) -> String {
    tokio::time::timeout(Duration::from_secs(60), pool.run("agent", command))
        .await
        .unwrap_or_else(|_| panic!("{command:?} was not ended within a minute"))
        .unwrap_or_else(|e| panic!("{command:?} failed: {e}"))
}

/// Runs each command in one shell whose directory and variables are set
/// first, and checks that each ends with its program's line, then that the
/// state and the terminal's line mode are as before.
async fn each_is_ended(commands: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir);
    run(
        &pool,
        "mkdir sub && cd sub && export KEPT=yes && seq 1 500 > file.txt",
    )
    .await;
    for (command, program) in commands {
        let out = run(&pool, command).await;
        assert!(out.contains(&note(program)), "{command}: {out:?}");
        assert!(!out.contains("reset"), "{command}: {out:?}");
        assert!(!out.contains(INPUT_EOF_NOTE), "{command}: {out:?}");
        assert_eq!(
            run(&pool, "echo $KEPT ${PWD##*/}").await,
            "yes sub",
            "after {command}"
        );
        // The terminal reads lines again: a command that reads one gets
        // end-of-file, not a keypress.
        let read = run(&pool, "read -r x; echo \"[$x] $?\"").await;
        assert_eq!(read, format!("[] 1\n{INPUT_EOF_NOTE}"), "after {command}");
    }
    pool.close_all().await;
}

/// What a pager does (the terminal out of line mode, keys read one by one
/// until `q`), and a password prompt that asks again after end-of-file (as
/// `ssh` and `sudo` do: `/dev/tty` with echo off), written in the Python
/// the tests need anyway, so that this runs wherever the suite does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_readers_and_repeated_password_prompts_are_ended() {
    each_is_ended(&[
        (
            "python3 -c 'import os, tty\ntty.setraw(0)\nwhile os.read(0, 1) != b\"q\": pass'",
            "python3",
        ),
        (
            "python3 -c 'import getpass\nwhile True:\n    try: getpass.getpass()\n    except EOFError: pass'",
            "python3",
        ),
    ])
    .await;
}

/// The programs agents ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs less, top, vim, nano and htop (.ci/run installs them)"]
async fn pagers_editors_and_monitors_are_ended() {
    each_is_ended(&[
        ("less file.txt", "less"),
        ("git --no-pager log 2>/dev/null; less -R < file.txt", "less"),
        ("top", "top"),
        ("vim notes.txt", "vim"),
        ("vi file.txt", "vi"),
        ("nano file.txt", "nano"),
        ("htop", "htop"),
    ])
    .await;
}

/// Line readers keep end-of-file: `cat`, `read`, `head -n1`, and a line
/// editor that leaves at it (Python's REPL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn line_readers_get_end_of_file_and_are_not_ended() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir);
    for command in ["cat", "head -n1", "python3 -q"] {
        let out = run(&pool, command).await;
        assert!(out.ends_with(INPUT_EOF_NOTE), "{command}: {out:?}");
        assert!(!out.contains("interactive terminal"), "{command}: {out:?}");
    }
    assert_eq!(
        run(&pool, "read -r x; echo \"[$x]\"").await,
        format!("[]\n{INPUT_EOF_NOTE}")
    );
    pool.close_all().await;
}

/// A free loopback port for a server the command starts (bound and
/// released here; nothing else on this machine asks for it meanwhile).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `command` in `owner`'s shell of `pool` under a call timeout of
/// `secs` seconds; the rendered result.
async fn run_for(pool: &ShellPool, owner: &str, command: &str, secs: u64) -> String {
    let request = ShellRequest::new(command).timeout(Duration::from_secs(secs));
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        pool.call(owner, request, std::future::pending()),
    )
    .await
    .unwrap_or_else(|_| panic!("{command:?} was not ended within a minute"))
    .unwrap_or_else(|e| panic!("{command:?} failed: {e}"));
    contract::render(&outcome)
}

/// The line of a call the timeout ended after `secs` seconds.
fn timed_out(secs: u64) -> String {
    format!("Your command timed out after {secs} seconds")
}

/// Programs that wait on anything but the terminal — a server on its
/// socket (logging each request to the terminal), `tail -f` on a growing
/// file, a `select` with no descriptor, a raw-mode program on a socket, a
/// listener in `accept` — run on to their end or to the call's timeout,
/// their output kept, and are never taken for a program that needs a
/// person. Each in a shell of its own, all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_waiting_on_anything_but_the_terminal_run_on() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir);
    let port = free_port();
    let nc = std::process::Command::new("sh")
        .args(["-c", "command -v nc"])
        .output()
        .is_ok_and(|o| o.status.success());
    let listen = if nc {
        format!("echo listening; nc -l 127.0.0.1 {}", free_port())
    } else {
        "python3 -c 'import socket\ns = socket.create_server((\"127.0.0.1\", 0))\nprint(\"listening\", flush=True)\ns.accept()'".to_owned()
    };
    // (command, call timeout, what its output holds, whether it ends by itself)
    let cases: Vec<(String, u64, &str, bool)> = vec![
        (
            format!(
                "(sleep 1; python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:{port}/\")') >/dev/null 2>&1 & python3 -u -m http.server {port} --bind 127.0.0.1"
            ),
            5,
            "\"GET / HTTP/1.1\" 200",
            false,
        ),
        (
            "touch app.log; (for i in 1 2 3 4; do sleep 0.5; echo line$i >> app.log; done) & tail -f app.log".to_owned(),
            5,
            "line4",
            false,
        ),
        (
            "python3 -c 'import select; select.select([], [], [], 3); print(\"slept\")'".to_owned(),
            20,
            "slept",
            true,
        ),
        (
            "python3 -c 'import socket, sys, termios, tty\nold = termios.tcgetattr(0)\ntty.setraw(0)\ns = socket.create_server((\"127.0.0.1\", 0))\ns.settimeout(3)\ntry: s.accept()\nexcept socket.timeout: pass\nfinally: termios.tcsetattr(0, termios.TCSADRAIN, old)\nprint(\"no client\")'".to_owned(),
            20,
            "no client",
            true,
        ),
        (listen, 4, "listening", false),
    ];
    let pool = std::sync::Arc::new(pool);
    let mut runs = tokio::task::JoinSet::new();
    for (i, (command, secs, _, _)) in cases.iter().enumerate() {
        let (pool, command, secs) = (pool.clone(), command.clone(), *secs);
        runs.spawn(async move {
            (
                i,
                run_for(&pool, &format!("agent{i}"), &command, secs).await,
            )
        });
    }
    let mut outs = vec![String::new(); cases.len()];
    while let Some(done) = runs.join_next().await {
        let (i, out) = done.unwrap();
        outs[i] = out;
    }
    for ((command, secs, holds, ends), out) in cases.iter().zip(&outs) {
        assert!(out.contains(holds), "{command}: {out:?}");
        assert!(!out.contains("interactive terminal"), "{command}: {out:?}");
        assert!(!out.contains(INPUT_EOF_NOTE), "{command}: {out:?}");
        assert_eq!(
            !out.contains(&timed_out(*secs)),
            *ends,
            "{command}: {out:?}"
        );
    }
    pool.close_all().await;
}

/// A Node server waits in `epoll_wait` on its socket: it runs on to the
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs node (.ci/run installs it)"]
async fn a_node_server_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir);
    let out = run_for(
        &pool,
        "agent",
        "node -e 'require(\"http\").createServer((q, r) => r.end()).listen(0, () => console.log(\"listening\"))'",
        4,
    )
    .await;
    assert!(out.contains("listening"), "{out:?}");
    assert!(out.contains(&timed_out(4)), "{out:?}");
    assert!(!out.contains("interactive terminal"), "{out:?}");
    pool.close_all().await;
}

/// A program that received the end-of-file and did not read it (it woke
/// from its wait on the terminal and went on) leaves nothing for the shell
/// to read: the next call runs with the shell's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_of_file_left_unread_never_reaches_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir);
    run(&pool, "export KEPT=yes").await;
    for command in [
        // Line mode: the end-of-file is a line of its own it never reads.
        "python3 -c 'import select, sys, time\nselect.select([sys.stdin], [], [])\ntime.sleep(1)\nprint(\"woke\")'",
        // Keys one by one: the byte stays queued.
        "python3 -c 'import select, sys, termios, time, tty\nold = termios.tcgetattr(0)\ntty.setraw(0)\nselect.select([sys.stdin], [], [])\ntime.sleep(1)\ntermios.tcsetattr(0, termios.TCSANOW, old)\nprint(\"woke\")'",
    ] {
        let out = run(&pool, command).await;
        assert!(out.starts_with("woke"), "{command}: {out:?}");
        assert!(!out.contains("reset"), "{command}: {out:?}");
        assert_eq!(run(&pool, "echo $KEPT").await, "yes", "after {command}");
    }
    pool.close_all().await;
}

/// A shell killed from outside between calls is not the next call's error:
/// the command runs in a fresh shell, its result led by the reset line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_killed_between_calls_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir);
    run(&pool, "export KEPT=yes").await;
    let pid: i32 = run(&pool, "echo $$").await.parse().unwrap();
    // The pool's own shell, started by this test.
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = run(&pool, "echo ran ${KEPT:-fresh}").await;
    let reset = dsh_shell_persistent::Dialect::Bash.reset_line();
    assert_eq!(out, format!("{reset}\n{SHELL_RESTARTED_NOTE}\nran fresh"));
    assert_eq!(run(&pool, "echo again").await, "again");
    pool.close_all().await;
}
