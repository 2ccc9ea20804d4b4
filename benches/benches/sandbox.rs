//! What confinement costs when a shell starts: a fresh shell that runs
//! `true` and is killed, unconfined (the baseline, same run), confined by
//! the built-in namespaces + Landlock + seccomp (with and without a network
//! namespace of its own, and with no hidden paths), and confined by bubblewrap
//! with the same flags (when `bwrap` is installed).
//!
//! ```text
//! cargo bench -p benches --bench sandbox
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_sandbox::{Persistence, SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell};
use dsh_shell_persistent::{ShellConfig, ShellPool};

fn spawn_cost(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ws = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut group = c.benchmark_group("fresh_shell_true");
    group.measurement_time(Duration::from_secs(10));
    group.sample_size(50);

    let unconfined = ShellPool::new(ShellConfig::new(ws.path()).persistent(false)).unwrap();
    group.bench_function("unconfined_baseline", |b| {
        b.iter(|| rt.block_on(unconfined.run("bench", "true")).unwrap())
    });
    // Resource limits: the rlimits here (a cgroup is never made on this
    // host; the cgroup path is measured in the VM of `.ci/vm-tests`).
    let rlimits = dsh_pty::ResourceLimits::default()
        .open_files(Some(1024))
        .file_size(Some(1 << 30));
    let limited = ShellPool::new(
        ShellConfig::new(ws.path())
            .persistent(false)
            .limits(rlimits),
    )
    .unwrap();
    group.bench_function("unconfined_with_rlimits", |b| {
        b.iter(|| rt.block_on(limited.run("bench", "true")).unwrap())
    });

    let confined = |bubblewrap: Option<PathBuf>| {
        let mut config = SandboxConfig::new(
            SandboxPolicy::default()
                .mode(SandboxMode::WorkspaceWrite)
                .bubblewrap(bubblewrap),
            ShellConfig::new(ws.path()),
        );
        config.restricted = Persistence::OneShot;
        SandboxedShell::new(config).unwrap()
    };
    let native = confined(None);
    let args = serde_json::json!({"command": "true"});
    group.bench_function("confined_namespaces_landlock_seccomp", |b| {
        b.iter(|| rt.block_on(native.execute("bench", &args)).unwrap())
    });
    // What hiding the default credential stores costs (an overlay over each
    // directory that holds them): the same with nothing hidden.
    let mut bare = SandboxConfig::new(
        SandboxPolicy::default()
            .mode(SandboxMode::WorkspaceWrite)
            .hidden_paths(Vec::new()),
        ShellConfig::new(ws.path()),
    );
    bare.restricted = Persistence::OneShot;
    let bare = SandboxedShell::new(bare).unwrap();
    group.bench_function("confined_nothing_hidden", |b| {
        b.iter(|| rt.block_on(bare.execute("bench", &args)).unwrap())
    });
    let mut net = SandboxConfig::new(
        SandboxPolicy::default()
            .mode(SandboxMode::WorkspaceWrite)
            .network(true),
        ShellConfig::new(ws.path()),
    );
    net.restricted = Persistence::OneShot;
    let net = SandboxedShell::new(net).unwrap();
    group.bench_function("confined_with_network", |b| {
        b.iter(|| rt.block_on(net.execute("bench", &args)).unwrap())
    });
    let mut bounded = SandboxConfig::new(
        SandboxPolicy::default()
            .mode(SandboxMode::WorkspaceWrite)
            .tmp_size(Some(64 << 20))
            .tmp_inodes(Some(10_000)),
        ShellConfig::new(ws.path())
            .limits(dsh_pty::ResourceLimits::default().open_files(Some(1024))),
    );
    bounded.restricted = Persistence::OneShot;
    let bounded = SandboxedShell::new(bounded).unwrap();
    group.bench_function("confined_with_tmp_bounds_and_rlimits", |b| {
        b.iter(|| rt.block_on(bounded.execute("bench", &args)).unwrap())
    });
    if std::process::Command::new("bwrap")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let bwrap = confined(Some(PathBuf::from("bwrap")));
        group.bench_function("confined_bubblewrap", |b| {
            b.iter(|| rt.block_on(bwrap.execute("bench", &args)).unwrap())
        });
    }
    group.finish();
}

/// `args` in an owner's persistent shell, unconfined (`unconfined_baseline`)
/// and in workspace-write (`confined`), one after the other.
fn persistent_pair(
    rt: &tokio::runtime::Runtime,
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    ws: &std::path::Path,
    args: &serde_json::Value,
    confined: &str,
) {
    for (name, mode) in [
        ("unconfined_baseline", SandboxMode::DangerFullAccess),
        (confined, SandboxMode::WorkspaceWrite),
    ] {
        let shell = SandboxedShell::new(SandboxConfig::new(
            SandboxPolicy::default().mode(mode),
            ShellConfig::new(ws),
        ))
        .unwrap();
        rt.block_on(shell.execute("bench", args)).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| rt.block_on(shell.execute("bench", args)).unwrap())
        });
        rt.block_on(shell.close_all());
    }
}

/// A call in an owner's persistent shell: unconfined next to confined (the
/// seccomp programs and the namespaces sit on every system call of `bash`).
fn call_cost(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ws = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut group = c.benchmark_group("persistent_call_true");
    group.measurement_time(Duration::from_secs(5));
    let args = serde_json::json!({"command": "true"});
    persistent_pair(
        &rt,
        &mut group,
        ws.path(),
        &args,
        "confined_workspace_write",
    );
    group.finish();
}

/// An editor `view` of a small file: this process reading it (`LocalFs`,
/// the baseline, same run) next to the confined helper opening it for
/// `SandboxFs` in workspace-write, and the floor of that design: a bare
/// `SCM_RIGHTS` round trip with an unconfined child.
fn editor_view_cost(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ws = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = ws.path().join("small.txt");
    std::fs::write(&file, "one\ntwo\nthree\n").unwrap();
    let args = serde_json::json!({"command": "view", "path": file});
    let mut group = c.benchmark_group("editor_view_small_file");
    group.measurement_time(Duration::from_secs(5));
    let local = dsh_editor::Editor::new(dsh_editor::fs::LocalFs::new());
    group.bench_function("local_fs_baseline", |b| {
        b.iter(|| rt.block_on(local.execute(&args)).unwrap())
    });
    let confined = dsh_editor::Editor::new(dsh_sandbox::SandboxFs::new(
        SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite),
        ws.path(),
    ));
    rt.block_on(confined.execute(&args)).unwrap();
    group.bench_function("sandbox_fs_confined_reader", |b| {
        b.iter(|| rt.block_on(confined.execute(&args)).unwrap())
    });
    // The floor of a view through another process: a bare round trip (the
    // path out, an unconfined child's `open`, the descriptor back with
    // SCM_RIGHTS), no view.
    let floor = ScmFloor::start(&file);
    group.bench_function("scm_rights_round_trip_floor", |b| b.iter(|| floor.ask()));
    drop(floor);
    group.finish();

    // An edit and its undo (two str_replace calls), each a stat, a read and
    // an atomic replace (fsync included).
    let edit = |from: &str, to: &str| serde_json::json!({"command": "str_replace", "path": file, "old_str": from, "new_str": to});
    let (there, back) = (edit("two", "TWO"), edit("TWO", "two"));
    let mut group = c.benchmark_group("editor_str_replace_twice");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("local_fs_baseline", |b| {
        b.iter(|| {
            rt.block_on(local.execute(&there)).unwrap();
            rt.block_on(local.execute(&back)).unwrap();
        })
    });
    group.bench_function("sandbox_fs_confined", |b| {
        b.iter(|| {
            rt.block_on(confined.execute(&there)).unwrap();
            rt.block_on(confined.execute(&back)).unwrap();
        })
    });
    group.finish();
}

/// A forked child that opens the path it receives and passes the
/// descriptor back over a `SOCK_SEQPACKET` pair (`SCM_RIGHTS`): the bare
/// round trip of the confined reader's design.
struct ScmFloor {
    socket: std::os::fd::OwnedFd,
    child: libc::pid_t,
    path: std::ffi::CString,
}

impl ScmFloor {
    fn start(path: &std::path::Path) -> ScmFloor {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let mut fds = [0; 2];
        // SAFETY: room for two descriptors.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0);
        // SAFETY: the child makes raw system calls only and `_exit`s.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: as above, on buffers of this frame.
            unsafe {
                let mut request = [0u8; 4200];
                loop {
                    let n = libc::recv(fds[1], request.as_mut_ptr().cast(), request.len(), 0);
                    if n <= 0 {
                        libc::_exit(0);
                    }
                    let fd = libc::open(request.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
                    scm_message(fd, |msg| {
                        libc::sendmsg(fds[1], msg, 0);
                    });
                    libc::close(fd);
                }
            }
        }
        // SAFETY: both were just created; the child holds its own copies.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(theirs);
        assert!(ours.as_raw_fd() >= 0);
        ScmFloor {
            socket: ours,
            child,
            path,
        }
    }

    /// One round trip: the path out, a descriptor back (closed).
    fn ask(&self) {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let socket = self.socket.as_raw_fd();
        let path = self.path.as_bytes_with_nul();
        // SAFETY: sending from and receiving into buffers of this frame.
        unsafe {
            assert!(libc::send(socket, path.as_ptr().cast(), path.len(), 0) > 0);
            scm_message(-1, |msg| {
                assert!(libc::recvmsg(socket, msg, libc::MSG_CMSG_CLOEXEC) > 0);
                let fd = std::ptr::read_unaligned(
                    libc::CMSG_DATA(libc::CMSG_FIRSTHDR(msg)).cast::<i32>(),
                );
                drop(OwnedFd::from_raw_fd(fd));
            });
        }
    }
}

impl Drop for ScmFloor {
    fn drop(&mut self) {
        // SAFETY: the child ends when its socket closes; reaped here.
        unsafe {
            libc::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(&self.socket),
                libc::SHUT_RDWR,
            );
            libc::waitpid(self.child, std::ptr::null_mut(), 0);
        }
    }
}

/// Calls `f` with a message of 4 bytes and room for one descriptor (`fd`
/// in it when `fd >= 0`).
///
/// # Safety
///
/// `f` gets pointers into this frame, valid for its call only.
unsafe fn scm_message(fd: i32, f: impl FnOnce(&mut libc::msghdr)) {
    let mut bytes = [0u8; 4];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: 4,
    };
    let mut control = [0u64; 4];
    // SAFETY: zeroed plain data pointed at buffers of this frame.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        if fd >= 0 {
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), fd);
        }
        f(&mut msg);
    }
}

/// 1,000 Unix-socket connections (connect, accept, close) made by one
/// `python3` in a persistent shell: unconfined (the baseline, same run) and
/// confined, where the supervisor makes every `connect`. The difference
/// over 1,000 is the supervisor's cost per connection.
fn socket_connect_cost(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ws = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let script = "import socket\ns=socket.socket(socket.AF_UNIX)\ns.bind('b.sock'); s.listen(64)\nfor _ in range(1000):\n    c=socket.socket(socket.AF_UNIX); c.connect('b.sock'); s.accept()[0].close(); c.close()\n";
    std::fs::write(ws.path().join("connect.py"), script).unwrap();
    let args = serde_json::json!({"command": "rm -f b.sock; python3 connect.py"});
    let mut group = c.benchmark_group("unix_connect_1000");
    group.measurement_time(Duration::from_secs(10));
    group.sample_size(20);
    persistent_pair(&rt, &mut group, ws.path(), &args, "confined_supervisor");
    group.finish();
}

criterion_group!(
    benches,
    spawn_cost,
    call_cost,
    editor_view_cost,
    socket_connect_cost
);
criterion_main!(benches);
