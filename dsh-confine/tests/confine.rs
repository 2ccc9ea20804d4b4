//! The confinement applied to real processes: real namespaces, a real
//! view, the socket supervisor, the opener. (The full escape suite runs
//! through dsh-sandbox: `cargo test -p dsh-sandbox --test escape`.)
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use dsh_confine::{Confinement, Found, OpenError, Opener, Policy, UnixSocketGuard};

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    (dir, ws)
}

fn write_policy(ws: &Path) -> Policy {
    Policy::new(ws.to_owned())
        .workspace_write(true)
        .writable_roots(vec![ws.to_owned()])
        .protected(vec![ws.join(".git")])
        .tmp_writable(true)
}

/// `script` run by `sh` under `policy`'s confinement.
fn run(policy: &Policy, script: &str) -> Output {
    let (confinement, enforcement) = Confinement::build(policy).unwrap();
    assert!(enforcement.namespaces, "{enforcement:?}");
    assert_eq!(enforcement.unix_sockets, UnixSocketGuard::Supervisor);
    let confinement = Arc::new(confinement);
    let mut command = Command::new("/bin/sh");
    command.args(["-c", script]);
    // SAFETY: the hook is async-signal-safe (its `PreExec` contract).
    unsafe {
        command.pre_exec(move || dsh_confine::dsh_pty::PreExec::pre_exec(&*confinement));
    }
    command.output().unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_confined_shell_writes_only_its_roots_and_exits_as_it_did() {
    let (_dir, ws) = workspace();
    std::fs::create_dir(ws.join(".git")).unwrap();
    let out = run(
        &write_policy(&ws),
        "pwd; echo in > ok; echo x > .git/config; echo $?; echo y > /etc/dsh-confine-test; echo $?; echo t > /tmp/t && cat /tmp/t; exit 7",
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, [ws.to_str().unwrap(), "2", "2", "t"], "{stderr}");
    assert_eq!(std::fs::read_to_string(ws.join("ok")).unwrap(), "in\n");
    assert!(!ws.join(".git/config").exists());
    assert!(!Path::new("/etc/dsh-confine-test").exists());
}

#[test]
fn a_signal_that_ends_the_shell_ends_the_supervisor() {
    let (_dir, ws) = workspace();
    let out = run(&write_policy(&ws), "kill -TERM $$");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{:?}", text(&out));
}

#[test]
fn the_supervisor_reaches_sockets_in_the_roots_only() {
    let (_dir, ws) = workspace();
    // Outside the roots, and visible: not under the view's private /tmp.
    let outside_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let outside = std::fs::canonicalize(outside_dir.path()).unwrap();
    let _inside = UnixListener::bind(ws.join("in.sock")).unwrap();
    let _outside = UnixListener::bind(outside.join("out.sock")).unwrap();
    // A connect through Python when it is here; else through `nc -U`.
    let connect = |path: &Path| {
        format!(
            "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' {} 2>&1 || echo refused",
            path.display()
        )
    };
    if Command::new("python3").arg("-V").output().is_err() {
        return;
    }
    let script = format!(
        "{} ; echo --; {}",
        connect(&ws.join("in.sock")),
        connect(&outside.join("out.sock"))
    );
    let out = run(&write_policy(&ws).hidden(vec![]), &script);
    let (stdout, stderr) = text(&out);
    let (inside, outside) = stdout.split_once("--").unwrap();
    assert!(!inside.contains("refused"), "{stdout}\n{stderr}");
    assert!(outside.contains("Permission denied"), "{stdout}\n{stderr}");
}

#[test]
fn the_opener_opens_what_the_shell_could_and_hides_the_rest() {
    let (_dir, ws) = workspace();
    std::fs::write(ws.join("seen"), "text").unwrap();
    std::fs::create_dir(ws.join("secret")).unwrap();
    std::fs::write(ws.join("secret/key"), "hidden").unwrap();
    let policy = Policy::new(ws.clone()).hidden(vec![ws.join("secret")]);
    let opener = Opener::new(&policy).unwrap();
    opener.ensure_started().unwrap();
    let fd = opener.open(&ws.join("seen"), libc::O_RDONLY).unwrap();
    assert_eq!(
        std::io::read_to_string(std::fs::File::from(fd)).unwrap(),
        "text"
    );
    // The hidden directory shows empty in the opener's view.
    let err = opener
        .open(&ws.join("secret/key"), libc::O_RDONLY)
        .unwrap_err();
    assert!(
        matches!(&err, OpenError::Open(e) if e.raw_os_error() == Some(libc::ENOENT)),
        "{err:?}"
    );
    // The opener's own /proc is empty: not the host's.
    assert!(
        opener
            .open(Path::new("/proc/self/environ"), libc::O_RDONLY)
            .is_err()
    );
    // A regular file comes opened for reading; anything else to look at.
    let Found::File(file) = opener.stat_open(&ws.join("seen")).unwrap() else {
        panic!("a regular file is opened for reading");
    };
    assert_eq!(
        std::io::read_to_string(std::fs::File::from(file)).unwrap(),
        "text"
    );
    std::os::unix::fs::symlink("seen", ws.join("link")).unwrap();
    for other in ["link", "secret"] {
        let found = opener.stat_open(&ws.join(other)).unwrap();
        assert!(matches!(found, Found::Other(_)), "{other}: {found:?}");
    }
    let Found::Other(link) = opener.stat_open(&ws.join("link")).unwrap() else {
        unreachable!()
    };
    let meta = std::fs::File::from(link).metadata().unwrap();
    assert!(meta.file_type().is_symlink());
}
