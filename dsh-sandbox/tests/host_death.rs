//! A confined shell's tree ends when the host process dies without closing
//! it (a crash, `SIGKILL`), with either engine, including what it left in
//! the background and that ignores the terminal's hangup.
//!
//! The host is this test binary run again as a child (the same test, told
//! by its environment that it is the host): it starts a confined shell, has it leave a `sleep` with a name
//! of its own in the background, says so, and waits. The test kills that
//! child (a process it started) and waits for the `sleep` to go.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_sandbox::{SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell};
use dsh_shell_persistent::ShellConfig;
use serde_json::json;

/// Generous bounds for events (the machine may be busy).
const BOUND: Duration = Duration::from_secs(120);

/// The processes whose command line is exactly `sleep <arg>`.
fn sleeps(arg: &str) -> Vec<i32> {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes())
        })
        .collect()
}

/// Waits (within [`BOUND`]) for `pid` to exit: its pidfd becomes readable.
fn wait_gone(pid: i32) {
    // SAFETY: pidfd_open(2) with no flags; the descriptor is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return; // already gone
    }
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; then close(2) of the descriptor opened above.
    unsafe {
        libc::poll(&mut poll, 1, BOUND.as_millis() as i32);
        libc::close(fd);
    }
}

fn has_bwrap() -> bool {
    Command::new("bwrap")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the host child with `engine` (the test `test`, again) and checks
/// that its shell's tree ends with it; in the child, is the host.
fn the_tree_ends_with_the_host(engine: &str, test: &str) {
    if std::env::var_os("DSH_HOST_CHILD_ENGINE").is_some() {
        return host_child();
    }
    let workspace = tempfile::tempdir().unwrap();
    // The child's temporary directory: its shell's scratch directory,
    // which the killed child cannot remove, goes with this one.
    let tmp = tempfile::tempdir().unwrap();
    // An argument no other process has: this run's pid and the engine.
    let nonce = format!("{}.{}", 100_000 + std::process::id(), engine.len());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--include-ignored", "--nocapture"])
        .env("DSH_HOST_CHILD_ENGINE", engine)
        .env("DSH_HOST_CHILD_SLEEP", &nonce)
        .env("DSH_HOST_CHILD_WORKSPACE", workspace.path())
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let ready = loop {
        match rx.recv_timeout(BOUND) {
            Ok(line) if line.starts_with("HOST-READY") => break line,
            Ok(_) => continue,
            Err(e) => {
                let _ = child.kill();
                panic!("{engine}: the host child never got ready: {e}");
            }
        }
    };
    assert!(ready.ends_with(" started"), "{engine}: {ready}");
    assert_eq!(
        sleeps(&nonce).len(),
        1,
        "{engine}: the background sleep is not running"
    );
    // The host dies without closing anything.
    child.kill().unwrap();
    child.wait().unwrap();
    for pid in sleeps(&nonce) {
        wait_gone(pid);
    }
    let left = sleeps(&nonce);
    for pid in &left {
        // SAFETY: kill(2) of a process this test's host child started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "{engine}: the confined shell's background process outlived the host"
    );
}

#[test]
fn the_native_sandbox_ends_with_the_host() {
    the_tree_ends_with_the_host("native", "the_native_sandbox_ends_with_the_host");
}

#[test]
#[ignore = "needs bwrap (bubblewrap); .ci/run installs it and runs this"]
fn the_bubblewrap_sandbox_ends_with_the_host() {
    assert!(has_bwrap(), "bwrap is not installed");
    the_tree_ends_with_the_host("bubblewrap", "the_bubblewrap_sandbox_ends_with_the_host");
}

/// The host, in the child: never returns.
fn host_child() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(host());
}

async fn host() {
    let engine = std::env::var("DSH_HOST_CHILD_ENGINE").unwrap();
    let sleep = std::env::var("DSH_HOST_CHILD_SLEEP").unwrap();
    let workspace = PathBuf::from(std::env::var("DSH_HOST_CHILD_WORKSPACE").unwrap());
    let policy = SandboxPolicy::default()
        .mode(SandboxMode::WorkspaceWrite)
        .bubblewrap((engine == "bubblewrap").then(|| PathBuf::from("bwrap")));
    let shell =
        SandboxedShell::new(SandboxConfig::new(policy, ShellConfig::new(&workspace))).unwrap();
    // In the background, out of the terminal's session, deaf to its
    // hangup and to SIGTERM.
    let command = format!(
        "setsid sh -c 'trap \"\" HUP TERM INT; exec sleep {sleep}' </dev/null >/dev/null 2>&1 & echo started"
    );
    let text = shell
        .execute("agent", &json!({ "command": command }))
        .await
        .unwrap();
    // The sleep is running once its command line is there.
    let deadline = Instant::now() + BOUND;
    while sleeps(&sleep).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("HOST-READY {}", text.replace('\n', " "));
    std::future::pending::<()>().await;
}
