//! The escape suite: every way out of a confined shell or editor we know of,
//! tried against the real persistent shell and the real editor, in
//! read-only and workspace-write, as this user (root in CI) and as an
//! unprivileged user, and — with `--include-ignored` where `bwrap` is
//! installed — against bubblewrap doing the namespaces and mounts.
//!
//! After every technique the suite checks that nothing outside changed
//! (content, mode, owner, times, link count, extended attributes, entries),
//! that a process the test started is unharmed (alive, nice value, limits,
//! CPU affinity), that the shell still works with its state, and that the
//! technique's own probe did not print `ESCAPED`. Techniques that would
//! change host-wide state if the sandbox failed first check, without side
//! effects, that the namespace concerned is not the host's, and do nothing
//! otherwise (the check itself then fails the technique).
//!
//! Each technique is a module of tests of its own (the list's macro makes
//! them): `ID::native` tries it as this user in read-only and in
//! workspace-write, each over a fresh lab and shell; `ID::native_unprivileged`
//! runs `ID::native` in a copy of this binary as uid 65534 (when run as
//! root); `ID::bubblewrap` and `ID::bubblewrap_unprivileged` (ignored:
//! they need `bwrap`) do the same with bubblewrap. So
//! `cargo test -p dsh-sandbox --test escape unix_socket_after_start` runs
//! that technique alone, everywhere the suite runs it.
#![cfg(target_os = "linux")]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::print_stderr,
    clippy::print_stdout,
    clippy::type_complexity
)]

mod common;
#[path = "escape/git_plant.rs"]
mod git_plant;
use common::{ended_within, visible_tmp};

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use dsh_editor::Editor;
use dsh_sandbox::{SandboxConfig, SandboxFs, SandboxMode, SandboxPolicy, SandboxedShell};
use dsh_shell_persistent::ShellConfig;
use serde_json::json;

const SYS_PY: &str = include_str!("escape/sys.py");

/// The uid the suite drops to when it runs as root.
const UNPRIVILEGED: u32 = 65534;

// ---------------------------------------------------------------------------
// Snapshots of what must not change.

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    content: Option<Vec<u8>>,
    link: Option<PathBuf>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

fn xattrs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: buffers of the given sizes.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
    {
        let cname = CString::new(name).unwrap();
        let mut value = vec![0u8; 4096];
        // SAFETY: as above.
        let m = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        value.truncate(m.max(0) as usize);
        out.push((name.to_vec(), value));
    }
    out.sort();
    out
}

fn snapshot_into(root: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        return;
    };
    let ft = meta.file_type();
    let kind = if ft.is_symlink() {
        "link"
    } else if ft.is_dir() {
        "dir"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    };
    out.insert(
        root.to_owned(),
        Entry {
            kind,
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            nlink: meta.nlink(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            content: ft
                .is_file()
                .then(|| std::fs::read(root).unwrap_or_default()),
            link: ft.is_symlink().then(|| std::fs::read_link(root).unwrap()),
            xattrs: xattrs(root),
        },
    );
    if ft.is_dir() {
        let mut names: Vec<_> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for name in names {
            snapshot_into(&name, out);
        }
    }
}

fn snapshot(roots: &[&Path]) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    for root in roots {
        snapshot_into(root, &mut out);
    }
    out
}

fn diff(before: &BTreeMap<PathBuf, Entry>, after: &BTreeMap<PathBuf, Entry>) -> Vec<String> {
    let mut out = Vec::new();
    for (path, entry) in before {
        match after.get(path) {
            None => out.push(format!("removed {}", path.display())),
            Some(now) if now != entry => {
                out.push(format!("changed {}: {entry:?} -> {now:?}", path.display()))
            }
            _ => {}
        }
    }
    for path in after.keys() {
        if !before.contains_key(path) {
            out.push(format!("new {}", path.display()));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The lab: what the test creates, and the only things it touches.

struct Lab {
    _base: tempfile::TempDir,
    ws: PathBuf,
    out: PathBuf,
    tools: PathBuf,
    /// A workspace whose `.git` is a symlink to a directory inside it.
    wsl: PathBuf,
    /// A workspace whose `.git` is a `gitdir:` file (a worktree).
    wsf: PathBuf,
    /// A workspace without `.git`.
    wsn: PathBuf,
    victim: Child,
    mark: String,
    shm: libc::c_int,
    shm_key: libc::key_t,
    msg_key: libc::key_t,
    tmp_socket: PathBuf,
    /// A socket in the host's `/run` (as root) or `/run/lock`.
    run_socket: Option<PathBuf>,
    /// Sockets outside that no technique may reach, checked after each.
    listeners: Vec<(String, std::os::unix::net::UnixListener)>,
    datagrams: Vec<(String, std::os::unix::net::UnixDatagram)>,
    /// A TCP listener and a UDP socket on the host's loopback (`$TCPPORT`,
    /// `$UDPPORT`), checked as the Unix ones.
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
    /// A directory of this test's under /var/tmp, with a listener.
    var_tmp: tempfile::TempDir,
    /// A directory of this test's in `$HOME` with a listener, where `$HOME`
    /// is a directory outside `/tmp` this user may write.
    home: Option<tempfile::TempDir>,
    /// A credential store the policy hides (a directory and a file).
    secrets: PathBuf,
    secret_file: PathBuf,
    abstract_name: String,
    python: String,
}

/// Files beneath `root` with a set-user-ID or set-group-ID bit (a
/// directory's set-group-ID bit, inherited from its parent, plants nothing).
fn set_id_files(root: &Path) -> Vec<PathBuf> {
    snapshot(&[root])
        .into_iter()
        .filter(|(_, e)| e.kind != "dir" && e.mode & 0o6000 != 0)
        .map(|(p, _)| p)
        .collect()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid strings and buffer.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "setxattr on {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

fn ns(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

impl Lab {
    /// The lab lives where the sandbox can see it (not under the private
    /// `/tmp`): `DSH_ESCAPE_DIR` (set for the unprivileged run) or
    /// [`visible_tmp`].
    fn new() -> Lab {
        let parent = std::env::var_os("DSH_ESCAPE_DIR").map_or_else(visible_tmp, PathBuf::from);
        let base_dir = tempfile::Builder::new()
            .prefix("dsh-escape-")
            .tempdir_in(parent)
            .unwrap();
        let base = std::fs::canonicalize(base_dir.path()).unwrap();
        let ws = base.join("ws");
        let out = base.join("out");
        let tools = base.join("tools");
        write(&ws.join("a.txt"), "inside\n");
        write(&ws.join("src/main.rs"), "fn main() {}\n");
        write(&ws.join(".git/config"), "[core]\n\tbare = false\n");
        write(&ws.join(".git/HEAD"), "ref: refs/heads/main\n");
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        write(&out.join("file.txt"), "outside\n");
        write(&out.join("dir/inner.txt"), "inner\n");
        write(&out.join("exec.sh"), "#!/bin/sh\necho hi\n");
        std::fs::set_permissions(
            out.join("exec.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::fs::create_dir_all(out.join("emptydir")).unwrap();
        std::os::unix::fs::symlink(out.join("file.txt"), out.join("link")).unwrap();
        set_xattr(&out.join("file.txt"), "user.keep", b"1");
        write(&tools.join("sys.py"), SYS_PY);
        let secrets = base.join("secrets");
        write(&secrets.join("id_ed25519"), "PRIVATE KEY\n");
        let secret_file = base.join("token.txt");
        write(&secret_file, "TOKEN=abc\n");

        let wsl = base.join("wsl");
        write(&wsl.join(".realgit/config"), "[core]\n");
        std::fs::create_dir_all(wsl.join(".realgit/hooks")).unwrap();
        std::os::unix::fs::symlink(".realgit", wsl.join(".git")).unwrap();
        let wsf = base.join("wsf");
        write(&wsf.join(".main/.git/config"), "[core]\n");
        std::fs::create_dir_all(wsf.join(".main/.git/hooks")).unwrap();
        write(
            &wsf.join(".main/.git/worktrees/wt/HEAD"),
            "ref: refs/heads/wt\n",
        );
        write(&wsf.join(".main/.git/worktrees/wt/commondir"), "../..\n");
        write(&wsf.join(".git"), "gitdir: .main/.git/worktrees/wt\n");
        let wsn = base.join("wsn");
        write(&wsn.join("notes.txt"), "no repository here\n");
        // Everything the unprivileged run needs to reach.
        for dir in [&base, &ws, &out, &tools, &wsl, &wsf, &wsn, &secrets] {
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }

        // Unique per lab: labs are made concurrently, in this process and
        // in the unprivileged runs' copies of it.
        static LABS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = LABS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}-{n}", std::process::id());
        let mark = format!("dsh-victim-{id}");
        // Without this process's standard streams: a victim left behind by
        // a failed test holds no pipe of the unprivileged run's parent open.
        let mut victim = Command::new("sleep")
            .arg0(&mark)
            .arg("3600")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // `spawn` returns while the kernel may still be setting up the new
        // program's arguments: wait until the victim is `sleep` under its
        // name (no event says so: looked at, bounded).
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read(format!("/proc/{}/cmdline", victim.id()))
            .map_or(true, |c| !c.starts_with(mark.as_bytes()))
        {
            if Instant::now() > deadline {
                let _ = victim.kill();
                let _ = victim.wait();
                panic!("the victim did not start");
            }
            std::thread::yield_now();
        }

        // A segment under a key no other lab holds, and a key no message
        // queue has (one appears only if the sandbox fails).
        let (shm, shm_key, msg_key) = (0u32..1000)
            .find_map(|attempt| {
                let spread = std::process::id()
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(n.wrapping_mul(40_503))
                    .wrapping_add(attempt.wrapping_mul(97));
                let shm_key = (0x5d00_0000 | (spread & 0x000f_ffff)) as libc::key_t;
                let msg_key = shm_key ^ 0x00a0_0000;
                // SAFETY: a lookup of a key this test chose.
                if unsafe { libc::msgget(msg_key, 0) } >= 0 {
                    return None;
                }
                // SAFETY: plain SysV calls on a segment this test creates
                // and removes.
                let shm = unsafe {
                    libc::shmget(shm_key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o600)
                };
                (shm >= 0).then_some((shm, shm_key, msg_key))
            })
            .unwrap_or_else(|| panic!("shmget: {}", std::io::Error::last_os_error()));
        // SAFETY: attaching our own segment and writing within its size.
        unsafe {
            let addr = libc::shmat(shm, std::ptr::null(), 0);
            std::ptr::copy_nonoverlapping(b"intact".as_ptr(), addr.cast::<u8>(), 6);
            libc::shmdt(addr);
        }

        let mut listeners = Vec::new();
        let mut listen = |path: &Path| -> bool {
            match std::os::unix::net::UnixListener::bind(path) {
                Ok(l) => {
                    l.set_nonblocking(true).unwrap();
                    listeners.push((path.display().to_string(), l));
                    true
                }
                Err(_) => false,
            }
        };
        let tmp_socket = std::fs::canonicalize(std::env::temp_dir())
            .unwrap()
            .join(format!("dsh-escape-{id}.sock"));
        assert!(listen(&tmp_socket));
        let run_socket = ["/run", "/run/lock"]
            .into_iter()
            .map(|dir| PathBuf::from(format!("{dir}/dsh-escape-{id}.sock")))
            .find(|socket| listen(socket));
        assert!(listen(&out.join("stream.sock")));
        let var_tmp = tempfile::Builder::new()
            .prefix("dsh-escape-sock-")
            .tempdir_in("/var/tmp")
            .unwrap();
        std::fs::set_permissions(
            var_tmp.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        assert!(listen(&var_tmp.path().join("stream.sock")));
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_absolute() && !h.starts_with("/tmp"))
            .and_then(|h| {
                tempfile::Builder::new()
                    .prefix(".dsh-escape-sock-")
                    .tempdir_in(h)
                    .ok()
            })
            .filter(|d| listen(&d.path().join("stream.sock")));
        let abstract_name = format!("dsh-escape-{id}");
        {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
                .unwrap();
            let l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
            l.set_nonblocking(true).unwrap();
            listeners.push((format!("@{abstract_name}"), l));
        }
        let dgram = std::os::unix::net::UnixDatagram::bind(out.join("dgram.sock")).unwrap();
        dgram.set_nonblocking(true).unwrap();
        let datagrams = vec![(out.join("dgram.sock").display().to_string(), dgram)];
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("the escape suite needs python3 in /usr/bin or /usr/local/bin")
            .to_owned();
        Lab {
            _base: base_dir,
            ws,
            out,
            tools,
            wsl,
            wsf,
            wsn,
            victim,
            mark,
            shm,
            shm_key,
            msg_key,
            tmp_socket,
            run_socket,
            listeners,
            datagrams,
            tcp,
            udp,
            var_tmp,
            home,
            secrets,
            secret_file,
            abstract_name,
            python,
        }
    }

    /// The sockets outside that were reached since the last look (each
    /// connection accepted and each datagram read, so the next look starts
    /// clean).
    fn reached(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, l) in &self.listeners {
            while let Ok((conn, _)) = l.accept() {
                drop(conn);
                out.push(format!("a connection reached {name}"));
            }
        }
        for (name, d) in &self.datagrams {
            let mut buf = [0u8; 64];
            while let Ok(n) = d.recv(&mut buf) {
                out.push(format!(
                    "a datagram reached {name}: {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ));
            }
        }
        while let Ok((conn, _)) = self.tcp.accept() {
            drop(conn);
            out.push("a connection reached the host's loopback TCP listener".to_owned());
        }
        let mut buf = [0u8; 64];
        while self.udp.recv(&mut buf).is_ok() {
            out.push("a datagram reached the host's loopback UDP socket".to_owned());
        }
        out
    }

    /// The workspace a technique names ("ws", "wsl", "wsf", "wsn").
    fn workspace(&self, key: &str) -> &Path {
        match key {
            "wsl" => &self.wsl,
            "wsf" => &self.wsf,
            "wsn" => &self.wsn,
            _ => &self.ws,
        }
    }

    /// What closed shells left in the root without a repository: no
    /// placeholder, and nothing the host's own git takes for a repository
    /// (or runs the fsmonitor of).
    fn root_without_repository(&self) -> Vec<String> {
        let mut out = Vec::new();
        for name in [".git", "HEAD"] {
            if self.wsn.join(name).is_dir() {
                out.push(format!("the {name} placeholder was left behind"));
            }
        }
        let git = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(&self.wsn)
            .env("GIT_CEILING_DIRECTORIES", self.wsn.parent().unwrap())
            .env_remove("GIT_DIR")
            .output()
            .unwrap();
        let ran_payload = self.out.join("fsmonitor-ran");
        if git.status.success() || ran_payload.exists() {
            out.push(format!(
                "the host's git status found a repository in the workspace root{}: {}",
                if ran_payload.exists() {
                    " and ran its fsmonitor"
                } else {
                    ""
                },
                String::from_utf8_lossy(&git.stderr)
            ));
        }
        out
    }

    /// Everything outside the writable workspace that must not change.
    fn outside(&self) -> BTreeMap<PathBuf, Entry> {
        snapshot(&[
            &self.out,
            &self.tools,
            &self.secrets,
            &self.secret_file,
            &self.ws.join(".git"),
            &self.wsl.join(".git"),
            &self.wsl.join(".realgit"),
            &self.wsf.join(".git"),
            &self.wsf.join(".main"),
        ])
    }

    /// The victim's state as other processes see it.
    fn victim_state(&self) -> (bool, String, String, String) {
        let pid = self.victim.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let nice = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(16))
            .unwrap_or("")
            .to_owned();
        let alive = !stat.is_empty() && !stat.contains(") Z");
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
        let affinity = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("Cpus_allowed"))
            .collect::<Vec<_>>()
            .join(";");
        (alive, nice, limits, affinity)
    }

    fn shm_content(&self) -> Vec<u8> {
        // SAFETY: our own segment, read within its size.
        unsafe {
            let addr = libc::shmat(self.shm, std::ptr::null(), libc::SHM_RDONLY);
            let mut buf = vec![0u8; 6];
            std::ptr::copy_nonoverlapping(addr.cast::<u8>(), buf.as_mut_ptr(), 6);
            libc::shmdt(addr);
            buf
        }
    }

    fn env(&self, workspace: &Path) -> Vec<(String, String)> {
        let mut env = vec![
            ("OUT".into(), self.out.display().to_string()),
            ("WS".into(), workspace.display().to_string()),
            // Git never looks above the workspace for a repository: when a
            // technique has removed `$WS/.git` (in the unconfined control
            // run it succeeds), `git -C $WS` must not find the checkout
            // this test runs from and change its configuration.
            (
                "GIT_CEILING_DIRECTORIES".into(),
                workspace
                    .parent()
                    .unwrap_or(workspace)
                    .display()
                    .to_string(),
            ),
            ("T".into(), self.tools.join("sys.py").display().to_string()),
            (
                "TCPPORT".into(),
                self.tcp.local_addr().unwrap().port().to_string(),
            ),
            (
                "UDPPORT".into(),
                self.udp.local_addr().unwrap().port().to_string(),
            ),
            ("PY".into(), self.python.clone()),
            ("VICTIM".into(), self.victim.id().to_string()),
            ("MARK".into(), self.mark.clone()),
            ("SHMKEY".into(), self.shm_key.to_string()),
            ("MSGKEY".into(), self.msg_key.to_string()),
            ("TMPSOCK".into(), self.tmp_socket.display().to_string()),
            ("SECRETS".into(), self.secrets.display().to_string()),
            ("SECRET_FILE".into(), self.secret_file.display().to_string()),
            (
                "VARSOCK".into(),
                self.var_tmp
                    .path()
                    .join("stream.sock")
                    .display()
                    .to_string(),
            ),
            ("ABSTRACT".into(), format!("@{}", self.abstract_name)),
            ("HOST_PID".into(), ns("pid")),
            ("HOST_MNT".into(), ns("mnt")),
            ("HOST_IPC".into(), ns("ipc")),
            ("HOST_UTS".into(), ns("uts")),
            ("HOST_NET".into(), ns("net")),
            ("HOST_USER".into(), ns("user")),
            ("HOST_CGROUP".into(), ns("cgroup")),
            ("DSH_KEEP".into(), "unset".into()),
        ];
        if let Some(home) = &self.home {
            let socket = home.path().join("stream.sock");
            env.push(("HOMESOCK".into(), socket.display().to_string()));
        }
        if let Some(socket) = &self.run_socket {
            env.push(("RUNSOCK".into(), socket.display().to_string()));
        }
        env
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.victim.kill();
        let _ = self.victim.wait();
        // SAFETY: removing the segment this test created.
        unsafe { libc::shmctl(self.shm, libc::IPC_RMID, std::ptr::null_mut()) };
        let _ = std::fs::remove_file(&self.tmp_socket);
        if let Some(s) = &self.run_socket {
            let _ = std::fs::remove_file(s);
        }
        // A queue the sandbox failed to keep in its own IPC namespace.
        // SAFETY: msgget/msgctl on a key this test chose.
        unsafe {
            let q = libc::msgget(self.msg_key, 0);
            if q >= 0 {
                libc::msgctl(q, libc::IPC_RMID, std::ptr::null_mut());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Techniques.

struct Technique {
    /// The name of the technique's tests: `cargo test --test escape ID`
    /// runs this technique alone, in every engine and as every user.
    id: &'static str,
    name: &'static str,
    /// Which workspace: "ws", "wsl", "wsf", "wsn".
    workspace: &'static str,
    cmd: String,
    /// Whether bubblewrap holds it too (it has tests there).
    bubblewrap: bool,
}

fn t(name: &'static str, cmd: &str) -> Technique {
    tw(name, "ws", cmd)
}

/// A technique only the built-in engine holds: Unix sockets are mediated
/// by its supervisor, and bubblewrap has none. (The same technique as
/// [`t`]: the list's macro reads the name `tn` and makes no bubblewrap
/// tests of it.)
fn tn(name: &'static str, cmd: &str) -> Technique {
    t(name, cmd)
}

fn tw(name: &'static str, workspace: &'static str, cmd: &str) -> Technique {
    Technique {
        id: "",
        name,
        workspace,
        cmd: cmd.to_owned(),
        bubblewrap: true,
    }
}

/// [`tw`] for a technique only the built-in engine holds (as [`tn`]).
fn twn(name: &'static str, workspace: &'static str, cmd: &str) -> Technique {
    tw(name, workspace, cmd)
}

/// `cmd` runs only if namespace `kind` is not the host's; otherwise the
/// probe prints `ESCAPED` (the isolation it relies on is missing).
fn guarded(kind: &str, cmd: &str) -> String {
    let var = format!("HOST_{}", kind.to_uppercase());
    format!(
        "if [ \"$(readlink /proc/self/ns/{kind})\" = \"${var}\" ]; then echo ESCAPED-shared-{kind}; else {cmd}; fi"
    )
}

/// The tests of one check, each a test of its own in module `$id` (whose
/// `check(engine)` runs it): `native` (the built-in engine, as this user),
/// `native_unprivileged` (as uid 65534: a copy of this binary runs
/// `$id::native`), and, ignored unless bubblewrap is installed,
/// `bubblewrap` and `bubblewrap_unprivileged` — none for a technique made
/// with `tn` or `twn`, which bubblewrap cannot hold.
macro_rules! engines {
    (@native $id:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn native() {
            check(Engine::Native).await;
        }

        #[test]
        fn native_unprivileged() {
            as_unprivileged(
                concat!(stringify!($id), "::native"),
                stringify!($id),
                Engine::Native,
                check,
            );
        }
    };
    (@bubblewrap $id:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs bwrap (bubblewrap); .ci/run installs it and runs this"]
        async fn bubblewrap() {
            check(Engine::Bubblewrap).await;
        }

        #[test]
        #[ignore = "needs bwrap (bubblewrap); .ci/run installs it and runs this"]
        fn bubblewrap_unprivileged() {
            as_unprivileged(
                concat!(stringify!($id), "::bubblewrap"),
                stringify!($id),
                Engine::Bubblewrap,
                check,
            );
        }
    };
    ($id:ident, tn) => {
        engines!(@native $id);
    };
    ($id:ident, twn) => {
        engines!(@native $id);
    };
    ($id:ident, $make:ident) => {
        engines!(@native $id);
        engines!(@bubblewrap $id);
    };
}

/// Whether a technique made with `$make` has bubblewrap tests.
macro_rules! under_bubblewrap {
    (tn) => {
        false
    };
    (twn) => {
        false
    };
    ($make:ident) => {
        true
    };
}

/// The list of techniques: `id = t(name, cmd);` (or `tn`, `tw`, `twn`)
/// makes module `id`, whose `technique()` is the technique and whose tests
/// ([`engines`]) try it in read-only and in workspace-write, each over a
/// lab of its own.
macro_rules! techniques {
    ($( $id:ident = $make:ident $args:tt; )*) => {
        $(
            mod $id {
                use super::*;

                pub(super) fn technique() -> Technique {
                    Technique {
                        id: stringify!($id),
                        bubblewrap: under_bubblewrap!($make),
                        ..$make $args
                    }
                }

                async fn check(engine: Engine) {
                    technique_holds(technique(), engine).await;
                }

                engines!($id, $make);
            }
        )*

        /// Every technique, in the order of the list.
        fn techniques() -> Vec<Technique> {
            vec![$( $id::technique() ),*]
        }
    };
}

techniques! {
    // Writing outside the writable roots.
    create_a_file_outside = t("create a file outside", "touch $OUT/new && echo ESCAPED");
    overwrite_a_file_outside = t(
        "overwrite a file outside",
        "echo x > $OUT/file.txt && echo ESCAPED",
    );
    append_to_a_file_outside = t(
        "append to a file outside",
        "echo x >> $OUT/file.txt && echo ESCAPED",
    );
    truncate_a_file_outside = t(
        "truncate a file outside",
        "truncate -s 0 $OUT/file.txt && echo ESCAPED",
    );
    remove_a_file_outside = t(
        "remove a file outside",
        "rm -f $OUT/file.txt && [ ! -e $OUT/file.txt ] && echo ESCAPED",
    );
    rename_a_file_outside = t(
        "rename a file outside",
        "mv $OUT/file.txt $OUT/moved && echo ESCAPED",
    );
    make_a_directory_outside = t("make a directory outside", "mkdir $OUT/d2 && echo ESCAPED");
    remove_a_directory_outside = t(
        "remove a directory outside",
        "rmdir $OUT/emptydir && echo ESCAPED",
    );
    make_a_symlink_outside = t(
        "symlink outside",
        "ln -s /etc/passwd $OUT/l2 && echo ESCAPED",
    );
    hard_link_an_outside_file_in = t(
        "hard link an outside file into the workspace",
        "ln $OUT/file.txt $WS/hard && echo ESCAPED",
    );
    write_through_a_symlink_to_outside = t(
        "write through a workspace symlink to outside",
        "ln -sf $OUT/file.txt $WS/to-out; echo x > $WS/to-out && echo ESCAPED",
    );
    climb_out_with_dotdot = t(
        "climb out with ..",
        "echo x > $WS/../out/new && echo ESCAPED",
    );
    sed_in_place_outside = t(
        "in-place edit outside (sed -i)",
        "sed -i s/outside/pwned/ $OUT/file.txt && echo ESCAPED",
    );
    dd_into_a_file_outside = t(
        "dd into a file outside",
        "echo pwned | dd of=$OUT/file.txt conv=notrunc status=none && echo ESCAPED",
    );
    move_a_file_over_an_outside_one = t(
        "move a workspace file over an outside one",
        "echo pwned > $WS/mv-src; mv -f $WS/mv-src $OUT/file.txt && echo ESCAPED",
    );
    o_tmpfile_outside = t("O_TMPFILE outside", "$PY $T o_tmpfile $OUT");
    fifo_outside = t("fifo outside", "mkfifo $OUT/fifo && echo ESCAPED");
    reopen_read_only_fd_for_writing = t(
        "reopen a read-only descriptor for writing through /proc/self/fd",
        "exec 3<$OUT/file.txt; echo x > /proc/self/fd/3 && echo ESCAPED; exec 3<&-",
    );
    write_through_proc_1_root = t(
        "write through init's root (/proc/1/root)",
        "echo x > /proc/1/root$OUT/file.txt && echo ESCAPED",
    );
    write_through_proc_self_cwd = t(
        "write through a sibling's cwd (/proc/self/cwd/..)",
        "cd $OUT/dir && echo x > /proc/self/cwd/inner.txt && echo ESCAPED; cd $WS",
    );
    // Metadata of files outside.
    chmod_4777_outside = t(
        "chmod 4777 outside",
        "chmod 4777 $OUT/exec.sh && echo ESCAPED",
    );
    chmod_a_directory_outside = t(
        "chmod a directory outside",
        "chmod 777 $OUT/dir && echo ESCAPED",
    );
    chown_outside = t(
        "chown outside",
        "chown 12345:12345 $OUT/file.txt && echo ESCAPED",
    );
    chown_a_symlink_outside = t(
        "chown a symlink outside (lchown)",
        "chown -h 12345 $OUT/link && echo ESCAPED",
    );
    touch_d_outside = t(
        "set times outside (touch -d)",
        "touch -d 2000-01-01 $OUT/file.txt && echo ESCAPED",
    );
    utime_outside = t(
        "set times outside (utime)",
        "$PY -c 'import os,sys; os.utime(sys.argv[1], (0, 0)); print(\"ESCAPED\")' $OUT/file.txt",
    );
    user_xattr_outside = t(
        "user xattr outside",
        "$PY $T setxattr $OUT/file.txt user.evil 31",
    );
    remove_an_xattr_outside = t(
        "remove an xattr outside",
        "$PY $T removexattr $OUT/file.txt user.keep",
    );
    security_capability_outside = t(
        "security.capability outside",
        "$PY $T setxattr $OUT/exec.sh security.capability 0100000200200000000000000000000000000000",
    );
    posix_acl_outside = t(
        "POSIX ACL outside",
        "$PY $T setxattr $OUT/file.txt system.posix_acl_access 0200000001000600ffffffff04000400ffffffff10000400ffffffff20000400ffffffff",
    );
    trusted_xattr_outside = t(
        "trusted xattr outside",
        "$PY $T setxattr $OUT/file.txt trusted.evil 31",
    );
    // File handles and links that bypass paths.
    open_by_handle_at_outside = t(
        "open_by_handle_at outside",
        "$PY $T handle_open $OUT/file.txt",
    );
    open_by_handle_at_dot_git = t(
        "open_by_handle_at .git/config",
        "$PY $T handle_open $WS/.git/config",
    );
    linkat_empty_path_of_dot_git = t(
        "linkat(AT_EMPTY_PATH) of .git/config",
        "$PY $T linkat_empty $WS/.git/config $WS/gitlink",
    );
    linkat_empty_path_of_outside = t(
        "linkat(AT_EMPTY_PATH) of an outside file",
        "$PY $T linkat_empty $OUT/file.txt $WS/outlink",
    );
    // Devices.
    block_device_node = t(
        "block device node in the workspace",
        "$PY $T mknod $WS/blk block 7 0",
    );
    char_device_node_mem = t(
        "character device node in the workspace (mem)",
        "mknod $WS/mem c 1 1 && echo ESCAPED",
    );
    device_node_outside = t(
        "device node outside",
        "mknod $OUT/null c 1 3 && echo ESCAPED",
    );
    host_disks_in_dev = t(
        "host disks visible in /dev",
        "ls /dev/sd* /dev/vd* /dev/nvme* /dev/loop* /dev/mem /dev/kmsg /dev/port 2>/dev/null | grep . && echo ESCAPED",
    );
    kernel_log_device = t("the kernel log device", "[ -e /dev/kmsg ] && echo ESCAPED");
    loop_device_control = t(
        "loop device control",
        "losetup -f 2>&1; [ -e /dev/loop-control ] && echo ESCAPED",
    );
    // Mounts.
    bind_the_workspace_over_outside = t(
        "bind the workspace over outside",
        &guarded("mnt", "$PY $T mount_bind $WS $OUT"),
    );
    remount_root_read_write = t(
        "remount / read-write",
        &guarded("mnt", "$PY $T remount_rw /"),
    );
    unmount_the_private_tmp = t(
        "unmount the private /tmp",
        &guarded("mnt", "$PY $T umount /tmp"),
    );
    unmount_the_read_only_dot_git = t(
        "unmount the read-only .git",
        &guarded("mnt", "$PY $T umount $WS/.git"),
    );
    open_tree_clone = t("open_tree clone", "$PY $T open_tree /");
    fsopen_a_new_filesystem = t("fsopen a new filesystem", "$PY $T fsopen");
    chroot = t("chroot", "$PY $T chroot /tmp");
    nested_user_namespace = t("nested user namespace", "unshare -Ur true && echo ESCAPED");
    nested_mount_namespace = t("nested mount namespace", "unshare -m true && echo ESCAPED");
    pivot_root = t(
        "pivot_root",
        &guarded(
            "mnt",
            "mkdir -p /tmp/nr 2>/dev/null; pivot_root /tmp/nr /tmp/nr 2>&1 && echo ESCAPED",
        ),
    );
    // Kernel interfaces.
    proc_sysrq_trigger_writable = t(
        "/proc/sysrq-trigger writable",
        "[ -w /proc/sysrq-trigger ] && echo ESCAPED",
    );
    proc_sys_writable = t(
        "/proc/sys writable",
        "[ -w /proc/sys/kernel/core_pattern ] && echo ESCAPED",
    );
    sysfs_writable = t(
        "/sys writable",
        "[ -w /sys/kernel/mm/transparent_hugepage/enabled ] && echo ESCAPED",
    );
    bpf_map = t("bpf map", "$PY $T bpf_map");
    perf_event_open_on_every_process = t("perf_event_open on every process", "$PY $T perf_all_cpus");
    keyring_add_key = t("keyring: add_key", &guarded("user", "$PY $T add_key"));
    keyring_new_session_keyring = t("keyring: new session keyring", "$PY $T keyctl_join");
    io_uring = t("io_uring", "$PY $T io_uring");
    userfaultfd = t("userfaultfd", "$PY $T userfaultfd");
    // Capabilities and privileges.
    capabilities_left = t(
        "capabilities left",
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status | grep -v '0000000000000000$' && echo ESCAPED",
    );
    no_new_privs = t(
        "no_new_privs, so set-user-ID programs gain nothing",
        "grep -q '^NoNewPrivs:[[:space:]]*1' /proc/self/status || echo ESCAPED",
    );
    raise_the_core_limit = t(
        "raise the core limit",
        "ulimit -c unlimited 2>/dev/null && echo ESCAPED",
    );
    // Other processes and the host.
    kill_a_process_outside = t(
        "kill a process outside",
        "kill -9 $VICTIM 2>/dev/null; $PY $T kill $VICTIM 0",
    );
    see_processes_outside = t(
        "see processes outside",
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -qx \"$MARK 3600 \" && echo ESCAPED",
    );
    kill_every_process = t(
        "kill every process (kill -9 -1)",
        &guarded("pid", "kill -9 -1; true"),
    );
    pkill_by_name = t(
        "pkill by name",
        &guarded(
            "pid",
            "pkill -9 -f \"$MARK\"; killall -9 sleep 2>/dev/null; true",
        ),
    );
    signal_the_sandbox_init = t(
        "signal the sandbox's init",
        &guarded("pid", "kill -9 1; kill -TERM 1; kill -HUP 1; true"),
    );
    renice_a_process_outside = t(
        "renice a process outside",
        "renice -n 19 -p $VICTIM >/dev/null 2>&1; true",
    );
    taskset_a_process_outside = t(
        "taskset a process outside",
        "taskset -p 1 $VICTIM >/dev/null 2>&1; true",
    );
    prlimit_a_process_outside = t(
        "prlimit a process outside",
        "prlimit --pid $VICTIM --nofile=12:12 2>/dev/null; true",
    );
    prlimit_the_sandbox_init = t(
        "prlimit the sandbox's init",
        &guarded("pid", "$PY $T prlimit 1"),
    );
    prlimit_the_shell = t("prlimit the shell", &guarded("pid", "$PY $T prlimit 2"));
    ptrace_the_shell = t(
        "ptrace the shell",
        &guarded("pid", "$PY $T ptrace_attach 2"),
    );
    ptrace_seize_the_shell = t(
        "ptrace-seize the shell",
        &guarded("pid", "$PY $T ptrace_seize 2"),
    );
    ptrace_the_sandbox_init = t(
        "ptrace the sandbox's init",
        &guarded("pid", "$PY $T ptrace_attach 1"),
    );
    process_vm_writev_the_shell = t(
        "write the shell's memory (process_vm_writev)",
        &guarded("pid", "$PY $T process_vm_writev 2"),
    );
    sysv_shared_memory_outside = t(
        "SysV shared memory of a process outside",
        "$PY $T shm_write $SHMKEY",
    );
    sysv_message_queue_of_the_host = t(
        "SysV message queue (host IPC)",
        &guarded("ipc", "$PY $T msg_create $MSGKEY >/dev/null; true"),
    );
    sethostname = t("sethostname", &guarded("uts", "$PY $T sethostname"));
    setdomainname = t("setdomainname", &guarded("uts", "$PY $T setdomainname"));
    own_pid_namespace = t(
        "a process namespace of its own",
        "[ \"$(readlink /proc/self/ns/pid)\" = \"$HOST_PID\" ] && echo ESCAPED",
    );
    own_mount_namespace = t(
        "a mount namespace of its own",
        "[ \"$(readlink /proc/self/ns/mnt)\" = \"$HOST_MNT\" ] && echo ESCAPED",
    );
    own_ipc_namespace = t(
        "an IPC namespace of its own",
        "[ \"$(readlink /proc/self/ns/ipc)\" = \"$HOST_IPC\" ] && echo ESCAPED",
    );
    own_uts_namespace = t(
        "a UTS namespace of its own",
        "[ \"$(readlink /proc/self/ns/uts)\" = \"$HOST_UTS\" ] && echo ESCAPED",
    );
    own_user_namespace = t(
        "a user namespace of its own",
        "[ \"$(readlink /proc/self/ns/user)\" = \"$HOST_USER\" ] && echo ESCAPED",
    );
    own_network_namespace = t(
        "a network namespace of its own",
        "[ \"$(readlink /proc/self/ns/net)\" = \"$HOST_NET\" ] && echo ESCAPED",
    );
    // The host's loopback: through the egress proxy (workspace-write runs
    // with allowed domains), around it, by name and IP, TCP and UDP.
    host_loopback_through_and_around_the_proxy = t(
        "the host's loopback through and around the egress proxy",
        "for how in '' '-p' '--noproxy 127.0.0.1,localhost' '-x http://127.0.0.1:3128'; do \
           for host in 127.0.0.1 localhost; do \
             curl -s --max-time 5 $how http://$host:$TCPPORT/ >/dev/null; \
           done; \
         done; \
         $PY -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', $UDPPORT))\" 2>/dev/null; true",
    );
    // Sockets.
    unix_socket_in_host_tmp = t(
        "Unix socket in the host's /tmp",
        "$PY $T unix_connect $TMPSOCK",
    );
    abstract_unix_socket_of_the_host = t(
        "abstract Unix socket of the host",
        "$PY $T unix_connect $ABSTRACT",
    );
    unix_socket_outside_the_workspace = tn(
        "Unix socket outside the workspace",
        "$PY $T unix_connect $OUT/stream.sock",
    );
    unix_socket_in_var_tmp = tn("Unix socket in /var/tmp", "$PY $T unix_connect $VARSOCK");
    unix_socket_after_start = tn(
        "Unix socket that appeared after the shell started",
        "$PY $T unix_connect $OUT/late.sock",
    );
    unix_socket_by_a_relative_path = tn(
        "Unix socket by a relative path",
        "cd $OUT && $PY $T unix_connect stream.sock; cd $WS",
    );
    unix_socket_with_dotdot = tn(
        "Unix socket with .. from the workspace",
        "$PY $T unix_connect $WS/../out/stream.sock",
    );
    unix_socket_through_a_workspace_symlink = tn(
        "Unix socket through a symlink in the workspace",
        "ln -sf $OUT/stream.sock $WS/sock-link 2>/dev/null; $PY $T unix_connect $WS/sock-link",
    );
    unix_socket_through_a_symlinked_directory = tn(
        "Unix socket through a symlinked directory",
        "ln -sfn $OUT $WS/dir-link 2>/dev/null; $PY $T unix_connect $WS/dir-link/stream.sock",
    );
    unix_socket_through_an_o_path_fd = tn(
        "Unix socket through /proc/self/fd of an O_PATH descriptor",
        "$PY $T unix_connect_opath $OUT/stream.sock",
    );
    unix_socket_through_proc_1_root = tn(
        "Unix socket through /proc/1/root",
        "$PY $T unix_connect /proc/1/root$OUT/stream.sock",
    );
    sendto_an_outside_datagram_socket = tn(
        "sendto an outside datagram socket (unbound)",
        "$PY $T unix_sendto $OUT/dgram.sock",
    );
    sendmsg_to_an_outside_address = tn(
        "sendmsg with an outside address",
        "$PY $T unix_sendmsg $OUT/dgram.sock",
    );
    sendmmsg_to_an_outside_address = tn(
        "sendmmsg with an outside address",
        "$PY $T unix_sendmmsg $OUT/dgram.sock",
    );
    connect_an_outside_datagram_socket = tn(
        "connect a datagram socket outside, then send",
        "$PY $T unix_dgram_connect $OUT/dgram.sock",
    );
    unix_socket_symlink_race = tn(
        "swap a directory for a symlink while connecting (1,000 tries)",
        "$PY $T unix_symlink_race $WS $OUT 1000",
    );
    unix_socket_address_race = tn(
        "rewrite the address while connecting (3,000 tries)",
        "$PY $T unix_address_race /tmp/own.sock $OUT/stream.sock 3000",
    );
    raw_socket = t("raw socket", "$PY $T socket raw");
    raw_ipv6_socket = t("raw IPv6 socket", "$PY $T socket inet6raw");
    packet_socket = t("packet socket", "$PY $T socket packet");
    packet_datagram_socket = t("packet datagram socket", "$PY $T socket packet_dgram");
    netlink_socket = t("netlink socket", "$PY $T socket netlink");
    vsock = t("vsock", "$PY $T socket vsock");
    // Nothing planted for the host: no set-id file in the workspace.
    setuid_bit_chmod = t("set-user-ID bit (chmod)", "$PY $T setid chmod $WS/suid");
    setgid_bit_chmod = t(
        "set-group-ID bit (chmod)",
        "$PY $T setid chmod_gid $WS/sgid",
    );
    setuid_bit_fchmod_of_an_fd = t("set-user-ID bit (fchmod)", "$PY $T setid fchmod $WS/suid");
    setuid_bit_fchmodat2 = t(
        "set-user-ID bit (fchmodat2)",
        "$PY $T setid fchmodat2 $WS/suid",
    );
    setuid_bit_open_o_creat = t(
        "set-user-ID bit (open O_CREAT)",
        "$PY $T setid open $WS/suid",
    );
    setgid_bit_open_o_creat = t(
        "set-group-ID bit (open O_CREAT)",
        "$PY $T setid open_gid $WS/sgid",
    );
    setuid_bit_creat = t("set-user-ID bit (creat)", "$PY $T setid creat $WS/suid");
    setuid_bit_mknod = t(
        "set-user-ID bit (mknod of a regular file)",
        "$PY $T setid mknod $WS/suid",
    );
    setuid_bit_o_tmpfile_linked = t(
        "set-user-ID bit (O_TMPFILE, then linked)",
        "$PY $T setid tmpfile $WS/suid",
    );
    setuid_bit_openat2 = t("set-user-ID bit (openat2)", "$PY $T setid openat2 $WS/suid");
    setuid_shell_copy = t(
        "a set-user-ID shell (cp; chmod 4755)",
        "cp /bin/bash $WS/suid 2>/dev/null; chmod 4755 $WS/suid 2>/dev/null; [ -u $WS/suid ] && echo ESCAPED",
    );
    install_m_4755 = t(
        "install -m 4755",
        "install -m 4755 /bin/true $WS/suid 2>/dev/null; [ -u $WS/suid ] && echo ESCAPED",
    );
    cp_p_of_a_setuid_program = t(
        "cp -p of a set-user-ID program",
        "for f in /bin/su /usr/bin/passwd /usr/bin/mount; do [ -u $f ] && cp -p $f $WS/suid 2>/dev/null; done; [ -u $WS/suid ] && echo ESCAPED",
    );
    tar_x_of_a_setuid_entry = t(
        "tar x of a set-user-ID entry",
        "$PY $T setid_tar $WS/s.tar && tar -C $WS -xpf $WS/s.tar 2>/dev/null; rm -f $WS/s.tar; [ -u $WS/suid ] && echo ESCAPED",
    );
    hard_link_a_setuid_program_in = t(
        "hard link a set-user-ID program into the workspace",
        "for f in /bin/su /usr/bin/passwd /usr/bin/mount; do [ -u $f ] && ln $f $WS/suid 2>/dev/null; done; [ -u $WS/suid ] && echo ESCAPED",
    );
    file_capability_in_the_workspace = t(
        "file capability in the workspace",
        "touch $WS/fcap && $PY $T setxattr $WS/fcap security.capability 0100000200200000000000000000000000000000",
    );
    lease_on_a_file_outside = t("a lease on a file outside", "$PY $T lease $OUT/file.txt");
    // Hidden paths.
    list_a_hidden_directory = t(
        "list a hidden directory",
        "ls -A $SECRETS | grep . && echo ESCAPED",
    );
    read_a_key_in_a_hidden_directory = t(
        "read a key in a hidden directory",
        "grep -q PRIVATE $SECRETS/id_ed25519 2>/dev/null && echo ESCAPED",
    );
    read_a_hidden_file_by_name = t(
        "read a hidden file",
        "grep -q TOKEN $SECRET_FILE 2>/dev/null && echo ESCAPED",
    );
    write_a_hidden_file = t(
        "write a hidden file",
        "echo x > $SECRET_FILE 2>/dev/null && grep -q x $SECRET_FILE && echo ESCAPED",
    );
    read_a_hidden_file_through_proc_1_root = t(
        "read a hidden file through /proc/1/root",
        "grep -q TOKEN /proc/1/root$SECRET_FILE 2>/dev/null && echo ESCAPED",
    );
    read_a_hidden_file_through_a_symlink = t(
        "read a hidden file through a workspace symlink",
        "ln -sf $SECRET_FILE $WS/sock-link 2>/dev/null; grep -q TOKEN $WS/sock-link 2>/dev/null && echo ESCAPED",
    );
    read_etc_shadow = t(
        "read /etc/shadow",
        "[ -r /etc/shadow ] && grep -q : /etc/shadow && echo ESCAPED",
    );
    // .git of the workspace.
    append_to_dot_git_config = t(
        ".git/config",
        "echo '[core] fsmonitor = touch /tmp/pwned' >> $WS/.git/config && echo ESCAPED",
    );
    plant_a_git_hook = t(
        ".git hook",
        "echo 'touch /tmp/pwned' > $WS/.git/hooks/pre-commit && echo ESCAPED",
    );
    git_config_core_fsmonitor = t(
        "git config core.fsmonitor",
        "git -C $WS config core.fsmonitor 'touch /tmp/pwned' 2>/dev/null && echo ESCAPED",
    );
    remove_dot_git = t(
        "remove .git",
        "rm -rf $WS/.git 2>/dev/null; [ -d $WS/.git/hooks ] || echo ESCAPED",
    );
    rename_dot_git_away = t(
        "rename .git away",
        "mv $WS/.git $WS/old-git && echo ESCAPED",
    );
    hard_link_dot_git_config = t(
        "hard link .git/config",
        "ln $WS/.git/config $WS/cfg && echo ESCAPED",
    );
    chmod_dot_git_config = t(
        "chmod .git/config",
        "chmod 666 $WS/.git/config && echo ESCAPED",
    );
    xattr_on_dot_git_config = t(
        "xattr on .git/config",
        "$PY $T setxattr $WS/.git/config user.evil 31",
    );
    // A .git that is a symlink to a directory inside the workspace.
    write_through_a_dot_git_symlink = tw(
        "write through a .git symlink",
        "wsl",
        "echo x >> $WS/.git/config && echo ESCAPED",
    );
    hook_through_a_dot_git_symlink = tw(
        "hook through a .git symlink",
        "wsl",
        "touch $WS/.git/hooks/post-checkout && echo ESCAPED",
    );
    write_the_dot_git_symlink_target = tw(
        "write the symlink's target directly",
        "wsl",
        "touch $WS/.realgit/hooks/pre-push && echo ESCAPED",
    );
    // bubblewrap resolves a symlink destination: it cannot mount over
    // the link itself, so it cannot stop the link being replaced.
    replace_the_dot_git_symlink = twn(
        "replace the .git symlink",
        "wsl",
        "ln -sfn $OUT $WS/.git && [ \"$(readlink $WS/.git)\" = \"$OUT\" ] && echo ESCAPED",
    );
    swap_the_dot_git_symlink_for_a_directory = twn(
        "swap the .git symlink for a directory",
        "wsl",
        "rm -f $WS/.git && mkdir $WS/.git && echo ESCAPED",
    );
    // A .git that is a gitdir: file (a worktree).
    rewrite_the_gitdir_file = tw(
        "rewrite the gitdir file",
        "wsf",
        "echo 'gitdir: /tmp/evil' > $WS/.git && echo ESCAPED",
    );
    remove_the_gitdir_file = tw(
        "remove the gitdir file",
        "wsf",
        "rm -f $WS/.git && [ ! -e $WS/.git ] && echo ESCAPED",
    );
    write_the_worktree_git_directory = tw(
        "the worktree's git directory",
        "wsf",
        "echo x >> $WS/.main/.git/worktrees/wt/HEAD && echo ESCAPED",
    );
    hook_in_the_common_directory = tw(
        "the common directory's hooks",
        "wsf",
        "touch $WS/.main/.git/hooks/post-checkout && echo ESCAPED",
    );
    // No .git yet.
    git_init_without_a_repository = tw(
        "git init where there was no repository",
        "wsn",
        "git -C $WS init -q 2>/dev/null && echo ESCAPED",
    );
    make_dot_git_hooks_without_a_repository = tw(
        "make .git/hooks where there was none",
        "wsn",
        "mkdir -p $WS/.git/hooks && echo ESCAPED",
    );
    // The host's `git status` once the shell is closed says whether the
    // root became a repository; the payload would touch $OUT.
    make_the_root_a_bare_repository = tw(
        "make the workspace root a bare repository",
        "wsn",
        "git init -q --bare $WS 2>/dev/null; mkdir -p $WS/objects $WS/refs 2>/dev/null; \
         printf 'ref: refs/heads/main\\n' > $WS/HEAD 2>/dev/null; \
         printf \"[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = touch $OUT/fsmonitor-ran\\n\" > $WS/config; \
         [ -f $WS/HEAD ] && echo ESCAPED",
    );
    // Sockets where the lab could make them: `$HOMESOCK` in a directory
    // of this test's in `$HOME`, `$RUNSOCK` in `/run` (as root) or
    // `/run/lock` (anyone may bind there); a test of one of these fails,
    // saying why, where its socket could not be made.
    unix_socket_in_home = tn("Unix socket in $HOME", "$PY $T unix_connect $HOMESOCK");
    unix_socket_in_host_run = t("Unix socket in the host's /run", "$PY $T unix_connect $RUNSOCK");
}

// ---------------------------------------------------------------------------
// Running a technique.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Native,
    Bubblewrap,
    /// The built-in engine over a copy-on-write view of the workspace
    /// (the workspace is the view's base: nothing there may change).
    CopyOnWrite,
}

/// The modes every technique is tried in.
const MODES: [SandboxMode; 2] = [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite];

/// The policy of the suite: the default hidden paths and the lab's
/// credential store.
fn policy(lab: &Lab, mode: SandboxMode) -> SandboxPolicy {
    let mut hidden = SandboxPolicy::default_hidden_paths();
    hidden.extend([lab.secrets.clone(), lab.secret_file.clone()]);
    SandboxPolicy::default().mode(mode).hidden_paths(hidden)
}

fn shell(lab: &Lab, workspace: &Path, mode: SandboxMode, engine: Engine) -> SandboxedShell {
    #[cfg_attr(not(feature = "egress"), allow(unused_mut))]
    let mut policy = policy(lab, mode)
        .bubblewrap((engine == Engine::Bubblewrap).then(|| PathBuf::from("bwrap")));
    // Every technique meets the built-in engine with an egress proxy (in
    // workspace-write: allowed domains) and without one (read-only).
    #[cfg(feature = "egress")]
    if engine == Engine::Native && mode == SandboxMode::WorkspaceWrite {
        policy = policy.allow_domains(vec![
            "egress.invalid".to_owned(),
            "*.egress.invalid".to_owned(),
        ]);
    }
    let view = (engine == Engine::CopyOnWrite).then(|| {
        // Layers beside the lab's workspaces, one directory per shell.
        static VIEWS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = VIEWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cow = lab.out.parent().unwrap().join(format!("cow-{n}"));
        std::sync::Arc::new(dsh_sandbox::dsh_workspace::Workspace::new(workspace, cow).unwrap())
    });
    SandboxedShell::new(
        SandboxConfig::new(
            policy,
            ShellConfig::new(workspace)
                .env(lab.env(workspace))
                .timeout(Duration::from_secs(120)),
        )
        .copy_on_write(view),
    )
    .unwrap()
}

async fn run(s: &SandboxedShell, cmd: &str) -> String {
    s.execute("agent", &json!({ "command": cmd }))
        .await
        .unwrap_or_else(|e| format!("tool error: {}", dsh_sandbox::contract::render_error(&e)))
}

/// The variables a command names (`$NAME` and `${NAME}`, upper case).
fn variables(cmd: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = cmd;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let name = rest.strip_prefix('{').unwrap_or(rest);
        let end = name
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(name.len());
        if end > 0 && name.starts_with(|c: char| c.is_ascii_uppercase()) {
            out.push(&name[..end]);
        }
    }
    out
}

/// Why the lab may not set `var`.
fn why_unset(var: &str) -> &'static str {
    match var {
        "HOMESOCK" => {
            "it needs $HOME to be an absolute directory outside /tmp where this user may make one"
        }
        "RUNSOCK" => "it needs /run (as root) or /run/lock to take a socket of this user's",
        _ => "the lab sets no such variable",
    }
}

/// Tries `technique` in `mode` over `lab`, which no other technique has
/// touched, in a shell of its own (closed before this returns); returns
/// the failure, if any, as `[mode] name (cmd): problems`.
async fn try_technique(
    lab: &Lab,
    technique: &Technique,
    mode: SandboxMode,
    engine: Engine,
) -> Option<String> {
    let ws = lab.workspace(technique.workspace);
    let env = lab.env(ws);
    for var in variables(&technique.cmd) {
        assert!(
            env.iter().any(|(name, _)| name == var),
            "{}: ${var} is not set: {}",
            technique.name,
            why_unset(var)
        );
    }
    let s = shell(lab, ws, mode, engine);
    // State that must survive the technique.
    assert_eq!(
        run(&s, "export DSH_KEEP=kept; cd src 2>/dev/null; echo ok").await,
        "ok"
    );
    // Without this the technique would be vacuous: what it attacks must be
    // visible (and readable) inside.
    assert_eq!(
        run(
            &s,
            "cat $OUT/file.txt >/dev/null && ls $WS >/dev/null && echo visible"
        )
        .await,
        "visible"
    );
    // A socket made outside once the shell runs.
    let late = lab.out.join("late.sock");
    let late_listener = std::os::unix::net::UnixListener::bind(&late).unwrap();
    late_listener.set_nonblocking(true).unwrap();
    let test_limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let domainname = std::fs::read_to_string("/proc/sys/kernel/domainname").unwrap();
    let victim = lab.victim_state();
    assert!(victim.0, "the victim must be alive before the technique");

    // The workspace too where the shell may not change it: read-only, or
    // the base of a copy-on-write view.
    let whole = mode == SandboxMode::ReadOnly || engine == Engine::CopyOnWrite;
    let mut watched = lab.outside();
    if whole {
        watched.extend(snapshot(&[ws]));
    }
    let out = run(&s, &technique.cmd).await;
    let mut now = lab.outside();
    if whole {
        now.extend(snapshot(&[ws]));
    }
    let mut problems = Vec::new();
    if out.contains("ESCAPED") {
        problems.push(format!("the probe got through: {out}"));
    }
    problems.extend(diff(&watched, &now));
    problems.extend(lab.reached());
    while late_listener.accept().is_ok() {
        problems.push(format!("a connection reached {}", late.display()));
    }
    let planted = set_id_files(ws);
    if !planted.is_empty() {
        problems.push(format!("a set-id file in the workspace: {planted:?}"));
    }
    if lab.victim_state() != victim {
        problems.push(format!("the victim changed: {:?}", lab.victim_state()));
    }
    if lab.shm_content() != b"intact" {
        problems.push("the shared memory segment changed".to_owned());
    }
    // SAFETY: a lookup of a key this test chose.
    if unsafe { libc::msgget(lab.msg_key, 0) } >= 0 {
        problems.push("a message queue appeared in the host's IPC namespace".to_owned());
    }
    if std::fs::read_to_string("/proc/self/limits").unwrap() != test_limits {
        problems.push("this process's limits changed".to_owned());
    }
    if std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap() != hostname
        || std::fs::read_to_string("/proc/sys/kernel/domainname").unwrap() != domainname
    {
        problems.push("the host name changed".to_owned());
    }
    let state = run(&s, "echo $DSH_KEEP").await;
    if state != "kept" {
        problems.push(format!("the shell lost its state: {state}"));
    }
    s.close_all().await;
    drop(late_listener);
    let _ = std::fs::remove_file(&late);
    problems.extend(lab.root_without_repository());

    if std::env::var_os("DSH_ESCAPE_REPORT").is_some() {
        println!(
            "{:?} {} {:<60} {} {}",
            engine,
            mode.name(),
            technique.name,
            if problems.is_empty() {
                "held"
            } else {
                "FAILED"
            },
            problems.join("; ")
        );
        if !problems.is_empty() {
            println!("{out}");
        }
    }
    (!problems.is_empty()).then(|| {
        format!(
            "[{}] {} ({}): {}",
            mode.name(),
            technique.name,
            technique.cmd,
            problems.join("; ")
        )
    })
}

/// Fails listing `failures`, or prints that the check `id` held: the line
/// an unprivileged run's parent looks for.
fn held(id: &str, engine: Engine, failures: &[String]) {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert!(
        failures.is_empty(),
        "{id} failed as uid {uid} ({engine:?}):\n{}",
        failures.join("\n")
    );
    println!("{id} held as uid {uid} ({engine:?})");
}

/// `technique` in every mode, each over a lab of its own (the modes at
/// once: they share nothing).
async fn technique_holds(technique: Technique, engine: Engine) {
    let (read_only, workspace_write) = (Lab::new(), Lab::new());
    let (a, b) = tokio::join!(
        try_technique(&read_only, &technique, MODES[0], engine),
        try_technique(&workspace_write, &technique, MODES[1], engine),
    );
    let failures: Vec<String> = a.into_iter().chain(b).collect();
    held(technique.id, engine, &failures);
}

/// The techniques that write outside or change metadata there, and those
/// that plant a set-id file or a file capability for the host, inside a
/// copy-on-write view in workspace-write: nothing outside changes, nor the
/// view's base. One lab for all (each technique in a shell and a view of
/// its own: none changes the lab when it holds), two halves at once.
mod copy_on_write_view {
    use super::*;

    /// The techniques of the list from `first` to `last`.
    fn between(all: &[Technique], first: &str, last: &str) -> std::ops::Range<usize> {
        let at = |id: &str| all.iter().position(|t| t.id == id).unwrap();
        at(first)..at(last) + 1
    }

    async fn half(techniques: &[Technique], engine: Engine) -> Vec<String> {
        let lab = Lab::new();
        let mut failures = Vec::new();
        for technique in techniques {
            failures
                .extend(try_technique(&lab, technique, SandboxMode::WorkspaceWrite, engine).await);
        }
        failures
    }

    async fn check(engine: Engine) {
        let mut all = techniques();
        let plant = between(&all, "setuid_bit_chmod", "file_capability_in_the_workspace");
        let planting: Vec<Technique> = all.drain(plant).collect();
        let write = between(&all, "create_a_file_outside", "trusted_xattr_outside");
        let writing: Vec<Technique> = all.drain(write).collect();
        let (_keep, grounds) = git_plant::grounds_dir();
        let (mut failures, more, git) = tokio::join!(
            half(&writing, engine),
            half(&planting, engine),
            git_plant::plants_in_a_view(&grounds)
        );
        failures.extend(more);
        failures.extend(git);
        held("copy_on_write_view", engine, &failures);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn native() {
        check(Engine::CopyOnWrite).await;
    }

    #[test]
    fn native_unprivileged() {
        as_unprivileged(
            "copy_on_write_view::native",
            "copy_on_write_view",
            Engine::CopyOnWrite,
            check,
        );
    }
}

/// Nothing started inside outlives the shell: detached processes (setsid,
/// a double fork, nohup, a daemon) end when it is closed. Returns the
/// failures.
async fn survivors(lab: &Lab, mode: SandboxMode, engine: Engine) -> Vec<String> {
    let survivors = format!(
        "(setsid bash -c 'exec -a {m}-setsid sleep 1000' &); \
         ( (exec -a {m}-double sleep 1000 &) & ); \
         (nohup bash -c 'exec -a {m}-nohup sleep 1000' >/dev/null 2>&1 &); \
         setsid -f bash -c 'exec -a {m}-daemon sleep 1000'; echo started",
        m = lab.mark
    );
    let s = shell(lab, &lab.ws, mode, engine);
    assert_eq!(run(&s, &survivors).await, "started");
    // The pids of the processes this shell started (seen in this host's
    // /proc once they exec'd: no event says so, they are looked for).
    let find = |m: &str| -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| {
                let path = e.ok()?.path();
                let pid: i32 = path.file_name()?.to_str()?.parse().ok()?;
                let cmd = std::fs::read(path.join("cmdline")).ok()?;
                cmd.starts_with(format!("{m}-").as_bytes()).then_some(pid)
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while find(&lab.mark).len() < 4 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = find(&lab.mark);
    assert_eq!(started.len(), 4, "the survivors did not start");
    s.close_all().await;
    let left = ended_within(&started, Duration::from_secs(10)).await;
    let mut failures = Vec::new();
    if !left.is_empty() {
        failures.push(format!(
            "[{}] processes outlived the shell: {left:?}",
            mode.name()
        ));
        for pid in left {
            // SAFETY: a process this test's own shell started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    failures.extend(
        lab.root_without_repository()
            .into_iter()
            .map(|p| format!("[{}] {p}", mode.name())),
    );
    failures
}

/// Nothing started inside outlives the shell, in every mode.
mod nothing_outlives_the_shell {
    use super::*;

    async fn check(engine: Engine) {
        let (read_only, workspace_write) = (Lab::new(), Lab::new());
        let (mut failures, more) = tokio::join!(
            survivors(&read_only, MODES[0], engine),
            survivors(&workspace_write, MODES[1], engine),
        );
        failures.extend(more);
        held("nothing_outlives_the_shell", engine, &failures);
    }

    engines!(nothing_outlives_the_shell, t);
}

/// A thread that keeps exchanging `a` and `b` (`renameat2(RENAME_EXCHANGE)`)
/// until its flag is set; it returns how many exchanges succeeded.
fn exchanging(
    a: PathBuf,
    b: PathBuf,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<u64>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&stop);
    let handle = std::thread::spawn(move || {
        let (a, b) = (
            CString::new(a.as_os_str().as_bytes()).unwrap(),
            CString::new(b.as_os_str().as_bytes()).unwrap(),
        );
        let mut swaps = 0u64;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            // SAFETY: renameat2 on two paths of this test.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_renameat2,
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            if rc == 0 {
                swaps += 1;
            }
        }
        swaps
    });
    (stop, handle)
}

/// The editor's techniques (workspace-write), including the race that used
/// to get a file created outside.
async fn editor_suite(lab: &Lab) -> (Vec<String>, usize) {
    let editor = Editor::new(SandboxFs::new(
        policy(lab, SandboxMode::WorkspaceWrite),
        &lab.ws,
    ));
    std::os::unix::fs::symlink(&lab.out, lab.ws.join("out-link")).unwrap();
    std::os::unix::fs::symlink(lab.ws.join(".git/hooks"), lab.ws.join("hooks-link")).unwrap();
    std::os::unix::fs::symlink(lab.ws.join("src"), lab.ws.join("abs-inside")).unwrap();
    let out = &lab.out;
    let ws = &lab.ws;
    let cases = vec![
        (
            "create outside",
            json!({"command": "create", "path": out.join("e1.txt"), "file_text": "x"}),
        ),
        (
            "edit outside",
            json!({"command": "str_replace", "path": out.join("file.txt"), "old_str": "outside", "new_str": "pwned"}),
        ),
        (
            "insert outside",
            json!({"command": "insert", "path": out.join("file.txt"), "insert_line": 0, "new_str": "pwned"}),
        ),
        (
            "create through a symlink to outside",
            json!({"command": "create", "path": ws.join("out-link/e2.txt"), "file_text": "x"}),
        ),
        (
            "edit through a symlink to outside",
            json!({"command": "str_replace", "path": ws.join("out-link/file.txt"), "old_str": "outside", "new_str": "pwned"}),
        ),
        (
            "create with ..",
            json!({"command": "create", "path": format!("{}/../out/e3.txt", ws.display()), "file_text": "x"}),
        ),
        (
            "edit .git/HEAD",
            json!({"command": "str_replace", "path": ws.join(".git/HEAD"), "old_str": "main", "new_str": "evil"}),
        ),
        (
            "create a hook",
            json!({"command": "create", "path": ws.join(".git/hooks/pre-commit"), "file_text": "x"}),
        ),
        (
            "create a hook through a link into .git",
            json!({"command": "create", "path": ws.join("hooks-link/post-checkout"), "file_text": "x"}),
        ),
        (
            "create .git where there is none",
            json!({"command": "create", "path": lab.wsn.join(".git/config"), "file_text": "x"}),
        ),
        (
            "edit the gitdir file",
            json!({"command": "str_replace", "path": lab.wsf.join(".git"), "old_str": "wt", "new_str": "evil"}),
        ),
        (
            "read the server's environment",
            json!({"command": "view", "path": "/proc/self/environ"}),
        ),
        (
            "list the server's descriptors",
            json!({"command": "view", "path": "/proc/self/fd"}),
        ),
        (
            "read the server's environment by pid",
            json!({"command": "view", "path": format!("/proc/{}/environ", std::process::id())}),
        ),
    ];
    let mut failures = Vec::new();
    let mut ran = 0;
    for (name, args) in cases {
        ran += 1;
        let before = lab.outside();
        let result = editor.execute(&args).await;
        let after = lab.outside();
        let mut problems = diff(&before, &after);
        match &result {
            Err(e)
                if dsh_editor::contract::render_error(e)
                    == "[sandbox: file access denied under workspace-write mode]" => {}
            other => problems.push(format!("not refused: {other:?}")),
        }
        if lab.wsn.join(".git").exists() {
            problems.push("a .git appeared".to_owned());
        }
        if !problems.is_empty() {
            failures.push(format!("[editor] {name}: {}", problems.join("; ")));
        }
    }
    // Hidden paths: nothing of them reaches the model, whatever the way.
    std::os::unix::fs::symlink(&lab.secret_file, ws.join("secret-link")).unwrap();
    for (name, args) in [
        (
            "view a hidden file",
            json!({"command": "view", "path": lab.secret_file}),
        ),
        (
            "view a hidden directory",
            json!({"command": "view", "path": lab.secrets}),
        ),
        (
            "view a key in a hidden directory",
            json!({"command": "view", "path": lab.secrets.join("id_ed25519")}),
        ),
        (
            "view a hidden file through a workspace symlink",
            json!({"command": "view", "path": ws.join("secret-link")}),
        ),
        (
            "view the hidden files' parent",
            json!({"command": "view", "path": lab.secrets.parent().unwrap()}),
        ),
        (
            "edit a hidden file",
            json!({"command": "str_replace", "path": lab.secret_file, "old_str": "TOKEN", "new_str": "x"}),
        ),
        (
            "view /etc/shadow",
            json!({"command": "view", "path": "/etc/shadow"}),
        ),
    ] {
        ran += 1;
        let before = lab.outside();
        let text = match editor.execute(&args).await {
            Ok(text) => text,
            Err(e) => dsh_editor::contract::render_error(&e),
        };
        let mut problems = diff(&before, &lab.outside());
        // (The model's own path may come back in an error.)
        let listing = name == "view the hidden files' parent";
        for secret in ["PRIVATE", "TOKEN=", "root:", "id_ed25519"] {
            if text.contains(secret) && (listing || secret != "id_ed25519") {
                problems.push(format!("{secret} reached the model: {text}"));
            }
        }
        if !problems.is_empty() {
            failures.push(format!("[editor] {name}: {}", problems.join("; ")));
        }
    }
    let _ = std::fs::remove_file(ws.join("secret-link"));

    // What only the host can read: its /tmp, /dev/shm and /run (the shell
    // has its own or none), and, as root, another uid's 0600 file (the
    // shell has no CAP_DAC_OVERRIDE).
    let tag = format!("dsh-escape-secret-{}", std::process::id());
    let mut host_only: Vec<PathBuf> = Vec::new();
    for dir in [
        std::env::temp_dir(),
        PathBuf::from("/dev/shm"),
        PathBuf::from("/run"),
    ] {
        let file = dir.join(&tag);
        if std::fs::write(&file, format!("HOST-ONLY {tag}\n")).is_ok() {
            host_only.push(file);
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let file = lab.out.join("other-uid.txt");
        write(&file, &format!("HOST-ONLY {tag}\n"));
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        std::os::unix::fs::chown(&file, Some(12345), Some(12345)).unwrap();
        host_only.push(file);
    }
    let mut reads: Vec<(String, serde_json::Value)> = host_only
        .iter()
        .map(|f| {
            (
                format!("view {}", f.display()),
                json!({"command": "view", "path": f}),
            )
        })
        .collect();
    for dir in [
        std::env::temp_dir(),
        PathBuf::from("/dev/shm"),
        PathBuf::from("/run"),
    ] {
        reads.push((
            format!("list {}", dir.display()),
            json!({"command": "view", "path": dir}),
        ));
    }
    for (name, args) in reads {
        ran += 1;
        let text = match editor.execute(&args).await {
            Ok(text) => text,
            Err(e) => dsh_editor::contract::render_error(&e),
        };
        if text.contains("HOST-ONLY") || (name.starts_with("list") && text.contains(&tag)) {
            failures.push(format!(
                "[editor] {name}: the host's file reached the model: {text}"
            ));
        }
    }
    for f in &host_only {
        let _ = std::fs::remove_file(f);
    }

    // As root: a directory of another uid in the workspace, where the shell
    // (no CAP_DAC_OVERRIDE) cannot create a file; nor can the editor.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        ran += 1;
        let theirs = ws.join("theirs");
        std::fs::create_dir_all(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::chown(&theirs, Some(12345), Some(12345)).unwrap();
        let r = editor
            .execute(
                &json!({"command": "create", "path": theirs.join("new.txt"), "file_text": "x"}),
            )
            .await;
        if r.is_ok() || theirs.join("new.txt").exists() {
            failures.push(format!(
                "[editor] created a file in another uid's directory, which the shell cannot: {r:?}"
            ));
        }
        let _ = std::fs::remove_dir_all(&theirs);
    }

    // /proc under a rename-exchange race: `x` (a directory holding a file
    // named `status`) and `y` (a symlink to /proc/self) trade places over
    // and over while the editor views x/status.
    ran += 1;
    std::fs::create_dir_all(ws.join("x")).unwrap();
    write(&ws.join("x/status"), "inside\n");
    std::os::unix::fs::symlink("/proc/self", ws.join("y")).unwrap();
    let swapper = exchanging(ws.join("x"), ws.join("y"));
    let (mut inside, mut other) = (0, Vec::new());
    for _ in 0..3000 {
        match editor
            .execute(&json!({"command": "view", "path": ws.join("x/status")}))
            .await
        {
            Ok(text) if text.contains("inside") => inside += 1,
            Ok(text) => other.push(text),
            Err(_) => {}
        }
    }
    swapper.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.1.join().unwrap();
    if !other.is_empty() {
        failures.push(format!(
            "[editor] the /proc rename race: {} views showed something else, e.g. {}",
            other.len(),
            other[0]
        ));
    }
    if inside == 0 || swaps == 0 {
        failures.push(format!(
            "[editor] the /proc rename race did not run ({inside} views inside, {swaps} swaps)"
        ));
    }
    let _ = std::fs::remove_dir_all(ws.join("x"));
    let _ = std::fs::remove_dir_all(ws.join("y"));
    let _ = std::fs::remove_file(ws.join("x"));
    let _ = std::fs::remove_file(ws.join("y"));

    // A FIFO swapped in for a file between the editor's look and its open
    // never blocks it: every view answers.
    ran += 1;
    write(&ws.join("f.txt"), "regular\n");
    let fifo = CString::new(ws.join("f.fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo of a path of this test.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let swapper = exchanging(ws.join("f.txt"), ws.join("f.fifo"));
    let (mut answered, mut not_regular) = (0, 0);
    for _ in 0..1000 {
        let args = json!({"command": "view", "path": ws.join("f.txt")});
        let view = editor.execute(&args);
        match tokio::time::timeout(Duration::from_secs(60), view).await {
            Ok(Ok(_)) => answered += 1,
            Ok(Err(e)) => {
                answered += 1;
                if dsh_editor::contract::render_error(&e).contains("not a regular file") {
                    not_regular += 1;
                }
            }
            Err(_) => {
                failures.push("[editor] a view hung on a FIFO swapped in".to_owned());
                break;
            }
        }
    }
    swapper.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = swapper.1.join().unwrap();
    if answered < 1000 || not_regular == 0 {
        failures.push(format!(
            "[editor] the FIFO race: {answered} of 1000 views answered, {not_regular} saw the FIFO"
        ));
    }
    let _ = std::fs::remove_file(ws.join("f.txt"));
    let _ = std::fs::remove_file(ws.join("f.fifo"));

    // A link with an absolute target that stays inside the workspace is
    // followed (its target is resolved first, then opened beneath the root).
    ran += 1;
    let r = editor
        .execute(
            &json!({"command": "create", "path": ws.join("abs-inside/new.rs"), "file_text": "x"}),
        )
        .await;
    if r.is_err() || !ws.join("src/new.rs").exists() {
        failures.push(format!(
            "[editor] a link inside the workspace was not followed: {r:?}"
        ));
    }
    let _ = std::fs::remove_file(ws.join("src/new.rs"));

    // The race: a process in the workspace keeps swapping directories for
    // symlinks to outside while the editor creates files in one and edits a
    // file named like an outside one (`file.txt`) in the other.
    ran += 2;
    let s = shell(lab, &lab.ws, SandboxMode::WorkspaceWrite, Engine::Native);
    assert_eq!(
        run(
            &s,
            "mkdir -p race race2 && echo inside > race2/file.txt; \
             ( (while :; do for d in race race2; do mv $d $d.d 2>/dev/null; ln -sfn $OUT $d 2>/dev/null; rm -f $d; mv $d.d $d 2>/dev/null; done; done) >/dev/null 2>&1 & ); echo started"
        )
        .await,
        "started"
    );
    let before = lab.outside();
    let (mut done, mut refused) = (0, 0);
    for i in 0..300 {
        let create = editor
            .execute(&json!({"command": "create", "path": ws.join(format!("race/f{i}.txt")), "file_text": "x"}))
            .await;
        let insert = editor
            .execute(&json!({"command": "insert", "path": ws.join("race2/file.txt"), "insert_line": 0, "new_str": "pwned-race"}))
            .await;
        for r in [create.is_ok(), insert.is_ok()] {
            if r {
                done += 1;
            } else {
                refused += 1;
            }
        }
    }
    s.close_all().await;
    let mut problems = diff(&before, &lab.outside());
    // Both outcomes seen: the swaps really interleaved with the writes.
    if done == 0 || refused == 0 {
        problems.push(format!(
            "the race did not interleave ({done} writes done, {refused} refused)"
        ));
    }
    if std::fs::read_dir(&lab.out).unwrap().any(|e| {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        name.starts_with('f') && name[1..].starts_with(|c: char| c.is_ascii_digit())
    }) {
        problems.push("a raced file landed outside".to_owned());
    }
    if !problems.is_empty() {
        failures.push(format!(
            "[editor] the directory/symlink race: {}",
            problems.join("; ")
        ));
    }
    for name in [
        "out-link",
        "hooks-link",
        "abs-inside",
        "race",
        "race.d",
        "race2",
        "race2.d",
    ] {
        let p = ws.join(name);
        if p.is_dir() && !p.is_symlink() {
            let _ = std::fs::remove_dir_all(&p);
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }
    (failures, ran)
}

/// The editor's techniques (workspace-write, the built-in engine).
async fn editor_holds() {
    let lab = Lab::new();
    let (failures, _ran) = editor_suite(&lab).await;
    held("editor_escapes_fail", Engine::Native, &failures);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editor_escapes_fail() {
    editor_holds().await;
}

#[test]
fn editor_escapes_fail_as_an_unprivileged_user() {
    as_unprivileged(
        "editor_escapes_fail",
        "editor_escapes_fail",
        Engine::Native,
        |_| editor_holds(),
    );
}

/// As root: `test` (the check `id` in `engine`) run by a copy of this test
/// binary as an unprivileged user (unprivileged user namespaces), which
/// must say the check held. Not root: this process already is
/// unprivileged, and runs the check itself.
fn as_unprivileged<F: std::future::Future<Output = ()>>(
    test: &str,
    id: &str,
    engine: Engine,
    check: impl FnOnce(Engine) -> F,
) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(check(engine));
    } else {
        let dir = unprivileged_dir();
        // A `$HOME` the unprivileged user may write (for `$HOMESOCK`).
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
        let stdout = unprivileged_run(test, dir.path(), &home);
        let held = format!("{id} held as uid {UNPRIVILEGED} ({engine:?})");
        assert!(
            stdout.contains(&held),
            "{test} did not run as uid {UNPRIVILEGED}:\n{stdout}"
        );
        println!("{held}");
    }
}

/// A directory the unprivileged user owns, where the sandbox can see it
/// and that user can reach wherever the checkout is: under /var/tmp.
fn unprivileged_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("dsh-escape-user-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::os::unix::fs::chown(dir.path(), Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
    dir
}

/// Runs the test `test` of a copy of this binary as [`UNPRIVILEGED`] (run
/// as root); returns its standard output once it passed.
fn run_copy_as_unprivileged(test: &str) -> String {
    let dir = unprivileged_dir();
    run_as_unprivileged(test, dir.path())
}

/// Runs the test named `test` (exactly) in a copy of this binary as the
/// unprivileged user, in `dir` (which that user owns, under `/var/tmp`,
/// passed as `DSH_ESCAPE_DIR`); asserts it passed and returns its output.
fn run_as_unprivileged(test: &str, dir: &Path) -> String {
    unprivileged_run(test, dir, Path::new("/tmp"))
}

/// Asserts that every directory above `path` lets other users through.
fn traversable(path: &Path) {
    for up in path.ancestors().skip(1) {
        let mode = std::fs::metadata(up).unwrap().mode();
        assert!(
            mode & 0o001 != 0,
            "{} is not traversable by other users (mode {mode:o}); the unprivileged run needs it",
            up.display()
        );
    }
}

/// The copy of this binary the unprivileged runs execute, once made.
static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The copy of this binary that the unprivileged user can reach: made once
/// per process (every technique's unprivileged test runs it), in a
/// directory of its own under /var/tmp removed when this process exits.
fn unprivileged_binary() -> &'static Path {
    COPY.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("dsh-escape-bin-")
            .tempdir_in("/var/tmp")
            .unwrap()
            .keep();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        traversable(&dir);
        let copy = dir.join("escape");
        std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
        extern "C" fn remove_copy() {
            if let Some(dir) = COPY.get().and_then(|copy| copy.parent()) {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        // SAFETY: registers a function of no arguments that only removes
        // the copy's directory.
        assert_eq!(unsafe { libc::atexit(remove_copy) }, 0);
        copy
    })
}

/// [`run_as_unprivileged`] with `$HOME` set to `home`.
fn unprivileged_run(test: &str, dir: &Path, home: &Path) -> String {
    traversable(dir);
    let mut command = std::process::Command::new(unprivileged_binary());
    command
        .args([
            "--exact",
            test,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HOME", home)
        .env("TMPDIR", "/tmp")
        .env("DSH_ESCAPE_DIR", dir)
        .current_dir("/tmp")
        .uid(UNPRIVILEGED)
        .gid(UNPRIVILEGED);
    let output = common::output_when_not_busy(&mut command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "as uid {UNPRIVILEGED}:\n{stdout}\n{stderr}"
    );
    stdout.into_owned()
}

/// `cargo test --test escape ID` runs technique ID alone (in each engine,
/// as each user): no other test's name holds ID.
#[test]
fn a_technique_id_selects_that_technique_alone() {
    let list = Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--format", "terse"])
        .output()
        .unwrap();
    assert!(list.status.success(), "{list:?}");
    let list = String::from_utf8(list.stdout).unwrap();
    let tests: Vec<&str> = list
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .collect();
    let techniques = techniques();
    assert!(techniques.len() > 100, "{} techniques", techniques.len());
    for technique in techniques {
        let mut selected: Vec<&str> = tests
            .iter()
            .copied()
            .filter(|t| t.contains(technique.id))
            .collect();
        selected.sort_unstable();
        let mut tests = vec!["native", "native_unprivileged"];
        if technique.bubblewrap {
            tests.extend(["bubblewrap", "bubblewrap_unprivileged"]);
        }
        let mut wanted: Vec<String> = tests
            .iter()
            .map(|t| format!("{}::{t}", technique.id))
            .collect();
        wanted.sort_unstable();
        assert_eq!(selected, wanted, "{}", technique.name);
    }
}

/// The suite can fail: against a shell without a sandbox it reports the
/// escapes (guarded techniques report the shared namespace instead of
/// acting on the host). Every technique gets a lab of its own, so none is
/// found out by what an earlier one did; a few run at once (most of their
/// time is spent waiting: the survivors' bound alone is 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_detects_an_unconfined_shell() {
    let at_once = std::sync::Arc::new(tokio::sync::Semaphore::new(4));
    let mut set = tokio::task::JoinSet::new();
    let mut ran = 0;
    for technique in techniques() {
        ran += 1;
        let at_once = std::sync::Arc::clone(&at_once);
        set.spawn(async move {
            let _permit = at_once.acquire_owned().await.unwrap();
            let lab = Lab::new();
            let failure = try_technique(
                &lab,
                &technique,
                SandboxMode::DangerFullAccess,
                Engine::Native,
            )
            .await;
            failure.into_iter().collect::<Vec<_>>()
        });
    }
    ran += 1;
    set.spawn(async {
        survivors(&Lab::new(), SandboxMode::DangerFullAccess, Engine::Native).await
    });
    let mut failures = Vec::new();
    while let Some(found) = set.join_next().await {
        failures.extend(found.unwrap());
    }
    let failed = |name: &str| failures.iter().any(|f| f.contains(&format!("] {name} (")));
    for name in [
        "overwrite a file outside",
        "chmod 4777 outside",
        "set-user-ID bit (chmod)",
        "open_by_handle_at outside",
        "kill a process outside",
        "see processes outside",
        "a process namespace of its own",
        "SysV shared memory of a process outside",
        ".git/config",
        "kill every process (kill -9 -1)",
    ] {
        assert!(
            failed(name),
            "not detected: {name}\n{}",
            failures.join("\n")
        );
    }
    assert!(
        failures
            .iter()
            .any(|f| f.contains("processes outlived the shell")),
        "survivors not detected"
    );
    assert!(
        failures
            .iter()
            .any(|f| f.contains("found a repository in the workspace root")),
        "the bare-repository plant not detected:\n{}",
        failures.join("\n")
    );
    assert!(
        failures.len() * 2 > ran,
        "only {} of {ran} detected",
        failures.len()
    );
}

// ---------------------------------------------------------------------------
// Hiding that survives the host: the test process plays the host, replacing
// hidden credential stores the way `passwd`, `git credential-store`, `npm
// login` and `cargo login` do, while a confined shell and an editor live.

/// A workspace and, beside it, a host directory holding credential stores.
struct HideLab {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    host: PathBuf,
    out: PathBuf,
    plain: PathBuf,
}

impl HideLab {
    fn new() -> HideLab {
        let parent = std::env::var_os("DSH_ESCAPE_DIR").map_or_else(visible_tmp, PathBuf::from);
        let dir = tempfile::Builder::new()
            .prefix("dsh-hiding-")
            .tempdir_in(parent)
            .unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (ws, host, out, plain) = (
            base.join("ws"),
            base.join("host"),
            base.join("out"),
            base.join("plain"),
        );
        write(&ws.join("a.txt"), "inside\n");
        write(&host.join(".netrc"), "SECRET netrc start\n");
        write(&host.join("store/key"), "SECRET store start\n");
        write(&host.join("hide.txt"), "SECRET hide start\n");
        write(&host.join("public.txt"), "public\n");
        write(&out.join("file.txt"), "outside\n");
        std::fs::create_dir_all(&plain).unwrap();
        // A hidden file with another name made before start.
        write(&host.join("linked.txt"), "LINKED secret\n");
        std::fs::hard_link(host.join("linked.txt"), plain.join("alias.txt")).unwrap();
        for d in [&base, &ws, &host, &out, &plain, &host.join("store")] {
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        HideLab {
            _dir: dir,
            ws,
            host,
            out,
            plain,
        }
    }

    /// The default hidden paths, the host's stores (some made only later)
    /// and a name in the workspace that does not exist at start.
    fn policy(&self) -> SandboxPolicy {
        let mut hidden = SandboxPolicy::default_hidden_paths();
        hidden.extend([
            self.host.join(".netrc"),
            self.host.join("store"),
            self.host.join("hide.txt"),
            self.host.join("linked.txt"),
            self.host.join("late-store"),
            self.host.join("later/deeper/creds"),
            self.ws.join("late-secret.txt"),
        ]);
        SandboxPolicy::default()
            .mode(SandboxMode::WorkspaceWrite)
            .hidden_paths(hidden)
    }

    /// The hidden files a reader could reach, each in its current place.
    fn secrets(&self) -> Vec<PathBuf> {
        vec![
            self.host.join(".netrc"),
            self.host.join("hide.txt"),
            self.host.join("store/key"),
            self.host.join("late-store/creds"),
            self.host.join("later/deeper/creds"),
        ]
    }
}

/// One round of the host's changes: a file renamed over `.netrc`, `hide.txt`
/// unlinked and made again, `store` removed and made again.
fn host_replaces(lab: &HideLab, round: usize) {
    let tmp = lab.host.join(".netrc.tmp");
    write(&tmp, &format!("SECRET netrc {round}\n"));
    std::fs::rename(&tmp, lab.host.join(".netrc")).unwrap();
    std::fs::remove_file(lab.host.join("hide.txt")).unwrap();
    write(
        &lab.host.join("hide.txt"),
        &format!("SECRET hide {round}\n"),
    );
    std::fs::remove_dir_all(lab.host.join("store")).unwrap();
    write(
        &lab.host.join("store/key"),
        &format!("SECRET store {round}\n"),
    );
}

async fn hiding_survives(lab: &HideLab) -> Vec<String> {
    let policy = lab.policy();
    let shell = SandboxedShell::new(SandboxConfig::new(
        policy.clone(),
        ShellConfig::new(&lab.ws)
            .env(vec![("H".into(), lab.host.display().to_string())])
            .timeout(Duration::from_secs(120)),
    ))
    .unwrap();
    let editor = Editor::new(SandboxFs::new(policy, &lab.ws));
    let mut failures = Vec::new();
    // Both live before the host's first change, and see the host's public
    // file (the test would be vacuous otherwise).
    assert_eq!(run(&shell, "cat $H/public.txt").await, "public");
    let view = editor
        .execute(&json!({"command": "view", "path": lab.host.join("public.txt")}))
        .await
        .unwrap();
    assert!(view.contains("public"), "{view}");
    // The directory shown through the overlay keeps the host's mode and
    // owner (the host's here is this uid's, which the sandbox maps).
    let meta = std::fs::metadata(&lab.host).unwrap();
    let host_stat = format!("{:o}:{}:{}", meta.mode() & 0o7777, meta.uid(), meta.gid());
    let inside = run(&shell, "stat -c %a:%u:%g $H").await;
    if inside != host_stat {
        failures.push(format!(
            "[shell] {} shows {inside}, not {host_stat}",
            lab.host.display()
        ));
    }
    let outside = snapshot(&[&lab.out]);
    let read_back = "cat $H/.netrc $H/hide.txt $H/store/key $H/late-store/creds \
                     $H/later/deeper/creds 2>&1; ls -A $H/store $H/late-store $H/later/deeper 2>&1";
    for round in 0..100 {
        host_replaces(lab, round);
        if round == 50 {
            // Stores that did not exist when the shell and editor started.
            write(&lab.host.join("late-store/creds"), "SECRET late\n");
            write(&lab.host.join("later/deeper/creds"), "SECRET later\n");
            write(&lab.ws.join("late-secret.txt"), "SECRET in the workspace\n");
        }
        let shown = run(&shell, read_back).await;
        if shown.contains("SECRET") {
            failures.push(format!("[shell] round {round}: {shown}"));
        }
        for path in lab.secrets() {
            let text = match editor
                .execute(&json!({"command": "view", "path": path}))
                .await
            {
                Ok(text) => text,
                Err(e) => dsh_editor::contract::render_error(&e),
            };
            if text.contains("SECRET") {
                failures.push(format!(
                    "[editor] round {round}: {}: {text}",
                    path.display()
                ));
            }
        }
        // The editor hides a name made in the workspace after start.
        if round >= 50 {
            let path = lab.ws.join("late-secret.txt");
            let view = editor
                .execute(&json!({"command": "view", "path": path}))
                .await;
            if view.as_ref().is_ok_and(|t| t.contains("SECRET")) {
                failures.push(format!("[editor] round {round}: {view:?}"));
            }
        }
        // What the host wrote is what is there: the sandbox changed none of it.
        let kept = std::fs::read_to_string(lab.host.join(".netrc")).unwrap();
        assert_eq!(kept, format!("SECRET netrc {round}\n"));
    }
    // Hiding is by name: another name of a hidden file made before start
    // shows it (documented); none can be made from inside.
    let alias = format!("{}/alias.txt", lab.plain.display());
    let linked = run(&shell, &format!("cat {alias}")).await;
    if linked != "LINKED secret" {
        failures.push(format!("[shell] the documented hard link read: {linked}"));
    }
    let link = run(
        &shell,
        "for f in .netrc hide.txt linked.txt store/key; do ln $H/$f $H/../ws/new-link 2>/dev/null \
         && cat $H/../ws/new-link; rm -f $H/../ws/new-link; done; echo done",
    )
    .await;
    if link != "done" {
        failures.push(format!("[shell] linked a hidden file: {link}"));
    }
    // Writes under a hidden name the editor refuses, whenever it appeared.
    let late = lab.ws.join("late-secret.txt");
    let edit = editor
        .execute(&json!({"command": "str_replace", "path": late, "old_str": "SECRET", "new_str": "seen"}))
        .await;
    if edit.is_ok() || std::fs::read_to_string(&late).unwrap() != "SECRET in the workspace\n" {
        failures.push(format!(
            "[editor] edited a hidden name made after start: {edit:?}"
        ));
    }
    // The public file and the shell's state are unharmed, nothing outside
    // changed.
    assert_eq!(run(&shell, "cat $H/public.txt").await, "public");
    failures.extend(diff(&outside, &snapshot(&[&lab.out])));
    failures
}

/// fanotify is refused; inotify on a host directory reports the host's
/// changes there, but not within a directory that holds hidden names.
async fn file_events(lab: &HideLab) -> Vec<String> {
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("the hiding tests need python3 in /usr/bin or /usr/local/bin");
    let shell = SandboxedShell::new(SandboxConfig::new(
        lab.policy(),
        ShellConfig::new(&lab.ws).timeout(Duration::from_secs(120)),
    ))
    .unwrap();
    let mut failures = Vec::new();
    // FAN_CLASS_NOTIF | FAN_REPORT_FID: unprivileged since Linux 5.13.
    let fanotify = format!(
        "{python} -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); \
         r = l.fanotify_init(0x200, 0); print(r, ctypes.get_errno())'"
    );
    let out = run(&shell, &fanotify).await;
    if out != "-1 1" {
        failures.push(format!("fanotify_init was not refused with EPERM: {out}"));
    }
    let watch = r#"
import ctypes, os, struct, sys
l = ctypes.CDLL(None, use_errno=True)
fd = l.inotify_init1(0)
dirs = {}
for d in sys.argv[1:]:
    wd = l.inotify_add_watch(fd, d.encode(), 0xfff)
    assert wd >= 0, ctypes.get_errno()
    dirs[wd] = d
print("watching", flush=True)
while True:
    buf = os.read(fd, 65536)
    i = 0
    done = False
    while i < len(buf):
        wd, mask, cookie, n = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + n].rstrip(b"\0").decode()
        i += 16 + n
        print(dirs.get(wd, "?") + "/" + name, flush=True)
        done = done or name == "sentinel"
    if done:
        break
"#;
    write(&lab.ws.join("watch.py"), watch);
    // The watcher prints its events into a FIFO this process holds open for
    // reading and writing: each line is an event here, not a poll of a file.
    let events = lab.ws.join("events");
    let c = CString::new(events.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo of a path of this test.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    let receiver = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&events)
        .unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(receiver));
    // The directory holding hidden names, a hidden directory, a plain
    // directory. (A hidden file shows the host's `/dev/null`, whose own
    // events are anyone's writes to it, as for the sandbox's `/dev/null`.)
    let start = format!(
        "{python} {} {} {} {} > {} 2>&1 &",
        lab.ws.join("watch.py").display(),
        lab.host.display(),
        lab.host.join("store").display(),
        lab.plain.display(),
        events.display()
    );
    run(&shell, &start).await;
    // Every line read so far, once one holds `what` (60 s at most).
    let mut seen = String::new();
    let mut wait_for = async |what: &str| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !seen.contains(what) {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no {what:?} in {seen:?}"))
                .unwrap()
                .unwrap();
            seen.push_str(&line);
            seen.push('\n');
        }
        seen.clone()
    };
    wait_for("watching").await;
    // The host replaces a store, makes a file beside it, then one in a
    // plain directory. Events of one inotify instance are read in order:
    // once the last shows, any of the first two would have shown before it.
    host_replaces(lab, 1000);
    write(&lab.host.join("new-beside.txt"), "x");
    write(&lab.plain.join("sentinel"), "x");
    let seen = wait_for("sentinel").await;
    let host = format!("{}/", lab.host.display());
    if seen.lines().any(|l| l.starts_with(&host)) {
        failures.push(format!(
            "inotify reported the host's changes in or beside hidden paths: {seen}"
        ));
    }
    if !seen.contains(&format!("{}/sentinel", lab.plain.display())) {
        failures.push(format!(
            "inotify on a plain host directory saw nothing: {seen}"
        ));
    }
    failures
}

async fn hiding_suite() {
    let lab = HideLab::new();
    let mut failures = hiding_survives(&lab).await;
    failures.extend(file_events(&lab).await);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert!(
        failures.is_empty(),
        "as uid {uid}:\n{}",
        failures.join("\n")
    );
    println!("hiding held as uid {uid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hiding_survives_the_host_as_this_user() {
    hiding_suite().await;
}

/// As root, a copy of this binary runs the same as an unprivileged user.
#[test]
fn hiding_survives_the_host_as_an_unprivileged_user() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(hiding_suite());
        return;
    }
    let stdout = run_copy_as_unprivileged("hiding_survives_the_host_as_this_user");
    assert!(
        stdout.contains(&format!("hiding held as uid {UNPRIVILEGED}")),
        "{stdout}"
    );
}
