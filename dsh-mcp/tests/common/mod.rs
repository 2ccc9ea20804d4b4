//! The harness the `dsh-mcp` suites share: the real binary driven over
//! stdio, as an MCP client would.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

pub(crate) const BOUND: Duration = Duration::from_secs(60);

pub(crate) struct Client {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) lines: Lines<BufReader<ChildStdout>>,
    pub(crate) elicitations: usize,
}

/// The real `dsh-mcp` on `workspace` with `extra` flags, its standard input
/// and output piped, its environment changed as [`Client::start_env`] says.
pub(crate) fn server(workspace: &Path, extra: &[&str], env: &[(&str, Option<&str>)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"));
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    command
        .arg("--workspace")
        .arg(workspace)
        .args(extra)
        .env_remove("DSH_HOME")
        // A session's own `cargo` builds in its own crate's `target`,
        // never in (and locked by) the build running these tests.
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

impl Client {
    pub(crate) async fn start(workspace: &Path, extra: &[&str]) -> Client {
        Client::start_with(workspace, extra, json!({})).await
    }

    pub(crate) async fn start_with(
        workspace: &Path,
        extra: &[&str],
        capabilities: Value,
    ) -> Client {
        Client::spawn(workspace, extra, capabilities, &[]).await
    }

    /// A server started with its environment changed: each `(name, Some(value))`
    /// set, each `(name, None)` removed (a host's choice the test must not
    /// inherit).
    pub(crate) async fn start_env(
        workspace: &Path,
        extra: &[&str],
        env: &[(&str, Option<&str>)],
    ) -> Client {
        Client::spawn(workspace, extra, json!({}), env).await
    }

    async fn spawn(
        workspace: &Path,
        extra: &[&str],
        capabilities: Value,
        env: &[(&str, Option<&str>)],
    ) -> Client {
        let mut child = server(workspace, extra, env);
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut client = Client {
            child,
            stdin,
            lines,
            elicitations: 0,
        };
        let init = client
            .request(
                1,
                "initialize",
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities,
                    "clientInfo": {"name": "test-client", "version": "0"}
                }),
            )
            .await;
        assert_eq!(init["result"]["serverInfo"]["name"], "dsh-mcp", "{init}");
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    pub(crate) async fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    pub(crate) async fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string()).await;
    }

    /// The next message whose id is `id`.
    pub(crate) async fn response(&mut self, id: Value) -> Value {
        self.response_answering(id, None).await
    }

    /// The next message whose id is `id`, answering elicitation requests on
    /// the way (accepting with `approve`, or declining when `None`).
    pub(crate) async fn response_answering(&mut self, id: Value, approve: Option<bool>) -> Value {
        tokio::time::timeout(BOUND, async {
            loop {
                let line = self
                    .lines
                    .next_line()
                    .await
                    .unwrap()
                    .expect("server closed stdout");
                let message: Value = serde_json::from_str(&line).unwrap();
                if message["method"] == "elicitation/create" {
                    self.elicitations += 1;
                    let result = match approve {
                        Some(a) => json!({"action": "accept", "content": {"approve": a}}),
                        None => json!({"action": "decline"}),
                    };
                    self.send(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
                        .await;
                    continue;
                }
                if message["id"] == id && message.get("method").is_none() {
                    return message;
                }
            }
        })
        .await
        .expect("no response")
    }

    pub(crate) async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.response(json!(id)).await
    }

    /// `(text, is_error)` of a tool call.
    pub(crate) async fn call(&mut self, id: u64, tool: &str, arguments: Value) -> (String, bool) {
        let r = self
            .request(
                id,
                "tools/call",
                json!({"name": tool, "arguments": arguments}),
            )
            .await;
        let result = &r["result"];
        assert!(
            result.is_object(),
            "tools/call must not be a protocol error: {r}"
        );
        let content = result["content"].as_array().unwrap();
        assert_eq!(content.len(), 1, "{r}");
        assert_eq!(content[0]["type"], "text");
        (
            content[0]["text"].as_str().unwrap().to_owned(),
            result["isError"].as_bool().unwrap_or(false),
        )
    }

    pub(crate) async fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take()); // EOF
        tokio::time::timeout(BOUND, self.child.wait())
            .await
            .expect("server did not exit")
            .unwrap()
    }
}

pub(crate) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
}

pub(crate) async fn gone(pid: i32) -> bool {
    for _ in 0..500 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A directory for test files that a confined shell can see wherever the
/// checkout lives: the shell's `/tmp` is private, so not under `/tmp`.
pub(crate) fn visible_tmp() -> std::path::PathBuf {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    if !target.starts_with("/tmp") {
        return target.to_owned();
    }
    let var_tmp = std::path::PathBuf::from("/var/tmp");
    assert!(
        var_tmp.is_dir(),
        "the checkout is under /tmp, which confined shells do not see, and /var/tmp is missing"
    );
    var_tmp
}

/// Polls `check` until it gives a value, for at most a minute (a generous
/// bound on an event, not a measure of speed); panics naming `what` when
/// the bound passes.
#[allow(dead_code)]
pub(crate) async fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let bound = Duration::from_secs(60);
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not come within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
