//! `dsh-mcp` through its real binary over pipes, one request at a time from
//! a blocking client, next to its baselines in the same run: a minimal Rust
//! line-echo JSON-RPC server (`line-echo`, the pipe floor) for `ping`, and
//! the in-process library calls for `tools/call`, plain Python MCP servers
//! for the editor's `view` (`benches/py/view_server.py`, next to `dsh-mcp`
//! unconfined and in workspace-write) and for `bash true`
//! (`benches/py/bash_server.py`: one bash on a PTY and a marker line).
//! Prints medians, ratios and differences; builds `dsh-mcp` (release) first. A second pass repeats the
//! latency figures with the bench, its servers and all their threads on one
//! CPU, where no wake-up crosses CPUs. Between the two, a pass times the same `ping`,
//! `bash true` and `view` over Streamable HTTP (`dsh-mcp --listen`, one
//! session, a keep-alive connection) next to stdio, in turn.
//!
//! ```text
//! cargo bench -p benches --bench mcp
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_editor::{Editor, fs::LocalFs};
use dsh_shell_persistent::{ShellConfig, ShellPool};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// A stdio JSON-RPC server driven one request at a time.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
    line: String,
}

impl Server {
    fn start(program: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = Server {
            child,
            stdin,
            stdout,
            next: 0,
            line: String::new(),
        };
        let init = server.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}),
        );
        assert!(init.get("result").is_some(), "{init}");
        writeln!(
            server.stdin,
            r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
        )
        .unwrap();
        server
    }

    /// Sends one request and waits for its answer.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        // One write per request, as a real client sends it: `Value`'s
        // `Display` hands its output over token by token, and the unbuffered
        // pipe would turn each token into its own system call (and the
        // server into many reads of a partial line).
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        loop {
            self.line.clear();
            assert!(
                self.stdout.read_line(&mut self.line).unwrap() > 0,
                "the server closed stdout"
            );
            let answer: Value = serde_json::from_str(&self.line).unwrap();
            if answer["id"] == id {
                return answer;
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds the release `dsh-mcp` and returns its path.
fn dsh_mcp() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "dsh-mcp",
            "--bin",
            "dsh-mcp",
        ])
        .current_dir(workspace)
        .status()
        .unwrap();
    assert!(status.success(), "building dsh-mcp failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from);
    target.join("release").join("dsh-mcp")
}

/// The median of `n` timings of `f`, after `n / 10` warm-up runs.
fn median(n: usize, f: impl FnMut()) -> Duration {
    benches::median(n, n / 10, f)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn mcp(_c: &mut Criterion) {
    let dsh = dsh_mcp();
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let ten = ws.join("ten.txt");
    std::fs::write(
        &ten,
        (0..10).map(|i| format!("line {i}\n")).collect::<String>(),
    )
    .unwrap();
    pass(&dsh, &ws, &ten, "", true);
    http_pass(&dsh, &ws, &ten);

    // On a virtual machine a wake-up that crosses CPUs costs tens of
    // microseconds, and where the scheduler places the client, the servers
    // and their threads changes between runs. The same figures with every
    // process and thread of the bench on one CPU show what the server itself
    // costs next to its pipe.
    let mut one = CpuSet::new();
    let cpu = (0..CpuSet::count())
        .find(|&c| {
            sched_getaffinity(Pid::from_raw(0))
                .and_then(|set| set.is_set(c))
                .unwrap_or(false)
        })
        .unwrap();
    one.set(cpu).unwrap();
    sched_setaffinity(Pid::from_raw(0), &one).unwrap();
    pass(&dsh, &ws, &ten, " (all on one CPU)", false);
}

/// `dsh-mcp --listen` on loopback, one session, driven one request at a
/// time over one keep-alive connection.
struct HttpServer {
    child: Child,
    agent: ureq::Agent,
    url: String,
    session: String,
    next: u64,
}

impl HttpServer {
    const TOKEN: &str = "bench-token-0123456789abcdef";

    fn start(program: &Path, ws: &Path) -> HttpServer {
        let mut child = Command::new(program)
            .args(["--listen", "127.0.0.1:0"])
            .env("DSH_TOKEN", HttpServer::TOKEN)
            .arg("--workspace")
            .arg(ws)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let url = loop {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "dsh-mcp ended");
            if let Some(url) = line.trim().strip_prefix("dsh-mcp: listening on ") {
                break url.to_owned();
            }
        };
        // The rest of its log is read and dropped, so it never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut server = HttpServer {
            child,
            agent,
            url,
            session: String::new(),
            next: 0,
        };
        let init = server.post(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "0"}}}));
        assert!(init.get("result").is_some(), "{init}");
        server.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    /// POSTs `message`; the last JSON-RPC message of the answer (JSON or
    /// server-sent events), `null` for a notification's empty 202.
    fn post(&mut self, message: &Value) -> Value {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Authorization", format!("Bearer {}", HttpServer::TOKEN))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18");
        if !self.session.is_empty() {
            request = request.header("Mcp-Session-Id", &self.session);
        }
        let mut response = request.send(serde_json::to_vec(message).unwrap()).unwrap();
        if let Some(id) = response.headers().get("mcp-session-id") {
            self.session = id.to_str().unwrap().to_owned();
        }
        let body = response.body_mut().read_to_string().unwrap();
        let data = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|d| !d.is_empty())
            .unwrap_or(body.trim());
        if data.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(data).unwrap()
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        self.post(&json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}))
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ping`, `bash true` and a 10-line `view` over HTTP next to stdio, one
/// request of each in turn.
fn http_pass(dsh: &Path, ws: &Path, ten: &Path) {
    let mut stdio = Server::start(dsh, &["--workspace", ws.to_str().unwrap()]);
    let mut http = HttpServer::start(dsh, ws);
    let bash_true = json!({"name": "bash", "arguments": {"command": "true"}});
    let view = json!({"name": "str_replace_editor",
                      "arguments": {"command": "view", "path": ten.to_str().unwrap()}});
    for (what, method, params, n) in [
        ("ping", "ping", json!({}), 2000),
        ("tools/call bash `true`", "tools/call", bash_true, 1000),
        ("tools/call view of 10 lines", "tools/call", view, 2000),
    ] {
        let (over_stdio, over_http) = benches::median_pair(
            n,
            n / 10,
            || {
                let answer = stdio.request(method, params.clone());
                assert!(answer.get("result").is_some(), "{answer}");
            },
            || {
                let answer = http.request(method, params.clone());
                assert!(answer.get("result").is_some(), "{answer}");
            },
        );
        println!(
            "MCP {what} over HTTP (one session, keep-alive): {:.1} µs, over stdio {:.1} µs: {:+.1} µs",
            us(over_http),
            us(over_stdio),
            us(over_http) - us(over_stdio)
        );
    }
}

/// The medians of `n` `tools/call` requests of `call` to `dsh` and to the
/// Python server `py`, in turn (after `n / 10` of each untimed): `(dsh, py)`.
fn versus_python(
    dsh: &mut Server,
    py: &mut Server,
    call: &Value,
    n: usize,
) -> (Duration, Duration) {
    let (py_time, dsh_time) = benches::median_pair(
        n,
        n / 10,
        || {
            let answer = py.request("tools/call", call.clone());
            assert_eq!(answer["result"]["isError"], false, "{answer}");
        },
        || {
            let answer = dsh.request("tools/call", call.clone());
            assert_eq!(answer["result"]["isError"], false, "{answer}");
        },
    );
    (dsh_time, py_time)
}

/// One pass of the figures; every thread and process it starts inherits the
/// calling thread's CPU affinity.
fn pass(dsh: &Path, ws: &Path, ten: &Path, label: &str, throughput: bool) {
    let ten = ten.to_str().unwrap().to_owned();
    let ws_arg = ws.to_str().unwrap();
    let mut floor = Server::start(Path::new(env!("CARGO_BIN_EXE_line-echo")), &[]);
    let mut server = Server::start(dsh, &["--workspace", ws_arg]);

    let (floor_ping, dsh_ping) = benches::median_pair(
        2000,
        200,
        || {
            floor.request("ping", json!({}));
        },
        || {
            let answer = server.request("ping", json!({}));
            assert_eq!(answer["result"], json!({}));
        },
    );
    println!(
        "MCP ping{label}: dsh-mcp {:.1} µs, line-echo floor {:.1} µs: {:.2}x (goal <= 4x)",
        us(dsh_ping),
        us(floor_ping),
        dsh_ping.as_secs_f64() / floor_ping.as_secs_f64()
    );
    let dsh_list = median(1000, || {
        server.request("tools/list", json!({}));
    });
    println!("MCP tools/list{label}: dsh-mcp {:.1} µs", us(dsh_list));

    let rt = tokio::runtime::Runtime::new().unwrap();
    let pool = ShellPool::new(ShellConfig::new(ws)).unwrap();
    let editor = Editor::new(LocalFs::new());
    let bash_true = json!({"command": "true"});
    let view = json!({"command": "view", "path": ten});

    // The view next to a plain Python MCP server answering the same view
    // (`benches/py/view_server.py`), one request each in turn: `dsh-mcp`
    // unconfined, then confined (`--sandbox workspace-write`: the view
    // through the sandbox's confined reader) next to the same plain read.
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("py/view_server.py");
    let mut py = Server::start(Path::new("python3"), &[python.to_str().unwrap()]);
    let mut confined = Server::start(
        dsh,
        &["--workspace", ws_arg, "--sandbox", "workspace-write"],
    );
    let call = json!({"name": "str_replace_editor", "arguments": view});
    for (dsh_server, how) in [(&mut server, ""), (&mut confined, ", confined")] {
        let (dsh_view, py_view) = versus_python(dsh_server, &mut py, &call, 2000);
        println!(
            "MCP str_replace_editor view of 10 lines{how}{label}: dsh-mcp {:.1} µs, Python MCP server {:.1} µs: {:.2}x (goal <= 1x)",
            us(dsh_view),
            us(py_view),
            dsh_view.as_secs_f64() / py_view.as_secs_f64()
        );
    }
    drop((py, confined));

    // `bash true` next to a plain Python MCP server with one bash on a PTY
    // and a marker line (`benches/py/bash_server.py`), in turn.
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("py/bash_server.py");
    let mut py = Server::start(Path::new("python3"), &[python.to_str().unwrap()]);
    let call = json!({"name": "bash", "arguments": bash_true});
    let (dsh_true, py_true) = versus_python(&mut server, &mut py, &call, 1000);
    println!(
        "MCP bash `true`{label}: dsh-mcp {:.1} µs, Python MCP server with a marker line {:.1} µs: {:.2}x (goal <= 0.5x)",
        us(dsh_true),
        us(py_true),
        dsh_true.as_secs_f64() / py_true.as_secs_f64()
    );
    drop(py);
    // One `tools/call` through the binary next to the same call in process.
    let mut compare = |tool: &str,
                       what: &str,
                       lib: &str,
                       n: usize,
                       args: &Value,
                       in_process: &mut dyn FnMut()| {
        let (lib_time, mcp_time) = benches::median_pair(n, n / 10, in_process, || {
            let answer = server.request("tools/call", json!({"name": tool, "arguments": args}));
            assert_eq!(answer["result"]["isError"], false, "{answer}");
        });
        println!(
            "MCP tools/call {what}{label}: dsh-mcp {:.1} µs, in-process {lib} {:.1} µs: {:+.1} µs (goal <= +50 µs)",
            us(mcp_time),
            us(lib_time),
            us(mcp_time) - us(lib_time)
        );
    };
    compare(
        "bash",
        "bash `true`",
        "ShellPool::execute",
        1000,
        &bash_true,
        &mut || {
            rt.block_on(pool.execute("bench", &bash_true)).unwrap();
        },
    );
    compare(
        "str_replace_editor",
        "view of a 10-line file",
        "Editor::execute",
        2000,
        &view,
        &mut || {
            rt.block_on(editor.execute(&view)).unwrap();
        },
    );

    if throughput {
        const CALLS: u32 = 10_000;
        let start = Instant::now();
        for _ in 0..CALLS {
            server.request(
                "tools/call",
                json!({"name": "bash", "arguments": bash_true}),
            );
        }
        let through_mcp = f64::from(CALLS) / start.elapsed().as_secs_f64();
        let start = Instant::now();
        for _ in 0..CALLS {
            rt.block_on(pool.execute("bench", &bash_true)).unwrap();
        }
        let in_process = f64::from(CALLS) / start.elapsed().as_secs_f64();
        println!(
            "{CALLS} sequential bash `true` calls: {through_mcp:.0} calls/s through dsh-mcp, {in_process:.0} calls/s in process"
        );
    }
    rt.block_on(pool.close_all());
}

criterion_group!(benches, mcp);
criterion_main!(benches);
