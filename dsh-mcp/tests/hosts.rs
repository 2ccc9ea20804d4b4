//! Several hosts: four network namespaces made by the test, each with a
//! veth pair and addresses of the test's own (10.77.N.0/24) and a real
//! `dsh-mcp --listen` in it; one harness (the example's fleet module, the
//! official SDK's client) spreads 400 sessions over them; one server is
//! killed mid-run: its sessions end with a clear error, the others go on.
//!
//! Nothing host-wide changes: the harness runs on a thread of its own that
//! left the host's network namespace (`unshare(CLONE_NEWNET)` changes only
//! the calling thread's), the servers are started from that thread by
//! `unshare --net` (each a namespace of its own, never mounted under
//! `/run/netns`), and the veth pairs join the harness's namespace to each
//! server's. Every namespace goes when its last process does.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stderr)]

mod common;

#[allow(dead_code)]
#[path = "../examples/harness/fleet.rs"]
mod fleet;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

const SERVERS: usize = 4;
const SESSIONS: usize = 400;
/// Every session waits before this call (0-based) until the server is killed.
const CHECKPOINT: usize = 3;
/// The server killed mid-run.
const KILLED: usize = 2;
const PORT: u16 = 7777;
const TOKEN: &str = "hosts-test-token-0123456789abcdef";
const BOUND: Duration = Duration::from_secs(60);
/// The bound of the whole run (400 sessions on a loaded machine).
const RUN_BOUND: Duration = Duration::from_secs(600);

/// The namespace `path` (`/proc/.../ns/net`) names, as `net:[INODE]`.
fn netns(path: &str) -> String {
    std::fs::read_link(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .display()
        .to_string()
}

/// The host's interfaces (sysfs shows those of the namespace it was
/// mounted in, whichever thread reads it).
fn host_interfaces() -> BTreeSet<String> {
    std::fs::read_dir("/sys/class/net")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Runs `ip ARGS` from the calling thread (in its namespace), which must
/// succeed.
async fn ip(args: &[&str]) -> String {
    let out = tokio::time::timeout(
        BOUND,
        Command::new("ip")
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("ip {args:?} did not end"))
    .unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
    assert!(
        out.status.success(),
        "ip {args:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The live processes in network namespace `ns` (`net:[INODE]`).
fn processes_in(ns: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|l| l.display().to_string() == ns)
        })
        .collect()
}

/// Waits until every process of namespace `ns` ended (each one's end an
/// event: its pidfd).
async fn namespace_emptied(ns: &str, what: &str) {
    for pid in processes_in(ns) {
        assert!(common::gone(pid).await, "{what}: process {pid} still runs");
    }
    let left = processes_in(ns);
    assert!(left.is_empty(), "{what}: processes {left:?} still run");
}

/// A `dsh-mcp --listen 10.77.N.2:7777` in a network namespace of its own,
/// joined to the harness's by the veth pair `hN` (10.77.N.1) – `eth0`
/// (10.77.N.2).
struct Server {
    child: Child,
    pid: u32,
    /// Its namespace, `net:[INODE]`.
    ns: String,
    /// `http://10.77.N.2:7777/mcp`.
    url: String,
}

impl Server {
    async fn start(n: usize, dir: &Path, http: &reqwest::Client) -> Server {
        let addr = format!("10.77.{n}.2");
        let workspace = dir.join(format!("ws{n}"));
        let tmp = dir.join(format!("tmp{n}"));
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        // `unshare --net` enters a new namespace and runs sh there; sh says
        // so, waits until its end of the veth pair is there, gives it the
        // address and becomes the server.
        let script = format!(
            "echo ready; read go || exit 1; \
             ip addr add {addr}/24 dev eth0 && ip link set eth0 up && ip link set lo up && \
             exec \"$0\" --listen {addr}:{PORT} --workspace \"$1\" </dev/null >/dev/null"
        );
        let mut child = Command::new("unshare")
            .args(["--net", "--", "sh", "-c", &script])
            .arg(env!("CARGO_BIN_EXE_dsh-mcp"))
            .arg(&workspace)
            // Each session's `mktemp -d` in the test's directory.
            .env("TMPDIR", &tmp)
            .env_remove("DSH_HOME")
            // Not a file: the shells of danger-full-access could read it.
            .env("DSH_TOKEN", TOKEN)
            .env_remove("CARGO_TARGET_DIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("unshare (util-linux) runs");
        let pid = child.id().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let ready = tokio::time::timeout(BOUND, stdout.next_line())
            .await
            .expect("unshare --net started sh")
            .unwrap();
        if ready.as_deref() != Some("ready") {
            let mut err = String::new();
            while let Ok(Some(line)) = stderr.next_line().await {
                err.push_str(&line);
                err.push('\n');
            }
            panic!("unshare --net -- sh: {ready:?}; {err}");
        }
        let ns = netns(&format!("/proc/{pid}/ns/net"));
        assert_ne!(
            ns,
            netns("/proc/thread-self/ns/net"),
            "server {n} is in the harness's namespace"
        );

        let host_end = format!("h{n}");
        ip(&[
            "link",
            "add",
            &host_end,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &pid.to_string(),
        ])
        .await;
        ip(&["addr", "add", &format!("10.77.{n}.1/24"), "dev", &host_end]).await;
        ip(&["link", "set", &host_end, "up"]).await;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").await.unwrap();
        drop(stdin);

        let url = format!("http://{addr}:{PORT}/mcp");
        let said = tokio::time::timeout(BOUND, async {
            let mut said = String::new();
            while let Ok(Some(line)) = stderr.next_line().await {
                said.push_str(&line);
                said.push('\n');
                if line == format!("dsh-mcp: listening on {url}") {
                    return Ok(said);
                }
            }
            Err(said)
        })
        .await
        .expect("the server said where it listens");
        let said = said.unwrap_or_else(|said| panic!("server {n} did not start: {said}"));
        eprint!("server {n} (pid {pid}, {ns}): {said}");
        // Its log from now on, to the test's output.
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("server {n}: {line}");
            }
        });

        // Reached from the harness's namespace, through the veth pair: a
        // bounded poll (the link's carrier comes up on its own time).
        let health = format!("http://{addr}:{PORT}/healthz");
        let mut last = String::new();
        let mut healthy = false;
        for _ in 0..600 {
            match http
                .get(&health)
                .timeout(Duration::from_secs(5))
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => {
                    healthy = true;
                    break;
                }
                Ok(r) => last = format!("status {}", r.status()),
                Err(e) => last = fleet::chain(&e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(healthy, "{health} never answered 200: {last}");
        Server {
            child,
            pid,
            ns,
            url,
        }
    }
}

/// What the harness's thread saw.
struct Outcome {
    harness_ns: String,
    servers_ns: Vec<String>,
    urls: Vec<String>,
    /// `ip -o -4 addr` in the harness's namespace.
    harness_addrs: String,
    report: fleet::Report,
}

/// The harness's side, on a thread in a network namespace of its own.
async fn harness(dir: PathBuf) -> Outcome {
    let harness_ns = netns("/proc/thread-self/ns/net");
    ip(&["link", "set", "lo", "up"]).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();

    let started = Instant::now();
    let mut servers = Vec::new();
    for n in 0..SERVERS {
        servers.push(Server::start(n, &dir, &http).await);
    }
    eprintln!(
        "{SERVERS} namespaces and servers up in {:?}",
        started.elapsed()
    );
    let harness_addrs = ip(&["-o", "-4", "addr", "show"]).await;
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();

    let (progress_tx, mut progress) = watch::channel(fleet::Progress::default());
    let (open_tx, open_rx) = watch::channel(false);
    let config = fleet::FleetConfig {
        servers: urls.clone(),
        token: TOKEN.to_owned(),
        sessions: SESSIONS,
        call_timeout: Duration::from_secs(120),
        reconnects: 2,
        think: Duration::ZERO,
        checkpoint: Some(fleet::Checkpoint {
            before_call: CHECKPOINT,
            open: open_rx,
        }),
        progress: Some(Arc::new(progress_tx)),
    };
    let started = Instant::now();
    let run = tokio::spawn(fleet::run(config));

    // Every session answered its first calls and waits (an event: the
    // fleet's progress), or ended.
    let at = tokio::time::timeout(
        RUN_BOUND,
        progress.wait_for(|p| p.at_checkpoint + p.ended == SESSIONS),
    )
    .await
    .expect("every session reached the checkpoint or ended")
    .map(|p| *p)
    .unwrap();
    eprintln!(
        "{} calls answered in {:?}: {at:?}",
        at.calls_ok,
        started.elapsed()
    );
    assert_eq!(
        (at.at_checkpoint, at.calls_ok, at.calls_failed),
        (SESSIONS, SESSIONS * CHECKPOINT, 0),
        "sessions failed before the checkpoint"
    );

    // Kill one server mid-run. Its namespace is held open (its veth end
    // and address stay): a new session is refused there, as on a host
    // whose server died.
    let killed = &mut servers[KILLED];
    let hold = std::fs::File::open(format!("/proc/{}/ns/net", killed.pid)).unwrap();
    killed.child.start_kill().unwrap();
    let status = tokio::time::timeout(BOUND, killed.child.wait())
        .await
        .expect("the killed server ended")
        .unwrap();
    eprintln!("server {KILLED} killed: {status}");
    // Its shells end with it (their terminal's hangup).
    namespace_emptied(&killed.ns, "the killed server's shells").await;
    let killed_at = Instant::now();
    open_tx.send(true).unwrap();

    let report = tokio::time::timeout(RUN_BOUND, run)
        .await
        .expect("the fleet ended")
        .unwrap()
        .expect("the fleet ran");
    eprintln!(
        "the fleet ended {:?} after the kill, {:?} after its start",
        killed_at.elapsed(),
        started.elapsed()
    );
    drop(hold);

    // The other servers, and every process of their namespaces, end.
    let servers_ns: Vec<String> = servers.iter().map(|s| s.ns.clone()).collect();
    for (n, server) in servers.iter_mut().enumerate() {
        if n != KILLED {
            server.child.kill().await.unwrap();
        }
    }
    for (n, ns) in servers_ns.iter().enumerate() {
        namespace_emptied(ns, &format!("server {n}'s namespace")).await;
    }
    Outcome {
        harness_ns,
        servers_ns,
        urls,
        harness_addrs,
        report,
    }
}

#[test]
#[ignore = "needs root and iproute2: makes network namespaces"]
fn four_hosts_one_killed_mid_run() {
    // Run with --ignored, it must not pass without what it tests.
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root (it makes network namespaces and veth pairs)"
    );
    for (tool, arg) in [("ip", "-V"), ("unshare", "--version")] {
        let ok = std::process::Command::new(tool)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "this test needs `{tool}` on PATH (ip: iproute2, unshare: util-linux)"
        );
    }

    let host_ns = netns("/proc/self/ns/net");
    let interfaces_before = host_interfaces();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(dir_path.join("token"), format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(
        dir_path.join("token"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    let started = Instant::now();
    let thread = std::thread::Builder::new()
        .name("harness-netns".to_owned())
        .spawn(move || {
            // SAFETY: CLONE_NEWNET alone moves this thread (and what it
            // starts from now on) into a new network namespace; the other
            // threads and the host keep theirs.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "unshare(CLONE_NEWNET): {} (the test needs CAP_SYS_ADMIN)",
                std::io::Error::last_os_error()
            );
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(harness(dir_path))
        })
        .unwrap();
    let outcome = match thread.join() {
        Ok(outcome) => outcome,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    eprintln!("the whole test took {:?}", started.elapsed());

    // The namespaces were the test's own: the harness's and each server's
    // differ from the host's and from each other, and held the addresses.
    let mut all: BTreeSet<&String> = outcome.servers_ns.iter().collect();
    all.insert(&outcome.harness_ns);
    all.insert(&host_ns);
    assert_eq!(all.len(), SERVERS + 2, "namespaces shared: {all:?}");
    for n in 0..SERVERS {
        let (dev, addr) = (format!("h{n}"), format!("10.77.{n}.1/24"));
        let held = outcome.harness_addrs.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1] == dev && f[2] == "inet" && f[3] == addr
        });
        assert!(
            held,
            "{addr} on {dev} not in the harness's namespace: {}",
            outcome.harness_addrs
        );
    }
    let host_addrs = std::process::Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .unwrap();
    let host_addrs = String::from_utf8_lossy(&host_addrs.stdout);
    assert!(
        !host_addrs.contains("10.77."),
        "a test address on the host: {host_addrs}"
    );
    let interfaces_after = host_interfaces();
    assert_eq!(
        interfaces_before, interfaces_after,
        "the host's interfaces changed (/sys/class/net)"
    );
    // The token file stays the test's.
    assert_eq!(
        std::fs::metadata(dir.path().join("token")).unwrap().mode() & 0o777,
        0o600
    );

    // The killed server's sessions: each ended at the checkpoint's call
    // with an error naming the server, the lost session and the refused
    // new one; every other session did its whole script.
    let report = &outcome.report;
    eprint!("{}", report.summary(&outcome.urls, 3));
    assert_eq!(report.sessions.len(), SESSIONS);
    let killed_url = &outcome.urls[KILLED];
    for s in &report.sessions {
        if s.session % SERVERS == KILLED {
            assert_eq!(&s.server, killed_url);
            let error = s
                .error
                .as_deref()
                .unwrap_or_else(|| panic!("session {} of the killed server ended well", s.session));
            let head = format!(
                "{killed_url}: session {}, call {CHECKPOINT} (str_replace_editor): the session was lost (",
                s.session
            );
            assert!(error.starts_with(&head), "{error}");
            assert!(
                error.contains("and no new session could be opened (2 tries; the last: ")
                    && error.contains("Connection refused"),
                "{error}"
            );
            assert_eq!(
                (s.calls_ok, s.calls_failed, s.new_sessions),
                (CHECKPOINT, 1, 0),
                "{s:?}"
            );
        } else {
            assert_eq!(s.error, None, "session {}", s.session);
            assert_eq!(
                (s.calls_ok, s.calls_failed, s.new_sessions),
                (fleet::SCRIPT_CALLS, 0, 0),
                "{s:?}"
            );
            assert!(s.notes.is_empty(), "{:?}", s.notes);
        }
    }
    let per_server = report.per_server(&outcome.urls);
    for (n, (_, summary)) in per_server.iter().enumerate() {
        let per = SESSIONS / SERVERS;
        let expected = if n == KILLED {
            fleet::ServerSummary {
                sessions: per,
                completed: 0,
                failed: per,
                calls_ok: per * CHECKPOINT,
                calls_failed: per,
                new_sessions: 0,
            }
        } else {
            fleet::ServerSummary {
                sessions: per,
                completed: per,
                failed: 0,
                calls_ok: per * fleet::SCRIPT_CALLS,
                calls_failed: 0,
                new_sessions: 0,
            }
        };
        assert_eq!(summary, &expected, "server {n}");
    }
}
