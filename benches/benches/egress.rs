//! What the egress proxy costs a request: Python's `http.client` making one
//! request per connection to a server on the host's loopback, from inside a
//! confined shell through the proxy (`--allow-domain`), against the same
//! client run on the host straight to the server (the baseline, same run).
//! Each sample is a loop of requests timed by the client itself, so the
//! shell's call and Python's start are not counted.
//!
//! ```text
//! cargo bench -p benches --bench egress
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_sandbox::{Resolve, SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell};
use dsh_shell_persistent::ShellConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `files.example.test` is the host's loopback.
#[derive(Debug)]
struct Loopback;

#[async_trait::async_trait]
impl Resolve for Loopback {
    async fn resolve(&self, _host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)])
    }
}

/// The client: `N` requests, each on a connection of its own, to
/// `HOST:PORT` naming `URL`; prints the seconds they took.
const CLIENT: &str = r#"
import http.client, sys, time
n, host, port, url = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
start = time.perf_counter()
for _ in range(n):
    c = http.client.HTTPConnection(host, port)
    c.request("GET", url, headers={"Connection": "close"})
    r = c.getresponse()
    assert r.status == 200, r.status
    r.read()
    c.close()
print(time.perf_counter() - start)
"#;

/// A server answering every request with 2 bytes, then closing.
async fn server(listener: tokio::net::TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .await;
        });
    }
}

fn seconds(out: &str) -> Duration {
    let line = out
        .lines()
        .find_map(|l| l.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no time in {out:?}"));
    Duration::from_secs_f64(line)
}

fn egress_cost(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(server(listener));
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let client = dir.path().join("client.py");
    std::fs::write(&client, CLIENT).unwrap();
    let python = "/usr/bin/python3";

    let mut group = c.benchmark_group("egress_request");
    group.measurement_time(Duration::from_secs(10));
    group.sample_size(20);
    group.bench_function("direct_on_loopback_baseline", |b| {
        b.iter_custom(|iters| {
            let out = std::process::Command::new(python)
                .arg(&client)
                .args([&iters.to_string(), "127.0.0.1", &port.to_string(), "/"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            seconds(&String::from_utf8_lossy(&out.stdout))
        })
    });

    let config = SandboxConfig::new(
        SandboxPolicy::default()
            .mode(SandboxMode::WorkspaceWrite)
            .allow_domains(vec![format!("files.example.test:{port}")]),
        ShellConfig::new(dir.path()).timeout(Duration::from_secs(600)),
    )
    .egress_resolver(Some(Arc::new(Loopback)));
    let shell = rt.block_on(async { SandboxedShell::new(config) }).unwrap();
    let url = format!("http://files.example.test:{port}/");
    group.bench_function("through_the_proxy", |b| {
        b.iter_custom(|iters| {
            let command = format!("{python} {} {iters} 127.0.0.1 3128 {url}", client.display());
            let out = rt
                .block_on(shell.execute("bench", &serde_json::json!({ "command": command })))
                .unwrap();
            seconds(&out)
        })
    });
    group.finish();
}

criterion_group!(benches, egress_cost);
criterion_main!(benches);
