//! The socket supervisor never holds the sandbox back: in a confined
//! workspace-write shell with the network on, a `connect` that waits does
//! not hold back another process's socket calls, killing its caller frees
//! it, and a send a signal interrupts goes out once. Real kernel, real
//! processes; every listener is the test's own.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;
use common::visible_tmp;

use std::io::Read;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsh_sandbox::{SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell};
use dsh_shell_persistent::ShellConfig;
use serde_json::json;

/// How long any awaited event may take before the test gives up.
const BOUND: Duration = Duration::from_secs(30);

struct Ws {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn workspace() -> Ws {
    let dir = tempfile::tempdir_in(visible_tmp()).unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    Ws { _dir: dir, path }
}

/// A persistent workspace-write shell with the network on (the host's
/// network namespace, so the test's loopback listeners are reachable).
fn networked(ws: &Ws) -> SandboxedShell {
    let policy = SandboxPolicy::default()
        .mode(SandboxMode::WorkspaceWrite)
        .tmp_writable(false)
        .network(true);
    SandboxedShell::new(
        SandboxConfig::new(
            policy,
            ShellConfig::new(&ws.path).timeout(Duration::from_secs(60)),
        )
        .restricted(dsh_sandbox::Persistence::Persistent),
    )
    .unwrap()
}

async fn run(s: &SandboxedShell, cmd: &str) -> String {
    s.execute("agent", &json!({"command": cmd})).await.unwrap()
}

/// A loopback listener that never accepts and whose backlog is full: a
/// `connect` to it waits (its SYN is dropped) until its caller gives up.
/// The connection that fills it is returned with it.
fn full_listener() -> (TcpListener, TcpStream, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: a plain system call on the listener's descriptor.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    let port = listener.local_addr().unwrap().port();
    // A backlog of 0 holds one connection; this one fills it.
    let filler = TcpStream::connect(("127.0.0.1", port)).unwrap();
    (listener, filler, port)
}

/// How many sockets of this network namespace are in `SYN_SENT` towards
/// loopback `port`.
fn connecting_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3 && fields[2] == remote && fields[3] == "02"
        })
        .count()
}

/// Waits (`BOUND` at most) until `connecting_to(port)` is `n`.
async fn wait_connecting(port: u16, n: usize) -> bool {
    let deadline = Instant::now() + BOUND;
    while connecting_to(port) != n {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Starts, in the background of `s`, a process that connects to loopback
/// `port` with a blocking socket; returns its pid (in the sandbox).
async fn background_connect(s: &SandboxedShell, port: u16) -> String {
    let out = run(
        s,
        &format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))' >/dev/null 2>&1 & echo $!"
        ),
    )
    .await;
    // The shell's job notice comes first.
    let pid = out.lines().last().unwrap_or_default().to_owned();
    assert!(pid.parse::<u32>().is_ok(), "{out}");
    pid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_waits_holds_back_no_other_socket_call() {
    let ws = workspace();
    let (_full, _filler, full_port) = full_listener();
    let healthy = TcpListener::bind("127.0.0.1:0").unwrap();
    let healthy_port = healthy.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(BOUND)).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let unix = UnixListener::bind(ws.path.join("ok.sock")).unwrap();

    let s = networked(&ws);
    let before = connecting_to(full_port);
    let pid = background_connect(&s, full_port).await;
    assert!(
        wait_connecting(full_port, before + 1).await,
        "the background connect did not start waiting"
    );

    // Meanwhile, another process's socket calls all go through.
    let others = format!(
        r#"python3 -c '
import socket
socket.create_connection(("127.0.0.1", {healthy_port})); print("tcp")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"ping", ("127.0.0.1", {udp_port})); print("udp")
x = socket.socket(socket.AF_UNIX); x.connect("ok.sock"); print("unix")
'"#
    );
    assert_eq!(run(&s, &others).await, "tcp\nudp\nunix");
    // The first is still waiting: it was not answered to make room.
    assert_eq!(connecting_to(full_port), before + 1);
    healthy.set_nonblocking(true).unwrap();
    assert!(healthy.accept().is_ok(), "the healthy listener saw nothing");
    let mut buf = [0u8; 16];
    let (n, _) = udp.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"ping");
    unix.set_nonblocking(true).unwrap();
    assert!(unix.accept().is_ok(), "the Unix listener saw nothing");

    assert_eq!(
        run(&s, &format!("kill {pid}; wait {pid}; echo ok")).await,
        "ok"
    );
    s.close_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_caller_that_waits_frees_its_call() {
    let ws = workspace();
    let (_full, _filler, full_port) = full_listener();
    let healthy = TcpListener::bind("127.0.0.1:0").unwrap();
    let healthy_port = healthy.local_addr().unwrap().port();

    let s = networked(&ws);
    let before = connecting_to(full_port);
    let pid = background_connect(&s, full_port).await;
    assert!(
        wait_connecting(full_port, before + 1).await,
        "the background connect did not start waiting"
    );
    assert_eq!(
        run(&s, &format!("kill -9 {pid}; wait {pid}; echo killed")).await,
        "killed"
    );
    // The supervisor let the call go: the socket it held for it is closed,
    // and with it the connection attempt (the kernel would otherwise go on
    // sending SYNs for minutes).
    assert!(
        wait_connecting(full_port, before).await,
        "the killed caller's connect is still held"
    );
    // And the next connect is answered.
    assert_eq!(
        run(
            &s,
            &format!("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {healthy_port})); print(\"connected\")'")
        )
        .await,
        "connected"
    );
    healthy.set_nonblocking(true).unwrap();
    assert!(healthy.accept().is_ok());
    s.close_all().await;
}

/// A confined process sends one byte at a time while its child signals it
/// as fast as it can (the handler does nothing; Python retries a call that
/// a signal interrupted, as `SA_RESTART` would): every byte arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_interrupted_by_signals_arrives_once() {
    const TRIES: usize = 1000;
    let ws = workspace();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let counted = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut all = Vec::new();
        conn.read_to_end(&mut all).unwrap();
        all.len()
    });
    let script = format!(
        r#"
import os, signal, socket
signal.signal(signal.SIGUSR1, lambda *a: None)
s = socket.create_connection(("127.0.0.1", {port}))
parent = os.getpid()
child = os.fork()
if child == 0:
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    while True:
        os.kill(parent, signal.SIGUSR1)
for _ in range({TRIES}):
    assert s.sendmsg([b"x"]) == 1
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
s.close()
print("sent")
"#
    );
    std::fs::write(ws.path.join("signalled.py"), script).unwrap();
    let s = networked(&ws);
    assert_eq!(run(&s, "python3 signalled.py").await, "sent");
    assert_eq!(counted.join().unwrap(), TRIES, "bytes at the listener");
    s.close_all().await;
}

/// The `key:` line of `/proc/<pid>/status`, its value trimmed.
fn status(pid: u32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervisor_runs_under_its_own_filter() {
    let ws = workspace();
    let s = networked(&ws);
    let mark = format!("dsh-supervised-{}", std::process::id());
    run(&s, &format!("bash -c 'exec -a {mark} sleep 1000' &")).await;
    // This host's /proc shows the sandbox's processes: the marked one's
    // parent is the shell, whose parent is init, whose parent is the
    // supervisor.
    let deadline = Instant::now() + BOUND;
    let marked = loop {
        let found = std::fs::read_dir("/proc").unwrap().find_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            cmdline.starts_with(mark.as_bytes()).then_some(pid)
        });
        if let Some(pid) = found {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the marked process did not start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let parent = |pid: u32| status(pid, "PPid").parse::<u32>().unwrap();
    let supervisor = parent(parent(parent(marked)));
    assert_eq!(status(supervisor, "NoNewPrivs"), "1");
    assert_eq!(status(supervisor, "Seccomp"), "2", "no filter of its own");
    assert_eq!(run(&s, "kill %1; wait; echo ok").await, "ok");
    s.close_all().await;
}
