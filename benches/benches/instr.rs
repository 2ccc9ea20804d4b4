//! Instructions per call, counted by callgrind (reproducible on a shared
//! machine, where wall-clock figures move by 2x from run to run), each next
//! to its floor counted the same way in the same run:
//!
//! * in bash, per `echo hi` call through `dsh-shell-persistent`, next to the
//!   raw marker line (`echo hi; echo __M_<n>_$?__` typed into bash on a PTY);
//! * in `dsh-mcp`, per request (`ping`, `tools/call bash true`), next to the
//!   pipe floor (`line-echo`, a minimal line-echo JSON-RPC server).
//!
//! Each figure is a difference: `K2` calls less `K1` calls, divided by
//! `K2 - K1`, so start and exit cancel out.
//!
//! ```text
//! cargo bench -p benches --bench instr          # needs valgrind
//! ```
//! (`DSH_INSTR=bash` counts only bash's share, `DSH_INSTR=server` only the
//! server's; `DSH_INSTR_CMD=true` makes
//! the calls `true` instead of `echo hi`, on both sides; `DSH_INSTR_KEEP=1`
//! keeps the callgrind files for `callgrind_annotate`; `DSH_INSTR_MCP=<path>`
//! counts that `dsh-mcp` binary instead of this tree's release build, for an
//! A/B of two commits in one session.)
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use benches::RawPty;
use dsh_shell_persistent::{Shell, ShellConfig};

const K1: u64 = 20;
const K2: u64 = 120;

/// `valgrind --tool=callgrind` writing one file per process as `dir/tag.<pid>.out`.
fn callgrind(dir: &Path, tag: &str) -> Vec<String> {
    vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        "--quiet".into(),
        format!("--callgrind-out-file={}/{tag}.%p.out", dir.display()),
    ]
}

/// The instructions counted in every file of `dir` named `tag.*.out`.
fn counted(dir: &Path, tag: &str) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with(&format!("{tag}.")) || !name.ends_with(".out") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let line = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("summary:")
                    .or_else(|| l.strip_prefix("totals:"))
            })
            .unwrap_or_else(|| panic!("no totals in {}", path.display()));
        total += line.trim().parse::<u64>().unwrap();
    }
    assert!(total > 0, "callgrind wrote nothing for {tag}");
    total
}

/// Per call: `(count(K2) - count(K1)) / (K2 - K1)`.
fn per_call(dir: &Path, name: &str, mut run: impl FnMut(u64, &str)) -> u64 {
    let (a, b) = (format!("{name}{K1}"), format!("{name}{K2}"));
    run(K1, &a);
    run(K2, &b);
    (counted(dir, &b) - counted(dir, &a)) / (K2 - K1)
}

/// The command of the bash share's calls and what it prints.
fn bash_command() -> (&'static str, &'static str) {
    match std::env::var("DSH_INSTR_CMD").as_deref() {
        Ok("true") => ("true", ""),
        _ => ("echo hi", "hi"),
    }
}

fn bash_share(dir: &Path) -> (u64, u64) {
    let (command, prints) = bash_command();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dsh = per_call(dir, "dsh", |k, tag| {
        let mut argv = callgrind(dir, tag);
        argv.extend(["bash", "--noprofile", "--norc", "--noediting", "-i"].map(String::from));
        let config = ShellConfig::new(std::env::temp_dir())
            .argv(Some(argv))
            .start_timeout(std::time::Duration::from_secs(120));
        let mut shell = Shell::new(config).unwrap();
        rt.block_on(async {
            assert_eq!(shell.run("true").await.unwrap(), "");
            for _ in 0..k {
                assert_eq!(shell.run(command).await.unwrap(), prints);
            }
            // The shell exits by itself, so that callgrind writes its counts.
            let out = shell.run("exit").await.unwrap();
            assert!(out.contains("code 0"), "{out}");
        });
    });
    let raw = per_call(dir, "raw", |k, tag| {
        let mut pty = RawPty::spawn_under(&callgrind(dir, tag), true).unwrap();
        pty.run("true; echo __M_0_$?__\n", b"__M_0_0__").unwrap();
        for n in 1..=k {
            pty.run(
                &format!("{command}; echo __M_{n}_$?__\n"),
                format!("__M_{n}_0__").as_bytes(),
            )
            .unwrap();
        }
        pty.exit().unwrap();
    });
    (dsh, raw)
}

/// A JSON-RPC client on a server's standard input and output.
struct Client {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: BufReader<std::process::ChildStdout>,
    id: u64,
}

impl Client {
    fn start(argv: &[String]) -> Client {
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Client {
            child,
            input,
            output,
            id: 0,
        }
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.id += 1;
        let line = serde_json::json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        writeln!(self.input, "{line}").unwrap();
        self.input.flush().unwrap();
        loop {
            let mut answer = String::new();
            assert!(
                self.output.read_line(&mut answer).unwrap() > 0,
                "server ended"
            );
            let value: serde_json::Value = serde_json::from_str(&answer).unwrap();
            if value["id"] == self.id {
                return value;
            }
        }
    }

    fn finish(self) {
        drop(self.input);
        let mut child = self.child;
        child.wait().unwrap();
    }
}

fn release_binary(name: &str, package: &str) -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "-q", "-p", package, "--bin", name])
        .status()
        .unwrap();
    assert!(status.success(), "cargo build {name}");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("release").join(name)
}

/// `dsh-mcp` per request of `kind`, and `line-echo` per `ping`.
fn server_share(dir: &Path) -> Vec<(&'static str, u64)> {
    // Another build (an A/B of two commits) if `DSH_INSTR_MCP` names one.
    let mcp = std::env::var_os("DSH_INSTR_MCP")
        .map(PathBuf::from)
        .unwrap_or_else(|| release_binary("dsh-mcp", "dsh-mcp"));
    let echo = release_binary("line-echo", "benches");
    let workspace = tempfile::tempdir().unwrap();
    let call = |kind: &'static str| -> (&'static str, serde_json::Value) {
        match kind {
            "bash true" => (
                "tools/call",
                serde_json::json!({"name": "bash", "arguments": {"command": "true"}}),
            ),
            _ => ("ping", serde_json::json!({})),
        }
    };
    let mut rows = Vec::new();
    for kind in ["ping", "bash true"] {
        let figure = per_call(dir, &format!("mcp-{}", kind.replace(' ', "-")), |k, tag| {
            let mut argv = callgrind(dir, tag);
            argv.push(mcp.display().to_string());
            argv.extend(["--workspace".into(), workspace.path().display().to_string()]);
            let mut client = Client::start(&argv);
            client.request(
                "initialize",
                serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "instr", "version": "0"}}),
            );
            writeln!(
                client.input,
                r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
            )
            .unwrap();
            let (bash, args) = call("bash true");
            client.request(bash, args);
            let (method, params) = call(kind);
            for _ in 0..k {
                let answer = client.request(method, params.clone());
                assert!(answer.get("error").is_none(), "{answer}");
            }
            client.finish();
        });
        rows.push((kind, figure));
    }
    let floor = per_call(dir, "line-echo", |k, tag| {
        let mut argv = callgrind(dir, tag);
        argv.push(echo.display().to_string());
        let mut client = Client::start(&argv);
        for _ in 0..k {
            client.request("ping", serde_json::json!({}));
        }
        client.finish();
    });
    rows.push(("pipe floor (line-echo ping)", floor));
    rows
}

fn main() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!("instr: valgrind is not installed; nothing measured");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if std::env::var_os("DSH_INSTR_KEEP").is_some() {
        println!("callgrind files kept in {}", dir.path().display());
    }
    let only_server = std::env::var("DSH_INSTR").as_deref() == Ok("server");
    if !only_server {
        let (dsh, raw) = bash_share(dir.path());
        println!(
            "bash instructions per `{}` call: dsh-shell-persistent {dsh}, raw marker line {raw} ({:.1}x)",
            bash_command().0,
            dsh as f64 / raw as f64
        );
    }
    if std::env::var("DSH_INSTR").as_deref() == Ok("bash") {
        if std::env::var_os("DSH_INSTR_KEEP").is_some() {
            std::mem::forget(dir);
        }
        return;
    }
    for (kind, figure) in server_share(dir.path()) {
        println!("server instructions per {kind}: {figure}");
    }
    if std::env::var_os("DSH_INSTR_KEEP").is_some() {
        std::mem::forget(dir);
    }
}
