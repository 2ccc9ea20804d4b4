//! Programs that wait for a person at the terminal (a pager, an editor,
//! `top`, a password prompt asked again after end-of-file) are ended within
//! seconds, with the line that says so, and the shell keeps its state; a
//! program that reads its standard input gets end-of-file as before. Real
//! programs in a real PTY on this machine.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dsh_shell_persistent::{ENDED_PROGRAM_NOTE, INPUT_EOF_NOTE, ShellConfig, ShellPool};

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
