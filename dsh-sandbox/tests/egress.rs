//! Egress by name (`SandboxPolicy::allow_domains`): real tools (curl, git
//! over dumb and smart HTTP, pip, Python's urllib) in confined shells reach
//! the hosts named, through the host's proxy, and nothing else; servers on
//! loopback made by the test, names resolved by the proxy's resolver hook
//! (nothing of the machine's is touched). As this user and, when root, as
//! uid 65534 (a copy of this binary).
#![cfg(target_os = "linux")]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::print_stderr,
    clippy::print_stdout
)]

mod common;

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use dsh_sandbox::{
    EgressLimits, Resolve, SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell,
};
use dsh_shell_persistent::ShellConfig;
use serde_json::json;

/// The uid the unprivileged runs drop to.
const UNPRIVILEGED: u32 = 65534;

// ---------------------------------------------------------------------------
// The test's servers and resolver.

/// A server on `127.0.0.1`: `/hello`, `/whoami` (the `Host` it got), files
/// beneath `root` (a git repository for dumb HTTP, a simple package
/// index), `/smart/` through `git http-backend`; it counts connections and
/// records every request's `Host`.
struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
    /// How many of its connections are open now.
    open: tokio::sync::watch::Receiver<usize>,
    hosts: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn start(root: Option<PathBuf>) -> Server {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let hosts = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (Arc::clone(&connections), Arc::clone(&hosts));
        let (gauge, open) = tokio::sync::watch::channel(0usize);
        let gauge = Arc::new(gauge);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                count.fetch_add(1, Ordering::SeqCst);
                gauge.send_modify(|n| *n += 1);
                let (seen, root, gauge) = (Arc::clone(&seen), root.clone(), Arc::clone(&gauge));
                tokio::spawn(async move {
                    let _closed = Closed(gauge);
                    let service = hyper::service::service_fn(move |req| {
                        let (seen, root) = (Arc::clone(&seen), root.clone());
                        async move { Ok::<_, hyper::Error>(serve(req, &seen, root.as_deref()).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Server {
            port,
            connections,
            open,
            hosts,
            task,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn hosts(&self) -> Vec<String> {
        self.hosts.lock().unwrap().clone()
    }
}

/// Counts a connection of the test server closed when dropped.
struct Closed(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Closed {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

fn reply(status: u16, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(body.into()))
        .unwrap()
}

async fn serve(
    req: Request<hyper::body::Incoming>,
    seen: &Mutex<Vec<String>>,
    root: Option<&Path>,
) -> Response<Full<Bytes>> {
    let host = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_owned();
    seen.lock().unwrap().push(host.clone());
    let path = req.uri().path().to_owned();
    match path.as_str() {
        "/hello" => return reply(200, "hello from the test server\n"),
        "/whoami" => return reply(200, format!("host={host}\n")),
        _ => {}
    }
    let Some(root) = root else {
        return reply(404, "no files\n");
    };
    if let Some(rest) = path.strip_prefix("/smart/") {
        return http_backend(req, root, rest).await;
    }
    let mut file = root.join(path.trim_start_matches('/'));
    if path.contains("..") {
        return reply(400, "no\n");
    }
    if file.is_dir() {
        file = file.join("index.html");
    }
    match std::fs::read(&file) {
        Ok(bytes) if file.extension().is_some_and(|e| e == "html") => {
            let mut response = reply(200, bytes);
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/html"),
            );
            response
        }
        Ok(bytes) => reply(200, bytes),
        Err(_) => reply(404, "not found\n"),
    }
}

/// `git http-backend` as a CGI program (smart HTTP) for `root`'s
/// repositories.
async fn http_backend(
    req: Request<hyper::body::Incoming>,
    root: &Path,
    path: &str,
) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", format!("/{path}"))
        .env("REQUEST_METHOD", method)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", content_type)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, &body)
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap().stdout;
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4))
        .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|at| (at, 2)))
        .unwrap();
    let head = String::from_utf8_lossy(&out[..split.0]).into_owned();
    let mut response = Response::builder();
    let mut status = 200;
    for line in head.lines() {
        let (name, value) = line.split_once(':').unwrap();
        if name.eq_ignore_ascii_case("status") {
            status = value.trim()[..3].parse().unwrap();
        } else {
            response = response.header(name.trim(), value.trim());
        }
    }
    response
        .status(status)
        .body(Full::new(Bytes::copy_from_slice(&out[split.0 + split.1..])))
        .unwrap()
}

/// Every name under `.test` (and `.test.evil`) is `127.0.0.1`; other names
/// do not resolve; IP literals are themselves.
#[derive(Debug)]
struct TestResolver;

#[async_trait::async_trait]
impl Resolve for TestResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        if host.ends_with(".test") || host.ends_with(".test.evil") {
            return Ok(vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)]);
        }
        Err(io::Error::new(io::ErrorKind::NotFound, "not a test name"))
    }
}

// ---------------------------------------------------------------------------
// The lab: the servers, a git repository, a package index, a workspace.

struct Lab {
    /// Serves the named hosts.
    files: Server,
    /// Must never be reached: every refused request names its port.
    canary: Server,
    workspace: tempfile::TempDir,
    _root: tempfile::TempDir,
}

/// The Python the probes use inside (the system's, which every user can
/// run; `DSH_TEST_PYTHON` may be a venv only its owner reaches).
fn python() -> String {
    "/usr/bin/python3".to_owned()
}

/// The command that runs pip: the system Python's, else pip run from the
/// wheel `python3-venv` brings (`/usr/share/python-wheels`), else a venv
/// made once per process; nothing is downloaded.
fn pip() -> String {
    static PIP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PIP.get_or_init(|| {
        let works = |command: &str| {
            Command::new("sh")
                .args(["-c", &format!("{command} --version")])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let system = format!("{} -m pip", python());
        if works(&system) {
            return system;
        }
        let wheel = std::fs::read_dir("/usr/share/python-wheels")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("pip-") && n.ends_with(".whl"))
            });
        if let Some(wheel) = wheel {
            let from_wheel = format!("{} {}/pip", python(), wheel.display());
            if works(&from_wheel) {
                return from_wheel;
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("dsh-egress-venv-")
            .tempdir_in("/var/tmp")
            .unwrap()
            .keep();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let made = Command::new(python())
            .args(["-m", "venv"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(
            made.success(),
            "no pip: the system's Python has none and python3 -m venv failed"
        );
        VENV.set(dir.clone()).unwrap();
        extern "C" fn remove_venv() {
            if let Some(dir) = VENV.get() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        // SAFETY: registers a function of no arguments that only removes
        // the venv this process made.
        assert_eq!(unsafe { libc::atexit(remove_venv) }, 0);
        let venv = format!("{}/bin/python -m pip", dir.display());
        assert!(works(&venv), "the venv at {} has no pip", dir.display());
        venv
    })
    .clone()
}

/// The venv [`pip`] made, if it made one.
static VENV: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// A bare repository `repo.git` with one commit (`README` = "egress works"),
/// ready for dumb HTTP too.
fn make_repo(root: &Path) {
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("README"), "egress works\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-qm", "first"]);
    git(root, &["clone", "-q", "--bare", "work", "repo.git"]);
    git(&root.join("repo.git"), &["update-server-info"]);
}

/// A simple index (`/simple/dshprobe/`) whose one wheel is on another host
/// (`wheels.example.test`), as PyPI's files are on their own host.
fn make_index(root: &Path, port: u16) {
    let files = root.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let wheel = files.join("dshprobe-1.0-py3-none-any.whl");
    let script = r#"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("dshprobe/__init__.py", "VALUE = 42\n")
    z.writestr("dshprobe-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: dshprobe\nVersion: 1.0\n")
    z.writestr("dshprobe-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("dshprobe-1.0.dist-info/RECORD", "dshprobe/__init__.py,,\ndshprobe-1.0.dist-info/METADATA,,\ndshprobe-1.0.dist-info/WHEEL,,\ndshprobe-1.0.dist-info/RECORD,,\n")
"#;
    let status = Command::new(python())
        .args(["-c", script])
        .arg(&wheel)
        .status()
        .unwrap();
    assert!(status.success());
    let project = root.join("simple/dshprobe");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("index.html"),
        format!(
            "<html><body><a href=\"http://wheels.example.test:{port}/files/dshprobe-1.0-py3-none-any.whl\">dshprobe-1.0-py3-none-any.whl</a></body></html>\n"
        ),
    )
    .unwrap();
}

/// Where the lab's directories go: beneath `/var/tmp` (seen by the
/// sandbox, reachable by the unprivileged user).
fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dsh-egress-")
        .tempdir_in(if std::env::var_os("DSH_EGRESS_UNPRIVILEGED").is_some() {
            PathBuf::from("/var/tmp")
        } else {
            common::visible_tmp()
        })
        .unwrap()
}

impl Lab {
    async fn new() -> Lab {
        let root = tempdir();
        make_repo(root.path());
        let files = Server::start(Some(root.path().to_owned())).await;
        make_index(root.path(), files.port);
        let canary = Server::start(None).await;
        Lab {
            files,
            canary,
            workspace: tempdir(),
            _root: root,
        }
    }

    fn allowed(&self) -> Vec<String> {
        let port = self.files.port;
        vec![
            format!("files.example.test:{port}"),
            format!("wheels.example.test:{port}"),
            format!("*.wild.test:{port}"),
        ]
    }

    fn shell(&self, mode: SandboxMode, limits: EgressLimits) -> SandboxedShell {
        let policy = SandboxPolicy::default()
            .mode(mode)
            .allow_domains(self.allowed());
        let config = SandboxConfig::new(
            policy,
            ShellConfig::new(self.workspace.path()).timeout(Duration::from_secs(60)),
        )
        .egress_resolver(Some(Arc::new(TestResolver)))
        .egress_limits(limits);
        SandboxedShell::new(config).unwrap()
    }
}

async fn run(s: &SandboxedShell, owner: &str, cmd: &str) -> String {
    s.execute(owner, &json!({ "command": cmd }))
        .await
        .unwrap_or_else(|e| format!("tool error: {}", dsh_sandbox::contract::render_error(&e)))
}

/// Asserts `out` holds `want`, naming the command.
fn holds(cmd: &str, out: &str, want: &str) {
    assert!(out.contains(want), "`{cmd}` should print {want:?}:\n{out}");
}

// ---------------------------------------------------------------------------
// Running as the unprivileged user.

/// Runs `test` (exactly) in a copy of this binary as [`UNPRIVILEGED`] when
/// root; else runs `check` here.
fn as_unprivileged<F: std::future::Future<Output = ()>>(test: &str, check: impl FnOnce() -> F) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        tokio::runtime::Runtime::new().unwrap().block_on(check());
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("dsh-egress-bin-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let copy = dir.path().join("egress");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    let mut command = Command::new(&copy);
    command
        .args([
            "--exact",
            test,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HOME", "/tmp")
        .env("TMPDIR", "/var/tmp")
        .env("DSH_EGRESS_UNPRIVILEGED", "1")
        .current_dir("/tmp")
        .uid(UNPRIVILEGED)
        .gid(UNPRIVILEGED);
    let output = common::output_when_not_busy(&mut command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "as uid {UNPRIVILEGED}:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("egress held as uid {UNPRIVILEGED}")),
        "{stdout}"
    );
}

/// Says which uid a check held as (what [`as_unprivileged`] looks for).
fn held() {
    // SAFETY: geteuid has no preconditions.
    println!("egress held as uid {}", unsafe { libc::geteuid() });
}

// ---------------------------------------------------------------------------
// The tools reach the named hosts, and nothing else.

/// curl (plain and through CONNECT), git, pip and urllib reach the named
/// hosts in `mode`; refusals are 403s naming host and port; nothing around
/// the proxy reaches anything.
async fn tools(mode: SandboxMode) {
    let lab = Lab::new().await;
    let s = lab.shell(mode, EgressLimits::default());
    let (port, canary) = (lab.files.port, lab.canary.port);
    let py = python();
    let pip = pip();
    let cases: Vec<(String, String)> = vec![
        (
            "echo \"$HTTP_PROXY $https_proxy $ALL_PROXY [${NO_PROXY-unset}]\"".to_owned(),
            "http://127.0.0.1:3128 http://127.0.0.1:3128 http://127.0.0.1:3128 []".to_owned(),
        ),
        // Plain HTTP and CONNECT (curl -p tunnels http:// too).
        (
            format!("curl -sS http://files.example.test:{port}/hello"),
            "hello from the test server".to_owned(),
        ),
        (
            format!("curl -sS -p http://files.example.test:{port}/hello"),
            "hello from the test server".to_owned(),
        ),
        // Wildcards: subdomains only.
        (
            format!("curl -sS http://a.wild.test:{port}/whoami"),
            format!("host=a.wild.test:{port}"),
        ),
        (
            format!("curl -sS http://wild.test:{port}/whoami"),
            format!("wild.test:{port} is not in --allow-domain"),
        ),
        (
            format!("curl -sS http://a.wild.test.evil:{port}/whoami"),
            format!("a.wild.test.evil:{port} is not in --allow-domain"),
        ),
        // Refusals: a host, a port, an IP literal of a named host.
        (
            format!("curl -sS -w '%{{http_code}}' http://other.example.test:{canary}/hello"),
            format!("other.example.test:{canary} is not in --allow-domain"),
        ),
        (
            format!("curl -sS -w ' code=%{{http_code}}' http://files.example.test:{canary}/hello"),
            "code=403".to_owned(),
        ),
        (
            format!("curl -sS http://127.0.0.1:{canary}/hello"),
            format!("127.0.0.1:{canary} is not in --allow-domain"),
        ),
        (
            format!(
                "curl -sS -o /dev/null -p -w 'connect=%{{http_connect}}' http://other.example.test:{canary}/hello; echo \" exit=$?\""
            ),
            "connect=403 exit=56".to_owned(),
        ),
        // Around the proxy: nothing.
        (
            format!(
                "curl -sS --noproxy '*' --max-time 10 http://127.0.0.1:{canary}/hello; echo \"exit=$?\""
            ),
            "exit=7".to_owned(),
        ),
        (
            format!(
                "{py} -c \"import socket\ntry:\n  socket.create_connection(('127.0.0.1', {canary}), timeout=5); print('CONNECTED')\nexcept OSError as e: print('refused', e.errno)\ntry:\n  socket.create_connection(('1.1.1.1', 443), timeout=5); print('CONNECTED')\nexcept OSError as e: print('unreachable', e.errno)\""
            ),
            "refused 111\nunreachable 101".to_owned(),
        ),
        (
            format!(
                "{py} -c \"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry:\n  s.sendto(b'x', ('8.8.8.8', 53)); print('SENT')\nexcept OSError as e: print('udp', e.errno)\ntry:\n  socket.getaddrinfo('files.example.test', 80); print('RESOLVED')\nexcept OSError as e: print('dns failed')\""
            ),
            "udp 101\ndns failed".to_owned(),
        ),
        // Python's urllib honours the variables.
        (
            format!(
                "{py} -c \"import urllib.request; print(urllib.request.urlopen('http://files.example.test:{port}/hello').read().decode())\""
            ),
            "hello from the test server".to_owned(),
        ),
        // git, dumb and smart HTTP.
        (
            format!("git ls-remote http://files.example.test:{port}/repo.git"),
            "refs/heads/main".to_owned(),
        ),
        (
            format!(
                "GIT_SMART_HTTP=1 git ls-remote http://files.example.test:{port}/smart/repo.git"
            ),
            "refs/heads/main".to_owned(),
        ),
        // pip: the index on one host, its files on another (read-only:
        // nowhere to download to, the index alone).
        if mode == SandboxMode::WorkspaceWrite {
            (
                format!(
                    "{pip} download --no-deps --no-cache-dir --disable-pip-version-check -q -d \"$TMPDIR/pip-$$\" --index-url http://files.example.test:{port}/simple/ --trusted-host files.example.test --trusted-host wheels.example.test dshprobe 2>&1; ls \"$TMPDIR/pip-$$\" 2>&1"
                ),
                "dshprobe-1.0-py3-none-any.whl".to_owned(),
            )
        } else {
            (
                format!(
                    "{pip} index versions --no-cache-dir --disable-pip-version-check --index-url http://files.example.test:{port}/simple/ --trusted-host files.example.test dshprobe 2>&1"
                ),
                "dshprobe (1.0)".to_owned(),
            )
        },
    ];
    for (cmd, want) in &cases {
        let out = run(&s, "agent", cmd).await;
        holds(cmd, &out, want);
    }
    if mode == SandboxMode::WorkspaceWrite {
        let cmd = format!(
            "cd /tmp && git clone -q http://files.example.test:{port}/smart/repo.git smart && cat smart/README && git clone -q http://files.example.test:{port}/repo.git dumb && cat dumb/README"
        );
        let out = run(&s, "agent", &cmd).await;
        assert_eq!(out.matches("egress works").count(), 2, "{cmd}:\n{out}");
    }
    assert_eq!(
        lab.canary.connections(),
        0,
        "a refused request reached the canary"
    );
    let hosts = lab.files.hosts();
    assert!(
        hosts
            .iter()
            .all(|h| !h.contains("evil") && !h.starts_with("wild.test")),
        "{hosts:?}"
    );
    held();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_reach_named_hosts_in_workspace_write() {
    tools(SandboxMode::WorkspaceWrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_reach_named_hosts_in_read_only() {
    tools(SandboxMode::ReadOnly).await;
}

#[test]
fn tools_reach_named_hosts_unprivileged() {
    as_unprivileged("tools_reach_named_hosts_in_workspace_write", || {
        tools(SandboxMode::WorkspaceWrite)
    });
    as_unprivileged("tools_reach_named_hosts_in_read_only", || {
        tools(SandboxMode::ReadOnly)
    });
}

// ---------------------------------------------------------------------------
// Abuse.

/// A Python probe that talks to the proxy in raw bytes: each argument is a
/// request sent on a connection of its own; prints each answer's first
/// line and body.
const RAW: &str = r#"
import socket, sys
for raw in sys.argv[1:]:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(raw.encode().decode("unicode_escape").encode("latin-1"))
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    print(repr(data.decode("latin-1")))
    s.close()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abuse_leaves_the_proxy_serving_within_its_bounds() {
    let lab = Lab::new().await;
    let mut limits = EgressLimits::default();
    limits.header_timeout = Duration::from_secs(2);
    let s = lab.shell(SandboxMode::WorkspaceWrite, limits);
    let (port, canary) = (lab.files.port, lab.canary.port);
    let py = python();
    let probe = lab.workspace.path().join("raw.py");
    std::fs::write(&probe, RAW).unwrap();
    let raw = |requests: &[String]| {
        let args: Vec<String> = requests.iter().map(|r| format!("'{r}'")).collect();
        format!("{py} {} {}", probe.display(), args.join(" "))
    };
    // A CONNECT smuggled in a request line; a pipelined CONNECT after an
    // allowed request; an absolute URL naming one host, Host another.
    let cmd = raw(&[
        format!(
            "CONNECT other.example.test:{canary} HTTP/1.1 files.example.test:{port}\\r\\nHost: files.example.test:{port}\\r\\n\\r\\n"
        ),
        format!(
            "GET http://files.example.test:{port}/hello HTTP/1.1\\r\\nHost: files.example.test:{port}\\r\\n\\r\\nCONNECT other.example.test:{canary} HTTP/1.1\\r\\nHost: other.example.test:{canary}\\r\\nConnection: close\\r\\n\\r\\n"
        ),
        format!(
            "GET http://files.example.test:{port}/whoami HTTP/1.1\\r\\nHost: other.example.test:{canary}\\r\\nConnection: close\\r\\n\\r\\n"
        ),
        format!(
            "GET http://other.example.test:{canary}/hello HTTP/1.1\\r\\nHost: files.example.test:{port}\\r\\nConnection: close\\r\\n\\r\\n"
        ),
        format!(
            "GET /hello HTTP/1.1\\r\\nHost: files.example.test:{port}\\r\\nConnection: close\\r\\n\\r\\n"
        ),
    ]);
    let out = run(&s, "agent", &cmd).await;
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('\'') || l.starts_with('"'))
        .collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].contains("HTTP/1.1 400"), "{out}");
    assert!(
        lines[1].contains("hello from the test server")
            && lines[1].contains("HTTP/1.1 403")
            && lines[1].contains(&format!(
                "other.example.test:{canary} is not in --allow-domain"
            )),
        "{out}"
    );
    assert!(
        lines[2].contains(&format!("host=files.example.test:{port}")),
        "{out}"
    );
    assert!(lines[3].contains("HTTP/1.1 403"), "{out}");
    assert!(lines[4].contains("HTTP/1.1 400"), "{out}");

    // 1,000 connections from one shell: at most the per-shell bound are
    // served; another owner is served meanwhile; then this one again.
    let thousand = format!(
        r#"ulimit -n 4096 || ulimit -n $(ulimit -H -n); {py} -c "
import socket, time
conns = [socket.create_connection(('127.0.0.1', 3128), timeout=10) for _ in range(1000)]
print('opened', len(conns))
req = b'GET http://files.example.test:{port}/hello HTTP/1.1\r\nHost: files.example.test:{port}\r\n\r\n'
for c in conns:
    try: c.sendall(req)
    except OSError: pass
served = 0
for c in conns:
    try:
        if c.recv(4096).startswith(b'HTTP/1.1 200'): served += 1
    except OSError: pass
print('served', served)
open('$TMPDIR/held', 'w').close()
import os
while os.path.exists('$TMPDIR/held'): time.sleep(0.05)
" & while [ ! -e $TMPDIR/held ]; do sleep 0.05; done; echo ready"#
    );
    let out = run(&s, "agent", &thousand).await;
    holds(&thousand, &out, "ready");
    holds(&thousand, &out, "opened 1000");
    let served: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("served "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        served >= 1 && served <= EgressLimits::default().per_shell,
        "{out}"
    );
    let other = run(
        &s,
        "other",
        &format!("curl -sS http://files.example.test:{port}/hello"),
    )
    .await;
    holds(
        "curl from another owner",
        &other,
        "hello from the test server",
    );
    let out = run(&s, "agent", "rm $TMPDIR/held; wait; echo done").await;
    holds("rm", &out, "done");

    // A slow client: it sends half a request head and stalls; the proxy
    // ends it after the head timeout, and serves others meanwhile.
    let slow = format!(
        r#"{py} -c "
import socket, time, urllib.request
s = socket.create_connection(('127.0.0.1', 3128), timeout=30)
s.sendall(b'GET http://files.example.test:{port}/hello HTTP/1.1\r\nHo')
print(urllib.request.urlopen('http://files.example.test:{port}/hello').read().decode().strip())
start = time.time()
data = s.recv(4096)
print('slow client ended', 'within bound' if time.time() - start < 25 else 'late', data[:12])
""#
    );
    let out = run(&s, "agent", &slow).await;
    holds(&slow, &out, "hello from the test server");
    holds(&slow, &out, "slow client ended within bound");
    let again = run(
        &s,
        "agent",
        &format!("curl -sS http://files.example.test:{port}/hello"),
    )
    .await;
    holds("curl after the abuse", &again, "hello from the test server");
    assert_eq!(lab.canary.connections(), 0);
    assert!(
        lab.files.hosts().iter().all(|h| !h.contains("other")),
        "{:?}",
        lab.files.hosts()
    );
}

/// Closing an owner's shell ends its proxied connections (a tunnel held
/// open inside ends with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owners_connections_end_with_its_shell() {
    let lab = Lab::new().await;
    let s = lab.shell(SandboxMode::WorkspaceWrite, EgressLimits::default());
    let port = lab.files.port;
    let py = python();
    let cmd = format!(
        r#"{py} -c "
import socket, time
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
s.sendall(b'CONNECT files.example.test:{port} HTTP/1.1\r\n\r\n')
print(s.recv(4096).split(b'\r\n')[0].decode())
time.sleep(3600)
" & sleep 1; echo started"#
    );
    let out = run(&s, "agent", &cmd).await;
    holds(&cmd, &out, "HTTP/1.1 200");
    assert_eq!(*lab.files.open.borrow(), 1, "the tunnel's upstream is open");
    s.close_owner("agent").await;
    let mut open = lab.files.open.clone();
    tokio::time::timeout(Duration::from_secs(30), open.wait_for(|n| *n == 0))
        .await
        .expect("the tunnel outlived its owner's shell")
        .unwrap();
    held();
}

/// `danger-full-access` and `network` are refused with allowed domains.
#[test]
fn allowed_domains_are_refused_where_nothing_enforces_them() {
    let ws = tempdir();
    let make = |policy: SandboxPolicy| {
        SandboxedShell::new(SandboxConfig::new(policy, ShellConfig::new(ws.path())))
            .map(|_| ())
            .map_err(|e| dsh_sandbox::contract::render_error(&e))
    };
    let allow = vec!["pypi.org".to_owned()];
    let full = make(
        SandboxPolicy::default()
            .mode(SandboxMode::DangerFullAccess)
            .allow_domains(allow.clone()),
    )
    .unwrap_err();
    assert!(full.contains("danger-full-access"), "{full}");
    let network = make(
        SandboxPolicy::default()
            .network(true)
            .allow_domains(allow.clone()),
    )
    .unwrap_err();
    assert!(network.contains("`network`"), "{network}");
    let bad = make(SandboxPolicy::default().allow_domains(vec!["*.".to_owned()])).unwrap_err();
    assert!(bad.contains("\"*.\""), "{bad}");
}
