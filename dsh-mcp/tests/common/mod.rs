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
        Client::initialized(server(workspace, extra, env), capabilities).await
    }

    /// The client of a server already started (its stdin and stdout
    /// piped), once `initialize` and `initialized` went through.
    pub(crate) async fn initialized(mut child: Child, capabilities: Value) -> Client {
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

/// A pidfd of process `pid`, if it is still there.
pub(crate) fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    // SAFETY: pidfd_open takes no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a descriptor pidfd_open just returned, owned by nothing else.
    (fd >= 0).then(|| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// Whether process `pid` ends (or is a zombie no one reaps) within
/// [`BOUND`]: its pidfd becomes readable when it exits, an event rather than
/// a poll.
pub(crate) async fn gone(pid: i32) -> bool {
    let Some(fd) = pidfd(pid) else {
        return true;
    };
    // SAFETY: an owned descriptor: open, and the same one, for the
    // `AsyncFd`'s whole life.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }
    .unwrap();
    tokio::time::timeout(BOUND, fd.readable()).await.is_ok()
}

/// A named pipe a command writes a line to when something happened (`echo
/// started > $FIFO`): [`Fifo::line`] waits for that line, an event rather
/// than a poll. This process holds it open for reading and for writing, so
/// a read waits for a writer's line instead of finding the pipe's end
/// before any writer opened it.
pub(crate) struct Fifo {
    pub(crate) path: std::path::PathBuf,
    lines: Lines<BufReader<tokio::net::unix::pipe::Receiver>>,
}

impl Fifo {
    /// A FIFO named `name` in `dir`.
    pub(crate) fn new(dir: &Path, name: &str) -> Fifo {
        use std::os::unix::ffi::OsStrExt;
        let path = dir.join(name);
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
        let receiver = tokio::net::unix::pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(&path)
            .unwrap();
        Fifo {
            path,
            lines: BufReader::new(receiver).lines(),
        }
    }

    /// The next line written to the FIFO, within [`BOUND`].
    pub(crate) async fn line(&mut self) -> String {
        tokio::time::timeout(BOUND, self.lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "nothing written to {} within {BOUND:?}",
                    self.path.display()
                )
            })
            .unwrap()
            .unwrap()
    }
}

/// An inotify instance watching directory `dir` for anything written,
/// made, moved or removed in it.
struct DirWatch(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

impl DirWatch {
    fn new(dir: &Path) -> DirWatch {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: inotify_init1 takes no pointers.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(
            fd >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a descriptor inotify_init1 just returned.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        let mask = libc::IN_MODIFY
            | libc::IN_CLOSE_WRITE
            | libc::IN_CREATE
            | libc::IN_MOVED_TO
            | libc::IN_MOVED_FROM
            | libc::IN_DELETE
            | libc::IN_ATTRIB;
        // SAFETY: our inotify descriptor and a valid path.
        let wd = unsafe {
            libc::inotify_add_watch(std::os::fd::AsRawFd::as_raw_fd(&fd), c.as_ptr(), mask)
        };
        assert!(
            wd >= 0,
            "inotify_add_watch {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
        // SAFETY: an owned descriptor: open, and the same one, for the
        // `AsyncFd`'s whole life.
        DirWatch(unsafe { tokio::io::unix::AsyncFd::register(fd) }.unwrap())
    }

    /// Waits for the next events and drops them.
    async fn changed(&self) {
        let mut guard = self.0.readable().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = guard.try_io(|fd| {
            // SAFETY: reading into a buffer of the given size.
            let n = unsafe {
                libc::read(
                    std::os::fd::AsRawFd::as_raw_fd(fd.get_ref()),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
    }
}

/// Waits until `check` gives a value, looking again each time something in
/// directory `dir` changes (inotify: an event, not a poll), for at most a
/// minute (a generous bound on an event, not a measure of speed); panics
/// naming `what` when the bound passes.
pub(crate) async fn until_in<T>(dir: &Path, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let watch = DirWatch::new(dir);
    let bound = Duration::from_secs(60);
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if let Some(value) = check() {
            return value;
        }
        tokio::time::timeout_at(deadline, watch.changed())
            .await
            .unwrap_or_else(|_| panic!("{what} did not come within {bound:?}"));
    }
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

/// The last JSON-RPC message of an SSE or JSON body (a Streamable HTTP
/// answer).
pub(crate) fn last_message(body: &str) -> Value {
    let data = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|d| !d.is_empty())
        .unwrap_or(body.trim());
    serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {body:?}"))
}
